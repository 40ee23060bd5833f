//! The records the check round writes from a half message: the *copy* put back into the half
//! queue (`TransactionalMessageBridge.renewHalfMessageInner`, and
//! `renewImmunityHalfMessageInner` for a half with a check immunity time), and the *discard*
//! record moved to `TRANS_CHECK_MAX_TIME_TOPIC`
//! (`DefaultTransactionalMessageCheckListener.toMessageExtBrokerInner`).
//!
//! RocketMQ reads the half with `MessageDecoder.decode(bb, true, false)` (body as stored,
//! properties into a `HashMap<>(128)` by `string2messageProperties`), changes the map
//! (`needDiscard` puts `TRANSACTION_CHECK_TIMES`, the immunity re-put adds
//! `TRAN_PREPARED_QUEUE_OFFSET`) and renders it again with `messageProperties2String`: the
//! properties string of every record written here is that map's iteration order
//! ([`java_map_order`]). What each record takes from the half:
//!
//! | field | copy | discard |
//! |---|---|---|
//! | topic, queue | the half's (half topic, 0) | `TRANS_CHECK_MAX_TIME_TOPIC`, 0 |
//! | body, sysflag, born time and host, store host | the half's | the half's |
//! | flag, reconsume times | 0 (`renewHalfMessageInner` does not copy them) | the half's |
//! | preparedTransactionOffset | 0 | 0 |
//!
//! `setWaitStoreMsgOK(false)` comes after the properties string is rendered in both, so the
//! stored string keeps the half's `WAIT`; the put does not wait for a SYNC_FLUSH force (the
//! round waits once for all its copies instead, see `store/transaction_check.rs`).

use crate::format::{for_each_property, DecodedRecord, Message};
use crate::schedule::order::{java_map_order, java_map_order_distinct};

/// `MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES`.
pub(crate) const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
/// `MessageConst.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS`.
pub(crate) const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
/// `MessageConst.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET`.
pub(crate) const TRAN_PREPARED_QUEUE_OFFSET: &str = "TRAN_PREPARED_QUEUE_OFFSET";
/// `TransactionalMessageUtil.TRANSACTION_ID`.
pub(crate) const TRANSACTION_ID: &str = "__transactionId__";
/// `MessageConst.PROPERTY_PRODUCER_GROUP`.
pub(crate) const PGROUP: &str = "PGROUP";

/// The properties of a half as the check reads them: the items RocketMQ's map holds (non-empty
/// name and value, UTF-8), in stored order, and the ones the round decides on (a name stored
/// twice answers with its last value, as the map keeps the last `put`).
#[derive(Debug, Default)]
pub(crate) struct HalfProps<'a> {
    pub(crate) items: Vec<(&'a str, &'a str)>,
    pub(crate) check_times: Option<&'a str>,
    pub(crate) immunity: Option<&'a str>,
    pub(crate) prepared_queue_offset: Option<&'a str>,
    pub(crate) uniq_key: Option<&'a str>,
    pub(crate) transaction_id: Option<&'a str>,
    pub(crate) real_topic: Option<&'a str>,
    pub(crate) real_qid: Option<&'a str>,
    pub(crate) producer_group: Option<&'a str>,
    pub(crate) tags: Option<&'a str>,
    /// A name is stored more than once (the map keeps its first place and last value).
    pub(crate) repeated: bool,
}

impl<'a> HalfProps<'a> {
    /// One pass over a stored properties string. Items that are not UTF-8 are left out (a
    /// Java string would hold them with replacement characters; no producer writes them).
    pub(crate) fn parse(raw: &'a [u8]) -> HalfProps<'a> {
        let mut p = HalfProps {
            items: Vec::with_capacity(16),
            ..HalfProps::default()
        };
        for_each_property(raw, |k, v| {
            if k.is_empty() || v.is_empty() {
                return;
            }
            let (Ok(k), Ok(v)) = (std::str::from_utf8(k), std::str::from_utf8(v)) else {
                return;
            };
            if !p.repeated && p.items.iter().any(|(n, _)| *n == k) {
                p.repeated = true;
            }
            p.items.push((k, v));
            match k {
                TRANSACTION_CHECK_TIMES => p.check_times = Some(v),
                CHECK_IMMUNITY_TIME_IN_SECONDS => p.immunity = Some(v),
                TRAN_PREPARED_QUEUE_OFFSET => p.prepared_queue_offset = Some(v),
                crate::format::property::UNIQ_KEY => p.uniq_key = Some(v),
                TRANSACTION_ID => p.transaction_id = Some(v),
                crate::schedule::REAL_TOPIC => p.real_topic = Some(v),
                crate::schedule::REAL_QID => p.real_qid = Some(v),
                PGROUP => p.producer_group = Some(v),
                crate::format::property::TAGS => p.tags = Some(v),
                _ => {}
            }
        });
        p
    }

    /// The transaction's id: its `UNIQ_KEY` (which `__transactionId__` repeats), else
    /// `__transactionId__`.
    pub(crate) fn id(&self) -> Option<&'a str> {
        self.uniq_key.or(self.transaction_id)
    }

    /// The map after `puts` (in order), rendered as `messageProperties2String` renders it,
    /// into `out` (cleared first).
    pub(crate) fn render_into(&self, puts: &[(&str, &str)], out: &mut String) {
        let mut all: Vec<(&str, &str)> = Vec::with_capacity(self.items.len() + puts.len());
        all.extend_from_slice(&self.items);
        if self.repeated {
            all.extend_from_slice(puts);
            all = java_map_order(all, |p| p.0);
        } else {
            // Distinct names (the usual case): a put replaces a value in place or adds a name,
            // then one in-place sort by bucket (stable: a bucket keeps its put order).
            for &(k, v) in puts {
                match all.iter_mut().find(|p| p.0 == k) {
                    Some(p) => p.1 = v,
                    None => all.push((k, v)),
                }
            }
            java_map_order_distinct(&mut all, |p| p.0);
        }
        out.clear();
        for (k, v) in all {
            out.push_str(k);
            out.push('\u{1}');
            out.push_str(v);
            out.push('\u{2}');
        }
    }

    /// [`HalfProps::render_into`] into a new string.
    #[cfg(test)]
    pub(crate) fn render_with(&self, puts: &[(&str, &str)]) -> String {
        let mut s = String::new();
        self.render_into(puts, &mut s);
        s
    }
}

/// `needDiscard`'s answer for a half whose `TRANSACTION_CHECK_TIMES` is `stored`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CheckCount {
    /// Checked `check_max` times or more: discard (the map is left as it was).
    Discard,
    /// The value `needDiscard` puts into the map: 1 when absent, else the stored count + 1
    /// (a count that is not a Java int reads as -1, so it becomes 0, as in RocketMQ).
    Next(i32),
}

/// `needDiscard(msgExt, transactionCheckMax)`.
pub(crate) fn need_discard(stored: Option<&str>, check_max: i32) -> CheckCount {
    let Some(s) = stored else {
        return CheckCount::Next(1);
    };
    let n = parse_java_int(s).unwrap_or_else(|| {
        log::error!(target: "rmqstore.transaction", "TRANSACTION_CHECK_TIMES {s:?} is not a number; read as -1");
        -1
    });
    if n >= check_max {
        CheckCount::Discard
    } else {
        // n < check_max <= i32::MAX: no overflow.
        CheckCount::Next(n + 1)
    }
}

/// `getImmunityTime`: the immunity in ms, the transaction timeout when the property is -1 or
/// not a Java long (Java's `* 1000` wraps; so does this).
pub(crate) fn immunity_time_ms(s: &str, timeout_ms: i64) -> i64 {
    match parse_java_long(s) {
        None | Some(-1) => timeout_ms,
        Some(v) => v.wrapping_mul(1000),
    }
}

pub(crate) fn parse_java_int(s: &str) -> Option<i32> {
    crate::schedule::levels::parse_java_int(s)
}

pub(crate) fn parse_java_long(s: &str) -> Option<i64> {
    crate::schedule::levels::parse_java_long(s)
}

/// The envelope of a copy of the half `d` (see the module header): the half's topic and
/// queue, body, sysflag, born time and host and store host; flag, reconsume times and
/// preparedTransactionOffset 0.
pub(crate) fn copy_envelope<'a>(
    d: &DecodedRecord<'a>,
    topic: &'a str,
) -> crate::format::RecordEnvelope<'a> {
    crate::format::RecordEnvelope {
        topic,
        queue_id: d.queue_id,
        flag: 0,
        sys_flag: d.sys_flag,
        born_timestamp: d.born_timestamp,
        born_host: d.born_host,
        store_host: d.store_host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
    }
}

/// The discard record of the half `d` as a message for the put path (its hooks run on it as
/// on RocketMQ's `putMessage`): `TRANS_CHECK_MAX_TIME_TOPIC` queue 0, the half's body as
/// stored, flag, sysflag, born time and host and reconsume times, and `props` (the half's
/// map after `needDiscard`, in the map's order). The store host is the store's own.
pub(crate) fn discard_message(d: &DecodedRecord<'_>, props: Vec<(String, String)>) -> Message {
    Message {
        topic: super::CHECK_MAX_TOPIC.to_owned(),
        body: d.body.to_vec(),
        queue_id: 0,
        flag: d.flag,
        sys_flag: d.sys_flag,
        born_timestamp: d.born_timestamp,
        born_host: Some(d.born_host),
        properties: props,
        reconsume_times: d.reconsume_times,
        prepared_transaction_offset: 0,
    }
}

/// The half's map after `puts`, in the map's order, as owned pairs.
pub(crate) fn map_items(p: &HalfProps<'_>, puts: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut all: Vec<(&str, &str)> = Vec::with_capacity(p.items.len() + puts.len());
    all.extend_from_slice(&p.items);
    all.extend_from_slice(puts);
    java_map_order(all, |p| p.0)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn need_discard_follows_rocketmq() {
        assert_eq!(need_discard(None, 15), CheckCount::Next(1));
        assert_eq!(need_discard(Some("1"), 15), CheckCount::Next(2));
        assert_eq!(need_discard(Some("14"), 15), CheckCount::Next(15));
        assert_eq!(need_discard(Some("15"), 15), CheckCount::Discard);
        assert_eq!(need_discard(Some("99"), 15), CheckCount::Discard);
        // getInt fails: -1, then ++.
        assert_eq!(need_discard(Some("x"), 15), CheckCount::Next(0));
        assert_eq!(need_discard(Some("+3"), 15), CheckCount::Next(4));
        assert_eq!(need_discard(Some("x"), -1), CheckCount::Discard);
        // The first check always happens.
        assert_eq!(need_discard(None, 0), CheckCount::Next(1));
        assert_eq!(need_discard(Some("0"), 0), CheckCount::Discard);
        assert_eq!(
            need_discard(Some("2147483646"), i32::MAX),
            CheckCount::Next(i32::MAX)
        );
    }

    #[test]
    fn immunity_time_follows_get_immunity_time() {
        assert_eq!(immunity_time_ms("60", 6000), 60_000);
        assert_eq!(immunity_time_ms("-1", 6000), 6000);
        assert_eq!(immunity_time_ms("abc", 6000), 6000);
        assert_eq!(immunity_time_ms("0", 6000), 0);
        assert_eq!(
            immunity_time_ms("9223372036854775807", 1),
            i64::MAX.wrapping_mul(1000)
        );
    }

    #[test]
    fn a_repeated_name_keeps_its_first_place_and_last_value_as_the_map_does() {
        let raw = b"UNIQ_KEY\x01A\x02TAGS\x01t\x02UNIQ_KEY\x01B\x02";
        let p = HalfProps::parse(raw);
        assert!(p.repeated);
        assert_eq!(p.id(), Some("B"));
        let fast = HalfProps::parse(b"UNIQ_KEY\x01B\x02TAGS\x01t\x02");
        assert!(!fast.repeated);
        let puts = [(TRANSACTION_CHECK_TIMES, "1")];
        assert_eq!(p.render_with(&puts), fast.render_with(&puts));
    }

    #[test]
    fn the_count_is_put_in_the_maps_order_replacing_a_stored_one() {
        let raw = b"REAL_TOPIC\x01T\x02TRANSACTION_CHECK_TIMES\x013\x02UNIQ_KEY\x01AB\x02";
        let p = HalfProps::parse(raw);
        assert_eq!(p.check_times, Some("3"));
        assert_eq!(p.real_topic, Some("T"));
        assert_eq!(p.id(), Some("AB"));
        let s = p.render_with(&[(TRANSACTION_CHECK_TIMES, "4")]);
        let names: Vec<&str> = s
            .split('\u{2}')
            .filter(|i| !i.is_empty())
            .map(|i| i.split('\u{1}').next().unwrap())
            .collect();
        assert_eq!(names.len(), 3);
        assert!(s.contains("TRANSACTION_CHECK_TIMES\u{1}4\u{2}"));
        assert!(crate::schedule::order::is_java_map_order(
            names.iter().copied()
        ));
    }
}
