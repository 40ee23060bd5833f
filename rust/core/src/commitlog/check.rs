//! Whether a record is legal where it is found: its queue fields (outside the body CRC) and
//! its position. Shared by recovery, reads and dispatch.

use crate::format::MAX_QUEUE_OFFSET;
use crate::format::{check_record, RecordCheck};

/// Whether a record's topic, queue id and queue offset are ones the store can file under:
/// a topic a put accepts (it names a folder), a queue id >= 0 and a queue offset whose
/// consume queue position fits (`0..=MAX_QUEUE_OFFSET`). These bytes are outside the body CRC;
/// a record failing this is damaged.
pub(crate) fn queue_fields_are_legal(topic: &[u8], queue_id: i32, queue_offset: i64) -> bool {
    queue_position_is_legal(queue_id, queue_offset)
        && std::str::from_utf8(topic).is_ok_and(crate::format::topic_is_legal)
}

/// The queue part of [`queue_fields_are_legal`] (for callers that check the topic once for a
/// run of records).
#[inline]
pub(crate) fn queue_position_is_legal(queue_id: i32, queue_offset: i64) -> bool {
    queue_id >= 0 && (0..=MAX_QUEUE_OFFSET).contains(&queue_offset)
}

/// `check_record` for the record that should start at commitlog offset `here`: a record whose
/// PHYSICALOFFSET field names another offset (a record image inside a body, stale bytes moved by
/// a copy) is not the record at `here`.
pub(crate) fn check_record_at(buf: &[u8], here: i64, check_crc: bool) -> RecordCheck<'_> {
    match check_record(buf, check_crc) {
        RecordCheck::Message(d) if d.physical_offset != here => RecordCheck::Invalid {
            size: -1,
            reason: "PHYSICALOFFSET field disagrees with the record's position",
        },
        other => other,
    }
}
