//! Waiting for another thread's progress: the spin-then-park policy and the mechanisms built
//! on it.
//!
//! - [`offset`]: threads that wait until an offset is reached (group commit's producers wait
//!   for the flushed offset to pass their record; HA will wait for a slave to ack an offset).
//! - [`signal`]: the condition a polling service thread sleeps on between rounds (dispatch).
//! - [`request`]: a service thread's sleep between rounds that other threads can cut short by
//!   asking for a round (the transient pool's commit, the transactions' op batches).
//!
//! Short waits spin before they sleep. Waking a sleeping thread on an idle CPU is slow where
//! CPUs are virtual (a halted vCPU must be woken by its host: 20-50 us measured on the
//! benchmark machine with `--example wake_latency`, 1-2 us on the same CPU), and a burst of
//! 32 producers hands the GIL and the group from thread to thread, so every sleeping
//! hand-off was paid in series. A waiter
//! that spins for a little while, giving the CPU away at each turn (`sched_yield`), keeps its
//! CPU awake for the next hand-off and sees its own event without a wake-up; past the window
//! it sleeps as before, so a slow disk or an idle store costs no CPU. The figures are in
//! `benches/README.md` (issue 4).

pub(crate) mod offset;
pub(crate) mod request;
pub(crate) mod signal;

pub(crate) use offset::{spin_then_park, Waiters};
pub(crate) use request::RoundRequests;
pub(crate) use signal::DataSignal;

use std::time::Instant;

/// Spins, giving the CPU away at each turn (`sched_yield`), until `done()` holds or `until`;
/// true when `done()` held.
#[inline]
pub(crate) fn spin_until(until: Instant, done: impl Fn() -> bool) -> bool {
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::yield_now();
    }
}
