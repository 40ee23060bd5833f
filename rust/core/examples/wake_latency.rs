//! How long one thread takes to wake another on this machine: two threads hand a counter back
//! and forth, sleeping (`park`) or spinning (`yield_now`) while they wait. Group commit's
//! spin-before-sleep windows (`PRODUCER_SPIN`, `GATHER_SPIN` in `commitlog/group_commit.rs`)
//! exist because a sleeping hand-off between the CPUs of a virtual machine costs tens of
//! microseconds.
//!
//! `cargo run --release -p rmqstore-core --example wake_latency [hand-offs]`; run it under
//! `taskset -c 0` to see the cost of a wake-up on the same CPU.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Waits until `turn` holds `want`, spinning or parking.
fn wait_for(turn: &AtomicU64, want: u64, spin: bool) {
    while turn.load(Ordering::Acquire) != want {
        if spin {
            std::thread::yield_now();
        } else {
            std::thread::park();
        }
    }
}

/// Time of one hand-off, measured over `n` round trips.
fn one_hand_off(n: u64, spin: bool) -> Duration {
    let turn = Arc::new(AtomicU64::new(0));
    let main = std::thread::current();
    let other_turn = Arc::clone(&turn);
    let other = std::thread::spawn(move || {
        for i in 0..n {
            wait_for(&other_turn, 2 * i + 1, spin);
            other_turn.store(2 * i + 2, Ordering::Release);
            main.unpark();
        }
    });
    let other_thread: Thread = other.thread().clone();
    let start = Instant::now();
    for i in 0..n {
        turn.store(2 * i + 1, Ordering::Release);
        other_thread.unpark();
        wait_for(&turn, 2 * i + 2, spin);
    }
    let took = start.elapsed();
    other.join().expect("the other thread ended normally");
    took / u32::try_from(2 * n).unwrap_or(u32::MAX)
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    for _ in 0..3 {
        let park = one_hand_off(n, false);
        let spin = one_hand_off(n, true);
        println!(
            "one hand-off: sleeping (park/unpark) {:.2} us, spinning (sched_yield) {:.2} us",
            park.as_secs_f64() * 1e6,
            spin.as_secs_f64() * 1e6
        );
    }
}
