//! Timer messages (RocketMQ 5.x `TimerMessageStore`, docs/format.md#timer-files): a message
//! put with a deliver time goes to queue 0 of `rmq_sys_wheel_timer` ([`hook`]); the engine
//! here moves it into the time wheel and delivers it to its real topic and queue once due.
//!
//! - enqueue round ([`TimerEngine::enqueue`]): reads the timer queue from where it stopped,
//!   appends a 52-byte unit per message to the timer log and links it into the chain of its
//!   slot in the wheel (`doEnqueue`); a message due already is delivered at once, one beyond the
//!   roll window goes into a slot at most the window ahead marked to roll back into the timer
//!   topic, and a delete marker (`TIMER_DEL_UNIQKEY`) goes into its target's slot.
//! - dequeue round ([`TimerEngine::dequeue`]): from the read time up to the write time, walks
//!   each slot's chain backwards, drops messages a delete marker of the slot names, and puts
//!   the others to their real topic (`convert`/`convertMessage`), or back into the timer topic
//!   for rolled ones; the read time moves once a slot is delivered whole.
//! - flush ([`TimerEngine::flush`]): the checkpoint's positions, then the timer log, the wheel
//!   and `config/timercheck` forced in that order (`TimerFlushService`).
//! - recovery at open ([`TimerEngine::open`]): `TimerMessageStore.recover` (re-link the wheel from
//!   the timer log after the last flushed position, cut the log at its first bad unit, resume the
//!   timer queue at the checkpoint), so that a crash loses nothing due; then what was done
//!   after the checkpoint is found again so that it is not done twice (below).
//!
//! Files: `hook.rs` (the put hook), `wheel.rs`, `log.rs` and `checkpoint.rs` (the three
//! files), `recover.rs` (recovery), `dedup.rs` (what was done after the checkpoint),
//! `deliver.rs` (the put of a due message), `props.rs` (property names and edits); here the
//! engine, its rounds, flush and stats.
//!
//! # Delivery after a crash: nothing lost, nothing delivered twice
//!
//! After a SIGKILL the commitlog, the timer log and the wheel hold everything written (the page
//! cache survives the process); `config/timercheck` is the last flush's: Q (timer queue
//! messages below Q were taken by the enqueue) and R (slots below R were delivered whole).
//! RocketMQ's recovery resumes the enqueue at min(Q, the message after the last unit of the
//! log) and the dequeue at R, and so does the work after the checkpoint again: a message
//! linked twice into the wheel is delivered twice, a slot walked again is delivered again.
//! Without changing any file, the open finds that work ([`dedup`]) and the rounds pass over
//! it (counted in [`TimerStats::recovered`]):
//!
//! 1. *Linked already.* The enqueue takes timer queue messages one at a time in queue order,
//!    so the units of the log point at messages whose commitlog offsets grow along the log. The
//!    log is read back from its end to the first unit pointing before the resume point's
//!    message; the enqueue passes over the messages those units point at instead of linking
//!    them again.
//! 2. *Delivered.* The commitlog is read from the first record stored at or after the earlier
//!    of (the store time of the message the enqueue resumes at) and (the time of the first
//!    slot from R that holds units), less [`dedup::COPY_SCAN_SLACK_MS`], to its end (an idle
//!    timer reads nothing, whatever its R). A record with TIMER_OUT_MS, TIMER_ENQUEUE_MS and
//!    TIMER_DEQUEUE_MS (in its real topic; in the timer topic with TIMER_ROLL_TIMES for a
//!    roll) is a copy the timer put, and is counted under its key: every
//!    field the copy takes from its original or its unit and not from the moment of the put
//!    (topic and queue, born time and host, body CRC and length, flag, TIMER_OUT_MS, UNIQ_KEY,
//!    TIMER_ROLL_TIMES, and TIMER_ENQUEUE_MS: the write time the unit was appended at, or
//!    `Long.MAX_VALUE` for a message put at enqueue because it was due already). Copies put
//!    at enqueue are consulted by the enqueue up to the queue's end at open; copies from the
//!    wheel by the dequeue for slots up to the latest slot a copy comes from (a copy of a
//!    slot below R is left out: that slot is never walked again). Before each put the round
//!    builds the copy as always; if its key is counted, one is taken out and nothing is put.
//! 3. *Linked twice before.* A store that re-enqueued after a crash (RocketMQ, or an earlier
//!    rmqstore) can hold two units of one message in one slot: the walk of a slot delivers
//!    the first unit of each message only (one pass while the slot's units point at growing
//!    offsets, as they always do when nothing was linked twice).
//!
//! Why nothing is missed: a copy from the wheel is put while the write time, which follows
//! the clock the services pass to the rounds, is past its slot, so a copy of a slot at or
//! after R is stored at or after the first such slot holding units (a delivered slot keeps
//! its time and chain in the wheel; the slack covers a clock stepped back); a copy put at
//! enqueue is appended after its original, and store times grow along the commitlog.
//!
//! Why nothing is skipped wrongly: copies are counted, so a key found n times skips n
//! originals; two originals share a key only when they are one message put twice with the
//! same born time, the same body and UNIQ_KEY, and then skipping either is the same. A copy
//! torn by the kill is cut off by commitlog recovery and its original delivered by the walk
//! again: it was never delivered. Each open scans what was written since about the last
//! delivered slot; the tables are freed once the rounds pass the work they describe.
//!
//! Each round is one call on the caller's thread (Python's service threads pace them). The
//! wheel lock serialises appends with the moves of the write time and with the reads of a
//! slot's chain; everything else (reading messages, putting them) runs outside it.

mod checkpoint;
mod dedup;
mod deliver;
pub(crate) mod hook;
mod log;
pub(crate) mod props;
mod recover;
mod wheel;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::StoreConfig;
use crate::error::{Result, StoreError};
use crate::format::timer::{
    is_delete, is_roll, TimerCheckFields, TimerLogUnit, MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL,
    SLOTS_TOTAL, TIMER_BLANK_SLOTS, UNIT_SIZE,
};
use crate::format::MessageExt;
use crate::store::MessageStore;

use checkpoint::TimerCheckpoint;
use dedup::CopyKey;
use log::TimerLog;
pub(crate) use wheel::TimerWheel;

/// `TimerMessageStore.TIMER_TOPIC`.
pub const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";

/// The settings the timer reads (from [`StoreConfig`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TimerSettings {
    pub enable: bool,
    pub precision_ms: i32,
    pub max_delay_sec: i32,
    pub roll_window_slot: i32,
    pub congest_num_each_slot: i32,
    pub append_topic_for_delete_key: bool,
}

impl TimerSettings {
    pub(crate) fn from_config(c: &StoreConfig) -> TimerSettings {
        TimerSettings {
            enable: c.timer_wheel_enable,
            precision_ms: c.timer_precision_ms,
            max_delay_sec: c.timer_max_delay_sec,
            roll_window_slot: c.timer_roll_window_slot,
            congest_num_each_slot: c.timer_congest_num_each_slot,
            append_topic_for_delete_key: c.append_topic_for_timer_delete_key,
        }
    }
}

/// What one enqueue round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerEnqueueStep {
    /// Timer queue messages taken (logged, delivered at once or skipped).
    pub messages: u64,
    /// Units appended to the timer log.
    pub logged: u64,
    /// Messages due already, put to their real topic at once.
    pub delivered: u64,
    /// Timer queue messages still behind after the round.
    pub behind: i64,
    /// A put was refused for now (the round stopped at that message; the next one retries).
    pub stalled: bool,
}

/// What one dequeue round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerDequeueStep {
    /// Slots passed (delivered whole or empty).
    pub slots: u64,
    /// Messages put to their real topic.
    pub delivered: u64,
    /// Messages put back to the timer topic (rolled).
    pub rolled: u64,
    /// Messages a delete marker dropped.
    pub deleted: u64,
    /// Messages passed over because their copy was put before a crash (found at open).
    pub recovered: u64,
    /// The slot time the next round starts at.
    pub read_time_ms: i64,
    /// The round stopped inside a slot (budget spent or a put refused for now).
    pub partial: bool,
}

/// The timer engine's state (`store.timer_stats()`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerStats {
    /// Next timer queue offset to enqueue.
    pub enqueue_offset: i64,
    /// The timer queue's end.
    pub queue_max_offset: i64,
    /// Next slot time to deliver.
    pub read_time_ms: i64,
    /// Slot times below this are due (the write time).
    pub write_time_ms: i64,
    /// Messages counted in the wheel from the read time on (`getAllCongestNum`).
    pub pending: i64,
    /// End of the timer log.
    pub timer_log_end: i64,
    /// Totals since open.
    pub enqueued: u64,
    pub delivered: u64,
    pub rolled: u64,
    pub deleted: u64,
    /// Messages that could not be delivered and never will (no real topic, refused as illegal).
    pub dropped: u64,
    /// Timer queue messages and wheel units passed over because the work was done before a
    /// crash (found at open: a unit already logged, a copy already stored, a unit twice in
    /// its slot).
    pub recovered: u64,
}

/// How a message put went.
enum Put {
    Done,
    /// Will never succeed (RocketMQ's `PUT_NO_RETRY`).
    Dropped,
    /// Refused for now; try again later.
    Retry,
    /// Its copy was stored before a crash (found at open): not put again.
    AlreadyDone,
}

#[derive(Default)]
struct Counters {
    enqueued: AtomicU64,
    delivered: AtomicU64,
    rolled: AtomicU64,
    deleted: AtomicU64,
    dropped: AtomicU64,
    recovered: AtomicU64,
}

/// The enqueue's position and what it passes over after a crash ([`dedup`]).
#[derive(Default)]
struct EnqueueState {
    /// Next timer queue offset to enqueue.
    offset: i64,
    /// Commitlog offsets of timer messages the timer log holds a unit for, at or after the
    /// resume point: not linked into the wheel again.
    logged: HashSet<i64>,
    /// Copies put at enqueue after the checkpoint.
    direct: HashMap<CopyKey, u32>,
    /// The timer queue's end at open: past it, `logged` and `direct` are dropped.
    recovery_end: i64,
}

struct DequeueState {
    read_time_ms: i64,
    /// The slot being delivered and how many of its messages are done.
    progress: Option<(i64, usize)>,
    /// Copies of wheel units stored after the checkpoint ([`dedup`]): consulted for slots up
    /// to `copies_until_ms`, dropped once the read time passes it.
    copies: HashMap<CopyKey, u32>,
    copies_until_ms: i64,
}

struct FlushState {
    last_commit_read_time_ms: i64,
    last_commit_queue_offset: i64,
    fields: TimerCheckFields,
}

/// A slot's units, read under the wheel lock.
struct SlotUnits {
    /// Messages and rolled units, in append order.
    normal: Vec<TimerLogUnit>,
    /// Delete markers (not rolled).
    delete: Vec<TimerLogUnit>,
}

/// Blank slots one dequeue round passes at most (a whole turn of the ring: a store that was
/// closed for days catches up in one round).
const BLANK_SLOTS_PER_ROUND: u64 = 2 * SLOTS_TOTAL as u64;

/// The timer engine of an open store.
pub(crate) struct TimerEngine {
    settings: TimerSettings,
    precision_ms: i64,
    roll_window_slots: i64,
    wheel: Arc<TimerWheel>,
    log: TimerLog,
    checkpoint: TimerCheckpoint,
    /// Serialises timer log appends and slot updates, moves of the write time and reads of a
    /// slot's chain.
    wheel_lock: Mutex<()>,
    /// The enqueue's state; its lock makes one enqueue round run at a time.
    enqueue: Mutex<EnqueueState>,
    dequeue: Mutex<DequeueState>,
    flush: Mutex<FlushState>,
    curr_write_time_ms: AtomicI64,
    /// The read time the checkpoint records: moved past delivered slots only, so an idle store
    /// does not rewrite `timercheck` as time passes (blank slots behind it hold nothing to
    /// deliver again after a restart; recovery walks them in one round).
    commit_read_time_ms: AtomicI64,
    /// The read time itself (for stats).
    curr_read_time_ms: AtomicI64,
    commit_queue_offset: AtomicI64,
    counters: Counters,
}

/// Checks the timer files of `root` before anything changes (`timerwheel`'s length,
/// `timerlog/` a folder, `config/timercheck`'s size).
pub(crate) fn check_files(root: &Path) -> Result<()> {
    TimerWheel::check(&root.join("timerwheel"))?;
    crate::util::check_dir_or_absent(&root.join("timerlog"), "timerlog")?;
    TimerCheckpoint::check(&root.join("config").join("timercheck"))
}

impl TimerEngine {
    /// Opens the timer files of `root` and recovers them against `store`'s timer queue
    /// (`TimerMessageStore.load` and `recover`).
    pub(crate) fn open(
        store: &MessageStore,
        root: &Path,
        config: &StoreConfig,
    ) -> Result<TimerEngine> {
        let settings = TimerSettings::from_config(config);
        let precision_ms = i64::from(settings.precision_ms);
        let wheel = Arc::new(TimerWheel::open(&root.join("timerwheel"), precision_ms)?);
        let log = TimerLog::load(
            &root.join("timerlog"),
            i64::from(config.mapped_file_size_timer_log),
        )?;
        log.queue().remove_empty_leftover()?;
        let checkpoint = TimerCheckpoint::open(&root.join("config").join("timercheck"))?;
        let mut fields = checkpoint.fields();
        if fields == TimerCheckFields::default() {
            // A new checkpoint's data version carries its creation time, as RocketMQ's.
            fields.timestamp = crate::util::now_millis();
        }
        let engine = TimerEngine {
            settings,
            precision_ms,
            roll_window_slots: i64::from(settings.roll_window_slot)
                .clamp(2, SLOTS_TOTAL - TIMER_BLANK_SLOTS),
            wheel,
            log,
            checkpoint,
            wheel_lock: Mutex::new(()),
            enqueue: Mutex::new(EnqueueState::default()),
            dequeue: Mutex::new(DequeueState {
                read_time_ms: 0,
                progress: None,
                copies: HashMap::new(),
                copies_until_ms: -1,
            }),
            flush: Mutex::new(FlushState {
                last_commit_read_time_ms: fields.last_read_time_ms,
                last_commit_queue_offset: fields.master_timer_queue_offset,
                fields,
            }),
            curr_write_time_ms: AtomicI64::new(0),
            commit_read_time_ms: AtomicI64::new(0),
            curr_read_time_ms: AtomicI64::new(0),
            commit_queue_offset: AtomicI64::new(0),
            counters: Counters::default(),
        };
        // SAFETY: the engine is not shared yet: nothing reads or appends to its timer log.
        unsafe { engine.recover(store, fields) }?;
        Ok(engine)
    }

    pub(crate) fn wheel(&self) -> &Arc<TimerWheel> {
        &self.wheel
    }

    pub(crate) fn settings(&self) -> TimerSettings {
        self.settings
    }

    fn format_time(&self, ms: i64) -> i64 {
        ms / self.precision_ms * self.precision_ms
    }

    fn lock_wheel(&self) -> std::sync::MutexGuard<'_, ()> {
        self.wheel_lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `maybeMoveWriteTime`, under the wheel lock.
    fn move_write_time(&self, now_ms: i64) {
        let _g = self.lock_wheel();
        self.curr_write_time_ms
            .fetch_max(self.format_time(now_ms), Ordering::AcqRel);
    }

    /// The enqueue round (`enqueue(0)` and `TimerEnqueuePutService`): at most `max_msgs`
    /// messages of the timer queue, at time `now_ms`.
    pub(crate) fn enqueue(
        &self,
        store: &MessageStore,
        now_ms: i64,
        max_msgs: usize,
    ) -> Result<TimerEnqueueStep> {
        let mut state = self.enqueue.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut *state;
        let offset = &mut st.offset;
        let mut step = TimerEnqueueStep::default();
        self.move_write_time(now_ms);
        let min = store.min_offset_in_queue(TIMER_TOPIC, 0)?;
        if *offset < min {
            ::log::warn!(
                target: "rmqstore.timer",
                "timer queue offset {} is below the queue's minimum {min}",
                *offset
            );
            *offset = min;
        }
        let units = store.timer_queue_units(*offset, max_msgs)?;
        for u in units {
            if u.queue_offset >= st.recovery_end && st.recovery_end >= 0 {
                // Past what was in the timer queue at open: nothing more to pass over.
                st.logged = HashSet::new();
                st.direct = HashMap::new();
                st.recovery_end = -1;
            }
            if !st.logged.is_empty() && st.logged.remove(&u.phy_offset) {
                // Linked into the wheel before the crash.
                self.counters.recovered.fetch_add(1, Ordering::Relaxed);
                step.messages += 1;
                *offset = u.queue_offset + 1;
                self.commit_queue_offset.store(*offset, Ordering::Release);
                continue;
            }
            let msg = match store.timer_message_at(u.phy_offset, u.size) {
                Ok(Some(m)) => Some(m),
                Ok(None) => None,
                Err(StoreError::CorruptRecord { .. }) => None,
                Err(e) => return Err(e),
            };
            let delayed = msg.as_ref().and_then(|m| {
                m.property(props::TIMER_OUT_MS)
                    .and_then(|v| v.parse::<i64>().ok())
            });
            match (&msg, delayed) {
                (Some(m), Some(delayed)) => {
                    let direct = {
                        let _g = self.lock_wheel();
                        let cw = self.curr_write_time_ms.load(Ordering::Acquire);
                        if delayed < cw {
                            true
                        } else {
                            self.do_enqueue(u.phy_offset, u.size, delayed, m, cw)?;
                            step.logged += 1;
                            false
                        }
                    };
                    if direct {
                        let now = crate::util::now_millis();
                        let copies = Some(&mut st.direct);
                        match self.deliver(
                            store,
                            m,
                            dedup::DIRECT_ENQUEUE_MS,
                            false,
                            now,
                            copies,
                        )? {
                            Put::Done => step.delivered += 1,
                            Put::Dropped | Put::AlreadyDone => {}
                            Put::Retry => {
                                step.stalled = true;
                                break;
                            }
                        }
                    }
                    self.counters.enqueued.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                    ::log::warn!(
                        target: "rmqstore.timer",
                        "timer queue offset {}: no readable timer message at commitlog offset {} \
                         (or no TIMER_OUT_MS); skipped",
                        u.queue_offset,
                        u.phy_offset
                    );
                }
            }
            step.messages += 1;
            *offset = u.queue_offset + 1;
            self.commit_queue_offset.store(*offset, Ordering::Release);
        }
        self.move_write_time(now_ms);
        step.behind = (store.max_offset_in_queue(TIMER_TOPIC, 0)? - *offset).max(0);
        Ok(step)
    }

    /// `doEnqueue`, with the wheel lock held and `cw` the write time.
    fn do_enqueue(
        &self,
        offset_py: i64,
        size_py: i32,
        mut delayed: i64,
        msg: &MessageExt,
        cw: i64,
    ) -> Result<()> {
        let p = self.precision_ms;
        let window = self.roll_window_slots;
        let mut magic = MAGIC_DEFAULT;
        if delayed - cw >= window * p {
            magic |= MAGIC_ROLL;
            delayed = if delayed - cw - window * p < window / 3 * p {
                cw + window / 2 * p
            } else {
                cw + window * p
            };
        }
        if msg.property(props::TIMER_DEL_UNIQKEY).is_some() {
            magic |= MAGIC_DELETE;
        }
        let real_topic_hash = msg
            .property(props::REAL_TOPIC)
            .map_or(0, crate::util::java_hash);
        // The slot's page first: a unit is never logged for a slot that cannot be written.
        self.wheel.reserve_slot(delayed)?;
        let slot = self.wheel.slot(delayed);
        let unit = TimerLogUnit {
            size: UNIT_SIZE as i32,
            prev_pos: slot.last_pos,
            magic,
            curr_write_time_ms: cw,
            delay_time: (delayed - cw) as i32,
            offset_py,
            size_py,
            real_topic_hash,
            reserved: 0,
        };
        // SAFETY: the wheel lock is held: this is the one appender.
        let pos = unsafe { self.log.append(&unit.encode()) }?;
        let num = if is_delete(magic) {
            slot.num.wrapping_sub(1)
        } else {
            slot.num.wrapping_add(1)
        };
        let first = if slot.first_pos == -1 {
            pos
        } else {
            slot.first_pos
        };
        self.wheel.put_slot(delayed, first, pos, num, slot.magic)
    }

    /// The units of the slot at `time_ms` (under the wheel lock), walking the chain backwards
    /// from its last position and stopping at anything that is not a unit of this slot.
    fn slot_units(&self, time_ms: i64) -> SlotUnits {
        let _g = self.lock_wheel();
        let slot = self.wheel.slot(time_ms);
        let mut normal = Vec::new();
        let mut delete = Vec::new();
        let mut pos = slot.last_pos;
        while pos >= 0 {
            let Some(u) = self.log.unit_at(pos) else {
                break;
            };
            if !u.is_valid() || self.format_time(u.delayed_time_ms()) != time_ms {
                ::log::warn!(
                    target: "rmqstore.timer",
                    "timer slot {time_ms}: unit at {pos} is not one of the slot; chain cut there"
                );
                break;
            }
            if is_delete(u.magic) && !is_roll(u.magic) {
                delete.push(u);
            } else {
                normal.push(u);
            }
            if u.prev_pos >= pos {
                break;
            }
            pos = u.prev_pos;
        }
        normal.reverse();
        SlotUnits { normal, delete }
    }

    /// The dequeue round (`dequeue` and its get/put services): slots from the read time while
    /// they are below the write time (moved to `now_ms` first), at most `max_msgs` messages.
    pub(crate) fn dequeue(
        &self,
        store: &MessageStore,
        now_ms: i64,
        max_msgs: usize,
    ) -> Result<TimerDequeueStep> {
        let mut d = self.dequeue.lock().unwrap_or_else(|p| p.into_inner());
        self.move_write_time(now_ms);
        let mut step = TimerDequeueStep::default();
        let mut budget = max_msgs;
        let mut blanks = 0u64;
        let p = self.precision_ms;
        'slots: loop {
            let read = d.read_time_ms;
            if read >= self.curr_write_time_ms.load(Ordering::Acquire) {
                break;
            }
            if self.wheel.slot(read).is_blank() {
                d.read_time_ms = read + p;
                self.curr_read_time_ms.store(read + p, Ordering::Release);
                step.slots += 1;
                blanks += 1;
                if blanks >= BLANK_SLOTS_PER_ROUND {
                    break;
                }
                continue;
            }
            let mut units = self.slot_units(read);
            self.drop_repeated_units(&mut units.normal);
            let mut deleted_keys = HashSet::new();
            for u in &units.delete {
                if let Ok(Some(m)) = store.timer_message_at(u.offset_py, u.size_py) {
                    if let Some(k) = m.property(props::TIMER_DEL_UNIQKEY) {
                        deleted_keys.insert(k.to_owned());
                    }
                }
            }
            let dequeue_time = crate::util::now_millis();
            let done = match d.progress {
                Some((t, n)) if t == read => n,
                _ => 0,
            };
            for (i, u) in units.normal.iter().enumerate().skip(done) {
                if budget == 0 {
                    d.progress = Some((read, i));
                    step.partial = true;
                    break 'slots;
                }
                let copies = (read <= d.copies_until_ms).then_some(&mut d.copies);
                let put = match self.deliver_unit(store, u, &deleted_keys, dequeue_time, copies)? {
                    deliver::Unit::Unreadable => {
                        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    deliver::Unit::Deleted => {
                        budget -= 1;
                        step.deleted += 1;
                        self.counters.deleted.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    deliver::Unit::Put(put) => put,
                };
                budget -= 1;
                let roll = is_roll(u.magic);
                match put {
                    Put::Done if roll => step.rolled += 1,
                    Put::Done => step.delivered += 1,
                    Put::AlreadyDone => step.recovered += 1,
                    Put::Dropped => {}
                    Put::Retry => {
                        d.progress = Some((read, i));
                        step.partial = true;
                        break 'slots;
                    }
                }
            }
            d.progress = None;
            d.read_time_ms = read + p;
            if d.copies_until_ms >= 0 && read + p > d.copies_until_ms {
                // Every slot a copy may come from is delivered: nothing more to pass over.
                d.copies = HashMap::new();
                d.copies_until_ms = -1;
            }
            self.commit_read_time_ms.store(read + p, Ordering::Release);
            self.curr_read_time_ms.store(read + p, Ordering::Release);
            step.slots += 1;
        }
        step.read_time_ms = d.read_time_ms;
        Ok(step)
    }

    /// Drops the units of one slot that point at a message an earlier unit of the slot points at
    /// (a message linked twice, by a store that re-enqueued after a crash): each is delivered
    /// once. Units are appended in timer queue order, so the check is one pass unless the
    /// slot holds such a repeat.
    fn drop_repeated_units(&self, units: &mut Vec<TimerLogUnit>) {
        if units.windows(2).all(|w| w[0].offset_py < w[1].offset_py) {
            return;
        }
        let mut seen = HashSet::with_capacity(units.len());
        let before = units.len();
        units.retain(|u| seen.insert(u.offset_py));
        let repeated = (before - units.len()) as u64;
        if repeated > 0 {
            self.counters
                .recovered
                .fetch_add(repeated, Ordering::Relaxed);
        }
    }

    /// `buildDeleteKey`.
    fn delete_key(&self, real_topic: Option<&str>, uniq: &str) -> String {
        if self.settings.append_topic_for_delete_key {
            format!("{}+{uniq}", real_topic.unwrap_or("null"))
        } else {
            uniq.to_owned()
        }
    }

    /// `TimerFlushService.flush`: the checkpoint's values taken first, then the timer log, the
    /// wheel and the checkpoint forced in that order.
    pub(crate) fn flush(&self) -> Result<()> {
        let mut f = self.flush.lock().unwrap_or_else(|p| p.into_inner());
        let commit_read = self.commit_read_time_ms.load(Ordering::Acquire);
        let commit_queue = self.commit_queue_offset.load(Ordering::Acquire);
        let mut fields = f.fields;
        fields.last_timer_log_flush_pos = self.log.queue().flushed_where();
        fields.last_read_time_ms = commit_read;
        fields.master_timer_queue_offset = commit_queue;
        if commit_read != f.last_commit_read_time_ms || commit_queue != f.last_commit_queue_offset {
            // DataVersion.nextVersion(stateVersion 0).
            fields.state_version = 0;
            fields.timestamp = crate::util::now_millis();
            fields.counter = fields.counter.wrapping_add(1);
            f.last_commit_read_time_ms = commit_read;
            f.last_commit_queue_offset = commit_queue;
        }
        fields.last_timer_queue_offset = commit_queue.min(fields.master_timer_queue_offset);
        self.log.flush()?;
        self.wheel.flush()?;
        self.checkpoint.write(fields)?;
        f.fields = fields;
        Ok(())
    }

    pub(crate) fn stats(&self, store: &MessageStore) -> Result<TimerStats> {
        let read = self.curr_read_time_ms.load(Ordering::Acquire);
        Ok(TimerStats {
            enqueue_offset: self.commit_queue_offset.load(Ordering::Acquire),
            queue_max_offset: store.max_offset_in_queue(TIMER_TOPIC, 0)?,
            read_time_ms: read,
            write_time_ms: self.curr_write_time_ms.load(Ordering::Acquire),
            pending: self.wheel.all_num(read),
            timer_log_end: self.log.max_offset(),
            enqueued: self.counters.enqueued.load(Ordering::Relaxed),
            delivered: self.counters.delivered.load(Ordering::Relaxed),
            rolled: self.counters.rolled.load(Ordering::Relaxed),
            deleted: self.counters.deleted.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            recovered: self.counters.recovered.load(Ordering::Relaxed),
        })
    }
}
