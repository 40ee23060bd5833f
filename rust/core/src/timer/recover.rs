//! Recovery of the timer files at open (`TimerMessageStore.recover`): the wheel re-linked from
//! the timer log after the last flushed position, the log cut at its first bad unit, the timer
//! queue resumed at the checkpoint.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::format::timer::{
    is_magic_ok, TimerCheckFields, SLOTS_TOTAL, TIMER_BLANK_SLOTS, TIMER_LOG_BLANK_MAGIC,
    UNIT_PRE_SIZE_FOR_MSG, UNIT_SIZE,
};
use crate::format::{be_i32, be_i64};
use crate::store::MessageStore;

use super::{dedup, EnqueueState, TimerEngine, TIMER_TOPIC};

impl TimerEngine {
    /// `TimerMessageStore.recover`.
    ///
    /// # Safety
    /// Nothing else may use the timer log until this returns.
    pub(super) unsafe fn recover(&self, store: &MessageStore, ck: TimerCheckFields) -> Result<()> {
        let mut last_flush = ck.last_timer_log_flush_pos;
        if self.log.queue().last().is_some() {
            last_flush = last_flush.saturating_sub(self.log.file_size());
        }
        // SAFETY: as this function's.
        let process_offset = unsafe { self.recover_and_revise(last_flush.max(0), true) }?;
        let mut queue_offset = match self.revise_queue_offset(store, process_offset)? {
            -1 => ck.last_timer_queue_offset,
            q => q + 1,
        };
        queue_offset = queue_offset.min(ck.master_timer_queue_offset);
        let (min, max) = (
            store.min_offset_in_queue(TIMER_TOPIC, 0)?,
            store.max_offset_in_queue(TIMER_TOPIC, 0)?,
        );
        queue_offset = queue_offset.clamp(min.min(max), max);
        let p = self.precision_ms;
        let now = crate::util::now_millis();
        let oldest = self.format_time(now) - SLOTS_TOTAL * p + TIMER_BLANK_SLOTS * p;
        let read_time = ck.last_read_time_ms.max(oldest);
        // Slots pointing past what the log holds (a damaged log): re-link them from the
        // smallest first position among them.
        let min_first = self.wheel.check_phy_pos(read_time, process_offset);
        if min_first < process_offset {
            ::log::warn!(
                target: "rmqstore.timer",
                "timer wheel points past the timer log end {process_offset}: re-linking from {min_first}"
            );
            // SAFETY: as this function's (no truncation in this pass).
            unsafe { self.recover_and_revise(min_first.max(0), false) }?;
        }
        // What was done after the checkpoint: units logged for messages from the resume point
        // on, copies stored since the checkpoint (module header of `crate::timer`).
        let logged = match store.timer_queue_unit(queue_offset)? {
            Some(u) if queue_offset < max => {
                let span = u64::try_from(max - queue_offset).unwrap_or(0);
                dedup::logged_since(&self.log, u.phy_offset, span.saturating_add(1))
            }
            _ => HashSet::new(),
        };
        // Copies come after their originals (store times grow along the log), a copy from the
        // wheel after its slot's time (the write time follows the clock): none is stored
        // before the resume point's message or the first slot from the read time holding
        // units.
        let first_direct = match store.timer_queue_unit(queue_offset)? {
            Some(u) if queue_offset < max => {
                let ts =
                    store.with_timer_commitlog(|c| c.store_timestamp_at(u.phy_offset, u.size))?;
                Some(ts).filter(|t| *t >= 0)
            }
            _ => None,
        };
        let mut first_slot = None::<i64>;
        self.wheel.each_slot_from(read_time, |s| {
            first_slot = Some(first_slot.map_or(s.time_ms, |f| f.min(s.time_ms)));
        });
        let since = match (first_direct, first_slot) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let copies = match since {
            Some(t) if t >= 0 => {
                let roll_span = self.roll_window_slots.saturating_mul(p);
                store.with_timer_commitlog(|c| {
                    dedup::scan_copies(
                        c,
                        t.saturating_sub(dedup::COPY_SCAN_SLACK_MS),
                        read_time,
                        roll_span,
                        |ms| self.format_time(ms),
                    )
                })?
            }
            _ => dedup::Copies {
                last_slot_ms: -1,
                ..Default::default()
            },
        };
        let (n_logged, n_direct, n_wheel) = (
            logged.len(),
            copies.direct.values().map(|n| u64::from(*n)).sum::<u64>(),
            copies.wheel.values().map(|n| u64::from(*n)).sum::<u64>(),
        );
        *self.enqueue.lock().unwrap_or_else(|p| p.into_inner()) = EnqueueState {
            offset: queue_offset,
            logged,
            direct: copies.direct,
            recovery_end: max,
        };
        self.commit_queue_offset
            .store(queue_offset, Ordering::Release);
        {
            let mut d = self.dequeue.lock().unwrap_or_else(|p| p.into_inner());
            d.read_time_ms = read_time;
            d.progress = None;
            d.copies = copies.wheel;
            d.copies_until_ms = copies.last_slot_ms;
        }
        self.commit_read_time_ms.store(read_time, Ordering::Release);
        self.curr_read_time_ms.store(read_time, Ordering::Release);
        self.move_write_time(now);
        ::log::info!(
            target: "rmqstore.timer",
            "timer recovered: read time {read_time}, queue offset {queue_offset} (checkpoint {}), \
             timer log end {process_offset}; done after the checkpoint: {n_logged} messages \
             logged, {n_direct} delivered at enqueue, {n_wheel} delivered from slots up to {}",
            ck.last_timer_queue_offset,
            copies.last_slot_ms
        );
        Ok(())
    }

    /// `recoverAndRevise`: scans the timer log from the segment holding `begin`, re-linking
    /// each unit as its slot's last; with `check`, stops at the first unit that is not one and
    /// cuts the log there. Returns where the scan stopped.
    ///
    /// # Safety
    /// With `check`, nothing else may use the timer log until this returns.
    unsafe fn recover_and_revise(&self, begin: i64, check: bool) -> Result<i64> {
        let files = self.log.queue().files();
        if files.is_empty() {
            return Ok(0);
        }
        let start = files
            .iter()
            .rposition(|f| begin >= f.file_from_offset())
            .unwrap_or(0);
        let mut check_offset = files[start].file_from_offset();
        let unit = UNIT_SIZE as usize;
        for f in &files[start..] {
            let limit = if check {
                f.file_size()
            } else {
                f.read_position()
            };
            let data = f.read_from(0).unwrap_or(&[]);
            let data = &data[..(limit.max(0) as usize).min(data.len())];
            let mut position = 0usize;
            let mut stop = false;
            while position < data.len() {
                let b = &data[position..];
                if b.len() < 16 {
                    stop = check;
                    break;
                }
                let size = be_i32(b, 0);
                let magic = be_i32(b, 12);
                if magic == TIMER_LOG_BLANK_MAGIC {
                    break;
                }
                if check && (!is_magic_ok(magic) || i64::from(size) != UNIT_SIZE) {
                    stop = true;
                    break;
                }
                if b.len() < unit {
                    stop = true;
                    break;
                }
                let delayed = be_i64(b, 16).wrapping_add(i64::from(be_i32(b, 24)));
                if i64::from(size) == UNIT_SIZE && is_magic_ok(magic) {
                    self.wheel.revise_slot(
                        delayed,
                        None,
                        Some(f.file_from_offset() + position as i64),
                        true,
                    )?;
                }
                position += unit;
            }
            check_offset = f.file_from_offset() + position as i64;
            if stop {
                break;
            }
        }
        if check {
            // SAFETY: the caller excludes every other user of the log.
            unsafe { self.log.queue().truncate_dirty(check_offset) }?;
        }
        Ok(check_offset)
    }

    /// `reviseQueueOffset`: the timer queue offset of the message the last unit before
    /// `process_offset` points at (checked against the queue), or -1.
    fn revise_queue_offset(&self, store: &MessageStore, process_offset: i64) -> Result<i64> {
        let at = process_offset - (UNIT_SIZE - UNIT_PRE_SIZE_FOR_MSG);
        let Some(file) = self.log.queue().find_by_offset(at.max(0)) else {
            return Ok(-1);
        };
        if at < 0 {
            return Ok(-1);
        }
        let Some(b) = file.read(at - file.file_from_offset(), 12) else {
            return Ok(-1);
        };
        let (offset_py, size_py) = (be_i64(b, 0), be_i32(b, 8));
        let Ok(Some(msg)) = store.timer_message_at(offset_py, size_py) else {
            return Ok(-1);
        };
        let mut q = msg.queue_offset;
        for _ in 0..20_000 {
            if q < 0 {
                return Ok(msg.queue_offset);
            }
            match store.timer_queue_unit(q)? {
                Some(u) if u.phy_offset == offset_py && u.size == size_py => return Ok(q),
                _ => q -= 1,
            }
        }
        Ok(msg.queue_offset)
    }
}
