//! The commitlog record codec: RocketMQ's 17-field message record (STORE_SPEC §1), byte for byte.
//!
//! Encoding is split in two so the append path can copy straight into the mapped file: a
//! [`PreparedMessage`] is validated and measured outside the append lock (body CRC, properties
//! string, length), then [`PreparedMessage::write_record`] lays the bytes down under the lock with
//! the queue offset, physical offset and store timestamp that only the lock can give.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::util::{hex_upper, java_hash, masked_crc32};

/// `MESSAGE_MAGIC_CODE`: record with a 1-byte topic length.
pub const MESSAGE_MAGIC_CODE_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// `MESSAGE_MAGIC_CODE_V2`: record with a 2-byte topic length.
pub const MESSAGE_MAGIC_CODE_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// `BLANK_MAGIC_CODE`: the end-of-file filler record.
pub const BLANK_MAGIC_CODE: i32 = 0xCBD4_3194_u32 as i32;
/// `END_FILE_MIN_BLANK_LENGTH`: size + magic of the blank record.
pub const END_FILE_MIN_BLANK_LENGTH: i32 = 8;

/// Offsets of fixed fields (MessageDecoder constants).
pub const QUEUE_OFFSET_POSITION: usize = 20;
pub const PHYSICAL_OFFSET_POSITION: usize = 28;
pub const SYSFLAG_POSITION: usize = 36;
pub const BORN_HOST_POSITION: usize = 48;

/// Properties separators (`NAME_VALUE_SEPARATOR`, `PROPERTY_SEPARATOR`).
pub const NAME_VALUE_SEPARATOR: char = '\u{1}';
pub const PROPERTY_SEPARATOR: char = '\u{2}';

/// Well-known property names (MessageConst).
pub mod property {
    pub const TAGS: &str = "TAGS";
    pub const KEYS: &str = "KEYS";
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    pub const WAIT: &str = "WAIT";
    pub const DELAY: &str = "DELAY";
    pub const KEY_SEPARATOR: char = ' ';
}

/// SYSFLAG bits (MessageSysFlag).
pub mod sysflag {
    pub const COMPRESSED: i32 = 0x1;
    pub const MULTI_TAGS: i32 = 0x2;
    pub const TRANSACTION_NOT_TYPE: i32 = 0x0;
    pub const TRANSACTION_PREPARED_TYPE: i32 = 0x4;
    pub const TRANSACTION_COMMIT_TYPE: i32 = 0x8;
    pub const TRANSACTION_ROLLBACK_TYPE: i32 = 0xC;
    pub const BORNHOST_V6: i32 = 0x10;
    pub const STOREHOSTADDRESS_V6: i32 = 0x20;
    pub const NEED_UNWRAP: i32 = 0x40;
    pub const INNER_BATCH: i32 = 0x80;

    /// `getTransactionValue`.
    pub fn transaction_value(flag: i32) -> i32 {
        flag & TRANSACTION_ROLLBACK_TYPE
    }
}

/// Record version, chosen by topic length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageVersion {
    V1,
    V2,
}

impl MessageVersion {
    pub fn magic(self) -> i32 {
        match self {
            MessageVersion::V1 => MESSAGE_MAGIC_CODE_V1,
            MessageVersion::V2 => MESSAGE_MAGIC_CODE_V2,
        }
    }

    pub fn from_magic(magic: i32) -> Option<Self> {
        match magic {
            MESSAGE_MAGIC_CODE_V1 => Some(MessageVersion::V1),
            MESSAGE_MAGIC_CODE_V2 => Some(MessageVersion::V2),
            _ => None,
        }
    }

    /// Bytes of the topic-length field.
    pub fn topic_length_size(self) -> i64 {
        match self {
            MessageVersion::V1 => 1,
            MessageVersion::V2 => 2,
        }
    }

    /// `autoMessageVersionOnTopicLen`: V2 only when the topic is longer than 127 bytes.
    pub fn for_topic_len(len: usize) -> Self {
        if len > 127 {
            MessageVersion::V2
        } else {
            MessageVersion::V1
        }
    }
}

/// A born or store host: IPv4 (8 bytes on disk) or IPv6 (20 bytes on disk), port as an int.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostAddr {
    V4 { ip: [u8; 4], port: i32 },
    V6 { ip: [u8; 16], port: i32 },
}

impl HostAddr {
    pub const LOCALHOST_V4: HostAddr = HostAddr::V4 {
        ip: [127, 0, 0, 1],
        port: 0,
    };

    /// Parses `"1.2.3.4:10911"` or `"[::1]:10911"`.
    pub fn parse(s: &str) -> Option<HostAddr> {
        let addr: SocketAddr = s.trim().parse().ok()?;
        Some(Self::from(addr))
    }

    pub fn is_v6(&self) -> bool {
        matches!(self, HostAddr::V6 { .. })
    }

    /// Bytes this address takes in a record.
    pub fn encoded_len(&self) -> i64 {
        if self.is_v6() {
            20
        } else {
            8
        }
    }

    pub fn ip_bytes(&self) -> &[u8] {
        match self {
            HostAddr::V4 { ip, .. } => ip,
            HostAddr::V6 { ip, .. } => ip,
        }
    }

    pub fn port(&self) -> i32 {
        match self {
            HostAddr::V4 { port, .. } | HostAddr::V6 { port, .. } => *port,
        }
    }

    fn decode(buf: &[u8], v6: bool) -> HostAddr {
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

/// `MessageExtEncoder.calMsgLength`, in i64 so absurd inputs cannot overflow.
pub fn cal_msg_length(
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

/// `messageProperties2String`: `name \x01 value \x02` for every entry.
pub fn encode_properties<'a, I>(props: I) -> String
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let mut out = String::new();
    for (k, v) in props {
        out.push_str(k);
        out.push(NAME_VALUE_SEPARATOR);
        out.push_str(v);
        out.push(PROPERTY_SEPARATOR);
    }
    out
}

/// `string2messageProperties`: split on `\x02`, then on the first `\x01`; entries with an empty
/// name or value are ignored, the last entry may lack its trailing `\x02`. A name given more
/// than once keeps only its last entry (a Java map's `put` replaces the value).
pub fn parse_properties(s: &str) -> Vec<(String, String)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for item in s.split(PROPERTY_SEPARATOR) {
        if let Some((k, v)) = item.split_once(NAME_VALUE_SEPARATOR) {
            if !k.is_empty() && !v.is_empty() {
                out.push((k, v));
            }
        }
    }
    keep_last_of_each(&mut out, |p| p.0);
    out.into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Drops every item whose name comes again later in `items`, keeping the order of the rest:
/// the last entry of a name wins, as in RocketMQ's properties map. A handful of names (the
/// usual case) are compared pairwise, more go through a hash set.
pub fn keep_last_of_each<T, N: Eq + std::hash::Hash>(items: &mut Vec<T>, name: impl Fn(&T) -> N) {
    let n = items.len();
    if n < 2 {
        return;
    }
    if n <= 16 {
        let repeated =
            |i: usize, items: &[T]| items[i + 1..].iter().any(|p| name(p) == name(&items[i]));
        if !(0..n - 1).any(|i| repeated(i, items)) {
            return;
        }
        let mut i = 0;
        while i < items.len() {
            if repeated(i, items) {
                items.remove(i);
            } else {
                i += 1;
            }
        }
        return;
    }
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut keep = vec![false; n];
    for i in (0..n).rev() {
        keep[i] = seen.insert(name(&items[i]));
    }
    let mut i = 0;
    items.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}

/// Looks one property up in a raw properties string without building a map. A name stored
/// more than once (RocketMQ 5.3's batch members hold `UNIQ_KEY` twice) answers with its last
/// value, as RocketMQ's properties map does (later entries replace earlier ones).
pub fn find_property<'a>(props: &'a str, name: &str) -> Option<&'a str> {
    let mut found: Option<&'a [u8]> = None;
    for_each_property(props.as_bytes(), |k, v| {
        if k == name.as_bytes() && !v.is_empty() {
            found = Some(v);
        }
    });
    // The separators are ASCII, so a value between them is whole UTF-8 of `props`.
    found.and_then(|v| std::str::from_utf8(v).ok())
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
pub fn tags_code(tags: Option<&str>) -> i64 {
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
pub struct MessageLimits {
    /// `maxMessageSize`: largest body; the whole record may exceed it by at most 64 KiB.
    pub max_message_size: i32,
    /// Largest record a commitlog segment can take (segment size minus the 8-byte blank).
    pub max_record_in_segment: i64,
}

/// Extra record bytes allowed beyond `maxMessageSize` (encoder buffer slack).
pub const MAX_RECORD_SLACK: i64 = 64 * 1024;
/// Largest properties string (`Short.MAX_VALUE`).
pub const MAX_PROPERTIES_LENGTH: usize = i16::MAX as usize;

/// Checks a topic name as RocketMQ's broker does: non-empty, at most 127 bytes (255 for
/// `%RETRY%` topics), only `[%|a-zA-Z0-9_-]`.
pub fn topic_is_legal(topic: &str) -> bool {
    let len = topic.len();
    if len == 0 || len > 255 || (len > 127 && !topic.starts_with("%RETRY%")) {
        return false;
    }
    topic
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
}

fn property_text_is_legal(s: &str) -> bool {
    !s.contains([NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR])
}

/// The per-record inputs shared by every record of a batch (or the one record of a single put).
#[derive(Clone, Copy, Debug)]
pub struct RecordEnvelope<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: HostAddr,
    pub store_host: HostAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
}

/// Checks the envelope and properties common to a message or a whole batch.
pub fn check_envelope(env: &RecordEnvelope<'_>, properties: &str) -> Result<(), PutMessageStatus> {
    if !topic_is_legal(env.topic) || env.queue_id < 0 {
        return Err(PutMessageStatus::MessageIllegal);
    }
    if properties.len() > MAX_PROPERTIES_LENGTH {
        return Err(PutMessageStatus::PropertiesSizeExceeded);
    }
    Ok(())
}

/// Validates properties given as pairs and renders the stored string.
pub fn render_properties<'a, I>(props: I) -> Result<String, PutMessageStatus>
where
    I: IntoIterator<Item = (&'a str, &'a str)> + Clone,
{
    for (k, v) in props.clone() {
        // An empty name or value would vanish on read; a separator would corrupt the string.
        if k.is_empty() || v.is_empty() || !property_text_is_legal(k) || !property_text_is_legal(v)
        {
            return Err(PutMessageStatus::MessageIllegal);
        }
    }
    Ok(encode_properties(props))
}

/// Offsets inside a record head (everything before the body) that vary per record.
const TOTAL_SIZE_POS: usize = 0;
const BODY_CRC_POS: usize = 8;

/// The bytes every record of one envelope shares, encoded once: the head up to and including the
/// body-length field, and the tail after the body (topic and properties). Laying a record down is
/// then a copy of the head, five patched fields, the body and the tail.
#[derive(Clone, Debug)]
pub struct RecordTemplate<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    /// SYSFLAG as written (IPv6 bits set from the hosts).
    pub sys_flag: i32,
    pub version: MessageVersion,
    head: Vec<u8>,
    tail: Vec<u8>,
    store_ts_pos: usize,
}

impl<'a> RecordTemplate<'a> {
    /// Encodes the shared parts; `properties` must already be validated.
    pub fn new(env: &RecordEnvelope<'a>, properties: &str) -> RecordTemplate<'a> {
        let version = MessageVersion::for_topic_len(env.topic.len());
        let mut sys_flag = env.sys_flag & !(sysflag::BORNHOST_V6 | sysflag::STOREHOSTADDRESS_V6);
        if env.born_host.is_v6() {
            sys_flag |= sysflag::BORNHOST_V6;
        }
        if env.store_host.is_v6() {
            sys_flag |= sysflag::STOREHOSTADDRESS_V6;
        }
        let mut head = Vec::with_capacity(112);
        head.extend_from_slice(&0i32.to_be_bytes()); // TOTALSIZE
        head.extend_from_slice(&version.magic().to_be_bytes());
        head.extend_from_slice(&0i32.to_be_bytes()); // BODYCRC
        head.extend_from_slice(&env.queue_id.to_be_bytes());
        head.extend_from_slice(&env.flag.to_be_bytes());
        head.extend_from_slice(&0i64.to_be_bytes()); // QUEUEOFFSET
        head.extend_from_slice(&0i64.to_be_bytes()); // PHYSICALOFFSET
        head.extend_from_slice(&sys_flag.to_be_bytes());
        head.extend_from_slice(&env.born_timestamp.to_be_bytes());
        head.extend_from_slice(env.born_host.ip_bytes());
        head.extend_from_slice(&env.born_host.port().to_be_bytes());
        let store_ts_pos = head.len();
        head.extend_from_slice(&0i64.to_be_bytes()); // STORETIMESTAMP
        head.extend_from_slice(env.store_host.ip_bytes());
        head.extend_from_slice(&env.store_host.port().to_be_bytes());
        head.extend_from_slice(&env.reconsume_times.to_be_bytes());
        head.extend_from_slice(&env.prepared_transaction_offset.to_be_bytes());
        head.extend_from_slice(&0i32.to_be_bytes()); // BODY LENGTH
        let mut tail = Vec::with_capacity(2 + env.topic.len() + 2 + properties.len());
        match version {
            MessageVersion::V1 => tail.push(env.topic.len() as u8),
            MessageVersion::V2 => tail.extend_from_slice(&(env.topic.len() as i16).to_be_bytes()),
        }
        tail.extend_from_slice(env.topic.as_bytes());
        tail.extend_from_slice(&(properties.len() as i16).to_be_bytes());
        tail.extend_from_slice(properties.as_bytes());
        debug_assert_eq!(
            (head.len() + tail.len()) as i64,
            cal_msg_length(
                version,
                sys_flag,
                0,
                env.topic.len() as i64,
                properties.len() as i64
            )
        );
        RecordTemplate {
            topic: env.topic,
            queue_id: env.queue_id,
            sys_flag,
            version,
            head,
            tail,
            store_ts_pos,
        }
    }

    /// Transaction type bits of the records.
    pub fn transaction_type(&self) -> i32 {
        sysflag::transaction_value(self.sys_flag)
    }

    /// Record length for a body of `body_len` bytes.
    pub fn record_len(&self, body_len: usize) -> i64 {
        (self.head.len() + body_len + self.tail.len()) as i64
    }

    /// Validates one body against the limits and measures its record.
    pub fn prepare(
        &self,
        body: &'a [u8],
        limits: &MessageLimits,
    ) -> Result<PreparedBody<'a>, PutMessageStatus> {
        if body.len() > limits.max_message_size.max(0) as usize {
            return Err(PutMessageStatus::MessageIllegal);
        }
        let total = self.record_len(body.len());
        if total > i64::from(limits.max_message_size) + MAX_RECORD_SLACK
            || total > limits.max_record_in_segment
        {
            return Err(PutMessageStatus::MessageIllegal);
        }
        Ok(PreparedBody {
            body,
            body_crc: masked_crc32(body),
            // Bounded by max_message_size + 64 KiB above, so it fits an i32.
            total_len: total as i32,
        })
    }

    /// Writes one whole record into `dst` (exactly `body.total_len` bytes).
    #[inline]
    pub fn write_record(
        &self,
        dst: &mut [u8],
        body: &PreparedBody<'_>,
        queue_offset: i64,
        phy_offset: i64,
        store_ts: i64,
    ) {
        let h = self.head.len();
        let b = body.body.len();
        let (head, rest) = dst.split_at_mut(h);
        let (body_dst, tail) = rest.split_at_mut(b);
        head.copy_from_slice(&self.head);
        head[TOTAL_SIZE_POS..TOTAL_SIZE_POS + 4].copy_from_slice(&body.total_len.to_be_bytes());
        head[BODY_CRC_POS..BODY_CRC_POS + 4].copy_from_slice(&body.body_crc.to_be_bytes());
        head[QUEUE_OFFSET_POSITION..QUEUE_OFFSET_POSITION + 8]
            .copy_from_slice(&queue_offset.to_be_bytes());
        head[PHYSICAL_OFFSET_POSITION..PHYSICAL_OFFSET_POSITION + 8]
            .copy_from_slice(&phy_offset.to_be_bytes());
        head[self.store_ts_pos..self.store_ts_pos + 8].copy_from_slice(&store_ts.to_be_bytes());
        head[h - 4..].copy_from_slice(&(b as i32).to_be_bytes());
        body_dst.copy_from_slice(body.body);
        tail.copy_from_slice(&self.tail);
    }
}

/// One validated body of a template: its CRC and record length.
#[derive(Clone, Copy, Debug)]
pub struct PreparedBody<'a> {
    pub body: &'a [u8],
    pub body_crc: i32,
    pub total_len: i32,
}

/// A single validated message: a template and one body (tests, tools and single puts).
#[derive(Clone, Debug)]
pub struct PreparedMessage<'a> {
    pub template: RecordTemplate<'a>,
    pub body: PreparedBody<'a>,
}

impl<'a> PreparedMessage<'a> {
    /// Validates one body under an envelope and measures the record.
    pub fn new(
        env: &RecordEnvelope<'a>,
        body: &'a [u8],
        properties: &str,
        limits: &MessageLimits,
    ) -> Result<Self, PutMessageStatus> {
        let template = RecordTemplate::new(env, properties);
        let body = template.prepare(body, limits)?;
        Ok(PreparedMessage { template, body })
    }

    pub fn total_len(&self) -> i32 {
        self.body.total_len
    }

    /// Encodes into a fresh vector (tests, tools; the store writes in place).
    pub fn to_vec(&self, queue_offset: i64, phy_offset: i64, store_ts: i64) -> Vec<u8> {
        let mut v = vec![0u8; self.body.total_len as usize];
        self.template
            .write_record(&mut v, &self.body, queue_offset, phy_offset, store_ts);
        v
    }
}

/// Writes the 8-byte end-of-file blank record: remaining size + BLANK magic.
pub fn write_blank(dst: &mut [u8], max_blank: i32) {
    dst[..4].copy_from_slice(&max_blank.to_be_bytes());
    dst[4..8].copy_from_slice(&BLANK_MAGIC_CODE.to_be_bytes());
}

#[inline(always)]
pub fn be_i32(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

#[inline(always)]
pub fn be_i64(buf: &[u8], at: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    i64::from_be_bytes(b)
}

#[inline(always)]
pub fn be_i16(buf: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([buf[at], buf[at + 1]])
}

/// A record decoded in place; slices borrow the mapped file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedRecord<'a> {
    pub total_size: i32,
    pub version: MessageVersion,
    pub body_crc: i32,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: HostAddr,
    pub store_timestamp: i64,
    pub store_host: HostAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: &'a [u8],
    pub topic: &'a [u8],
    pub properties: &'a [u8],
}

impl<'a> DecodedRecord<'a> {
    pub fn topic_str(&self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.topic)
    }

    pub fn properties_str(&self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.properties)
    }

    pub fn msg_id(&self) -> String {
        message_id(&self.store_host, self.physical_offset)
    }

    pub fn transaction_type(&self) -> i32 {
        sysflag::transaction_value(self.sys_flag)
    }
}

/// The three outcomes of `checkMessageAndReturnSize`.
#[derive(Debug, PartialEq, Eq)]
pub enum RecordCheck<'a> {
    /// A valid message record.
    Message(DecodedRecord<'a>),
    /// The end-of-file blank record (`size` = the remaining bytes it claims).
    Blank { size: i32 },
    /// Not a valid record. `size` is the claimed TOTALSIZE when only the length formula
    /// disagreed (RocketMQ's "half message"), otherwise -1.
    Invalid { size: i32, reason: &'static str },
}

/// Smallest valid record: IPv4 hosts, empty body, 1-byte topic, empty properties.
pub const MIN_RECORD_SIZE: i32 = 91 + 1;

/// Validates and decodes the record at the start of `buf` (which runs to the end of the readable
/// region). With `check_crc` the body CRC is verified.
pub fn check_record(buf: &[u8], check_crc: bool) -> RecordCheck<'_> {
    if buf.len() <= 4 {
        return RecordCheck::Invalid {
            size: -1,
            reason: "fewer than 4 bytes left",
        };
    }
    let total_size = be_i32(buf, 0);
    if buf.len() < 8 {
        return RecordCheck::Invalid {
            size: -1,
            reason: "truncated record header",
        };
    }
    let magic = be_i32(buf, 4);
    if magic == BLANK_MAGIC_CODE {
        return RecordCheck::Blank { size: total_size };
    }
    let Some(version) = MessageVersion::from_magic(magic) else {
        return RecordCheck::Invalid {
            size: -1,
            reason: "bad magic code",
        };
    };
    if total_size < MIN_RECORD_SIZE || total_size as usize > buf.len() {
        return RecordCheck::Invalid {
            size: -1,
            reason: "record size out of range",
        };
    }
    let rec = &buf[..total_size as usize];
    let invalid = |reason| RecordCheck::Invalid { size: -1, reason };
    let sys_flag = be_i32(rec, SYSFLAG_POSITION);
    if i64::from(total_size) < cal_msg_length(version, sys_flag, 0, 0, 0) {
        // IPv6 bits widen the host fields past what the record holds.
        return RecordCheck::Invalid {
            size: -1,
            reason: "record too short for its fields",
        };
    }
    let born_v6 = sys_flag & sysflag::BORNHOST_V6 != 0;
    let store_v6 = sys_flag & sysflag::STOREHOSTADDRESS_V6 != 0;
    let born_len = if born_v6 { 20 } else { 8 };
    let store_len = if store_v6 { 20 } else { 8 };
    let mut pos = BORN_HOST_POSITION;
    let born_host = HostAddr::decode(&rec[pos..], born_v6);
    pos += born_len;
    let store_timestamp = be_i64(rec, pos);
    pos += 8;
    let store_host = HostAddr::decode(&rec[pos..], store_v6);
    pos += store_len;
    let reconsume_times = be_i32(rec, pos);
    let prepared_transaction_offset = be_i64(rec, pos + 4);
    pos += 12;
    let body_len = be_i32(rec, pos);
    pos += 4;
    if body_len < 0 || pos + body_len as usize > rec.len() {
        return invalid("body length out of range");
    }
    let body = &rec[pos..pos + body_len as usize];
    pos += body_len as usize;
    let topic_len = match version {
        MessageVersion::V1 => {
            if pos >= rec.len() {
                return invalid("topic length out of range");
            }
            let l = rec[pos] as i8;
            pos += 1;
            i32::from(l)
        }
        MessageVersion::V2 => {
            if pos + 2 > rec.len() {
                return invalid("topic length out of range");
            }
            let l = be_i16(rec, pos);
            pos += 2;
            i32::from(l)
        }
    };
    if topic_len < 0 || pos + topic_len as usize + 2 > rec.len() {
        return invalid("topic length out of range");
    }
    let topic = &rec[pos..pos + topic_len as usize];
    pos += topic_len as usize;
    let prop_len = be_i16(rec, pos);
    pos += 2;
    if prop_len < 0 || pos + prop_len as usize > rec.len() {
        return invalid("properties length out of range");
    }
    let properties = &rec[pos..pos + prop_len as usize];
    let body_crc = be_i32(rec, 8);
    if check_crc && body_len > 0 && masked_crc32(body) != body_crc {
        return invalid("body CRC mismatch");
    }
    let expected = cal_msg_length(
        version,
        sys_flag,
        i64::from(body_len),
        i64::from(topic_len),
        i64::from(prop_len),
    );
    if expected != i64::from(total_size) {
        return RecordCheck::Invalid {
            size: total_size,
            reason: "record size disagrees with the length formula",
        };
    }
    RecordCheck::Message(DecodedRecord {
        total_size,
        version,
        body_crc,
        queue_id: be_i32(rec, 12),
        flag: be_i32(rec, 16),
        queue_offset: be_i64(rec, QUEUE_OFFSET_POSITION),
        physical_offset: be_i64(rec, PHYSICAL_OFFSET_POSITION),
        sys_flag,
        born_timestamp: be_i64(rec, 40),
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        body,
        topic,
        properties,
    })
}

/// The fields dispatch and bulk reads need, located in a record without decoding the rest (no
/// host addresses, no CRC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub total_size: i32,
    /// BODYCRC as stored (not checked by the view).
    pub body_crc: i32,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub store_timestamp: i64,
    pub body: &'a [u8],
    pub topic: &'a [u8],
    pub properties: &'a [u8],
}

impl RecordView<'_> {
    pub fn transaction_type(&self) -> i32 {
        sysflag::transaction_value(self.sys_flag)
    }
}

/// Views `rec` as one whole record: `None` unless it is a message record whose TOTALSIZE is
/// `rec.len()` and whose fields agree with the length formula.
#[inline]
pub fn view_record(rec: &[u8]) -> Option<RecordView<'_>> {
    if rec.len() < MIN_RECORD_SIZE as usize || be_i32(rec, 0) as usize != rec.len() {
        return None;
    }
    let version = MessageVersion::from_magic(be_i32(rec, 4))?;
    let sys_flag = be_i32(rec, SYSFLAG_POSITION);
    let born = if sys_flag & sysflag::BORNHOST_V6 != 0 {
        20
    } else {
        8
    };
    let store = if sys_flag & sysflag::STOREHOSTADDRESS_V6 != 0 {
        20
    } else {
        8
    };
    let ts_at = BORN_HOST_POSITION + born;
    let body_len_at = ts_at + 8 + store + 12;
    if body_len_at + 4 > rec.len() {
        return None;
    }
    let body_len = usize::try_from(be_i32(rec, body_len_at)).ok()?;
    let body_at = body_len_at + 4;
    let topic_len_at = body_at.checked_add(body_len)?;
    let (topic_len, topic_at) = match version {
        MessageVersion::V1 => (
            usize::try_from(*rec.get(topic_len_at)? as i8).ok()?,
            topic_len_at + 1,
        ),
        MessageVersion::V2 => {
            if topic_len_at + 2 > rec.len() {
                return None;
            }
            (
                usize::try_from(be_i16(rec, topic_len_at)).ok()?,
                topic_len_at + 2,
            )
        }
    };
    let props_len_at = topic_at.checked_add(topic_len)?;
    if props_len_at + 2 > rec.len() {
        return None;
    }
    let props_len = usize::try_from(be_i16(rec, props_len_at)).ok()?;
    let props_at = props_len_at + 2;
    let expected = cal_msg_length(
        version,
        sys_flag,
        body_len as i64,
        topic_len as i64,
        props_len as i64,
    );
    if expected != rec.len() as i64 {
        return None;
    }
    Some(RecordView {
        total_size: rec.len() as i32,
        body_crc: be_i32(rec, 8),
        queue_id: be_i32(rec, 12),
        queue_offset: be_i64(rec, QUEUE_OFFSET_POSITION),
        physical_offset: be_i64(rec, PHYSICAL_OFFSET_POSITION),
        sys_flag,
        born_timestamp: be_i64(rec, 40),
        store_timestamp: be_i64(rec, ts_at),
        body: &rec[body_at..body_at + body_len],
        topic: &rec[topic_at..topic_at + topic_len],
        properties: &rec[props_at..props_at + props_len],
    })
}

/// Whether a record's `body` matches its stored BODYCRC (an empty body is not checked, as
/// RocketMQ's `checkMessageAndReturnSize` does not).
#[inline]
pub fn body_crc_matches(body: &[u8], stored_crc: i32) -> bool {
    body.is_empty() || masked_crc32(body) == stored_crc
}

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
}

fn span(outer: &[u8], inner: &[u8]) -> (u32, u32) {
    let start = inner.as_ptr() as usize - outer.as_ptr() as usize;
    (start as u32, (start + inner.len()) as u32)
}

impl MessageExt {
    /// Copies a validated record out of the segment it was decoded from.
    pub fn from_record(d: &DecodedRecord<'_>, record: &[u8]) -> MessageExt {
        let raw: Box<[u8]> = record[..d.total_size as usize].into();
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
        }
    }

    /// Decompresses a compressed body (see [`crate::format::compression`]): [`MessageExt::body`] then
    /// gives the body the producer sent, and `sys_flag` loses the COMPRESSED bit (keeping the
    /// compression type bits), as in the `MessageExt` RocketMQ's client decoder gives.
    /// Nothing changes for an uncompressed record.
    pub fn decompress(&mut self) -> Result<(), crate::format::compression::DecompressError> {
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

    /// Whether the body was given back decompressed.
    pub fn is_decompressed(&self) -> bool {
        self.decompressed.is_some()
    }

    fn slice(&self, (a, b): (u32, u32)) -> &[u8] {
        &self.raw[a as usize..b as usize]
    }

    /// The whole record as stored.
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    /// The body: decompressed when [`MessageExt::decompress`] was called on a compressed
    /// record, else as stored.
    pub fn body(&self) -> &[u8] {
        match &self.decompressed {
            Some(b) => b,
            None => self.slice(self.body),
        }
    }

    /// The body bytes as stored in the record (compressed for a compressed record); the
    /// BODYCRC covers these.
    pub fn stored_body(&self) -> &[u8] {
        self.slice(self.body)
    }

    pub fn topic(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.slice(self.topic))
    }

    pub fn topic_bytes(&self) -> &[u8] {
        self.slice(self.topic)
    }

    pub fn properties_str(&self) -> Cow<'_, str> {
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

    pub fn transaction_type(&self) -> i32 {
        sysflag::transaction_value(self.sys_flag)
    }
}

/// Calls `f(name, value)` for every `name \x01 value \x02` item of raw record properties, in
/// order (the value runs to the next `\x02` or the end; an item without `\x01` is skipped), as
/// `split(2)` then the first `1` of each item would. On x86_64 the separators are found 16
/// bytes at a time (SSE2 compares and a bit mask), so the cost is per separator, not per byte.
#[inline(always)]
pub fn for_each_property<'a>(props: &'a [u8], mut f: impl FnMut(&'a [u8], &'a [u8])) {
    let (mut start, mut sep) = (0usize, usize::MAX);
    // A separator byte (1 or 2) at `i`.
    let mut handle = |i: usize| {
        if props[i] == 2 {
            if sep != usize::MAX {
                f(&props[start..sep], &props[sep + 1..i]);
            }
            start = i + 1;
            sep = usize::MAX;
        } else if sep == usize::MAX {
            sep = i;
        }
    };
    let mut i = 0usize;
    #[cfg(target_arch = "x86_64")]
    while i + 16 <= props.len() {
        use std::arch::x86_64::{
            _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is part of every x86_64 CPU; the 16 bytes loaded (unaligned) are inside
        // `props`.
        let mut mask = unsafe {
            let x = _mm_loadu_si128(props.as_ptr().add(i).cast());
            let hits = _mm_or_si128(
                _mm_cmpeq_epi8(x, _mm_set1_epi8(1)),
                _mm_cmpeq_epi8(x, _mm_set1_epi8(2)),
            );
            _mm_movemask_epi8(hits) as u32
        };
        while mask != 0 {
            handle(i + mask.trailing_zeros() as usize);
            mask &= mask - 1;
        }
        i += 16;
    }
    for (j, &b) in props.iter().enumerate().skip(i) {
        if b == 1 || b == 2 {
            handle(j);
        }
    }
    if sep != usize::MAX {
        f(&props[start..sep], &props[sep + 1..]);
    }
}

/// The dispatch view of a record's properties: TAGS, KEYS and UNIQ_KEY in one pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchProps<'a> {
    pub tags: Option<&'a str>,
    pub keys: Option<&'a str>,
    pub uniq_key: Option<&'a str>,
}

impl<'a> DispatchProps<'a> {
    /// One pass over the raw `name \x01 value \x02` bytes; values that are not UTF-8 are
    /// ignored.
    pub fn scan(props: &'a [u8]) -> DispatchProps<'a> {
        let mut out = DispatchProps::default();
        for_each_property(props, |k, v| {
            if v.is_empty() {
                return;
            }
            let slot = match k {
                b"TAGS" => &mut out.tags,
                b"KEYS" => &mut out.keys,
                b"UNIQ_KEY" => &mut out.uniq_key,
                _ => return,
            };
            *slot = if v.is_ascii() {
                // SAFETY: ASCII bytes are valid UTF-8.
                Some(unsafe { std::str::from_utf8_unchecked(v) })
            } else {
                std::str::from_utf8(v).ok()
            };
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference: split on 2, then the first 1 of each item.
    fn split_properties(props: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        props
            .split(|&b| b == 2)
            .filter_map(|item| {
                let sep = item.iter().position(|&b| b == 1)?;
                Some((item[..sep].to_vec(), item[sep + 1..].to_vec()))
            })
            .collect()
    }

    #[test]
    fn property_items_match_split_then_first_separator() {
        let cases: [&[u8]; 9] = [
            b"",
            b"TAGS\x01TagA\x02KEYS\x01a b\x02",
            b"TAGS\x01TagA",
            b"\x01\x02\x01x\x02y\x02",
            b"A_LONG_PROPERTY_NAME\x01with a long value, longer than a word\x02B\x01\x01c\x02",
            b"no separators at all in this text",
            b"k\x01v\x02\x02\x02k2\x01v2",
            "n\u{e9}me\x01v\u{e4}lue\x02".as_bytes(),
            b"\x02\x02\x02\x02\x02\x02\x02\x02\x02\x01",
        ];
        for props in cases {
            let mut got = Vec::new();
            for_each_property(props, |k, v| got.push((k.to_vec(), v.to_vec())));
            assert_eq!(got, split_properties(props), "{props:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn property_items_match_the_reference_on_random_bytes(
            props in proptest::collection::vec(proptest::prop_oneof![proptest::strategy::Just(1u8), proptest::strategy::Just(2u8), 0u8..=255], 0..80)
        ) {
            let mut got = Vec::new();
            for_each_property(&props, |k, v| got.push((k.to_vec(), v.to_vec())));
            proptest::prop_assert_eq!(got, split_properties(&props));
        }
    }

    fn limits() -> MessageLimits {
        MessageLimits {
            max_message_size: 4 * 1024 * 1024,
            max_record_in_segment: 1 << 30,
        }
    }

    fn env(topic: &str) -> RecordEnvelope<'_> {
        RecordEnvelope {
            topic,
            queue_id: 0,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: HostAddr::parse("10.0.0.1:5000").unwrap(),
            store_host: HostAddr::parse("127.0.0.1:10911").unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        }
    }

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

    /// STORE_SPEC §1.2: topic "FooBar", 32-byte body, TAGS=TAG1 and a 13-digit KEYS: 158 bytes.
    #[test]
    fn golden_158_byte_record() {
        let props = encode_properties([("TAGS", "TAG1"), ("KEYS", "1700000000000")]);
        assert_eq!(props.len(), 29);
        let body = [b'x'; 32];
        let p = PreparedMessage::new(&env("FooBar"), &body, &props, &limits()).unwrap();
        assert_eq!(p.total_len(), 158);
        let rec = p.to_vec(7, 1580, 1_700_000_000_123);
        assert_eq!(rec.len(), 158);
        // Field positions of §1.2 for IPv4 hosts, V1.
        assert_eq!(be_i32(&rec, 0), 158);
        assert_eq!(be_i32(&rec, 4), MESSAGE_MAGIC_CODE_V1);
        assert_eq!(be_i32(&rec, 8), masked_crc32(&body));
        assert_eq!(be_i64(&rec, 20), 7);
        assert_eq!(be_i64(&rec, 28), 1580);
        assert_eq!(be_i64(&rec, 40), 1_700_000_000_000);
        assert_eq!(&rec[48..52], &[10, 0, 0, 1]);
        assert_eq!(be_i32(&rec, 52), 5000);
        assert_eq!(be_i64(&rec, 56), 1_700_000_000_123);
        assert_eq!(&rec[64..68], &[127, 0, 0, 1]);
        assert_eq!(be_i32(&rec, 68), 10911);
        assert_eq!(be_i32(&rec, 84), 32);
        assert_eq!(rec[88 + 32], 6);
        assert_eq!(&rec[89 + 32..95 + 32], b"FooBar");
        assert_eq!(be_i16(&rec, 95 + 32), 29);
        match check_record(&rec, true) {
            RecordCheck::Message(d) => {
                assert_eq!(d.topic, b"FooBar");
                assert_eq!(d.body, &body);
                assert_eq!(d.queue_offset, 7);
                assert_eq!(d.physical_offset, 1580);
                assert_eq!(
                    parse_properties(&d.properties_str()),
                    vec![
                        ("TAGS".to_string(), "TAG1".to_string()),
                        ("KEYS".to_string(), "1700000000000".to_string())
                    ]
                );
            }
            other => panic!("expected a message, got {other:?}"),
        }
    }

    #[test]
    fn ipv6_hosts_set_sysflag_bits_and_widen_fields() {
        let mut e = env("T");
        e.born_host = HostAddr::parse("[::1]:7").unwrap();
        e.store_host = HostAddr::parse("[fe80::1]:10911").unwrap();
        let p = PreparedMessage::new(&e, b"abc", "", &limits()).unwrap();
        assert_eq!(
            p.template.sys_flag & (sysflag::BORNHOST_V6 | sysflag::STOREHOSTADDRESS_V6),
            0x30
        );
        assert_eq!(p.total_len(), 91 + 24 + 3 + 1);
        let rec = p.to_vec(0, 0, 5);
        let RecordCheck::Message(d) = check_record(&rec, true) else {
            panic!("not valid")
        };
        assert_eq!(d.born_host, e.born_host);
        assert_eq!(d.store_host, e.store_host);
        assert_eq!(d.store_timestamp, 5);
        assert_eq!(d.msg_id().len(), 56);
        assert_eq!(d.born_host.to_string(), "[::1]:7");
    }

    #[test]
    fn v2_for_long_retry_topics() {
        let topic = format!("%RETRY%{}", "g".repeat(150));
        assert!(topic_is_legal(&topic));
        let p = PreparedMessage::new(&env(&topic), b"b", "", &limits()).unwrap();
        assert_eq!(p.template.version, MessageVersion::V2);
        let rec = p.to_vec(0, 0, 0);
        assert_eq!(be_i32(&rec, 4), MESSAGE_MAGIC_CODE_V2);
        let RecordCheck::Message(d) = check_record(&rec, true) else {
            panic!("not valid")
        };
        assert_eq!(d.topic, topic.as_bytes());
        assert!(!topic_is_legal(&"a".repeat(128)));
        assert!(!topic_is_legal(&format!("%RETRY%{}", "g".repeat(249))));
    }

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
    }

    #[test]
    fn three_outcomes_of_the_check() {
        let p = PreparedMessage::new(&env("T"), b"body", "", &limits()).unwrap();
        let mut rec = p.to_vec(0, 0, 0);
        assert!(matches!(check_record(&rec, true), RecordCheck::Message(_)));
        // Blank record.
        let mut blank = vec![0u8; 64];
        write_blank(&mut blank, 64);
        assert_eq!(check_record(&blank, true), RecordCheck::Blank { size: 64 });
        // Zeros read as invalid.
        assert!(matches!(
            check_record(&[0u8; 200], true),
            RecordCheck::Invalid { size: -1, .. }
        ));
        // CRC mismatch is found only when asked.
        rec[88] ^= 0xFF; // first body byte (IPv4 hosts)
        assert!(matches!(
            check_record(&rec, true),
            RecordCheck::Invalid { size: -1, .. }
        ));
        assert!(matches!(check_record(&rec, false), RecordCheck::Message(_)));
        // A size that disagrees with the formula is reported with its claimed size.
        let mut rec = p.to_vec(0, 0, 0);
        let n = rec.len();
        rec.extend_from_slice(&[0; 4]);
        rec[..4].copy_from_slice(&((n + 4) as i32).to_be_bytes());
        assert_eq!(
            check_record(&rec, true),
            RecordCheck::Invalid {
                size: (n + 4) as i32,
                reason: "record size disagrees with the length formula"
            }
        );
        // Truncated buffers.
        let rec = p.to_vec(0, 0, 0);
        assert!(matches!(
            check_record(&rec[..rec.len() - 1], true),
            RecordCheck::Invalid { .. }
        ));
        assert!(matches!(
            check_record(&rec[..4], true),
            RecordCheck::Invalid { .. }
        ));
    }

    #[test]
    fn limits_give_statuses() {
        let big = vec![0u8; 4 * 1024 * 1024 + 1];
        assert_eq!(
            PreparedMessage::new(&env("T"), &big, "", &limits()).unwrap_err(),
            PutMessageStatus::MessageIllegal
        );
        let ok = vec![0u8; 4 * 1024 * 1024];
        assert!(PreparedMessage::new(&env("T"), &ok, "", &limits()).is_ok());
        let long = "v".repeat(40_000);
        let props = render_properties([("k", long.as_str())]).unwrap();
        assert_eq!(
            check_envelope(&env("T"), &props).unwrap_err(),
            PutMessageStatus::PropertiesSizeExceeded
        );
        assert_eq!(
            render_properties([("k", "a\u{1}b")]).unwrap_err(),
            PutMessageStatus::MessageIllegal
        );
        assert_eq!(
            render_properties([("", "v")]).unwrap_err(),
            PutMessageStatus::MessageIllegal
        );
        let mut e = env("T");
        e.queue_id = -1;
        assert_eq!(
            check_envelope(&e, "").unwrap_err(),
            PutMessageStatus::MessageIllegal
        );
        // A record that cannot fit a segment is illegal, not an endless roll.
        let small = MessageLimits {
            max_message_size: 4096,
            max_record_in_segment: 100,
        };
        assert_eq!(
            PreparedMessage::new(&env("T"), &[0u8; 10], "", &small).unwrap_err(),
            PutMessageStatus::MessageIllegal
        );
    }

    #[test]
    fn properties_parsing_follows_rocketmq() {
        assert_eq!(
            parse_properties("a\u{1}1\u{2}b\u{1}2"),
            vec![("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        assert_eq!(
            parse_properties("\u{2}x\u{2}\u{1}v\u{2}k\u{1}\u{2}"),
            vec![]
        );
        assert_eq!(
            find_property("TAGS\u{1}A\u{2}KEYS\u{1}k1 k2\u{2}", "KEYS"),
            Some("k1 k2")
        );
        assert_eq!(find_property("TAGS\u{1}A\u{2}", "KEYS"), None);
        // A repeated name: the last value wins everywhere (RocketMQ's map), as 5.3.3 batch
        // members carry UNIQ_KEY twice (their own id, then the batch's).
        let twice = "UNIQ_KEY\u{1}first\u{2}TAGS\u{1}T\u{2}UNIQ_KEY\u{1}last\u{2}";
        assert_eq!(find_property(twice, "UNIQ_KEY"), Some("last"));
        assert_eq!(
            parse_properties(twice),
            vec![
                ("TAGS".into(), "T".into()),
                ("UNIQ_KEY".into(), "last".into())
            ]
        );
        // Many names, repeated: the hash-set path keeps the same rule.
        let many: String = (0..40)
            .map(|i| format!("k{}\u{1}v{i}\u{2}", i % 25))
            .collect();
        let parsed = parse_properties(&many);
        assert_eq!(parsed.len(), 25);
        for (k, v) in &parsed {
            let i: usize = k[1..].parse().unwrap();
            let last = if i < 15 { i + 25 } else { i };
            assert_eq!(v, &format!("v{last}"));
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

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn host() -> impl Strategy<Value = HostAddr> {
            prop_oneof![
                (any::<[u8; 4]>(), 0i32..65536).prop_map(|(ip, port)| HostAddr::V4 { ip, port }),
                (any::<[u8; 16]>(), 0i32..65536).prop_map(|(ip, port)| HostAddr::V6 { ip, port }),
            ]
        }

        proptest! {
            /// Whatever bytes a segment holds, validation answers and never panics.
            #[test]
            fn damaged_records_never_panic(
                body in proptest::collection::vec(any::<u8>(), 0..64),
                flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
                cut in any::<prop::sample::Index>(),
                v6 in any::<bool>(),
            ) {
                let mut e = env("T");
                if v6 {
                    e.born_host = HostAddr::parse("[::1]:1").unwrap();
                }
                let p = PreparedMessage::new(&e, &body, "k\u{1}v\u{2}", &limits()).unwrap();
                let mut rec = p.to_vec(0, 0, 0);
                for (at, x) in &flips {
                    let i = at.index(rec.len());
                    rec[i] ^= x;
                }
                let keep = cut.index(rec.len() + 1);
                let _ = check_record(&rec[..keep], true);
                let _ = check_record(&rec, true);
                let _ = view_record(&rec[..keep]);
                let _ = view_record(&rec);
            }

            #[test]
            fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
                let _ = check_record(&bytes, true);
                let mut with_magic = bytes.clone();
                if with_magic.len() >= 40 {
                    with_magic[4..8].copy_from_slice(&MESSAGE_MAGIC_CODE_V1.to_be_bytes());
                    let _ = check_record(&with_magic, true);
                    with_magic[4..8].copy_from_slice(&MESSAGE_MAGIC_CODE_V2.to_be_bytes());
                    let _ = check_record(&with_magic, true);
                }
            }

            #[test]
            fn encode_then_decode_is_identity(
                topic in "[%|a-zA-Z0-9_-]{1,127}",
                body in proptest::collection::vec(any::<u8>(), 0..2048),
                props in proptest::collection::vec(("[a-zA-Z_]{1,12}", "[^\u{1}\u{2}]{1,40}"), 0..6),
                queue_id in 0i32..1024,
                flag in any::<i32>(),
                born_ts in any::<i64>(),
                store_ts in any::<i64>(),
                queue_offset in 0i64..i64::MAX,
                phy_offset in 0i64..i64::MAX,
                born in host(),
                store in host(),
                reconsume in any::<i32>(),
                ptx in any::<i64>(),
            ) {
                let e = RecordEnvelope {
                    topic: &topic, queue_id, flag, sys_flag: 0, born_timestamp: born_ts,
                    born_host: born, store_host: store, reconsume_times: reconsume,
                    prepared_transaction_offset: ptx,
                };
                let rendered = render_properties(props.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap();
                let p = PreparedMessage::new(&e, &body, &rendered, &limits()).unwrap();
                let rec = p.to_vec(queue_offset, phy_offset, store_ts);
                let RecordCheck::Message(d) = check_record(&rec, true) else {
                    return Err(TestCaseError::fail("record did not validate"));
                };
                prop_assert_eq!(d.total_size as usize, rec.len());
                prop_assert_eq!(d.topic, topic.as_bytes());
                prop_assert_eq!(d.body, &body[..]);
                prop_assert_eq!(d.queue_id, queue_id);
                prop_assert_eq!(d.flag, flag);
                prop_assert_eq!(d.queue_offset, queue_offset);
                prop_assert_eq!(d.physical_offset, phy_offset);
                prop_assert_eq!(d.born_timestamp, born_ts);
                prop_assert_eq!(d.store_timestamp, store_ts);
                prop_assert_eq!(d.born_host, born);
                prop_assert_eq!(d.store_host, store);
                prop_assert_eq!(d.reconsume_times, reconsume);
                prop_assert_eq!(d.prepared_transaction_offset, ptx);
                prop_assert_eq!(d.properties, rendered.as_bytes());
                let v = view_record(&rec).expect("a valid record has a view");
                prop_assert_eq!((v.queue_offset, v.physical_offset, v.store_timestamp), (queue_offset, phy_offset, store_ts));
                prop_assert_eq!((v.body, v.topic, v.properties), (d.body, d.topic, d.properties));
                let parsed = parse_properties(&d.properties_str());
                // A repeated name keeps its last value (RocketMQ's map).
                let mut expected: Vec<(String, String)> = props.clone();
                keep_last_of_each(&mut expected, |p| p.0.clone());
                prop_assert_eq!(parsed, expected);
                // Any single flipped body byte is caught by the CRC.
                if !body.is_empty() {
                    let mut bad = rec.clone();
                    let at = 84 + 4 + if born.is_v6() { 12 } else { 0 } + if store.is_v6() { 12 } else { 0 };
                    bad[at] ^= 0x01;
                    let flagged = matches!(check_record(&bad, true), RecordCheck::Invalid { .. });
                    prop_assert!(flagged);
                }
            }
        }
    }
}
