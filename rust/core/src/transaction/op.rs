//! Op entries waiting to be written (`MessageQueueOpContext` of half queue 0) and the op
//! messages cut from them (`getOpMessage`, `batchSendOpMessage`).
//!
//! An entry is the half queue offset followed by a comma. One op message takes the queued
//! entries in order until its text reaches the op max size (so it may pass it by one entry).
//! Entries leave the queue only inside `OpQueue::write_due`, under the queue's lock, and go
//! back to its front when their message could not be put: op messages are written in the
//! order their entries were queued, and an entry is lost by nothing but the process dying
//! (the exactly-once lookup does not need it: a committed transaction is found by its real
//! message).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::commitlog::AppendResult;

#[derive(Debug)]
struct Queued {
    /// The entries, `"q1,q2,..."`, oldest first.
    text: String,
    /// Entries in `text`.
    entries: u64,
    /// When an op message was last cut (`lastWriteTimestamp`; the queue's creation at first).
    last_write_ms: i64,
}

/// The op queue of half queue 0.
#[derive(Debug)]
pub(crate) struct OpQueue {
    inner: Mutex<Queued>,
    /// Mirror of the entry count, read without the lock.
    queued: AtomicU64,
}

/// What one `OpQueue::write_due` did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct OpRound {
    /// Op messages written.
    pub(crate) written: u64,
    /// The status of a put that failed (its entries are queued again); the round stopped.
    pub(crate) failed: Option<AppendResult>,
    /// When the next round is due: 0 when nothing is queued, `now` when a full message waits.
    pub(crate) next_run_ms: i64,
}

/// The end of the first op message's text: the first entry whose comma puts the text at or
/// past `max_size` (the whole text when it is shorter).
fn cut_len(text: &str, max_size: usize) -> usize {
    if text.len() <= max_size {
        return text.len();
    }
    let from = max_size.saturating_sub(1);
    text.as_bytes()[from..]
        .iter()
        .position(|&b| b == b',')
        .map_or(text.len(), |p| from + p + 1)
}

impl OpQueue {
    pub(crate) fn new(now_ms: i64) -> OpQueue {
        OpQueue {
            inner: Mutex::new(Queued {
                text: String::new(),
                entries: 0,
                last_write_ms: now_ms,
            }),
            queued: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entries queued and not yet written.
    pub(crate) fn queued(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }

    /// Queues `half_queue_offset`; returns whether the queued text reached `max_size` (a
    /// message is due now).
    pub(crate) fn push(&self, half_queue_offset: i64, max_size: i32) -> bool {
        let mut q = self.lock();
        super::records::op_body_entry(half_queue_offset, &mut q.text);
        q.entries += 1;
        self.queued.store(q.entries, Ordering::Relaxed);
        q.text.len() >= max_size.max(1) as usize
    }

    /// Drops the queued entries naming a half queue offset at or above `end` (halves a
    /// truncation removed: the offsets will name other halves).
    pub(crate) fn retain_below(&self, end: i64) {
        let mut q = self.lock();
        let mut kept = String::with_capacity(q.text.len());
        let mut n = 0;
        for e in q.text.split_terminator(',') {
            if e.parse::<i64>().is_ok_and(|v| v < end) {
                kept.push_str(e);
                kept.push(',');
                n += 1;
            }
        }
        q.text = kept;
        q.entries = n;
        self.queued.store(n, Ordering::Relaxed);
    }

    /// Whether an entry naming `half_queue_offset` is queued.
    pub(crate) fn contains(&self, half_queue_offset: i64) -> bool {
        let q = self.lock();
        let mut buf = String::with_capacity(24);
        super::records::op_body_entry(half_queue_offset, &mut buf);
        let mut at = 0;
        while let Some(p) = q.text[at..].find(buf.as_str()) {
            let start = at + p;
            if start == 0 || q.text.as_bytes()[start - 1] == b',' {
                return true;
            }
            at = start + 1;
        }
        false
    }

    /// Writes the op messages due at `now_ms` with `put` (one message per call, its body
    /// given): while the queued text reaches `max_size`, or once when `interval_ms` passed
    /// since the last write, or everything with `force`.
    pub(crate) fn write_due(
        &self,
        now_ms: i64,
        max_size: i32,
        interval_ms: i64,
        force: bool,
        mut put: impl FnMut(&[u8]) -> AppendResult,
    ) -> OpRound {
        let max = max_size.max(1) as usize;
        let mut round = OpRound::default();
        let mut q = self.lock();
        loop {
            if q.text.is_empty() {
                break;
            }
            let due = force
                || q.text.len() >= max
                || now_ms.saturating_sub(q.last_write_ms) >= interval_ms;
            if !due {
                break;
            }
            let cut = cut_len(&q.text, max);
            let r = put(&q.text.as_bytes()[..cut]);
            if !r.is_ok() {
                round.failed = Some(r);
                break;
            }
            let n = q.text.as_bytes()[..cut]
                .iter()
                .filter(|&&b| b == b',')
                .count() as u64;
            q.text.drain(..cut);
            q.entries = q.entries.saturating_sub(n);
            q.last_write_ms = now_ms;
            round.written += 1;
        }
        self.queued.store(q.entries, Ordering::Relaxed);
        round.next_run_ms = if q.text.is_empty() {
            0
        } else if q.text.len() >= max || round.failed.is_some() {
            now_ms
        } else {
            q.last_write_ms.saturating_add(interval_ms)
        };
        round
    }
}

/// Wakes the op batch service when an entry is due at once (`transaction_op_batch_interval`
/// = 0: RocketMQ's `deletePrepareMessage` wakes its `TransactionalOpBatchService`), from the
/// ending thread, without a call into Python per transaction: one atomic load while a wake is
/// already pending.
pub(crate) type OpWake = crate::wait::RoundRequests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::PutMessageStatus;
    use std::time::Duration;

    fn ok() -> AppendResult {
        AppendResult {
            status: PutMessageStatus::PutOk,
            wrote_offset: 0,
            wrote_bytes: 0,
            queue_offset: 0,
            store_timestamp: 0,
            record_sizes: vec![1].into(),
        }
    }

    #[test]
    fn one_message_takes_entries_until_its_text_reaches_the_max_size() {
        assert_eq!(cut_len("1,2,3,", 100), 6);
        assert_eq!(cut_len("1,2,3,", 4), 4);
        assert_eq!(cut_len("1,22,3,", 4), 5);
        assert_eq!(cut_len("10,20,30,", 1), 3);
        let q = OpQueue::new(0);
        for i in 0..10 {
            assert_eq!(q.push(i, 8), i >= 3, "after {i}");
        }
        assert!(q.contains(9) && q.contains(0) && !q.contains(10) && !q.contains(1_000));
        let mut bodies = Vec::new();
        let r = q.write_due(1, 8, 3000, false, |b| {
            bodies.push(String::from_utf8(b.to_vec()).unwrap());
            ok()
        });
        // 20 bytes queued: messages of 8, 8, then 4 bytes left (not due: interval).
        assert_eq!(bodies, ["0,1,2,3,", "4,5,6,7,"]);
        assert_eq!(r.written, 2);
        assert_eq!(q.queued(), 2);
        assert_eq!(r.next_run_ms, 3001);
        let r = q.write_due(3000, 8, 3000, false, |_| panic!("not due"));
        assert_eq!(r.written, 0);
        let r = q.write_due(3001, 8, 3000, false, |b| {
            bodies.push(String::from_utf8(b.to_vec()).unwrap());
            ok()
        });
        assert_eq!(r.written, 1);
        assert_eq!(bodies[2], "8,9,");
        assert_eq!(r.next_run_ms, 0);
        assert_eq!(q.queued(), 0);
    }

    #[test]
    fn the_wake_ends_a_wait_at_once_and_is_not_lost() {
        use std::time::Instant;
        let w = std::sync::Arc::new(OpWake::default());
        // A request before the wait: the wait returns at once, and clears it.
        w.request();
        let t = Instant::now();
        assert!(!w.wait(Duration::from_secs(10)));
        assert!(t.elapsed() < Duration::from_secs(5));
        // No request: the wait times out.
        let t = Instant::now();
        assert!(!w.wait(Duration::from_millis(30)));
        assert!(t.elapsed() >= Duration::from_millis(25));
        // A request from another thread during the wait ends it.
        let w2 = std::sync::Arc::clone(&w);
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w2.request();
        });
        let t = Instant::now();
        assert!(!w.wait(Duration::from_secs(20)));
        assert!(t.elapsed() < Duration::from_secs(10));
        h.join().unwrap();
        // Stopped: every wait returns at once, saying so.
        w.stop();
        assert!(w.wait(Duration::from_secs(20)));
        assert!(w.wait(Duration::from_secs(20)));
    }

    #[test]
    fn a_truncation_drops_the_entries_of_removed_halves() {
        let q = OpQueue::new(0);
        for i in [3, 10, 4, 11, 9] {
            q.push(i, 4096);
        }
        q.retain_below(10);
        assert_eq!(q.queued(), 3);
        let mut body = String::new();
        q.write_due(0, 4096, 0, true, |b| {
            body = String::from_utf8(b.to_vec()).unwrap();
            ok()
        });
        assert_eq!(body, "3,4,9,");
    }

    #[test]
    fn a_failed_put_keeps_the_entries_in_order() {
        let q = OpQueue::new(0);
        q.push(5, 4096);
        q.push(6, 4096);
        let r = q.write_due(0, 4096, 3000, true, |_| {
            AppendResult::failed(PutMessageStatus::ServiceNotAvailable)
        });
        assert_eq!(r.written, 0);
        assert!(r.failed.is_some());
        assert_eq!(r.next_run_ms, 0);
        q.push(7, 4096);
        let mut body = String::new();
        let r = q.write_due(0, 4096, 3000, true, |b| {
            body = String::from_utf8(b.to_vec()).unwrap();
            ok()
        });
        assert_eq!(r.written, 1);
        assert_eq!(body, "5,6,7,");
    }
}
