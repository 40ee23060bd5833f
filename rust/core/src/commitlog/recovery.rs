//! Recovery at open (`recoverNormally`, `recoverAbnormally`): choosing the segment the scan
//! starts from, scanning to the last valid record and cutting the log there, and rebuilding
//! the topic-queue offset table; and truncation of the log at an offset (`truncateDirtyFiles`).

use std::collections::HashMap;
use std::sync::Arc;

use super::append::PutState;
use super::check::{check_record_at, queue_fields_are_legal};
use super::queue_offsets::QueueOffsets;
use super::CommitLog;
use crate::error::Result;
use crate::file::mapped_file::MappedFile;
use crate::format::{sysflag, RecordCheck};

/// How recovery chooses the segment its scan starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryStart {
    /// After a clean shutdown (`recoverNormally`): the newest segment starting at or before
    /// `dispatch_from`, the largest commitlog offset the consume queues hold (-1: none).
    Normal { dispatch_from: i64 },
    /// After a crash (`recoverAbnormally`): the newest segment whose first message was stored
    /// at or before the checkpoint's `min_timestamp`. Unlike RocketMQ it must also start at or
    /// before `dispatch_from`: queues lost with the crash (or deleted) are rebuilt from the
    /// scan's start, so the topic-queue table covers every message dispatch will replay.
    Abnormal {
        min_timestamp: i64,
        dispatch_from: i64,
    },
}

/// What recovery found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The previous run did not shut down cleanly (an `abort` file was there).
    pub abnormal: bool,
    /// End of the last valid record.
    pub process_offset: i64,
    /// Messages checked by the scan (those from `start_offset` on).
    pub messages: u64,
    /// Where the scan began: the start of the segment chosen as RocketMQ chooses it.
    pub start_offset: i64,
    /// Bytes past `process_offset` that held data (not zeros) and were discarded.
    pub discarded_bytes: i64,
    /// Why the scan stopped, when it stopped at something other than clean zeros.
    pub stop_reason: Option<String>,
}

/// True when the 8 bytes of a record head (size + magic) are all zero (or absent).
fn is_zero_header(buf: &[u8]) -> bool {
    buf.iter().take(8).all(|&b| b == 0)
}

/// Bytes from the start of `buf` to its last non-zero byte (0 if all zero). Word-wise from the
/// end, which is fast over the long runs of zeros a segment tail holds.
fn nonzero_extent(buf: &[u8]) -> i64 {
    let mut end = buf.len();
    while end >= 8 && buf[end - 8..end] == [0u8; 8] {
        end -= 8;
    }
    while end > 0 && buf[end - 1] == 0 {
        end -= 1;
    }
    end as i64
}

impl CommitLog {
    /// The segment recovery starts from (docs/architecture.md#recovery): walking back
    /// from the newest, the first whose first record is a message (CRC checked) with a store
    /// timestamp, matching `start`; segment 0 when none matches (it is never checked).
    fn recovery_start(files: &[Arc<MappedFile>], start: RecoveryStart) -> usize {
        (1..files.len())
            .rev()
            .find(|&idx| {
                let file = &files[idx];
                let data = file.read_from(0).unwrap_or(&[]);
                let RecordCheck::Message(d) = check_record_at(data, file.file_from_offset(), true)
                else {
                    return false;
                };
                d.store_timestamp != 0
                    && match start {
                        RecoveryStart::Normal { dispatch_from } => {
                            file.file_from_offset() <= dispatch_from
                        }
                        RecoveryStart::Abnormal {
                            min_timestamp,
                            dispatch_from,
                        } => {
                            d.store_timestamp <= min_timestamp
                                && file.file_from_offset() <= dispatch_from
                        }
                    }
            })
            .unwrap_or(0)
    }

    /// Rebuilds the write position by scanning from the segment `start` chooses with
    /// `check_crc`, stopping at the first invalid record and truncating there. The topic-queue
    /// table holds what the scan saw; [`CommitLog::merge_queue_offsets`] adds the consume
    /// queues' view of the segments before it.
    ///
    /// # Safety
    /// Nothing else may use the commitlog until this returns (the store is opening and has not
    /// been shared): it cuts the segments, and a reader or appender would share the bytes cut.
    ///
    /// Records `deleted(topic, offset)` names (a deleted topic's, see `queue::tombstones`) are
    /// left out of the topic-queue table.
    pub(crate) unsafe fn recover(
        &self,
        check_crc: bool,
        start: RecoveryStart,
        deleted: impl Fn(&str, i64) -> bool,
    ) -> Result<RecoveryReport> {
        let files = self.queue.files();
        let mut report = RecoveryReport::default();
        let mut table = PutState::default();
        let mut last_ts = 0i64;
        let first = Self::recovery_start(&files, start);
        // Every scan ends at a blank record of the last segment or at an invalid record.
        let mut process_offset = files.get(first).map(|f| f.file_from_offset()).unwrap_or(0);
        report.start_offset = process_offset;
        'files: for (idx, file) in files.iter().enumerate().skip(first) {
            let data = file.read_from(0).unwrap_or(&[]);
            let mut pos = 0usize;
            loop {
                let here = file.file_from_offset() + pos as i64;
                match check_record_at(&data[pos..], here, check_crc) {
                    RecordCheck::Message(d) => {
                        pos += d.total_size as usize;
                        report.messages += 1;
                        last_ts = last_ts.max(d.store_timestamp);
                        // Damaged queue fields (outside the body CRC) are left out of the
                        // table, as dispatch leaves the record out of the queues.
                        if matches!(
                            d.transaction_type(),
                            sysflag::TRANSACTION_NOT_TYPE | sysflag::TRANSACTION_COMMIT_TYPE
                        ) && queue_fields_are_legal(d.topic, d.queue_id, d.queue_offset)
                        {
                            let topic = d.topic_str();
                            if !deleted(&topic, here) {
                                table.raise_queue_offset(&topic, d.queue_id, d.queue_offset + 1);
                            }
                        }
                    }
                    RecordCheck::Blank { .. } => {
                        match files.get(idx + 1) {
                            Some(next) => process_offset = next.file_from_offset(),
                            None => process_offset = file.file_from_offset() + pos as i64,
                        }
                        continue 'files;
                    }
                    RecordCheck::Invalid { reason, .. } => {
                        process_offset = here;
                        // Zeros at the stop point are the clean end of the log (a later
                        // segment that starts with zeros is an unused pre-allocated one).
                        let later = &files[idx + 1..];
                        let damaged = !is_zero_header(&data[pos..])
                            || later
                                .iter()
                                .any(|f| !is_zero_header(f.read_from(0).unwrap_or(&[])));
                        if damaged {
                            report.discarded_bytes = nonzero_extent(&data[pos..])
                                + later
                                    .iter()
                                    .map(|f| nonzero_extent(f.read_from(0).unwrap_or(&[])))
                                    .sum::<i64>();
                            report.stop_reason = Some(reason.to_string());
                            log::warn!(
                                target: "rmqstore.recovery",
                                "commitlog recovery stopped at offset {process_offset} in {}: \
                                 {reason}; {} byte(s) of data after it are discarded and the \
                                 commitlog is truncated there ({} later segment(s) deleted)",
                                file.path().display(),
                                report.discarded_bytes,
                                later.len()
                            );
                        }
                        break 'files;
                    }
                }
            }
        }
        report.process_offset = process_offset;
        // SAFETY: the scan's slices are gone, and the caller excludes every other user.
        unsafe { self.queue.truncate_dirty(process_offset) }?;
        self.queue.set_flushed_where(process_offset);
        self.queue.set_committed_where(process_offset);
        let mut st = self.put.lock().unwrap_or_else(|p| p.into_inner());
        st.queue_offsets.replace(table.queue_offsets);
        st.last_store_ts = last_ts;
        Ok(report)
    }

    /// Raises the next queue offsets to those of `table` (from the consume queues, truncated
    /// to the recovered end): queues whose last messages lie before the scan's start segment.
    pub(crate) fn merge_queue_offsets(&self, table: HashMap<String, HashMap<i32, i64>>) {
        let mut st = self.put.lock().unwrap_or_else(|p| p.into_inner());
        for (topic, queues) in table {
            for (queue_id, next) in queues {
                st.raise_queue_offset(&topic, queue_id, next);
            }
        }
    }

    /// `isOffsetAligned`: a message record whose CRC checks starts at `offset`.
    pub(crate) fn is_aligned(&self, offset: i64) -> bool {
        let Some(file) = self.queue.find_by_offset(offset) else {
            return false;
        };
        file.read_from(offset - file.file_from_offset())
            .is_some_and(|data| {
                matches!(check_record_at(data, offset, true), RecordCheck::Message(_))
            })
    }

    /// Cuts the commitlog at `offset` (later segments deleted, the rest of the cut one zeroed)
    /// and installs the queue offset table that holds below it.
    ///
    /// # Safety
    /// Every other user of the commitlog is excluded until this returns (no reader holds its
    /// bytes past `offset`; the append lock is taken here, but a reader's slice would see the
    /// cut bytes change).
    pub(crate) unsafe fn truncate(
        &self,
        offset: i64,
        table: HashMap<String, HashMap<i32, i64>>,
    ) -> Result<()> {
        let _c = self.commit_lock.lock().unwrap_or_else(|p| p.into_inner());
        let _f = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = self.put.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the caller excludes readers; appends, commits and flushes are excluded by
        // the locks held.
        unsafe { self.queue.truncate_dirty(offset) }?;
        if self.queue.flushed_where() > offset {
            self.queue.set_flushed_where(offset);
        }
        st.queue_offsets.replace(QueueOffsets::from_map(table));
        Ok(())
    }
}
