//! Reading commitlog records: [`check_record`] validates and decodes a record as RocketMQ's
//! `checkMessageAndReturnSize` does, [`view_record`] locates the fields dispatch and bulk reads
//! need in a record already known to be whole.

use std::borrow::Cow;

use super::bytes::{be_i16, be_i32, be_i64};
#[cfg(test)]
use super::message::message_id;
use super::message::HostAddr;
use super::record::*;
use super::sysflag;
use crate::util::masked_crc32;

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
    pub(crate) fn topic_str(&self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.topic)
    }

    #[cfg(test)]
    pub(crate) fn properties_str(&self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.properties)
    }

    #[cfg(test)]
    pub(crate) fn msg_id(&self) -> String {
        message_id(&self.store_host, self.physical_offset)
    }

    pub(crate) fn transaction_type(&self) -> i32 {
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
pub(crate) struct RecordView<'a> {
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
    pub(crate) fn transaction_type(&self) -> i32 {
        sysflag::transaction_value(self.sys_flag)
    }
}

/// Views `rec` as one whole record: `None` unless it is a message record whose TOTALSIZE is
/// `rec.len()` and whose fields agree with the length formula.
#[inline]
pub(crate) fn view_record(rec: &[u8]) -> Option<RecordView<'_>> {
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
pub(crate) fn body_crc_matches(body: &[u8], stored_crc: i32) -> bool {
    body.is_empty() || masked_crc32(body) == stored_crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::encode::tests::{env, limits};
    use crate::format::encode::{write_blank, PreparedMessage, RecordEnvelope};
    use crate::format::properties::{keep_last_of_each, parse_properties, render_properties};

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

    /// Fuzzing the two readers: whatever the bytes, an answer never points outside the buffer
    /// and agrees with the bytes it claims to have read.
    mod fuzz {
        use super::*;
        use crate::format::bytes::{be_i32, be_i64};
        use proptest::prelude::*;

        /// Whether `inner` lies inside `outer` (the readers hand out subslices).
        fn within(outer: &[u8], inner: &[u8]) -> bool {
            let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
            i >= o && i + inner.len() <= o + outer.len()
        }

        /// The invariants of one answer of [`check_record`] on `buf`.
        fn check_answer(buf: &[u8], check_crc: bool) -> Result<(), TestCaseError> {
            match check_record(buf, check_crc) {
                RecordCheck::Message(d) => {
                    let n = d.total_size as usize;
                    prop_assert!(d.total_size >= MIN_RECORD_SIZE && n <= buf.len());
                    prop_assert_eq!(d.total_size, be_i32(buf, 0));
                    prop_assert_eq!(Some(d.version), MessageVersion::from_magic(be_i32(buf, 4)));
                    let rec = &buf[..n];
                    for part in [d.body, d.topic, d.properties] {
                        prop_assert!(within(rec, part));
                    }
                    prop_assert_eq!(
                        cal_msg_length(
                            d.version,
                            d.sys_flag,
                            d.body.len() as i64,
                            d.topic.len() as i64,
                            d.properties.len() as i64
                        ),
                        i64::from(d.total_size)
                    );
                    prop_assert_eq!(d.body_crc, be_i32(rec, 8));
                    prop_assert_eq!(d.queue_id, be_i32(rec, 12));
                    prop_assert_eq!(d.flag, be_i32(rec, 16));
                    prop_assert_eq!(d.queue_offset, be_i64(rec, QUEUE_OFFSET_POSITION));
                    prop_assert_eq!(d.physical_offset, be_i64(rec, PHYSICAL_OFFSET_POSITION));
                    prop_assert_eq!(d.sys_flag, be_i32(rec, SYSFLAG_POSITION));
                    prop_assert_eq!(d.born_timestamp, be_i64(rec, 40));
                    prop_assert_eq!(
                        d.born_host.ip_bytes(),
                        &rec[48..48 + d.born_host.ip_bytes().len()]
                    );
                    prop_assert_eq!(d.born_host.is_v6(), d.sys_flag & sysflag::BORNHOST_V6 != 0);
                    prop_assert_eq!(
                        d.store_host.is_v6(),
                        d.sys_flag & sysflag::STOREHOSTADDRESS_V6 != 0
                    );
                    if check_crc {
                        prop_assert!(body_crc_matches(d.body, d.body_crc));
                    }
                    // The view of the same bytes finds the same fields.
                    let v = view_record(rec);
                    prop_assert!(v.is_some(), "a checked record has a view");
                    let v = v.unwrap();
                    prop_assert_eq!(
                        (v.body, v.topic, v.properties),
                        (d.body, d.topic, d.properties)
                    );
                    prop_assert_eq!(v.store_timestamp, d.store_timestamp);
                }
                RecordCheck::Blank { size } => {
                    prop_assert!(buf.len() >= 8);
                    prop_assert_eq!(be_i32(buf, 4), BLANK_MAGIC_CODE);
                    prop_assert_eq!(size, be_i32(buf, 0));
                }
                RecordCheck::Invalid { size, .. } => {
                    prop_assert!(size == -1 || (buf.len() >= 8 && size == be_i32(buf, 0)));
                }
            }
            Ok(())
        }

        /// The invariants of [`view_record`] on `rec`: a view exactly when the CRC-less check
        /// finds a message filling `rec`, its parts inside `rec`.
        fn view_answer(rec: &[u8]) -> Result<(), TestCaseError> {
            let checked = match check_record(rec, false) {
                RecordCheck::Message(d) if d.total_size as usize == rec.len() => Some(d),
                _ => None,
            };
            match view_record(rec) {
                Some(v) => {
                    prop_assert_eq!(v.total_size as usize, rec.len());
                    for part in [v.body, v.topic, v.properties] {
                        prop_assert!(within(rec, part));
                    }
                    prop_assert!(checked.is_some(), "a view of bytes the check refuses");
                    let d = checked.unwrap();
                    prop_assert_eq!(
                        (v.body, v.topic, v.properties),
                        (d.body, d.topic, d.properties)
                    );
                    prop_assert_eq!(
                        (v.queue_id, v.queue_offset, v.physical_offset),
                        (d.queue_id, d.queue_offset, d.physical_offset)
                    );
                    prop_assert_eq!(
                        (v.sys_flag, v.born_timestamp, v.body_crc),
                        (d.sys_flag, d.born_timestamp, d.body_crc)
                    );
                }
                None => prop_assert!(checked.is_none(), "no view of a checked record"),
            }
            Ok(())
        }

        /// A valid record of random content: IPv4/IPv6 hosts, V1 or V2, empty or not.
        fn record() -> impl Strategy<Value = Vec<u8>> {
            (
                prop_oneof!["[a-zA-Z0-9_-]{1,127}", "%RETRY%[a-z]{121,200}"],
                proptest::collection::vec(any::<u8>(), 0..96),
                proptest::collection::vec(("[A-Z_]{1,8}", "[a-z0-9 ]{1,12}"), 0..4),
                any::<bool>(),
                any::<bool>(),
                any::<(i32, i64, i64, i64)>(),
            )
                .prop_map(
                    |(topic, body, props, born_v6, store_v6, (flag, qo, po, ts))| {
                        let mut e = env(&topic);
                        e.flag = flag;
                        if born_v6 {
                            e.born_host = HostAddr::parse("[fe80::7]:1").unwrap();
                        }
                        if store_v6 {
                            e.store_host = HostAddr::parse("[::1]:10911").unwrap();
                        }
                        let rendered =
                            render_properties(props.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                                .unwrap();
                        PreparedMessage::new(&e, &body, &rendered, &limits())
                            .unwrap()
                            .to_vec(qo, po, ts)
                    },
                )
        }

        proptest! {
            /// Every prefix of a valid record (a segment's readable end falling inside it) is
            /// refused by both readers; the record followed by more bytes still reads as itself.
            #[test]
            fn every_truncation_is_refused(rec in record(), more in proptest::collection::vec(any::<u8>(), 0..40)) {
                prop_assert!(matches!(check_record(&rec, true), RecordCheck::Message(_)));
                prop_assert!(view_record(&rec).is_some());
                for cut in 0..rec.len() {
                    let part = &rec[..cut];
                    prop_assert!(
                        matches!(check_record(part, true), RecordCheck::Invalid { size: -1, .. }),
                        "prefix of {} bytes accepted", cut
                    );
                    prop_assert!(view_record(part).is_none());
                    check_answer(part, true)?;
                    view_answer(part)?;
                }
                let mut longer = rec.clone();
                longer.extend_from_slice(&more);
                let RecordCheck::Message(d) = check_record(&longer, true) else {
                    return Err(TestCaseError::fail("a record followed by more bytes"));
                };
                prop_assert_eq!(d.total_size as usize, rec.len());
                check_answer(&longer, true)?;
                view_answer(&longer)?;
            }

            /// A valid record with bytes overwritten anywhere (sizes, lengths, magic, flags),
            /// then cut anywhere: both readers answer, within the buffer, consistently.
            #[test]
            fn mutated_records_answer_within_bounds(
                rec in record(),
                writes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
                cut in any::<prop::sample::Index>(),
                crc in any::<bool>(),
            ) {
                let mut rec = rec;
                for (at, b) in &writes {
                    let i = at.index(rec.len());
                    rec[i] = *b;
                }
                let keep = cut.index(rec.len() + 1);
                check_answer(&rec, crc)?;
                check_answer(&rec[..keep], crc)?;
                view_answer(&rec)?;
                view_answer(&rec[..keep])?;
            }

            /// Length fields set to extremes, or to what the bytes after them hold give or take a
            /// few (where an off-by-one would slice past the end), and the IPv6 bits toggled
            /// (widening the host fields past the record's end).
            #[test]
            fn extreme_lengths_answer_within_bounds(
                rec in record(),
                field in 0usize..5,
                extreme in prop_oneof![Just(-1i32), Just(0), Just(1), Just(i32::MAX), Just(i32::MIN), Just(i32::from(i16::MAX)), Just(255)],
                relative in any::<bool>(),
                delta in -4i32..=4,
                v6_bits in prop_oneof![Just(sysflag::BORNHOST_V6), Just(sysflag::STOREHOSTADDRESS_V6), Just(sysflag::BORNHOST_V6 | sysflag::STOREHOSTADDRESS_V6)],
                keep in 4usize..=128,
            ) {
                let mut rec = rec;
                let n = rec.len();
                let sys_flag = be_i32(&rec, SYSFLAG_POSITION);
                let body_len_at = BORN_HOST_POSITION
                    + if sys_flag & sysflag::BORNHOST_V6 != 0 { 20 } else { 8 }
                    + 8
                    + if sys_flag & sysflag::STOREHOSTADDRESS_V6 != 0 { 20 } else { 8 }
                    + 12;
                let body_len = be_i32(&rec, body_len_at) as usize;
                let topic_len_at = body_len_at + 4 + body_len;
                let v2 = be_i32(&rec, 4) == MESSAGE_MAGIC_CODE_V2;
                let topic_at = topic_len_at + if v2 { 2 } else { 1 };
                let topic_len = if v2 { be_i16(&rec, topic_len_at) as usize } else { rec[topic_len_at] as usize };
                let props_len_at = topic_at + topic_len;
                // What the bytes after the field hold.
                let after = [n, n - body_len_at - 4, n - topic_at, n - props_len_at - 2];
                let value = if relative && field < 4 { after[field] as i32 + delta } else { extreme };
                match field {
                    0 => rec[..4].copy_from_slice(&value.to_be_bytes()),
                    1 => rec[body_len_at..body_len_at + 4].copy_from_slice(&value.to_be_bytes()),
                    2 if v2 => rec[topic_len_at..topic_len_at + 2].copy_from_slice(&(value as i16).to_be_bytes()),
                    2 => rec[topic_len_at] = value as u8,
                    3 => rec[props_len_at..props_len_at + 2].copy_from_slice(&(value as i16).to_be_bytes()),
                    _ => rec[SYSFLAG_POSITION..SYSFLAG_POSITION + 4].copy_from_slice(&(sys_flag ^ v6_bits).to_be_bytes()),
                }
                check_answer(&rec, true)?;
                view_answer(&rec)?;
                // The bytes, or a prefix of them, under a TOTALSIZE that is their length (the
                // view reads only such records).
                for len in [n, keep.min(n)] {
                    let mut whole = rec[..len].to_vec();
                    whole[..4].copy_from_slice(&(len as i32).to_be_bytes());
                    check_answer(&whole, false)?;
                    view_answer(&whole)?;
                }
            }

            /// Random bytes, with a message magic placed at the front or not.
            #[test]
            fn random_bytes_answer_within_bounds(
                bytes in proptest::collection::vec(any::<u8>(), 0..400),
                magic in prop_oneof![Just(None), Just(Some(MESSAGE_MAGIC_CODE_V1)), Just(Some(MESSAGE_MAGIC_CODE_V2)), Just(Some(BLANK_MAGIC_CODE))],
                small_size in any::<bool>(),
            ) {
                let mut bytes = bytes;
                if let (Some(m), true) = (magic, bytes.len() >= 8) {
                    bytes[4..8].copy_from_slice(&m.to_be_bytes());
                    if small_size {
                        // A TOTALSIZE inside the buffer, so the fields are parsed.
                        let n = (be_i32(&bytes, 0).unsigned_abs() as usize % bytes.len()) as i32;
                        bytes[..4].copy_from_slice(&n.max(MIN_RECORD_SIZE).to_be_bytes());
                    }
                }
                check_answer(&bytes, true)?;
                check_answer(&bytes, false)?;
                view_answer(&bytes)?;
                if bytes.len() >= 4 {
                    let n = (be_i32(&bytes, 0).unsigned_abs() as usize).min(bytes.len());
                    view_answer(&bytes[..n])?;
                }
            }
        }
    }
}
