//! Dispatch rules that the Python API cannot reach: transaction types and the confirm offset.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmqstore_core::message::{property, sysflag};
use rmqstore_core::read::{GetMessageStatus, TagFilter};
use rmqstore_core::util::now_millis;
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
    while store.max_phy_offset().unwrap() < 3 * rmqstore_core::reput::PARALLEL_DISPATCH_BYTES {
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

#[test]
fn a_sync_put_times_out_when_no_force_comes() {
    let d = dir("timeout");
    let cfg = StoreConfig {
        flush_disk_type: FlushDiskType::SyncFlush,
        sync_flush_timeout: 30,
        ..config()
    };
    let store = MessageStore::open(&d, cfg).unwrap();
    store.attach_group_commit().unwrap(); // attached, but no service thread runs
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
