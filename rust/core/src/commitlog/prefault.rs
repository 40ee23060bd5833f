//! The commitlog's prefault rounds: the pages of the segment being appended to, from the write
//! position up to some distance ahead of it, faulted in by a service thread before the appender
//! writes them (`file::mapped_file::populate` says why and how). rmqstore's own service:
//! RocketMQ warms whole segments instead (`warmMapedFileEnable`), which is kept as it is.
//!
//! How far ahead follows the appender's rate: [`LEAD`] of appends at the rate measured over the
//! last [`SAMPLE`] or more, at least [`MIN_AHEAD`], at most the configured window. A store that
//! takes a message now and then keeps 2 MiB ready (no burst of page faults at its open, no
//! megabytes of dirty zeros waiting for writeback); a producer at full speed gets the window.
//!
//! A round does nothing for a segment with a write buffer (the transient store pool writes into
//! locked buffers) or one already warmed and locked. It never changes a byte, so it needs no
//! lock of the append path; the segment it works on is held by its `Arc` for the round. Pages
//! are faulted in [`CHUNK`]s, one system call each: the kernel holds the process's memory map
//! lock for reading during a call, and a thread mapping or unmapping a file (a new consume queue
//! or index file) waits for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::CommitLog;
use crate::file::mapped_file::{MappedFile, Populate};
use crate::file::mapped_file_queue::MappedFileQueue;

/// Bytes faulted in per system call.
const CHUNK: i64 = 512 * 1024;
/// How far ahead pages are faulted in at least (when the window is not smaller).
const MIN_AHEAD: i64 = 2 * 1024 * 1024;
/// How many appends the distance ahead holds, in time at the measured rate.
const LEAD: Duration = Duration::from_millis(200);
/// The shortest span the append rate is measured over.
const SAMPLE: Duration = Duration::from_millis(20);

/// Where the prefault rounds stand.
#[derive(Debug)]
pub(crate) struct PrefaultState {
    /// Commitlog offset up to which pages were faulted in.
    end: i64,
    how: Populate,
    /// The write position (commitlog offset) when the rate was last measured, and when.
    sample: Option<(Instant, i64)>,
    /// Append rate over the last sample, bytes a second.
    rate: f64,
}

impl Default for PrefaultState {
    fn default() -> Self {
        PrefaultState {
            end: 0,
            how: Populate::Write,
            sample: None,
            rate: 0.0,
        }
    }
}

impl PrefaultState {
    /// Takes the write position `wrote` (a commitlog offset) seen at `now` into the append rate
    /// and answers how far ahead of it pages should be faulted in, within `window`.
    fn ahead(&mut self, now: Instant, wrote: i64, window: i64) -> i64 {
        match self.sample {
            None => self.sample = Some((now, wrote)),
            Some((at, from)) => {
                let span = now.saturating_duration_since(at);
                if span >= SAMPLE {
                    self.rate = wrote.saturating_sub(from).max(0) as f64 / span.as_secs_f64();
                    self.sample = Some((now, wrote));
                }
            }
        }
        ahead_for(self.rate, window)
    }
}

/// The distance ahead for an append rate (bytes a second) and a window.
fn ahead_for(rate: f64, window: i64) -> i64 {
    // `as` saturates: an absurd rate gives i64::MAX, clamped to the window.
    let want = (rate * LEAD.as_secs_f64()) as i64;
    want.clamp(MIN_AHEAD.min(window), window)
}

/// What the service has to do now: fault `[from, to)` (file positions) of `file` in.
struct Gap {
    file: Arc<MappedFile>,
    from: i64,
    to: i64,
}

/// The pages of the last segment not faulted in yet within the distance ahead of its write
/// position, once less than half that distance is left (or the rest of the segment is shorter).
fn gap(queue: &MappedFileQueue, st: &mut PrefaultState, window: i64) -> Option<Gap> {
    let file = queue.last()?;
    if file.has_write_buffer() || file.is_locked() || file.is_full() {
        return None;
    }
    let (base, size) = (file.file_from_offset(), file.file_size());
    let wrote = file.wrote_position();
    let ahead = st.ahead(Instant::now(), base.saturating_add(wrote), window);
    let to = wrote.saturating_add(ahead).min(size);
    let done = st.end.saturating_sub(base).clamp(wrote, size);
    let left = done - wrote;
    if done >= to || (left >= ahead / 2 && to < size) {
        return None;
    }
    Some(Gap {
        file,
        from: done,
        to,
    })
}

impl CommitLog {
    /// One prefault round: faults in the pages of the segment being appended to from where the
    /// last round stopped (or the write position, when the appender passed it) up to the
    /// distance ahead of the write position (at most `window` bytes), in chunks, until `stop`.
    /// Returns the bytes faulted in (0: nothing was due). A kernel refusal ends the round quietly (the appender
    /// faults the pages itself, as without the service) and is logged once per segment.
    pub(crate) fn prefault(&self, window: i64, stop: &AtomicBool) -> i64 {
        if window <= 0 || self.read_only {
            return 0;
        }
        let mut st = self.prefault.lock().unwrap_or_else(|p| p.into_inner());
        let Some(Gap { file, mut from, to }) = gap(&self.queue, &mut st, window) else {
            return 0;
        };
        let base = file.file_from_offset();
        let mut faulted = 0;
        while from < to && !stop.load(Ordering::Relaxed) {
            let upto = from.saturating_add(CHUNK).min(to);
            match file.populate(from, upto, st.how) {
                Ok(how) => st.how = how,
                Err(e) => {
                    log::warn!(
                        target: "rmqstore.prefault",
                        "cannot fault in {} [{from}, {upto}): {e}; the appender faults them",
                        file.path().display()
                    );
                    // Not again for this segment.
                    st.end = base.saturating_add(file.file_size());
                    return faulted;
                }
            }
            faulted += upto - from;
            from = upto;
            st.end = base.saturating_add(from);
        }
        faulted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1024 * 1024;

    #[test]
    fn the_distance_ahead_follows_the_append_rate_within_the_window() {
        // Idle or slow: the minimum, or the window when it is smaller.
        assert_eq!(ahead_for(0.0, 32 * MIB), MIN_AHEAD);
        assert_eq!(ahead_for(1e6, 32 * MIB), MIN_AHEAD);
        assert_eq!(ahead_for(0.0, MIB), MIB);
        // 50 MB/s: 200 ms of it.
        assert_eq!(ahead_for(50e6, 32 * MIB), 10_000_000);
        // Fast, or absurd: the window.
        assert_eq!(ahead_for(600e6, 32 * MIB), 32 * MIB);
        assert_eq!(ahead_for(f64::MAX, 32 * MIB), 32 * MIB);
        assert_eq!(ahead_for(f64::INFINITY, 32 * MIB), 32 * MIB);
    }

    #[test]
    fn the_rate_is_measured_over_spans_of_at_least_the_sample() {
        let mut st = PrefaultState::default();
        let t0 = Instant::now();
        assert_eq!(st.ahead(t0, 0, 32 * MIB), MIN_AHEAD);
        // Too soon to measure: the rate stays.
        assert_eq!(st.ahead(t0 + SAMPLE / 2, 100 * MIB, 32 * MIB), MIN_AHEAD);
        // 10 MB in 100 ms: 100 MB/s, so 20 MB ahead.
        assert_eq!(
            st.ahead(t0 + Duration::from_millis(100), 10_000_000, 32 * MIB),
            20_000_000
        );
        // Idle since: back to the minimum after the next span.
        assert_eq!(
            st.ahead(t0 + Duration::from_millis(200), 10_000_000, 32 * MIB),
            MIN_AHEAD
        );
        // A position going back (a truncation) counts as no appends.
        assert_eq!(
            st.ahead(t0 + Duration::from_millis(300), 0, 32 * MIB),
            MIN_AHEAD
        );
    }
}
