//! The `checkpoint` file (RocketMQ's `StoreCheckpoint`, docs/format.md#checkpoint) and the `abort`
//! marker (docs/format.md#abort-marker).
//!
//! `checkpoint` is 4 KiB; the first 40 bytes are five big-endian longs: physicMsgTimestamp,
//! logicsMsgTimestamp, indexMsgTimestamp, masterFlushedOffset and confirmPhyOffset (the layout
//! is `crate::format::checkpoint`'s; this file opens, reads and writes it).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use crate::error::{Result, StoreError};
use crate::format::{CheckpointFields, CHECKPOINT_FIELDS_LEN, CHECKPOINT_FILE_SIZE};

#[derive(Debug)]
pub(crate) struct StoreCheckpoint {
    path: PathBuf,
    file: File,
    pub physic_msg_timestamp: AtomicI64,
    pub logics_msg_timestamp: AtomicI64,
    pub index_msg_timestamp: AtomicI64,
    pub master_flushed_offset: AtomicI64,
    pub confirm_phy_offset: AtomicI64,
    /// The 40 bytes the file is known to hold on disk (read at open, or last written and
    /// forced); None for a file just created. A flush with nothing new writes nothing.
    on_disk: Mutex<Option<[u8; CHECKPOINT_FIELDS_LEN]>>,
}

impl StoreCheckpoint {
    /// Checks `path` before anything is written: absent, or a regular file (not a link or a
    /// folder) of RocketMQ's size.
    pub(crate) fn check(path: &Path) -> Result<()> {
        crate::util::check_fixed_size_or_absent(path, "checkpoint file", CHECKPOINT_FILE_SIZE, "")
    }

    /// Opens (creating if missing) `path`. A file of another size than RocketMQ's 4 KiB is
    /// refused, naming it. (RocketMQ 4.x writes only the first three longs; the other two then
    /// read as 0.)
    pub(crate) fn open(path: &Path) -> Result<StoreCheckpoint> {
        let (file, len) =
            crate::util::open_fixed_size_file(path, "checkpoint file", CHECKPOINT_FILE_SIZE, "")?;
        let mut buf = [0u8; CHECKPOINT_FIELDS_LEN];
        if len != 0 {
            file.read_exact_at(&mut buf, 0)
                .map_err(|e| StoreError::io("cannot read checkpoint", path, e))?;
        }
        let fields = CheckpointFields::decode(&buf);
        let cp = StoreCheckpoint {
            path: path.to_path_buf(),
            physic_msg_timestamp: AtomicI64::new(fields.physic_msg_timestamp),
            logics_msg_timestamp: AtomicI64::new(fields.logics_msg_timestamp),
            index_msg_timestamp: AtomicI64::new(fields.index_msg_timestamp),
            master_flushed_offset: AtomicI64::new(fields.master_flushed_offset),
            confirm_phy_offset: AtomicI64::new(fields.confirm_phy_offset),
            file,
            on_disk: Mutex::new((len != 0).then_some(buf)),
        };
        if len == 0 {
            cp.file
                .set_len(CHECKPOINT_FILE_SIZE)
                .map_err(|e| StoreError::io("cannot size checkpoint", path, e))?;
        }
        Ok(cp)
    }

    /// `getMinTimestamp`: `max(0, min(physic, logics) - 3000)`.
    pub(crate) fn min_timestamp(&self) -> i64 {
        let physic = self.physic_msg_timestamp.load(Ordering::Acquire);
        let logics = self.logics_msg_timestamp.load(Ordering::Acquire);
        (physic.min(logics) - 3000).max(0)
    }

    /// `getMinTimestampIndex`: `min(min_timestamp, indexMsgTimestamp)`.
    pub(crate) fn min_timestamp_index(&self) -> i64 {
        self.min_timestamp()
            .min(self.index_msg_timestamp.load(Ordering::Acquire))
    }

    /// Writes the five fields and forces the file, unless the file already holds them (an idle
    /// store does not rewrite and force its checkpoint every round).
    pub(crate) fn flush(&self) -> Result<()> {
        let buf = CheckpointFields {
            physic_msg_timestamp: self.physic_msg_timestamp.load(Ordering::Acquire),
            logics_msg_timestamp: self.logics_msg_timestamp.load(Ordering::Acquire),
            index_msg_timestamp: self.index_msg_timestamp.load(Ordering::Acquire),
            master_flushed_offset: self.master_flushed_offset.load(Ordering::Acquire),
            confirm_phy_offset: self.confirm_phy_offset.load(Ordering::Acquire),
        }
        .encode();
        let mut on_disk = self.on_disk.lock().unwrap_or_else(|e| e.into_inner());
        if *on_disk == Some(buf) {
            return Ok(());
        }
        // Until the write is forced the file's bytes are unknown: a failed flush writes again.
        *on_disk = None;
        self.file
            .write_all_at(&buf, 0)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| StoreError::io("cannot write checkpoint", &self.path, e))?;
        *on_disk = Some(buf);
        Ok(())
    }
}

/// The `abort` marker: present while a store is open; left behind by a crash.
#[derive(Debug)]
pub(crate) struct AbortFile {
    path: PathBuf,
}

impl AbortFile {
    pub(crate) fn new(root: &Path) -> AbortFile {
        AbortFile {
            path: root.join("abort"),
        }
    }

    /// Checks the marker before anything is written: absent, or a regular file (not a link,
    /// which creating it would write through, nor a folder, which could not be replaced).
    pub(crate) fn check(&self) -> Result<()> {
        crate::util::check_regular_or_absent(&self.path, "abort file").map(|_| ())
    }

    /// `lastExitOK`: no abort file (a link there counts as present; [`AbortFile::check`]
    /// refuses it).
    pub(crate) fn last_exit_ok(&self) -> bool {
        std::fs::symlink_metadata(&self.path).is_err()
    }

    /// Creates it with the process id as decimal text (after a successful start).
    pub(crate) fn create(&self) -> Result<()> {
        let mut f = crate::util::open_store_file(
            &self.path,
            OpenOptions::new().write(true).create(true).truncate(true),
            "abort file",
        )?;
        write!(f, "{}", std::process::id())
            .and_then(|()| f.sync_all())
            .map_err(|e| StoreError::io("cannot write abort file", &self.path, e))
    }

    /// Removes it (a clean shutdown).
    pub(crate) fn remove(&self) -> Result<()> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io("cannot remove abort file", &self.path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trip_and_min_timestamp() {
        let d = std::env::temp_dir().join(format!("rmqstore-cp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("checkpoint");
        let cp = StoreCheckpoint::open(&p).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 4096);
        cp.physic_msg_timestamp.store(0xAABB, Ordering::Release);
        cp.logics_msg_timestamp.store(0xCCDD, Ordering::Release);
        cp.index_msg_timestamp.store(7, Ordering::Release);
        cp.flush().unwrap();
        // StoreCheckpointTest: physic - min == 3000 (min = min(physic, logics) - 3000).
        assert_eq!(0xAABB - cp.min_timestamp(), 3000);
        drop(cp);
        let cp = StoreCheckpoint::open(&p).unwrap();
        assert_eq!(cp.physic_msg_timestamp.load(Ordering::Acquire), 0xAABB);
        assert_eq!(cp.logics_msg_timestamp.load(Ordering::Acquire), 0xCCDD);
        assert_eq!(cp.min_timestamp_index(), 7);
        let raw = std::fs::read(&p).unwrap();
        assert_eq!(&raw[0..8], &0xAABBi64.to_be_bytes());
        assert_eq!(&raw[8..16], &0xCCDDi64.to_be_bytes());
        std::fs::write(&p, [0u8; 100]).unwrap();
        assert!(StoreCheckpoint::open(&p).is_err());
        let abort = AbortFile::new(&d);
        assert!(abort.last_exit_ok());
        abort.create().unwrap();
        assert!(!abort.last_exit_ok());
        assert_eq!(
            std::fs::read_to_string(d.join("abort")).unwrap(),
            std::process::id().to_string()
        );
        abort.remove().unwrap();
        assert!(abort.last_exit_ok());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn flush_with_nothing_new_writes_nothing() {
        let d = std::env::temp_dir().join(format!("rmqstore-cp-idle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("checkpoint");
        let cp = StoreCheckpoint::open(&p).unwrap();
        // A new file is written on its first flush, zeros or not.
        std::fs::write(&p, [0xEEu8; 4096]).unwrap();
        cp.flush().unwrap();
        assert_eq!(std::fs::read(&p).unwrap()[..40], [0u8; 40]);
        cp.physic_msg_timestamp.store(5, Ordering::Release);
        cp.flush().unwrap();
        // Bytes changed behind the store's back show whether a flush wrote.
        let marked = |b: u8| {
            let mut raw = std::fs::read(&p).unwrap();
            raw[39] = b;
            std::fs::write(&p, &raw).unwrap();
        };
        marked(0x11);
        cp.flush().unwrap();
        assert_eq!(
            std::fs::read(&p).unwrap()[39],
            0x11,
            "an unchanged flush wrote"
        );
        cp.logics_msg_timestamp.store(6, Ordering::Release);
        cp.flush().unwrap();
        let raw = std::fs::read(&p).unwrap();
        assert_eq!(raw[39], 0);
        assert_eq!(&raw[8..16], &6i64.to_be_bytes());
        // A store opened on an existing file knows what it holds.
        drop(cp);
        let cp = StoreCheckpoint::open(&p).unwrap();
        marked(0x55);
        cp.confirm_phy_offset.store(0x22, Ordering::Release);
        cp.flush().unwrap();
        assert_eq!(&std::fs::read(&p).unwrap()[32..40], &0x22i64.to_be_bytes());
        marked(0x44);
        cp.flush().unwrap();
        assert_eq!(
            std::fs::read(&p).unwrap()[39],
            0x44,
            "an unchanged flush wrote"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
