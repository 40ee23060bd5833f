//! The signal dispatch sleeps on between rounds.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// How dispatch waits for new bytes. Puts do not signal (a wake-up per put would cost every
/// producer a system call whenever dispatch is idle); dispatch polls every millisecond while
/// idle, as RocketMQ's reput thread does, and is woken at once only for shutdown.
#[derive(Default)]
pub(crate) struct DataSignal {
    lock: Mutex<()>,
    cv: Condvar,
}

/// Poll interval of an idle dispatcher (RocketMQ's reput sleeps 1 ms between rounds).
pub(crate) const DISPATCH_POLL: Duration = Duration::from_millis(1);

impl DataSignal {
    /// Waits up to `timeout` until `ready()` holds, checking every [`DISPATCH_POLL`].
    pub(crate) fn wait(&self, timeout: Duration, ready: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + timeout;
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while !ready() {
            let now = std::time::Instant::now();
            if now >= deadline {
                return;
            }
            g = self
                .cv
                .wait_timeout(g, DISPATCH_POLL.min(deadline - now))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Wakes a waiter at once (shutdown, or a flush that confirmed new bytes).
    pub(crate) fn wake(&self) {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn wait_returns_when_ready_or_at_the_timeout() {
        let s = DataSignal::default();
        let t = Instant::now();
        s.wait(Duration::from_millis(20), || false);
        assert!(t.elapsed() >= Duration::from_millis(20));
        let t = Instant::now();
        s.wait(Duration::from_secs(30), || true);
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_waiter_sees_readiness_by_polling_or_by_a_wake() {
        let s = Arc::new(DataSignal::default());
        let ready = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (s, ready) = (s.clone(), ready.clone());
            std::thread::spawn(move || {
                let t = Instant::now();
                s.wait(Duration::from_secs(30), || ready.load(Ordering::Acquire));
                t.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(10));
        ready.store(true, Ordering::Release);
        s.wake();
        assert!(waiter.join().unwrap() < Duration::from_secs(10));
    }
}
