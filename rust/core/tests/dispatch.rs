//! Dispatch through the store's API: transaction types, the confirm offset, the two-thread
//! pipeline, group commit, damaged records passed over, where a reopened store resumes, and
//! keys missing between index files indexed again at open.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmqstore_core::format::{property, sysflag};
use rmqstore_core::now_millis;
use rmqstore_core::read::{GetMessageStatus, TagFilter};
use rmqstore_core::{FlushDiskType, Message, MessageStore, StoreConfig};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rmqstore-dispatch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn config() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: 64 * 1024,
        mapped_file_size_consume_queue: 20 * 100,
        max_hash_slot_num: 64,
        max_index_num: 100,
        ..StoreConfig::default()
    }
}

fn msg(topic: &str, key: &str, sys_flag: i32) -> Message {
    Message {
        topic: topic.into(),
        body: key.as_bytes().to_vec(),
        sys_flag,
        born_timestamp: now_millis(),
        properties: vec![(property::KEYS.into(), key.into())],
        ..Message::default()
    }
}

fn drain(store: &MessageStore) {
    while store.dispatch_step(1 << 20, Duration::ZERO).unwrap().behind > 0 {}
}

#[test]
fn prepared_and_rollback_get_no_queue_unit_and_rollback_is_not_indexed() {
    let d = dir("tx");
    let store = MessageStore::open(&d, config()).unwrap();
    let plain = store.put_message(&msg("T", "plain", 0)).unwrap();
    let prepared = store
        .put_message(&msg("T", "prepared", sysflag::TRANSACTION_PREPARED_TYPE))
        .unwrap();
    let rollback = store
        .put_message(&msg("T", "rollback", sysflag::TRANSACTION_ROLLBACK_TYPE))
        .unwrap();
    let commit = store
        .put_message(&msg("T", "commit", sysflag::TRANSACTION_COMMIT_TYPE))
        .unwrap();
    // PREPARED and ROLLBACK records carry queue offset 0 and consume none.
    assert_eq!(
        (
            plain.queue_offset,
            prepared.queue_offset,
            rollback.queue_offset,
            commit.queue_offset
        ),
        (0, 0, 0, 1)
    );
    drain(&store);
    assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), 2);
    let r = store.get_message("T", 0, 0, 32, &TagFilter::all()).unwrap();
    assert_eq!(r.status, GetMessageStatus::Found);
    let bodies: Vec<&[u8]> = r.messages.iter().map(|m| m.body()).collect();
    assert_eq!(bodies, vec![&b"plain"[..], &b"commit"[..]]);
    let found = |key: &str| {
        store
            .query_message("T", key, 32, 0, i64::MAX)
            .unwrap()
            .len()
    };
    assert_eq!(found("plain"), 1);
    assert_eq!(found("prepared"), 1, "PREPARED messages are indexed");
    assert_eq!(found("rollback"), 0, "ROLLBACK messages are not indexed");
    assert_eq!(found("commit"), 1);
    store.close().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn sync_flush_dispatches_only_what_is_flushed() {
    let d = dir("sync");
    let cfg = StoreConfig {
        flush_disk_type: FlushDiskType::SyncFlush,
        ..config()
    };
    let store = MessageStore::open(&d, cfg).unwrap();
    for i in 0..10 {
        // WAIT=false: the put does not wait for (or do) the force.
        let mut m = msg("T", &format!("k{i}"), 0);
        m.properties.push((property::WAIT.into(), "false".into()));
        let r = store.put_message(&m).unwrap();
        assert_eq!(r.status, rmqstore_core::PutMessageStatus::PutOk);
    }
    assert_eq!(store.confirm_offset().unwrap(), 0);
    assert_eq!(
        store
            .dispatch_step(1 << 20, Duration::ZERO)
            .unwrap()
            .dispatched,
        0
    );
    assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), 0);
    let flushed = store.flush().unwrap();
    assert_eq!(flushed, store.max_phy_offset().unwrap());
    assert_eq!(store.dispatch_behind_bytes().unwrap(), flushed);
    drain(&store);
    assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), 10);
    assert_eq!(store.dispatch_behind_bytes().unwrap(), 0);
    store.close().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_large_backlog_is_dispatched_on_two_threads_to_the_same_result() {
    let d = dir("parallel");
    let store = MessageStore::open(
        &d,
        StoreConfig {
            mapped_file_size_commit_log: 16 << 20,
            ..config()
        },
    )
    .unwrap();
    // More than PARALLEL_DISPATCH_BYTES of records, over several queues and segments.
    let body = vec![1u8; 900];
    let mut n = 0;
    while store.max_phy_offset().unwrap() < 3 * rmqstore_core::PARALLEL_DISPATCH_BYTES {
        let mut m = msg("P", &format!("key-{n}"), 0);
        m.body = body.clone();
        m.queue_id = n % 5;
        assert!(store.put_message(&m).unwrap().is_ok());
        n += 1;
    }
    let step = store.dispatch_step(64 << 20, Duration::ZERO).unwrap();
    assert_eq!(step.dispatched, n as u64);
    assert_eq!(step.behind, 0);
    let total: i64 = (0..5)
        .map(|q| store.max_offset_in_queue("P", q).unwrap())
        .sum();
    assert_eq!(total, i64::from(n));
    for i in [0, n / 2, n - 1] {
        let found = store
            .query_message("P", &format!("key-{i}"), 4, 0, i64::MAX)
            .unwrap();
        assert_eq!(found.len(), 1, "key-{i}");
        assert_eq!(found[0].queue_id, i % 5);
    }
    store.close().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// Runs a group-commit service (rounds of `group_commit_run` with `budget`; zero: one round
/// per call) and `threads` producers of `puts` SYNC_FLUSH puts each; every put must return
/// PUT_OK with its bytes forced. Returns the forces the service did.
fn sync_producers(store: &Arc<MessageStore>, threads: usize, puts: usize, budget: Duration) -> u64 {
    store.attach_group_commit().unwrap();
    let service = {
        let store = store.clone();
        std::thread::spawn(move || loop {
            let step = store
                .group_commit_run(Duration::from_millis(10), budget)
                .unwrap();
            if step.stopped {
                return step.forces;
            }
        })
    };
    let producers: Vec<_> = (0..threads)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..puts {
                    let r = store
                        .put_message(&msg("G", &format!("{t}-{i}"), 0))
                        .unwrap();
                    assert_eq!(r.status, rmqstore_core::PutMessageStatus::PutOk);
                    let end = r.wrote_offset + r.wrote_bytes;
                    assert!(
                        store.flushed_where().unwrap() >= end,
                        "returned before its force"
                    );
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    store.stop_services();
    service.join().unwrap()
}

#[test]
fn sync_flush_puts_return_forced_and_share_forces() {
    let d = dir("group");
    let cfg = StoreConfig {
        flush_disk_type: FlushDiskType::SyncFlush,
        mapped_file_size_commit_log: 1 << 20,
        ..config()
    };
    let store = Arc::new(MessageStore::open(&d, cfg).unwrap());
    // Without a group-commit service a put forces by itself.
    let r = store.put_message(&msg("G", "solo", 0)).unwrap();
    assert_eq!(r.status, rmqstore_core::PutMessageStatus::PutOk);
    assert!(store.flushed_where().unwrap() >= r.wrote_offset + r.wrote_bytes);
    let forces = sync_producers(&store, 8, 50, Duration::ZERO);
    assert!(forces >= 1);
    assert!(forces < 400, "400 puts took {forces} forces: no sharing");
    store.close().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// 32 producers through the service's long runs, the wake-up relay and gathering: every put
/// returns forced (none waits out the 5 s timeout for a wake-up that never comes), and forces
/// are shared.
#[test]
fn many_sync_producers_are_all_woken_through_the_relay() {
    let d = dir("relay");
    let cfg = StoreConfig {
        flush_disk_type: FlushDiskType::SyncFlush,
        mapped_file_size_commit_log: 4 << 20,
        ..config()
    };
    let store = Arc::new(MessageStore::open(&d, cfg).unwrap());
    let forces = sync_producers(&store, 32, 40, Duration::from_millis(50));
    assert!(
        forces < 1280 / 2,
        "1280 puts took {forces} forces: no sharing"
    );
    store.close().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// A SYNC_FLUSH store whose group commit is attached but has no service thread: nothing
/// forces or unparks a waiting put, which returns at its `sync_flush_timeout` deadline.
fn sync_store_without_service(name: &str, sync_flush_timeout: i64) -> (PathBuf, Arc<MessageStore>) {
    let d = dir(name);
    let cfg = StoreConfig {
        flush_disk_type: FlushDiskType::SyncFlush,
        sync_flush_timeout,
        ..config()
    };
    let store = Arc::new(MessageStore::open(&d, cfg).unwrap());
    store.attach_group_commit().unwrap();
    (d, store)
}

#[test]
fn a_sync_put_times_out_when_no_force_comes() {
    let (d, store) = sync_store_without_service("timeout", 30);
    let t = std::time::Instant::now();
    let r = store.put_message(&msg("T", "late", 0)).unwrap();
    assert_eq!(r.status, rmqstore_core::PutMessageStatus::FlushDiskTimeout);
    assert!(r.is_ok(), "the message is stored");
    assert!(t.elapsed() >= Duration::from_millis(30));
    assert!(store
        .look_message_by_offset(r.wrote_offset)
        .unwrap()
        .is_some());
    store.close().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_producer_forced_before_the_service_looks_is_no_longer_listed() {
    // A waiting producer that sees its bytes forced by someone else (here `flush()`, in a
    // burst often a force it saw while spinning, before the service took the lock again)
    // must leave the waiters: left listed, it would be counted as waiting and put in the
    // wake-up relay although it no longer waits.
    // Nothing unparks the producer: it looks again at its deadline, finds its bytes forced
    // and returns PUT_OK.
    let (d, store) = sync_store_without_service("forced-early", 1000);
    let producer = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || store.put_message(&msg("E", "early", 0)).unwrap())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while store.group_commit_waiting().unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "the put never waited");
        std::thread::sleep(Duration::from_millis(1));
    }
    store.flush().unwrap();
    let r = producer.join().unwrap();
    assert_eq!(r.status, rmqstore_core::PutMessageStatus::PutOk);
    assert_eq!(store.group_commit_waiting().unwrap(), 0);
    store.close().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// Every file under `root`, by path relative to it (index files by position: their names are
/// creation times), with its bytes.
fn files_under(root: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    fn walk(at: &std::path::Path, root: &std::path::Path, out: &mut Vec<(String, Vec<u8>)>) {
        let mut entries: Vec<_> = std::fs::read_dir(at)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for (i, p) in entries.iter().enumerate() {
            if p.is_dir() {
                walk(p, root, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                let name = if rel.starts_with("index") {
                    format!("index#{i}")
                } else {
                    rel
                };
                out.push((name, std::fs::read(p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let target = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_tree(&p, &target);
        } else {
            std::fs::copy(&p, &target).unwrap();
        }
    }
}

#[test]
fn batches_sharing_keys_dispatch_on_two_threads_byte_for_byte_as_on_one() {
    // Batches whose messages share their keys (as put_messages gives them), over several
    // queues, small consume queue segments and small index files (which fill mid-batch).
    let (a, b) = (dir("shared-keys-a"), dir("shared-keys-b"));
    let cfg = || StoreConfig {
        mapped_file_size_commit_log: 16 << 20,
        max_index_num: 1000,
        ..config()
    };
    let store = MessageStore::open(&a, cfg()).unwrap();
    let body = vec![3u8; 900];
    let bodies: Vec<&[u8]> = vec![&body; 37];
    let mut i = 0;
    while store.max_phy_offset().unwrap() < 3 * rmqstore_core::PARALLEL_DISPATCH_BYTES {
        // Keys change every other batch, so equal keys also span two batches.
        let keys = format!("order-{} user-{}", i / 2, i / 2);
        let props = vec![
            (property::KEYS.to_string(), keys),
            (property::TAGS.to_string(), format!("tag-{}", i % 3)),
        ];
        let batch = rmqstore_core::Batch {
            topic: "S",
            queue_id: i % 5,
            bodies: &bodies,
            properties: &props,
            flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: None,
        };
        assert!(store.put_messages(&batch).unwrap().is_ok());
        i += 1;
    }
    store.flush().unwrap();
    // The same records, not dispatched yet, in a second folder.
    copy_tree(&a, &b);
    // One step over the whole backlog: the two-thread pipeline.
    let step = store.dispatch_step(64 << 20, Duration::ZERO).unwrap();
    assert_eq!(step.behind, 0);
    assert_eq!(step.dispatched, u64::from(i as u32) * 37);
    let found = store
        .query_message("S", "order-3", 1000, 0, i64::MAX)
        .unwrap();
    // Two batches of 37 carry the key; a query returns at most `max_msgs_num_batch` (64).
    assert_eq!(
        found.len(),
        64,
        "both batches keyed order-3, up to the query cap"
    );
    assert!(found.iter().all(|m| m.keys().contains(&"order-3")));
    store.close().unwrap();
    // Steps of 1 MiB: one thread.
    let other = MessageStore::open(&b, cfg()).unwrap();
    drain(&other);
    other.close().unwrap();
    let (fa, fb) = (files_under(&a), files_under(&b));
    let names = |f: &[(String, Vec<u8>)]| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    let skip =
        |n: &str| n == "checkpoint" || n == "abort" || n == "lock" || n.starts_with("config");
    let (fa, fb): (Vec<_>, Vec<_>) = (
        fa.into_iter().filter(|(n, _)| !skip(n)).collect(),
        fb.into_iter().filter(|(n, _)| !skip(n)).collect(),
    );
    assert_eq!(names(&fa), names(&fb));
    assert!(
        fa.iter().any(|(n, _)| n.starts_with("index#1")),
        "index files rolled"
    );
    for ((name, x), (_, y)) in fa.iter().zip(&fb) {
        assert!(
            x == y,
            "{name} differs between two-thread and one-thread dispatch"
        );
    }
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

/// The commitlog's first segment of the store in `d`.
fn first_segment(d: &std::path::Path) -> PathBuf {
    d.join("commitlog").join(format!("{:020}", 0))
}

/// Overwrites the bytes `at` of the first segment.
fn patch(d: &std::path::Path, at: usize, bytes: &[u8]) {
    let path = first_segment(d);
    let mut data = std::fs::read(&path).unwrap();
    data[at..at + bytes.len()].copy_from_slice(bytes);
    std::fs::write(&path, data).unwrap();
}

/// Where the only occurrence of `needle` is in the first segment.
fn find_once(d: &std::path::Path, needle: &[u8]) -> usize {
    let data = std::fs::read(first_segment(d)).unwrap();
    let hits: Vec<usize> = data
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(hits.len(), 1, "{needle:?} found {} times", hits.len());
    hits[0]
}

#[test]
fn records_whose_topic_or_queue_a_put_never_writes_are_skipped_and_counted() {
    // Topic and queue id are outside the body CRC: damaged there, a record still recovers, but
    // dispatch passes it over (no consume queue, no index entry), counts it and goes on, also
    // when the queues and the index are rebuilt from the commitlog.
    let d = dir("skipped");
    let (bad_topic, bad_queue) = {
        let store = MessageStore::open(&d, config()).unwrap();
        assert!(store.put_message(&msg("Good", "g0", 0)).unwrap().is_ok());
        let bad_topic = store.put_message(&msg("QQQ", "q0", 0)).unwrap();
        assert!(store.put_message(&msg("Good", "g1", 0)).unwrap().is_ok());
        let bad_queue = store.put_message(&msg("NegQ", "n0", 0)).unwrap();
        assert!(store.put_message(&msg("Good", "g2", 0)).unwrap().is_ok());
        store.close().unwrap();
        (bad_topic.wrote_offset, bad_queue.wrote_offset)
    };
    // TOPICLEN and TOPIC: `QQQ` becomes `../`; QUEUEID (record bytes 12..16) of NegQ becomes -1.
    let at = find_once(&d, b"\x03QQQ");
    patch(&d, at + 1, b"../");
    patch(&d, bad_queue as usize + 12, &(-1i32).to_be_bytes());
    for sub in ["consumequeue", "index"] {
        std::fs::remove_dir_all(d.join(sub)).unwrap();
    }
    let store = MessageStore::open(&d, config()).unwrap();
    drain(&store);
    assert_eq!(store.skipped_records().unwrap(), 2);
    assert_eq!(store.topics().unwrap(), vec!["Good"]);
    let r = store
        .get_message("Good", 0, 0, 32, &TagFilter::all())
        .unwrap();
    let bodies: Vec<&[u8]> = r.messages.iter().map(|m| m.body()).collect();
    assert_eq!(bodies, vec![&b"g0"[..], &b"g1"[..], &b"g2"[..]]);
    assert_eq!(
        store
            .query_message("Good", "g2", 4, 0, i64::MAX)
            .unwrap()
            .len(),
        1
    );
    assert!(store
        .query_message("NegQ", "n0", 4, 0, i64::MAX)
        .unwrap()
        .is_empty());
    assert!(!d.join("consumequeue").join("..").join("0").exists());
    // The damaged records are still there, readable by offset as stored.
    let m = store.look_message_by_offset(bad_topic).unwrap().unwrap();
    assert_eq!(m.topic(), "../");
    assert_eq!(
        store
            .look_message_by_offset(bad_queue)
            .unwrap()
            .unwrap()
            .queue_id,
        -1
    );
    // Puts go on after them.
    assert!(store.put_message(&msg("Good", "g3", 0)).unwrap().is_ok());
    drain(&store);
    assert_eq!(store.max_offset_in_queue("Good", 0).unwrap(), 4);
    assert_eq!(store.skipped_records().unwrap(), 2, "counted once");
    store.close().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// Bodies of queue `topic`/0, in order.
fn bodies_of(store: &MessageStore, topic: &str) -> Vec<Vec<u8>> {
    let r = store
        .get_message(topic, 0, 0, 64, &TagFilter::all())
        .unwrap();
    r.messages.iter().map(|m| m.body().to_vec()).collect()
}

#[test]
fn a_reopened_store_dispatches_from_where_its_queues_end() {
    let d = dir("resume");
    let crashed = dir("resume-crashed");
    let store = MessageStore::open(&d, config()).unwrap();
    for i in 0..10 {
        assert!(store
            .put_message(&msg("R", &format!("k{i}"), 0))
            .unwrap()
            .is_ok());
    }
    drain(&store);
    store.flush_consume_queues(0).unwrap();
    // Five more, not dispatched yet, then the folder as a crash would leave it.
    for i in 10..15 {
        assert!(store
            .put_message(&msg("R", &format!("k{i}"), 0))
            .unwrap()
            .is_ok());
    }
    store.flush().unwrap();
    assert!(store.dispatch_behind_bytes().unwrap() > 0);
    copy_tree(&d, &crashed);
    store.close().unwrap();
    let want: Vec<Vec<u8>> = (0..15).map(|i| format!("k{i}").into_bytes()).collect();
    for (path, abnormal) in [(&d, false), (&crashed, true)] {
        let store = MessageStore::open(path, config()).unwrap();
        assert_eq!(store.recovery_report().unwrap().abnormal, abnormal);
        // The open dispatched what was behind, and nothing twice.
        assert_eq!(store.dispatch_behind_bytes().unwrap(), 0);
        assert_eq!(store.max_offset_in_queue("R", 0).unwrap(), 15);
        assert_eq!(bodies_of(&store, "R"), want);
        for i in [0, 9, 10, 14] {
            let found = store
                .query_message("R", &format!("k{i}"), 4, 0, i64::MAX)
                .unwrap();
            assert_eq!(found.len(), 1, "k{i}");
            assert_eq!(found[0].queue_offset, i);
        }
        // New puts continue the queue.
        let r = store.put_message(&msg("R", "k15", 0)).unwrap();
        assert_eq!(r.queue_offset, 15);
        drain(&store);
        assert_eq!(store.max_offset_in_queue("R", 0).unwrap(), 16);
        store.close().unwrap();
        // A clean reopen dispatches nothing again.
        let store = MessageStore::open(path, config()).unwrap();
        assert_eq!(store.max_offset_in_queue("R", 0).unwrap(), 16);
        assert_eq!(
            store
                .dispatch_step(1 << 20, Duration::ZERO)
                .unwrap()
                .dispatched,
            0
        );
        store.close().unwrap();
    }
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&crashed);
}

/// Index files of the store in `d`, by name.
fn index_files(d: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(d.join("index"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn keys_missing_between_index_files_are_indexed_again_at_open() {
    // An index file lost from between two others (as RocketMQ loses one when a second file is
    // made within the same millisecond): opening finds the stretch of the commitlog no file
    // covers and indexes it again, in a file named between the neighbours.
    let d = dir("gap");
    let store = MessageStore::open(&d, config()).unwrap();
    let n = 200;
    for i in 0..n {
        let mut m = msg("Gap", &format!("k{i} x{i}"), 0);
        m.properties
            .push((property::UNIQ_KEY.into(), format!("U{i:05}")));
        assert!(store.put_message(&m).unwrap().is_ok());
    }
    drain(&store);
    store.close().unwrap();
    let before = index_files(&d);
    assert!(before.len() >= 5, "{} index files", before.len());
    let lost = &before[2].0;
    std::fs::remove_file(d.join("index").join(lost)).unwrap();
    let kept: Vec<_> = before.iter().filter(|(n, _)| n != lost).cloned().collect();
    let store = MessageStore::open(&d, config()).unwrap();
    for i in 0..n {
        for key in [format!("k{i}"), format!("x{i}"), format!("U{i:05}")] {
            let found = store.query_message("Gap", &key, 4, 0, i64::MAX).unwrap();
            assert_eq!(found.len(), 1, "{key}");
            assert_eq!(found[0].queue_offset, i64::from(i));
        }
    }
    store.close().unwrap();
    let after = index_files(&d);
    // The files that were there are as they were; the new one sorts between the neighbours.
    let added: Vec<_> = after
        .iter()
        .filter(|(n, _)| !kept.iter().any(|(k, _)| k == n))
        .collect();
    assert!(!added.is_empty());
    for (name, _) in &added {
        assert_eq!(name.len(), 18, "{name}");
        assert!(name.as_str() > before[1].0.as_str() && name.as_str() < before[3].0.as_str());
    }
    for (name, bytes) in &kept {
        let now = after.iter().find(|(n, _)| n == name).unwrap();
        assert!(&now.1 == bytes, "{name} changed");
    }
    // Nothing is missing any more: opening again changes nothing.
    let store = MessageStore::open(&d, config()).unwrap();
    store.close().unwrap();
    assert!(index_files(&d) == after);
    let _ = std::fs::remove_dir_all(&d);
}
