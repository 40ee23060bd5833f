//! The layout of a commitlog record: RocketMQ's 17-field message record
//! (docs/format.md#commitlog-records) and the end-of-file blank record: magic codes, fixed field
//! positions, the record version and the length formula. Writing is in [`super::encode`], reading
//! in [`super::decode`].

use super::sysflag;

/// `MESSAGE_MAGIC_CODE`: record with a 1-byte topic length.
pub const MESSAGE_MAGIC_CODE_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// `MESSAGE_MAGIC_CODE_V2`: record with a 2-byte topic length.
pub const MESSAGE_MAGIC_CODE_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// `BLANK_MAGIC_CODE`: the end-of-file filler record.
pub const BLANK_MAGIC_CODE: i32 = 0xCBD4_3194_u32 as i32;
/// `END_FILE_MIN_BLANK_LENGTH`: size + magic of the blank record.
pub const END_FILE_MIN_BLANK_LENGTH: i32 = 8;

/// Offsets of fixed fields (MessageDecoder constants).
pub(crate) const QUEUE_OFFSET_POSITION: usize = 20;
pub(crate) const PHYSICAL_OFFSET_POSITION: usize = 28;
pub(crate) const SYSFLAG_POSITION: usize = 36;
pub(crate) const BORN_HOST_POSITION: usize = 48;

/// Record version, chosen by topic length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageVersion {
    V1,
    V2,
}

impl MessageVersion {
    pub(crate) fn magic(self) -> i32 {
        match self {
            MessageVersion::V1 => MESSAGE_MAGIC_CODE_V1,
            MessageVersion::V2 => MESSAGE_MAGIC_CODE_V2,
        }
    }

    pub(crate) fn from_magic(magic: i32) -> Option<Self> {
        match magic {
            MESSAGE_MAGIC_CODE_V1 => Some(MessageVersion::V1),
            MESSAGE_MAGIC_CODE_V2 => Some(MessageVersion::V2),
            _ => None,
        }
    }

    /// Bytes of the topic-length field.
    pub(crate) fn topic_length_size(self) -> i64 {
        match self {
            MessageVersion::V1 => 1,
            MessageVersion::V2 => 2,
        }
    }

    /// `autoMessageVersionOnTopicLen`: V2 only when the topic is longer than 127 bytes.
    pub(crate) fn for_topic_len(len: usize) -> Self {
        if len > 127 {
            MessageVersion::V2
        } else {
            MessageVersion::V1
        }
    }
}

/// `MessageExtEncoder.calMsgLength`, in i64 so absurd inputs cannot overflow.
pub(crate) fn cal_msg_length(
    version: MessageVersion,
    sys_flag: i32,
    body_len: i64,
    topic_len: i64,
    prop_len: i64,
) -> i64 {
    let born_host_len = if sys_flag & sysflag::BORNHOST_V6 != 0 {
        20
    } else {
        8
    };
    let store_host_len = if sys_flag & sysflag::STOREHOSTADDRESS_V6 != 0 {
        20
    } else {
        8
    };
    4 + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + born_host_len
        + 8
        + store_host_len
        + 4
        + 8
        + 4
        + body_len.max(0)
        + version.topic_length_size()
        + topic_len
        + 2
        + prop_len.max(0)
}

/// Offsets inside a record head (everything before the body) that vary per record.
pub(crate) const TOTAL_SIZE_POS: usize = 0;
pub(crate) const BODY_CRC_POS: usize = 8;

/// Smallest valid record: IPv4 hosts, empty body, 1-byte topic, empty properties.
pub(crate) const MIN_RECORD_SIZE: i32 = 91 + 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_codes_match_the_spec() {
        assert_eq!(MESSAGE_MAGIC_CODE_V1, -626_843_481);
        assert_eq!(MESSAGE_MAGIC_CODE_V2, -626_843_477);
        assert_eq!(BLANK_MAGIC_CODE, -875_286_124);
    }

    #[test]
    fn fixed_overhead_is_91_bytes() {
        assert_eq!(cal_msg_length(MessageVersion::V1, 0, 0, 0, 0), 91);
        assert_eq!(
            cal_msg_length(MessageVersion::V1, sysflag::BORNHOST_V6, 0, 0, 0),
            103
        );
        assert_eq!(
            cal_msg_length(MessageVersion::V2, sysflag::STOREHOSTADDRESS_V6, 0, 0, 0),
            104
        );
    }
}
