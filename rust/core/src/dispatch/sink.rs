//! Dispatch sinks (RocketMQ's `CommitLogDispatcher`): what dispatch builds from each message it
//! reads. The reput loop parses each record once and offers it to every sink of the store in
//! turn; today these are the consume queue ([`ConsumeQueueSink`], `CommitLogDispatcherBuildConsumeQueue`)
//! and the index ([`IndexSink`], `CommitLogDispatcherBuildIndex`). The schedule topic's tag
//! codes (deliver times) are the consume queue sink's; a timer sink comes as one more sink.
//!
//! A sink works in two halves so that a large backlog can be written on a second thread: `add`
//! runs on the parsing thread and queues what the message needs into the sink's batch, `apply`
//! writes a batch (on the parsing thread, or on the writing thread the batch was handed to), in
//! commitlog order.
//!
//! The list of sinks is a type, not a `Vec<Box<dyn ...>>`: [`StoreSinks`] is a tuple of sinks
//! (a tuple of sinks is a sink, as is an optional one), so each message reaches each sink
//! through a direct, inlinable call, and each sink's batch keeps its own type (consume queue
//! units, hashed index keys) without boxing or downcasting. Adding a sink means adding it to
//! [`StoreSinks`] and [`store_sinks`]; the price of this choice is that the set of sinks is fixed
//! when the crate is compiled (a sink that is configured off is an `Option` left `None`), which is
//! what the sinks RocketMQ's store registers are.

use std::sync::Arc;

use crate::error::Result;
use crate::file::mapped_file::MappedFile;
use crate::format::{sysflag, tags_code, DispatchProps, RecordView};
use crate::index::{IndexBatch, IndexService};
use crate::queue::consume_queue::ConsumeQueue;
use crate::queue::store::ConsumeQueueStore;
use crate::schedule::{DelayLevels, SCHEDULE_TOPIC};

/// One message as dispatch hands it to the sinks (RocketMQ's `DispatchRequest`). Only records
/// whose topic, queue id, queue offset and physical offset are ones a put writes get here.
pub(crate) struct Dispatched<'a> {
    /// The record, viewed in place.
    pub(crate) record: &'a RecordView<'a>,
    /// Its topic, decoded.
    pub(crate) topic: &'a str,
    /// Changes whenever a record's topic differs from the record before it (skipped ones
    /// included): a sink can keep what it looked up for a topic while this stays the same.
    pub(crate) topic_run: u64,
    /// The properties dispatch reads (TAGS, KEYS, UNIQ_KEY).
    pub(crate) props: &'a DispatchProps<'a>,
}

/// What dispatch builds from each message (`CommitLogDispatcher`).
pub(crate) trait DispatchSink: Sync {
    /// What the sink queues on the parsing thread until `apply` writes it, and what the parsing
    /// side caches from message to message. Emptied batches are reused.
    type Batch: Default + Send;
    /// What the writing side keeps from batch to batch within one dispatch pass.
    type Writer: Default;

    /// Whether writing is heavy enough that a large backlog is worth a second thread.
    fn wants_writer_thread(&self) -> bool;

    /// Queues what `message` needs (parsing thread).
    fn add(&self, message: &Dispatched<'_>, batch: &mut Self::Batch) -> Result<()>;

    /// Work left to the parsing thread before `batch` is handed to the writing thread.
    fn seal(&self, batch: &mut Self::Batch);

    /// Writes what `batch` holds and empties it (keeping its capacity).
    fn apply(&self, writer: &mut Self::Writer, batch: &mut Self::Batch) -> Result<()>;
}

/// Two sinks, each message reaching the first, then the second.
impl<A: DispatchSink, B: DispatchSink> DispatchSink for (A, B) {
    type Batch = (A::Batch, B::Batch);
    type Writer = (A::Writer, B::Writer);

    fn wants_writer_thread(&self) -> bool {
        self.0.wants_writer_thread() || self.1.wants_writer_thread()
    }

    #[inline(always)]
    fn add(&self, message: &Dispatched<'_>, batch: &mut Self::Batch) -> Result<()> {
        self.0.add(message, &mut batch.0)?;
        self.1.add(message, &mut batch.1)
    }

    fn seal(&self, batch: &mut Self::Batch) {
        self.0.seal(&mut batch.0);
        self.1.seal(&mut batch.1);
    }

    fn apply(&self, writer: &mut Self::Writer, batch: &mut Self::Batch) -> Result<()> {
        self.0.apply(&mut writer.0, &mut batch.0)?;
        self.1.apply(&mut writer.1, &mut batch.1)
    }
}

/// A sink that may be off (the index when `message_index_enable` is false).
impl<S: DispatchSink> DispatchSink for Option<S> {
    type Batch = S::Batch;
    type Writer = S::Writer;

    fn wants_writer_thread(&self) -> bool {
        self.as_ref().is_some_and(S::wants_writer_thread)
    }

    #[inline(always)]
    fn add(&self, message: &Dispatched<'_>, batch: &mut Self::Batch) -> Result<()> {
        match self {
            Some(sink) => sink.add(message, batch),
            None => Ok(()),
        }
    }

    fn seal(&self, batch: &mut Self::Batch) {
        if let Some(sink) = self {
            sink.seal(batch);
        }
    }

    fn apply(&self, writer: &mut Self::Writer, batch: &mut Self::Batch) -> Result<()> {
        match self {
            Some(sink) => sink.apply(writer, batch),
            None => Ok(()),
        }
    }
}

/// The sinks of a store, in the order each message reaches them.
pub(crate) type StoreSinks = (ConsumeQueueSink, Option<IndexSink>);

/// The sinks of a store with these consume queues and (if enabled) index.
pub(crate) fn store_sinks(
    cqs: &Arc<ConsumeQueueStore>,
    index: Option<&Arc<IndexService>>,
    levels: &Arc<DelayLevels>,
) -> StoreSinks {
    (
        ConsumeQueueSink {
            cqs: cqs.clone(),
            levels: levels.clone(),
        },
        index.map(|index| IndexSink {
            index: index.clone(),
        }),
    )
}

/// Builds the consume queues (`CommitLogDispatcherBuildConsumeQueue`): a unit for each plain or
/// committed transaction message (PREPARED and ROLLBACK records consume no queue offset). The
/// tags code is the TAGS hash, except in the schedule topic, whose units hold the deliver time
/// of a record with a delay level (`checkMessageAndReturnSize`,
/// [`crate::schedule::record_deliver_time`]).
pub(crate) struct ConsumeQueueSink {
    cqs: Arc<ConsumeQueueStore>,
    levels: Arc<DelayLevels>,
}

/// Consume queue units of dispatched messages waiting to be written, in commitlog order,
/// grouped in runs of one queue (the queue is looked up once per run).
#[derive(Default)]
pub(crate) struct CqBatch {
    /// Each run's queue and the end of its units in `units`.
    runs: Vec<(Arc<ConsumeQueue>, usize)>,
    /// Phy offset, record size, tags code, queue offset.
    units: Vec<(i64, i32, i64, i64)>,
    /// The topic run and queue id of the last run.
    run: Option<(u64, i32)>,
    /// The last run is of the schedule topic (the topic is compared once per run).
    schedule_run: bool,
    /// The last run's topic was deleted: its records below this offset are passed over
    /// (`i64::MIN` when it has no tombstone; looked up once per run).
    floor: i64,
    /// The last run's queue is in `runs`.
    run_open: bool,
    /// The last TAGS value and its code (tags repeat from message to message).
    last_tags: Vec<u8>,
    last_tags_code: i64,
}

impl CqBatch {
    fn tags_code(&mut self, tags: Option<&str>) -> i64 {
        let Some(t) = tags else { return 0 };
        if t.as_bytes() != self.last_tags.as_slice() {
            self.last_tags_code = tags_code(Some(t));
            self.last_tags.clear();
            self.last_tags.extend_from_slice(t.as_bytes());
        }
        self.last_tags_code
    }
}

impl DispatchSink for ConsumeQueueSink {
    type Batch = CqBatch;
    /// The queue last written and its tail segment, kept between runs and batches.
    type Writer = Option<(Arc<ConsumeQueue>, Option<Arc<MappedFile>>)>;

    fn wants_writer_thread(&self) -> bool {
        false
    }

    #[inline(always)]
    fn add(&self, message: &Dispatched<'_>, cq: &mut CqBatch) -> Result<()> {
        let d = message.record;
        let tx = d.transaction_type();
        if tx != sysflag::TRANSACTION_NOT_TYPE && tx != sysflag::TRANSACTION_COMMIT_TYPE {
            return Ok(());
        }
        let run = Some((message.topic_run, d.queue_id));
        if cq.run != run {
            cq.run = run;
            cq.schedule_run = message.topic == SCHEDULE_TOPIC;
            cq.floor = self.cqs.tombstones().floor(message.topic);
            cq.run_open = false;
        }
        if d.physical_offset < cq.floor {
            // A record of a topic deleted after it was stored (see `queue::tombstones`).
            return Ok(());
        }
        if !cq.run_open || cq.runs.is_empty() {
            cq.run_open = true;
            cq.runs
                .push((self.cqs.find_or_create(message.topic, d.queue_id)?, 0));
        }
        let mut code = cq.tags_code(message.props.tags);
        if cq.schedule_run {
            if let Some(at) = crate::schedule::record_deliver_time(&self.levels, d) {
                code = at;
            }
        }
        cq.units
            .push((d.physical_offset, d.total_size, code, d.queue_offset));
        if let Some(run) = cq.runs.last_mut() {
            run.1 = cq.units.len();
        }
        Ok(())
    }

    fn seal(&self, _batch: &mut CqBatch) {}

    fn apply(
        &self,
        tail: &mut Option<(Arc<ConsumeQueue>, Option<Arc<MappedFile>>)>,
        batch: &mut CqBatch,
    ) -> Result<()> {
        let mut start = 0;
        for (cq, end) in batch.runs.drain(..) {
            if !tail.as_ref().is_some_and(|(t, _)| Arc::ptr_eq(t, &cq)) {
                *tail = Some((cq, None));
            }
            if let Some((cq, tail)) = tail.as_mut() {
                for &(phy, size, tags, queue_offset) in &batch.units[start..end] {
                    cq.put_cached(tail, phy, size, tags, queue_offset)?;
                }
            }
            start = end;
        }
        batch.units.clear();
        Ok(())
    }
}

/// Builds the index files (`CommitLogDispatcherBuildIndex`): the KEYS and UNIQ_KEY of each
/// message, and its TAGS when the index holds tags (RocketMQ 5.4+); ROLLBACK messages are not
/// indexed (the index decides).
pub(crate) struct IndexSink {
    index: Arc<IndexService>,
}

impl DispatchSink for IndexSink {
    type Batch = IndexBatch;
    type Writer = ();

    fn wants_writer_thread(&self) -> bool {
        true
    }

    #[inline(always)]
    fn add(&self, message: &Dispatched<'_>, batch: &mut IndexBatch) -> Result<()> {
        let d = message.record;
        let props = message.props;
        batch.add(
            message.topic,
            props.keys,
            props.uniq_key,
            props.tags.filter(|_| self.index.index_tags()),
            d.physical_offset,
            d.store_timestamp,
            d.sys_flag,
        );
        Ok(())
    }

    /// Hashes the keys, so that the writing thread only puts them into the index.
    fn seal(&self, batch: &mut IndexBatch) {
        batch.hash_pending();
    }

    fn apply(&self, _: &mut (), batch: &mut IndexBatch) -> Result<()> {
        self.index.build_batch(batch)
    }
}
