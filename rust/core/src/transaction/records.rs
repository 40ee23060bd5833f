//! The byte rules of the records a transaction writes (CONTRACT of issue 18, "Records").
//!
//! - Half (`sendMessageInTransaction` on the client, then the broker's
//!   `TransactionalMessageBridge.parseHalfMessageInner`): the client puts `TRAN_MSG=true` and
//!   `PGROUP`, clears `DELAY` and sets `UNIQ_KEY` when absent; the broker parses the string into
//!   a `HashMap<>(128)` (in the client's order), puts `__transactionId__` = `UNIQ_KEY`,
//!   `REAL_TOPIC` and `REAL_QID`, resets the transaction bits to NOT, moves the message to
//!   `RMQ_SYS_TRANS_HALF_TOPIC` queue 0 and renders the map.
//! - Commit (`EndTransactionProcessor.endMessageTransaction`): the half's map rendered, parsed
//!   again, minus `REAL_TOPIC` and `REAL_QID`, rendered; `TRAN_MSG` is cleared from the map only
//!   after that, so the stored string keeps it (the put hooks see the map without it).
//! - Op (`getOpMessage` + `makeOpMessageInner`): a client-side `Message(topic, "d", body)` whose
//!   map (a default `HashMap`, 16 buckets) holds `TAGS=d` and `WAIT=true`, rendered before
//!   `WAIT=false` and `UNIQ_KEY` are put into it: `WAIT\x01true\x02TAGS\x01d\x02`.

use crate::format::{for_each_property, property, render_properties, PutMessageStatus};
use crate::schedule::order::java_map_order;
use crate::schedule::{REAL_QID, REAL_TOPIC};

/// `MessageConst` timer properties: a half with one is refused (MESSAGE_ILLEGAL).
pub(crate) const TIMER_PROPERTIES: [&str; 3] =
    ["TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC"];

/// The op message's stored properties string (see the module header).
pub(crate) const OP_PROPERTIES: &str = "WAIT\u{1}true\u{2}TAGS\u{1}d\u{2}";

/// The half's properties string for a message with properties `user`, its `UNIQ_KEY` `uniq`
/// (the message's own or a generated one), put by producer group `group` (None: the
/// message's `PGROUP`, else `DEFAULT_PRODUCER`) for `real_topic` queue `real_qid`.
pub(crate) fn half_properties(
    user: &[(String, String)],
    group: Option<&str>,
    uniq: &str,
    real_topic: &str,
    real_qid: i32,
) -> Result<String, PutMessageStatus> {
    if user
        .iter()
        .any(|(k, _)| TIMER_PROPERTIES.contains(&k.as_str()))
    {
        return Err(PutMessageStatus::MessageIllegal);
    }
    let group = group
        .or_else(|| {
            user.iter()
                .rev()
                .find(|(k, v)| k == property::PGROUP && !v.is_empty())
                .map(|p| p.1.as_str())
        })
        .unwrap_or(super::DEFAULT_PRODUCER_GROUP);
    let mut qid_buf = itoa_buf();
    let qid = itoa(real_qid, &mut qid_buf);
    let added: [(&str, &str); 6] = [
        (property::TRAN_MSG, "true"),
        (property::PGROUP, group),
        (property::UNIQ_KEY, uniq),
        (property::TRANSACTION_ID, uniq),
        (REAL_TOPIC, real_topic),
        (REAL_QID, qid),
    ];
    let mut items: Vec<(&str, &str)> = Vec::with_capacity(user.len() + added.len());
    let mut distinct = true;
    for (i, (k, v)) in user.iter().enumerate() {
        if k == property::DELAY {
            continue;
        }
        if distinct
            && (added.iter().any(|a| a.0 == k) || user[i + 1..].iter().any(|(k2, _)| k2 == k))
        {
            distinct = false;
        }
        items.push((k.as_str(), v.as_str()));
    }
    items.extend_from_slice(&added);
    if distinct {
        order_distinct(&mut items);
    } else {
        items = java_map_order(items, |p| p.0);
    }
    render_properties(items.iter().copied())
}

/// `String.hashCode` at compile time.
const fn java_hash_const(s: &str) -> i32 {
    let b = s.as_bytes();
    let mut h: i32 = 0;
    let mut i = 0;
    while i < b.len() {
        h = h.wrapping_mul(31).wrapping_add(b[i] as i32);
        i += 1;
    }
    h
}

/// `HashMap.hash` of a property name (the high half folded into the low one); the names a
/// transaction's records hold are hashed at compile time.
fn spread(name: &str) -> u32 {
    macro_rules! known {
        ($($n:expr),*) => {
            match name {
                $( $n => { const H: i32 = java_hash_const($n); H } )*
                _ => crate::util::java_hash(name),
            }
        };
    }
    let h = known!(
        "TAGS",
        "KEYS",
        "WAIT",
        "UNIQ_KEY",
        "TRAN_MSG",
        "PGROUP",
        "__transactionId__",
        "REAL_TOPIC",
        "REAL_QID",
        "TRANSACTION_CHECK_TIMES"
    ) as u32;
    h ^ (h >> 16)
}

/// Buckets of a `HashMap<>(128)` holding `n` keys (doubled past 3/4 full).
fn bucket_mask(n: usize) -> u32 {
    let mut cap: u32 = 128;
    while n > (cap as usize / 4) * 3 && cap < (1 << 30) {
        cap <<= 1;
    }
    cap - 1
}

/// Puts items with distinct names in the map's iteration order, in place: a stable sort by
/// bucket (insertion sort: a message has a few dozen properties at most).
fn order_distinct(items: &mut [(&str, &str)]) {
    let mask = bucket_mask(items.len());
    if items.len() > 32 {
        items.sort_by_cached_key(|p| spread(p.0) & mask);
        return;
    }
    let mut buckets = [0u32; 32];
    for (b, p) in buckets.iter_mut().zip(items.iter()) {
        *b = spread(p.0) & mask;
    }
    for i in 1..items.len() {
        let mut j = i;
        while j > 0 && buckets[j - 1] > buckets[j] {
            buckets.swap(j - 1, j);
            items.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// Whether items with distinct names are in the map's iteration order.
fn is_ordered(items: &[(&str, &str)]) -> bool {
    let mask = bucket_mask(items.len());
    let mut last = 0;
    items.iter().all(|p| {
        let b = spread(p.0) & mask;
        let ok = b >= last;
        last = b;
        ok
    })
}

/// Room for an i32 in decimal.
fn itoa_buf() -> [u8; 12] {
    [0; 12]
}

/// `String.valueOf(int)` into `buf`.
pub(crate) fn itoa(v: i32, buf: &mut [u8; 12]) -> &str {
    let mut wide = [0u8; 20];
    let s = decimal(i64::from(v), &mut wide);
    let at = buf.len() - s.len();
    buf[at..].copy_from_slice(s.as_bytes());
    // Only ASCII digits and '-' were copied.
    std::str::from_utf8(&buf[at..]).unwrap_or("0")
}

/// `Long.toString(v)` into the end of `buf` (20 bytes hold any i64 with its sign), without
/// the formatting machinery (it runs once per end and per check copy).
fn decimal(v: i64, buf: &mut [u8; 20]) -> &str {
    let mut n = v.unsigned_abs();
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    // Only ASCII digits and '-' were written.
    std::str::from_utf8(&buf[at..]).unwrap_or("0")
}

/// A stored properties string read as `string2messageProperties` reads it: the items with a
/// non-empty name and value, in order.
#[derive(Debug)]
pub(crate) struct StoredProps<'a> {
    pub(crate) raw: &'a str,
    pub(crate) items: Vec<(&'a str, &'a str)>,
}

impl<'a> StoredProps<'a> {
    pub(crate) fn parse(raw: &'a [u8]) -> StoredProps<'a> {
        let mut items = Vec::with_capacity(12);
        let Ok(raw_str) = std::str::from_utf8(raw) else {
            // Items that are UTF-8 are kept (as a Java decoder would replace the others).
            for_each_property(raw, |k, v| {
                if k.is_empty() || v.is_empty() {
                    return;
                }
                if let (Ok(k), Ok(v)) = (std::str::from_utf8(k), std::str::from_utf8(v)) {
                    items.push((k, v));
                }
            });
            return StoredProps { raw: "", items };
        };
        // The separators are ASCII: every item of valid UTF-8 is valid UTF-8 (sliced by
        // position, not validated again).
        let base = raw.as_ptr() as usize;
        let at = |s: &[u8]| {
            let from = s.as_ptr() as usize - base;
            &raw_str[from..from + s.len()]
        };
        for_each_property(raw, |k, v| {
            if k.is_empty() || v.is_empty() {
                return;
            }
            items.push((at(k), at(v)));
        });
        StoredProps {
            raw: raw_str,
            items,
        }
    }

    /// The value of `name` as the map holds it (the last one).
    pub(crate) fn get(&self, name: &str) -> Option<&'a str> {
        self.items
            .iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|p| p.1)
    }

    /// The transaction id: `__transactionId__`, else `UNIQ_KEY`.
    pub(crate) fn transaction_id(&self) -> Option<&'a str> {
        self.get(property::TRANSACTION_ID)
            .or_else(|| self.get(property::UNIQ_KEY))
    }

    /// `REAL_TOPIC` and `REAL_QID` (a Java int), if both are usable.
    pub(crate) fn real_queue(&self) -> Option<(&'a str, i32)> {
        let topic = self.get(REAL_TOPIC)?;
        let qid = crate::schedule::levels::parse_java_int(self.get(REAL_QID)?)?;
        (crate::format::topic_is_legal(topic) && qid >= 0).then_some((topic, qid))
    }

    /// Whether the stored string is the map's own rendering: its items in the map's order,
    /// no name repeated, nothing else in it.
    pub(crate) fn is_own_rendering(&self) -> bool {
        let rendered_len: usize = self.items.iter().map(|p| p.0.len() + p.1.len() + 2).sum();
        rendered_len == self.raw.len()
            && is_ordered(&self.items)
            && self
                .items
                .iter()
                .enumerate()
                .all(|(i, (k, _))| self.items[i + 1..].iter().all(|(k2, _)| k2 != k))
    }

    /// The items in the order the map renders them; `true` when that is already the stored
    /// string's order with no repeated name (the string is then its own rendering).
    pub(crate) fn map_ordered(&self) -> (Vec<(&'a str, &'a str)>, bool) {
        if self.is_own_rendering() {
            (self.items.clone(), true)
        } else {
            (java_map_order(self.items.clone(), |p| p.0), false)
        }
    }
}

/// Renders `items` (`name \x01 value \x02` each) into one string.
pub(crate) fn render<'a>(items: impl Iterator<Item = (&'a str, &'a str)> + Clone) -> String {
    let len = items.clone().map(|(k, v)| k.len() + v.len() + 2).sum();
    let mut s = String::with_capacity(len);
    for (k, v) in items {
        s.push_str(k);
        s.push('\u{1}');
        s.push_str(v);
        s.push('\u{2}');
    }
    s
}

/// The commit's stored properties string from the half's: the map's rendering minus
/// `REAL_TOPIC` and `REAL_QID` (`TRAN_MSG` kept).
pub(crate) fn commit_properties(half: &StoredProps<'_>) -> String {
    let keep = |p: &(&str, &str)| p.0 != REAL_TOPIC && p.0 != REAL_QID;
    if half.is_own_rendering() {
        return render(half.items.iter().copied().filter(keep));
    }
    let (ordered, _) = half.map_ordered();
    render(ordered.iter().copied().filter(keep))
}

/// The op message's body for the queued entries `"q1,q2,...,"` (already the text).
pub(crate) fn op_body_entry(half_queue_offset: i64, out: &mut String) {
    // `Long.toString` then the comma (one per end).
    let mut buf = [0u8; 20];
    out.push_str(decimal(half_queue_offset, &mut buf));
    out.push(',');
}

/// What the put path needs of a stored properties string: `WAIT`'s value, and whether
/// `DELAY` or a timer property is in it (items with an empty value do not count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PutScan<'a> {
    pub(crate) wait: Option<&'a [u8]>,
    pub(crate) delay: bool,
    pub(crate) timer: bool,
}

impl<'a> PutScan<'a> {
    /// Takes item `k` = `v` into account.
    #[inline]
    pub(crate) fn note(&mut self, k: &[u8], v: &'a [u8]) {
        if v.is_empty() {
            return;
        }
        if k == property::WAIT.as_bytes() {
            self.wait = Some(v);
        } else if k == property::DELAY.as_bytes() {
            self.delay = true;
        } else if TIMER_PROPERTIES.iter().any(|t| t.as_bytes() == k) {
            self.timer = true;
        }
    }

    /// One pass over `props`.
    pub(crate) fn of(props: &'a [u8]) -> PutScan<'a> {
        let mut scan = PutScan::default();
        for_each_property(props, |k, v| scan.note(k, v));
        scan
    }
}

/// A properties string that is its map's rendering, without its `REAL_TOPIC` and `REAL_QID`
/// items (the commit's string), with their values and the transaction id
/// (`__transactionId__`, else `UNIQ_KEY`), and the put path's scan of the result (the same
/// pass); `None` when they are missing or unusable.
#[allow(clippy::type_complexity)]
pub(crate) fn cut_real_queue(
    props: &[u8],
) -> Option<(&str, i32, String, Option<&str>, PutScan<'_>)> {
    let raw = std::str::from_utf8(props).ok()?;
    let base = props.as_ptr() as usize;
    let (mut topic, mut qid, mut tx_id, mut uniq) = (None, None, None, None);
    let mut scan = PutScan::default();
    // Byte ranges of the two items (name to its closing separator).
    let mut cuts: [(usize, usize); 2] = [(0, 0); 2];
    let mut n = 0;
    for_each_property(props, |k, v| {
        let item = |v: &[u8]| {
            let start = k.as_ptr() as usize - base;
            let end = (v.as_ptr() as usize - base + v.len() + 1).min(raw.len());
            (start, end)
        };
        let value = || {
            let from = v.as_ptr() as usize - base;
            &raw[from..from + v.len()]
        };
        if k == REAL_TOPIC.as_bytes() && n < 2 {
            topic = Some(value());
            cuts[n] = item(v);
            n += 1;
        } else if k == REAL_QID.as_bytes() && n < 2 {
            qid = Some(value());
            cuts[n] = item(v);
            n += 1;
        } else if k == property::TRANSACTION_ID.as_bytes() && !v.is_empty() {
            tx_id = Some(value());
        } else if k == property::UNIQ_KEY.as_bytes() && !v.is_empty() {
            uniq = Some(value());
        } else {
            // REAL_TOPIC, REAL_QID and the ids are none of the names the scan looks for.
            scan.note(k, v);
        }
    });
    let topic = topic.filter(|t| crate::format::topic_is_legal(t))?;
    let qid = crate::schedule::levels::parse_java_int(qid?).filter(|q| *q >= 0)?;
    let mut out = String::with_capacity(raw.len());
    let mut at = 0;
    for (s, e) in cuts.iter().take(n) {
        out.push_str(&raw[at..*s]);
        at = *e;
    }
    out.push_str(&raw[at..]);
    Some((topic, qid, out, tx_id.or(uniq), scan))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::java_hash;

    fn props(s: &str) -> Vec<(String, String)> {
        s.split('\u{2}')
            .filter(|i| !i.is_empty())
            .map(|i| {
                let (k, v) = i.split_once('\u{1}').unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }

    fn show(s: &str) -> String {
        s.replace('\u{1}', "=").replace('\u{2}', ";")
    }

    /// Java 17's `HashMap<>(128)` iteration order of the puts of a client's half message with
    /// KEYS, TAGS and WAIT (jshell): UNIQ_KEY, PGROUP, __transactionId__, TAGS, TRAN_MSG, KEYS,
    /// WAIT, REAL_TOPIC, REAL_QID.
    #[test]
    fn half_properties_in_java_map_order() {
        let user = props("KEYS\u{1}k1\u{2}TAGS\u{1}TagA\u{2}WAIT\u{1}true\u{2}DELAY\u{1}3\u{2}");
        let s = half_properties(
            &user,
            Some("G1"),
            "0A0000010001000000000000ABCD0001",
            "T",
            2,
        )
        .unwrap();
        assert_eq!(
            show(&s),
            "UNIQ_KEY=0A0000010001000000000000ABCD0001;PGROUP=G1;\
             __transactionId__=0A0000010001000000000000ABCD0001;TAGS=TagA;TRAN_MSG=true;KEYS=k1;\
             WAIT=true;REAL_TOPIC=T;REAL_QID=2;"
        );
        // No group given: the message's PGROUP, else DEFAULT_PRODUCER.
        let s = half_properties(&props("PGROUP\u{1}Mine\u{2}"), None, "U", "T", 0).unwrap();
        assert!(show(&s).contains("PGROUP=Mine;"), "{}", show(&s));
        let s = half_properties(&[], None, "U", "T", 0).unwrap();
        assert_eq!(
            show(&s),
            "UNIQ_KEY=U;PGROUP=DEFAULT_PRODUCER;__transactionId__=U;TRAN_MSG=true;REAL_TOPIC=T;REAL_QID=0;"
        );
    }

    #[test]
    fn a_timer_property_refuses_the_half() {
        for p in TIMER_PROPERTIES {
            let user = vec![(p.to_owned(), "1000".to_owned())];
            assert_eq!(
                half_properties(&user, None, "U", "T", 0),
                Err(PutMessageStatus::MessageIllegal)
            );
        }
    }

    #[test]
    fn repeated_names_keep_the_first_place_and_the_last_value() {
        // The message's own UNIQ_KEY and a repeated KEYS.
        let user = props("KEYS\u{1}a\u{2}UNIQ_KEY\u{1}U\u{2}KEYS\u{1}b\u{2}TRAN_MSG\u{1}x\u{2}");
        let s = half_properties(&user, Some("G"), "U", "T", 1).unwrap();
        assert_eq!(
            show(&s),
            "UNIQ_KEY=U;PGROUP=G;__transactionId__=U;TRAN_MSG=true;KEYS=b;REAL_TOPIC=T;REAL_QID=1;"
        );
    }

    #[test]
    fn commit_properties_drop_real_topic_and_qid_keep_tran_msg() {
        let user = props("KEYS\u{1}k1\u{2}TAGS\u{1}TagA\u{2}WAIT\u{1}true\u{2}");
        let half = half_properties(&user, Some("G1"), "U1", "T", 2).unwrap();
        let stored = StoredProps::parse(half.as_bytes());
        assert_eq!(stored.transaction_id(), Some("U1"));
        assert_eq!(stored.real_queue(), Some(("T", 2)));
        assert!(stored.map_ordered().1);
        let c = commit_properties(&stored);
        assert_eq!(
            show(&c),
            "UNIQ_KEY=U1;PGROUP=G1;__transactionId__=U1;TAGS=TagA;TRAN_MSG=true;KEYS=k1;WAIT=true;"
        );
        // A string not in map order (another writer's) is put in it.
        let odd = "REAL_QID\u{1}0\u{2}TAGS\u{1}x\u{2}REAL_TOPIC\u{1}T\u{2}UNIQ_KEY\u{1}U\u{2}";
        let c = commit_properties(&StoredProps::parse(odd.as_bytes()));
        assert_eq!(show(&c), "UNIQ_KEY=U;TAGS=x;");
    }

    #[test]
    fn the_compile_time_hashes_and_the_ordering_equal_the_general_ones() {
        let names = [
            "TAGS",
            "KEYS",
            "WAIT",
            "UNIQ_KEY",
            "TRAN_MSG",
            "PGROUP",
            "__transactionId__",
            "REAL_TOPIC",
            "REAL_QID",
            "TRANSACTION_CHECK_TIMES",
            "DELAY",
            "a",
            "zz9",
        ];
        for n in names {
            let h = java_hash(n) as u32;
            assert_eq!(spread(n), h ^ (h >> 16), "{n}");
        }
        for len in [0usize, 1, 5, 13] {
            for rot in 0..len.max(1) {
                let mut items: Vec<(&str, &str)> = names
                    .iter()
                    .cycle()
                    .skip(rot)
                    .take(len)
                    .map(|n| (*n, "v"))
                    .collect();
                let want = java_map_order(items.clone(), |p| p.0);
                order_distinct(&mut items);
                assert_eq!(items, want);
                assert!(is_ordered(&items));
            }
        }
        let many: Vec<String> = (0..120).map(|i| format!("P{i}")).collect();
        let mut items: Vec<(&str, &str)> = many.iter().map(|n| (n.as_str(), "v")).collect();
        let want = java_map_order(items.clone(), |p| p.0);
        order_distinct(&mut items);
        assert_eq!(items, want);
    }

    /// A default `HashMap` (16 buckets) holding TAGS and WAIT iterates WAIT first (jshell).
    #[test]
    fn op_properties_in_a_16_bucket_map_order() {
        let bucket = |k: &str| {
            let h = java_hash(k) as u32;
            (h ^ (h >> 16)) & 15
        };
        assert!(bucket("WAIT") < bucket("TAGS"));
        assert_eq!(show(OP_PROPERTIES), "WAIT=true;TAGS=d;");
        let mut s = String::new();
        op_body_entry(0, &mut s);
        op_body_entry(12, &mut s);
        assert_eq!(s, "0,12,");
        for v in [7, 1_000_000_007, i64::MAX, -3, i64::MIN] {
            let mut s = String::new();
            op_body_entry(v, &mut s);
            assert_eq!(s, format!("{v},"));
        }
    }

    #[test]
    fn itoa_is_java_value_of() {
        let mut b = itoa_buf();
        for v in [0, 7, -1, 123_456, i32::MAX, i32::MIN] {
            assert_eq!(itoa(v, &mut b), v.to_string());
        }
    }

    #[test]
    fn the_cut_commit_string_equals_the_rendered_one() {
        for user in [
            vec![],
            vec![
                ("KEYS".to_owned(), "k1 k2".to_owned()),
                ("TAGS".to_owned(), "TagA".to_owned()),
                ("WAIT".to_owned(), "false".to_owned()),
                ("a".to_owned(), "b".to_owned()),
            ],
        ] {
            for (topic, qid) in [("T", 0), ("TopicWithLongerName", 2_000_000_000)] {
                let half = half_properties(&user, Some("G"), "U", topic, qid).unwrap();
                let sp = StoredProps::parse(half.as_bytes());
                let (t, q, cut, id, scan) = cut_real_queue(half.as_bytes()).unwrap();
                assert_eq!((t, q, id), (topic, qid, Some("U")));
                assert_eq!(scan, PutScan::of(cut.as_bytes()));
                assert_eq!(cut, commit_properties(&sp));
            }
        }
        assert!(cut_real_queue(b"REAL_TOPIC\x01T\x02").is_none());
        assert!(cut_real_queue(b"REAL_TOPIC\x01T\x02REAL_QID\x01-1\x02").is_none());
        assert!(cut_real_queue(b"REAL_TOPIC\x01a b\x02REAL_QID\x011\x02").is_none());
    }
}
