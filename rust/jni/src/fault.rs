//! Reads of files that shrink under them. The core reads a store through shared mappings of
//! its files; a file that another process truncates (a segment cut to zero, a store replaced)
//! leaves pages of the mapping with no file behind them, and touching one raises SIGBUS, which
//! in a JVM kills the process (its handler crashes on a fault in native code). Deleting a file
//! is harmless on Linux (the mapping keeps it), truncating is not.
//!
//! [`guarded`] runs a core call with a SIGBUS handler armed for the calling thread: a fault in
//! it maps a private page of zeros over the faulting page (so the access completes), notes the
//! address, and the call's result is replaced by a `StoreError::Io` naming it: the JNI entry
//! point throws `StoreIOException` and nothing read by that call is used. A SIGBUS on any other
//! thread, or outside a guarded call, goes to the handler that was there before (the JVM's,
//! which turns a fault in `Unsafe` accesses, such as Arrow Java reading a body that points into
//! a mapping, into an `InternalError`; Spark's executor takes that for fatal, which is why the
//! connector has the core copy bodies unless `binary_view` bodies are asked for). The zero page
//! stays in the store's mapping until the store is closed: later reads of that page find
//! zeros, which a commitlog record's checks (magic, size, CRC) refuse; a consume queue page of
//! zeros reads as units not written yet (not a fault, not stale bytes either).

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

use rmqstore_core::StoreError;

thread_local! {
    /// Whether this thread is inside [`guarded`].
    static ARMED: Cell<bool> = const { Cell::new(false) };
    /// The first address that faulted in this thread's current guarded call, plus one (0: none).
    static FAULT: Cell<usize> = const { Cell::new(0) };
}

static INSTALL: Once = Once::new();
/// The SIGBUS action before ours (the JVM's), to pass other faults on to.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static PAGE: AtomicUsize = AtomicUsize::new(4096);

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let armed = ARMED.try_with(Cell::get).unwrap_or(false);
    if armed && !info.is_null() {
        // SAFETY: the kernel passes a valid siginfo_t for a SA_SIGINFO handler.
        let addr = unsafe { (*info).si_addr() } as usize;
        let page = PAGE.load(Ordering::Relaxed);
        let base = addr & !(page - 1);
        // SAFETY: replaces one page of a file mapping of the store (the faulting access was in
        // the core's read of it) with anonymous zeros; nothing else is at that address.
        let mapped = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if mapped != libc::MAP_FAILED {
            let _ = FAULT.try_with(|f| {
                if f.get() == 0 {
                    f.set(addr.wrapping_add(1));
                }
            });
            return;
        }
    }
    pass_on(sig, info, ctx);
}

/// Hands a fault that is not ours to the previous action (or the default one, which ends the
/// process as it would have without this handler).
fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let previous = PREVIOUS.get();
    match previous {
        Some(old) if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN => {
            if old.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: with SA_SIGINFO, sa_sigaction is a three-argument handler.
                type Action = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
                let handler = unsafe { std::mem::transmute::<usize, Action>(old.sa_sigaction) };
                handler(sig, info, ctx);
            } else {
                // SAFETY: without SA_SIGINFO, sa_sigaction is a one-argument handler.
                let handler = unsafe {
                    std::mem::transmute::<usize, extern "C" fn(libc::c_int)>(old.sa_sigaction)
                };
                handler(sig);
            }
        }
        _ => {
            // The default action: the faulting access runs again and ends the process.
            // SAFETY: a zeroed sigaction with SIG_DFL is a valid argument.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
    }
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sysconf and sigaction with valid pointers; the previous action is kept
        // before ours is installed, so the handler always finds it.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE.store(page as usize, Ordering::Relaxed);
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                return;
            }
            let _ = PREVIOUS.set(old);
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_sigbus as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut());
        }
    });
}

/// Runs `read` (a core call over the store's mappings) with faults on shrunken files turned
/// into an error (see the module docs). `what` names the store in the message.
pub fn guarded<T>(
    what: &std::path::Path,
    read: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    install();
    let outer = ARMED.with(|a| a.replace(true));
    if !outer {
        FAULT.with(|f| f.set(0));
    }
    let result = read();
    if outer {
        return result;
    }
    ARMED.with(|a| a.set(false));
    match FAULT.with(|f| f.replace(0)) {
        0 => result,
        addr => Err(StoreError::io(
            format!(
                "reading mapped store files (a page at {:#x} is past its file's end: a file was \
                 truncated under the read)",
                addr - 1
            ),
            what,
            io::Error::from_raw_os_error(libc::EFAULT),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_truncated_mapping_reads_as_an_error_not_a_crash() {
        let dir = std::env::temp_dir().join(format!("rmq-fault-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("segment");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&vec![7u8; 1 << 16]).unwrap();
        f.sync_all().unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a private read-only test mapping of a file this test owns.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        let sum = |from: usize| map[from..].iter().map(|&b| b as u64).sum::<u64>();
        assert_eq!(guarded(&path, || Ok(sum(0))).unwrap(), 7 << 16);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let err = guarded(&path, || Ok(sum(0))).unwrap_err();
        assert!(
            err.to_string().contains("truncated under the read"),
            "{err}"
        );
        assert!(err.to_string().contains("segment"), "{err}");
        // The pages that faulted now read as zeros (what the core's record checks refuse);
        // the part of the file that is left reads as it is.
        assert_eq!(guarded(&path, || Ok(sum(0))).unwrap(), 7 * 4096);
        // Outside a guarded call nothing changed: no handler state is left armed.
        assert!(!ARMED.with(Cell::get));
        assert_eq!(FAULT.with(Cell::get), 0);
        drop(map);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
