//! Timer recovery after a crash is exact: the files are left as a killed process leaves them
//! (everything written, `config/timercheck` from an earlier flush), and on reopen each timer
//! message is delivered once: units logged after the checkpoint are not linked again, copies
//! stored after it (from the wheel, at enqueue, rolled) are not put again, and a message a
//! store linked twice into one slot is delivered once.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::TempDir;
use rmqstore_core::format::timer::{TimerLogUnit, UNIT_SIZE};
use rmqstore_core::read::TagFilter;
use rmqstore_core::{Message, MessageStore, StoreConfig};

fn config() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: 1 << 20,
        mapped_file_size_consume_queue: 20 * 1000,
        max_hash_slot_num: 1000,
        max_index_num: 4000,
        timer_precision_ms: 100,
        mapped_file_size_timer_log: 52 * 20 + 16,
        ..StoreConfig::default()
    }
}

fn timer_msg(key: &str, deliver_ms: i64) -> Message {
    Message {
        topic: "T".into(),
        body: key.as_bytes().to_vec(),
        queue_id: 1,
        properties: vec![
            ("UNIQ_KEY".to_owned(), key.to_owned()),
            ("TIMER_DELIVER_MS".to_owned(), deliver_ms.to_string()),
        ],
        ..Message::default()
    }
}

fn drain(store: &MessageStore) {
    while store.dispatch_step(1 << 20, Duration::ZERO).unwrap().behind > 0 {}
}

/// How many times each body arrived in T/1.
fn arrivals(store: &MessageStore) -> BTreeMap<String, u32> {
    drain(store);
    let mut out = BTreeMap::new();
    let mut offset = 0;
    loop {
        let r = store
            .get_message("T", 1, offset, 64, &TagFilter::all())
            .unwrap();
        if r.messages.is_empty() {
            return out;
        }
        offset = r.next_begin_offset;
        for m in r.messages {
            *out.entry(String::from_utf8_lossy(m.body()).into_owned())
                .or_insert(0) += 1;
        }
    }
}

fn checkpoint(root: &Path) -> Vec<u8> {
    std::fs::read(root.join("config").join("timercheck")).unwrap()
}

/// Leaves the files as a kill after more work would: closes `store` (everything written),
/// then puts back the checkpoint `saved` an earlier flush wrote.
fn crash(store: MessageStore, root: &Path, saved: &[u8]) {
    store.close().unwrap();
    std::fs::write(root.join("config").join("timercheck"), saved).unwrap();
}

fn now() -> i64 {
    rmqstore_core::now_millis()
}

/// Runs the rounds until `until_ms`, then everything due; returns how many units the dequeue
/// passed over (their copies were put before a crash).
fn deliver_all(store: &MessageStore, until_ms: i64) -> u64 {
    drain(store);
    store.timer_enqueue(until_ms, 100_000).unwrap();
    let mut recovered = 0;
    let mut t = now();
    while t <= until_ms {
        recovered += store.timer_dequeue(t, 100_000).unwrap().recovered;
        drain(store);
        store.timer_enqueue(t, 100_000).unwrap();
        t += 100;
    }
    recovered + store.timer_dequeue(until_ms, 100_000).unwrap().recovered
}

#[test]
fn work_after_the_checkpoint_is_not_done_twice() {
    let d = TempDir::new("timer-recovery", "exact");
    let t0 = now() / 100 * 100;
    let mut keys = Vec::new();
    let store = MessageStore::open(d.path(), config()).unwrap();
    // Before the checkpoint: 30 messages over 3 slots, linked into the wheel.
    for i in 0..30 {
        let key = format!("a{i}");
        store
            .put_message(&timer_msg(&key, t0 + 1_050 + 100 * (i % 3)))
            .unwrap();
        keys.push(key);
    }
    drain(&store);
    assert_eq!(store.timer_enqueue(t0, 1000).unwrap().logged, 30);
    store.timer_flush().unwrap();
    let saved = checkpoint(d.path());
    // After it: 30 more linked into later slots (and over a timer log segment's end), 10
    // delivered at enqueue (the write time passed their deliver time), and the first slot
    // plus part of the second delivered.
    for i in 0..30 {
        let key = format!("b{i}");
        store
            .put_message(&timer_msg(&key, t0 + 1_050 + 100 * (i % 5)))
            .unwrap();
        keys.push(key);
    }
    drain(&store);
    assert_eq!(store.timer_enqueue(t0 + 100, 1000).unwrap().logged, 30);
    let s = store.timer_dequeue(t0 + 1_100, 1000).unwrap();
    assert_eq!(s.delivered, 16, "{s:?}");
    let s = store.timer_dequeue(t0 + 1_200, 7).unwrap();
    assert!(s.partial, "{s:?}");
    for i in 0..10 {
        let key = format!("c{i}");
        store.put_message(&timer_msg(&key, t0 + 1_550 + i)).unwrap();
        keys.push(key);
    }
    drain(&store);
    assert_eq!(store.timer_enqueue(t0 + 1_600, 1000).unwrap().delivered, 10);
    let before = arrivals(&store);
    assert_eq!(before.values().sum::<u32>(), 16 + 7 + 10);
    crash(store, d.path(), &saved);

    let store = MessageStore::open(d.path(), config()).unwrap();
    assert_eq!(deliver_all(&store, t0 + 2_000), 23);
    let got = arrivals(&store);
    let twice: Vec<_> = got.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    let mut want = keys.clone();
    want.sort();
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), want);
    let stats = store.timer_stats().unwrap();
    // 30 units logged, 10 copies at enqueue, 23 copies from the wheel.
    assert_eq!(stats.recovered, 30 + 10 + 23, "{stats:?}");
    assert_eq!(stats.pending, 0);
    store.close().unwrap();

    // A clean reopen finds nothing to pass over.
    let store = MessageStore::open(d.path(), config()).unwrap();
    assert_eq!(deliver_all(&store, now()), 0);
    assert_eq!(store.timer_stats().unwrap().recovered, 0);
    assert_eq!(arrivals(&store), got);
    store.close().unwrap();
}

#[test]
fn a_roll_after_the_checkpoint_is_not_rolled_twice() {
    let d = TempDir::new("timer-recovery", "roll");
    let cfg = StoreConfig {
        timer_roll_window_slot: 6,
        ..config()
    };
    let t0 = now() / 100 * 100;
    let store = MessageStore::open(d.path(), cfg.clone()).unwrap();
    for i in 0..5 {
        store
            .put_message(&timer_msg(&format!("r{i}"), t0 + 2_000))
            .unwrap();
    }
    drain(&store);
    assert_eq!(store.timer_enqueue(t0, 100).unwrap().logged, 5);
    store.timer_flush().unwrap();
    let saved = checkpoint(d.path());
    // Rolled back into the timer topic after the checkpoint, not yet enqueued again.
    let mut rolled = 0;
    let mut t = t0;
    while rolled < 5 {
        t += 100;
        assert!(t < t0 + 1_000, "never rolled");
        rolled += store.timer_dequeue(t, 100).unwrap().rolled;
    }
    crash(store, d.path(), &saved);

    let store = MessageStore::open(d.path(), cfg).unwrap();
    assert_eq!(deliver_all(&store, t0 + 3_000), 5);
    let got = arrivals(&store);
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(got.values().all(|n| *n == 1), "{got:?}");
    assert!(store.timer_stats().unwrap().recovered >= 5);
    store.close().unwrap();
}

#[test]
fn a_message_linked_twice_into_its_slot_is_delivered_once() {
    let d = TempDir::new("timer-recovery", "twice");
    let t0 = now() / 100 * 100;
    {
        let store = MessageStore::open(d.path(), config()).unwrap();
        for i in 0..3 {
            store
                .put_message(&timer_msg(&format!("d{i}"), t0 + 60_000))
                .unwrap();
        }
        drain(&store);
        assert_eq!(store.timer_enqueue(t0, 100).unwrap().logged, 3);
        store.close().unwrap();
    }
    // As a store that enqueued again from an older checkpoint leaves it: the last message's
    // unit appended a second time, chained after the first.
    let log_path = d.path().join("timerlog").join("00000000000000000000");
    let mut log = std::fs::read(&log_path).unwrap();
    let last = 2 * UNIT_SIZE as usize;
    let mut again = TimerLogUnit::decode(&log[last..last + 52]).unwrap();
    again.prev_pos = last as i64;
    log[last + 52..last + 104].copy_from_slice(&again.encode());
    std::fs::write(&log_path, &log).unwrap();

    let store = MessageStore::open(d.path(), config()).unwrap();
    let s = store.timer_dequeue(t0 + 60_100, 100).unwrap();
    assert_eq!(s.delivered, 3, "{s:?}");
    let got = arrivals(&store);
    assert_eq!(got.values().copied().collect::<Vec<_>>(), vec![1, 1, 1]);
    assert_eq!(store.timer_stats().unwrap().recovered, 1);
    store.close().unwrap();
}
