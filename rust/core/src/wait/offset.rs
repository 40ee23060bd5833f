//! Threads that wait until an offset is reached: each lists the offset it needs, spins for a
//! moment, then parks; whoever moves the offset on releases the threads it satisfied and wakes
//! them through a relay.
//!
//! The parts ([`Waiters`], [`spin_then_park`]) are for owners that keep the waiting list under
//! a lock of their own together with other state (group commit keeps its gathering state there:
//! see `commitlog/group_commit.rs`). [`OffsetWait`] puts them together for an owner with nothing
//! else to lock: publish "reached X", wait until X is reached with a timeout.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How many threads the releaser and each woken waiter unpark from the relay.
pub(crate) const RELAY_FANOUT: usize = 2;

/// The threads waiting for an offset, kept under their owner's lock.
#[derive(Default)]
pub(crate) struct Waiters {
    /// The offset each thread needs reached, and the thread to unpark once it is (only those
    /// are woken, as RocketMQ completes each request's future).
    waiting: Vec<(i64, Thread)>,
    /// Threads whose offset is reached and that are still to be unparked. The releaser unparks
    /// a few and each thread it wakes unparks a few more before it returns (a relay), so a
    /// release of many threads costs the releaser a few wake-ups, not one per thread, and it
    /// goes back to its own work sooner; the wake-ups run on the waiters' threads.
    relay: Vec<Thread>,
}

impl Waiters {
    /// Threads waiting (not yet released).
    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Lists the calling thread as waiting until `target` is reached; returns its handle for
    /// [`Waiters::leave`].
    pub(crate) fn push(&mut self, target: i64) -> Thread {
        let me = std::thread::current();
        self.waiting.push((target, me.clone()));
        me
    }

    /// Moves the threads waiting for an offset up to `reached` to the relay, in the order they
    /// came; returns how many, and the first few to unpark now (after the owner's lock is
    /// dropped).
    pub(crate) fn release(&mut self, reached: i64) -> (usize, Vec<Thread>) {
        let Waiters { waiting, relay } = self;
        let before_release = relay.len();
        waiting.retain(|(target, t)| {
            let ready = *target <= reached;
            if ready {
                relay.push(t.clone());
            }
            !ready
        });
        let released = relay.len() - before_release;
        (released, self.take_relay())
    }

    /// Takes `me` off both lists, whichever way its wait ended, and returns the next threads
    /// to unpark (the relay is passed on even by a wait that timed out, so no wake-up is ever
    /// dropped).
    pub(crate) fn leave(&mut self, me: &Thread) -> Vec<Thread> {
        // The entry is still listed if the wait timed out or stopped, or if it saw its offset
        // before the releaser took the lock again (a spinning waiter often does): left there,
        // the releaser would put a thread that is no longer waiting in the relay.
        self.waiting.retain(|(_, t)| t.id() != me.id());
        // Done waiting (perhaps before the relay reached this thread): no unpark is owed to
        // it any more, so none is spent on it while it waits for a later offset.
        self.relay.retain(|t| t.id() != me.id());
        self.take_relay()
    }

    /// Empties both lists (a stop): every thread in them, to unpark.
    pub(crate) fn drain(&mut self) -> Vec<Thread> {
        let mut all: Vec<Thread> = self.waiting.drain(..).map(|(_, t)| t).collect();
        all.append(&mut self.relay);
        all
    }

    /// Up to [`RELAY_FANOUT`] threads to unpark next.
    fn take_relay(&mut self) -> Vec<Thread> {
        let n = self.relay.len().min(RELAY_FANOUT);
        self.relay.drain(..n).collect()
    }
}

/// Waits until `reached()` holds: spins, giving the CPU away at each turn, until `spin_until`,
/// then parks until unparked or `deadline`. Gives up (false) at `deadline` or once `stopped` is
/// set. `reached()` decides, so a stray unpark only costs one more look.
#[inline]
pub(crate) fn spin_then_park(
    reached: impl Fn() -> bool,
    stopped: &AtomicBool,
    spin_until: Instant,
    deadline: Instant,
) -> bool {
    loop {
        if reached() {
            break true;
        }
        let now = Instant::now();
        if now >= deadline || stopped.load(Ordering::Acquire) {
            break false;
        }
        if now < spin_until {
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(deadline - now);
        }
    }
}

/// An offset that only moves forward, and the threads waiting for it to reach theirs: the
/// shape of HA's "wait until the slave acked X" (group commit uses the same parts under its
/// own lock).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct OffsetWait {
    reached: AtomicI64,
    stopped: AtomicBool,
    waiters: Mutex<Waiters>,
    /// How long a waiter that waits with others spins before it parks (a lone waiter parks at
    /// once: nobody hands anything on to it).
    spin: Duration,
}

#[cfg_attr(not(test), allow(dead_code))]
impl OffsetWait {
    /// `reached` is the offset reached so far.
    pub(crate) fn new(reached: i64, spin: Duration) -> OffsetWait {
        OffsetWait {
            reached: AtomicI64::new(reached),
            stopped: AtomicBool::new(false),
            waiters: Mutex::new(Waiters::default()),
            spin,
        }
    }

    /// The offset reached so far.
    pub(crate) fn reached(&self) -> i64 {
        self.reached.load(Ordering::Acquire)
    }

    /// Threads waiting now.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().len()
    }

    /// Publishes that `offset` is reached (a lower offset than one published before changes
    /// nothing) and wakes the threads waiting for it.
    pub(crate) fn publish(&self, offset: i64) {
        let reached = self.reached.fetch_max(offset, Ordering::AcqRel).max(offset);
        let (_, wake) = self.lock().release(reached);
        wake.into_iter().for_each(|t| t.unpark());
    }

    /// Waits until `target` is reached; false after `timeout` or once stopped.
    pub(crate) fn wait(&self, target: i64, timeout: Duration) -> bool {
        if self.reached() >= target {
            return true;
        }
        let mut w = self.lock();
        if self.stopped.load(Ordering::Acquire) {
            return false;
        }
        let me = w.push(target);
        let grouped = w.len() > 1;
        drop(w);
        let begin = Instant::now();
        let deadline = begin
            .checked_add(timeout)
            .unwrap_or_else(|| begin + Duration::from_secs(365 * 24 * 3600));
        let spin_until = begin + if grouped { self.spin } else { Duration::ZERO };
        let ok = spin_then_park(
            || self.reached() >= target,
            &self.stopped,
            spin_until,
            deadline,
        );
        let next = self.lock().leave(&me);
        next.into_iter().for_each(|t| t.unpark());
        ok
    }

    /// Ends every wait, now and later (those not reached return false).
    pub(crate) fn stop(&self) {
        let mut w = self.lock();
        self.stopped.store(true, Ordering::Release);
        w.drain().into_iter().for_each(|t| t.unpark());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Mutex};

    const LONG: Duration = Duration::from_secs(30);

    /// Waits (bounded) until `n` threads wait on `w`.
    fn until_waiting(w: &OffsetWait, n: usize) {
        let end = Instant::now() + LONG;
        while w.waiting() < n {
            assert!(Instant::now() < end, "waiters never arrived");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn reached_offsets_return_at_once() {
        let w = OffsetWait::new(100, Duration::ZERO);
        assert!(w.wait(100, Duration::ZERO));
        assert!(w.wait(-5, Duration::ZERO));
        assert_eq!(w.waiting(), 0);
    }

    #[test]
    fn a_wait_times_out_and_leaves_the_list() {
        let w = OffsetWait::new(0, Duration::from_micros(50));
        let t = Instant::now();
        assert!(!w.wait(1, Duration::from_millis(30)));
        assert!(t.elapsed() >= Duration::from_millis(30));
        assert_eq!(w.waiting(), 0);
        // A later publish finds nobody to wake, and a new wait for it returns at once.
        w.publish(1);
        assert!(w.wait(1, Duration::ZERO));
    }

    #[test]
    fn offsets_only_move_forward() {
        let w = OffsetWait::new(0, Duration::ZERO);
        w.publish(10);
        w.publish(4);
        assert_eq!(w.reached(), 10);
    }

    #[test]
    fn publish_wakes_exactly_the_waiters_it_satisfies_in_offset_order() {
        for spin in [Duration::ZERO, Duration::from_micros(50)] {
            let w = Arc::new(OffsetWait::new(0, spin));
            let woken = Arc::new(Mutex::new(Vec::new()));
            let threads: Vec<_> = (1..=6i64)
                .map(|target| {
                    let (w, woken) = (w.clone(), woken.clone());
                    std::thread::spawn(move || {
                        assert!(w.wait(target * 10, LONG));
                        woken.lock().unwrap().push(target * 10);
                    })
                })
                .collect();
            until_waiting(&w, 6);
            for step in 1..=6i64 {
                w.publish(step * 10);
                let end = Instant::now() + LONG;
                while woken.lock().unwrap().len() < step as usize {
                    assert!(Instant::now() < end, "waiter for {} not woken", step * 10);
                    std::thread::sleep(Duration::from_millis(1));
                }
                // Nobody past the published offset returned.
                std::thread::sleep(Duration::from_millis(5));
                assert_eq!(woken.lock().unwrap().len(), step as usize);
                assert_eq!(w.waiting(), (6 - step) as usize);
            }
            threads.into_iter().for_each(|t| t.join().unwrap());
            assert_eq!(*woken.lock().unwrap(), vec![10, 20, 30, 40, 50, 60]);
        }
    }

    #[test]
    fn one_publish_releases_many_waiters_through_the_relay() {
        let w = Arc::new(OffsetWait::new(0, Duration::from_micros(50)));
        let done = Arc::new(AtomicUsize::new(0));
        let n = 32;
        let threads: Vec<_> = (0..n)
            .map(|i| {
                let (w, done) = (w.clone(), done.clone());
                std::thread::spawn(move || {
                    assert!(w.wait(1 + i as i64 % 4, LONG));
                    done.fetch_add(1, Ordering::AcqRel);
                })
            })
            .collect();
        until_waiting(&w, n);
        let t = Instant::now();
        w.publish(4);
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(done.load(Ordering::Acquire), n);
        // Parked threads woke from the relay, not from their (30 s) timeout.
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_eq!(w.waiting(), 0);
    }

    #[test]
    fn stop_ends_every_wait() {
        let w = Arc::new(OffsetWait::new(0, Duration::ZERO));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let w = w.clone();
                std::thread::spawn(move || w.wait(100, LONG))
            })
            .collect();
        until_waiting(&w, 4);
        let t = Instant::now();
        w.stop();
        for th in threads {
            assert!(!th.join().unwrap());
        }
        assert!(t.elapsed() < Duration::from_secs(10));
        // Reached offsets still answer; others fail at once.
        assert!(w.wait(0, LONG));
        assert!(!w.wait(1, LONG));
    }

    #[test]
    fn waiters_release_in_arrival_order_and_relay_a_few_at_a_time() {
        let mut w = Waiters::default();
        // Handles of this thread stand in for the waiters (ids are what is compared).
        for target in [5, 1, 9, 3, 7] {
            w.push(target);
        }
        let (released, now) = w.release(5);
        assert_eq!(released, 3);
        assert_eq!(now.len(), RELAY_FANOUT);
        assert_eq!(w.len(), 2);
        // The last released is still in the relay; a waiter leaving passes it on.
        let other = std::thread::spawn(std::thread::current).join().unwrap();
        let next = w.leave(&other);
        assert_eq!(next.len(), 1);
        assert_eq!(w.len(), 2);
        assert_eq!(w.drain().len(), 2);
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn spin_then_park_gives_up_at_the_deadline_or_when_stopped() {
        let stopped = AtomicBool::new(false);
        let now = Instant::now();
        assert!(!spin_then_park(
            || false,
            &stopped,
            now + Duration::from_millis(2),
            now + Duration::from_millis(10)
        ));
        assert!(now.elapsed() >= Duration::from_millis(10));
        stopped.store(true, Ordering::Release);
        assert!(!spin_then_park(|| false, &stopped, now, now + LONG));
        assert!(spin_then_park(|| true, &stopped, now, now));
    }
}
