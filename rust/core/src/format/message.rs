//! Messages as the store's callers see them: a [`Message`] to put, a [`MessageExt`] read back,
//! host addresses, the put status, message ids and tag codes, and the rules a message must
//! meet before it is appended.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use super::bytes::be_i32;
use super::decode::DecodedRecord;
use super::properties::{find_property, parse_properties, property};
use super::sysflag;
use crate::util::{hex_upper, java_hash};

/// A born or store host: IPv4 (8 bytes on disk) or IPv6 (20 bytes on disk), port as an int.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostAddr {
    V4 { ip: [u8; 4], port: i32 },
    V6 { ip: [u8; 16], port: i32 },
}

impl HostAddr {
    /// Parses `"1.2.3.4:10911"` or `"[::1]:10911"`.
    pub fn parse(s: &str) -> Option<HostAddr> {
        let addr: SocketAddr = s.trim().parse().ok()?;
        Some(Self::from(addr))
    }

    pub(crate) fn is_v6(&self) -> bool {
        matches!(self, HostAddr::V6 { .. })
    }

    pub(crate) fn ip_bytes(&self) -> &[u8] {
        match self {
            HostAddr::V4 { ip, .. } => ip,
            HostAddr::V6 { ip, .. } => ip,
        }
    }

    pub(crate) fn port(&self) -> i32 {
        match self {
            HostAddr::V4 { port, .. } | HostAddr::V6 { port, .. } => *port,
        }
    }

    pub(crate) fn decode(buf: &[u8], v6: bool) -> HostAddr {
        if v6 {
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&buf[..16]);
            HostAddr::V6 {
                ip,
                port: be_i32(buf, 16),
            }
        } else {
            let mut ip = [0u8; 4];
            ip.copy_from_slice(&buf[..4]);
            HostAddr::V4 {
                ip,
                port: be_i32(buf, 4),
            }
        }
    }
}

impl From<SocketAddr> for HostAddr {
    fn from(addr: SocketAddr) -> Self {
        let port = i32::from(addr.port());
        match addr.ip() {
            IpAddr::V4(v4) => HostAddr::V4 {
                ip: v4.octets(),
                port,
            },
            IpAddr::V6(v6) => HostAddr::V6 {
                ip: v6.octets(),
                port,
            },
        }
    }
}

impl fmt::Display for HostAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostAddr::V4 { ip, port } => write!(f, "{}:{port}", std::net::Ipv4Addr::from(*ip)),
            HostAddr::V6 { ip, port } => write!(f, "[{}]:{port}", std::net::Ipv6Addr::from(*ip)),
        }
    }
}

/// The offset message id: hex of store ip ‖ store port ‖ commitlog offset.
pub fn message_id(store_host: &HostAddr, commit_log_offset: i64) -> String {
    let mut raw = [0u8; 28];
    let ip = store_host.ip_bytes();
    raw[..ip.len()].copy_from_slice(ip);
    raw[ip.len()..ip.len() + 4].copy_from_slice(&store_host.port().to_be_bytes());
    raw[ip.len() + 4..ip.len() + 12].copy_from_slice(&commit_log_offset.to_be_bytes());
    hex_upper(&raw[..ip.len() + 12])
}

/// Tag code of the consume queue: `TAGS.hashCode()` sign-extended, 0 without tags.
pub(crate) fn tags_code(tags: Option<&str>) -> i64 {
    match tags {
        Some(t) if !t.is_empty() => i64::from(java_hash(t)),
        _ => 0,
    }
}

/// What `putMessage` answers (PutMessageStatus of RocketMQ 5.x, in its order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PutMessageStatus {
    PutOk = 0,
    FlushDiskTimeout,
    FlushSlaveTimeout,
    SlaveNotAvailable,
    ServiceNotAvailable,
    CreateMappedFileFailed,
    MessageIllegal,
    PropertiesSizeExceeded,
    OsPageCacheBusy,
    UnknownError,
    InSyncReplicasNotEnough,
    PutToRemoteBrokerFail,
    LmqConsumeQueueNumExceeded,
    WheelTimerFlowControl,
    WheelTimerMsgIllegal,
    WheelTimerNotEnable,
}

impl PutMessageStatus {
    /// RocketMQ's constant name.
    pub fn name(self) -> &'static str {
        match self {
            PutMessageStatus::PutOk => "PUT_OK",
            PutMessageStatus::FlushDiskTimeout => "FLUSH_DISK_TIMEOUT",
            PutMessageStatus::FlushSlaveTimeout => "FLUSH_SLAVE_TIMEOUT",
            PutMessageStatus::SlaveNotAvailable => "SLAVE_NOT_AVAILABLE",
            PutMessageStatus::ServiceNotAvailable => "SERVICE_NOT_AVAILABLE",
            PutMessageStatus::CreateMappedFileFailed => "CREATE_MAPPED_FILE_FAILED",
            PutMessageStatus::MessageIllegal => "MESSAGE_ILLEGAL",
            PutMessageStatus::PropertiesSizeExceeded => "PROPERTIES_SIZE_EXCEEDED",
            PutMessageStatus::OsPageCacheBusy => "OS_PAGE_CACHE_BUSY",
            PutMessageStatus::UnknownError => "UNKNOWN_ERROR",
            PutMessageStatus::InSyncReplicasNotEnough => "IN_SYNC_REPLICAS_NOT_ENOUGH",
            PutMessageStatus::PutToRemoteBrokerFail => "PUT_TO_REMOTE_BROKER_FAIL",
            PutMessageStatus::LmqConsumeQueueNumExceeded => "LMQ_CONSUME_QUEUE_NUM_EXCEEDED",
            PutMessageStatus::WheelTimerFlowControl => "WHEEL_TIMER_FLOW_CONTROL",
            PutMessageStatus::WheelTimerMsgIllegal => "WHEEL_TIMER_MSG_ILLEGAL",
            PutMessageStatus::WheelTimerNotEnable => "WHEEL_TIMER_NOT_ENABLE",
        }
    }

    pub const ALL: [PutMessageStatus; 16] = [
        PutMessageStatus::PutOk,
        PutMessageStatus::FlushDiskTimeout,
        PutMessageStatus::FlushSlaveTimeout,
        PutMessageStatus::SlaveNotAvailable,
        PutMessageStatus::ServiceNotAvailable,
        PutMessageStatus::CreateMappedFileFailed,
        PutMessageStatus::MessageIllegal,
        PutMessageStatus::PropertiesSizeExceeded,
        PutMessageStatus::OsPageCacheBusy,
        PutMessageStatus::UnknownError,
        PutMessageStatus::InSyncReplicasNotEnough,
        PutMessageStatus::PutToRemoteBrokerFail,
        PutMessageStatus::LmqConsumeQueueNumExceeded,
        PutMessageStatus::WheelTimerFlowControl,
        PutMessageStatus::WheelTimerMsgIllegal,
        PutMessageStatus::WheelTimerNotEnable,
    ];
}

/// A message as a producer hands it to the store.
#[derive(Clone, Debug, Default)]
pub struct Message {
    pub topic: String,
    pub body: Vec<u8>,
    pub queue_id: i32,
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    /// `None`: the store host is used (the producer is local).
    pub born_host: Option<HostAddr>,
    /// Ordered properties, TAGS and KEYS included.
    pub properties: Vec<(String, String)>,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
}

impl Message {
    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Limits the pre-append checks apply (from the store configuration).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MessageLimits {
    /// `maxMessageSize`: largest body; the whole record may exceed it by at most 64 KiB.
    pub max_message_size: i32,
    /// Largest record a commitlog segment can take (segment size minus the 8-byte blank).
    pub max_record_in_segment: i64,
}

/// Extra record bytes allowed beyond `maxMessageSize` (encoder buffer slack).
pub(crate) const MAX_RECORD_SLACK: i64 = 64 * 1024;
/// Largest properties string (`Short.MAX_VALUE`).
pub(crate) const MAX_PROPERTIES_LENGTH: usize = i16::MAX as usize;

/// Checks a topic name as RocketMQ's broker does: non-empty, at most 127 bytes (255 for
/// `%RETRY%` topics), only `[%|a-zA-Z0-9_-]`.
pub(crate) fn topic_is_legal(topic: &str) -> bool {
    let len = topic.len();
    if len == 0 || len > 255 || (len > 127 && !topic.starts_with("%RETRY%")) {
        return false;
    }
    topic.bytes().all(|b| TOPIC_BYTES[usize::from(b)])
}

/// The bytes a topic may hold, `[%|a-zA-Z0-9_-]`, as a table of all 256 values: one load a
/// byte on every put instead of the range tests.
const TOPIC_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0usize;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || matches!(c, b'%' | b'|' | b'_' | b'-');
        b += 1;
    }
    table
};

/// A stored message read back from the commitlog (RocketMQ's `MessageExt`): the raw record,
/// copied out of the segment, with its fixed fields decoded and the variable ones located.
/// Body, topic and properties are decoded only when asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageExt {
    raw: Box<[u8]>,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    pub store_size: i32,
    pub body_crc: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: HostAddr,
    pub store_timestamp: i64,
    pub store_host: HostAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    body: (u32, u32),
    topic: (u32, u32),
    properties: (u32, u32),
    /// The body decompressed, for a compressed record read with decompression.
    decompressed: Option<Box<[u8]>>,
    /// SYSFLAG as stored ([`MessageExt::sys_flag`] loses the COMPRESSED bit when the body is
    /// decompressed, as RocketMQ's decoder does).
    stored_sys_flag: i32,
    /// A topic given instead of the record's (a transaction half shown with its real topic).
    topic_override: Option<Box<str>>,
    /// The stored body when it was not copied into `raw` (which then lacks it): a range of
    /// its segment's read-only mapping, kept alive and unchanged by this message.
    mapped_body: Option<MappedBody>,
}

/// A body left in its segment's read-only mapping.
#[derive(Clone, Debug)]
struct MappedBody {
    view: std::sync::Arc<crate::file::segment_view::SegmentView>,
    start: i64,
    end: i64,
}

impl MappedBody {
    fn bytes(&self) -> &[u8] {
        self.view
            .bytes(self.start, self.end)
            .expect("a mapped body lies inside its segment")
    }
}

impl PartialEq for MappedBody {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for MappedBody {}

fn span(outer: &[u8], inner: &[u8]) -> (u32, u32) {
    let start = inner.as_ptr() as usize - outer.as_ptr() as usize;
    (start as u32, (start + inner.len()) as u32)
}

impl MessageExt {
    /// Copies a validated record out of the segment it was decoded from.
    pub(crate) fn from_record(d: &DecodedRecord<'_>, record: &[u8]) -> MessageExt {
        MessageExt::with_raw(d, record, record[..d.total_size as usize].into())
    }

    /// The message of record `d` (decoded from `record`) whose bytes are `raw`.
    fn with_raw(d: &DecodedRecord<'_>, record: &[u8], raw: Box<[u8]>) -> MessageExt {
        MessageExt {
            queue_id: d.queue_id,
            flag: d.flag,
            queue_offset: d.queue_offset,
            commit_log_offset: d.physical_offset,
            store_size: d.total_size,
            body_crc: d.body_crc,
            sys_flag: d.sys_flag,
            born_timestamp: d.born_timestamp,
            born_host: d.born_host,
            store_timestamp: d.store_timestamp,
            store_host: d.store_host,
            reconsume_times: d.reconsume_times,
            prepared_transaction_offset: d.prepared_transaction_offset,
            body: span(record, d.body),
            topic: span(record, d.topic),
            properties: span(record, d.properties),
            raw,
            decompressed: None,
            stored_sys_flag: d.sys_flag,
            topic_override: None,
            mapped_body: None,
        }
    }

    /// As [`MessageExt::from_record`], without copying the body: it stays in `view` (the
    /// read-only mapping of the record's segment, where the record starts at `record_pos`),
    /// which the message holds. The rest of the record is copied.
    pub(crate) fn from_record_mapped(
        d: &DecodedRecord<'_>,
        record: &[u8],
        view: std::sync::Arc<crate::file::segment_view::SegmentView>,
        record_pos: i64,
    ) -> MessageExt {
        let record = &record[..d.total_size as usize];
        let (b0, b1) = span(record, d.body);
        let mut raw = Vec::with_capacity(record.len() - (b1 - b0) as usize);
        raw.extend_from_slice(&record[..b0 as usize]);
        raw.extend_from_slice(&record[b1 as usize..]);
        let len = b1 - b0;
        // Topic and properties follow the body in the record.
        let shift = |(a, b): (u32, u32)| if a >= b1 { (a - len, b - len) } else { (a, b) };
        let mut m = MessageExt::with_raw(d, record, raw.into_boxed_slice());
        m.body = (b0, b0);
        m.topic = shift(span(record, d.topic));
        m.properties = shift(span(record, d.properties));
        view.pin(record_pos + i64::from(b1));
        m.mapped_body = Some(MappedBody {
            view,
            start: record_pos + i64::from(b0),
            end: record_pos + i64::from(b1),
        });
        m
    }

    /// Decompresses a compressed body (see [`crate::format::compression`]): [`MessageExt::body`] then
    /// gives the body the producer sent, and `sys_flag` loses the COMPRESSED bit (keeping the
    /// compression type bits), as in the `MessageExt` RocketMQ's client decoder gives.
    /// Nothing changes for an uncompressed record.
    pub(crate) fn decompress(&mut self) -> Result<(), crate::format::compression::DecompressError> {
        if self.stored_sys_flag & sysflag::COMPRESSED == 0 || self.decompressed.is_some() {
            return Ok(());
        }
        let mut out = Vec::new();
        crate::format::compression::decompress_into(
            self.stored_sys_flag,
            self.stored_body(),
            &mut out,
        )?;
        self.decompressed = Some(out.into_boxed_slice());
        self.sys_flag &= !sysflag::COMPRESSED;
        Ok(())
    }

    /// SYSFLAG as stored in the record.
    pub fn stored_sys_flag(&self) -> i32 {
        self.stored_sys_flag
    }

    fn slice(&self, (a, b): (u32, u32)) -> &[u8] {
        &self.raw[a as usize..b as usize]
    }

    /// The body: decompressed when the read asked for it (`MessageExt::decompress`) on a
    /// compressed record, else as stored.
    pub fn body(&self) -> &[u8] {
        match &self.decompressed {
            Some(b) => b,
            None => self.stored_body(),
        }
    }

    /// The body bytes as stored in the record (compressed for a compressed record); the
    /// BODYCRC covers these.
    pub fn stored_body(&self) -> &[u8] {
        match &self.mapped_body {
            Some(m) => m.bytes(),
            None => self.slice(self.body),
        }
    }

    pub fn topic(&self) -> Cow<'_, str> {
        match &self.topic_override {
            Some(t) => Cow::Borrowed(t),
            None => String::from_utf8_lossy(self.slice(self.topic)),
        }
    }

    /// Shows the message with `topic` instead of its record's (as RocketMQ's `setTopic` on a
    /// decoded message: the transaction check hands a half to the producer with its real
    /// topic).
    pub fn set_topic(&mut self, topic: &str) {
        self.topic_override = Some(topic.into());
    }

    pub(crate) fn properties_str(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.slice(self.properties))
    }

    pub fn properties(&self) -> Vec<(String, String)> {
        parse_properties(&self.properties_str())
    }

    /// One property, without building the map (None if the properties are not UTF-8).
    pub fn property(&self, name: &str) -> Option<&str> {
        std::str::from_utf8(self.slice(self.properties))
            .ok()
            .and_then(|p| find_property(p, name))
    }

    pub fn tags(&self) -> Option<&str> {
        self.property(property::TAGS)
    }

    /// KEYS split on spaces (empty without keys).
    pub fn keys(&self) -> Vec<&str> {
        self.property(property::KEYS)
            .map(|k| {
                k.split(property::KEY_SEPARATOR)
                    .filter(|k| !k.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn msg_id(&self) -> String {
        message_id(&self.store_host, self.commit_log_offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_rules() {
        assert!(topic_is_legal("TopicA"));
        assert!(topic_is_legal("%DLQ%group|x_y-1"));
        assert!(!topic_is_legal(""));
        assert!(!topic_is_legal("../x"));
        assert!(!topic_is_legal("a/b"));
        assert!(!topic_is_legal("a b"));
        assert!(!topic_is_legal("caf\u{e9}"));
        assert!(topic_is_legal(&"a".repeat(127)));
        // Every ASCII byte, one at a time and inside a name: exactly `[%|a-zA-Z0-9_-]`.
        let legal: Vec<u8> = (b'a'..=b'z')
            .chain(b'A'..=b'Z')
            .chain(b'0'..=b'9')
            .chain(*b"%|_-")
            .collect();
        for b in 0u8..128 {
            let c = char::from(b);
            let want = legal.contains(&b);
            assert_eq!(topic_is_legal(&c.to_string()), want, "byte {b}");
            assert_eq!(topic_is_legal(&format!("ab{c}cd")), want, "byte {b}");
        }
    }

    #[test]
    fn message_ids() {
        let h = HostAddr::parse("127.0.0.1:10911").unwrap();
        assert_eq!(message_id(&h, 0), "7F00000100002A9F0000000000000000");
        assert_eq!(message_id(&h, 1580), "7F00000100002A9F000000000000062C");
    }

    #[test]
    fn tag_codes() {
        assert_eq!(tags_code(Some("TAG1")), 2_567_159);
        assert_eq!(tags_code(Some("polygenelubricants")), -2_147_483_648);
        assert_eq!(tags_code(None), 0);
        assert_eq!(tags_code(Some("")), 0);
    }
}
