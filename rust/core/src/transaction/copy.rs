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
use crate::schedule::order::{
    capacity_for, java_map_order, java_map_order_distinct, spread, spread_ascii,
};

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

/// The [`spread`] of each name the parse looks for (the compiler's).
mod spreads {
    use super::*;
    use crate::format::property::{TAGS, UNIQ_KEY};
    use crate::schedule::{REAL_QID, REAL_TOPIC};
    pub(super) const CHECK_TIMES: u32 = spread_ascii(TRANSACTION_CHECK_TIMES);
    pub(super) const IMMUNITY: u32 = spread_ascii(CHECK_IMMUNITY_TIME_IN_SECONDS);
    pub(super) const PREPARED_QUEUE_OFFSET: u32 = spread_ascii(TRAN_PREPARED_QUEUE_OFFSET);
    pub(super) const UNIQ: u32 = spread_ascii(UNIQ_KEY);
    pub(super) const TX_ID: u32 = spread_ascii(TRANSACTION_ID);
    pub(super) const TOPIC: u32 = spread_ascii(REAL_TOPIC);
    pub(super) const QID: u32 = spread_ascii(REAL_QID);
    pub(super) const GROUP: u32 = spread_ascii(PGROUP);
    pub(super) const TAG: u32 = spread_ascii(TAGS);
    /// Every name above with its spread.
    pub(super) const KNOWN: [(&str, u32); 9] = [
        (TRANSACTION_CHECK_TIMES, CHECK_TIMES),
        (CHECK_IMMUNITY_TIME_IN_SECONDS, IMMUNITY),
        (TRAN_PREPARED_QUEUE_OFFSET, PREPARED_QUEUE_OFFSET),
        (UNIQ_KEY, UNIQ),
        (TRANSACTION_ID, TX_ID),
        (REAL_TOPIC, TOPIC),
        (REAL_QID, QID),
        (PGROUP, GROUP),
        (TAGS, TAG),
    ];
}

/// [`spread`] of `name`, from [`spreads::KNOWN`] when it is there.
fn spread_of(name: &str) -> u32 {
    spreads::KNOWN
        .iter()
        .find(|(k, _)| *k == name)
        .map_or_else(|| spread(name), |&(_, s)| s)
}

/// Items a half's properties keep inline (more spill into a `Vec`).
const INLINE_ITEMS: usize = 24;

/// The items of a properties string: inline up to [`INLINE_ITEMS`], so reading a half does
/// not allocate.
#[derive(Debug, Default)]
pub(crate) struct Items<'a> {
    inline: [(&'a str, &'a str); INLINE_ITEMS],
    /// The [`spread`] of each inline item's name (the map's bucket before the mask).
    spreads: [u32; INLINE_ITEMS],
    len: usize,
    spill: Vec<(&'a str, &'a str)>,
}

impl<'a> Items<'a> {
    fn push(&mut self, item: (&'a str, &'a str), spread: u32) {
        if self.len < INLINE_ITEMS {
            self.inline[self.len] = item;
            self.spreads[self.len] = spread;
            self.len += 1;
            return;
        }
        if self.spill.is_empty() {
            self.spill.reserve(2 * INLINE_ITEMS);
            self.spill.extend_from_slice(&self.inline);
        }
        self.spill.push(item);
    }

    /// The [`spread`] of item `i`'s name (kept for the inline items, computed for the rest).
    fn spread(&self, i: usize) -> u32 {
        if self.spill.is_empty() {
            self.spreads[i]
        } else {
            spread(self.spill[i].0)
        }
    }

    pub(crate) fn as_slice(&self) -> &[(&'a str, &'a str)] {
        if self.spill.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.spill
        }
    }
}

/// The properties of a half as the check reads them: the items RocketMQ's map holds (non-empty
/// name and value, UTF-8), in stored order, and the ones the round decides on (a name stored
/// twice answers with its last value, as the map keeps the last `put`).
#[derive(Debug, Default)]
pub(crate) struct HalfProps<'a> {
    pub(crate) items: Items<'a>,
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
    /// The stored string is exactly what `messageProperties2String` makes of its own map
    /// (every item kept, names distinct, in the map's order): a copy's string is then the
    /// stored one with one item changed or added, spliced without sorting
    /// ([`HalfProps::render_into`]). `None` when it is not.
    canonical: Option<&'a str>,
}

impl<'a> HalfProps<'a> {
    /// One pass over a stored properties string. Items that are not UTF-8 are left out (a
    /// Java string would hold them with replacement characters; no producer writes them).
    pub(crate) fn parse(raw: &'a [u8]) -> HalfProps<'a> {
        let mut p = HalfProps::default();
        // One validation of the whole string (the separators are ASCII, so each item of a
        // valid string is valid), else item by item.
        let whole = std::str::from_utf8(raw).ok();
        let base = raw.as_ptr() as usize;
        let mut kept_len = 0usize;
        for_each_property(raw, |k, v| {
            if k.is_empty() || v.is_empty() {
                return;
            }
            let item = match whole {
                Some(s) => {
                    let (ks, vs) = (k.as_ptr() as usize - base, v.as_ptr() as usize - base);
                    s.get(ks..ks + k.len()).zip(s.get(vs..vs + v.len()))
                }
                None => std::str::from_utf8(k).ok().zip(std::str::from_utf8(v).ok()),
            };
            let Some((k, v)) = item else {
                return;
            };
            kept_len += k.len() + v.len() + 2;
            // The names looked for hash as the compiler computed them.
            let (slot, known) = match k {
                TRANSACTION_CHECK_TIMES => (&mut p.check_times, spreads::CHECK_TIMES),
                CHECK_IMMUNITY_TIME_IN_SECONDS => (&mut p.immunity, spreads::IMMUNITY),
                TRAN_PREPARED_QUEUE_OFFSET => {
                    (&mut p.prepared_queue_offset, spreads::PREPARED_QUEUE_OFFSET)
                }
                crate::format::property::UNIQ_KEY => (&mut p.uniq_key, spreads::UNIQ),
                TRANSACTION_ID => (&mut p.transaction_id, spreads::TX_ID),
                crate::schedule::REAL_TOPIC => (&mut p.real_topic, spreads::TOPIC),
                crate::schedule::REAL_QID => (&mut p.real_qid, spreads::QID),
                PGROUP => (&mut p.producer_group, spreads::GROUP),
                crate::format::property::TAGS => (&mut p.tags, spreads::TAG),
                _ => {
                    p.items.push((k, v), spread(k));
                    return;
                }
            };
            *slot = Some(v);
            let s = known;
            p.items.push((k, v), s);
        });
        let items = p.items.as_slice();
        // In the map's order, names of one bucket next to each other: a repeated name can
        // only be in its own bucket's run.
        let mask = capacity_for(items.len()) - 1;
        let mut ordered = true;
        let (mut last, mut run) = (0u32, 0usize);
        for (i, (k, _)) in items.iter().enumerate() {
            let b = p.items.spread(i) & mask;
            if i > 0 && b < last {
                ordered = false;
                break;
            }
            if i == 0 || b != last {
                run = i;
            } else if items[run..i].iter().any(|(n, _)| n == k) {
                p.repeated = true;
            }
            last = b;
        }
        if !ordered {
            p.repeated = items
                .iter()
                .enumerate()
                .any(|(i, (k, _))| items[..i].iter().any(|(n, _)| n == k));
        }
        if ordered && !p.repeated && kept_len == raw.len() {
            p.canonical = whole;
        }
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
        out.clear();
        if let (Some(raw), [(name, value)]) = (self.canonical, puts) {
            if self.splice_into(raw, name, value, out) {
                return;
            }
        }
        self.render_sorted(puts, out);
    }

    /// [`HalfProps::render_into`] by sorting the map's items (any stored string).
    fn render_sorted(&self, puts: &[(&str, &str)], out: &mut String) {
        out.clear();
        let items = self.items.as_slice();
        let mut all: Vec<(&str, &str)> = Vec::with_capacity(items.len() + puts.len());
        all.extend_from_slice(items);
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
        for (k, v) in all {
            out.push_str(k);
            out.push('\u{1}');
            out.push_str(v);
            out.push('\u{2}');
        }
    }

    /// One put into the map of a canonical string `raw`, as bytes: a stored name's value
    /// replaced where it stands (a put keeps the key's place), or a new name added after the
    /// last item of its bucket or an earlier one (a put goes last in its bucket). `false` when
    /// the new name makes the map grow (every bucket moves): the caller sorts instead.
    fn splice_into(&self, raw: &str, name: &str, value: &str, out: &mut String) -> bool {
        let items = self.items.as_slice();
        let mut at = 0usize;
        if let Some((_, v)) = items.iter().find(|(k, _)| *k == name) {
            let start = v.as_ptr() as usize - raw.as_ptr() as usize;
            out.reserve(raw.len() + value.len());
            out.push_str(&raw[..start]);
            out.push_str(value);
            out.push_str(&raw[start + v.len()..]);
            return true;
        }
        let mask = capacity_for(items.len() + 1) - 1;
        if mask != capacity_for(items.len()) - 1 {
            return false;
        }
        let b = spread_of(name) & mask;
        for (i, (k, v)) in items.iter().enumerate() {
            if self.items.spread(i) & mask > b {
                break;
            }
            at += k.len() + v.len() + 2;
        }
        out.reserve(raw.len() + name.len() + value.len() + 2);
        out.push_str(&raw[..at]);
        out.push_str(name);
        out.push('\u{1}');
        out.push_str(value);
        out.push('\u{2}');
        out.push_str(&raw[at..]);
        true
    }

    /// [`HalfProps::render_into`] into a new string.
    #[cfg(test)]
    pub(crate) fn render_with(&self, puts: &[(&str, &str)]) -> String {
        let mut s = String::new();
        self.render_into(puts, &mut s);
        s
    }
}

/// The transaction id of a stored properties string as [`HalfProps::id`] reads it, without
/// the rest of the parse.
pub(crate) fn id_of(raw: &[u8]) -> Option<&str> {
    let (mut uniq, mut tid) = (None, None);
    for_each_property(raw, |k, v| {
        if v.is_empty() {
            return;
        }
        if k == crate::format::property::UNIQ_KEY.as_bytes() {
            uniq = Some(v);
        } else if k == TRANSACTION_ID.as_bytes() {
            tid = Some(v);
        }
    });
    std::str::from_utf8(uniq.or(tid)?).ok()
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
    let items = p.items.as_slice();
    let mut all: Vec<(&str, &str)> = Vec::with_capacity(items.len() + puts.len());
    all.extend_from_slice(items);
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
    fn the_compilers_spreads_are_the_maps() {
        for (name, s) in spreads::KNOWN {
            assert_eq!(s, spread(name), "{name}");
            assert_eq!(spread_of(name), spread(name), "{name}");
        }
        for name in ["KEYS", "WAIT", "", "é", "TAGS2"] {
            assert_eq!(spread_of(name), spread(name), "{name}");
        }
        // Every parsed item carries its name's spread, inline or spilled.
        let raw: String = (0..30)
            .map(|i| match i {
                3 => "UNIQ_KEY\u{1}AB\u{2}".to_owned(),
                5 => "TAGS\u{1}t\u{2}".to_owned(),
                _ => format!("n{i}\u{1}v\u{2}"),
            })
            .collect();
        for cut in [raw.len(), raw.find("n10").unwrap()] {
            let p = HalfProps::parse(&raw.as_bytes()[..cut]);
            for (i, (k, _)) in p.items.as_slice().iter().enumerate() {
                assert_eq!(p.items.spread(i), spread(k), "{k}");
            }
        }
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

    /// A properties string from `names` (with values) as the map renders it.
    fn rendered(items: &[(String, String)]) -> String {
        let v: Vec<(&str, &str)> = items
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        java_map_order(v, |p| p.0)
            .into_iter()
            .map(|(k, v)| format!("{k}\u{1}{v}\u{2}"))
            .collect()
    }

    #[test]
    fn a_canonical_string_is_spliced_exactly_as_the_sorted_rendering() {
        let mut seed: u64 = 0x1234_5678;
        let mut next = move |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        let pool = [
            "UNIQ_KEY",
            "TAGS",
            "KEYS",
            "PGROUP",
            "TRAN_MSG",
            "REAL_TOPIC",
            "REAL_QID",
            "WAIT",
            "__transactionId__",
            TRANSACTION_CHECK_TIMES,
            CHECK_IMMUNITY_TIME_IN_SECONDS,
            "a",
            "b",
            "Aa",
            "BB",
            "x1",
            "y2",
            "MSG_REGION",
            "TRACE_ON",
            "CLUSTER",
        ];
        let (mut spliced_add, mut spliced_replace, mut sorted) = (0, 0, 0);
        for round in 0..3000 {
            // Up to 120 items: some maps cross the 96-item growth of a HashMap<>(128).
            let n = if round % 10 == 0 {
                90 + next(10) as usize
            } else {
                next(pool.len() as u64) as usize
            };
            let mut items: Vec<(String, String)> = Vec::new();
            for i in 0..n {
                let k = if i < pool.len() && next(3) > 0 {
                    pool[i].to_owned()
                } else {
                    format!("k{}", next(1000))
                };
                if items.iter().all(|(n, _)| *n != k) {
                    items.push((k, format!("v{}", next(100_000))));
                }
            }
            let raw = rendered(&items);
            let p = HalfProps::parse(raw.as_bytes());
            assert!(p.canonical.is_some(), "{raw:?}");
            let puts = [(TRANSACTION_CHECK_TIMES, "12")];
            let (mut fast, mut slow) = (String::new(), String::new());
            p.render_into(&puts, &mut fast);
            p.render_sorted(&puts, &mut slow);
            assert_eq!(fast, slow, "{raw:?}");
            let mut again = items.clone();
            match again.iter_mut().find(|(k, _)| k == TRANSACTION_CHECK_TIMES) {
                Some(i) => {
                    i.1 = "12".to_owned();
                    spliced_replace += 1;
                }
                None => {
                    again.push((TRANSACTION_CHECK_TIMES.to_owned(), "12".to_owned()));
                    if capacity_for(items.len()) == capacity_for(items.len() + 1) {
                        spliced_add += 1;
                    } else {
                        sorted += 1;
                    }
                }
            }
            assert_eq!(fast, rendered(&again), "{raw:?}");
        }
        assert!(
            spliced_add > 100 && spliced_replace > 100,
            "{spliced_add} {spliced_replace}"
        );
        assert!(sorted > 0);
    }

    #[test]
    fn only_a_string_the_map_renders_back_unchanged_is_canonical() {
        let ok = rendered(&[("UNIQ_KEY".into(), "A".into()), ("TAGS".into(), "t".into())]);
        assert!(HalfProps::parse(ok.as_bytes()).canonical.is_some());
        let canonical = |raw: &[u8]| HalfProps::parse(raw).canonical.is_some();
        // Out of the map's order ("KEYS" goes before "TAGS"; see the sorted rendering).
        let order = rendered(&[("KEYS".into(), "k".into()), ("TAGS".into(), "t".into())]);
        let swapped: String = {
            let mut it: Vec<&str> = order.split_inclusive('\u{2}').collect();
            it.swap(0, 1);
            it.concat()
        };
        assert!(canonical(order.as_bytes()));
        assert!(!canonical(swapped.as_bytes()));
        // A repeated name, an empty value, an item without a separator, trailing bytes, bytes
        // that are not UTF-8: the map would render something else.
        assert!(!canonical(b"TAGS\x01t\x02TAGS\x01u\x02"));
        assert!(!canonical(b"TAGS\x01t\x02KEYS\x01\x02"));
        assert!(!canonical(b"TAGS\x01t\x02junk\x02"));
        assert!(!canonical(b"TAGS\x01t\x02tail"));
        assert!(!canonical(b"TAGS\x01t\xff\x02"));
        // The slow path still renders them as the map does.
        let p = HalfProps::parse(b"KEYS\x01\x02TAGS\x01t\x02junk\x02");
        assert_eq!(
            p.render_with(&[(TRANSACTION_CHECK_TIMES, "1")]),
            rendered(&[
                ("TAGS".into(), "t".into()),
                (TRANSACTION_CHECK_TIMES.into(), "1".into())
            ])
        );
    }

    #[test]
    fn more_items_than_kept_inline_spill_in_order() {
        let items: Vec<(String, String)> = (0..40)
            .map(|i| (format!("name{i}"), format!("{i}")))
            .collect();
        let raw: String = items
            .iter()
            .map(|(k, v)| format!("{k}\u{1}{v}\u{2}"))
            .collect();
        let p = HalfProps::parse(raw.as_bytes());
        let got: Vec<(String, String)> = p
            .items
            .as_slice()
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(got, items);
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
