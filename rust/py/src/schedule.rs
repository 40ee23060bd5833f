//! The delay levels' calls of `Store` (their Python methods are at the end of this file): one
//! delivery round, loading the saved progress, the progress and the figures. Each runs with the
//! GIL released.

use std::collections::{BTreeMap, HashMap};

use pyo3::prelude::*;
use rmqstore_core::schedule::{LevelStats, ScheduleStep as CoreStep};
use rmqstore_core::MessageStore;

/// What `Store.schedule_deliver` did in one round of a delay level.
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct ScheduleStep {
    /// Messages put into their real queues.
    #[pyo3(get)]
    pub delivered: u64,
    /// Messages passed over (unreadable record, unusable REAL_TOPIC/REAL_QID, half topic).
    #[pyo3(get)]
    pub dropped: u64,
    /// The level's progress after the round (next queue offset to deliver).
    #[pyo3(get)]
    pub offset: i64,
    /// Deliver time in ms of the next message; None when the level's queue is exhausted.
    #[pyo3(get)]
    pub next_due_ms: Option<i64>,
    /// The PutMessageStatus name of a put that failed (retried by the next round), else None.
    #[pyo3(get)]
    pub status: Option<&'static str>,
}

#[pymethods]
impl ScheduleStep {
    fn __repr__(&self) -> String {
        format!(
            "ScheduleStep(delivered={}, dropped={}, offset={}, next_due_ms={}, status={})",
            self.delivered,
            self.dropped,
            self.offset,
            self.next_due_ms
                .map_or_else(|| "None".to_owned(), |d| d.to_string()),
            self.status
                .map_or_else(|| "None".to_owned(), |s| format!("'{s}'"))
        )
    }
}

impl From<CoreStep> for ScheduleStep {
    fn from(s: CoreStep) -> Self {
        ScheduleStep {
            delivered: s.delivered,
            dropped: s.dropped,
            offset: s.offset,
            next_due_ms: s.next_due_ms,
            status: s.status.map(|st| st.name()),
        }
    }
}

/// `max_msgs` as a count (a negative one delivers nothing).
pub(crate) fn deliver(
    store: &MessageStore,
    level: i32,
    max_msgs: i64,
) -> rmqstore_core::Result<CoreStep> {
    store.schedule_deliver(
        level,
        usize::try_from(max_msgs.max(0)).unwrap_or(usize::MAX),
    )
}

pub(crate) fn load(
    store: &MessageStore,
    offsets: &HashMap<i32, i64>,
    persisted_at_ms: i64,
) -> rmqstore_core::Result<BTreeMap<i32, i64>> {
    store.schedule_load(offsets, persisted_at_ms)
}

/// One row of `Store.schedule_stats`.
pub(crate) type StatsRow = (i32, i64, i64, i64, i64, Option<i64>);

pub(crate) fn stats(store: &MessageStore) -> rmqstore_core::Result<Vec<StatsRow>> {
    Ok(store
        .schedule_stats()?
        .into_iter()
        .map(|s: LevelStats| {
            (
                s.level,
                s.delay_ms,
                s.offset,
                s.max_offset,
                s.pending,
                s.oldest_due_ms,
            )
        })
        .collect())
}

/// The delay levels' methods of `Store` (`rmqstore._rmqstore.Store`).
#[pymethods]
impl crate::store::Store {
    /// Loads the delay levels' saved progress (`delayOffset.json`'s `offsetTable`, saved at
    /// `persisted_at_ms`), clamped to each level queue and moved past what was delivered after
    /// the save; returns the resulting table.
    fn schedule_load(
        &self,
        py: Python<'_>,
        offsets: HashMap<i32, i64>,
        persisted_at_ms: i64,
    ) -> PyResult<BTreeMap<i32, i64>> {
        self.run(py, |s| load(s, &offsets, persisted_at_ms))
    }

    /// One delivery round of delay level `level`: at most `max_msgs` due messages put into
    /// their real queues.
    fn schedule_deliver(
        &self,
        py: Python<'_>,
        level: i32,
        max_msgs: i64,
    ) -> PyResult<ScheduleStep> {
        self.run(py, |s| deliver(s, level, max_msgs))
            .map(Into::into)
    }

    /// Each delay level's progress: level -> next queue offset to deliver.
    fn schedule_offsets(&self, py: Python<'_>) -> PyResult<BTreeMap<i32, i64>> {
        self.run(py, |s| s.schedule_offsets())
    }

    /// Per delay level: (level, delay_ms, offset, max_offset, pending, oldest_due_ms).
    fn schedule_stats(&self, py: Python<'_>) -> PyResult<Vec<StatsRow>> {
        self.run(py, stats)
    }

    /// Delay in ms of levels 1..max (`message_delay_level`).
    fn schedule_levels(&self, py: Python<'_>) -> PyResult<Vec<i64>> {
        self.run(py, |s| Ok(s.schedule_levels()))
    }
}
