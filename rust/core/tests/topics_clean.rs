//! Topic deletion (`DefaultMessageStore.deleteTopics`, `cleanUnusedTopic`,
//! `cleanExpiredConsumerQueue`): DefaultMessageStoreTest's testDeleteTopics and
//! testCleanUnusedTopic on real files, then what a user relies on around them: a deleted topic
//! put to again starts at queue offset 0, stays deleted across a clean reopen and a crash,
//! readers and writers of other topics run on meanwhile, and queues whose messages all expired
//! go.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::TempDir;
use rmqstore_core::now_millis;
use rmqstore_core::read::{GetMessageStatus, TagFilter};
use rmqstore_core::{Message, MessageStore, PutMessageStatus, StoreConfig, StoreError};

fn config() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: 64 * 1024,
        mapped_file_size_consume_queue: 20 * 100,
        max_hash_slot_num: 64,
        max_index_num: 1000,
        ..StoreConfig::default()
    }
}

fn msg(topic: &str, queue_id: i32, body: &str) -> Message {
    Message {
        topic: topic.into(),
        queue_id,
        body: body.as_bytes().to_vec(),
        born_timestamp: now_millis(),
        ..Message::default()
    }
}

fn put(store: &MessageStore, topic: &str, queue_id: i32, body: &str) -> i64 {
    let r = store.put_message(&msg(topic, queue_id, body)).unwrap();
    assert_eq!(r.status, PutMessageStatus::PutOk);
    r.queue_offset
}

fn drain(store: &MessageStore) {
    while store.dispatch_step(1 << 20, Duration::ZERO).unwrap().behind > 0 {}
}

fn bodies(store: &MessageStore, topic: &str, queue_id: i32) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let r = store
            .get_message(topic, queue_id, at, 1000, &TagFilter::all())
            .unwrap();
        if r.messages.is_empty() {
            return out;
        }
        out.extend(r.messages.iter().map(|m| {
            (
                m.queue_offset,
                String::from_utf8_lossy(m.body()).into_owned(),
            )
        }));
        at = r.next_begin_offset;
    }
}

/// 10 topics of 4 queues with a message each (testDeleteTopics' table, on real files).
fn ten_topics(store: &MessageStore) {
    for i in 0..10 {
        for q in 0..4 {
            put(store, &format!("topic-{i}"), q, "m");
        }
    }
    drain(store);
    assert_eq!(store.topics().unwrap().len(), 10);
}

#[test]
fn delete_topics_like_default_message_store_test() {
    let d = TempDir::new("topics", "delete");
    let store = MessageStore::open(d.path(), config()).unwrap();
    ten_topics(&store);
    let keep = ["topic-3", "topic-5"];
    let others: Vec<String> = store
        .topics()
        .unwrap()
        .into_iter()
        .filter(|t| !keep.contains(&t.as_str()))
        .collect();
    assert_eq!(store.delete_topics(&others).unwrap(), 8);
    assert_eq!(store.topics().unwrap(), keep);
    let cq = d.path().join("consumequeue");
    let mut left: Vec<String> = std::fs::read_dir(&cq)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, keep, "the deleted topics' folders are gone");
    assert!(
        !d.path().join("consumequeue.deleting").exists(),
        "the folders moved aside are removed once the store is released"
    );
    // The topic-queue table lost them: a put would start at 0.
    assert_eq!(store.next_queue_offset("topic-0", 2).unwrap(), 0);
    assert_eq!(store.next_queue_offset("topic-3", 2).unwrap(), 1);
    let r = store
        .get_message("topic-0", 0, 0, 32, &TagFilter::all())
        .unwrap();
    assert_eq!(r.status, GetMessageStatus::NoMessageInQueue);
    // Deleting again, or a topic that never was: nothing to do.
    assert_eq!(store.delete_topics(&["topic-0", "nope"]).unwrap(), 0);
    assert_eq!(store.delete_topics::<&str>(&[]).unwrap(), 0);
}

#[test]
fn delete_topics_refuses_system_and_blank_topics_before_anything_changes() {
    let d = TempDir::new("topics", "refuse");
    let store = MessageStore::open(d.path(), config()).unwrap();
    put(&store, "A", 0, "a");
    put(&store, "rmq_sys_x", 0, "s");
    drain(&store);
    for bad in [
        vec!["A", "rmq_sys_x"],
        vec!["A", "SCHEDULE_TOPIC_XXXX"],
        vec!["A", " "],
    ] {
        let err = store.delete_topics(&bad).unwrap_err();
        assert!(matches!(err, StoreError::InvalidArgument(_)), "{err}");
    }
    assert_eq!(store.topics().unwrap(), ["A", "rmq_sys_x"]);
    // An LMQ topic is not a system topic: the broker deletes it when asked.
    put(&store, "%LMQ%x", 0, "l");
    drain(&store);
    assert_eq!(store.delete_topics(&["%LMQ%x"]).unwrap(), 1);
}

#[test]
fn clean_unused_topic_like_default_message_store_test_keeps_system_and_lmq() {
    let d = TempDir::new("topics", "unused");
    let store = MessageStore::open(d.path(), config()).unwrap();
    ten_topics(&store);
    put(&store, "rmq_sys_wheel_timer", 0, "t");
    put(&store, "BenchmarkTest", 0, "b");
    put(&store, "%LMQ%q", 0, "l");
    drain(&store);
    let keep: HashSet<String> = ["topic-3".to_owned(), "topic-5".to_owned()].into();
    let deleted = store.clean_unused_topics(&keep).unwrap();
    assert_eq!(
        deleted,
        (0..10)
            .filter(|i| *i != 3 && *i != 5)
            .map(|i| format!("topic-{i}"))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        store.topics().unwrap(),
        [
            "%LMQ%q",
            "BenchmarkTest",
            "rmq_sys_wheel_timer",
            "topic-3",
            "topic-5"
        ]
    );
    assert!(store.clean_unused_topics(&keep).unwrap().is_empty());
}

#[test]
fn a_deleted_topic_put_again_starts_fresh_and_stays_so_across_reopens_and_a_crash() {
    let d = TempDir::new("topics", "again");
    let store = MessageStore::open(d.path(), config()).unwrap();
    put(&store, "Other", 0, "o0");
    for i in 0..150 {
        put(&store, "T", 1, &format!("old{i}"));
    }
    drain(&store);
    // The deleted topic's records are the last ones: reopening resumes dispatch after the
    // remaining queues' last record, before them.
    assert_eq!(store.delete_topics(&["T"]).unwrap(), 1);
    assert!(!d.path().join("consumequeue/T").exists());
    let untombed = TempDir::new("topics", "again-untombed");
    copy_tree(d.path(), untombed.path());
    store.close().unwrap();
    drop(store);
    let store = MessageStore::open(d.path(), config()).unwrap();
    assert_eq!(
        store.topics().unwrap(),
        ["Other"],
        "the deleted topic came back"
    );
    assert_eq!(store.next_queue_offset("T", 1).unwrap(), 0);
    for i in 0..3 {
        assert_eq!(put(&store, "T", 1, &format!("new{i}")), i);
    }
    drain(&store);
    let want: Vec<(i64, String)> = (0..3).map(|i| (i, format!("new{i}"))).collect();
    assert_eq!(bodies(&store, "T", 1), want);
    assert_eq!(store.min_offset_in_queue("T", 1).unwrap(), 0);
    // A crash: the folder as it is while the store is open (abort marker present), so the
    // recovery scan and dispatch read the old records again.
    store.flush().unwrap();
    let crashed = TempDir::new("topics", "again-crash");
    copy_tree(d.path(), crashed.path());
    let bare = TempDir::new("topics", "again-bare");
    copy_tree(d.path(), bare.path());
    store.close().unwrap();
    drop(store);
    for root in [d.path(), crashed.path()] {
        let store = MessageStore::open(root, config()).unwrap();
        assert_eq!(bodies(&store, "T", 1), want, "{}", root.display());
        assert_eq!(store.next_queue_offset("T", 1).unwrap(), 3);
        assert_eq!(put(&store, "T", 1, "new3"), 3);
        store.close().unwrap();
    }
    // Without its tombstone, the deleted topic comes back with its old messages, and a new
    // put would continue its old numbering.
    std::fs::remove_file(untombed.path().join("config/deletedTopics")).unwrap();
    let store = MessageStore::open(untombed.path(), config()).unwrap();
    assert_eq!(bodies(&store, "T", 1).len(), 150);
    drop(store);
    std::fs::remove_file(bare.path().join("config/deletedTopics")).unwrap();
    let store = MessageStore::open(bare.path(), config()).unwrap();
    assert_eq!(store.next_queue_offset("T", 1).unwrap(), 150);
}

#[test]
fn delete_while_readers_read_and_writers_put_other_topics() {
    let d = TempDir::new("topics", "busy");
    let store = Arc::new(MessageStore::open(d.path(), config()).unwrap());
    for i in 0..200 {
        put(&store, "Doomed", i % 4, "x");
        put(&store, "Kept", 0, &format!("k{i}"));
    }
    drain(&store);
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for q in 0..4 {
        let (store, stop) = (store.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut statuses = HashSet::new();
            while !stop.load(Ordering::Relaxed) {
                let r = store
                    .get_message("Doomed", q, 0, 64, &TagFilter::all())
                    .unwrap();
                for m in &r.messages {
                    assert_eq!(m.body(), b"x");
                }
                statuses.insert(r.status);
            }
            statuses
        }));
    }
    let writer = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 200;
            while !stop.load(Ordering::Relaxed) {
                put(&store, "Kept", 0, &format!("k{n}"));
                let _ = store.dispatch_step(1 << 20, Duration::ZERO).unwrap();
                n += 1;
            }
            n
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(store.delete_topics(&["Doomed"]).unwrap(), 1);
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    for t in threads {
        let statuses = t.join().unwrap();
        assert!(statuses.contains(&GetMessageStatus::NoMessageInQueue));
    }
    drain(&store);
    let kept = bodies(&store, "Kept", 0);
    assert_eq!(kept.len() as i64, written);
    assert!(kept
        .iter()
        .enumerate()
        .all(|(i, (qo, b))| *qo == i as i64 && *b == format!("k{i}")));
}

#[test]
fn clean_expired_consumer_queues_destroys_queues_whose_messages_all_expired() {
    let d = TempDir::new("topics", "expired");
    let body = "y".repeat(900);
    {
        let store = MessageStore::open(d.path(), config()).unwrap();
        // Segment 0 and 1: queues 0 and 1 of Old and a system topic; then Old queue 1 again
        // and New in the later segments.
        for _ in 0..100 {
            put(&store, "Old", 0, &body);
            put(&store, "rmq_sys_old", 0, &body);
        }
        for _ in 0..100 {
            put(&store, "Old", 1, &body);
            put(&store, "New", 0, &body);
        }
        drain(&store);
        assert!(store.commitlog_segments().unwrap().len() >= 4);
        store.close().unwrap();
    }
    // Expire the segments that hold only Old queue 0 and the system topic's messages.
    let seg_dir = d.path().join("commitlog");
    let mut segs: Vec<_> = std::fs::read_dir(&seg_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    segs.sort();
    let store = MessageStore::open(d.path(), config()).unwrap();
    let old0_end = store.commit_log_offset_in_queue("Old", 0, 99).unwrap();
    drop(store);
    let seg_size = 64 * 1024;
    let expired = (old0_end / seg_size + 1) as usize;
    assert!(expired < segs.len() - 1);
    for s in &segs[..expired] {
        std::fs::remove_file(s).unwrap();
    }
    let store = MessageStore::open(d.path(), config()).unwrap();
    assert_eq!(store.next_queue_offset("Old", 0).unwrap(), 100);
    let destroyed = store.clean_expired_consumer_queues().unwrap();
    assert_eq!(destroyed, [("Old".to_owned(), 0)]);
    assert!(!d.path().join("consumequeue/Old/0").exists());
    assert!(d.path().join("consumequeue/Old/1").exists());
    assert!(d.path().join("consumequeue/rmq_sys_old/0").exists());
    assert_eq!(store.next_queue_offset("Old", 0).unwrap(), 0);
    assert_eq!(store.next_queue_offset("Old", 1).unwrap(), 100);
    assert_eq!(store.topics().unwrap(), ["New", "Old", "rmq_sys_old"]);
    assert_eq!(put(&store, "Old", 0, "again"), 0);
    drain(&store);
    assert_eq!(bodies(&store, "Old", 0), [(0, "again".to_owned())]);
    assert!(store.clean_expired_consumer_queues().unwrap().is_empty());
}

#[test]
fn a_read_only_store_sees_a_deleted_topic_go_and_a_new_one_come() {
    let d = TempDir::new("topics", "ro");
    let store = MessageStore::open(d.path(), config()).unwrap();
    for i in 0..5 {
        put(&store, "T", 0, &format!("old{i}"));
    }
    store.flush().unwrap();
    drain(&store);
    store.flush().unwrap();
    let ro = MessageStore::open_read_only(d.path(), config()).unwrap();
    assert_eq!(bodies(&ro, "T", 0).len(), 5);
    assert_eq!(store.delete_topics(&["T"]).unwrap(), 1);
    // Readers look at a queue's folder at most every 10 ms.
    std::thread::sleep(Duration::from_millis(30));
    let r = ro.get_message("T", 0, 0, 32, &TagFilter::all()).unwrap();
    assert_eq!(r.status, GetMessageStatus::NoMessageInQueue);
    assert!(ro.topics().unwrap().is_empty());
    put(&store, "T", 0, "new0");
    drain(&store);
    store.flush().unwrap();
    assert_eq!(bodies(&ro, "T", 0), [(0, "new0".to_owned())]);
    assert!(matches!(
        ro.delete_topics(&["T"]).unwrap_err(),
        StoreError::ReadOnly(_)
    ));
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else if e.file_name() != "lock" {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

#[test]
fn clean_expired_consumer_queues_after_the_cleaner_deleted_segments_while_open() {
    let d = TempDir::new("topics", "expired-open");
    let body = "y".repeat(900);
    let store = MessageStore::open(d.path(), config()).unwrap();
    for _ in 0..100 {
        put(&store, "Old", 0, &body);
        put(&store, "rmq_sys_old", 0, &body);
    }
    for _ in 0..100 {
        put(&store, "Old", 1, &body);
        put(&store, "New", 0, &body);
    }
    drain(&store);
    let last_old0 = store.commit_log_offset_in_queue("Old", 0, 99).unwrap();
    let expired = (last_old0 / (64 * 1024) + 1) as i32;
    // Nothing expired yet: nothing to destroy.
    assert!(store.clean_expired_consumer_queues().unwrap().is_empty());
    let removed = store
        .delete_expired_commit_log_files(0, 0, 0, true, expired)
        .unwrap();
    assert_eq!(removed.len() as i32, expired);
    assert_eq!(
        store.clean_expired_consumer_queues().unwrap(),
        [("Old".to_owned(), 0)]
    );
    assert_eq!(store.next_queue_offset("Old", 0).unwrap(), 0);
    assert_eq!(store.queue_ids("Old").unwrap(), [1]);
    assert_eq!(put(&store, "Old", 0, "again"), 0);
    drain(&store);
    assert_eq!(bodies(&store, "Old", 0), [(0, "again".to_owned())]);
    // Reopened: the queue made again is the only one (its old records are gone from the
    // commitlog, so nothing brings them back).
    store.close().unwrap();
    drop(store);
    let store = MessageStore::open(d.path(), config()).unwrap();
    assert_eq!(bodies(&store, "Old", 0), [(0, "again".to_owned())]);
    assert_eq!(store.next_queue_offset("Old", 0).unwrap(), 1);
}

#[test]
fn a_topic_deleted_then_cut_away_by_truncate_files_is_put_to_again() {
    let d = TempDir::new("topics", "truncate");
    let store = MessageStore::open(d.path(), config()).unwrap();
    put(&store, "Other", 0, "o");
    let first_t = store
        .put_message(&msg("T", 0, "old0"))
        .unwrap()
        .wrote_offset;
    for i in 1..5 {
        put(&store, "T", 0, &format!("old{i}"));
    }
    drain(&store);
    assert_eq!(store.delete_topics(&["T"]).unwrap(), 1);
    // The cut goes below the end the tombstone was set at: what is put from there on is the
    // new topic's, and must be dispatched.
    assert!(store.truncate_files(first_t).unwrap());
    assert_eq!(put(&store, "T", 0, "new0"), 0);
    drain(&store);
    assert_eq!(bodies(&store, "T", 0), [(0, "new0".to_owned())]);
    store.close().unwrap();
    drop(store);
    let store = MessageStore::open(d.path(), config()).unwrap();
    assert_eq!(bodies(&store, "T", 0), [(0, "new0".to_owned())]);
    assert_eq!(store.next_queue_offset("T", 0).unwrap(), 1);
}

#[test]
fn folders_a_deletion_moved_aside_before_a_crash_are_removed_at_open() {
    let d = TempDir::new("topics", "leftover");
    drop(MessageStore::open(d.path(), config()).unwrap());
    let left = d.path().join("consumequeue.deleting/T.1700000000000.0/0");
    std::fs::create_dir_all(&left).unwrap();
    std::fs::write(left.join("00000000000000000000"), [0u8; 40]).unwrap();
    let store = MessageStore::open(d.path(), config()).unwrap();
    assert!(!d.path().join("consumequeue.deleting").exists());
    assert!(store.topics().unwrap().is_empty());
}
