//! The `timerlog/` segments (RocketMQ's `TimerLog`, docs/format.md#timer-files): 52-byte units
//! appended in order, a 16-byte filler closing a segment a unit would leave less than 16
//! bytes of, one writer (the engine's wheel lock) and any number of readers.

use std::path::Path;
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::file::mapped_file::MappedFile;
use crate::file::mapped_file_queue::MappedFileQueue;
use crate::format::timer::{
    encode_filler, is_filler, unit_fits, TimerLogUnit, MIN_BLANK_LEN, UNIT_SIZE,
};

pub(crate) struct TimerLog {
    queue: MappedFileQueue,
    file_size: i64,
}

impl TimerLog {
    /// Loads the segments of `dir` (created if missing); a segment of another size than
    /// `file_size`, a foreign file or a gap refuses the load, as RocketMQ's
    /// `MappedFileQueue.load` does.
    pub(crate) fn load(dir: &Path, file_size: i64) -> Result<TimerLog> {
        Ok(TimerLog {
            queue: MappedFileQueue::load(dir, file_size)?,
            file_size,
        })
    }

    pub(crate) fn queue(&self) -> &MappedFileQueue {
        &self.queue
    }

    pub(crate) fn file_size(&self) -> i64 {
        self.file_size
    }

    /// End of what was appended.
    pub(crate) fn max_offset(&self) -> i64 {
        self.queue.max_offset()
    }

    fn new_segment(&self) -> Result<Arc<MappedFile>> {
        let offset = match self.queue.last() {
            Some(last) => last
                .file_from_offset()
                .checked_add(self.file_size)
                .ok_or_else(|| StoreError::corrupted(last.path(), "timer log offsets exhausted"))?,
            None => 0,
        };
        let file = Arc::new(MappedFile::create(
            &self.queue.path_for(offset),
            offset,
            self.file_size,
        )?);
        self.queue.push(file.clone())?;
        Ok(file)
    }

    /// `TimerLog.append`: writes `unit` and returns its position.
    ///
    /// # Safety
    /// One appender at a time (the engine's wheel lock).
    pub(crate) unsafe fn append(&self, unit: &[u8; UNIT_SIZE as usize]) -> Result<i64> {
        let mut file = match self.queue.last() {
            Some(f) if !f.is_full() => f,
            _ => self.new_segment()?,
        };
        if !unit_fits(UNIT_SIZE, file.wrote_position(), self.file_size) {
            let left = self.file_size - file.wrote_position();
            let filler = encode_filler(left as i32);
            let n = (left.min(MIN_BLANK_LEN)) as usize;
            // SAFETY: the caller is the one appender.
            let placed =
                unsafe { file.append_with(left, |b| b[..n].copy_from_slice(&filler[..n])) };
            if placed.is_none() {
                return Err(StoreError::corrupted(
                    file.path(),
                    "timer log segment has no room for its filler",
                ));
            }
            file = self.new_segment()?;
        }
        // SAFETY: the caller is the one appender.
        let at = unsafe { file.append_with(UNIT_SIZE, |b| b.copy_from_slice(unit)) }.ok_or_else(
            || StoreError::corrupted(file.path(), "timer log segment has no room for a unit"),
        )?;
        Ok(file.file_from_offset() + at)
    }

    /// The unit at `pos`, when a whole one is readable there and it is not the filler.
    pub(crate) fn unit_at(&self, pos: i64) -> Option<TimerLogUnit> {
        if pos < 0 {
            return None;
        }
        let file = self.queue.find_by_offset(pos)?;
        let b = file.read(pos - file.file_from_offset(), UNIT_SIZE)?;
        if is_filler(b) {
            return None;
        }
        TimerLogUnit::decode(b)
    }

    /// Forces everything appended; returns the flushed position.
    pub(crate) fn flush(&self) -> Result<i64> {
        while !self.queue.flush(0)? {}
        Ok(self.queue.flushed_where())
    }
}

/// A default unit of a message of `size_py` bytes at commitlog offset 0 (tests).
#[cfg(test)]
pub(crate) fn test_unit(size_py: i32) -> TimerLogUnit {
    TimerLogUnit {
        size: 52,
        prev_pos: -1,
        magic: crate::format::timer::MAGIC_DEFAULT,
        curr_write_time_ms: 0,
        delay_time: 0,
        offset_py: 0,
        size_py,
        real_topic_hash: 0,
        reserved: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::timer::TIMER_LOG_BLANK_MAGIC;

    #[test]
    fn appends_roll_with_a_filler_like_timer_log_test() {
        let d = std::env::temp_dir().join(format!("rmqstore-timerlog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let log = TimerLog::load(&d, 1024).unwrap();
        let mut unit = test_unit(1);
        let mut positions = Vec::new();
        for i in 0..110 {
            unit.offset_py = i;
            positions.push(unsafe { log.append(&unit.encode()) }.unwrap());
        }
        // 19 units per 1 KiB segment: 110 units take 6 segments.
        assert_eq!(log.queue().files().len(), 6);
        assert_eq!(&positions[..3], &[0, 52, 104]);
        assert_eq!(positions[18], 936);
        assert_eq!(positions[19], 1024);
        for (i, p) in positions.iter().enumerate() {
            assert_eq!(log.unit_at(*p).unwrap().offset_py, i as i64);
        }
        // The filler after the 19th unit.
        assert!(log.unit_at(988).is_none());
        let bytes = std::fs::read(d.join("00000000000000000000")).unwrap();
        assert_eq!(&bytes[988..992], &36i32.to_be_bytes());
        assert_eq!(&bytes[1000..1004], &TIMER_LOG_BLANK_MAGIC.to_be_bytes());
        log.flush().unwrap();
        drop(log);
        // Reloaded: same segments; a segment of another size refuses the load.
        let log = TimerLog::load(&d, 1024).unwrap();
        assert_eq!(log.queue().files().len(), 6);
        drop(log);
        assert!(TimerLog::load(&d, 2048).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}
