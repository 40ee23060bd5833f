//! The index file format, as bytes (no I/O): RocketMQ's hash index from message keys
//! (`topic#KEYS` item, `topic#UNIQ_KEY`) to commitlog physical offsets (docs/format.md#index-files;
//! `IndexHeader`, `IndexFile`'s layout, `IndexService.buildKey`).
//!
//! File layout (all big-endian): a 40-byte header, `hash_slot_num` 4-byte slots holding the
//! number of the newest entry of their bucket, then `index_num` 20-byte entries
//! (`keyHash i32, phyOffset i64, timeDiff i32 (seconds from beginTimestamp), prevIndex i32`).
//! Entry 0 is never used, so a file holds `index_num - 1` entries.
//!
//! Here: the header and its encoding, the word positions of header fields, slots and entries,
//! the file size, the key hashes, and the file names (`yyyyMMddHHmmssSSS`, the next name, the
//! names of files filling a gap). The mapped file that reads and writes this layout is
//! `crate::index::file`.

use crate::error::{Result, StoreError};
use crate::util::java_hash;

/// `IndexHeader.INDEX_HEADER_SIZE`.
pub(crate) const INDEX_HEADER_SIZE: i64 = 40;
/// `hashSlotSize`.
pub(crate) const HASH_SLOT_SIZE: i64 = 4;
/// `indexSize`.
pub(crate) const INDEX_ENTRY_SIZE: i64 = 20;
/// `maxHashSlotNum` default.
#[cfg(test)]
pub(crate) const DEFAULT_MAX_HASH_SLOT_NUM: i32 = 5_000_000;
/// `maxIndexNum` default.
#[cfg(test)]
pub(crate) const DEFAULT_MAX_INDEX_NUM: i32 = 20_000_000;
/// Length of an index file name (`yyyyMMddHHmmssSSS`).
pub(crate) const INDEX_FILE_NAME_LEN: usize = 17;
/// Length of the name of a file that re-indexes a gap between two files (see
/// [`crate::index::IndexService::fill_gap`]): the 17-digit name of the file before the gap and
/// one digit, so that it sorts between its neighbours (RocketMQ and rmqstore both order index
/// files by name, and RocketMQ only parses the name as a number).
pub(crate) const GAP_FILE_NAME_LEN: usize = 18;

// Word (4-byte) positions of the header fields.
pub(crate) const W_BEGIN_TIMESTAMP: usize = 0;
pub(crate) const W_END_TIMESTAMP: usize = 2;
pub(crate) const W_BEGIN_PHY_OFFSET: usize = 4;
pub(crate) const W_END_PHY_OFFSET: usize = 6;
pub(crate) const W_HASH_SLOT_COUNT: usize = 8;
pub(crate) const W_INDEX_COUNT: usize = 9;
pub(crate) const HEADER_WORDS: usize = 10;
/// Words of one entry.
pub(crate) const ENTRY_WORDS: usize = 5;
// Word offsets of the fields of an entry from its first word.
pub(crate) const E_KEY_HASH: usize = 0;
pub(crate) const E_PHY_OFFSET: usize = 1;
pub(crate) const E_TIME_DIFF: usize = 3;
pub(crate) const E_PREV_INDEX: usize = 4;

/// Word position of the slot of `key_hash` (`keyHash % hashSlotNum`, the remainder taken by
/// `slot_mod`, whose divisor is the file's slot count).
#[inline]
pub(crate) fn slot_word(slot_mod: FastMod, key_hash: i32) -> usize {
    // `key_hash` is never negative (`index_key_hash`); a negative one would be a bug, and
    // lands on slot 0 rather than outside the table.
    HEADER_WORDS + slot_mod.rem(u32::try_from(key_hash).unwrap_or(0)) as usize
}

/// Word position of entry `n` in a file of `hash_slot_num` slots (`n` must be in
/// `0..index_num`).
#[inline]
pub(crate) fn entry_word(hash_slot_num: i32, n: i32) -> usize {
    HEADER_WORDS + hash_slot_num as usize + n as usize * ENTRY_WORDS
}

/// The 40-byte header of an index file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IndexHeader {
    /// Store timestamp of the first entry (or the previous file's end, until the first put).
    pub begin_timestamp: i64,
    /// Store timestamp of the last entry.
    pub end_timestamp: i64,
    /// Commitlog offset of the first entry.
    pub begin_phy_offset: i64,
    /// Commitlog offset of the last entry.
    pub end_phy_offset: i64,
    /// Number of slots ever occupied.
    pub hash_slot_count: i32,
    /// Next entry number (starts at 1).
    pub index_count: i32,
}

impl IndexHeader {
    /// The header as RocketMQ writes it.
    #[cfg(test)]
    pub(crate) fn to_bytes(self) -> [u8; 40] {
        let mut b = [0u8; 40];
        b[0..8].copy_from_slice(&self.begin_timestamp.to_be_bytes());
        b[8..16].copy_from_slice(&self.end_timestamp.to_be_bytes());
        b[16..24].copy_from_slice(&self.begin_phy_offset.to_be_bytes());
        b[24..32].copy_from_slice(&self.end_phy_offset.to_be_bytes());
        b[32..36].copy_from_slice(&self.hash_slot_count.to_be_bytes());
        b[36..40].copy_from_slice(&self.index_count.to_be_bytes());
        b
    }

    /// Decodes the raw header (no `index_count <= 0` correction); `None` if shorter than 40 bytes.
    #[cfg(test)]
    pub(crate) fn from_bytes(b: &[u8]) -> Option<IndexHeader> {
        let b: &[u8; 40] = b.get(..40)?.try_into().ok()?;
        let l = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            i64::from_be_bytes(a)
        };
        let w = |i: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&b[i..i + 4]);
            i32::from_be_bytes(a)
        };
        Some(IndexHeader {
            begin_timestamp: l(0),
            end_timestamp: l(8),
            begin_phy_offset: l(16),
            end_phy_offset: l(24),
            hash_slot_count: w(32),
            index_count: w(36),
        })
    }
}

/// `indexKeyHashMethod`: `abs(key.hashCode())`, with `Integer.MIN_VALUE` (whose abs is itself)
/// mapped to 0.
pub(crate) fn index_key_hash(key: &str) -> i32 {
    java_hash(key).checked_abs().unwrap_or(0)
}

/// `index_key_hash(build_key(topic, key))` without building the key.
pub(crate) fn topic_key_hash(topic_prefix_hash: i32, key: &str) -> i32 {
    crate::util::java_hash_extend(topic_prefix_hash, key)
        .checked_abs()
        .unwrap_or(0)
}

/// [`topic_key_hash`] of key text copied from a `&str` (so valid UTF-8).
pub(crate) fn topic_key_hash_bytes(topic_prefix_hash: i32, key: &[u8]) -> i32 {
    topic_key_hash(topic_prefix_hash, std::str::from_utf8(key).unwrap_or(""))
}

/// Pushes the [`topic_key_hash`] of every non-empty key of a KEYS value (keys separated by
/// spaces, as `MessageConst.KEY_SEPARATOR`). ASCII text, the common case, is checked once and
/// split without UTF-8 decoding; other text goes through the UTF-16 hash key by key.
pub(crate) fn push_key_hashes(out: &mut Vec<i32>, topic_prefix_hash: i32, keys: &[u8]) {
    if !keys.is_ascii() {
        let text = std::str::from_utf8(keys).unwrap_or("");
        out.extend(
            text.split(crate::format::property::KEY_SEPARATOR)
                .filter(|k| !k.is_empty())
                .map(|k| topic_key_hash(topic_prefix_hash, k)),
        );
        return;
    }
    let sep = crate::format::property::KEY_SEPARATOR as u8;
    let mut from = 0;
    while from < keys.len() {
        let end = keys[from..]
            .iter()
            .position(|&b| b == sep)
            .map_or(keys.len(), |p| from + p);
        if end > from {
            let h = crate::util::java_hash_extend_ascii(topic_prefix_hash, &keys[from..end]);
            out.push(h.checked_abs().unwrap_or(0));
        }
        from = end + 1;
    }
}

/// Java hash of `topic + "#"`, the prefix every key of a topic shares.
pub(crate) fn topic_prefix_hash(topic: &str) -> i32 {
    crate::util::java_hash_extend(java_hash(topic), "#")
}

/// `IndexService.buildKey`: `topic + "#" + key`.
pub(crate) fn build_key(topic: &str, key: &str) -> String {
    let mut s = String::with_capacity(topic.len() + 1 + key.len());
    s.push_str(topic);
    s.push('#');
    s.push_str(key);
    s
}

/// What RocketMQ 5.4+ puts between `topic#` and a TAGS value (`MessageConst.INDEX_TAG_TYPE`
/// and the separator): `topic#T#tags`.
pub(crate) const TAG_KEY_INFIX: &str = "T#";

/// The byte size of an index file, `40 + hash_slot_num*4 + index_num*20`, after checking the
/// settings: at least one slot, at least two entries (entry 0 is never used) and a total that
/// fits RocketMQ's `int` file size.
pub(crate) fn index_file_size(hash_slot_num: i32, index_num: i32) -> Result<i64> {
    if hash_slot_num < 1 {
        return Err(StoreError::config(
            "max_hash_slot_num",
            format!("must be at least 1, got {hash_slot_num}"),
        ));
    }
    if index_num < 2 {
        return Err(StoreError::config(
            "max_index_num",
            format!("must be at least 2 (entry 0 is never used), got {index_num}"),
        ));
    }
    let size = INDEX_HEADER_SIZE
        + i64::from(hash_slot_num) * HASH_SLOT_SIZE
        + i64::from(index_num) * INDEX_ENTRY_SIZE;
    if size > i64::from(i32::MAX) {
        return Err(StoreError::config(
            "max_index_num",
            format!(
                "index files of {hash_slot_num} slots and {index_num} entries would be {size} \
                 bytes, more than {}",
                i32::MAX
            ),
        ));
    }
    Ok(size)
}

/// Whether `name` is an index file name: 17 ASCII digits (`yyyyMMddHHmmssSSS`), or 18 for a
/// file that fills a gap ([`GAP_FILE_NAME_LEN`]).
pub(crate) fn is_index_file_name(name: &str) -> bool {
    (name.len() == INDEX_FILE_NAME_LEN || name.len() == GAP_FILE_NAME_LEN)
        && name.bytes().all(|b| b.is_ascii_digit())
}

/// `UtilAll.timeMillisToHumanString`: `yyyyMMddHHmmssSSS` in the local time zone
/// (`localtime_r`); `None` if the time cannot be converted or is not a 4-digit year.
pub(crate) fn index_file_name(millis: i64) -> Option<String> {
    let secs = libc::time_t::try_from(millis.div_euclid(1000)).ok()?;
    let ms = millis.rem_euclid(1000);
    // SAFETY: `tm` is plain old data; all-zero is a valid value (the pointer field is null).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is thread-safe.
    let r = unsafe { libc::localtime_r(&secs, &mut tm) };
    if r.is_null() {
        return None;
    }
    let name = format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}{:03}",
        i64::from(tm.tm_year) + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        ms
    );
    (name.len() == INDEX_FILE_NAME_LEN && is_index_file_name(&name)).then_some(name)
}

/// The name one millisecond after `name` in civil time (`...235959999` → next day `...000000000`),
/// or the next 17-digit number when `name` is not a valid date; `None` past `99991231235959999`.
pub(crate) fn next_index_file_name(name: &str) -> Option<String> {
    if name.len() != INDEX_FILE_NAME_LEN || !is_index_file_name(name) {
        return None;
    }
    let n: u64 = name.parse().ok()?;
    let year = n / 10_000_000_000_000;
    let month = n / 100_000_000_000 % 100;
    let day = n / 1_000_000_000 % 100;
    let hour = n / 10_000_000 % 100;
    let minute = n / 100_000 % 100;
    let second = n / 1000 % 100;
    let milli = n % 1000;
    let valid = (1..=12).contains(&month)
        && day >= 1
        && day <= days_in_month(year, month)
        && hour < 24
        && minute < 60
        && second < 60;
    let next = if !valid {
        n + 1
    } else {
        let (mut y, mut mo, mut d, mut h, mut mi, mut s, mut ms) =
            (year, month, day, hour, minute, second, milli + 1);
        if ms == 1000 {
            ms = 0;
            s += 1;
        }
        if s == 60 {
            s = 0;
            mi += 1;
        }
        if mi == 60 {
            mi = 0;
            h += 1;
        }
        if h == 24 {
            h = 0;
            d += 1;
        }
        if d > days_in_month(y, mo) {
            d = 1;
            mo += 1;
        }
        if mo == 13 {
            mo = 1;
            y += 1;
        }
        ((((((y * 100 + mo) * 100 + d) * 100 + h) * 100 + mi) * 100 + s) * 1000) + ms
    };
    let s = format!("{next:017}");
    (s.len() == INDEX_FILE_NAME_LEN).then_some(s)
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        _ => 0,
    }
}

/// Names for files filling a gap between `prev` and `next`, in order: the 17-digit name of the
/// file before (or, before the first file, the number one below the next file's) followed by
/// one digit, each sorting after `prev` and before `next`.
pub(crate) fn gap_file_names(prev: Option<&str>, next: &str) -> Vec<String> {
    let base = match prev {
        // (`get`: a name that is not ASCII may have no character boundary at 17.)
        Some(p) => match p.get(..INDEX_FILE_NAME_LEN) {
            Some(base) => base.to_owned(),
            None => return Vec::new(),
        },
        None => match next
            .get(..INDEX_FILE_NAME_LEN)
            .and_then(|n| n.parse::<u64>().ok())
            .and_then(|n| n.checked_sub(1))
        {
            Some(n) => format!("{n:017}"),
            None => return Vec::new(),
        },
    };
    (1..=9)
        .map(|d| format!("{base}{d}"))
        .filter(|name| prev.is_none_or(|p| name.as_str() > p) && name.as_str() < next)
        .collect()
}

/// `a % d` for a fixed 32-bit divisor by two multiplications (Lemire, Kaser and Kurz, "Faster
/// remainder by direct computation", 2019).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastMod {
    d: u32,
    m: u64,
}

impl FastMod {
    pub(crate) fn new(d: u32) -> FastMod {
        let d = d.max(1);
        FastMod {
            d,
            m: (u64::MAX / u64::from(d)).wrapping_add(1),
        }
    }

    #[inline]
    pub(crate) fn rem(self, a: u32) -> u32 {
        let low = self.m.wrapping_mul(u64::from(a));
        ((u128::from(low) * u128::from(self.d)) >> 64) as u32
    }
}

#[cfg(test)]
mod fastmod_tests {
    use super::FastMod;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn equals_the_remainder(a in any::<u32>(), d in 1u32..) {
            prop_assert_eq!(FastMod::new(d).rem(a), a % d);
        }
    }

    #[test]
    fn edges() {
        for d in [1u32, 2, 3, 7, 5_000_000, u32::MAX] {
            for a in [
                0u32,
                1,
                d - 1,
                d,
                d.wrapping_add(1),
                i32::MAX as u32,
                u32::MAX,
            ] {
                assert_eq!(FastMod::new(d).rem(a), a % d, "{a} % {d}");
            }
        }
    }
}

/// The reference the key-hashing tests compare with: split on the separator, drop empty keys,
/// hash each `topic#key`.
#[cfg(test)]
pub(crate) fn key_hashes_by_split(topic: &str, keys: &str) -> Vec<i32> {
    keys.split(' ')
        .filter(|k| !k.is_empty())
        .map(|k| index_key_hash(&build_key(topic, k)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::now_millis;
    use proptest::prelude::*;

    #[test]
    fn keys_are_split_and_hashed_as_by_str_split() {
        for keys in [
            "",
            " ",
            "a",
            "order-1 user-1",
            "  a  b ",
            "a b c d e f",
            "k\u{e9}y \u{1F600} x",
            "polygenelubricants",
            "Aa BB",
        ] {
            let mut got = Vec::new();
            push_key_hashes(&mut got, topic_prefix_hash("T"), keys.as_bytes());
            assert_eq!(got, key_hashes_by_split("T", keys), "{keys:?}");
        }
    }

    proptest! {
        #[test]
        fn key_hashes_equal_str_split_hashes(
            topic in "[a-zA-Z%_-]{1,12}",
            keys in "[ a-z0-9\u{e9}\u{1F600}]{0,40}",
        ) {
            let mut got = Vec::new();
            push_key_hashes(&mut got, topic_prefix_hash(&topic), keys.as_bytes());
            prop_assert_eq!(got, key_hashes_by_split(&topic, &keys));
        }
    }

    #[test]
    fn key_hash_and_file_size() {
        assert_eq!(index_key_hash("abc"), 96_354);
        assert_eq!(index_key_hash("FooBar#Hello"), 101_609_924);
        assert_eq!(index_key_hash("polygenelubricants"), 0);
        assert_eq!(
            index_file_size(DEFAULT_MAX_HASH_SLOT_NUM, DEFAULT_MAX_INDEX_NUM).unwrap(),
            420_000_040
        );
        assert_eq!(index_file_size(100, 400).unwrap(), 40 + 400 + 8000);
        assert!(index_file_size(0, 400).is_err());
        assert!(index_file_size(100, 1).is_err());
        assert!(index_file_size(i32::MAX, i32::MAX).is_err());
        assert_eq!(build_key("T", "k"), "T#k");
    }

    #[test]
    fn gap_file_names_sort_between_their_neighbours() {
        let p = "20240101120000149";
        let n = "20240101120000150";
        let names = gap_file_names(Some(p), n);
        assert_eq!(names.len(), 9);
        assert_eq!(names[0], "202401011200001491");
        assert!(names.iter().all(|x| is_index_file_name(x)));
        let mut all: Vec<&str> = names.iter().map(String::as_str).collect();
        all.extend([p, n, "20240101120000148", "20240101120000151"]);
        all.sort_unstable();
        assert_eq!(all[1], p);
        assert_eq!(all[11], n);
        // After a gap file: the following digits only.
        assert_eq!(
            gap_file_names(Some("202401011200001497"), n),
            ["202401011200001498", "202401011200001499"]
        );
        // Before the first file: the number below it, then a digit.
        assert_eq!(gap_file_names(None, n)[0], "202401011200001491");
        assert_eq!(
            gap_file_names(None, "00000000000000000"),
            Vec::<String>::new()
        );
        // Before a gap file of the same base: only smaller digits.
        assert_eq!(
            gap_file_names(Some(p), "202401011200001493"),
            ["202401011200001491", "202401011200001492"]
        );
    }

    #[test]
    fn names_are_local_time_and_successors_are_civil() {
        let name = index_file_name(now_millis()).unwrap();
        assert!(is_index_file_name(&name));
        assert!(name.starts_with("20"));
        assert!(!is_index_file_name("2024010112000000"));
        assert!(!is_index_file_name("2024010112000000x"));
        assert!(is_index_file_name("202401011200000001"));
        assert!(!is_index_file_name("2024010112000000001"));
        for (name, next) in [
            ("20240101120000000", "20240101120000001"),
            ("20240101120059999", "20240101120100000"),
            ("20231231235959999", "20240101000000000"),
            ("20240228235959999", "20240229000000000"),
            ("20230228235959999", "20230301000000000"),
            // Not a date: the next number.
            ("20241399999999999", "20241400000000000"),
        ] {
            assert_eq!(
                next_index_file_name(name).as_deref(),
                Some(next),
                "after {name}"
            );
        }
        assert_eq!(next_index_file_name("99999999999999999"), None);
        assert_eq!(next_index_file_name("99991231235959999"), None);
        assert_eq!(next_index_file_name("123"), None);
    }

    /// 17 or 18 ASCII digits, whatever else the text holds.
    fn name_like() -> impl Strategy<Value = String> {
        prop_oneof![
            "[0-9]{15,20}",
            "[0-9]{16,18}[^0-9]?",
            "[0-9\u{660}\u{ff10}x ]{15,19}",
            ".{0,24}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 1024,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// The name parsers take any text without panicking; a name is exactly 17 or 18 ASCII
        /// digits.
        #[test]
        fn file_name_parsers_take_any_text(a in name_like(), b in name_like()) {
            let digits = |s: &str| {
                (s.len() == 17 || s.len() == 18) && s.chars().all(|c| c.is_ascii_digit())
            };
            prop_assert_eq!(is_index_file_name(&a), digits(&a));
            if let Some(next) = next_index_file_name(&a) {
                prop_assert!(a.len() == 17 && digits(&a));
                prop_assert!(next.len() == 17 && is_index_file_name(&next));
                prop_assert!(next > a);
            }
            for names in [gap_file_names(Some(&a), &b), gap_file_names(None, &b)] {
                for n in &names {
                    prop_assert!(n.len() == GAP_FILE_NAME_LEN && n.as_str() < b.as_str());
                }
            }
        }

        /// The name after a 17-digit name is later, one millisecond later for a civil time
        /// whose milliseconds are not 999, and missing only past the last representable one.
        #[test]
        fn next_file_name_is_later(n in prop_oneof![
            0u64..=99_999_999_999_999_999,
            99_999_999_999_999_000u64..=99_999_999_999_999_999,
            // Civil times, often at the end of a second, day, month or year.
            (0u64..=9999, 1u64..=12, 1u64..=31, 0u64..24, 0u64..60, 0u64..60,
                prop_oneof![Just(999u64), 0u64..1000], any::<bool>())
                .prop_map(|(y, mo, d, h, mi, s, ms, last)| {
                    let (h, mi, s) = if last { (23, 59, 59) } else { (h, mi, s) };
                    ((((((y * 100 + mo) * 100 + d) * 100 + h) * 100 + mi) * 100 + s) * 1000) + ms
                }),
        ]) {
            let name = format!("{n:017}");
            match next_index_file_name(&name) {
                Some(next) => {
                    prop_assert!(is_index_file_name(&next) && next.len() == INDEX_FILE_NAME_LEN);
                    prop_assert!(next > name);
                    if n % 1000 != 999 {
                        prop_assert_eq!(next, format!("{:017}", n + 1));
                    }
                }
                None => prop_assert!(n >= 99_991_231_235_959_999),
            }
        }

        /// Gap file names are index file names, in order, strictly between their neighbours.
        #[test]
        fn gap_file_names_lie_between(
            p in 1u64..=99_999_999_999_999_999,
            gap_digit in proptest::option::of(0u8..=9),
            ahead in 0u64..3,
            next_digit in proptest::option::of(0u8..=9),
            first in any::<bool>(),
        ) {
            let mut prev = format!("{p:017}");
            if let Some(g) = gap_digit {
                prev.push(char::from(b'0' + g));
            }
            let mut next = format!("{:017}", (p + ahead).min(99_999_999_999_999_999));
            if let Some(g) = next_digit {
                next.push(char::from(b'0' + g));
            }
            let prev = (!first).then_some(prev);
            let names = gap_file_names(prev.as_deref(), &next);
            for w in names.windows(2) {
                prop_assert!(w[0] < w[1]);
            }
            for n in &names {
                prop_assert!(is_index_file_name(n) && n.len() == GAP_FILE_NAME_LEN);
                prop_assert!(prev.as_deref().is_none_or(|p| n.as_str() > p));
                prop_assert!(n.as_str() < next.as_str());
            }
        }

        /// The header decodes from any bytes of at least 40 (`None` below) and encodes back to
        /// the same 40 bytes.
        #[test]
        fn header_codec_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            match IndexHeader::from_bytes(&bytes) {
                Some(h) => {
                    prop_assert!(bytes.len() >= 40);
                    prop_assert_eq!(&h.to_bytes()[..], &bytes[..40]);
                    prop_assert_eq!(IndexHeader::from_bytes(&h.to_bytes()), Some(h));
                }
                None => prop_assert!(bytes.len() < 40),
            }
        }

        /// The file size of any settings is refused or is the layout's size and fits an `int`.
        #[test]
        fn file_size_of_any_settings(slots in any::<i32>(), entries in any::<i32>()) {
            if let Ok(size) = index_file_size(slots, entries) {
                prop_assert!(slots >= 1 && entries >= 2);
                prop_assert_eq!(size, 40 + 4 * i64::from(slots) + 20 * i64::from(entries));
                prop_assert!(size <= i64::from(i32::MAX));
                prop_assert_eq!(
                    entry_word(slots, entries) * 4,
                    usize::try_from(size).unwrap()
                );
            }
        }
    }
}
