//! The store's `lock` file: taken before anything else is read or written, held while open.
//!
//! RocketMQ takes `FileChannel.tryLock(0, 1, false)` on `<root>/lock`, which on Linux is a
//! traditional POSIX record lock (`fcntl(F_SETLK)`). We take an open-file-description lock
//! (`F_OFD_SETLK`) on the same byte: the kernel makes the two kinds conflict, so a RocketMQ
//! broker and rmqstore exclude each other. Unlike a traditional lock, an OFD lock is not dropped
//! when the process closes some other descriptor of the file (reading `lock` elsewhere in the
//! process must not unlock the store), and it conflicts between two opens in one process too.
//! A process-wide table of open folders gives that case a clearer message.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::error::{Result, StoreError};

fn open_stores() -> &'static Mutex<HashSet<(u64, u64)>> {
    static OPEN: OnceLock<Mutex<HashSet<(u64, u64)>>> = OnceLock::new();
    OPEN.get_or_init(|| Mutex::new(HashSet::new()))
}

/// The content RocketMQ writes into the lock file.
const LOCK_CONTENT: &[u8] = b"lock";

#[derive(Debug)]
pub struct StoreLock {
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
    pub fn acquire(root: &Path) -> Result<StoreLock> {
        let meta = std::fs::metadata(root).map_err(|e| StoreError::io("cannot stat", root, e))?;
        let key = (meta.dev(), meta.ino());
        let mut open = open_stores().lock().unwrap_or_else(|p| p.into_inner());
        if open.contains(&key) {
            return Err(StoreError::Locked {
                path: root.to_path_buf(),
                holder: "by this process".into(),
            });
        }
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
        open.insert(key);
        Ok(StoreLock { file, key, path })
    }

    /// After a successful load: writes "lock" into the file as RocketMQ does on start (only if
    /// it is not already there, so an existing store's files stay untouched).
    pub fn mark_open(&self) -> Result<()> {
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

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        open_stores()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
        // Closing the descriptor (dropping `file`) releases the OFD lock.
    }
}
