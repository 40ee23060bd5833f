//! Writing commitlog records, byte for byte (docs/format.md#commitlog-records).
//!
//! Encoding is split in two so the append path can copy straight into the mapped file: a
//! [`PreparedMessage`] is validated and measured outside the append lock (body CRC, properties
//! string, length), then [`RecordTemplate::write_record`] lays the bytes down under the lock with
//! the queue offset, physical offset and store timestamp that only the lock can give.

use super::message::{
    topic_is_legal, HostAddr, MessageLimits, PutMessageStatus, MAX_PROPERTIES_LENGTH,
    MAX_RECORD_SLACK,
};
use super::properties::{property_is_legal, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};
use super::record::*;
use super::sysflag;
use crate::util::masked_crc32;

/// The per-record inputs shared by every record of a batch (or the one record of a single put).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordEnvelope<'a> {
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
pub(crate) fn check_envelope(
    env: &RecordEnvelope<'_>,
    properties: &str,
) -> Result<(), PutMessageStatus> {
    check_envelope_len(env, properties.len())
}

/// [`check_envelope`] for a properties string of `properties_len` bytes not rendered yet.
fn check_envelope_len(
    env: &RecordEnvelope<'_>,
    properties_len: usize,
) -> Result<(), PutMessageStatus> {
    if !topic_is_legal(env.topic) || env.queue_id < 0 {
        return Err(PutMessageStatus::MessageIllegal);
    }
    if properties_len > MAX_PROPERTIES_LENGTH {
        return Err(PutMessageStatus::PropertiesSizeExceeded);
    }
    Ok(())
}

/// The longest record head: every fixed field with IPv6 born and store hosts, up to and
/// including the body length.
const MAX_HEAD_LEN: usize = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 20 + 8 + 20 + 4 + 8 + 4;
/// Tails (topic and properties with their lengths) up to this many bytes are kept inside the
/// template, longer ones on the heap: a single put then allocates nothing.
const INLINE_TAIL: usize = 256;

/// A record's tail: inline when short (see [`INLINE_TAIL`]).
#[derive(Clone, Debug)]
// Inline on purpose: the template lives on the stack of one put, boxing would be the
// allocation this avoids.
#[allow(clippy::large_enum_variant)]
enum Tail {
    Inline { buf: [u8; INLINE_TAIL], len: usize },
    Heap(Vec<u8>),
}

impl Tail {
    /// `len` zero bytes.
    fn zeroed(len: usize) -> Tail {
        if len <= INLINE_TAIL {
            Tail::Inline {
                buf: [0; INLINE_TAIL],
                len,
            }
        } else {
            Tail::Heap(vec![0; len])
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Tail::Inline { buf, len } => &buf[..*len],
            Tail::Heap(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Tail::Inline { buf, len } => &mut buf[..*len],
            Tail::Heap(v) => v,
        }
    }
}

/// Writes byte strings one after the other into a slice.
struct Cursor<'b> {
    dst: &'b mut [u8],
    at: usize,
}

impl Cursor<'_> {
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        self.dst[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }
}

/// The bytes every record of one envelope shares, encoded once: the head up to and including the
/// body-length field, and the tail after the body (topic and properties). Laying a record down is
/// then a copy of the head, five patched fields, the body and the tail. Both live inside the
/// template for the usual sizes, so building one allocates nothing.
#[derive(Clone, Debug)]
pub(crate) struct RecordTemplate<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    /// SYSFLAG as written (IPv6 bits set from the hosts).
    pub sys_flag: i32,
    /// Read by the tests only.
    #[cfg_attr(not(test), allow(dead_code))]
    pub version: MessageVersion,
    head: [u8; MAX_HEAD_LEN],
    head_len: usize,
    tail: Tail,
    store_ts_pos: usize,
}

impl<'a> RecordTemplate<'a> {
    /// Encodes the shared parts; `properties` must already be validated.
    pub(crate) fn new(env: &RecordEnvelope<'a>, properties: &str) -> RecordTemplate<'a> {
        Self::build(env, properties.len(), |c| c.put(properties.as_bytes()))
    }

    /// Checks the envelope and `properties` as `render_properties` and [`check_envelope`] do,
    /// with the same statuses: the length of the properties string they render to, or the
    /// status that refuses them or the envelope.
    #[inline]
    pub(crate) fn check_properties(
        env: &RecordEnvelope<'_>,
        properties: &[(String, String)],
    ) -> Result<usize, PutMessageStatus> {
        let mut len = 0usize;
        for (k, v) in properties {
            if !property_is_legal(k, v) {
                return Err(PutMessageStatus::MessageIllegal);
            }
            len += k.len() + v.len() + 2;
        }
        check_envelope_len(env, len)?;
        Ok(len)
    }

    /// Encodes the shared parts once [`RecordTemplate::check_properties`] passed and gave
    /// `len`, rendering the properties string (`messageProperties2String`) straight into the
    /// tail. Returned by value (not in a `Result`), so that the caller's binding is built in
    /// place rather than moved out of a result (the template is a few hundred bytes).
    #[inline(always)]
    pub(crate) fn with_checked_properties(
        env: &RecordEnvelope<'a>,
        properties: &[(String, String)],
        len: usize,
    ) -> RecordTemplate<'a> {
        Self::build(env, len, |c| {
            for (k, v) in properties {
                c.put(k.as_bytes());
                c.put(&[NAME_VALUE_SEPARATOR as u8]);
                c.put(v.as_bytes());
                c.put(&[PROPERTY_SEPARATOR as u8]);
            }
        })
    }

    /// Encodes the shared parts with a properties string of `properties_len` bytes that
    /// `write_properties` writes (at most [`MAX_PROPERTIES_LENGTH`], checked by the caller).
    #[inline(always)]
    fn build(
        env: &RecordEnvelope<'a>,
        properties_len: usize,
        write_properties: impl FnOnce(&mut Cursor<'_>),
    ) -> RecordTemplate<'a> {
        let version = MessageVersion::for_topic_len(env.topic.len());
        let mut sys_flag = env.sys_flag & !(sysflag::BORNHOST_V6 | sysflag::STOREHOSTADDRESS_V6);
        if env.born_host.is_v6() {
            sys_flag |= sysflag::BORNHOST_V6;
        }
        if env.store_host.is_v6() {
            sys_flag |= sysflag::STOREHOSTADDRESS_V6;
        }
        let mut head = [0u8; MAX_HEAD_LEN];
        let mut c = Cursor {
            dst: &mut head,
            at: 0,
        };
        c.put(&0i32.to_be_bytes()); // TOTALSIZE
        c.put(&version.magic().to_be_bytes());
        c.put(&0i32.to_be_bytes()); // BODYCRC
        c.put(&env.queue_id.to_be_bytes());
        c.put(&env.flag.to_be_bytes());
        c.put(&0i64.to_be_bytes()); // QUEUEOFFSET
        c.put(&0i64.to_be_bytes()); // PHYSICALOFFSET
        c.put(&sys_flag.to_be_bytes());
        c.put(&env.born_timestamp.to_be_bytes());
        c.put(env.born_host.ip_bytes());
        c.put(&env.born_host.port().to_be_bytes());
        let store_ts_pos = c.at;
        c.put(&0i64.to_be_bytes()); // STORETIMESTAMP
        c.put(env.store_host.ip_bytes());
        c.put(&env.store_host.port().to_be_bytes());
        c.put(&env.reconsume_times.to_be_bytes());
        c.put(&env.prepared_transaction_offset.to_be_bytes());
        c.put(&0i32.to_be_bytes()); // BODY LENGTH
        let head_len = c.at;
        let topic_len_bytes = match version {
            MessageVersion::V1 => 1,
            MessageVersion::V2 => 2,
        };
        let mut tail = Tail::zeroed(topic_len_bytes + env.topic.len() + 2 + properties_len);
        let mut c = Cursor {
            dst: tail.as_mut_slice(),
            at: 0,
        };
        match version {
            MessageVersion::V1 => c.put(&[env.topic.len() as u8]),
            MessageVersion::V2 => c.put(&(env.topic.len() as i16).to_be_bytes()),
        }
        c.put(env.topic.as_bytes());
        c.put(&(properties_len as i16).to_be_bytes());
        write_properties(&mut c);
        debug_assert_eq!(c.at, c.dst.len());
        debug_assert_eq!(
            (head_len + c.at) as i64,
            cal_msg_length(
                version,
                sys_flag,
                0,
                env.topic.len() as i64,
                properties_len as i64
            )
        );
        RecordTemplate {
            topic: env.topic,
            queue_id: env.queue_id,
            sys_flag,
            version,
            head,
            head_len,
            tail,
            store_ts_pos,
        }
    }

    /// Transaction type bits of the records.
    pub(crate) fn transaction_type(&self) -> i32 {
        sysflag::transaction_value(self.sys_flag)
    }

    /// Record length for a body of `body_len` bytes.
    pub(crate) fn record_len(&self, body_len: usize) -> i64 {
        (self.head_len + body_len + self.tail.as_slice().len()) as i64
    }

    /// Validates one body against the limits and measures its record.
    pub(crate) fn prepare(
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
    pub(crate) fn write_record(
        &self,
        dst: &mut [u8],
        body: &PreparedBody<'_>,
        queue_offset: i64,
        phy_offset: i64,
        store_ts: i64,
        publish: bool,
    ) {
        let h = self.head_len;
        let b = body.body.len();
        let (head, rest) = dst.split_at_mut(h);
        let (body_dst, tail) = rest.split_at_mut(b);
        // The total size is written last (see [`publish_size`]): until then the record reads
        // as the end of the data.
        head[..4].fill(0);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        head[4..].copy_from_slice(&self.head[4..h]);
        head[BODY_CRC_POS..BODY_CRC_POS + 4].copy_from_slice(&body.body_crc.to_be_bytes());
        head[QUEUE_OFFSET_POSITION..QUEUE_OFFSET_POSITION + 8]
            .copy_from_slice(&queue_offset.to_be_bytes());
        head[PHYSICAL_OFFSET_POSITION..PHYSICAL_OFFSET_POSITION + 8]
            .copy_from_slice(&phy_offset.to_be_bytes());
        head[self.store_ts_pos..self.store_ts_pos + 8].copy_from_slice(&store_ts.to_be_bytes());
        head[h - 4..].copy_from_slice(&(b as i32).to_be_bytes());
        body_dst.copy_from_slice(body.body);
        tail.copy_from_slice(self.tail.as_slice());
        if publish {
            publish_size(dst, body.total_len);
        }
    }
}

/// Writes a record's total size into its first 4 bytes once every other byte of it is written.
///
/// A process killed while it copies a record leaves the bytes it wrote in the page cache: with
/// the size written first, a record whose tail never arrived (the kill landed in the page
/// fault of its next page) would read as whole, only its body being checked by a CRC.
/// Written last (after a release fence, so neither the compiler nor another thread's view
/// reorders it before the rest), a record is either whole or reads as size 0, which recovery
/// and dispatch take as the end of the data.
pub(crate) fn publish_size(record: &mut [u8], size: i32) {
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    record[TOTAL_SIZE_POS..TOTAL_SIZE_POS + 4].copy_from_slice(&size.to_be_bytes());
}

/// One validated body of a template: its CRC and record length.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PreparedBody<'a> {
    pub body: &'a [u8],
    pub body_crc: i32,
    pub total_len: i32,
}

/// A single validated message: a template and one body (the tests; the store appends through
/// [`RecordTemplate`] directly).
#[cfg(test)]
#[derive(Clone, Debug)]
pub(crate) struct PreparedMessage<'a> {
    pub template: RecordTemplate<'a>,
    pub body: PreparedBody<'a>,
}

#[cfg(test)]
impl<'a> PreparedMessage<'a> {
    /// Validates one body under an envelope and measures the record.
    pub(crate) fn new(
        env: &RecordEnvelope<'a>,
        body: &'a [u8],
        properties: &str,
        limits: &MessageLimits,
    ) -> Result<Self, PutMessageStatus> {
        let template = RecordTemplate::new(env, properties);
        let body = template.prepare(body, limits)?;
        Ok(PreparedMessage { template, body })
    }

    pub(crate) fn total_len(&self) -> i32 {
        self.body.total_len
    }

    /// Encodes into a fresh vector (tests, tools; the store writes in place).
    pub(crate) fn to_vec(&self, queue_offset: i64, phy_offset: i64, store_ts: i64) -> Vec<u8> {
        let mut v = vec![0u8; self.body.total_len as usize];
        self.template
            .write_record(&mut v, &self.body, queue_offset, phy_offset, store_ts, true);
        v
    }
}

/// Writes the 8-byte end-of-file blank record: remaining size + BLANK magic.
pub(crate) fn write_blank(dst: &mut [u8], max_blank: i32) {
    dst[..4].fill(0);
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    dst[4..8].copy_from_slice(&BLANK_MAGIC_CODE.to_be_bytes());
    publish_size(dst, max_blank);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::format::bytes::{be_i16, be_i32, be_i64};
    use crate::format::decode::{check_record, RecordCheck};
    use crate::format::properties::{encode_properties, parse_properties, render_properties};

    pub(crate) fn limits() -> MessageLimits {
        MessageLimits {
            max_message_size: 4 * 1024 * 1024,
            max_record_in_segment: 1 << 30,
        }
    }

    pub(crate) fn env(topic: &str) -> RecordEnvelope<'_> {
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

    /// docs/format.md#record-fields: topic "FooBar", 32-byte body, TAGS=TAG1 and a 13-digit KEYS:
    /// 158 bytes.
    #[test]
    fn a_record_reads_as_the_end_of_the_data_until_its_size_is_published() {
        let props = encode_properties([("TAGS", "TAG1")]);
        let body = [b'y'; 40];
        let p = PreparedMessage::new(&env("T"), &body, &props, &limits()).unwrap();
        let whole = p.to_vec(3, 300, 1_700_000_000_000);
        // Space that held other bytes before (a region reused after a truncation).
        let mut dst = vec![0xA5u8; whole.len()];
        p.template
            .write_record(&mut dst, &p.body, 3, 300, 1_700_000_000_000, false);
        assert_eq!(be_i32(&dst, 0), 0, "the size is written last");
        assert_eq!(&dst[4..], &whole[4..]);
        publish_size(&mut dst, p.total_len());
        assert_eq!(dst, whole);
        let mut blank = [0xA5u8; 8];
        write_blank(&mut blank, 4096);
        assert_eq!(be_i32(&blank, 0), 4096);
        assert_eq!(be_i32(&blank, 4), BLANK_MAGIC_CODE);
    }

    #[test]
    fn golden_158_byte_record() {
        let props = encode_properties([("TAGS", "TAG1"), ("KEYS", "1700000000000")]);
        assert_eq!(props.len(), 29);
        let body = [b'x'; 32];
        let p = PreparedMessage::new(&env("FooBar"), &body, &props, &limits()).unwrap();
        assert_eq!(p.total_len(), 158);
        let rec = p.to_vec(7, 1580, 1_700_000_000_123);
        assert_eq!(rec.len(), 158);
        // Field positions of docs/format.md#record-fields for IPv4 hosts, V1.
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

    /// A single put renders its properties straight into the template: the same record bytes
    /// and the same refusals as rendering the string first, inline and on the heap (a tail
    /// longer than the inline buffer).
    #[test]
    fn properties_rendered_in_place_match_the_rendered_string() {
        // The put path's two steps: check (the length), then build in place.
        fn checked<'a>(
            env: &RecordEnvelope<'a>,
            props: &[(String, String)],
        ) -> Result<RecordTemplate<'a>, PutMessageStatus> {
            let len = RecordTemplate::check_properties(env, props)?;
            Ok(RecordTemplate::with_checked_properties(env, props, len))
        }
        let long_value = "v".repeat(INLINE_TAIL * 2);
        let cases: Vec<Vec<(String, String)>> = vec![
            vec![],
            vec![
                ("TAGS".into(), "TagA".into()),
                ("KEYS".into(), "k1 k2".into()),
            ],
            vec![("UNIQ_KEY".into(), long_value.clone())],
        ];
        let body = [7u8; 33];
        for props in &cases {
            let text =
                render_properties(props.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap();
            let want = PreparedMessage::new(&env("FooBar"), &body, &text, &limits())
                .unwrap()
                .to_vec(5, 500, 1_700_000_000_001);
            let t = checked(&env("FooBar"), props).unwrap();
            let b = t.prepare(&body, &limits()).unwrap();
            let mut got = vec![0u8; b.total_len as usize];
            t.write_record(&mut got, &b, 5, 500, 1_700_000_000_001, true);
            assert_eq!(got, want);
        }
        let refused = |props: &[(&str, &str)], topic: &str| {
            let props: Vec<(String, String)> = props
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            checked(&env(topic), &props).unwrap_err()
        };
        assert_eq!(
            refused(&[("k", "a\u{1}b")], "T"),
            PutMessageStatus::MessageIllegal
        );
        assert_eq!(refused(&[("", "v")], "T"), PutMessageStatus::MessageIllegal);
        assert_eq!(refused(&[("k", "")], "T"), PutMessageStatus::MessageIllegal);
        assert_eq!(
            refused(&[("k", "v")], "bad topic"),
            PutMessageStatus::MessageIllegal
        );
        let too_long = "v".repeat(40_000);
        assert_eq!(
            refused(&[("k", too_long.as_str())], "T"),
            PutMessageStatus::PropertiesSizeExceeded
        );
        // An illegal property is refused as illegal before its length counts.
        assert_eq!(
            refused(&[("k", too_long.as_str()), ("", "v")], "T"),
            PutMessageStatus::MessageIllegal
        );
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
}
