//! Group commit (`GroupCommitService`, SYNC_FLUSH): a producer waits until the flushed offset
//! passes its record; one service thread forces for all waiting producers at once, gathering
//! those the last force released before it forces again. The waiting itself (the list of
//! waiters, the relay that wakes them, spin-then-park) is [`crate::wait::offset`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::CommitLog;
use crate::wait::{spin_then_park, spin_until, Waiters};

/// Group commit (`GroupCommitService`): producers of SYNC_FLUSH puts wait here until their
/// bytes are forced; one service thread forces for all of them at once.
#[derive(Default)]
pub(super) struct GroupCommit {
    state: Mutex<GroupState>,
    /// A producer started waiting.
    request: Condvar,
    /// Set once under `state`; read by parked producers without the lock.
    stopped: AtomicBool,
    /// `state.waiters.len()`, kept under `state`: the service reads it without the lock while
    /// it spins for producers to come back.
    waiting: AtomicUsize,
}

impl GroupCommit {
    /// Publishes the number of waiting producers (called under `state`).
    fn publish_waiting(&self, st: &GroupState) {
        self.waiting.store(st.waiters.len(), Ordering::Release);
    }

    /// Spins, yielding the CPU, until `wanted` producers wait, the group is stopped or `until`.
    fn spin_for_waiters(&self, wanted: usize, until: Instant) {
        spin_until(until, || {
            self.waiting.load(Ordering::Acquire) >= wanted || self.stopped.load(Ordering::Acquire)
        });
    }
}

#[derive(Default)]
struct GroupState {
    /// Producers waiting for a force, each for the offset it needs forced, and those whose
    /// bytes are forced that are still to be woken (through a relay: a force of many
    /// producers' bytes costs the service a few wake-ups, not one per producer, and it starts
    /// the next force sooner; the wake-ups run on the producers' threads while the service
    /// waits for the disk).
    waiters: Waiters,
    /// The service waits on `request` until this many producers wait (usize::MAX while it
    /// forces: it looks at `waiters` before it waits again); only the put that reaches the
    /// count makes the system call.
    notify_at: usize,
    /// Producers the last force released, and how long that force took: the next round waits
    /// (at most that long) for as many to come back before it forces, so that a force covers
    /// every producer that is about to ask for one (PostgreSQL's `commit_delay` idea, bounded
    /// by the disk's own latency; a lone producer never waits).
    last_released: usize,
    last_force: Duration,
    attached: bool,
    stopped: bool,
    forces: u64,
}

/// The longest a group-commit round waits for producers released by the last force.
const MAX_GATHER: Duration = Duration::from_millis(1);
/// Short waits spin before they sleep (why: [`crate::wait`]).
///
/// How long a producer that waits with others spins before it parks (a lone producer parks at
/// once: nobody hands anything on to it).
const PRODUCER_SPIN: Duration = Duration::from_micros(50);
/// How long, at most, the service spins while it gathers the producers of the last force
/// (within the gather window, which is bounded by the last force's duration; not at all when
/// the last force released nobody).
const GATHER_SPIN: Duration = Duration::from_micros(300);

/// What one group-commit round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupCommitStep {
    pub flushed: bool,
    pub stopped: bool,
    /// Forces done so far.
    pub forces: u64,
}

impl CommitLog {
    /// Waits until the commitlog is forced up to `target`. Without a group-commit service the
    /// caller forces it itself.
    pub(super) fn await_flush(&self, target: i64) -> bool {
        if self.queue.flushed_where() >= target {
            return true;
        }
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        if !st.attached || st.stopped {
            drop(st);
            return match self.flush_all() {
                Ok(flushed) => flushed >= target,
                Err(e) => {
                    log::error!(target: "rmqstore.flush", "force failed: {e}");
                    false
                }
            };
        }
        let me = st.waiters.push(target);
        self.group.publish_waiting(&st);
        if st.waiters.len() >= st.notify_at {
            self.group.request.notify_one();
        }
        let grouped = st.waiters.len() > 1 || st.last_released > 1;
        drop(st);
        let begin = Instant::now();
        let deadline = begin + self.sync_flush_timeout;
        let spin_until = begin
            + if grouped {
                PRODUCER_SPIN
            } else {
                Duration::ZERO
            };
        // Spins for a moment (see PRODUCER_SPIN), then parks until the service unparks this
        // thread (its target forced) or the deadline; the flushed offset decides, so a stray
        // unpark only costs one more look.
        let ok = spin_then_park(
            || self.queue.flushed_where() >= target,
            &self.group.stopped,
            spin_until,
            deadline,
        );
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        // Off the lists, whichever way this wait ended, passing the wake-up on (so none is
        // ever dropped).
        let next = st.waiters.leave(&me);
        self.group.publish_waiting(&st);
        drop(st);
        next.into_iter().for_each(|t| t.unpark());
        ok
    }

    /// Forces the group-commit rounds have done so far.
    pub(crate) fn group_commit_forces(&self) -> u64 {
        self.group
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .forces
    }

    /// Producers waiting for a force now.
    pub(crate) fn group_commit_waiting(&self) -> usize {
        self.group.waiting.load(Ordering::Acquire)
    }

    /// From now on a service thread calls [`CommitLog::group_commit_step`].
    pub(crate) fn attach_group_commit(&self) {
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        st.attached = true;
    }

    /// Stops group commit: waiting producers return (FLUSH_DISK_TIMEOUT unless forced).
    pub(crate) fn stop_group_commit(&self) {
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        st.stopped = true;
        self.group.stopped.store(true, Ordering::Release);
        self.group.request.notify_all();
        for t in st.waiters.drain() {
            t.unpark();
        }
        self.group.publish_waiting(&st);
    }

    /// One round of the group-commit service: waits up to `timeout` for a waiting producer,
    /// then forces everything written (RocketMQ forces every round, requests or not).
    pub(crate) fn group_commit_step(&self, timeout: Duration) -> GroupCommitStep {
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        let start = Instant::now();
        let gather_until = start + st.last_force.min(MAX_GATHER);
        // Spins only for producers the last force released: none is coming back after a
        // round that released nobody (an idle store, or puts that do not wait).
        let spin_until = if st.last_released > 0 {
            start + st.last_force.min(GATHER_SPIN)
        } else {
            start
        };
        let wanted = st.last_released.max(1);
        loop {
            let waiting = st.waiters.len();
            if st.stopped || waiting >= wanted {
                break;
            }
            let now = Instant::now();
            if now < spin_until {
                // The producers of the last force are on their way back: spin for them (see
                // GATHER_SPIN) rather than sleep until the last one's notify wakes this thread.
                drop(st);
                self.group.spin_for_waiters(wanted, spin_until);
                st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
                continue;
            }
            let until = if now < gather_until {
                // Gathering: wake when `wanted` producers wait, or at the end of the window.
                st.notify_at = wanted;
                gather_until
            } else if waiting > 0 {
                break;
            } else if now < start + timeout {
                // Nobody waits: the first producer to come starts the force.
                st.notify_at = 1;
                start + timeout
            } else {
                // A round forces even without producers (RocketMQ's 10 ms rounds).
                break;
            };
            st = self
                .group
                .request
                .wait_timeout(st, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        st.notify_at = usize::MAX;
        if st.stopped {
            return GroupCommitStep {
                flushed: false,
                stopped: true,
                forces: st.forces,
            };
        }
        drop(st);
        let before = self.queue.flushed_where();
        let forcing = Instant::now();
        let result = self.flush_all();
        let took = forcing.elapsed();
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        st.last_force = took;
        let flushed = matches!(result, Ok(after) if after > before);
        if flushed {
            st.forces += 1;
        }
        let failed = result.is_err();
        if let Err(e) = result {
            log::error!(target: "rmqstore.flush", "group commit force failed: {e}");
        }
        // Wake exactly the producers whose bytes are now forced: a few here, the rest through
        // the relay.
        let forced = self.queue.flushed_where();
        let (released, done) = st.waiters.release(forced);
        self.group.publish_waiting(&st);
        st.last_released = released;
        let forces = st.forces;
        drop(st);
        done.into_iter().for_each(|t| t.unpark());
        if failed {
            // Waiting producers stay listed, so the next round would start at once: pace the
            // retries (they time out with FLUSH_DISK_TIMEOUT if forcing keeps failing).
            std::thread::sleep(timeout);
        }
        GroupCommitStep {
            flushed,
            stopped: false,
            forces,
        }
    }
}
