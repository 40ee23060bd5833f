//! The store's `lock` file: taken before anything else is read or written, held while open.
//!
//! RocketMQ takes `FileChannel.tryLock(0, 1, false)` on `<root>/lock`, which on Linux is a POSIX
//! record lock (`fcntl(F_SETLK)`). We take the same lock, so a RocketMQ broker and rmqstore
//! exclude each other. POSIX locks do not conflict inside one process, so a process-wide table
//! of open store folders (by device and inode) refuses a second open in the same process.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::error::{Result, StoreError};

fn open_stores() -> &'static Mutex<HashSet<(u64, u64)>> {
    static OPEN: OnceLock<Mutex<HashSet<(u64, u64)>>> = OnceLock::new();
    OPEN.get_or_init(|| Mutex::new(HashSet::new()))
}

#[derive(Debug)]
pub struct StoreLock {
    _file: File,
    key: (u64, u64),
    path: PathBuf,
}

impl StoreLock {
    /// Locks the store folder `root` (which must exist).
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
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| StoreError::io("cannot open lock file", &path, e))?;
        // SAFETY: an all-zero flock is a valid value; fields are set below.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = 0;
        fl.l_len = 1;
        // SAFETY: fcntl on an owned descriptor with a valid flock.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EAGAIN) => {
                    // SAFETY: as above; F_GETLK fills in the holder.
                    let mut probe: libc::flock = unsafe { std::mem::zeroed() };
                    probe.l_type = libc::F_WRLCK as libc::c_short;
                    probe.l_whence = libc::SEEK_SET as libc::c_short;
                    probe.l_len = 1;
                    let holder =
                        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut probe) } == 0
                            && probe.l_type != libc::F_UNLCK as libc::c_short
                        {
                            format!("by process {}", probe.l_pid)
                        } else {
                            "by another process".to_string()
                        };
                    Err(StoreError::Locked {
                        path: root.to_path_buf(),
                        holder,
                    })
                }
                _ => Err(StoreError::io("cannot lock", &path, err)),
            };
        }
        // RocketMQ writes "lock" at the start of the file on every start.
        file.write_all_at(b"lock", 0)
            .map_err(|e| StoreError::io("cannot write lock file", &path, e))?;
        open.insert(key);
        Ok(StoreLock {
            _file: file,
            key,
            path,
        })
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
        // Closing the descriptor (dropping `_file`) releases the POSIX lock.
    }
}
