//! Moving appended bytes to disk: the commit service's round (transient store pool: write
//! buffers copied into the files, `CommitRealTimeService`), the flush service's round
//! (`FlushRealTimeService`) and a full commit-and-force.

use super::CommitLog;
use crate::error::Result;

/// The commit service's side of the transient store pool (`CommitRealTimeService`): puts ask
/// for a commit round without a system call unless the service is idle. Shared with the store,
/// so that the service waits without holding the store open (a truncation or close waits for
/// calls in flight).
pub(crate) type CommitRequests = crate::wait::RoundRequests;

/// What one commit round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStep {
    /// Bytes were committed (readable now).
    pub committed: bool,
    pub stopped: bool,
}

impl CommitLog {
    /// `CommitRealTimeService`'s round: commits the write buffers holding at least
    /// `least_pages` uncommitted pages (0: anything); true when bytes were committed.
    pub(crate) fn commit_pages(&self, least_pages: i64) -> Result<bool> {
        if self.pool.is_none() {
            return Ok(false);
        }
        let _g = self.commit_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut moved = false;
        // A round may finish one segment and start the next (RocketMQ commits one per call
        // and loops on its next round; this does the same work without the wait).
        for _ in 0..self.queue.files().len() + 1 {
            if self.queue.commit(least_pages)? {
                break;
            }
            moved = true;
        }
        Ok(moved)
    }

    /// `FlushRealTimeService`'s round: forces the segment holding the flushed position when at
    /// least `least_pages` pages are waiting (0: anything), returns the flushed offset.
    pub(crate) fn flush_pages(&self, least_pages: i64) -> Result<i64> {
        let _g = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        let moved = !self.queue.flush(least_pages)?;
        if moved && self.sync_flush {
            self.signal.wake();
        }
        Ok(self.queue.flushed_where())
    }

    /// Commits and forces everything written to disk; returns the flushed offset.
    pub(crate) fn flush_all(&self) -> Result<i64> {
        self.commit_pages(0)?;
        let _g = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..self.queue.files().len() + 1 {
            if self.queue.flush(0)? {
                break;
            }
        }
        if self.sync_flush {
            self.signal.wake();
        }
        Ok(self.queue.flushed_where())
    }
}
