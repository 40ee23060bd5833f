//! The prefault service's rounds (`MessageStore::prefault_step`) on real files: a round faults
//! in the window ahead of the write position, the next one waits until the appender used half
//! of it, rounds stop at the segment's end and go on in the next segment, and no byte of any
//! message changes.

mod common;

use std::time::{Duration, Instant};

use common::TempDir;
use rmqstore_core::{Message, MessageStore, StoreConfig, StoreError};

const SEG: i64 = 4 * 1024 * 1024;
const WINDOW: i64 = 1024 * 1024;

fn config() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: SEG,
        ..StoreConfig::default()
    }
}

fn message(i: usize) -> Message {
    Message {
        topic: "TopicPrefault".to_owned(),
        body: format!("{i:08}|").repeat(900 / 9).into_bytes(),
        ..Message::default()
    }
}

/// Puts messages until the commitlog's end is past `until`; returns the offsets written.
fn put_until(store: &MessageStore, until: i64, next: &mut usize, offsets: &mut Vec<i64>) {
    while store.max_phy_offset().unwrap() < until {
        let r = store.put_message(&message(*next)).unwrap();
        assert!(r.is_ok(), "{r:?}");
        offsets.push(r.wrote_offset);
        *next += 1;
    }
}

#[test]
fn rounds_keep_a_window_ahead_of_the_appender_and_change_no_byte() {
    let dir = TempDir::new("prefault", "window");
    let store = MessageStore::open(dir.path(), config()).unwrap();
    let step = |timeout_ms| {
        store
            .prefault_step(WINDOW, Duration::from_millis(timeout_ms))
            .unwrap()
    };
    // No segment yet: nothing to do, and the round waits out its timeout.
    let t = Instant::now();
    assert_eq!(step(30).bytes, 0);
    assert!(t.elapsed() >= Duration::from_millis(30));

    let (mut next, mut offsets) = (0, Vec::new());
    put_until(&store, 1, &mut next, &mut offsets);
    let wrote = store.max_phy_offset().unwrap();
    assert_eq!(
        step(0).bytes,
        WINDOW,
        "the whole window past the write position"
    );
    let mut end = wrote + WINDOW;
    assert_eq!(step(0).bytes, 0, "more than half the window is left");

    // The appender uses half the window: the next round tops it up to a full window again.
    put_until(&store, end - WINDOW / 2 + 1, &mut next, &mut offsets);
    let wrote = store.max_phy_offset().unwrap();
    assert_eq!(step(0).bytes, wrote + WINDOW - end);
    end = wrote + WINDOW;

    // Near the segment's end a round stops there.
    put_until(&store, SEG - WINDOW - WINDOW / 4, &mut next, &mut offsets);
    let wrote = store.max_phy_offset().unwrap();
    assert!(wrote > end, "the appender passed the pages faulted in");
    assert_eq!(
        step(0).bytes,
        WINDOW,
        "from the write position, not the last round's end"
    );
    end = wrote + WINDOW;
    // Less than half a window left before the end: the round takes the rest of the segment.
    put_until(&store, end - WINDOW / 2 + 1, &mut next, &mut offsets);
    assert_eq!(step(0).bytes, SEG - end);
    assert_eq!(step(0).bytes, 0);

    // In the next segment rounds start again from its write position.
    put_until(&store, SEG + 1, &mut next, &mut offsets);
    let wrote = store.max_phy_offset().unwrap();
    assert!(wrote > SEG && wrote < SEG + WINDOW / 2, "{wrote}");
    assert_eq!(step(0).bytes, WINDOW);

    // No byte changed: every message reads back whole (CRC checked).
    for (i, &off) in offsets.iter().enumerate() {
        let m = store.look_message_by_offset(off).unwrap().unwrap();
        assert_eq!(m.body(), &message(i).body[..], "message {i} at {off}");
    }

    // Window 0 does nothing; a stopping store ends the round at once.
    assert_eq!(
        store
            .prefault_step(0, Duration::from_millis(0))
            .unwrap()
            .bytes,
        0
    );
    store.stop_services();
    let t = Instant::now();
    assert!(
        store
            .prefault_step(WINDOW, Duration::from_secs(30))
            .unwrap()
            .stopped
    );
    assert!(t.elapsed() < Duration::from_secs(10));
    store.close().unwrap();
    assert!(
        store
            .prefault_step(WINDOW, Duration::from_millis(0))
            .unwrap()
            .stopped
    );
}

#[test]
fn a_round_runs_beside_the_appender() {
    let dir = TempDir::new("prefault", "beside");
    let store = MessageStore::open(dir.path(), config()).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut offsets = Vec::new();
    let faulted = std::thread::scope(|s| {
        let service = s.spawn(|| {
            let mut total = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                total += store
                    .prefault_step(WINDOW, Duration::from_millis(5))
                    .unwrap()
                    .bytes;
            }
            total
        });
        let mut next = 0;
        put_until(&store, 3 * SEG + SEG / 2, &mut next, &mut offsets);
        done.store(true, std::sync::atomic::Ordering::Release);
        service.join().unwrap()
    });
    assert!(faulted > 0);
    for (i, &off) in offsets.iter().enumerate() {
        let m = store.look_message_by_offset(off).unwrap().unwrap();
        assert_eq!(m.body(), &message(i).body[..], "message {i} at {off}");
    }
    store.close().unwrap();
    // Recovery reads exactly what was written, whatever was faulted in past it.
    let store = MessageStore::open(dir.path(), config()).unwrap();
    let last = *offsets.last().unwrap();
    let size = store
        .look_message_by_offset(last)
        .unwrap()
        .unwrap()
        .store_size;
    assert_eq!(store.max_phy_offset().unwrap(), last + i64::from(size));
    store.close().unwrap();
}

#[test]
fn a_read_only_store_has_no_prefault_rounds() {
    let dir = TempDir::new("prefault", "read-only");
    let store = MessageStore::open(dir.path(), config()).unwrap();
    let (mut next, mut offsets) = (0, Vec::new());
    put_until(&store, 1, &mut next, &mut offsets);
    store.close().unwrap();
    let ro = MessageStore::open_read_only(dir.path(), config()).unwrap();
    assert!(matches!(
        ro.prefault_step(WINDOW, Duration::from_millis(0)),
        Err(StoreError::ReadOnly(_))
    ));
}
