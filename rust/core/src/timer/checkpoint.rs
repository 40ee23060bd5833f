//! The `config/timercheck` file (RocketMQ's `TimerCheckpoint`, docs/format.md#timer-files): a
//! 4 KiB page whose first 56 bytes are the fields of [`TimerCheckFields`], written with a plain
//! write and `fdatasync`.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Result, StoreError};
use crate::format::timer::{TimerCheckFields, TIMER_CHECK_FIELDS_LEN, TIMER_CHECK_FILE_SIZE};

#[derive(Debug)]
pub(crate) struct TimerCheckpoint {
    path: PathBuf,
    file: File,
    /// The fields as last read or written.
    fields: Mutex<TimerCheckFields>,
}

impl TimerCheckpoint {
    /// Checks `path` before anything changes: absent, or a regular file of 0 bytes or
    /// RocketMQ's 4 KiB.
    pub(crate) fn check(path: &Path) -> Result<()> {
        crate::util::check_fixed_size_or_absent(path, "timer checkpoint", TIMER_CHECK_FILE_SIZE, "")
    }

    /// Opens (creating and sizing if missing) `path`; a new file reads as all zeros.
    pub(crate) fn open(path: &Path) -> Result<TimerCheckpoint> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| StoreError::io("cannot create", parent, e))?;
        }
        let (file, len) =
            crate::util::open_fixed_size_file(path, "timer checkpoint", TIMER_CHECK_FILE_SIZE, "")?;
        let mut buf = [0u8; TIMER_CHECK_FIELDS_LEN];
        if len != 0 {
            file.read_exact_at(&mut buf, 0)
                .map_err(|e| StoreError::io("cannot read timer checkpoint", path, e))?;
        } else {
            file.set_len(TIMER_CHECK_FILE_SIZE)
                .map_err(|e| StoreError::io("cannot size timer checkpoint", path, e))?;
        }
        let fields = TimerCheckFields::decode(&buf).unwrap_or_default();
        Ok(TimerCheckpoint {
            path: path.to_path_buf(),
            file,
            fields: Mutex::new(fields),
        })
    }

    pub(crate) fn fields(&self) -> TimerCheckFields {
        *self.fields.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `fields` and forces the file (nothing when the file already holds them).
    pub(crate) fn write(&self, fields: TimerCheckFields) -> Result<()> {
        let mut current = self.fields.lock().unwrap_or_else(|p| p.into_inner());
        if *current == fields {
            return Ok(());
        }
        self.file
            .write_all_at(&fields.encode(), 0)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| StoreError::io("cannot write timer checkpoint", &self.path, e))?;
        *current = fields;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_fields_come_back_and_bad_sizes_are_refused() {
        let d = std::env::temp_dir().join(format!("rmqstore-timercheck-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let path = d.join("config").join("timercheck");
        TimerCheckpoint::check(&path).unwrap();
        let cp = TimerCheckpoint::open(&path).unwrap();
        assert_eq!(cp.fields(), TimerCheckFields::default());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4096);
        let f = TimerCheckFields {
            last_read_time_ms: 1000,
            last_timer_log_flush_pos: 52,
            last_timer_queue_offset: 3,
            master_timer_queue_offset: 3,
            state_version: 0,
            timestamp: 99,
            counter: 1,
        };
        cp.write(f).unwrap();
        drop(cp);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..56], &f.encode());
        assert_eq!(TimerCheckpoint::open(&path).unwrap().fields(), f);
        std::fs::write(&path, [0u8; 56]).unwrap();
        assert!(TimerCheckpoint::check(&path).is_err());
        assert!(TimerCheckpoint::open(&path).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}
