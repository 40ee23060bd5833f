//! Commitlog behaviour through the public store API, on real files.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{copy_store, TempDir};
use rmqstore_core::format::{
    check_record, property, RecordCheck, BLANK_MAGIC_CODE, END_FILE_MIN_BLANK_LENGTH,
};
use rmqstore_core::now_millis;
use rmqstore_core::Batch;
use rmqstore_core::{
    FlushDiskType, Message, MessageStore, PutMessageStatus, StoreConfig, StoreError,
};

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
    let dir = TempDir::new("it", "roll");
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
    let dir = TempDir::new("it", "batch");
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
    let dir = TempDir::new("it", "reopen");
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
    let dir = TempDir::new("it", "damage");
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
    let dir = TempDir::new("it", "lock");
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
    let dir = TempDir::new("it", "closed");
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
    let dir = TempDir::new("it", "alloc");
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

// -- segment ends ---------------------------------------------------------------------------

/// Size of the record `msg(topic, 0, body, "k")` takes, measured by a put into a scratch store
/// (`test` names the store: tests run at the same time).
fn record_size(test: &str, topic: &str, body_len: usize) -> i64 {
    let dir = TempDir::new("it", &format!("size-{test}"));
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let r = store
        .put_message(&msg(topic, 0, &vec![1u8; body_len], "k"))
        .unwrap();
    store.close().unwrap();
    r.wrote_bytes
}

#[test]
fn a_record_may_leave_exactly_the_blank_records_room_and_no_less() {
    let min_blank = i64::from(END_FILE_MIN_BLANK_LENGTH);
    let overhead = record_size("exact", "T", 0);
    // Ends exactly END_FILE_MIN_BLANK_LENGTH before the end of the segment: it stays there,
    // and the next record rolls behind an 8-byte blank record.
    let dir = TempDir::new("it", "exact");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let body = (SEG - min_blank - overhead) as usize;
    let r = store
        .put_message(&msg("T", 0, &vec![4u8; body], "k"))
        .unwrap();
    assert_eq!((r.wrote_offset, r.wrote_bytes), (0, SEG - min_blank));
    let next = store.put_message(&msg("T", 0, b"next", "k")).unwrap();
    assert_eq!((next.wrote_offset, next.queue_offset), (SEG, 1));
    let seg0 = segment_bytes(&store, 0);
    let tail = &seg0[(SEG - min_blank) as usize..];
    assert_eq!(check_record(tail, true), RecordCheck::Blank { size: 8 });
    store.close().unwrap();

    // One byte longer leaves less than the blank record needs: the record itself rolls to the
    // next segment, and the blank record claims everything after the records before it.
    let dir = TempDir::new("it", "over");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let first = store.put_message(&msg("T", 0, &[1u8; 100], "k")).unwrap();
    let body = (SEG - min_blank - first.wrote_bytes - overhead + 1) as usize;
    let r = store
        .put_message(&msg("T", 0, &vec![5u8; body], "k"))
        .unwrap();
    assert_eq!((r.wrote_offset, r.queue_offset), (SEG, 1));
    let seg0 = segment_bytes(&store, 0);
    let free = SEG - first.wrote_bytes;
    assert_eq!(
        check_record(&seg0[first.wrote_bytes as usize..], true),
        RecordCheck::Blank { size: free as i32 }
    );
    // Both records read back, and recovery crosses the blank record.
    store.close().unwrap();
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    assert_eq!(store.max_phy_offset().unwrap(), SEG + r.wrote_bytes);
    let m = store.look_message_by_offset(SEG).unwrap().unwrap();
    assert_eq!(m.body().len(), body);
    // The blank record is not a message.
    assert!(matches!(
        store.look_message_by_offset(first.wrote_bytes),
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(store.next_queue_offset("T", 0).unwrap(), 2);
    store.close().unwrap();
}

#[test]
fn a_record_larger_than_a_segment_can_hold_is_refused() {
    let dir = TempDir::new("it", "too-big");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let overhead = record_size("too-big", "T", 0);
    let fits = (SEG - i64::from(END_FILE_MIN_BLANK_LENGTH) - overhead) as usize;
    let r = store
        .put_message(&msg("T", 0, &vec![1u8; fits + 1], "k"))
        .unwrap();
    assert_eq!(r.status, PutMessageStatus::MessageIllegal);
    assert_eq!(store.max_phy_offset().unwrap(), 0);
    assert_eq!(store.next_queue_offset("T", 0).unwrap(), 0);
    let r = store
        .put_message(&msg("T", 0, &vec![1u8; fits], "k"))
        .unwrap();
    assert!(r.is_ok());
    assert_eq!((r.wrote_offset, r.queue_offset), (0, 0));
    store.close().unwrap();
}

// -- recovery -------------------------------------------------------------------------------

#[test]
fn a_torn_last_record_is_cut_at_its_start_after_a_crash() {
    let dir = TempDir::new("it", "torn");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let body = vec![6u8; 700];
    let mut rs = Vec::new();
    for i in 0..12 {
        let r = store.put_message(&msg("T", i % 2, &body, "k")).unwrap();
        assert!(r.is_ok());
        rs.push(r);
    }
    // The last record starts a segment after an earlier one ended in a blank record.
    let last = rs.last().unwrap().clone();
    assert!(last.wrote_offset >= SEG);
    let crashed = TempDir::new("it", "torn-copy");
    copy_store(dir.path(), crashed.path());
    store.close().unwrap();
    // The crash tore the last record: only its first half reached the file.
    let seg_path = crashed
        .path()
        .join("commitlog")
        .join(format!("{:020}", last.wrote_offset / SEG * SEG));
    let mut bytes = std::fs::read(&seg_path).unwrap();
    let at = (last.wrote_offset % SEG) as usize;
    let half = at + last.wrote_bytes as usize / 2;
    bytes[half..].fill(0);
    std::fs::write(&seg_path, &bytes).unwrap();

    let store = MessageStore::open(crashed.path(), small_config()).unwrap();
    let report = store.recovery_report().unwrap();
    assert!(
        report.abnormal,
        "the copy was taken while the store was open"
    );
    assert_eq!(report.process_offset, last.wrote_offset);
    assert_eq!(report.discarded_bytes, (half - at) as i64);
    assert!(report.stop_reason.is_some());
    assert_eq!(store.max_phy_offset().unwrap(), last.wrote_offset);
    assert!(store
        .look_message_by_offset(last.wrote_offset)
        .unwrap()
        .is_none());
    let before = &rs[rs.len() - 2];
    assert!(store
        .look_message_by_offset(before.wrote_offset)
        .unwrap()
        .is_some());
    // The lost message's queue offset is given again.
    let q = 11 % 2;
    assert_eq!(store.next_queue_offset("T", q).unwrap(), last.queue_offset);
    let again = store.put_message(&msg("T", q, b"again", "k")).unwrap();
    assert_eq!(
        (again.wrote_offset, again.queue_offset),
        (last.wrote_offset, last.queue_offset)
    );
    // Nothing of the torn record is left behind the new one.
    store.flush().unwrap();
    let bytes = std::fs::read(&seg_path).unwrap();
    let end = at + again.wrote_bytes as usize;
    assert!(bytes[end..].iter().all(|&b| b == 0));
    store.close().unwrap();
}

#[test]
fn a_crash_copy_recovers_every_message_it_holds() {
    let dir = TempDir::new("it", "crash-all");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let mut rs = Vec::new();
    for i in 0..30 {
        let r = store
            .put_message(&msg("T", i % 3, &[i as u8; 250], &format!("k{i}")))
            .unwrap();
        rs.push(r);
    }
    let end = store.max_phy_offset().unwrap();
    let crashed = TempDir::new("it", "crash-all-copy");
    copy_store(dir.path(), crashed.path());
    store.close().unwrap();
    let store = MessageStore::open(crashed.path(), small_config()).unwrap();
    let report = store.recovery_report().unwrap();
    assert!(report.abnormal);
    assert_eq!(report.process_offset, end);
    assert_eq!(report.stop_reason, None);
    assert_eq!(report.discarded_bytes, 0);
    for (i, r) in rs.iter().enumerate() {
        let m = store
            .look_message_by_offset(r.wrote_offset)
            .unwrap()
            .unwrap();
        assert_eq!(m.property(property::KEYS), Some(format!("k{i}").as_str()));
    }
    for q in 0..3 {
        assert_eq!(store.next_queue_offset("T", q).unwrap(), 10);
    }
    store.close().unwrap();
}

// -- truncate_files -------------------------------------------------------------------------

#[test]
fn truncate_files_cuts_everything_from_a_message_on() {
    let dir = TempDir::new("it", "truncate");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let mut rs = Vec::new();
    for i in 0..40 {
        let r = store
            .put_message(&msg("T", i % 2, &[i as u8; 300], &format!("k{i}")))
            .unwrap();
        rs.push(r);
    }
    assert!(store.commitlog_segments().unwrap().len() >= 3);
    let cut = rs[21].clone();
    assert!(cut.wrote_offset >= SEG, "the cut is past the first segment");
    assert!(store.is_offset_aligned(cut.wrote_offset).unwrap());
    assert!(!store.is_offset_aligned(cut.wrote_offset + 1).unwrap());
    assert!(store.truncate_files(cut.wrote_offset).unwrap());
    assert_eq!(store.max_phy_offset().unwrap(), cut.wrote_offset);
    assert!(store
        .look_message_by_offset(rs[20].wrote_offset)
        .unwrap()
        .is_some());
    assert!(store
        .look_message_by_offset(cut.wrote_offset)
        .unwrap()
        .is_none());
    // Queue offsets are those below the cut (messages 0..21: 11 in queue 0, 10 in queue 1).
    assert_eq!(store.next_queue_offset("T", 0).unwrap(), 11);
    assert_eq!(store.next_queue_offset("T", 1).unwrap(), 10);
    assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), 11);
    assert_eq!(store.max_offset_in_queue("T", 1).unwrap(), 10);
    // No segment is left past the one holding the cut, and its tail is zero.
    let segments = store.commitlog_segments().unwrap();
    assert_eq!(segments.len() as i64, cut.wrote_offset / SEG + 1);
    let tail = segment_bytes(&store, segments.len() - 1);
    assert!(tail[(cut.wrote_offset % SEG) as usize..]
        .iter()
        .all(|&b| b == 0));
    // Writing continues at the cut.
    let r = store.put_message(&msg("T", 1, b"after", "after")).unwrap();
    assert_eq!((r.wrote_offset, r.queue_offset), (cut.wrote_offset, 10));
    let end = store.max_phy_offset().unwrap();
    store.close().unwrap();
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    assert_eq!(store.max_phy_offset().unwrap(), end);
    assert_eq!(store.next_queue_offset("T", 1).unwrap(), 11);
    assert_eq!(store.next_queue_offset("T", 0).unwrap(), 11);
    store.close().unwrap();
}

#[test]
fn truncate_files_refuses_a_misaligned_offset_and_ignores_the_end() {
    let dir = TempDir::new("it", "truncate-refuse");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let mut rs = Vec::new();
    for i in 0..10 {
        rs.push(store.put_message(&msg("T", 0, &[i; 100], "k")).unwrap());
    }
    let end = store.max_phy_offset().unwrap();
    assert!(matches!(
        store.truncate_files(rs[4].wrote_offset + 7),
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(store.max_phy_offset().unwrap(), end);
    assert!(!store.truncate_files(end).unwrap());
    assert!(!store.truncate_files(end + 1000).unwrap());
    assert_eq!(store.max_phy_offset().unwrap(), end);
    assert_eq!(store.next_queue_offset("T", 0).unwrap(), 10);
    assert!(store.truncate_files(0).unwrap());
    assert_eq!(store.max_phy_offset().unwrap(), 0);
    assert_eq!(store.next_queue_offset("T", 0).unwrap(), 0);
    let r = store.put_message(&msg("T", 0, b"fresh", "k")).unwrap();
    assert_eq!((r.wrote_offset, r.queue_offset), (0, 0));
    store.close().unwrap();
}

// -- flush and commit positions -------------------------------------------------------------

#[test]
fn async_flush_positions_follow_the_flush_rounds() {
    let dir = TempDir::new("it", "async-flush");
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let start = store.flushed_where().unwrap();
    let mut end = 0;
    for i in 0..5 {
        let r = store.put_message(&msg("T", 0, &[i; 100], "k")).unwrap();
        assert_eq!(r.status, PutMessageStatus::PutOk);
        end = r.wrote_offset + r.wrote_bytes;
    }
    // Appends are readable (and dispatchable) at once, forced only by a flush round.
    assert_eq!(store.max_phy_offset().unwrap(), end);
    assert_eq!(store.confirm_offset().unwrap(), end);
    assert_eq!(store.committed_where().unwrap(), end);
    assert_eq!(store.flushed_where().unwrap(), start);
    // A round that wants more pages than are written waits; one that wants any forces.
    assert_eq!(store.flush_commitlog(4).unwrap(), start);
    assert_eq!(store.flush_commitlog(0).unwrap(), end);
    assert_eq!(store.flushed_where().unwrap(), end);
    // Across a segment end a round forces one segment at a time, flush() everything.
    for i in 0..30 {
        store.put_message(&msg("T", 0, &[i; 300], "k")).unwrap();
    }
    let end = store.max_phy_offset().unwrap();
    assert!(end > 2 * SEG);
    let first = store.flush_commitlog(0).unwrap();
    assert!(first < end);
    assert_eq!(store.flush().unwrap(), end);
    assert_eq!(store.flushed_where().unwrap(), end);
    store.close().unwrap();
}

#[test]
fn with_the_transient_pool_appends_are_readable_once_committed() {
    let dir = TempDir::new("it", "pool");
    let cfg = StoreConfig {
        transient_store_pool_enable: true,
        transient_store_pool_size: 2,
        wake_commit_when_put_message: false,
        ..small_config()
    };
    let store = MessageStore::open(dir.path(), cfg).unwrap();
    let r = store.put_message(&msg("T", 0, b"buffered", "k")).unwrap();
    assert!(r.is_ok());
    let end = r.wrote_offset + r.wrote_bytes;
    // In the write buffer only: not readable, not dispatchable, not on disk.
    assert_eq!(store.committed_where().unwrap(), 0);
    assert_eq!(store.max_phy_offset().unwrap(), 0);
    assert_eq!(store.confirm_offset().unwrap(), 0);
    assert!(store.look_message_by_offset(0).unwrap().is_none());
    assert!(segment_bytes(&store, 0)[..8].iter().all(|&b| b == 0));
    // A commit round that wants a whole page leaves it; one that wants anything commits it.
    let step = store.commit_step(1, Duration::from_millis(1)).unwrap();
    assert!(!step.committed);
    let step = store.commit_step(0, Duration::from_millis(1)).unwrap();
    assert!(step.committed && !step.stopped);
    assert_eq!(store.committed_where().unwrap(), end);
    assert_eq!(store.max_phy_offset().unwrap(), end);
    let m = store.look_message_by_offset(0).unwrap().unwrap();
    assert_eq!(m.body(), b"buffered");
    assert!(store.flushed_where().unwrap() < end);
    assert_eq!(store.flush().unwrap(), end);
    store.close().unwrap();
}

// -- group commit ---------------------------------------------------------------------------

fn sync_config(timeout_ms: i64) -> StoreConfig {
    StoreConfig {
        flush_disk_type: FlushDiskType::SyncFlush,
        sync_flush_timeout: timeout_ms,
        ..small_config()
    }
}

/// Runs group-commit rounds on a thread until the services stop; returns the forces.
fn group_commit_service(store: &Arc<MessageStore>) -> std::thread::JoinHandle<u64> {
    store.attach_group_commit().unwrap();
    let store = store.clone();
    std::thread::spawn(move || loop {
        let step = store.group_commit_step(Duration::from_millis(10)).unwrap();
        if step.stopped {
            return step.forces;
        }
    })
}

#[test]
fn a_sync_put_returns_once_forced() {
    let dir = TempDir::new("it", "sync");
    let store = Arc::new(MessageStore::open(dir.path(), sync_config(5000)).unwrap());
    let service = group_commit_service(&store);
    for i in 0..20 {
        let r = store.put_message(&msg("S", 0, &[i; 50], "k")).unwrap();
        assert_eq!(r.status, PutMessageStatus::PutOk);
        assert!(store.flushed_where().unwrap() >= r.wrote_offset + r.wrote_bytes);
        // SYNC_FLUSH: dispatch reads only what is forced.
        assert!(store.confirm_offset().unwrap() >= r.wrote_offset + r.wrote_bytes);
    }
    let bodies: Vec<&[u8]> = vec![b"a", b"b", b"c"];
    let r = store
        .put_messages(&Batch {
            topic: "S",
            queue_id: 1,
            bodies: &bodies,
            properties: &[],
            flag: 0,
            born_timestamp: 1,
            born_host: None,
        })
        .unwrap();
    assert_eq!(r.status, PutMessageStatus::PutOk);
    assert!(store.flushed_where().unwrap() >= r.wrote_offset + r.wrote_bytes);
    assert!(store.group_commit_forces().unwrap() >= 1);
    store.stop_services();
    assert!(service.join().unwrap() >= 1);
    store.close().unwrap();
}

#[test]
fn concurrent_sync_puts_share_forces() {
    let dir = TempDir::new("it", "sync-share");
    let store = Arc::new(MessageStore::open(dir.path(), sync_config(5000)).unwrap());
    let service = group_commit_service(&store);
    let producers: Vec<_> = (0..16)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..20 {
                    let r = store
                        .put_message(&msg("G", t % 4, &[i; 64], &format!("{t}-{i}")))
                        .unwrap();
                    assert_eq!(r.status, PutMessageStatus::PutOk);
                    assert!(store.flushed_where().unwrap() >= r.wrote_offset + r.wrote_bytes);
                }
            })
        })
        .collect();
    producers.into_iter().for_each(|p| p.join().unwrap());
    let forces = store.group_commit_forces().unwrap();
    assert!((1..320).contains(&forces), "320 puts took {forces} forces");
    assert_eq!(store.group_commit_waiting().unwrap(), 0);
    store.stop_services();
    service.join().unwrap();
    store.close().unwrap();
}

#[test]
fn a_sync_put_times_out_without_a_force_and_is_still_stored() {
    let dir = TempDir::new("it", "sync-timeout");
    let store = MessageStore::open(dir.path(), sync_config(50)).unwrap();
    // A service is attached but runs no round.
    store.attach_group_commit().unwrap();
    let t = std::time::Instant::now();
    let r = store.put_message(&msg("S", 0, b"late", "late")).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(50));
    assert_eq!(r.status, PutMessageStatus::FlushDiskTimeout);
    assert!(r.is_ok(), "the append succeeded");
    assert_eq!(store.group_commit_waiting().unwrap(), 0);
    let end = r.wrote_offset + r.wrote_bytes;
    assert!(store.flushed_where().unwrap() < end);
    // Not forced, so not confirmed to dispatch; readable by offset all the same.
    assert!(store.confirm_offset().unwrap() < end);
    let m = store
        .look_message_by_offset(r.wrote_offset)
        .unwrap()
        .unwrap();
    assert_eq!(m.body(), b"late");
    assert_eq!(store.flush().unwrap(), end);
    assert_eq!(store.confirm_offset().unwrap(), end);
    store.close().unwrap();
}

#[test]
fn a_sync_put_with_wait_false_does_not_wait() {
    let dir = TempDir::new("it", "sync-nowait");
    let store = MessageStore::open(dir.path(), sync_config(10_000)).unwrap();
    store.attach_group_commit().unwrap();
    let mut m = msg("S", 0, b"now", "k");
    m.properties.push((property::WAIT.into(), "false".into()));
    let t = std::time::Instant::now();
    let r = store.put_message(&m).unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(r.status, PutMessageStatus::PutOk);
    assert!(store.flushed_where().unwrap() < r.wrote_offset + r.wrote_bytes);
    store.close().unwrap();
}

#[test]
fn without_a_group_commit_service_a_sync_put_forces_itself() {
    let dir = TempDir::new("it", "sync-self");
    let store = MessageStore::open(dir.path(), sync_config(5000)).unwrap();
    let r = store.put_message(&msg("S", 0, b"alone", "k")).unwrap();
    assert_eq!(r.status, PutMessageStatus::PutOk);
    assert!(store.flushed_where().unwrap() >= r.wrote_offset + r.wrote_bytes);
    assert_eq!(store.group_commit_forces().unwrap(), 0);
    store.close().unwrap();
}

#[test]
fn stopping_group_commit_releases_waiting_puts() {
    let dir = TempDir::new("it", "sync-stop");
    let store = Arc::new(MessageStore::open(dir.path(), sync_config(30_000)).unwrap());
    store.attach_group_commit().unwrap();
    let producers: Vec<_> = (0..4)
        .map(|i| {
            let store = store.clone();
            std::thread::spawn(move || {
                let t = std::time::Instant::now();
                let r = store.put_message(&msg("S", i, b"stuck", "k")).unwrap();
                (r.status, t.elapsed())
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.group_commit_waiting().unwrap() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "producers never waited"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    store.stop_services();
    for p in producers {
        let (status, waited) = p.join().unwrap();
        assert_eq!(status, PutMessageStatus::FlushDiskTimeout);
        assert!(waited < Duration::from_secs(20), "released by the stop");
    }
    assert_eq!(store.group_commit_waiting().unwrap(), 0);
    store.close().unwrap();
}
