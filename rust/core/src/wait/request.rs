//! The request a service thread sleeps on between rounds when other threads can ask it for one
//! (the commit service of the transient store pool, the op batch service of transactions): a
//! request costs one atomic load while one is already pending, and a system call only when it
//! is the first since the service last looked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

#[derive(Debug, Default)]
pub(crate) struct RoundRequests {
    /// Asked for since the service last looked.
    requested: AtomicBool,
    stopped: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

impl RoundRequests {
    fn guard(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the service for a round.
    pub(crate) fn request(&self) {
        if !self.requested.load(Ordering::Acquire) && !self.requested.swap(true, Ordering::AcqRel) {
            let _g = self.guard();
            self.cv.notify_all();
        }
    }

    /// Waits up to `timeout` for a request or a stop, then clears the request (a request made
    /// after this returns asks again); true once stopped.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let idle =
            || !self.requested.load(Ordering::Acquire) && !self.stopped.load(Ordering::Acquire);
        if idle() {
            let g = self.guard();
            if idle() {
                drop(
                    self.cv
                        .wait_timeout(g, timeout)
                        .unwrap_or_else(|p| p.into_inner()),
                );
            }
        }
        self.requested.store(false, Ordering::Release);
        self.stopped.load(Ordering::Acquire)
    }

    /// Ends every wait, now and later (the services stop).
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let _g = self.guard();
        self.cv.notify_all();
    }
}
