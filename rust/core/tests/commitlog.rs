//! Commitlog behaviour through the public store API, on real files.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmqstore_core::commitlog::Batch;
use rmqstore_core::format::{
    check_record, property, RecordCheck, BLANK_MAGIC_CODE, END_FILE_MIN_BLANK_LENGTH,
};
use rmqstore_core::util::now_millis;
use rmqstore_core::{Message, MessageStore, PutMessageStatus, StoreConfig, StoreError};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("rmqstore-it-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SEG: i64 = 4096;

fn small_config() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: SEG,
        ..StoreConfig::default()
    }
}

fn msg(topic: &str, queue_id: i32, body: &[u8], key: &str) -> Message {
    Message {
        topic: topic.into(),
        body: body.to_vec(),
        queue_id,
        born_timestamp: now_millis(),
        properties: vec![
            (property::TAGS.into(), "TagA".into()),
            (property::KEYS.into(), key.into()),
        ],
        ..Message::default()
    }
}

fn segment_bytes(store: &MessageStore, idx: usize) -> Vec<u8> {
    std::fs::read(&store.commitlog_segments().unwrap()[idx]).unwrap()
}

#[test]
fn roll_writes_a_blank_record_and_continues_in_the_next_segment() {
    let dir = TempDir::new("roll");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let body = vec![7u8; 900];
    let mut offsets = Vec::new();
    for i in 0..10 {
        let r = store
            .put_message(&msg("TopicA", 0, &body, &format!("k{i}")))
            .unwrap();
        assert!(r.is_ok());
        assert_eq!(r.queue_offset, i);
        offsets.push(r.wrote_offset);
    }
    let rec = offsets[1] - offsets[0];
    let per_file = (SEG - i64::from(END_FILE_MIN_BLANK_LENGTH)) / rec;
    let segments = store.commitlog_segments().unwrap();
    assert!(segments.len() >= 3);
    for (i, s) in segments.iter().enumerate() {
        let name = s.file_name().unwrap().to_str().unwrap();
        assert_eq!(name, format!("{:020}", i as i64 * SEG));
        assert_eq!(std::fs::metadata(s).unwrap().len(), SEG as u64);
    }
    // The first segment holds `per_file` records, then the blank record claiming the rest.
    let first = segment_bytes(&store, 0);
    let blank_at = (per_file * rec) as usize;
    let remaining = i32::from_be_bytes(first[blank_at..blank_at + 4].try_into().unwrap());
    let magic = i32::from_be_bytes(first[blank_at + 4..blank_at + 8].try_into().unwrap());
    assert_eq!(magic, BLANK_MAGIC_CODE);
    assert_eq!(i64::from(remaining), SEG - blank_at as i64);
    assert_eq!(
        check_record(&first[blank_at..], true),
        RecordCheck::Blank { size: remaining }
    );
    // The next record starts the second segment at its first byte.
    assert_eq!(offsets[per_file as usize], SEG);
    for (i, &o) in offsets.iter().enumerate() {
        let m = store.look_message_by_offset(o).unwrap().unwrap();
        assert_eq!(m.queue_offset, i as i64);
        assert_eq!(m.commit_log_offset, o);
        assert_eq!(m.property(property::KEYS), Some(format!("k{i}").as_str()));
    }
    store.close().unwrap();
}

#[test]
fn a_batch_lands_whole_in_one_segment() {
    let dir = TempDir::new("batch");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let first = store
        .put_message(&msg("TopicA", 1, &[1u8; 2500], "a"))
        .unwrap();
    assert_eq!(first.wrote_offset, 0);
    let bodies: Vec<&[u8]> = vec![&[2u8; 300]; 5];
    let props = vec![(property::TAGS.to_string(), "TagB".to_string())];
    let r = store
        .put_messages(&Batch {
            topic: "TopicA",
            queue_id: 1,
            bodies: &bodies,
            properties: &props,
            flag: 3,
            born_timestamp: 1,
            born_host: None,
        })
        .unwrap();
    assert!(r.is_ok());
    // 5 records of ~400 bytes do not fit behind the first record: all go to segment 1.
    assert_eq!(r.wrote_offset, SEG);
    assert_eq!(r.queue_offset, 1);
    let offsets: Vec<i64> = r.record_offsets().collect();
    assert_eq!(offsets.len(), 5);
    let mut ts = None;
    for (i, &o) in offsets.iter().enumerate() {
        let m = store.look_message_by_offset(o).unwrap().unwrap();
        assert_eq!(m.queue_offset, 1 + i as i64);
        assert_eq!(m.flag, 3);
        assert_eq!(m.property(property::TAGS), Some("TagB"));
        assert_eq!(*ts.get_or_insert(m.store_timestamp), m.store_timestamp);
    }
    // A batch larger than a segment is refused whole and consumes nothing.
    let big: Vec<&[u8]> = vec![&[3u8; 1000]; 5];
    let r = store
        .put_messages(&Batch {
            topic: "TopicA",
            queue_id: 1,
            bodies: &big,
            properties: &[],
            flag: 0,
            born_timestamp: 1,
            born_host: None,
        })
        .unwrap();
    assert_eq!(r.status, PutMessageStatus::MessageIllegal);
    assert_eq!(store.next_queue_offset("TopicA", 1).unwrap(), 6);
    store.close().unwrap();
}

#[test]
fn reopen_recovers_position_and_queue_offsets() {
    let dir = TempDir::new("reopen");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let mut offsets = Vec::new();
    for i in 0..25 {
        let r = store
            .put_message(&msg("T", i % 3, &[i as u8; 333], "k"))
            .unwrap();
        assert!(r.is_ok());
        offsets.push(r.wrote_offset);
    }
    let max = store.max_phy_offset().unwrap();
    store.close().unwrap();
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    assert_eq!(store.max_phy_offset().unwrap(), max);
    let report = store.recovery_report().unwrap();
    // After a clean close the scan starts at the segment of the last dispatched message;
    // the queue offsets of the segments before it come from the consume queues.
    let size = small_config().mapped_file_size_commit_log;
    assert_eq!(report.start_offset, offsets[24] / size * size);
    assert!(report.start_offset > 0);
    let scanned = offsets
        .iter()
        .filter(|&&o| o >= report.start_offset)
        .count();
    assert_eq!(report.messages, scanned as u64);
    assert_eq!(report.stop_reason, None);
    for q in 0..3 {
        let expected = (0..25).filter(|i| i % 3 == q).count() as i64;
        assert_eq!(store.next_queue_offset("T", q).unwrap(), expected);
    }
    let r = store.put_message(&msg("T", 0, b"after", "k")).unwrap();
    assert_eq!(r.wrote_offset, max);
    assert_eq!(r.queue_offset, 9);
    store.close().unwrap();
}

#[test]
fn recovery_stops_at_a_damaged_record_and_zeroes_what_follows() {
    let dir = TempDir::new("damage");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let mut offsets = Vec::new();
    for i in 0..6 {
        offsets.push(
            store
                .put_message(&msg("T", 0, &[i as u8 + 1; 200], "k"))
                .unwrap()
                .wrote_offset,
        );
    }
    let end = store.max_phy_offset().unwrap();
    let seg0 = store.commitlog_segments().unwrap()[0].clone();
    store.close().unwrap();
    // Flip one body byte of the 4th record.
    let mut bytes = std::fs::read(&seg0).unwrap();
    let body_at = offsets[3] as usize + 88 + 10;
    bytes[body_at] ^= 0xFF;
    std::fs::write(&seg0, &bytes).unwrap();
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let report = store.recovery_report().unwrap();
    assert_eq!(report.process_offset, offsets[3]);
    assert_eq!(report.messages, 3);
    assert_eq!(report.stop_reason.as_deref(), Some("body CRC mismatch"));
    assert_eq!(report.discarded_bytes, end - offsets[3]);
    assert_eq!(store.max_phy_offset().unwrap(), offsets[3]);
    assert!(store.look_message_by_offset(offsets[2]).unwrap().is_some());
    assert!(store.look_message_by_offset(offsets[3]).unwrap().is_none());
    assert_eq!(store.next_queue_offset("T", 0).unwrap(), 3);
    // Everything after the truncation point is zero on disk.
    let bytes = std::fs::read(&seg0).unwrap();
    assert!(bytes[offsets[3] as usize..].iter().all(|&b| b == 0));
    // Writing goes on at the truncation point with the next queue offset.
    let r = store.put_message(&msg("T", 0, &[9; 10], "k")).unwrap();
    assert_eq!((r.wrote_offset, r.queue_offset), (offsets[3], 3));
    store.close().unwrap();
}

#[test]
fn the_lock_refuses_a_second_open_and_touches_nothing() {
    let dir = TempDir::new("lock");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    store.put_message(&msg("T", 0, b"x", "k")).unwrap();
    let before = std::fs::read(store.commitlog_segments().unwrap()[0].clone()).unwrap();
    match MessageStore::open(dir.path(), small_config()) {
        Err(StoreError::Locked { holder, .. }) => assert!(holder.contains("this process")),
        other => panic!("expected Locked, got {other:?}"),
    }
    assert_eq!(
        std::fs::read(store.commitlog_segments().unwrap()[0].clone()).unwrap(),
        before
    );
    assert_eq!(std::fs::read(dir.path().join("lock")).unwrap(), b"lock");
    store.close().unwrap();
    let again = MessageStore::open(dir.path(), small_config()).unwrap();
    again.close().unwrap();
}

#[test]
fn closed_store_answers_closed() {
    let dir = TempDir::new("closed");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    store.close().unwrap();
    store.close().unwrap();
    assert!(matches!(
        store.put_message(&msg("T", 0, b"x", "k")),
        Err(StoreError::Closed)
    ));
    assert!(matches!(store.max_phy_offset(), Err(StoreError::Closed)));
}

#[test]
fn the_allocation_service_preallocates_and_close_removes_unused_segments() {
    let dir = TempDir::new("alloc");
    let cfg = StoreConfig {
        mapped_file_size_commit_log: 64 * 1024,
        warm_mapped_file_enable: true,
        ..StoreConfig::default()
    };
    let store = Arc::new(MessageStore::open(dir.path(), cfg).unwrap());
    store.attach_allocation_service();
    let service = {
        let store = store.clone();
        std::thread::spawn(move || {
            let mut allocated = 0;
            loop {
                let step = store.allocation_service_step(Duration::from_millis(50));
                allocated += step.allocated;
                if step.stopped {
                    return allocated;
                }
            }
        })
    };
    let body = vec![5u8; 1000];
    for i in 0..200 {
        assert!(store
            .put_message(&msg("T", 0, &body, &i.to_string()))
            .unwrap()
            .is_ok());
    }
    let used = store.commitlog_segments().unwrap().len();
    assert!(used >= 3);
    // The next segment is made ahead of need.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.preallocated_offsets().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no pre-allocation");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(store.preallocated_offsets(), vec![used as i64 * 64 * 1024]);
    store.close().unwrap();
    let allocated = service.join().unwrap();
    assert!(allocated as usize >= used);
    let files = std::fs::read_dir(dir.path().join("commitlog"))
        .unwrap()
        .count();
    assert_eq!(files, used, "close deletes pre-allocated unused segments");
}
