//! Reading the commitlog back by offset: a record and its message (CRC checked and body
//! decompressed as configured), the record a consume queue unit points at, a record's store
//! timestamp.

use std::sync::Arc;

use super::check::check_record_at;
use super::CommitLog;
use crate::error::{Result, StoreError};
use crate::file::mapped_file::MappedFile;
use crate::format::CqUnit;
use crate::format::{
    body_crc_matches, sysflag, view_record, DecodedRecord, MessageExt, RecordCheck, RecordView,
};

impl CommitLog {
    /// Whether the record a consume queue unit of `topic`/`queue_id` points at is that unit's
    /// message, whole: same offset, size, queue, queue offset and tags code. Read-only stores
    /// check the units another process is writing with it.
    /// `unit_tags` gives the tags code dispatch writes for a record (the TAGS hash, or a
    /// deliver time in the schedule topic).
    pub(crate) fn record_matches_unit(
        &self,
        topic: &str,
        queue_id: i32,
        u: &CqUnit,
        unit_tags: impl Fn(&RecordView<'_>) -> i64,
    ) -> bool {
        let file = match self.queue.find_by_offset(u.phy_offset) {
            Some(f) => f,
            None => {
                if self.refresh_read_only().is_err() {
                    return false;
                }
                match self.queue.find_by_offset(u.phy_offset) {
                    Some(f) => f,
                    None => return false,
                }
            }
        };
        let Some(data) = file.read(u.phy_offset - file.file_from_offset(), i64::from(u.size))
        else {
            return false;
        };
        view_record(data).is_some_and(|d| {
            d.physical_offset == u.phy_offset
                && d.queue_id == queue_id
                && d.queue_offset == u.queue_offset
                && d.topic == topic.as_bytes()
                && unit_tags(&d) == u.tags_code
        })
    }

    /// Calls `f` with the segment and the record starting at `offset` (decoded, and the bytes
    /// from its start to the end of the readable region): `Ok(None)` when the offset is outside
    /// the commitlog, an error when it is inside but not the start of a message.
    pub(crate) fn with_record<T>(
        &self,
        offset: i64,
        f: impl FnOnce(&MappedFile, &DecodedRecord<'_>, &[u8]) -> T,
    ) -> Result<Option<T>> {
        if offset < 0 || offset >= self.max_offset() {
            return Ok(None);
        }
        let Some(file) = self.queue.find_by_offset(offset) else {
            return Ok(None);
        };
        let pos = offset - file.file_from_offset();
        let Some(data) = file.read_from(pos) else {
            return Ok(None);
        };
        match check_record_at(data, offset, false) {
            RecordCheck::Message(d) => Ok(Some(f(&file, &d, data))),
            RecordCheck::Blank { .. } => Err(StoreError::InvalidArgument(format!(
                "offset {offset} is the end-of-file blank record of segment {}, not a message",
                file.path().display()
            ))),
            RecordCheck::Invalid { reason, .. } => Err(StoreError::InvalidArgument(format!(
                "offset {offset} is not the start of a message ({reason})"
            ))),
        }
    }

    /// Whether reads check body CRCs (`check_crc_on_read`).
    pub(crate) fn checks_crc_on_read(&self) -> bool {
        self.check_crc_on_read
    }

    /// Whether reads decompress compressed bodies (`decompress_body_on_read`).
    pub(crate) fn decompresses_on_read(&self) -> bool {
        self.decompress_on_read
    }

    /// The message of a record decoded from `file`, as reads give it: its body CRC checked
    /// (with `check_crc_on_read`) and its body decompressed (with `decompress_body_on_read`);
    /// a mismatch or an undecompressible body is a [`StoreError::CorruptRecord`].
    pub(crate) fn read_message(
        &self,
        file: &MappedFile,
        d: &DecodedRecord<'_>,
        data: &[u8],
    ) -> Result<MessageExt> {
        if self.check_crc_on_read && !body_crc_matches(d.body, d.body_crc) {
            return Err(StoreError::corrupt_record(
                file.path(),
                d.physical_offset,
                format!(
                    "its body CRC is {:#010x} but its {}-byte body has {:#010x}",
                    d.body_crc,
                    d.body.len(),
                    crate::util::masked_crc32(d.body)
                ),
            ));
        }
        // The body stays in the segment's read-only mapping (one copy at most, the reader's);
        // the rest of the record is copied.
        let mut m = match file.view() {
            Ok(view) => MessageExt::from_record_mapped(
                d,
                data,
                view,
                d.physical_offset - file.file_from_offset(),
            ),
            Err(_) => MessageExt::from_record(d, data),
        };
        if self.decompress_on_read {
            m.decompress()
                .map_err(|e| StoreError::corrupt_record(file.path(), d.physical_offset, e.0))?;
        }
        Ok(m)
    }

    /// `lookMessageByOffset`: the message whose record starts at `offset` (checked and
    /// decompressed as [`CommitLog::read_message`]); `None` outside the commitlog.
    pub(crate) fn look_message(&self, offset: i64) -> Result<Option<MessageExt>> {
        self.with_record(offset, |file, d, data| self.read_message(file, d, data))?
            .transpose()
    }

    /// A readable slice of the commitlog from `offset` to the end of its segment's readable
    /// region (bounded by `end`), with the segment it lives in.
    pub(crate) fn read_from(&self, offset: i64, end: i64) -> Option<(Arc<MappedFile>, i64)> {
        let file = self.queue.find_by_offset(offset)?;
        let limit = (end - file.file_from_offset()).min(file.read_position());
        Some((file, limit))
    }

    /// The message of the record a consume queue unit points at (`offset`, `size`), checked
    /// and decompressed as [`CommitLog::read_message`]: `Ok(None)` when its segment is gone or
    /// the bytes are not readable yet, a [`StoreError::CorruptRecord`] when they are there but
    /// are not a whole message record starting at `offset`.
    pub(crate) fn message_at(&self, offset: i64, size: i32) -> Result<Option<MessageExt>> {
        let Some(file) = self.queue.find_by_offset(offset) else {
            return Ok(None);
        };
        let Some(data) = file.read(offset - file.file_from_offset(), i64::from(size)) else {
            return Ok(None);
        };
        match check_record_at(data, offset, false) {
            RecordCheck::Message(d) if d.total_size == size => {
                self.read_message(&file, &d, data).map(Some)
            }
            RecordCheck::Message(d) => Err(StoreError::corrupt_record(
                file.path(),
                offset,
                format!(
                    "a consume queue unit gives it {size} bytes but the record holds {}",
                    d.total_size
                ),
            )),
            RecordCheck::Blank { .. } => Err(StoreError::corrupt_record(
                file.path(),
                offset,
                "a consume queue unit points at the end-of-file blank record",
            )),
            RecordCheck::Invalid { reason, .. } => Err(StoreError::corrupt_record(
                file.path(),
                offset,
                format!("a consume queue unit points at it, but it is not a message ({reason})"),
            )),
        }
    }

    /// Calls `f` with the record a consume queue unit points at (`offset`, `size`), decoded in
    /// place without a CRC check, as `lookMessageByOffset(offset, size)` reads it: `None` when
    /// the bytes are not there or are not a whole message record of that size at that offset.
    pub(crate) fn with_unit_record<T>(
        &self,
        offset: i64,
        size: i32,
        f: impl FnOnce(&DecodedRecord<'_>) -> T,
    ) -> Option<T> {
        let file = self.queue.find_by_offset(offset)?;
        let data = file.read(offset - file.file_from_offset(), i64::from(size))?;
        match check_record_at(data, offset, false) {
            RecordCheck::Message(d) if d.total_size == size => Some(f(&d)),
            _ => None,
        }
    }

    /// Whether [`CommitLog::read_message`] gives the record `d` as stored: its body CRC passes
    /// when reads check it, and its body is not one a read decompresses.
    pub(crate) fn reads_as_stored(&self, d: &DecodedRecord<'_>) -> bool {
        (!self.check_crc_on_read || body_crc_matches(d.body, d.body_crc))
            && !(self.decompress_on_read && d.sys_flag & sysflag::COMPRESSED != 0)
    }

    /// STORETIMESTAMP of the record at `offset` (`pickupStoreTimestamp`), -1 if unreadable.
    pub(crate) fn store_timestamp_at(&self, offset: i64, size: i32) -> i64 {
        if offset < self.min_offset() || offset + i64::from(size) > self.max_offset() {
            return -1;
        }
        let Some(file) = self.queue.find_by_offset(offset) else {
            return -1;
        };
        let Some(head) = file.read(offset - file.file_from_offset(), 80.min(i64::from(size)))
        else {
            return -1;
        };
        if head.len() < crate::format::SYSFLAG_POSITION + 4 {
            return -1;
        }
        let sys_flag = crate::format::be_i32(head, crate::format::SYSFLAG_POSITION);
        let at = crate::format::BORN_HOST_POSITION
            + if sys_flag & sysflag::BORNHOST_V6 != 0 {
                20
            } else {
                8
            };
        if head.len() < at + 8 {
            return -1;
        }
        crate::format::be_i64(head, at)
    }
}
