//! The store's side of the delay levels ([`crate::schedule`]): each level's progress, the
//! delivery round through the put path, loading the saved progress with crash recovery, and
//! the figures.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{hooks, MessageStore, Open};
use crate::commitlog::AppendResult;
use crate::error::{Result, StoreError};
use crate::format::Message;
use crate::queue::consume_queue::ConsumeQueue;
use crate::schedule::deliver::{deliver_round, TimeUp};
use crate::schedule::order::java_map_order;
use crate::schedule::recover::advance_past_copies;
use crate::schedule::{DelayLevels, LevelStats, ScheduleStep, SCHEDULE_TOPIC};
use crate::util::now_millis;

/// Each level's progress: the next queue offset of its schedule queue to deliver.
pub(crate) struct ScheduleProgress {
    pub(crate) levels: Arc<DelayLevels>,
    /// Index = level - 1. A level's lock is held for its whole round: one deliverer per level.
    offsets: Vec<Mutex<i64>>,
    /// Offsets of levels above the table's maximum that the loaded table held: kept and given
    /// back, as RocketMQ keeps them in its `offsetTable` and saves them again.
    others: Mutex<BTreeMap<i32, i64>>,
}

impl ScheduleProgress {
    pub(crate) fn new(levels: Arc<DelayLevels>) -> ScheduleProgress {
        let offsets = (0..levels.max_level()).map(|_| Mutex::new(0)).collect();
        ScheduleProgress {
            levels,
            offsets,
            others: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self, level: i32) -> MutexGuard<'_, i64> {
        self.offsets[(level - 1) as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

impl MessageStore {
    fn check_level(&self, level: i32) -> Result<()> {
        let max = self.schedule.levels.max_level();
        if level < 1 || level > max {
            return Err(StoreError::InvalidArgument(format!(
                "delay level {level} is not one of the levels 1..={max} of message_delay_level"
            )));
        }
        Ok(())
    }

    /// The level's schedule queue, if it exists.
    fn schedule_queue(o: &Open, level: i32) -> Option<Arc<ConsumeQueue>> {
        o.cqs.find(SCHEDULE_TOPIC, level - 1)
    }

    /// Delay in ms of levels 1..=max (`message_delay_level`).
    pub fn schedule_levels(&self) -> Vec<i64> {
        self.schedule.levels.delays().to_vec()
    }

    /// One delivery round of `level` (see [`crate::schedule`]): from the level's progress, puts
    /// each due message (at most `max_msgs`) into its real topic and queue through the put path
    /// (hooks included) and moves the progress past it; stops at the first message not yet due,
    /// at the queue's end, or at a failed put (retried by the next round).
    pub fn schedule_deliver(&self, level: i32, max_msgs: usize) -> Result<ScheduleStep> {
        self.schedule_deliver_at(level, max_msgs, now_millis)
    }

    /// [`MessageStore::schedule_deliver`] with `now` as the clock (tests and benchmarks: a
    /// clock ahead makes a backlog due at once).
    pub fn schedule_deliver_at(
        &self,
        level: i32,
        max_msgs: usize,
        now: impl Fn() -> i64,
    ) -> Result<ScheduleStep> {
        self.writable("schedule_deliver")?;
        self.check_level(level)?;
        self.with_open(|o| {
            let mut offset = self.schedule.lock(level);
            let cq = Self::schedule_queue(o, level);
            Ok(deliver_round(
                &self.schedule.levels,
                &o.commitlog,
                cq.as_deref(),
                level,
                &mut offset,
                max_msgs,
                now,
                |t| self.put_time_up(o, t),
            ))
        })?
    }

    /// Puts a message the timer delivers (or rolls) as [`Self::put_time_up`] puts a delay-level
    /// one: the hooks see `t.msg`, the record keeps `t.stored_props` unless a hook changes it.
    pub(crate) fn put_delivered(&self, t: TimeUp<'_>) -> Result<AppendResult> {
        self.writable("put_delivered")?;
        self.with_open(|o| self.put_time_up(o, t))
    }

    /// Puts a delivered message: the hooks see it as RocketMQ's re-put does (no DELAY, WAIT
    /// false); when none changes it, the record keeps the original's properties string.
    pub(super) fn put_time_up(&self, o: &Open, t: TimeUp<'_>) -> AppendResult {
        let TimeUp {
            mut msg,
            body,
            stored_props,
        } = t;
        if self.put_hooks.iter().any(|h| h.applies_to(&msg)) {
            msg.body = body.to_vec();
            let before: Message = msg.clone();
            if let Some(refused) = hooks::run(&self.put_hooks, &mut msg, |h, m| h.before_put(m)) {
                return AppendResult::failed(refused);
            }
            if !same_message(&before, &msg) {
                // A hook that changes the message renders its properties map again (as
                // RocketMQ's transforming hooks call `setPropertiesString`): the cleared map,
                // in the map's order.
                msg.properties =
                    java_map_order(std::mem::take(&mut msg.properties), |p| p.0.as_str());
                return o.commitlog.put_message(&msg);
            }
        }
        o.commitlog
            .put_message_as(&msg, body, &stored_props, Some("false"))
    }

    /// Sets each level's progress from a saved table (`delayOffset.json`'s `offsetTable`),
    /// clamped to the level queue's `[min, max]` (a missing level starts at the minimum), then
    /// moves each level past the messages whose copies were delivered after the table was
    /// saved at `persisted_at_ms` (0: unknown; the scan then starts at the oldest pending
    /// message). See [`crate::schedule`] for why no message is lost or delivered twice. Returns
    /// the resulting table (levels above the maximum kept as given).
    pub fn schedule_load(
        &self,
        offsets: &HashMap<i32, i64>,
        persisted_at_ms: i64,
    ) -> Result<BTreeMap<i32, i64>> {
        self.writable("schedule_load")?;
        self.with_open(|o| {
            let max = self.schedule.levels.max_level();
            let mut guards: Vec<MutexGuard<'_, i64>> = (1..=max).map(|l| self.schedule.lock(l)).collect();
            let queues: Vec<Option<Arc<ConsumeQueue>>> =
                (1..=max).map(|l| Self::schedule_queue(o, l)).collect();
            let mut progress: Vec<i64> = Vec::with_capacity(max as usize);
            for level in 1..=max {
                let (min, top) = queues[(level - 1) as usize]
                    .as_ref()
                    .map_or((0, 0), |cq| (cq.min_offset(), cq.max_offset()));
                let saved = offsets.get(&level).copied();
                let v = saved.unwrap_or(min).clamp(min, top.max(min));
                if saved.is_some_and(|s| s != v) {
                    log::error!(
                        target: "rmqstore.schedule",
                        "delay level {level}: saved offset {} is outside its queue's [{min}, {top}]; corrected to {v}",
                        saved.unwrap_or_default()
                    );
                }
                progress.push(v);
            }
            let found = advance_past_copies(
                &self.schedule.levels,
                &o.commitlog,
                &queues,
                &mut progress,
                persisted_at_ms,
            );
            for (i, n) in found.iter().enumerate().filter(|(_, n)| **n > 0) {
                log::warn!(
                    target: "rmqstore.schedule",
                    "delay level {}: {n} messages were delivered after the progress was saved; moved to offset {}",
                    i + 1,
                    progress[i]
                );
            }
            for (g, v) in guards.iter_mut().zip(&progress) {
                **g = *v;
            }
            let mut others = self.schedule.others.lock().unwrap_or_else(|p| p.into_inner());
            others.clear();
            others.extend(offsets.iter().filter(|(l, _)| **l > max || **l < 1).map(|(l, v)| (*l, *v)));
            drop(others);
            drop(guards);
            Ok(self.schedule_offsets_now())
        })?
    }

    fn schedule_offsets_now(&self) -> BTreeMap<i32, i64> {
        let mut out: BTreeMap<i32, i64> = self
            .schedule
            .others
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for level in 1..=self.schedule.levels.max_level() {
            out.insert(level, *self.schedule.lock(level));
        }
        out
    }

    /// Each level's progress (RocketMQ's `offsetTable`): level -> next queue offset to deliver.
    pub fn schedule_offsets(&self) -> Result<BTreeMap<i32, i64>> {
        self.with_open(|_| self.schedule_offsets_now())
    }

    /// Per level: delay, progress, the queue's maximum, pending count and the deliver time of
    /// the oldest pending message.
    pub fn schedule_stats(&self) -> Result<Vec<LevelStats>> {
        self.with_open(|o| {
            (1..=self.schedule.levels.max_level())
                .map(|level| {
                    let offset = *self.schedule.lock(level);
                    // A read-only store finds the queues another process writes.
                    let cq = self.readable_queue(o, SCHEDULE_TOPIC, level - 1)?;
                    let (min_offset, max_offset) = cq
                        .as_ref()
                        .map_or((0, 0), |cq| (cq.min_offset(), cq.max_offset()));
                    // Delivery starts at the queue's minimum when the progress is below it.
                    let next = offset.max(min_offset);
                    let oldest_due_ms = cq
                        .as_ref()
                        .filter(|_| next < max_offset)
                        .and_then(|cq| cq.get(next))
                        .map(|u| u.tags_code);
                    Ok(LevelStats {
                        level,
                        delay_ms: self.schedule.levels.delay_ms(level).unwrap_or(0),
                        offset,
                        max_offset,
                        pending: (max_offset - next).max(0),
                        oldest_due_ms,
                    })
                })
                .collect()
        })?
    }
}

/// Whether a hook left the message as it was.
fn same_message(a: &Message, b: &Message) -> bool {
    a.topic == b.topic
        && a.queue_id == b.queue_id
        && a.flag == b.flag
        && a.sys_flag == b.sys_flag
        && a.born_timestamp == b.born_timestamp
        && a.born_host == b.born_host
        && a.properties == b.properties
        && a.reconsume_times == b.reconsume_times
        && a.body == b.body
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::format::Message;
    use crate::schedule::recover::first_record_at_or_after;
    use crate::{MessageStore, StoreConfig};

    #[test]
    fn the_time_search_finds_the_first_record_stored_at_or_after_a_time() {
        let d = std::env::temp_dir().join(format!("rmqstore-sched-time-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let store = MessageStore::open(
            &d,
            StoreConfig {
                mapped_file_size_commit_log: 4096,
                ..StoreConfig::default()
            },
        )
        .unwrap();
        let mut at = Vec::new();
        for i in 0..120 {
            let m = Message {
                topic: "T".into(),
                body: vec![b'x'; 100 + i % 7],
                ..Message::default()
            };
            let r = store.put_message(&m).unwrap();
            at.push((r.wrote_offset, r.store_timestamp));
            if i % 10 == 9 {
                std::thread::sleep(Duration::from_millis(3));
            }
        }
        assert!(store.commitlog_segments().unwrap().len() > 3);
        let end = store.max_phy_offset().unwrap();
        let first = at[0].1;
        let last = at[at.len() - 1].1;
        for t in (first - 2..=last + 2).chain([0, i64::MIN, i64::MAX]) {
            let want = at.iter().find(|(_, ts)| *ts >= t).map_or(end, |(o, _)| *o);
            let got = store
                .with_open(|o| first_record_at_or_after(&o.commitlog, t))
                .unwrap();
            assert_eq!(got, want, "t = {t}");
        }
        store.close().unwrap();
        let _ = std::fs::remove_dir_all(&d);
    }
}
