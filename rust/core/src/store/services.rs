//! The step entry points of the background services: each call is one round (or a bounded run
//! of rounds) of allocation, commit, group commit, the flushes or dispatch, made by a Python
//! service thread without the GIL.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::dispatch::ReputStep;
use crate::error::Result;
use crate::file::allocate::ServiceStep;

use super::MessageStore;

/// How soon a prefault round looks at the write position again, at first and at most.
const PREFAULT_POLL: Duration = Duration::from_millis(1);
const PREFAULT_POLL_MAX: Duration = Duration::from_millis(4);

/// What one prefault round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PrefaultStep {
    /// Commitlog bytes faulted in ahead of the appender.
    pub bytes: i64,
    /// The services are stopping.
    pub stopped: bool,
}

impl MessageStore {
    /// From now on a service thread calls [`MessageStore::allocation_service_step`].
    pub fn attach_allocation_service(&self) {
        self.allocator.attach_service();
    }

    /// One round of the allocation service (see [`Allocator::service_step`]).
    pub fn allocation_service_step(&self, timeout: Duration) -> ServiceStep {
        self.allocator.service_step(timeout)
    }

    /// Segments pre-allocated and not yet used.
    pub fn preallocated_offsets(&self) -> Vec<i64> {
        self.allocator.ready_offsets()
    }

    /// One round of the prefault service: waits up to `timeout` until the appender is within
    /// half the distance ahead of the commitlog pages faulted in, then faults pages in up to
    /// that distance past its write position: 200 ms of appends at the measured rate, at least
    /// 2 MiB, at most `window` bytes (see `commitlog/prefault.rs`). `window` 0 only waits. It
    /// looks after 1 ms, then 2 ms, then every 4 ms (an idle store costs 250 looks a second; a
    /// producer appending 3 GB/s uses 12 MiB between two looks, less than the half of the
    /// default window left when a round ends). The store is held open only while looking and
    /// while faulting, so a close or truncation never waits for the wait.
    pub fn prefault_step(&self, window: i64, timeout: Duration) -> Result<PrefaultStep> {
        self.writable("the prefault service")?;
        let deadline = Instant::now() + timeout;
        let mut poll = PREFAULT_POLL;
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return Ok(PrefaultStep {
                    bytes: 0,
                    stopped: true,
                });
            }
            let bytes = self.with_open(|o| o.commitlog.prefault(window, &self.stopping))?;
            if bytes > 0 {
                return Ok(PrefaultStep {
                    bytes,
                    stopped: false,
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(PrefaultStep::default());
            }
            std::thread::sleep(poll.min(deadline - now));
            poll = (poll * 2).min(PREFAULT_POLL_MAX);
        }
    }

    /// Stops the background services' Rust side so their threads can be joined.
    pub fn stop_services(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.signal.wake();
        self.allocator.shutdown();
        self.commits.stop();
        self.tx.op_wake.stop();
        let _ = self.with_open(|o| o.commitlog.stop_group_commit());
    }

    /// One round of the commit service (`CommitRealTimeService`, transient store pool): waits
    /// up to `timeout` unless a put asked for a commit, then commits write buffers holding at
    /// least `least_pages` pages (0: anything).
    pub fn commit_step(
        &self,
        least_pages: i64,
        timeout: Duration,
    ) -> Result<crate::commitlog::CommitStep> {
        self.writable("the commit service")?;
        // Waits without holding the store open, so a truncation or close need not wait for it.
        let stopped = self.commits.wait(timeout);
        let committed = if stopped {
            false
        } else {
            self.with_open(|o| o.commitlog.commit_pages(least_pages))??
        };
        Ok(crate::commitlog::CommitStep { committed, stopped })
    }

    /// The transient store pool's buffers: (free, total), `None` when the pool is disabled
    /// (`remainTransientStoreBufferNumbs`).
    pub fn transient_store_pool_buffers(&self) -> Result<Option<(usize, usize)>> {
        self.with_open(|o| o.commitlog.pool().map(|p| (p.available(), p.total())))
    }

    /// How far the write buffers are committed into the commitlog files (`getCommittedWhere`);
    /// without the transient store pool, the written end.
    pub fn committed_where(&self) -> Result<i64> {
        self.with_open(|o| match o.commitlog.pool() {
            Some(_) => o.commitlog.queue().committed_where(),
            None => o.commitlog.max_offset(),
        })
    }

    // -- flush ------------------------------------------------------------------------------

    /// From now on a service thread calls [`MessageStore::group_commit_step`] (SYNC_FLUSH).
    pub fn attach_group_commit(&self) -> Result<()> {
        self.writable("group commit")?;
        self.with_open(|o| o.commitlog.attach_group_commit())
    }

    /// One round of the group-commit service.
    pub fn group_commit_step(
        &self,
        timeout: Duration,
    ) -> Result<crate::commitlog::GroupCommitStep> {
        self.writable("group commit")?;
        self.with_open(|o| o.commitlog.group_commit_step(timeout))
    }

    /// Group-commit rounds (each waiting up to `timeout` for a producer) until the services
    /// stop or `budget` has passed: the service thread comes back to Python between batches of
    /// rounds, not after every force, so it does not queue for the GIL behind the producers it
    /// is about to wake. `flushed` is true when any round forced.
    pub fn group_commit_run(
        &self,
        timeout: Duration,
        budget: Duration,
    ) -> Result<crate::commitlog::GroupCommitStep> {
        let start = Instant::now();
        let mut flushed = false;
        loop {
            let mut step = self.group_commit_step(timeout)?;
            flushed |= step.flushed;
            if step.stopped || start.elapsed() >= budget {
                step.flushed = flushed;
                return Ok(step);
            }
        }
    }

    /// Forces the group-commit service has done so far.
    pub fn group_commit_forces(&self) -> Result<u64> {
        self.with_open(|o| o.commitlog.group_commit_forces())
    }

    /// Producers waiting for a group-commit force now.
    pub fn group_commit_waiting(&self) -> Result<usize> {
        self.with_open(|o| o.commitlog.group_commit_waiting())
    }

    /// One round of the periodic commitlog flush (`FlushRealTimeService`); returns the flushed
    /// offset.
    pub fn flush_commitlog(&self, least_pages: i64) -> Result<i64> {
        self.writable("flush_commitlog")?;
        self.with_open(|o| o.commitlog.flush_pages(least_pages))?
    }

    /// One round of `FlushConsumeQueueService`: forces consume queues with at least
    /// `least_pages` pages waiting (0: anything).
    pub fn flush_consume_queues(&self, least_pages: i64) -> Result<()> {
        self.writable("flush_consume_queues")?;
        self.with_open(|o| o.flush_consume_queues(least_pages))?
    }

    /// Writes and forces the `checkpoint` file (every second, and at close).
    pub fn flush_checkpoint(&self) -> Result<()> {
        self.writable("flush_checkpoint")?;
        self.with_open(|o| o.flush_checkpoint())?
    }

    /// Re-reads the disk usage of the commitlog's and the consume queues' file systems (the
    /// DISK_FULL and LOGIC_DISK_FULL running flags), refusing or accepting puts from now on;
    /// returns the commitlog's used fraction (called every second by a service; the commitlog's
    /// alone is re-read at each new segment).
    pub fn check_disk_space(&self) -> Result<f64> {
        self.disk_ratios().map(|(physic, _)| physic)
    }

    /// How far the commitlog is forced to disk (`getFlushedWhere`).
    pub fn flushed_where(&self) -> Result<i64> {
        self.with_open(|o| o.commitlog.queue().flushed_where())
    }

    // -- dispatch ---------------------------------------------------------------------------

    /// One round of the dispatch service: dispatches up to `max_bytes` of confirmed records, or
    /// when there is nothing to do, parks up to `timeout` for new ones first.
    pub fn dispatch_step(&self, max_bytes: i64, timeout: Duration) -> Result<ReputStep> {
        self.writable("dispatch")?;
        self.with_open(|o| {
            if o.behind() == 0 && !self.stopping.load(Ordering::SeqCst) {
                self.signal.wait(timeout, || {
                    o.behind() > 0 || self.stopping.load(Ordering::SeqCst)
                });
            }
            o.dispatch(max_bytes)
        })?
    }

    /// Dispatch rounds of up to `max_bytes` each, as long as there is work, until the services
    /// stop or `budget` has passed (an idle round parks up to `timeout` and ends the run):
    /// under a steady trickle of puts (SYNC_FLUSH confirms a few messages per force) the
    /// service thread stays in Rust instead of queueing for the GIL after every round.
    pub fn dispatch_run(
        &self,
        max_bytes: i64,
        timeout: Duration,
        budget: Duration,
    ) -> Result<ReputStep> {
        let start = Instant::now();
        let mut total = self.dispatch_step(max_bytes, timeout)?;
        while total.bytes > 0 && !self.stopping.load(Ordering::SeqCst) {
            let left = budget.saturating_sub(start.elapsed());
            if left.is_zero() {
                break;
            }
            let step = self.dispatch_step(max_bytes, timeout.min(left))?;
            total.behind = step.behind;
            if step.bytes == 0 {
                break;
            }
            total.dispatched += step.dispatched;
            total.skipped += step.skipped;
            total.bytes += step.bytes;
            total.reput_offset = step.reput_offset;
            if step.last_store_timestamp != 0 {
                total.last_store_timestamp = step.last_store_timestamp;
            }
        }
        Ok(total)
    }

    /// Damaged records dispatch has passed over since the store opened: records whose topic or
    /// queue id is not one a put accepts (bytes outside the body CRC), which get no consume
    /// queue unit and no index entry, and are logged.
    pub fn skipped_records(&self) -> Result<u64> {
        self.with_open(|o| o.skipped_records.load(Ordering::Relaxed))
    }

    /// Confirmed commitlog bytes not dispatched yet (`dispatchBehindBytes`). At 0, every
    /// message put so far is visible to reads.
    pub fn dispatch_behind_bytes(&self) -> Result<i64> {
        self.with_open(|o| o.behind())
    }

    /// `getConfirmOffset`.
    pub fn confirm_offset(&self) -> Result<i64> {
        self.with_open(|o| o.commitlog.confirm_offset())
    }
}
