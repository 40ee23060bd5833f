//! Retention through the public store API, on real files: expired commitlog segments removed by
//! time in batches (the deletion rules of RocketMQ's DefaultMessageStoreCleanFilesTest and
//! MappedFileQueueTest), consume queue and index files wholly below the new minimum, the
//! minimum offsets afterwards and after a restart, readers of removed ranges, and a read-only
//! store following a writer's deletions. Modification times are set back with `utimensat`.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{copy_store, TempDir};
use rmqstore_core::read::{GetMessageStatus, TagFilter};
use rmqstore_core::{now_millis, Message, MessageStore, StoreConfig, StoreError};

/// Commitlog segment size.
const SEG: i64 = 64 * 1024;
/// Consume queue units per segment.
const UNITS: i64 = 10;
/// Body size: 7 messages per commitlog segment.
const BODY: usize = 9000;
const HOUR_MS: i64 = 3600 * 1000;

fn small() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: SEG,
        mapped_file_size_consume_queue: 20 * UNITS,
        max_hash_slot_num: 64,
        max_index_num: 20,
        ..StoreConfig::default()
    }
}

fn message(i: usize) -> Message {
    let mut body = format!("m-{i}-").into_bytes();
    body.resize(BODY, b'x');
    Message {
        topic: "T".into(),
        body,
        queue_id: 0,
        born_timestamp: now_millis(),
        properties: vec![("KEYS".into(), format!("k{i}"))],
        ..Message::default()
    }
}

fn drain(store: &MessageStore) {
    while store
        .dispatch_step(64 << 20, Duration::ZERO)
        .unwrap()
        .behind
        > 0
    {}
}

/// Puts messages until the commitlog has `segments` segments (the last one partly written);
/// returns the commitlog offset of each message.
fn fill_segments(store: &MessageStore, segments: usize) -> Vec<i64> {
    let mut offsets = Vec::new();
    let mut i = 0;
    while store.commitlog_segments().unwrap().len() < segments
        || store.max_phy_offset().unwrap() % SEG == 0
    {
        let r = store.put_message(&message(i)).unwrap();
        assert!(r.is_ok(), "{:?}", r.status);
        offsets.push(r.wrote_offset);
        i += 1;
    }
    drain(store);
    offsets
}

/// Sets a file's modification time `ago_ms` in the past.
fn set_mtime_ago(path: &Path, ago_ms: i64) {
    let t = now_millis() - ago_ms;
    let ts = libc::timespec {
        tv_sec: t / 1000,
        tv_nsec: (t % 1000) * 1_000_000,
    };
    let times = [ts, ts];
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string and two timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
    assert_eq!(rc, 0, "utimensat {}", path.display());
}

fn age_all(store: &MessageStore, ago_ms: i64) {
    for p in store.commitlog_segments().unwrap() {
        set_mtime_ago(&p, ago_ms);
    }
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(d) => d.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

fn get(store: &MessageStore, offset: i64) -> rmqstore_core::read::GetMessageResult {
    store
        .get_message("T", 0, offset, 32, &TagFilter::parse("*"))
        .unwrap()
}

/// DefaultMessageStoreCleanFilesTest: 15 expired segments with deleteFileBatchMax 10 are
/// removed 10 then 5; the last (writing) one never.
#[test]
fn expired_segments_go_in_batches_and_never_the_last() {
    let d = TempDir::new("clean", "batches");
    let store = MessageStore::open(d.path(), small()).unwrap();
    fill_segments(&store, 16);
    let segs = store.commitlog_segments().unwrap();
    assert_eq!(segs.len(), 16);
    age_all(&store, 100 * HOUR_MS);
    let first = store
        .delete_expired_commit_log_files(72 * HOUR_MS, 0, 120_000, false, 10)
        .unwrap();
    assert_eq!(first, segs[..10].to_vec());
    assert!(segs[..10].iter().all(|p| !p.exists()));
    assert_eq!(store.min_phy_offset().unwrap(), 10 * SEG);
    let second = store
        .delete_expired_commit_log_files(72 * HOUR_MS, 0, 120_000, false, 10)
        .unwrap();
    assert_eq!(second, segs[10..15].to_vec());
    assert_eq!(store.commitlog_segments().unwrap(), vec![segs[15].clone()]);
    assert_eq!(store.min_phy_offset().unwrap(), 15 * SEG);
    // Nothing left but the segment being written, however old.
    assert!(store
        .delete_expired_commit_log_files(0, 0, 0, true, 10)
        .unwrap()
        .is_empty());
    assert!(segs[15].exists());
    // Puts go on.
    let r = store.put_message(&message(9999)).unwrap();
    assert!(r.is_ok());
}

/// MappedFileQueueTest.testDeleteExpiredFileByTime: deletion stops at the first segment that
/// has not expired, even when later ones have (nothing is removed from the middle).
#[test]
fn deletion_by_time_stops_at_the_first_live_segment() {
    let d = TempDir::new("clean", "stops");
    let store = MessageStore::open(d.path(), small()).unwrap();
    fill_segments(&store, 8);
    let segs = store.commitlog_segments().unwrap();
    age_all(&store, 80 * HOUR_MS);
    set_mtime_ago(&segs[3], HOUR_MS);
    let removed = store
        .delete_expired_commit_log_files(72 * HOUR_MS, 0, 120_000, false, 10)
        .unwrap();
    assert_eq!(removed, segs[..3].to_vec());
    assert!(segs[3..].iter().all(|p| p.exists()));
    // Just under the reserved time: kept; just over: removed.
    set_mtime_ago(&segs[3], 72 * HOUR_MS - 60_000);
    assert!(store
        .delete_expired_commit_log_files(72 * HOUR_MS, 0, 120_000, false, 10)
        .unwrap()
        .is_empty());
    set_mtime_ago(&segs[3], 72 * HOUR_MS + 1000);
    let removed = store
        .delete_expired_commit_log_files(72 * HOUR_MS, 0, 120_000, false, 10)
        .unwrap();
    assert_eq!(removed, segs[3..7].to_vec());
    // clean_at_once ignores the times (the disk is full / a manual delete).
    drop(store);
    let d = TempDir::new("clean", "at-once");
    let store = MessageStore::open(d.path(), small()).unwrap();
    fill_segments(&store, 4);
    let segs = store.commitlog_segments().unwrap();
    assert!(store
        .delete_expired_commit_log_files(72 * HOUR_MS, 0, 120_000, false, 10)
        .unwrap()
        .is_empty());
    let removed = store
        .delete_expired_commit_log_files(72 * HOUR_MS, 0, 120_000, true, 10)
        .unwrap();
    assert_eq!(removed, segs[..3].to_vec());
}

/// The sleep between two deletions (deletePhysicFilesInterval) is honoured, and not after the
/// last one of a round.
#[test]
fn interval_between_deletions() {
    let d = TempDir::new("clean", "interval");
    let store = MessageStore::open(d.path(), small()).unwrap();
    fill_segments(&store, 4);
    let t = std::time::Instant::now();
    let removed = store
        .delete_expired_commit_log_files(0, 60, 0, true, 2)
        .unwrap();
    assert_eq!(removed.len(), 2);
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(60), "{took:?}");
    assert!(took < Duration::from_millis(120 + 500), "{took:?}");
}

/// Bad arguments are typed errors, never a panic; a read-only store refuses.
#[test]
fn arguments_are_checked() {
    let d = TempDir::new("clean", "args");
    let store = MessageStore::open(d.path(), small()).unwrap();
    fill_segments(&store, 2);
    for (e, i, f, b) in [(-1, 0, 0, 1), (0, -1, 0, 1), (0, 0, -1, 1), (0, 0, 0, 0)] {
        assert!(matches!(
            store.delete_expired_commit_log_files(e, i, f, true, b),
            Err(StoreError::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        store.redelete_hanged_file(-1),
        Err(StoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        store.clean_consume_queues(-5),
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(store.commitlog_segments().unwrap().len(), 2);
    store.close().unwrap();
    let ro = MessageStore::open_read_only(d.path(), small()).unwrap();
    assert!(matches!(
        ro.delete_expired_commit_log_files(0, 0, 0, true, 10),
        Err(StoreError::ReadOnly(_))
    ));
    assert!(matches!(
        ro.clean_consume_queues(0),
        Err(StoreError::ReadOnly(_))
    ));
    drop(ro);
    let store = MessageStore::open(d.path(), small()).unwrap();
    store.close().unwrap();
    assert!(matches!(
        store.delete_expired_commit_log_files(0, 0, 0, true, 10),
        Err(StoreError::Closed)
    ));
}

/// DefaultMessageStoreCleanFilesTest: after the commitlog's expired segments go, the consume
/// queue and index files wholly below its new minimum go too; every minimum agrees and
/// readers of the removed range answer cleanly.
#[test]
fn consume_queue_and_index_files_below_the_minimum_go_and_readers_answer_cleanly() {
    let d = TempDir::new("clean", "cq");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let offsets = fill_segments(&store, 6);
    let n = offsets.len() as i64;
    let cq_dir = d.path().join("consumequeue").join("T").join("0");
    let index_dir = d.path().join("index");
    let cq_before = files_in(&cq_dir);
    let index_before = files_in(&index_dir);
    assert!(cq_before.len() >= 4, "{cq_before:?}");
    assert!(index_before.len() >= 2, "{index_before:?}");
    // Before any deletion nothing is removed.
    assert_eq!(store.clean_consume_queues(0).unwrap(), (0, 0));
    let removed = store
        .delete_expired_commit_log_files(0, 0, 0, true, 3)
        .unwrap();
    assert_eq!(removed.len(), 3);
    let min_phy = store.min_phy_offset().unwrap();
    assert_eq!(min_phy, 3 * SEG);
    // The first message at or after the new minimum.
    let first_kept = offsets.iter().position(|&o| o >= min_phy).unwrap() as i64;
    // Between the two rounds the queue still points into the removed range: a read there
    // is already OFFSET_TOO_SMALL at the first remaining message (never a silent skip, as
    // RocketMQ's MESSAGE_WAS_REMOVING with a next offset past the removed messages would be).
    let r = get(&store, 0);
    assert_eq!(r.status, GetMessageStatus::OffsetTooSmall);
    assert_eq!(r.next_begin_offset, first_kept);
    assert!(r.messages.is_empty());
    let (cq_removed, index_removed) = store.clean_consume_queues(0).unwrap();
    let per_file = UNITS;
    assert_eq!(cq_removed as i64, first_kept / per_file);
    assert_eq!(files_in(&cq_dir).len(), cq_before.len() - cq_removed);
    assert!(index_removed >= 1);
    assert_eq!(
        files_in(&index_dir).len(),
        index_before.len() - index_removed
    );
    assert_eq!(store.min_offset_in_queue("T", 0).unwrap(), first_kept);
    assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), n);
    assert_eq!(
        store.message_total_in_queue("T", 0).unwrap(),
        n - first_kept
    );
    // Idempotent.
    assert_eq!(store.clean_consume_queues(0).unwrap(), (0, 0));
    // Below the minimum: OFFSET_TOO_SMALL, next begin = the queue's minimum.
    for off in [0, first_kept - 1] {
        let r = get(&store, off);
        assert_eq!(r.status, GetMessageStatus::OffsetTooSmall);
        assert_eq!(r.next_begin_offset, first_kept);
        assert_eq!(r.min_offset, first_kept);
    }
    let r = get(&store, first_kept);
    assert_eq!(r.status, GetMessageStatus::Found);
    assert_eq!(r.messages[0].queue_offset, first_kept);
    assert_eq!(
        r.messages[0].commit_log_offset,
        offsets[first_kept as usize]
    );
    assert!(r.messages[0]
        .body()
        .starts_with(format!("m-{first_kept}-").as_bytes()));
    // A removed commitlog offset: None; one still there: the message.
    assert!(store.look_message_by_offset(offsets[0]).unwrap().is_none());
    assert!(store.look_message_by_offset(0).unwrap().is_none());
    let m = store
        .look_message_by_offset(offsets[first_kept as usize])
        .unwrap()
        .unwrap();
    assert_eq!(m.queue_offset, first_kept);
    // Store timestamps: -1 for a removed one.
    assert_eq!(store.message_store_timestamp("T", 0, 0).unwrap(), -1);
    assert!(store.message_store_timestamp("T", 0, first_kept).unwrap() > 0);
    assert!(store.earliest_message_time("T", 0).unwrap() > 0);
    // read_batch from 0 starts at the minimum.
    let b = store.read_batch("T", 0, 0, 1000, false, None).unwrap();
    assert_eq!(b.rows as i64, n - first_kept);
    assert_eq!(b.queue_offset[0], first_kept);
    assert_eq!(b.next_offset, n);
    // Keys of removed messages are not found; those still there are.
    let now = now_millis();
    assert!(store
        .query_message("T", "k0", 10, 0, now + 1000)
        .unwrap()
        .is_empty());
    let k = format!("k{first_kept}");
    let found = store.query_message("T", &k, 10, 0, now + 1000).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].queue_offset, first_kept);
}

/// A restart after deletion: the store loads with a first segment that does not start at 0,
/// and every minimum, message and put is as before the restart (after a clean stop and after a
/// crash).
#[test]
fn restart_after_deletion() {
    for crash in [false, true] {
        let d = TempDir::new("clean", if crash { "restart-crash" } else { "restart" });
        let store = MessageStore::open(d.path(), small()).unwrap();
        let offsets = fill_segments(&store, 6);
        let n = offsets.len() as i64;
        store
            .delete_expired_commit_log_files(0, 0, 0, true, 4)
            .unwrap();
        store.clean_consume_queues(0).unwrap();
        let min_q = store.min_offset_in_queue("T", 0).unwrap();
        let min_phy = store.min_phy_offset().unwrap();
        assert_eq!(min_phy, 4 * SEG);
        store.flush().unwrap();
        // A crash: the files as they are while the store is open (abort marker present).
        let crashed = TempDir::new("clean", "restart-crash-copy");
        let dir = if crash {
            copy_store(d.path(), crashed.path());
            drop(store);
            crashed.path()
        } else {
            store.close().unwrap();
            d.path()
        };
        let store = MessageStore::open(dir, small()).unwrap();
        assert_eq!(store.recovery_report().unwrap().abnormal, crash);
        assert_eq!(store.min_phy_offset().unwrap(), min_phy);
        assert_eq!(store.min_offset_in_queue("T", 0).unwrap(), min_q);
        assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), n);
        let r = get(&store, 0);
        assert_eq!(r.status, GetMessageStatus::OffsetTooSmall);
        assert_eq!(r.next_begin_offset, min_q);
        let r = get(&store, min_q);
        assert_eq!(r.status, GetMessageStatus::Found);
        assert_eq!(r.messages[0].commit_log_offset, offsets[min_q as usize]);
        let put = store.put_message(&message(10_000)).unwrap();
        assert!(put.is_ok());
        assert_eq!(put.queue_offset, n);
        drain(&store);
        assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), n + 1);
        store.close().unwrap();
    }
}

/// A read-only store (as another process opens it) follows the writer's deletions: the
/// minimum moves, removed offsets are too small, the rest still reads, nothing fails.
#[test]
fn read_only_store_follows_deletions() {
    let d = TempDir::new("clean", "ro");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let offsets = fill_segments(&store, 6);
    store.flush().unwrap();
    let ro = MessageStore::open_read_only(d.path(), small()).unwrap();
    let r = get(&ro, 0);
    assert_eq!(r.status, GetMessageStatus::Found);
    assert_eq!(ro.min_phy_offset().unwrap(), 0);
    store
        .delete_expired_commit_log_files(0, 0, 0, true, 3)
        .unwrap();
    store.clean_consume_queues(0).unwrap();
    let min_q = store.min_offset_in_queue("T", 0).unwrap();
    assert!(min_q > 0);
    // The read-only side looks for removed segments every few milliseconds.
    std::thread::sleep(Duration::from_millis(50));
    let r = get(&ro, 0);
    assert_eq!(r.status, GetMessageStatus::OffsetTooSmall, "{r:?}");
    assert_eq!(r.next_begin_offset, min_q);
    assert_eq!(ro.min_offset_in_queue("T", 0).unwrap(), min_q);
    assert_eq!(ro.min_phy_offset().unwrap(), 3 * SEG);
    assert!(ro.look_message_by_offset(offsets[0]).unwrap().is_none());
    let r = get(&ro, min_q);
    assert_eq!(r.status, GetMessageStatus::Found);
    assert_eq!(r.messages[0].commit_log_offset, offsets[min_q as usize]);
    // A read-only store opened after the deletion starts at the new minimum.
    let ro2 = MessageStore::open_read_only(d.path(), small()).unwrap();
    assert_eq!(ro2.min_offset_in_queue("T", 0).unwrap(), min_q);
    assert_eq!(get(&ro2, 0).status, GetMessageStatus::OffsetTooSmall);
}

/// DefaultMessageStoreCleanFilesTest's store: one message per 4 KiB commitlog segment (the
/// smallest allowed), 7 units per consume queue segment, 7 keys per index file.
fn one_message_per_segment() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: 4096,
        mapped_file_size_consume_queue: 7 * 20,
        max_hash_slot_num: 100,
        max_index_num: 8,
        ..StoreConfig::default()
    }
}

/// Puts DefaultMessageStoreCleanFilesTest's 55 messages ("hello" keys), one per segment.
fn put_55(store: &MessageStore) {
    for i in 0..55 {
        let m = Message {
            topic: "test".into(),
            body: vec![b'b'; 3000],
            queue_id: 0,
            born_timestamp: now_millis(),
            properties: vec![("KEYS".into(), "hello".into())],
            ..Message::default()
        };
        let r = store.put_message(&m).unwrap();
        assert!(r.is_ok(), "{:?}", r.status);
        assert_eq!(r.wrote_offset, i * 4096, "one message per segment");
    }
    drain(store);
    store.flush().unwrap();
}

struct Counts {
    commitlog: usize,
    cq: usize,
    index: usize,
}

fn counts(store: &MessageStore, root: &Path) -> Counts {
    Counts {
        commitlog: store.commitlog_segments().unwrap().len(),
        cq: files_in(&root.join("consumequeue").join("test").join("0")).len(),
        index: files_in(&root.join("index")).len(),
    }
}

/// DefaultMessageStoreCleanFilesTest.testDeleteExpiredFilesByTimeUp: 15 of 55 segments
/// expired; each round (commitlog, then consume queues and index) removes at most 10, so 10
/// then 5, with the consume queue and index files whose entries all point below the new
/// minimum (floor(removed / 7) of each).
#[test]
fn clean_files_test_delete_expired_files_by_time_up() {
    let d = TempDir::new("clean", "time-up");
    let store = MessageStore::open(d.path(), one_message_per_segment()).unwrap();
    put_55(&store);
    let c = counts(&store, d.path());
    assert_eq!((c.commitlog, c.cq, c.index), (55, 8, 8));
    let reserved = HOUR_MS; // fileReservedTime = 1
    let segs = store.commitlog_segments().unwrap();
    for p in &segs[..15] {
        set_mtime_ago(p, reserved * 2);
    }
    let mut file_count: i64 = 15;
    for a in 1..=2i64 {
        store
            .delete_expired_commit_log_files(reserved, 0, 120_000, false, 10)
            .unwrap();
        store.clean_consume_queues(0).unwrap();
        let expect_deleted = if file_count >= 10 {
            a * 10
        } else {
            (a - 1) * 10 + file_count
        } as usize;
        let now = counts(&store, d.path());
        assert_eq!(now.commitlog, 55 - expect_deleted);
        assert_eq!(now.cq, 8 - expect_deleted / 7);
        assert_eq!(now.index, 8 - expect_deleted / 7);
        assert_eq!(
            store.min_phy_offset().unwrap(),
            expect_deleted as i64 * 4096
        );
        assert_eq!(
            store.min_offset_in_queue("test", 0).unwrap(),
            expect_deleted as i64
        );
        file_count -= 10;
    }
    // Nothing else has expired.
    assert!(store
        .delete_expired_commit_log_files(reserved, 0, 120_000, false, 10)
        .unwrap()
        .is_empty());
}

/// DefaultMessageStoreCleanFilesTest.testDeleteFilesImmediatelyBySpaceFull: cleaning at once
/// (the disk is full) removes 10 segments a round whatever their times, down to the last one.
#[test]
fn clean_files_test_delete_files_immediately() {
    let d = TempDir::new("clean", "immediately");
    let store = MessageStore::open(d.path(), one_message_per_segment()).unwrap();
    put_55(&store);
    let mut a = 1;
    while 55 - 10 * (a - 1) >= 10 {
        let removed = store
            .delete_expired_commit_log_files(HOUR_MS, 0, 120_000, true, 10)
            .unwrap();
        assert_eq!(removed.len(), 10);
        store.clean_consume_queues(0).unwrap();
        let now = counts(&store, d.path());
        let deleted = 10 * a;
        assert_eq!(now.commitlog, 55 - deleted);
        assert_eq!(now.cq, 8 - deleted / 7);
        assert_eq!(now.index, 8 - deleted / 7);
        a += 1;
    }
    // 5 left: 4 go, the last (being written) stays.
    let removed = store
        .delete_expired_commit_log_files(HOUR_MS, 0, 120_000, true, 10)
        .unwrap();
    assert_eq!(removed.len(), 4);
    store.clean_consume_queues(0).unwrap();
    let now = counts(&store, d.path());
    assert_eq!(now.commitlog, 1);
    // The consume queue and index keep their last file, pointing at the last message.
    assert_eq!((now.cq, now.index), (1, 1));
    assert_eq!(store.min_offset_in_queue("test", 0).unwrap(), 54);
    assert_eq!(store.max_offset_in_queue("test", 0).unwrap(), 55);
    let r = get_topic(&store, "test", 0);
    assert_eq!(r.status, GetMessageStatus::OffsetTooSmall);
    assert_eq!(r.next_begin_offset, 54);
    assert_eq!(
        get_topic(&store, "test", 54).status,
        GetMessageStatus::Found
    );
    let found = store
        .query_message("test", "hello", 100, 0, now_millis() + 1000)
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].queue_offset, 54);
}

fn get_topic(
    store: &MessageStore,
    topic: &str,
    offset: i64,
) -> rmqstore_core::read::GetMessageResult {
    store
        .get_message(topic, 0, offset, 32, &TagFilter::parse("*"))
        .unwrap()
}

/// Readers running while segments are deleted under them (some held mid-read, some forced)
/// never fail: every message they get is whole and the right one, every other answer is a
/// status.
#[test]
fn readers_during_deletion_never_fail() {
    let d = TempDir::new("clean", "concurrent");
    let store = std::sync::Arc::new(MessageStore::open(d.path(), small()).unwrap());
    let offsets = fill_segments(&store, 12);
    let n = offsets.len() as i64;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Each reader's count of whole passes: every deletion waits for a new pass of each, so the
    // readers run between deletions however busy the machine is.
    let passes: std::sync::Arc<Vec<std::sync::atomic::AtomicU64>> = std::sync::Arc::new(
        (0..2)
            .map(|_| std::sync::atomic::AtomicU64::new(0))
            .collect(),
    );
    let readers: Vec<_> = (0..2)
        .map(|k| {
            let store = store.clone();
            let stop = stop.clone();
            let offsets = offsets.clone();
            let passes = passes.clone();
            std::thread::spawn(move || {
                let mut found = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for off in (k..n).step_by(3) {
                        let r = get(&store, off);
                        for m in &r.messages {
                            assert_eq!(m.commit_log_offset, offsets[m.queue_offset as usize]);
                            assert!(m
                                .body()
                                .starts_with(format!("m-{}-", m.queue_offset).as_bytes()));
                            found += 1;
                        }
                        let b = store.read_batch("T", 0, off, 16, false, None).unwrap();
                        assert!(b.queue_offset.iter().all(|&q| q >= off));
                        let _ = store.look_message_by_offset(offsets[off as usize]).unwrap();
                        let _ = store.message_store_timestamp("T", 0, off).unwrap();
                    }
                    passes[k as usize].fetch_add(1, std::sync::atomic::Ordering::Release);
                }
                found
            })
        })
        .collect();
    let next_passes = |seen: &mut Vec<u64>| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        for (k, p) in passes.iter().enumerate() {
            while p.load(std::sync::atomic::Ordering::Acquire) <= seen[k] {
                assert!(
                    std::time::Instant::now() < deadline,
                    "reader {k} made no pass in 60 s"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            seen[k] = p.load(std::sync::atomic::Ordering::Acquire);
        }
    };
    let mut seen = vec![0u64; 2];
    for _ in 0..11 {
        next_passes(&mut seen);
        // Forcible interval 0: a segment a reader holds goes at once, under it.
        store
            .delete_expired_commit_log_files(0, 0, 0, true, 1)
            .unwrap();
        store.clean_consume_queues(0).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    assert_eq!(store.commitlog_segments().unwrap().len(), 1);
    assert!(store.hanged_commit_log_files().unwrap().is_empty());
    let min_q = store.min_offset_in_queue("T", 0).unwrap();
    assert_eq!(get(&store, min_q).status, GetMessageStatus::Found);
}

/// MappedFileQueueTest.testDeleteExpiredFileByTime: of 50 segments the first 5 and those
/// after the 21st have expired; with a batch of 50 only the first 5 go (deletion never skips
/// a live segment to reach expired ones behind it).
#[test]
fn mapped_file_queue_test_delete_expired_file_by_time() {
    let d = TempDir::new("clean", "mfq-time");
    let store = MessageStore::open(d.path(), one_message_per_segment()).unwrap();
    for _ in 0..50 {
        let m = Message {
            topic: "test".into(),
            body: vec![0; 3000],
            born_timestamp: now_millis(),
            ..Message::default()
        };
        assert!(store.put_message(&m).unwrap().is_ok());
    }
    let segs = store.commitlog_segments().unwrap();
    assert_eq!(segs.len(), 50);
    let expired_ms = 100 * 1000;
    for (i, p) in segs.iter().enumerate() {
        if !(5..=20).contains(&i) {
            set_mtime_ago(p, expired_ms * 2);
        }
    }
    let removed = store
        .delete_expired_commit_log_files(expired_ms, 0, 0, false, 50)
        .unwrap();
    assert_eq!(removed, segs[..5].to_vec());
    assert_eq!(store.commitlog_segments().unwrap().len(), 45);
}
