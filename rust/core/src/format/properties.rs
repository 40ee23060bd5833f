//! Message properties as a record stores them: `name \x01 value \x02` items (RocketMQ's
//! `messageProperties2String` / `string2messageProperties`), the well-known names, and the
//! one-pass scan dispatch uses.

use super::message::PutMessageStatus;

/// Properties separators (`NAME_VALUE_SEPARATOR`, `PROPERTY_SEPARATOR`).
pub(crate) const NAME_VALUE_SEPARATOR: char = '\u{1}';
pub(crate) const PROPERTY_SEPARATOR: char = '\u{2}';

/// Well-known property names (MessageConst).
pub mod property {
    pub const TAGS: &str = "TAGS";
    pub const KEYS: &str = "KEYS";
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    pub const WAIT: &str = "WAIT";
    pub const DELAY: &str = "DELAY";
    pub const KEY_SEPARATOR: char = ' ';
    /// `PROPERTY_TRANSACTION_PREPARED`.
    pub const TRAN_MSG: &str = "TRAN_MSG";
    /// `PROPERTY_PRODUCER_GROUP`.
    pub const PGROUP: &str = "PGROUP";
    /// `TransactionalMessageUtil.TRANSACTION_ID`.
    pub const TRANSACTION_ID: &str = "__transactionId__";
    /// `PROPERTY_TRANSACTION_CHECK_TIMES`.
    pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
    /// `PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS`.
    pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
    /// `PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET`.
    pub const TRAN_PREPARED_QUEUE_OFFSET: &str = "TRAN_PREPARED_QUEUE_OFFSET";
}

/// `messageProperties2String`: `name \x01 value \x02` for every entry (the string allocated
/// once, at its length).
pub(crate) fn encode_properties<'a, I>(props: I) -> String
where
    I: IntoIterator<Item = (&'a str, &'a str)> + Clone,
{
    let len = props
        .clone()
        .into_iter()
        .map(|(k, v)| k.len() + v.len() + 2)
        .sum();
    let mut out = String::with_capacity(len);
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
pub(crate) fn parse_properties(s: &str) -> Vec<(String, String)> {
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
pub(crate) fn keep_last_of_each<T, N: Eq + std::hash::Hash>(
    items: &mut Vec<T>,
    name: impl Fn(&T) -> N,
) {
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
pub(crate) fn find_property<'a>(props: &'a str, name: &str) -> Option<&'a str> {
    let mut found: Option<&'a [u8]> = None;
    for_each_property(props.as_bytes(), |k, v| {
        if k == name.as_bytes() && !v.is_empty() {
            found = Some(v);
        }
    });
    // The separators are ASCII, so a value between them is whole UTF-8 of `props`.
    found.and_then(|v| std::str::from_utf8(v).ok())
}

fn property_text_is_legal(s: &str) -> bool {
    // The separators are ASCII (no byte of a multi-byte character equals one): a byte scan,
    // without decoding characters.
    !s.bytes()
        .any(|b| b == NAME_VALUE_SEPARATOR as u8 || b == PROPERTY_SEPARATOR as u8)
}

/// Validates properties given as pairs and renders the stored string.
pub(crate) fn render_properties<'a, I>(props: I) -> Result<String, PutMessageStatus>
where
    I: IntoIterator<Item = (&'a str, &'a str)> + Clone,
{
    for (k, v) in props.clone() {
        if !property_is_legal(k, v) {
            return Err(PutMessageStatus::MessageIllegal);
        }
    }
    Ok(encode_properties(props))
}

/// Whether a property can be stored: an empty name or value would vanish on read; a separator
/// would corrupt the string.
#[inline]
pub(crate) fn property_is_legal(name: &str, value: &str) -> bool {
    !name.is_empty()
        && !value.is_empty()
        && property_text_is_legal(name)
        && property_text_is_legal(value)
}

/// Calls `f(name, value)` for every `name \x01 value \x02` item of raw record properties, in
/// order (the value runs to the next `\x02` or the end; an item without `\x01` is skipped), as
/// `split(2)` then the first `1` of each item would. On x86_64 the separators are found 16
/// bytes at a time (SSE2 compares and a bit mask), so the cost is per separator, not per byte.
#[inline(always)]
pub(crate) fn for_each_property<'a>(props: &'a [u8], mut f: impl FnMut(&'a [u8], &'a [u8])) {
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
pub(crate) struct DispatchProps<'a> {
    pub tags: Option<&'a str>,
    pub keys: Option<&'a str>,
    pub uniq_key: Option<&'a str>,
}

impl<'a> DispatchProps<'a> {
    /// One pass over the raw `name \x01 value \x02` bytes; values that are not UTF-8 are
    /// ignored.
    pub(crate) fn scan(props: &'a [u8]) -> DispatchProps<'a> {
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

    /// Fuzzing the properties readers: items lie inside the input, and every reader agrees with
    /// the reference split whatever the bytes.
    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        fn within(outer: &[u8], inner: &[u8]) -> bool {
            let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
            i >= o && i + inner.len() <= o + outer.len()
        }

        /// Pieces properties are made of: the names dispatch looks for, separators, ASCII and
        /// multi-byte UTF-8.
        fn token() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                Just(b"TAGS".to_vec()),
                Just(b"KEYS".to_vec()),
                Just(b"UNIQ_KEY".to_vec()),
                Just(vec![1u8]),
                Just(vec![2u8]),
                Just(b"v".to_vec()),
                any::<char>().prop_map(|c| c.to_string().into_bytes()),
            ]
        }

        /// Properties bytes, possibly not UTF-8.
        fn props_bytes() -> impl Strategy<Value = Vec<u8>> {
            proptest::collection::vec(
                prop_oneof![4 => token(), 1 => any::<u8>().prop_map(|b| vec![b])],
                0..80,
            )
            .prop_map(|t| t.concat())
        }

        /// Properties text.
        fn props_text() -> impl Strategy<Value = String> {
            proptest::collection::vec(token(), 0..80)
                .prop_map(|t| String::from_utf8(t.concat()).unwrap())
        }

        /// The last non-empty value of `name` in the reference split.
        fn last_value(items: &[(Vec<u8>, Vec<u8>)], name: &str) -> Option<Vec<u8>> {
            items
                .iter()
                .rev()
                .find(|(k, v)| k == name.as_bytes() && !v.is_empty())
                .map(|(_, v)| v.clone())
        }

        proptest! {
            /// Items of any slice of a buffer (any start, any end: the 16-byte path meets
            /// every alignment and real bytes after the end) lie inside the slice and match
            /// the reference.
            #[test]
            fn items_lie_within_any_slice(
                props in props_bytes(),
                a in any::<prop::sample::Index>(),
                b in any::<prop::sample::Index>(),
            ) {
                let (a, b) = (a.index(props.len() + 1), b.index(props.len() + 1));
                let s = &props[a.min(b)..a.max(b)];
                let mut got = Vec::new();
                let mut inside = true;
                for_each_property(s, |k, v| {
                    inside &= within(s, k) && within(s, v);
                    got.push((k.to_vec(), v.to_vec()));
                });
                prop_assert!(inside);
                for (k, v) in &got {
                    prop_assert!(!k.contains(&1) && !k.contains(&2) && !v.contains(&2));
                }
                prop_assert_eq!(got, split_properties(s));
            }

            /// The dispatch scan on any bytes: each name's last non-empty value, if UTF-8,
            /// borrowed from the input.
            #[test]
            fn dispatch_scan_matches_the_reference(props in props_bytes()) {
                let items = split_properties(&props);
                let d = DispatchProps::scan(&props);
                for (got, name) in [(d.tags, "TAGS"), (d.keys, "KEYS"), (d.uniq_key, "UNIQ_KEY")] {
                    let want = last_value(&items, name).and_then(|v| String::from_utf8(v).ok());
                    prop_assert_eq!(got.map(str::to_owned), want);
                    if let Some(g) = got {
                        prop_assert!(within(&props, g.as_bytes()));
                    }
                }
            }

            /// Lookups and parsing of any text agree with the reference (last value wins).
            #[test]
            fn lookups_match_the_reference(text in props_text()) {
                let items = split_properties(text.as_bytes());
                for name in ["TAGS", "KEYS", "UNIQ_KEY", "v", ""] {
                    let want = last_value(&items, name).map(|v| String::from_utf8(v).unwrap());
                    let got = find_property(&text, name);
                    prop_assert_eq!(got.map(str::to_owned), want);
                    if let Some(g) = got {
                        prop_assert!(within(text.as_bytes(), g.as_bytes()));
                    }
                }
                let mut want: Vec<(String, String)> = items
                    .into_iter()
                    .filter(|(k, v)| !k.is_empty() && !v.is_empty())
                    .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
                    .collect();
                keep_last_of_each(&mut want, |p| p.0.clone());
                prop_assert_eq!(parse_properties(&text), want);
            }

            /// Rendered properties parse back to the pairs, a repeated name to its last value.
            #[test]
            fn rendered_properties_parse_back(
                pairs in proptest::collection::vec(("[A-Z_]{1,3}", "[^\u{1}\u{2}]{1,16}"), 0..24),
            ) {
                let text = render_properties(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap();
                prop_assert_eq!(&encode_properties(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))), &text);
                let mut want = pairs.clone();
                keep_last_of_each(&mut want, |p| p.0.clone());
                for (k, v) in &want {
                    prop_assert_eq!(find_property(&text, k), Some(v.as_str()));
                }
                prop_assert_eq!(parse_properties(&text), want);
            }

            /// Both paths of `keep_last_of_each` (pairwise up to 16 items, a hash set above)
            /// keep exactly the last item of each name, in order.
            #[test]
            fn keep_last_matches_the_reference(names in proptest::collection::vec(0u8..24, 0..48)) {
                let items: Vec<(u8, usize)> = names.iter().copied().zip(0..).collect();
                let want: Vec<(u8, usize)> = items
                    .iter()
                    .enumerate()
                    .filter(|(i, p)| !items[i + 1..].iter().any(|q| q.0 == p.0))
                    .map(|(_, p)| *p)
                    .collect();
                let mut got = items.clone();
                keep_last_of_each(&mut got, |p| p.0);
                prop_assert_eq!(got, want);
            }
        }
    }
}
