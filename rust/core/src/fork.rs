//! `fork()` awareness. A forked child gets a copy of the parent's memory with only the thread
//! that called `fork`: locks the parent's other threads held stay locked forever in the child,
//! service threads are gone, and the files are still the parent's. A store opened before a
//! fork therefore must never be touched by the child (not even to close it, which would block
//! on such a lock or write the parent's files). A `pthread_atfork` child handler counts forks;
//! a store remembers the count it was opened under and refuses every call (and does nothing
//! when dropped) in a process that has forked since. The handler also closes the child's copies
//! of the parent's lock descriptors (see [`crate::file::lockfile`]), so a child never keeps its
//! parent's store locked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static FORKS: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

extern "C" fn in_child() {
    // Only atomics and `close`: async-signal-safe, as a fork child handler must be.
    FORKS.fetch_add(1, Ordering::SeqCst);
    crate::file::lockfile::forget_in_child();
}

/// The number of forks this process is away from the one that first asked (registering the
/// handler on that first call, which store opening does).
pub fn generation() -> u64 {
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic. A failure (ENOMEM) leaves
        // fork detection off, which is logged.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            log::warn!(
                target: "rmqstore.store",
                "cannot register a fork handler (error {rc}): a forked child would not be \
                 stopped from using its parent's stores"
            );
        }
    });
    FORKS.load(Ordering::SeqCst)
}
