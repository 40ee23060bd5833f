//! The commitlog's prefault rounds: the pages of the segment being appended to, from the write
//! position up to a window ahead of it, faulted in by a service thread before the appender
//! writes them (`file::mapped_file::populate` says why and how). rmqstore's own service:
//! RocketMQ warms whole segments instead (`warmMapedFileEnable`), which is kept as it is.
//!
//! A round does nothing for a segment with a write buffer (the transient store pool writes into
//! locked buffers) or one already warmed and locked. It never changes a byte, so it needs no
//! lock of the append path; the segment it works on is held by its `Arc` for the round.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::CommitLog;
use crate::file::mapped_file::{MappedFile, Populate};
use crate::file::mapped_file_queue::MappedFileQueue;

/// Bytes faulted in per system call, so that a stop or a close waits for one call at most.
const CHUNK: i64 = 2 * 1024 * 1024;

/// Where the prefault rounds stand.
#[derive(Debug)]
pub(crate) struct PrefaultState {
    /// Commitlog offset up to which pages were faulted in.
    end: i64,
    how: Populate,
}

impl Default for PrefaultState {
    fn default() -> Self {
        PrefaultState {
            end: 0,
            how: Populate::Write,
        }
    }
}

/// What the service has to do now: fault `[from, to)` (file positions) of `file` in.
struct Gap {
    file: Arc<MappedFile>,
    from: i64,
    to: i64,
}

/// The pages of the last segment not faulted in yet within `window` bytes of its write
/// position, once less than half the window is left (or the rest of the segment is shorter).
fn gap(queue: &MappedFileQueue, end: i64, window: i64) -> Option<Gap> {
    let file = queue.last()?;
    if file.has_write_buffer() || file.is_locked() || file.is_full() {
        return None;
    }
    let (base, size) = (file.file_from_offset(), file.file_size());
    let wrote = file.wrote_position();
    let to = wrote.saturating_add(window).min(size);
    let done = end.saturating_sub(base).clamp(wrote, size);
    let left = done - wrote;
    if done >= to || (left >= window / 2 && to < size) {
        return None;
    }
    Some(Gap {
        file,
        from: done,
        to,
    })
}

impl CommitLog {
    /// True when a prefault round would fault pages in now (see [`CommitLog::prefault`]).
    pub(crate) fn prefault_due(&self, window: i64) -> bool {
        if window <= 0 || self.read_only {
            return false;
        }
        let end = self.prefault.lock().unwrap_or_else(|p| p.into_inner()).end;
        gap(&self.queue, end, window).is_some()
    }

    /// One prefault round: faults in the pages of the segment being appended to from where the
    /// last round stopped (or the write position, when the appender passed it) up to `window`
    /// bytes past the write position, in chunks, until `stop`. Returns the bytes faulted in. A
    /// kernel refusal ends the round quietly (the appender faults the pages itself, as without
    /// the service) and is logged once per segment.
    pub(crate) fn prefault(&self, window: i64, stop: &AtomicBool) -> i64 {
        if window <= 0 || self.read_only {
            return 0;
        }
        let mut st = self.prefault.lock().unwrap_or_else(|p| p.into_inner());
        let Some(Gap { file, mut from, to }) = gap(&self.queue, st.end, window) else {
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
