//! Byte layouts, with no I/O: what RocketMQ's files hold and how the store encodes and decodes
//! it. Everything here works on byte slices; reading and writing files is the `file` layer's.
//!
//! - `record`: the commitlog record layout (magic codes, field positions, length formula);
//!   `encode` writes records, `decode` validates and reads them; [`sysflag`] names the SYSFLAG
//!   bits.
//! - `properties`: the properties string of a record and the well-known property names.
//! - `message`: messages as callers see them (put, read back), hosts, statuses, message ids,
//!   and the rules a message must meet.
//! - [`compression`]: compressed bodies.
//! - `cq_unit`: the 20-byte consume queue unit.
//! - `checkpoint`: the fields of the `checkpoint` file.
//! - `index`: the index file layout (header, slots, entries), key hashes and file names.
//! - [`timer`]: the timer message files (`timerwheel` slots, `timerlog/` units and filler,
//!   `config/timercheck`).
//! - `bytes`: big-endian field reads.
//!
//! The rest of the crate takes these through the re-exports below (`crate::format::...`).

mod bytes;
mod checkpoint;
pub mod compression;
mod cq_unit;
mod decode;
mod encode;
pub(crate) mod index;
mod message;
mod properties;
mod record;
pub mod sysflag;
pub mod timer;

pub(crate) use bytes::{be_i32, be_i64};
pub(crate) use checkpoint::{CheckpointFields, CHECKPOINT_FIELDS_LEN, CHECKPOINT_FILE_SIZE};
pub use cq_unit::CqUnit;
pub(crate) use cq_unit::{encode_unit, whole_units_end, CQ_STORE_UNIT_SIZE, MAX_QUEUE_OFFSET};
pub(crate) use decode::{body_crc_matches, view_record, RecordView};
pub use decode::{check_record, DecodedRecord, RecordCheck};
pub(crate) use encode::{
    check_envelope, publish_size, write_blank, PreparedBody, RecordEnvelope, RecordTemplate,
};
pub use message::{message_id, HostAddr, Message, MessageExt, PutMessageStatus};
pub(crate) use message::{tags_code, topic_is_legal, MessageLimits};
pub use properties::property;
pub(crate) use properties::{
    encode_properties, find_property, for_each_property, keep_last_of_each, render_properties,
    DispatchProps,
};
pub use record::{MessageVersion, BLANK_MAGIC_CODE, END_FILE_MIN_BLANK_LENGTH};
pub(crate) use record::{
    BORN_HOST_POSITION, PHYSICAL_OFFSET_POSITION, QUEUE_OFFSET_POSITION, SYSFLAG_POSITION,
};
pub use record::{MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2};
