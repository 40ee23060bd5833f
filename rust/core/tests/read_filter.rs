//! `read_filtered` with a row filter, on real files: the rows built are exactly those of the
//! unfiltered read that meet the conditions (tags compared as strings, also when two tags share
//! a hash code, also in the schedule topic whose codes are delivery times; store times at their
//! bounds), only those are built, and the units gone over leave no gap.

mod common;

use std::time::Duration;

use common::TempDir;
use rmqstore_core::format::property;
use rmqstore_core::read::{BatchColumns, BodyLayout, Column, ColumnMask, ReadRequest, RowFilter};
use rmqstore_core::schedule::SCHEDULE_TOPIC;
use rmqstore_core::{Message, MessageStore, StoreConfig};

const TAGS: [Option<&str>; 5] = [Some("Aa"), Some("BB"), None, Some("C"), Some("Aa")];

fn open(dir: &std::path::Path) -> MessageStore {
    let config = StoreConfig {
        mapped_file_size_commit_log: 256 * 1024,
        mapped_file_size_consume_queue: 20 * 1000,
        max_hash_slot_num: 64,
        max_index_num: 1000,
        message_delay_level: "1s 5s".to_owned(),
        ..StoreConfig::default()
    };
    MessageStore::open(dir, config).unwrap()
}

fn message(topic: &str, i: usize, tag: Option<&str>, delay: bool) -> Message {
    let mut properties = vec![(property::KEYS.into(), format!("k{i}"))];
    if let Some(t) = tag {
        properties.push((property::TAGS.into(), t.into()));
    }
    if delay {
        properties.push((property::DELAY.into(), "2".into()));
    }
    Message {
        topic: topic.into(),
        body: format!("body-{i}").into_bytes(),
        born_timestamp: 1_700_000_000_000,
        properties,
        ..Message::default()
    }
}

/// Queue offset, store time and tag of each row.
type Row = (i64, i64, Option<String>);

fn rows(b: &BatchColumns) -> Vec<Row> {
    (0..b.rows)
        .map(|i| {
            let tag = (b.tags_valid[i / 8] & (1 << (i % 8)) != 0).then(|| {
                let (s, e) = (b.tags_offsets[i] as usize, b.tags_offsets[i + 1] as usize);
                String::from_utf8(b.tags_data[s..e].to_vec()).unwrap()
            });
            (b.queue_offset[i], b.store_timestamp[i], tag)
        })
        .collect()
}

fn request() -> ReadRequest {
    ReadRequest {
        columns: ColumnMask::NONE
            .with(Column::QueueOffset)
            .with(Column::StoreTimestamp)
            .with(Column::Tags)
            .with(Column::Body),
        decompress: None,
        body: BodyLayout::Binary,
    }
}

/// The whole queue read through `filter` in reads of `step` units: the rows, and checks that
/// the units gone over cover the queue without a gap.
fn read_all(store: &MessageStore, topic: &str, filter: &RowFilter, step: usize) -> Vec<Row> {
    let (mut out, mut offset) = (Vec::new(), 0);
    loop {
        let b = store
            .read_filtered(topic, 0, offset, step, &request(), filter)
            .unwrap();
        if b.next_offset == offset {
            assert_eq!(b.scanned.units, 0);
            return out;
        }
        assert_eq!(b.scanned.first, offset, "no gap before the units gone over");
        assert_eq!(b.scanned.last + 1, b.next_offset);
        assert_eq!(b.scanned.units as i64, b.next_offset - offset);
        assert!(b.scanned.units <= step);
        // Only the rows let through are built: the bodies column holds theirs alone.
        assert_eq!(b.body_offsets.len(), b.rows + 1);
        out.extend(rows(&b));
        offset = b.next_offset;
    }
}

fn check(store: &MessageStore, topic: &str, filter: &RowFilter, keep: impl Fn(&Row) -> bool) {
    let all = read_all(store, topic, &RowFilter::none(), 1000);
    let want: Vec<Row> = all.into_iter().filter(|r| keep(r)).collect();
    for step in [1, 3, 1000] {
        assert_eq!(
            read_all(store, topic, filter, step),
            want,
            "{filter:?} step {step}"
        );
    }
}

#[test]
fn filtered_reads_build_exactly_the_rows_that_match() {
    let dir = TempDir::new("read_filter", "match");
    let store = open(dir.path());
    for i in 0..60 {
        let r = store
            .put_message(&message("TopicA", i, TAGS[i % TAGS.len()], false))
            .unwrap();
        assert!(r.is_ok());
        if i % 20 == 0 {
            std::thread::sleep(Duration::from_millis(3));
        }
    }
    while store.dispatch_step(1 << 20, Duration::ZERO).unwrap().behind > 0 {}
    let tag_is = |want: &'static [&'static str]| {
        move |r: &Row| r.2.as_deref().is_some_and(|t| want.contains(&t))
    };
    // "Aa" and "BB" share a hash code: the code lets both through, the string decides.
    check(
        &store,
        "TopicA",
        &RowFilter::none().with_tags(Some(&["Aa"]), false),
        tag_is(&["Aa"]),
    );
    check(
        &store,
        "TopicA",
        &RowFilter::none().with_tags(Some(&["BB"]), false),
        tag_is(&["BB"]),
    );
    check(
        &store,
        "TopicA",
        &RowFilter::none().with_tags(Some(&["BB", "C", "nope"]), false),
        tag_is(&["BB", "C"]),
    );
    check(
        &store,
        "TopicA",
        &RowFilter::none().with_tags(Some(&["", "nope"]), false),
        |_| false,
    );
    check(
        &store,
        "TopicA",
        &RowFilter::none().with_tags::<&str>(Some(&[]), true),
        |r| r.2.is_none(),
    );
    check(
        &store,
        "TopicA",
        &RowFilter::none().with_tags(Some(&["C"]), true),
        |r| r.2.is_none() || r.2.as_deref() == Some("C"),
    );
    check(
        &store,
        "TopicA",
        &RowFilter::none().with_tags::<&str>(None, false),
        |r| r.2.is_some(),
    );
    // Store times: bounds exactly on a message's time are inclusive.
    let all = read_all(&store, "TopicA", &RowFilter::none(), 1000);
    let (t1, t2) = (all[10].1, all[45].1);
    assert!(t1 < t2);
    check(
        &store,
        "TopicA",
        &RowFilter::none().with_store_time(t1, t2),
        |r| r.1 >= t1 && r.1 <= t2,
    );
    check(
        &store,
        "TopicA",
        &RowFilter::none().with_store_time(t2, t2),
        |r| r.1 == t2,
    );
    check(
        &store,
        "TopicA",
        &RowFilter::none().with_store_time(t2, t1),
        |_| false,
    );
    check(
        &store,
        "TopicA",
        &RowFilter::none()
            .with_store_time(t1, i64::MAX)
            .with_tags(Some(&["Aa", "C"]), true),
        |r| r.1 >= t1 && r.2.as_deref() != Some("BB"),
    );
}

#[test]
fn the_schedule_topics_delivery_time_codes_are_never_taken_for_hashes() {
    let dir = TempDir::new("read_filter", "schedule");
    let store = open(dir.path());
    for i in 0..12 {
        let r = store
            .put_message(&message("TopicA", i, TAGS[i % TAGS.len()], true))
            .unwrap();
        assert!(r.is_ok());
    }
    while store.dispatch_step(1 << 20, Duration::ZERO).unwrap().behind > 0 {}
    // Level 2 is queue 1 of the schedule topic.
    let b = store
        .read_filtered(
            SCHEDULE_TOPIC,
            1,
            0,
            100,
            &request(),
            &RowFilter::none().with_tags(Some(&["Aa"]), false),
        )
        .unwrap();
    let tags: Vec<Option<String>> = rows(&b).into_iter().map(|r| r.2).collect();
    assert_eq!(tags, vec![Some("Aa".to_owned()); 5]);
    assert_eq!(b.scanned.units, 12);
}
