//! The store's `lock` file: taken before anything else is read or written, held while open.
//!
//! RocketMQ takes `FileChannel.tryLock(0, 1, false)` on `<root>/lock`, which on Linux is a
//! traditional POSIX record lock (`fcntl(F_SETLK)`). We take an open-file-description lock
//! (`F_OFD_SETLK`) on the same byte: the kernel makes the two kinds conflict, so a RocketMQ
//! broker and rmqstore exclude each other. Unlike a traditional lock, an OFD lock is not dropped
//! when the process closes some other descriptor of the file (reading `lock` elsewhere in the
//! process must not unlock the store), and it conflicts between two opens in one process too.
//! A process-wide table of open folders gives that case a clearer message.
//!
//! An OFD lock lives as long as any descriptor of its open file description: a forked child
//! inherits the lock file's descriptor, and would keep the parent's lock held after the parent
//! closed the store (its reopen would then be refused until the child exits). The table keeps
//! each lock's descriptor, and a fork child handler closes them ([`forget_in_child`]): the
//! child never holds its parent's locks. The table is a fixed array of atomics behind a spin
//! lock, so that the handler (which may not allocate or wait) can read and reset it.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use crate::error::{Result, StoreError};

/// Most stores one process holds open at once.
pub(crate) const MAX_OPEN_STORES: usize = 1024;

/// One open store: its folder's device and inode, and its lock file's descriptor (-1: free).
struct Slot {
    dev: AtomicU64,
    ino: AtomicU64,
    fd: AtomicI32,
}

#[allow(clippy::declare_interior_mutable_const)] // the array initializer, one fresh slot each
const FREE: Slot = Slot {
    dev: AtomicU64::new(0),
    ino: AtomicU64::new(0),
    fd: AtomicI32::new(-1),
};
static SLOTS: [Slot; MAX_OPEN_STORES] = [FREE; MAX_OPEN_STORES];
static TABLE_BUSY: AtomicBool = AtomicBool::new(false);

/// Holds the table (a spin lock: held only to scan 1024 atomics).
struct TableGuard;

impl TableGuard {
    fn take() -> TableGuard {
        while TABLE_BUSY
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        TableGuard
    }

    fn find(&self, key: (u64, u64)) -> Option<&'static Slot> {
        SLOTS.iter().find(|s| {
            s.fd.load(Ordering::Relaxed) >= 0
                && (s.dev.load(Ordering::Relaxed), s.ino.load(Ordering::Relaxed)) == key
        })
    }
}

impl Drop for TableGuard {
    fn drop(&mut self) {
        TABLE_BUSY.store(false, Ordering::Release);
    }
}

/// In a fork child (from `crate::fork`'s handler, with one thread): closes the child's copies
/// of the lock descriptors of every store the parent holds open, and empties the table, so the
/// child holds none of its parent's locks and can open stores of its own. Only atomics and
/// `close`: async-signal-safe.
pub(crate) fn forget_in_child() {
    for s in &SLOTS {
        let fd = s.fd.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: the child's copy of a descriptor the parent's StoreLock owns; the child
            // never drops that StoreLock (stores opened before a fork are leaked there).
            unsafe { libc::close(fd) };
        }
    }
    TABLE_BUSY.store(false, Ordering::Release);
}

/// The content RocketMQ writes into the lock file.
const LOCK_CONTENT: &[u8] = b"lock";

#[derive(Debug)]
pub(crate) struct StoreLock {
    file: File,
    key: (u64, u64),
    path: PathBuf,
}

/// A write lock on byte 0, the range RocketMQ locks.
fn write_lock() -> libc::flock {
    // SAFETY: an all-zero flock is a valid value; fields are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 1;
    fl
}

/// Who holds the conflicting lock, as far as the kernel says.
fn holder(file: &File) -> String {
    let mut probe = write_lock();
    // SAFETY: fcntl on an owned descriptor with a valid flock. F_GETLK reports the pid of a
    // traditional lock (RocketMQ's); OFD locks report -1.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut probe) };
    if rc == 0 && probe.l_type != libc::F_UNLCK as libc::c_short && probe.l_pid > 0 {
        format!("by process {}", probe.l_pid)
    } else {
        "by another process".to_string()
    }
}

impl StoreLock {
    /// Locks the store folder `root` (which must exist). Nothing is written (the lock file is
    /// created empty if missing, and never removed: removing it could let two processes lock two
    /// different files); see [`StoreLock::mark_open`].
    pub(crate) fn acquire(root: &Path) -> Result<StoreLock> {
        crate::fork::generation(); // registers the fork handler before a lock is held
        let meta = std::fs::metadata(root).map_err(|e| StoreError::io("cannot stat", root, e))?;
        let key = (meta.dev(), meta.ino());
        let table = TableGuard::take();
        if table.find(key).is_some() {
            return Err(StoreError::Locked {
                path: root.to_path_buf(),
                holder: "by this process".into(),
            });
        }
        let Some(slot) = SLOTS.iter().find(|s| s.fd.load(Ordering::Relaxed) < 0) else {
            return Err(StoreError::InvalidArgument(format!(
                "cannot open {}: this process already holds {MAX_OPEN_STORES} stores open",
                root.display()
            )));
        };
        let path = root.join("lock");
        let file = crate::util::open_store_file(
            &path,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            "lock file",
        )?;
        let fl = write_lock();
        // SAFETY: fcntl on an owned descriptor with a valid flock (l_pid 0, as OFD locks need).
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            let result = match err.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EAGAIN) => Err(StoreError::Locked {
                    path: root.to_path_buf(),
                    holder: holder(&file),
                }),
                _ => Err(StoreError::io("cannot lock", &path, err)),
            };
            return result;
        }
        slot.dev.store(key.0, Ordering::Relaxed);
        slot.ino.store(key.1, Ordering::Relaxed);
        slot.fd.store(file.as_raw_fd(), Ordering::Relaxed);
        drop(table);
        Ok(StoreLock { file, key, path })
    }

    /// After a successful load: writes "lock" into the file as RocketMQ does on start (only if
    /// it is not already there, so an existing store's files stay untouched).
    pub(crate) fn mark_open(&self) -> Result<()> {
        let mut current = Vec::with_capacity(8);
        let mut f = &self.file;
        f.read_to_end(&mut current)
            .map_err(|e| StoreError::io("cannot read lock file", &self.path, e))?;
        if !current.starts_with(LOCK_CONTENT) {
            self.file
                .write_all_at(LOCK_CONTENT, 0)
                .map_err(|e| StoreError::io("cannot write lock file", &self.path, e))?;
        }
        Ok(())
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        let table = TableGuard::take();
        if let Some(slot) = table.find(self.key) {
            slot.fd.store(-1, Ordering::Relaxed);
        }
        drop(table);
        // Closing the descriptor (dropping `file`) releases the OFD lock.
    }
}
