//! The read path through the public store API, on real files: `get_message` statuses, next offsets,
//! batch limits and tag filters (docs/architecture.md#reading-by-queue), offsets by time
//! (docs/architecture.md#queue-lookups-and-offsets-by-time), the Arrow columns of `read_batch`,
//! `query_message`, and damaged records refused on read.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::TempDir;
use rmqstore_core::read::{
    set_parallel_reads, BatchColumns, GetMessageResult, GetMessageStatus, ParallelReads, TagFilter,
    TimeBoundary, PARALLEL_READ_UNITS,
};
use rmqstore_core::{
    now_millis, AppendResult, Batch, Message, MessageStore, StoreConfig, StoreError,
};

use GetMessageStatus as S;

/// Commitlog segment size of [`small`] stores.
const SEG: i64 = 64 * 1024;
/// Consume queue units per segment of [`small`] stores.
const UNITS_PER_FILE: i64 = 50;

/// Small segments everywhere: 64 KiB commitlog, 50-unit consume queue, small index files.
fn small() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: SEG,
        mapped_file_size_consume_queue: 20 * UNITS_PER_FILE,
        max_hash_slot_num: 64,
        max_index_num: 50,
        ..StoreConfig::default()
    }
}

/// Java's `String.hashCode`.
fn java_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// A message with `tags` (none when `None` or empty, as the Python API stores it), KEYS
/// joined by spaces, and further properties.
fn message(
    topic: &str,
    queue_id: i32,
    body: &[u8],
    tags: Option<&str>,
    keys: &[&str],
    props: &[(&str, &str)],
) -> Message {
    let mut properties: Vec<(String, String)> = props
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    if let Some(t) = tags.filter(|t| !t.is_empty()) {
        properties.push(("TAGS".into(), t.into()));
    }
    if !keys.is_empty() {
        properties.push(("KEYS".into(), keys.join(" ")));
    }
    Message {
        topic: topic.into(),
        body: body.to_vec(),
        queue_id,
        born_timestamp: now_millis(),
        properties,
        ..Message::default()
    }
}

fn put(store: &MessageStore, m: &Message) -> AppendResult {
    let r = store.put_message(m).unwrap();
    assert!(r.is_ok(), "{:?}", r.status);
    r
}

fn drain(store: &MessageStore) {
    while store
        .dispatch_step(64 << 20, Duration::ZERO)
        .unwrap()
        .behind
        > 0
    {}
}

/// Puts `n` messages to queue 0 of `topic` with bodies `"<topic>-<i>"` and tags `tags(i)`,
/// then dispatches them.
fn fill<'a>(
    store: &MessageStore,
    topic: &str,
    n: usize,
    tags: impl Fn(usize) -> Option<&'a str>,
) -> Vec<AppendResult> {
    let out = (0..n)
        .map(|i| {
            let body = format!("{topic}-{i}");
            put(
                store,
                &message(topic, 0, body.as_bytes(), tags(i), &[], &[]),
            )
        })
        .collect();
    drain(store);
    out
}

fn get(store: &MessageStore, topic: &str, offset: i64, max: i32, sub: &str) -> GetMessageResult {
    store
        .get_message(topic, 0, offset, max, &TagFilter::parse(sub))
        .unwrap()
}

fn queue_offsets(r: &GetMessageResult) -> Vec<i64> {
    r.messages.iter().map(|m| m.queue_offset).collect()
}

/// The counters agree with the messages, which come in queue order with their own bodies.
fn check_result(r: &GetMessageResult, topic: &str) {
    let sizes: i64 = r.messages.iter().map(|m| i64::from(m.store_size)).sum();
    assert_eq!(r.buffer_total_size, sizes);
    let offsets = queue_offsets(r);
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
    for m in &r.messages {
        assert_eq!((&*m.topic(), m.queue_id), (topic, 0));
        assert_eq!(m.body(), format!("{topic}-{}", m.queue_offset).as_bytes());
    }
}

/// Queue offsets of every message returned while pulling queue 0 from 0 to the end.
fn pull_all(store: &MessageStore, topic: &str, sub: &str, max_msg_nums: i32) -> Vec<i64> {
    let mut got = Vec::new();
    let mut offset = 0;
    for _ in 0..1000 {
        let r = get(store, topic, offset, max_msg_nums, sub);
        check_result(&r, topic);
        if r.status == S::OffsetOverflowOne {
            return got;
        }
        assert!(
            matches!(r.status, S::Found | S::NoMatchedMessage),
            "{:?}",
            r.status
        );
        assert!(r.next_begin_offset > offset);
        got.extend(queue_offsets(&r));
        offset = r.next_begin_offset;
    }
    panic!("the pull did not reach the end");
}

fn range(a: i64, b: i64) -> Vec<i64> {
    (a..b).collect()
}

// -- statuses and next offsets ------------------------------------------------------------------

#[test]
fn statuses_are_rocketmqs_in_its_order() {
    let names: Vec<&str> = GetMessageStatus::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "FOUND",
            "NO_MATCHED_MESSAGE",
            "MESSAGE_WAS_REMOVING",
            "OFFSET_FOUND_NULL",
            "OFFSET_OVERFLOW_BADLY",
            "OFFSET_OVERFLOW_ONE",
            "OFFSET_TOO_SMALL",
            "NO_MATCHED_LOGIC_QUEUE",
            "NO_MESSAGE_IN_QUEUE",
            "OFFSET_RESET",
        ]
    );
    for (i, s) in GetMessageStatus::ALL.iter().enumerate() {
        assert_eq!(*s as usize, i);
    }
}

#[test]
fn empty_and_unknown_queues_have_no_message() {
    let d = TempDir::new("read", "empty");
    let store = MessageStore::open(d.path(), small()).unwrap();
    fill(&store, "Known", 3, |_| None);
    for (topic, q, offset) in [("Known", 1, 0), ("Unknown", 0, 0), ("Unknown", 0, 5)] {
        let r = store
            .get_message(topic, q, offset, 32, &TagFilter::all())
            .unwrap();
        assert_eq!(r.status, S::NoMessageInQueue);
        assert_eq!(r.next_begin_offset, 0);
        assert_eq!((r.min_offset, r.max_offset), (0, 0));
        assert!(r.messages.is_empty());
        assert_eq!(r.buffer_total_size, 0);
    }
    store.close().unwrap();
}

#[test]
fn offsets_past_the_end_overflow_and_offsets_inside_are_found() {
    let d = TempDir::new("read", "overflow");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let rs = fill(&store, "Q", 10, |_| None);
    let r = get(&store, "Q", 10, 32, "*");
    assert_eq!((r.status, r.next_begin_offset), (S::OffsetOverflowOne, 10));
    assert_eq!((r.min_offset, r.max_offset), (0, 10));
    assert!(r.messages.is_empty());
    for offset in [11, 12, 1_000_000_000_000, i64::MAX] {
        let r = get(&store, "Q", offset, 32, "*");
        assert_eq!(
            (r.status, r.next_begin_offset),
            (S::OffsetOverflowBadly, 10)
        );
        assert!(r.messages.is_empty());
    }
    for (offset, n) in [(0, 32), (0, 4), (3, 4), (9, 32), (6, 1)] {
        let r = get(&store, "Q", offset, n, "*");
        assert_eq!(r.status, S::Found);
        check_result(&r, "Q");
        let want = range(offset, (offset + i64::from(n)).min(10));
        assert_eq!(queue_offsets(&r), want);
        assert_eq!(r.next_begin_offset, want.last().unwrap() + 1);
        assert_eq!((r.min_offset, r.max_offset), (0, 10));
        for m in &r.messages {
            let put = &rs[m.queue_offset as usize];
            assert_eq!(m.commit_log_offset, put.wrote_offset);
            assert_eq!(m.store_timestamp, put.store_timestamp);
        }
    }
    // A count below one asks for one.
    let r = get(&store, "Q", 2, 0, "*");
    assert_eq!((queue_offsets(&r), r.next_begin_offset), (vec![2], 3));
    store.close().unwrap();
}

#[test]
fn a_negative_offset_is_too_small() {
    let d = TempDir::new("read", "negative");
    let store = MessageStore::open(d.path(), small()).unwrap();
    fill(&store, "Q", 3, |_| None);
    for offset in [-1, i64::MIN] {
        let r = get(&store, "Q", offset, 32, "*");
        assert_eq!((r.status, r.next_begin_offset), (S::OffsetTooSmall, 0));
        assert!(r.messages.is_empty());
    }
    store.close().unwrap();
}

/// A queue minimum above 0, made by deleting the oldest commitlog segment while the store is
/// closed (what expiry does): offsets below it are too small, and by-time lookups before it
/// answer it.
#[test]
fn offsets_below_a_minimum_above_zero_are_too_small() {
    let d = TempDir::new("read", "too-small");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let rs: Vec<AppendResult> = (0..300u32)
        .map(|i| {
            put(
                &store,
                &message("Q", 0, &[(i % 250) as u8; 400], None, &[], &[]),
            )
        })
        .collect();
    drain(&store);
    store.close().unwrap();
    std::fs::remove_file(d.path().join("commitlog").join(format!("{:020}", 0))).unwrap();
    let store = MessageStore::open(d.path(), small()).unwrap();
    drain(&store);
    let lo = store.min_offset_in_queue("Q", 0).unwrap();
    assert!(0 < lo && lo < 300, "{lo}");
    assert_eq!(
        rs[lo as usize].wrote_offset,
        store.min_phy_offset().unwrap()
    );
    for offset in [0, lo - 1, -5] {
        let r = get(&store, "Q", offset, 32, "*");
        assert_eq!((r.status, r.next_begin_offset), (S::OffsetTooSmall, lo));
        assert_eq!((r.min_offset, r.max_offset), (lo, 300));
        assert!(r.messages.is_empty());
    }
    let r = get(&store, "Q", lo, 1, "*");
    assert_eq!(r.status, S::Found);
    assert_eq!((queue_offsets(&r), r.next_begin_offset), (vec![lo], lo + 1));
    for boundary in [TimeBoundary::Lower, TimeBoundary::Upper] {
        assert_eq!(
            store.offset_in_queue_by_time("Q", 0, 0, boundary).unwrap(),
            lo
        );
    }
    let ts = rs[lo as usize].store_timestamp;
    assert_eq!(
        store
            .offset_in_queue_by_time("Q", 0, ts, TimeBoundary::Lower)
            .unwrap(),
        lo
    );
    store.close().unwrap();
}

// -- filtered scans -----------------------------------------------------------------------------

/// All filtered: NO_MATCHED_MESSAGE, the next offset past the scanned units, which stop at the
/// end of the consume queue segment (one segment per call).
#[test]
fn filtered_units_are_scanned_past_up_to_the_segment_end() {
    let d = TempDir::new("read", "no-match");
    let store = MessageStore::open(d.path(), small()).unwrap();
    fill(&store, "F", 120, |_| Some("TagA"));
    for (offset, next) in [
        (0, 50),
        (13, 50),
        (50, 100),
        (99, 100),
        (100, 120),
        (119, 120),
    ] {
        let r = get(&store, "F", offset, 32, "TagB");
        assert_eq!(r.status, S::NoMatchedMessage, "{offset}");
        assert_eq!(r.next_begin_offset, next, "{offset}");
        assert!(r.messages.is_empty());
        assert_eq!(r.buffer_total_size, 0);
    }
    store.close().unwrap();
}

/// Without a segment end in the way, a filtered scan covers max(maxFilterMessageSize,
/// maxMsgNums * 20) bytes of units: 800 units by default.
#[test]
fn a_filtered_scan_is_bounded_by_max_filter_message_size() {
    let d = TempDir::new("read", "filter-bound");
    let cfg = StoreConfig {
        mapped_file_size_consume_queue: 20 * 5000,
        ..small()
    };
    let store = MessageStore::open(d.path(), cfg).unwrap();
    fill(&store, "F", 1000, |_| Some("TagA"));
    let r = get(&store, "F", 0, 32, "TagB");
    assert_eq!((r.status, r.next_begin_offset), (S::NoMatchedMessage, 800));
    let r = get(&store, "F", 100, 900, "TagB"); // 900 * 20 bytes > 16000
    assert_eq!((r.status, r.next_begin_offset), (S::NoMatchedMessage, 1000));
    store.close().unwrap();
}

#[test]
fn found_after_filtered_units() {
    let d = TempDir::new("read", "found-after");
    let store = MessageStore::open(d.path(), small()).unwrap();
    fill(&store, "F", 20, |i| {
        Some(if i == 5 || i == 9 { "TagB" } else { "TagA" })
    });
    let r = get(&store, "F", 0, 1, "TagB");
    assert_eq!(r.status, S::Found);
    // The batch is full: the last one returned + 1.
    assert_eq!((queue_offsets(&r), r.next_begin_offset), (vec![5], 6));
    let r = get(&store, "F", 6, 32, "TagB");
    assert_eq!(r.status, S::Found);
    // The filtered units after it were scanned too.
    assert_eq!((queue_offsets(&r), r.next_begin_offset), (vec![9], 20));
    store.close().unwrap();
}

// -- batch limits -------------------------------------------------------------------------------

/// `DefaultMessageStoreTest.testPullSize`: 32 small messages; maxMsgNums 32, 20 and 10.
#[test]
fn pull_size() {
    let d = TempDir::new("read", "pull-size");
    let store = MessageStore::open(d.path(), small()).unwrap();
    fill(&store, "PullSize", 32, |_| None);
    for n in [32, 20, 10] {
        let r = get(&store, "PullSize", 0, n, "*");
        assert_eq!(r.status, S::Found);
        assert_eq!(queue_offsets(&r), range(0, i64::from(n)));
        assert_eq!(r.next_begin_offset, i64::from(n));
        check_result(&r, "PullSize");
    }
    store.close().unwrap();
}

#[test]
fn the_in_memory_count_limit_caps_a_batch() {
    let d = TempDir::new("read", "count-limit");
    let cfg = StoreConfig {
        max_transfer_count_on_message_in_memory: 5,
        ..small()
    };
    let store = MessageStore::open(d.path(), cfg).unwrap();
    fill(&store, "C", 30, |_| None);
    let r = get(&store, "C", 0, 32, "*");
    assert_eq!((queue_offsets(&r), r.next_begin_offset), (range(0, 5), 5));
    store.close().unwrap();
}

#[test]
fn the_in_memory_byte_limit_caps_a_batch_but_never_below_one() {
    let d = TempDir::new("read", "byte-limit");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let rs = fill(&store, "B", 40, |_| None);
    let size = rs[10].wrote_bytes;
    assert!(rs[10..].iter().all(|r| r.wrote_bytes == size)); // bodies "B-10" .. "B-39"
    store.close().unwrap();
    for (limit, per_pull) in [(3 * size + size / 2, 3), (3 * size, 3), (size, 1), (10, 1)] {
        let cfg = StoreConfig {
            max_transfer_bytes_on_message_in_memory: limit,
            ..small()
        };
        let store = MessageStore::open(d.path(), cfg).unwrap();
        let r = get(&store, "B", 10, 32, "*");
        assert_eq!(r.status, S::Found);
        assert_eq!(queue_offsets(&r), range(10, 10 + per_pull), "{limit}");
        assert_eq!(r.buffer_total_size, per_pull * size);
        assert_eq!(r.next_begin_offset, 10 + per_pull);
        if per_pull == 1 {
            assert_eq!(pull_all(&store, "B", "*", 32), range(0, 40));
        }
        store.close().unwrap();
    }
}

#[test]
fn a_pull_never_crosses_a_consume_queue_segment() {
    let d = TempDir::new("read", "segment");
    let store = MessageStore::open(d.path(), small()).unwrap();
    fill(&store, "Seg", 120, |_| None);
    let r = get(&store, "Seg", 40, 32, "*");
    assert_eq!(
        (queue_offsets(&r), r.next_begin_offset),
        (range(40, 50), 50)
    );
    let r = get(&store, "Seg", 50, 32, "*");
    assert_eq!(
        (queue_offsets(&r), r.next_begin_offset),
        (range(50, 82), 82)
    );
    let r = get(&store, "Seg", 99, 32, "*");
    assert_eq!((queue_offsets(&r), r.next_begin_offset), (vec![99], 100));
    assert_eq!(pull_all(&store, "Seg", "*", 32), range(0, 120));
    store.close().unwrap();
}

// -- tag filters --------------------------------------------------------------------------------

const MIXED: [Option<&str>; 10] = [
    Some("TagA"),
    Some("TagB"),
    None,
    Some("TagC"),
    Some("TagA"),
    Some(""),
    Some("TagB"),
    Some("TagA || TagB"),
    Some("tagA"),
    Some("TagA "),
];

/// `*` and empty take everything, messages without tags included; a tag list takes exactly
/// the messages whose TAGS equals one of its (trimmed, deduplicated) tags.
#[test]
fn tag_subscriptions() {
    let d = TempDir::new("read", "subscriptions");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let n = 3 * MIXED.len();
    fill(&store, "Tags", n, |i| MIXED[i % MIXED.len()]);
    let cases: [(&str, Option<&[&str]>); 11] = [
        ("*", None),
        ("", None),
        ("  *  ", None),
        ("TagA || *", None),
        ("TagA", Some(&["TagA"])),
        ("TagA || TagB", Some(&["TagA", "TagB"])),
        ("  TagA||TagB  ", Some(&["TagA", "TagB"])),
        ("TagB ||TagA|| TagA", Some(&["TagA", "TagB"])),
        ("TagC", Some(&["TagC"])),
        ("TagZ", Some(&[])),
        ("|| TagC ||", Some(&["TagC"])),
    ];
    for (sub, matching) in cases {
        let want: Vec<i64> = (0..n)
            .filter(|&i| match matching {
                None => true,
                Some(tags) => MIXED[i % MIXED.len()].is_some_and(|t| tags.contains(&t)),
            })
            .map(|i| i as i64)
            .collect();
        assert_eq!(pull_all(&store, "Tags", sub, 32), want, "{sub:?}");
        assert_eq!(pull_all(&store, "Tags", sub, 2), want, "{sub:?}");
    }
    store.close().unwrap();
}

/// "Aa" and "BB" have the same Java hashCode, so their consume queue units carry the same tags
/// code; the real tag string decides.
#[test]
fn a_tag_hash_collision_never_returns_the_other_tag() {
    assert_eq!((java_hash("Aa"), java_hash("BB")), (2112, 2112));
    let d = TempDir::new("read", "collision");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let tags: Vec<Option<&str>> = [
        Some("Aa"),
        Some("BB"),
        Some("BB"),
        Some("Aa"),
        Some("BB"),
        None,
        Some("Aa"),
    ]
    .repeat(9);
    fill(&store, "Coll", tags.len(), |i| tags[i]);
    for (sub, take) in [
        ("Aa", &["Aa"][..]),
        ("BB", &["BB"][..]),
        ("Aa || BB", &["Aa", "BB"][..]),
    ] {
        let want: Vec<i64> = (0..tags.len())
            .filter(|&i| tags[i].is_some_and(|t| take.contains(&t)))
            .map(|i| i as i64)
            .collect();
        assert_eq!(pull_all(&store, "Coll", sub, 32), want, "{sub}");
        assert_eq!(pull_all(&store, "Coll", sub, 1), want, "{sub}");
    }
    // Colliding units are scanned past, never returned.
    let r = get(&store, "Coll", 1, 1, "Aa");
    assert_eq!((queue_offsets(&r), r.next_begin_offset), (vec![3], 4));
    let r = get(&store, "Coll", 4, 32, "Aa");
    assert!(!r.messages.is_empty());
    assert!(r.messages.iter().all(|m| m.tags() == Some("Aa")));
    // Only colliding units in range: nothing matched, but the scan moved past them.
    fill(&store, "OnlyBB", 5, |_| Some("BB"));
    let r = get(&store, "OnlyBB", 0, 32, "Aa");
    assert_eq!((r.status, r.next_begin_offset), (S::NoMatchedMessage, 5));
    assert!(r.messages.is_empty());
    store.close().unwrap();
}

/// Subscriptions trim each tag as Java's `String.trim()` does (code points up to U+0020 only):
/// a tag ending in a no-break, line-separator or ideographic space is subscribed to as stored.
#[test]
fn tags_are_trimmed_as_java_trims_them() {
    let d = TempDir::new("read", "trim");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let tags = ["Paid\u{a0}", "Paid\u{2028}", "\u{3000}Paid", "Paid"];
    for t in tags {
        put(&store, &message("Uni", 0, t.as_bytes(), Some(t), &[], &[]));
    }
    drain(&store);
    for t in tags {
        let r = get(&store, "Uni", 0, 32, &format!(" {t}\t|| Other "));
        assert_eq!(r.status, S::Found, "{t:?}");
        let got: Vec<Option<&str>> = r.messages.iter().map(|m| m.tags()).collect();
        assert_eq!(got, [Some(t)], "{t:?}");
    }
    let r = get(&store, "Uni", 0, 32, "\u{1}Paid\u{1f}");
    let got: Vec<Option<&str>> = r.messages.iter().map(|m| m.tags()).collect();
    assert_eq!(got, [Some("Paid")]);
    // Whitespace beyond U+0020 alone is a tag, not "everything".
    let r = get(&store, "Uni", 0, 32, "\u{a0}");
    assert_eq!((r.status, r.next_begin_offset), (S::NoMatchedMessage, 4));
    store.close().unwrap();
}

// -- offsets by time ----------------------------------------------------------------------------

/// LOWER and UPPER for exact, equal (a batch), between, before-first and after-last times, over
/// three consume queue segments (a batch straddles the first segment boundary).
#[test]
fn offsets_by_time_with_both_boundaries() {
    let d = TempDir::new("read", "by-time");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let mut ts: Vec<i64> = Vec::new();
    let single = |ts: &mut Vec<i64>, i: usize| {
        std::thread::sleep(Duration::from_millis(3));
        let body = format!("s{i}");
        ts.push(put(&store, &message("Time", 0, body.as_bytes(), None, &[], &[])).store_timestamp);
    };
    let batch = |ts: &mut Vec<i64>, n: usize| {
        std::thread::sleep(Duration::from_millis(3));
        let bodies: Vec<&[u8]> = vec![b"b"; n];
        let r = store
            .put_messages(&Batch {
                topic: "Time",
                queue_id: 0,
                bodies: &bodies,
                properties: &[],
                flag: 0,
                born_timestamp: now_millis(),
                born_host: None,
            })
            .unwrap();
        assert!(r.is_ok());
        ts.extend(std::iter::repeat_n(r.store_timestamp, n));
    };
    for i in 0..48 {
        single(&mut ts, i);
    }
    batch(&mut ts, 4); // queue offsets 48..51 share one timestamp, across the segment end at 50
    for i in 52..70 {
        single(&mut ts, i);
    }
    batch(&mut ts, 3); // 70..72
    for i in 73..120 {
        single(&mut ts, i);
    }
    drain(&store);
    let n = ts.len() as i64;
    assert_eq!(n, 120);
    assert_eq!(store.max_offset_in_queue("Time", 0).unwrap(), 120);
    // Preconditions: times never go back, and differ outside the batches.
    for i in 0..ts.len() - 1 {
        if (48..51).contains(&i) || (70..72).contains(&i) {
            assert_eq!(ts[i + 1], ts[i]);
        } else {
            assert!(ts[i + 1] - ts[i] >= 2, "{i}");
        }
    }
    let lower = |t: i64| {
        store
            .offset_in_queue_by_time("Time", 0, t, TimeBoundary::Lower)
            .unwrap()
    };
    let upper = |t: i64| {
        store
            .offset_in_queue_by_time("Time", 0, t, TimeBoundary::Upper)
            .unwrap()
    };
    for i in [0usize, 1, 25, 47, 52, 99, 100, 119] {
        assert_eq!((lower(ts[i]), upper(ts[i])), (i as i64, i as i64), "{i}");
    }
    assert_eq!((lower(ts[48]), upper(ts[48])), (48, 51));
    assert_eq!((lower(ts[70]), upper(ts[70])), (70, 72));
    for i in [0usize, 20, 47, 51, 60, 72, 99, 118] {
        // Strictly between i and i + 1.
        assert_eq!(lower(ts[i] + 1), i as i64 + 1, "{i}");
        assert_eq!(upper(ts[i] + 1), i as i64, "{i}");
    }
    // Before the first message: the first offset both ways; after the last: the max offset
    // (LOWER) or the last one (UPPER).
    assert_eq!((lower(ts[0] - 1), upper(ts[0] - 1)), (0, 0));
    assert_eq!((lower(0), upper(i64::MIN)), (0, 0));
    assert_eq!((lower(ts[119] + 1), upper(ts[119] + 1)), (n, n - 1));
    assert_eq!((lower(i64::MAX), upper(i64::MAX)), (n, n - 1));
    assert_eq!(store.earliest_message_time("Time", 0).unwrap(), ts[0]);
    // Unknown and empty queues: 0.
    for (topic, q) in [("Time", 1), ("Nobody", 0)] {
        for boundary in [TimeBoundary::Lower, TimeBoundary::Upper] {
            let got = store.offset_in_queue_by_time(topic, q, ts[5], boundary);
            assert_eq!(got.unwrap(), 0);
        }
    }
    store.close().unwrap();
}

// -- read_batch ---------------------------------------------------------------------------------

/// One row of a bulk read, or the same fields of a message.
#[derive(Debug, PartialEq)]
struct Row {
    topic: String,
    queue_id: i32,
    queue_offset: i64,
    commit_log_offset: i64,
    store_timestamp: i64,
    born_timestamp: i64,
    tags: Option<String>,
    keys: Vec<String>,
    /// Sorted by name.
    properties: Vec<(String, String)>,
    body: Vec<u8>,
}

fn text(data: &[u8], offsets: &[i32], i: usize) -> String {
    String::from_utf8(data[offsets[i] as usize..offsets[i + 1] as usize].to_vec()).unwrap()
}

/// Decodes the Arrow columns into rows, checking that every offsets column is well formed.
fn rows(c: &BatchColumns) -> Vec<Row> {
    let n = c.rows;
    for (name, offsets, data_len) in [
        ("topic", &c.topic_offsets, c.topic_data.len()),
        ("tags", &c.tags_offsets, c.tags_data.len()),
        ("keys", &c.keys_offsets, c.keys_data.len()),
        (
            "property names",
            &c.props_key_offsets,
            c.props_key_data.len(),
        ),
        (
            "property values",
            &c.props_value_offsets,
            c.props_value_data.len(),
        ),
        ("body", &c.body_offsets, c.body_data.len()),
    ] {
        assert_eq!(offsets[0], 0, "{name}");
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "{name}");
        assert_eq!(*offsets.last().unwrap() as usize, data_len, "{name}");
    }
    for v in [
        &c.topic_offsets,
        &c.tags_offsets,
        &c.keys_list_offsets,
        &c.props_map_offsets,
        &c.body_offsets,
    ] {
        assert_eq!(v.len(), n + 1);
    }
    assert_eq!(
        *c.keys_list_offsets.last().unwrap() as usize + 1,
        c.keys_offsets.len()
    );
    assert_eq!(c.props_key_offsets.len(), c.props_value_offsets.len());
    assert_eq!(c.tags_valid.len(), n.div_ceil(8));
    for v in [
        &c.queue_offset,
        &c.commit_log_offset,
        &c.store_timestamp,
        &c.born_timestamp,
    ] {
        assert_eq!(v.len(), n);
    }
    assert_eq!(c.queue_id.len(), n);
    (0..n)
        .map(|i| {
            let valid = c.tags_valid[i / 8] & (1 << (i % 8)) != 0;
            let tags = valid.then(|| text(&c.tags_data, &c.tags_offsets, i));
            if !valid {
                assert_eq!(c.tags_offsets[i], c.tags_offsets[i + 1]);
            }
            let keys = (c.keys_list_offsets[i] as usize..c.keys_list_offsets[i + 1] as usize)
                .map(|k| text(&c.keys_data, &c.keys_offsets, k))
                .collect();
            let mut properties: Vec<(String, String)> = (c.props_map_offsets[i] as usize
                ..c.props_map_offsets[i + 1] as usize)
                .map(|p| {
                    (
                        text(&c.props_key_data, &c.props_key_offsets, p),
                        text(&c.props_value_data, &c.props_value_offsets, p),
                    )
                })
                .collect();
            properties.sort();
            let body = c.body_offsets[i] as usize..c.body_offsets[i + 1] as usize;
            Row {
                topic: text(&c.topic_data, &c.topic_offsets, i),
                queue_id: c.queue_id[i],
                queue_offset: c.queue_offset[i],
                commit_log_offset: c.commit_log_offset[i],
                store_timestamp: c.store_timestamp[i],
                born_timestamp: c.born_timestamp[i],
                tags,
                keys,
                properties,
                body: c.body_data[body].to_vec(),
            }
        })
        .collect()
}

/// `count` rows from `start` as `get_message` returns them.
fn expected(store: &MessageStore, topic: &str, start: i64, count: usize) -> Vec<Row> {
    let mut out = Vec::new();
    let mut offset = start;
    while out.len() < count {
        let r = store
            .get_message(topic, 0, offset, 32, &TagFilter::all())
            .unwrap();
        assert_eq!(r.status, S::Found);
        for m in &r.messages {
            let mut properties = m.properties();
            properties.sort();
            out.push(Row {
                topic: m.topic().into_owned(),
                queue_id: m.queue_id,
                queue_offset: m.queue_offset,
                commit_log_offset: m.commit_log_offset,
                store_timestamp: m.store_timestamp,
                born_timestamp: m.born_timestamp,
                tags: m.tags().map(str::to_owned),
                keys: m.keys().into_iter().map(str::to_owned).collect(),
                properties,
                body: m.body().to_vec(),
            });
        }
        offset = r.next_begin_offset;
    }
    out.truncate(count);
    out
}

/// Rows of every shape the columns take: tags present and absent, short and long (over 16
/// bytes) strings, ASCII and not, no keys and several, extra properties or none; in runs of
/// equal properties (one `put_messages` batch each) and single messages between them.
fn fill_varied(store: &MessageStore, topic: &str, n: usize) {
    let mut i = 0;
    while i < n {
        let tags = match i % 11 {
            0 => Some("標籤-longer-than-sixteen-bytes".to_owned()),
            _ if i % 5 == 0 => None,
            _ => Some(format!("T{}", i % 3)),
        };
        let keys: Vec<String> = match i % 13 {
            0 => vec![
                format!("a-key-longer-than-sixteen-bytes-{i}"),
                "ключ".into(),
            ],
            _ if i % 2 == 1 => vec![format!("k{i}"), "shared".into()],
            _ => Vec::new(),
        };
        let mut properties: Vec<(String, String)> = Vec::new();
        if i % 7 == 0 {
            properties.push(("idx".into(), i.to_string()));
            properties.push(("note".into(), "zürich 東京 🙂".repeat(1 + i % 3)));
        }
        if let Some(t) = tags {
            properties.push(("TAGS".into(), t));
        }
        if !keys.is_empty() {
            properties.push(("KEYS".into(), keys.join(" ")));
        }
        let run = (1 + i % 6).min(n - i);
        let bodies: Vec<Vec<u8>> = (i..i + run)
            .map(|j| format!("b{j}").repeat(1 + j % 4).into_bytes())
            .collect();
        common::put_batch(
            store,
            topic,
            &bodies,
            &properties,
            1_700_000_000_000 + i as i64,
        );
        i += run;
    }
    drain(store);
}

#[test]
fn read_batch_columns_equal_get_message() {
    let d = TempDir::new("read", "columns");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let n = 700;
    fill_varied(&store, "Cols", n);
    let all = expected(&store, "Cols", 0, n);
    for (start, count) in [(0, n), (5, 123), (49, 2), (n as i64 - 3, 3)] {
        let c = store
            .read_batch("Cols", 0, start, count, true, None)
            .unwrap();
        assert_eq!(c.rows, count);
        assert_eq!(c.next_offset, start + count as i64);
        let start = start as usize;
        assert_eq!(rows(&c), all[start..start + count], "{start}");
    }
    // Without properties the properties' vectors are empty and the rest is unchanged.
    let lean = store.read_batch("Cols", 0, 0, n, false, None).unwrap();
    let full = store.read_batch("Cols", 0, 0, n, true, None).unwrap();
    for v in [
        &lean.props_map_offsets,
        &lean.props_key_offsets,
        &lean.props_value_offsets,
    ] {
        assert!(v.is_empty());
    }
    assert!(lean.props_key_data.is_empty() && lean.props_value_data.is_empty());
    let mut lean_rows = Vec::new();
    for (name, v) in lean.into_named() {
        if !name.starts_with("props_") {
            lean_rows.push((name, v.bytes().to_vec()));
        }
    }
    let full_rows: Vec<_> = full
        .into_named()
        .into_iter()
        .filter(|(name, _)| !name.starts_with("props_"))
        .map(|(name, v)| (name, v.bytes().to_vec()))
        .collect();
    assert_eq!(lean_rows, full_rows);
    store.close().unwrap();
}

/// From [`PARALLEL_READ_UNITS`] units a read is built by two threads and joined: halves split
/// at a row that is not a multiple of 8 (the tags validity bits of the second half are
/// shifted), across consume queue segments, give the rows one thread gives.
#[test]
fn a_large_read_batch_on_two_threads_equals_get_message() {
    // Two threads whatever the machine's load (the default takes them only with a CPU idle).
    set_parallel_reads(ParallelReads::Always);
    let d = TempDir::new("read", "columns-large");
    let cfg = StoreConfig {
        mapped_file_size_commit_log: 8 << 20,
        mapped_file_size_consume_queue: 20 * 7001,
        ..small()
    };
    let store = MessageStore::open(d.path(), cfg).unwrap();
    let count = 2 * PARALLEL_READ_UNITS + 13;
    let n = count + 20;
    assert_ne!((count / 2) % 8, 0);
    fill_varied(&store, "Big", n);
    let start = 5;
    let c = store
        .read_batch("Big", 0, start, count, true, None)
        .unwrap();
    assert_eq!(c.rows, count);
    assert_eq!(c.next_offset, start + count as i64);
    let got = rows(&c);
    assert_eq!(got, expected(&store, "Big", start, count));
    // One thread gives the same rows, and the same bytes in every column vector.
    set_parallel_reads(ParallelReads::Never);
    let one = store
        .read_batch("Big", 0, start, count, true, None)
        .unwrap();
    set_parallel_reads(ParallelReads::Always);
    assert_eq!(rows(&one), got);
    assert_eq!((one.rows, one.next_offset), (c.rows, c.next_offset));
    for ((name, a), (_, b)) in one.into_named().iter().zip(c.clone().into_named().iter()) {
        assert_eq!(a.bytes(), b.bytes(), "{name}");
    }
    // Halves that meet at a multiple of 8 rows: the second half's tags validity bytes are
    // appended as they are.
    let even = 2 * PARALLEL_READ_UNITS;
    assert_eq!((even / 2) % 8, 0);
    let e = store.read_batch("Big", 0, start, even, true, None).unwrap();
    assert_eq!(rows(&e), got[..even]);
    // Small reads take the one-thread path and give the same rows.
    for at in [100, PARALLEL_READ_UNITS + 2, count - 50] {
        let small = store
            .read_batch("Big", 0, start + at as i64, 50, true, None)
            .unwrap();
        assert_eq!(rows(&small), got[at..at + 50], "{at}");
    }
    store.close().unwrap();
}

#[test]
fn read_batch_at_the_ends_of_a_queue_and_of_the_integer_ranges() {
    let d = TempDir::new("read", "columns-ends");
    let store = MessageStore::open(d.path(), small()).unwrap();
    fill(&store, "Ends", 3, |_| None);
    let read = |topic: &str, offset: i64, count: usize| {
        let c = store
            .read_batch(topic, 0, offset, count, true, None)
            .unwrap();
        (c.rows, c.next_offset)
    };
    for count in [1 << 31, (1 << 32) + 1, i64::MAX as usize, usize::MAX] {
        assert_eq!(read("Ends", 0, count), (3, 3));
        assert_eq!(read("Ends", 2, count), (1, 3));
        assert_eq!(read("Ends", i64::MIN, count), (3, 3));
        assert_eq!(read("Ends", i64::MAX, count).0, 0);
        // An unknown queue: nothing, and the next read starts where this one did.
        assert_eq!(read("Nope", i64::MAX, count), (0, i64::MAX));
        assert_eq!(read("Nope", -4, count), (0, 0));
    }
    assert_eq!(read("Ends", 0, 0), (0, 0));
    assert_eq!(read("Ends", 3, 10), (0, 3));
    let c = store.read_batch("Ends", 0, 1, 10, true, None).unwrap();
    let bodies: Vec<Vec<u8>> = rows(&c).into_iter().map(|r| r.body).collect();
    assert_eq!(bodies, [b"Ends-1".to_vec(), b"Ends-2".to_vec()]);
    store.close().unwrap();
}

// -- damaged records ----------------------------------------------------------------------------

/// Where a record's body starts (IPv4 born and store hosts).
const BODY_AT: i64 = 88;

/// Flips one byte at `at` bytes into the body of the record at commitlog offset `offset`;
/// returns the segment file.
fn flip_body_byte(root: &Path, segment: i64, offset: i64, at: i64) -> PathBuf {
    let path = root
        .join("commitlog")
        .join(format!("{:020}", offset - offset % segment));
    let mut data = std::fs::read(&path).unwrap();
    data[(offset % segment + BODY_AT + at) as usize] ^= 0x5A;
    std::fs::write(&path, data).unwrap();
    path
}

fn body_of(i: usize) -> Vec<u8> {
    (0..1900).map(|j| ((i * 7 + j) % 251) as u8).collect()
}

/// The error names the segment and the record, and says what is wrong.
fn assert_corrupt(e: StoreError, path: &Path, offset: i64, says: &str) -> String {
    let text = e.to_string();
    match e {
        StoreError::CorruptRecord {
            path: p, offset: o, ..
        } => assert_eq!((p.as_path(), o), (path, offset)),
        other => panic!("not a damaged record: {other:?}"),
    }
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains(&offset.to_string()), "{text}");
    assert!(text.contains(says), "{text}");
    text
}

/// A flipped body byte fails every read that returns the record, with the CRC check on; the
/// records around it read as before; with the check off the damaged body is served as stored.
#[test]
fn a_body_crc_mismatch_is_refused_on_read() {
    let d = TempDir::new("read", "crc");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let rs: Vec<AppendResult> = (0..100)
        .map(|i| {
            let key = format!("k{i}");
            put(
                &store,
                &message("Crc", 0, &body_of(i), Some("t"), &[&key], &[]),
            )
        })
        .collect();
    drain(&store);
    store.close().unwrap();
    let target = &rs[3];
    let path = flip_body_byte(d.path(), SEG, target.wrote_offset, 100);
    let store = MessageStore::open(d.path(), small()).unwrap();
    // After a clean close recovery scans only the last segment: the flip is not seen there.
    assert_eq!(
        store.max_phy_offset().unwrap(),
        rs[99].wrote_offset + rs[99].wrote_bytes
    );
    let e = store
        .look_message_by_offset(target.wrote_offset)
        .unwrap_err();
    assert_corrupt(e, &path, target.wrote_offset, "CRC");
    for (start, n) in [(0, 32), (3, 1)] {
        let e = store
            .get_message("Crc", 0, start, n, &TagFilter::all())
            .unwrap_err();
        assert_corrupt(e, &path, target.wrote_offset, "CRC");
    }
    let e = store.read_batch("Crc", 0, 0, 1000, true, None).unwrap_err();
    let text = assert_corrupt(e, &path, target.wrote_offset, "CRC");
    assert!(text.contains("queue Crc/0 offset 3"), "{text}");
    let e = store
        .query_message("Crc", "k3", 32, 0, i64::MAX)
        .unwrap_err();
    assert_corrupt(e, &path, target.wrote_offset, "CRC");
    // Everything else reads as before.
    let after = get(&store, "Crc", 4, 32, "*");
    assert_eq!(after.status, S::Found);
    for m in &after.messages {
        assert_eq!(m.body(), body_of(m.queue_offset as usize));
    }
    let batch = store.read_batch("Crc", 0, 4, 1000, true, None).unwrap();
    assert_eq!(batch.rows, 96);
    assert_eq!(
        store.read_batch("Crc", 0, 0, 3, true, None).unwrap().rows,
        3
    );
    let found = store.query_message("Crc", "k4", 32, 0, i64::MAX).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].body(), body_of(4));
    store.close().unwrap();
    // The check can be turned off: the damaged body is then served as stored.
    let cfg = StoreConfig {
        check_crc_on_read: false,
        ..small()
    };
    let store = MessageStore::open(d.path(), cfg).unwrap();
    let body = store
        .look_message_by_offset(target.wrote_offset)
        .unwrap()
        .unwrap()
        .body()
        .to_vec();
    assert_ne!(body, body_of(3));
    assert_eq!(body.len(), 1900);
    assert_eq!(get(&store, "Crc", 3, 1, "*").messages[0].body(), body);
    let c = store.read_batch("Crc", 0, 3, 1, true, None).unwrap();
    assert_eq!(rows(&c)[0].body, body);
    let found = store.query_message("Crc", "k3", 32, 0, i64::MAX).unwrap();
    assert_eq!(found[0].body(), body);
    store.close().unwrap();
}

/// A damaged record in either half of a read built on two threads fails the read (the other
/// half is given back); reads that stop before it or start after it succeed.
#[test]
fn a_large_read_batch_fails_on_a_damaged_record_in_either_half() {
    set_parallel_reads(ParallelReads::Always);
    let segment = 512 * 1024;
    let cfg = StoreConfig {
        mapped_file_size_commit_log: segment,
        ..StoreConfig::default()
    };
    let total = 20_000;
    for (name, damaged) in [("first", 3_000usize), ("second", 15_000)] {
        let d = TempDir::new("read", &format!("crc-{name}-half"));
        let store = MessageStore::open(d.path(), cfg.clone()).unwrap();
        let mut offsets = Vec::new();
        for chunk in 0..10 {
            let bodies: Vec<Vec<u8>> = (0..2_000)
                .map(|i| format!("{:06}", chunk * 2_000 + i).into_bytes())
                .collect();
            let bodies: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
            let r = store
                .put_messages(&Batch {
                    topic: "Big",
                    queue_id: 0,
                    bodies: &bodies,
                    properties: &[],
                    flag: 0,
                    born_timestamp: now_millis(),
                    born_host: None,
                })
                .unwrap();
            assert!(r.is_ok());
            let mut at = r.wrote_offset;
            for size in &r.record_sizes {
                offsets.push(at);
                at += i64::from(*size);
            }
        }
        drain(&store);
        store.close().unwrap();
        assert!(total >= PARALLEL_READ_UNITS && offsets.len() == total);
        let offset = offsets[damaged];
        let path = flip_body_byte(d.path(), segment, offset, 2);
        let store = MessageStore::open(d.path(), cfg.clone()).unwrap();
        for _ in 0..3 {
            let e = store
                .read_batch("Big", 0, 0, total, true, None)
                .unwrap_err();
            let text = assert_corrupt(e, &path, offset, "CRC");
            assert!(
                text.contains(&format!("queue Big/0 offset {damaged}")),
                "{text}"
            );
        }
        let read = |start: i64, count: usize| {
            store
                .read_batch("Big", 0, start, count, true, None)
                .unwrap()
                .rows
        };
        assert_eq!(read(0, damaged), damaged);
        assert_eq!(read(damaged as i64 + 1, total), total - damaged - 1);
        store.close().unwrap();
    }
}

// -- query_message ------------------------------------------------------------------------------

fn query(
    store: &MessageStore,
    topic: &str,
    key: &str,
    max: usize,
    begin: i64,
    end: i64,
) -> Vec<i64> {
    store
        .query_message(topic, key, max, begin, end)
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m.topic(), topic);
            assert!(m.keys().contains(&key) || m.property("UNIQ_KEY") == Some(key));
            m.commit_log_offset
        })
        .collect()
}

fn newest_first(rs: &[AppendResult]) -> Vec<i64> {
    rs.iter().rev().map(|r| r.wrote_offset).collect()
}

#[test]
fn query_by_keys_entry_and_by_uniq_key_exactly() {
    let d = TempDir::new("read", "query");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let q = |m: Message| put(&store, &m);
    let a = q(message(
        "Q",
        0,
        b"x",
        None,
        &["order-1", "customer-9"],
        &[("UNIQ_KEY", "AC1E0001")],
    ));
    let b = q(message("Q", 0, b"x", None, &["order-10"], &[]));
    // A UNIQ_KEY equal to another message's key.
    let c = q(message("Q", 0, b"x", None, &[], &[("UNIQ_KEY", "order-1")]));
    let other = q(message("Other", 0, b"x", None, &["order-1"], &[]));
    drain(&store);
    let all = |key: &str| query(&store, "Q", key, 32, 0, i64::MAX);
    assert_eq!(all("order-1"), [c.wrote_offset, a.wrote_offset]);
    assert_eq!(all("customer-9"), [a.wrote_offset]);
    assert_eq!(all("AC1E0001"), [a.wrote_offset]);
    assert_eq!(all("order-10"), [b.wrote_offset]);
    assert_eq!(
        query(&store, "Other", "order-1", 32, 0, i64::MAX),
        [other.wrote_offset]
    );
    for missing in [
        "order",
        "order-",
        "order-100",
        "ORDER-1",
        "AC1E000",
        "",
        " ",
    ] {
        assert!(all(missing).is_empty(), "{missing:?}");
    }
    assert!(query(&store, "Nobody", "order-1", 32, 0, i64::MAX).is_empty());
    store.close().unwrap();
}

/// "Q#Aa" and "Q#BB" have the same hash, so they share index slot chains: the answer is still
/// exact, newest first, and a collision does not crowd out a real match.
#[test]
fn query_is_exact_under_key_hash_collisions_and_newest_first() {
    assert_eq!(java_hash("Q#Aa"), java_hash("Q#BB"));
    let d = TempDir::new("read", "query-collision");
    let cfg = StoreConfig {
        max_index_num: 1000,
        ..small()
    };
    let store = MessageStore::open(d.path(), cfg).unwrap();
    let (mut aa, mut bb) = (Vec::new(), Vec::new());
    for i in 0..12 {
        if i % 3 == 0 {
            aa.push(put(&store, &message("Q", 0, b"a", None, &["Aa"], &[])));
        } else {
            bb.push(put(&store, &message("Q", 0, b"b", None, &["BB"], &[])));
        }
    }
    for _ in 0..80 {
        bb.push(put(&store, &message("Q", 0, b"b", None, &["BB"], &[])));
    }
    drain(&store);
    assert_eq!(query(&store, "Q", "Aa", 32, 0, i64::MAX), newest_first(&aa));
    // At most max_msgs_num_batch (64) whatever is asked for.
    assert_eq!(
        query(&store, "Q", "BB", 200, 0, i64::MAX),
        newest_first(&bb)[..64]
    );
    assert_eq!(
        query(&store, "Q", "BB", 3, 0, i64::MAX),
        newest_first(&bb)[..3]
    );
    // 82 newer "BB" entries come first in the slot chain: they do not crowd out the "Aa".
    assert_eq!(
        query(&store, "Q", "Aa", 1, 0, i64::MAX),
        [aa.last().unwrap().wrote_offset]
    );
    store.close().unwrap();
}

/// The window is applied to store timestamps to the millisecond, both ends included.
#[test]
fn query_time_window_is_exact_to_the_millisecond() {
    let d = TempDir::new("read", "query-time");
    let cfg = StoreConfig {
        max_index_num: 1000,
        ..small()
    };
    let store = MessageStore::open(d.path(), cfg).unwrap();
    let rs: Vec<AppendResult> = (0..6)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(3));
            put(&store, &message("Q", 0, b"x", None, &["tk"], &[]))
        })
        .collect();
    drain(&store);
    let ts: Vec<i64> = rs.iter().map(|r| r.store_timestamp).collect();
    assert!(ts.windows(2).all(|w| w[0] < w[1]));
    for (i, t) in ts.iter().enumerate() {
        assert_eq!(
            query(&store, "Q", "tk", 32, *t, *t),
            [rs[i].wrote_offset],
            "{i}"
        );
    }
    assert_eq!(
        query(&store, "Q", "tk", 32, ts[3], i64::MAX),
        newest_first(&rs[3..])
    );
    assert_eq!(
        query(&store, "Q", "tk", 32, ts[2] + 1, ts[4]),
        [rs[4].wrote_offset, rs[3].wrote_offset]
    );
    assert!(query(&store, "Q", "tk", 32, ts[5] + 1, i64::MAX).is_empty());
    assert!(query(&store, "Q", "tk", 32, 0, ts[0] - 1).is_empty());
    store.close().unwrap();
}
