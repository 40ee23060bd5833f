//! Transactional messages through the store's API: the half, commit and op records byte for
//! byte, visibility, rollback, errors on unknown and ended transactions, a failed commit put,
//! op batching (size, interval, close), ends after a reopen (slow path), the index-off
//! fallback, and concurrent ends of one transaction.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::TempDir;
use rmqstore_core::format::{check_record, property, sysflag, HostAddr, RecordCheck};
use rmqstore_core::read::{GetMessageStatus, TagFilter};
use rmqstore_core::transaction::{HALF_TOPIC, OP_TOPIC};
use rmqstore_core::{
    EndOutcome, Message, MessageStore, PutMessageHook, PutMessageStatus, StoreConfig, StoreError,
    TxTarget,
};

fn config() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: 1024 * 1024,
        mapped_file_size_consume_queue: 20 * 1000,
        max_hash_slot_num: 1024,
        max_index_num: 4000,
        ..StoreConfig::default()
    }
}

fn open(dir: &Path) -> MessageStore {
    MessageStore::open(dir, config()).unwrap()
}

fn drain(store: &MessageStore) {
    while store.dispatch_step(1 << 20, Duration::ZERO).unwrap().behind > 0 {}
}

fn msg(topic: &str, queue_id: i32, key: &str) -> Message {
    Message {
        topic: topic.into(),
        queue_id,
        body: format!("body-{key}").into_bytes(),
        flag: 7,
        born_timestamp: 1_700_000_000_000,
        born_host: HostAddr::parse("10.1.2.3:4567"),
        reconsume_times: 2,
        properties: vec![
            (property::KEYS.into(), key.into()),
            (property::TAGS.into(), "TagA".into()),
            (property::WAIT.into(), "true".into()),
        ],
        ..Message::default()
    }
}

/// The record at commitlog offset `at`, read from the segment file.
fn raw_record(dir: &Path, at: i64) -> Vec<u8> {
    let seg = std::fs::read(dir.join("commitlog").join(format!("{:020}", 0))).unwrap();
    let size = i32::from_be_bytes(seg[at as usize..at as usize + 4].try_into().unwrap());
    seg[at as usize..at as usize + size as usize].to_vec()
}

fn show(props: &[u8]) -> String {
    String::from_utf8(props.to_vec())
        .unwrap()
        .replace('\u{1}', "=")
        .replace('\u{2}', ";")
}

fn get_all(store: &MessageStore, topic: &str, queue_id: i32) -> Vec<rmqstore_core::MessageExt> {
    drain(store);
    let r = store
        .get_message(topic, queue_id, 0, 1000, &TagFilter::all())
        .unwrap();
    if r.status != GetMessageStatus::Found {
        return Vec::new();
    }
    r.messages
}

fn commit(store: &MessageStore, target: TxTarget) -> Result<EndOutcome, StoreError> {
    store.end_transaction(target, true)
}

#[test]
fn half_commit_and_op_records_byte_for_byte() {
    let d = TempDir::new("tx", "bytes");
    let store = open(d.path());
    let (r, id) = store
        .prepare_message(&msg("TopicA", 2, "k1"), Some("G1"))
        .unwrap();
    assert_eq!(r.status, PutMessageStatus::PutOk);
    assert_eq!(id.len(), 32, "{id}");
    // Half.
    let rec = raw_record(d.path(), r.wrote_offset);
    let RecordCheck::Message(h) = check_record(&rec, true) else {
        panic!()
    };
    assert_eq!(h.topic, HALF_TOPIC.as_bytes());
    assert_eq!(h.queue_id, 0);
    assert_eq!(h.queue_offset, 0);
    assert_eq!(sysflag::transaction_value(h.sys_flag), 0);
    assert_eq!(h.flag, 7);
    assert_eq!(h.reconsume_times, 2);
    assert_eq!(h.born_timestamp, 1_700_000_000_000);
    assert_eq!(h.body, b"body-k1");
    assert_eq!(
        show(h.properties),
        format!(
            "UNIQ_KEY={id};PGROUP=G1;__transactionId__={id};TAGS=TagA;TRAN_MSG=true;KEYS=k1;\
             WAIT=true;REAL_TOPIC=TopicA;REAL_QID=2;"
        )
    );
    // Commit.
    let out = commit(&store, TxTarget::Offset(r.wrote_offset)).unwrap();
    assert!(out.ended && out.commit);
    assert_eq!(out.transaction_id, id);
    assert_eq!(out.half_offset, r.wrote_offset);
    assert_eq!(out.half_queue_offset, 0);
    let real = out.real.unwrap();
    assert_eq!(real.status, PutMessageStatus::PutOk);
    let rec = raw_record(d.path(), real.wrote_offset);
    let RecordCheck::Message(c) = check_record(&rec, true) else {
        panic!()
    };
    assert_eq!(c.topic, b"TopicA");
    assert_eq!(c.queue_id, 2);
    assert_eq!(c.queue_offset, 0);
    assert_eq!(
        sysflag::transaction_value(c.sys_flag),
        sysflag::TRANSACTION_COMMIT_TYPE
    );
    assert_eq!(c.prepared_transaction_offset, r.wrote_offset);
    assert_eq!(c.flag, 7);
    assert_eq!(c.reconsume_times, 2);
    assert_eq!(c.born_timestamp, 1_700_000_000_000);
    assert_eq!(c.born_host, HostAddr::parse("10.1.2.3:4567").unwrap());
    assert_eq!(c.body, b"body-k1");
    assert_eq!(
        show(c.properties),
        format!(
            "UNIQ_KEY={id};PGROUP=G1;__transactionId__={id};TAGS=TagA;TRAN_MSG=true;KEYS=k1;WAIT=true;"
        )
    );
    // Op: written by a forced round.
    assert_eq!(store.transaction_stats().unwrap().op_entries_queued, 1);
    let next = store
        .transaction_flush_ops(rmqstore_core::now_millis(), 4096, 3000, true)
        .unwrap();
    assert_eq!(next, 0);
    let ops = get_all(&store, OP_TOPIC, 0);
    assert_eq!(ops.len(), 1);
    let op = raw_record(d.path(), ops[0].commit_log_offset);
    let RecordCheck::Message(o) = check_record(&op, true) else {
        panic!()
    };
    assert_eq!(o.body, b"0,");
    assert_eq!(o.sys_flag, 0);
    assert_eq!(o.flag, 0);
    assert_eq!(o.queue_id, 0);
    assert_eq!(o.born_host, store.config().store_host);
    assert_eq!(show(o.properties), "WAIT=true;TAGS=d;");
    let s = store.transaction_stats().unwrap();
    assert_eq!(
        (
            s.prepared,
            s.committed,
            s.rolled_back,
            s.ops_written,
            s.op_entries_queued
        ),
        (1, 1, 0, 1, 0)
    );
    assert_eq!(s.pending_in_memory, 0);
    store.close().unwrap();
}

#[test]
fn a_half_is_invisible_until_committed_and_is_visible_once() {
    let d = TempDir::new("tx", "visible");
    let store = open(d.path());
    let (r, id) = store.prepare_message(&msg("TopicA", 0, "k"), None).unwrap();
    assert!(get_all(&store, "TopicA", 0).is_empty());
    assert_eq!(get_all(&store, HALF_TOPIC, 0).len(), 1);
    let out = commit(&store, TxTarget::Id(id.clone())).unwrap();
    assert_eq!(out.half_offset, r.wrote_offset);
    let got = get_all(&store, "TopicA", 0);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].prepared_transaction_offset, r.wrote_offset);
    assert_eq!(
        sysflag::transaction_value(got[0].sys_flag),
        sysflag::TRANSACTION_COMMIT_TYPE
    );
    assert_eq!(got[0].property(property::UNIQ_KEY), Some(id.as_str()));
    // A second end, by id or by offset, commit or rollback: ended, and no second message.
    for t in [TxTarget::Id(id.clone()), TxTarget::Offset(r.wrote_offset)] {
        for c in [true, false] {
            assert!(matches!(
                store.end_transaction(t.clone(), c),
                Err(StoreError::TransactionEnded(_))
            ));
        }
    }
    assert_eq!(get_all(&store, "TopicA", 0).len(), 1);
    store.close().unwrap();
}

#[test]
fn rollback_writes_only_the_op() {
    let d = TempDir::new("tx", "rollback");
    let store = open(d.path());
    let (r, id) = store.prepare_message(&msg("TopicA", 0, "k"), None).unwrap();
    let before = store.max_phy_offset().unwrap();
    let out = store.end_transaction(TxTarget::Id(id), false).unwrap();
    assert!(out.ended && !out.commit && out.real.is_none());
    assert_eq!(out.half_offset, r.wrote_offset);
    assert_eq!(
        store.max_phy_offset().unwrap(),
        before,
        "nothing written yet"
    );
    store.close().unwrap();
    let store = open(d.path());
    assert!(get_all(&store, "TopicA", 0).is_empty());
    let ops = get_all(&store, OP_TOPIC, 0);
    assert_eq!(ops.len(), 1, "close wrote the queued op");
    assert_eq!(ops[0].body(), b"0,");
    store.close().unwrap();
}

#[test]
fn unknown_transactions_are_not_found() {
    let d = TempDir::new("tx", "unknown");
    let store = open(d.path());
    assert!(matches!(
        commit(&store, TxTarget::Id("NOPE".into())),
        Err(StoreError::TransactionNotFound(_))
    ));
    let r = store.put_message(&msg("TopicA", 0, "plain")).unwrap();
    // An ordinary message is no half; nor is an offset inside a record or past the end.
    for off in [r.wrote_offset, r.wrote_offset + 1, 1 << 40, -5] {
        assert!(
            matches!(
                commit(&store, TxTarget::Offset(off)),
                Err(StoreError::TransactionNotFound(_))
            ),
            "{off}"
        );
    }
    assert_eq!(get_all(&store, "TopicA", 0).len(), 1);
    store.close().unwrap();
}

#[test]
fn prepare_refuses_timer_messages_and_reused_ids_and_drops_delay() {
    let d = TempDir::new("tx", "refuse");
    let store = open(d.path());
    let mut m = msg("TopicA", 0, "t");
    m.properties
        .push(("TIMER_DELIVER_MS".into(), "1700000000000".into()));
    let (r, _) = store.prepare_message(&m, None).unwrap();
    assert_eq!(r.status, PutMessageStatus::MessageIllegal);
    let mut m = msg("TopicA", 0, "u");
    m.properties
        .push((property::UNIQ_KEY.into(), "MY-ID".into()));
    m.properties.push((property::DELAY.into(), "3".into()));
    let (r, id) = store.prepare_message(&m, None).unwrap();
    assert_eq!(r.status, PutMessageStatus::PutOk);
    assert_eq!(id, "MY-ID");
    let rec = raw_record(d.path(), r.wrote_offset);
    let RecordCheck::Message(h) = check_record(&rec, true) else {
        panic!()
    };
    let p = show(h.properties);
    assert!(!p.contains("DELAY"), "{p}");
    assert!(p.contains("PGROUP=DEFAULT_PRODUCER;"), "{p}");
    let (r, _) = store.prepare_message(&m, None).unwrap();
    assert_eq!(
        r.status,
        PutMessageStatus::MessageIllegal,
        "a second half of MY-ID"
    );
    let mut m = msg("TopicA", 0, "illegal");
    m.topic = "bad topic".into();
    assert_eq!(
        store.prepare_message(&m, None).unwrap().0.status,
        PutMessageStatus::MessageIllegal
    );
    store.close().unwrap();
}

/// Refuses puts to `TopicR` while `refuse` is set.
struct Refuse(Arc<AtomicBool>);

impl PutMessageHook for Refuse {
    fn name(&self) -> &str {
        "refuse"
    }
    fn before_put(&self, msg: &mut Message) -> Result<(), PutMessageStatus> {
        if msg.topic == "TopicR" && self.0.load(Ordering::SeqCst) {
            return Err(PutMessageStatus::ServiceNotAvailable);
        }
        Ok(())
    }
}

#[test]
fn a_failed_commit_put_leaves_the_transaction_pending() {
    let d = TempDir::new("tx", "failed");
    let mut store = open(d.path());
    let refuse = Arc::new(AtomicBool::new(true));
    store.add_put_hook(Box::new(Refuse(refuse.clone())));
    let (r, id) = store.prepare_message(&msg("TopicR", 0, "k"), None).unwrap();
    assert!(r.is_ok());
    let out = commit(&store, TxTarget::Id(id.clone())).unwrap();
    assert!(!out.ended);
    assert_eq!(
        out.real.as_ref().unwrap().status,
        PutMessageStatus::ServiceNotAvailable
    );
    let s = store.transaction_stats().unwrap();
    assert_eq!(
        (s.committed, s.op_entries_queued, s.pending_in_memory),
        (0, 0, 1)
    );
    refuse.store(false, Ordering::SeqCst);
    let out = commit(&store, TxTarget::Id(id)).unwrap();
    assert!(out.ended);
    assert_eq!(get_all(&store, "TopicR", 0).len(), 1);
    store.close().unwrap();
}

#[test]
fn op_batching_by_size_interval_and_close() {
    let d = TempDir::new("tx", "batching");
    let store = open(d.path());
    // The service's settings: 16-byte op messages, 1 s interval.
    let t0 = rmqstore_core::now_millis();
    assert_eq!(store.transaction_flush_ops(t0, 16, 1000, false).unwrap(), 0);
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(
            store
                .prepare_message(&msg("TopicA", 0, &format!("k{i}")), None)
                .unwrap()
                .1,
        );
    }
    // "0,1,2,3,4,5,6,7," is 16 bytes: the 8th end writes it at once, on the ending thread.
    for (i, id) in ids.iter().enumerate().take(8) {
        store
            .end_transaction(TxTarget::Id(id.clone()), i % 2 == 0)
            .unwrap();
        let s = store.transaction_stats().unwrap();
        if i < 7 {
            assert_eq!(
                (s.ops_written, s.op_entries_queued),
                (0, i as u64 + 1),
                "{i}"
            );
        } else {
            assert_eq!((s.ops_written, s.op_entries_queued), (1, 0));
        }
    }
    for id in &ids[8..10] {
        store
            .end_transaction(TxTarget::Id(id.clone()), true)
            .unwrap();
    }
    // Not due before the interval; due after.
    let now = rmqstore_core::now_millis();
    let next = store.transaction_flush_ops(now, 16, 60_000, false).unwrap();
    assert!(next > now, "{next} {now}");
    assert_eq!(store.transaction_stats().unwrap().op_entries_queued, 2);
    let next = store
        .transaction_flush_ops(now + 61_000, 16, 60_000, false)
        .unwrap();
    assert_eq!(next, 0);
    let s = store.transaction_stats().unwrap();
    assert_eq!((s.ops_written, s.op_entries_queued), (2, 0));
    // Close writes what is queued.
    store
        .end_transaction(TxTarget::Id(ids[10].clone()), false)
        .unwrap();
    store.close().unwrap();
    let store = open(d.path());
    let bodies: Vec<String> = get_all(&store, OP_TOPIC, 0)
        .iter()
        .map(|m| String::from_utf8(m.body().to_vec()).unwrap())
        .collect();
    assert_eq!(bodies, ["0,1,2,3,4,5,6,7,", "8,9,", "10,"]);
    store.close().unwrap();
}

#[test]
fn ends_after_a_reopen_read_the_records() {
    let d = TempDir::new("tx", "reopen");
    let store = open(d.path());
    let (a, ida) = store.prepare_message(&msg("TopicA", 1, "a"), None).unwrap();
    let (b, idb) = store.prepare_message(&msg("TopicA", 1, "b"), None).unwrap();
    let (c, idc) = store.prepare_message(&msg("TopicA", 1, "c"), None).unwrap();
    let (_e, ide) = store.prepare_message(&msg("TopicA", 1, "e"), None).unwrap();
    commit(&store, TxTarget::Offset(b.wrote_offset)).unwrap();
    store
        .end_transaction(TxTarget::Id(idc.clone()), false)
        .unwrap();
    // Its op is written by the close.
    commit(&store, TxTarget::Id(ide.clone())).unwrap();
    store.close().unwrap();
    let store = open(d.path());
    // a: pending, committed now by offset; b: committed before; c: rolled back before.
    let out = commit(&store, TxTarget::Offset(a.wrote_offset)).unwrap();
    assert!(out.ended);
    assert_eq!(out.transaction_id, ida);
    for t in [TxTarget::Id(idb.clone()), TxTarget::Offset(b.wrote_offset)] {
        assert!(matches!(
            commit(&store, t),
            Err(StoreError::TransactionEnded(_))
        ));
    }
    for t in [TxTarget::Id(idc.clone()), TxTarget::Offset(c.wrote_offset)] {
        assert!(matches!(
            commit(&store, t),
            Err(StoreError::TransactionEnded(_))
        ));
    }
    assert!(matches!(
        commit(&store, TxTarget::Id(ide)),
        Err(StoreError::TransactionEnded(_))
    ));
    let real = get_all(&store, "TopicA", 1);
    assert_eq!(real.len(), 3, "b and e before the reopen, a after");
    store.close().unwrap();
}

#[test]
fn a_commit_without_its_op_is_found_by_the_index_and_by_the_queue_scan() {
    for index in [true, false] {
        let d = TempDir::new("tx", &format!("noop-{index}"));
        let cfg = StoreConfig {
            message_index_enable: index,
            ..config()
        };
        let store = MessageStore::open(d.path(), cfg.clone()).unwrap();
        let mut halves = Vec::new();
        for i in 0..20 {
            halves.push(
                store
                    .prepare_message(&msg("TopicA", 0, &format!("k{i}")), None)
                    .unwrap(),
            );
        }
        // Ordinary messages around, some with the same key.
        for i in 0..5 {
            store
                .put_message(&msg("TopicA", 0, &format!("k{i}")))
                .unwrap();
        }
        for (r, _) in halves.iter().step_by(2) {
            commit(&store, TxTarget::Offset(r.wrote_offset)).unwrap();
        }
        // A death before the op messages were written: a copy of the files taken now, while
        // the op entries are still queued (the close would write them).
        store.flush().unwrap();
        drain(&store);
        let copy = TempDir::new("tx", &format!("noop-copy-{index}"));
        copy_dir(d.path(), copy.path());
        store.close().unwrap();
        std::fs::remove_file(copy.path().join("lock")).ok();
        let store = MessageStore::open(copy.path(), cfg).unwrap();
        assert_eq!(store.transaction_stats().unwrap().op_entries_queued, 0);
        assert!(get_all(&store, OP_TOPIC, 0).is_empty(), "no op was written");
        for (i, (r, id)) in halves.iter().enumerate() {
            let got = if i % 2 == 0 {
                commit(&store, TxTarget::Id(id.clone()))
            } else {
                commit(&store, TxTarget::Offset(r.wrote_offset))
            };
            if i % 2 == 0 {
                assert!(
                    matches!(got, Err(StoreError::TransactionEnded(_))),
                    "{i} {index} {got:?}"
                );
            } else {
                assert!(got.unwrap().ended, "{i} {index}");
            }
        }
        assert_eq!(get_all(&store, "TopicA", 0).len(), 5 + 20);
        store.close().unwrap();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        let t = to.join(e.file_name());
        if p.is_dir() {
            copy_dir(&p, &t);
        } else {
            std::fs::copy(&p, &t).unwrap();
        }
    }
}

#[test]
fn concurrent_ends_of_one_transaction_commit_it_once() {
    let d = TempDir::new("tx", "race");
    let store = open(d.path());
    for round in 0..20 {
        let (r, id) = store
            .prepare_message(&msg("TopicA", 0, &format!("r{round}")), None)
            .unwrap();
        let results: Vec<Result<EndOutcome, StoreError>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|t| {
                    let store = &store;
                    let id = id.clone();
                    s.spawn(move || {
                        if t % 2 == 0 {
                            store.end_transaction(TxTarget::Id(id), true)
                        } else {
                            store.end_transaction(TxTarget::Offset(r.wrote_offset), true)
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won = results.iter().filter(|r| r.is_ok()).count();
        let ended = results
            .iter()
            .filter(|r| matches!(r, Err(StoreError::TransactionEnded(_))))
            .count();
        assert_eq!((won, ended), (1, 7), "round {round}");
    }
    assert_eq!(get_all(&store, "TopicA", 0).len(), 20);
    store.close().unwrap();
}

#[test]
fn sync_flush_prepares_and_commits_return_forced_from_many_threads() {
    let d = TempDir::new("tx", "sync");
    let cfg = StoreConfig {
        flush_disk_type: rmqstore_core::FlushDiskType::SyncFlush,
        sync_flush_timeout: 5000,
        ..config()
    };
    let store = Arc::new(MessageStore::open(d.path(), cfg).unwrap());
    store.attach_group_commit().unwrap();
    let service = {
        let store = store.clone();
        std::thread::spawn(move || loop {
            if store
                .group_commit_step(Duration::from_millis(10))
                .unwrap()
                .stopped
            {
                return;
            }
        })
    };
    std::thread::scope(|s| {
        for t in 0..8 {
            let store = &store;
            s.spawn(move || {
                for i in 0..25 {
                    let (r, id) = store
                        .prepare_message(&msg("TopicS", t % 2, &format!("{t}-{i}")), None)
                        .unwrap();
                    assert_eq!(r.status, PutMessageStatus::PutOk);
                    assert!(store.flushed_where().unwrap() >= r.wrote_offset + r.wrote_bytes);
                    let out = commit(store, TxTarget::Id(id)).unwrap();
                    let c = out.real.unwrap();
                    assert_eq!(c.status, PutMessageStatus::PutOk);
                    assert!(store.flushed_where().unwrap() >= c.wrote_offset + c.wrote_bytes);
                }
            });
        }
    });
    drain(&store);
    assert_eq!(
        store.max_offset_in_queue("TopicS", 0).unwrap()
            + store.max_offset_in_queue("TopicS", 1).unwrap(),
        200
    );
    store.stop_services();
    service.join().unwrap();
    store.close().unwrap();
}

#[test]
fn a_commit_behind_more_key_matches_than_one_index_query_gives_is_still_found() {
    let d = TempDir::new("tx", "crowded");
    let store = open(d.path());
    let (r, id) = store.prepare_message(&msg("TopicA", 0, "x"), None).unwrap();
    commit(&store, TxTarget::Offset(r.wrote_offset)).unwrap();
    // Newer messages of the real topic whose KEYS is the transaction id: the index gives
    // them first, more than one query's batch (max_msgs_num_batch).
    let batch = store.config().max_msgs_num_batch as usize;
    for _ in 0..batch + 6 {
        store.put_message(&msg("TopicA", 0, &id)).unwrap();
    }
    store.flush().unwrap();
    drain(&store);
    // A death before the op was written: a copy of the files now.
    let copy = TempDir::new("tx", "crowded-copy");
    copy_dir(d.path(), copy.path());
    store.close().unwrap();
    let store = open(copy.path());
    assert!(matches!(
        commit(&store, TxTarget::Id(id.clone())),
        Err(StoreError::TransactionEnded(_))
    ));
    drain(&store);
    assert_eq!(
        store.max_offset_in_queue("TopicA", 0).unwrap(),
        1 + batch as i64 + 6,
        "no second commit"
    );
    store.close().unwrap();
}

#[test]
fn a_truncation_forgets_the_halves_it_cut() {
    let d = TempDir::new("tx", "truncate");
    let store = open(d.path());
    let (_a, ida) = store.prepare_message(&msg("TopicA", 0, "a"), None).unwrap();
    let (c, idc) = store.prepare_message(&msg("TopicA", 0, "c"), None).unwrap();
    store
        .end_transaction(TxTarget::Id(idc.clone()), false)
        .unwrap();
    let (e, ide) = store.prepare_message(&msg("TopicA", 0, "e"), None).unwrap();
    assert_eq!(store.transaction_stats().unwrap().op_entries_queued, 1);
    assert!(store.truncate_files(c.wrote_offset).unwrap());
    // C's op entry named a half queue offset the cut removed: dropped.
    assert_eq!(store.transaction_stats().unwrap().op_entries_queued, 0);
    // New halves take the offsets C and E had.
    let (d2, idd) = store.prepare_message(&msg("TopicA", 0, "d"), None).unwrap();
    assert_eq!(d2.wrote_offset, c.wrote_offset);
    assert_eq!(d2.queue_offset, c.queue_offset);
    for id in [idc, ide] {
        assert!(matches!(
            commit(&store, TxTarget::Id(id)),
            Err(StoreError::TransactionNotFound(_))
        ));
    }
    let _ = e;
    let out = commit(&store, TxTarget::Id(idd)).unwrap();
    assert_eq!(out.half_offset, d2.wrote_offset);
    commit(&store, TxTarget::Id(ida)).unwrap();
    let real = get_all(&store, "TopicA", 0);
    let bodies: Vec<&[u8]> = real.iter().map(|m| m.body()).collect();
    assert_eq!(bodies, [b"body-d".as_slice(), b"body-a".as_slice()]);
    store.close().unwrap();
}

#[test]
fn an_end_by_offset_after_a_truncation_ends_the_half_now_there() {
    // The ending thread remembers the half it prepared last (no record read to learn the id
    // of `end_transaction(result.wrote_offset, ...)`): a truncation makes that stale.
    let d = TempDir::new("tx", "truncate-offset");
    let store = open(d.path());
    store.put_message(&msg("TopicA", 1, "plain")).unwrap();
    let (a, ida) = store.prepare_message(&msg("TopicA", 0, "a"), None).unwrap();
    assert!(store.truncate_files(a.wrote_offset).unwrap());
    // Another thread stores a half at the same offset; this thread's last half is A's.
    let (b, idb) = std::thread::scope(|s| {
        s.spawn(|| store.prepare_message(&msg("TopicA", 0, "b"), None).unwrap())
            .join()
            .unwrap()
    });
    assert_eq!(b.wrote_offset, a.wrote_offset);
    assert_ne!(ida, idb);
    let out = commit(&store, TxTarget::Offset(a.wrote_offset)).unwrap();
    assert_eq!(out.transaction_id, idb);
    assert!(matches!(
        commit(&store, TxTarget::Id(ida)),
        Err(StoreError::TransactionNotFound(_))
    ));
    let real = get_all(&store, "TopicA", 0);
    let bodies: Vec<&[u8]> = real.iter().map(|m| m.body()).collect();
    assert_eq!(bodies, [b"body-b".as_slice()]);
    // The usual sequence on one thread: prepare, then end by the offset it answered.
    let (c, idc) = store.prepare_message(&msg("TopicA", 0, "c"), None).unwrap();
    assert_eq!(
        commit(&store, TxTarget::Offset(c.wrote_offset))
            .unwrap()
            .transaction_id,
        idc
    );
    store.close().unwrap();
}

#[test]
fn many_threads_end_many_transactions_and_a_reopen_agrees_on_every_one() {
    let d = TempDir::new("tx", "many");
    let store = open(d.path());
    let stop = AtomicBool::new(false);
    let per_thread = 300;
    let ends: Vec<(String, i64, bool)> = std::thread::scope(|s| {
        // The op batch service: small messages, short interval.
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                store
                    .transaction_flush_ops(rmqstore_core::now_millis(), 64, 2, false)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let store = &store;
                s.spawn(move || {
                    let mut out = Vec::new();
                    for i in 0..per_thread {
                        let (r, id) = store
                            .prepare_message(&msg("TopicM", t, &format!("{t}-{i}")), None)
                            .unwrap();
                        let commit = !(i + t as usize).is_multiple_of(3);
                        let target = if i % 2 == 0 {
                            TxTarget::Id(id.clone())
                        } else {
                            TxTarget::Offset(r.wrote_offset)
                        };
                        assert!(store.end_transaction(target, commit).unwrap().ended);
                        out.push((id, r.wrote_offset, commit));
                    }
                    out
                })
            })
            .collect();
        let all = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
        stop.store(true, Ordering::SeqCst);
        all
    });
    let commits = ends.iter().filter(|e| e.2).count() as u64;
    let s = store.transaction_stats().unwrap();
    assert_eq!(s.prepared, ends.len() as u64);
    assert_eq!(s.committed, commits);
    assert_eq!(s.rolled_back, ends.len() as u64 - commits);
    assert_eq!(s.pending_in_memory, 0);
    store.close().unwrap();
    let store = open(d.path());
    drain(&store);
    // Every half queue offset is named by exactly one op entry.
    let mut named = std::collections::HashMap::new();
    let mut next = 0;
    loop {
        let r = store
            .get_message(OP_TOPIC, 0, next, 32, &TagFilter::all())
            .unwrap();
        if r.status != GetMessageStatus::Found {
            break;
        }
        for m in &r.messages {
            for e in std::str::from_utf8(m.body()).unwrap().split_terminator(',') {
                *named.entry(e.parse::<i64>().unwrap()).or_insert(0) += 1;
            }
        }
        next = r.next_begin_offset;
    }
    assert_eq!(named.len(), ends.len());
    assert!(named.values().all(|&n| n == 1));
    let real: i64 = (0..4)
        .map(|q| store.max_offset_in_queue("TopicM", q).unwrap())
        .sum();
    assert_eq!(real as u64, commits);
    // A second end of any of them, by id or offset: ended (read from the records).
    for (i, (id, off, _)) in ends.iter().enumerate().step_by(7) {
        let t = if i % 2 == 0 {
            TxTarget::Id(id.clone())
        } else {
            TxTarget::Offset(*off)
        };
        assert!(matches!(
            store.end_transaction(t, true),
            Err(StoreError::TransactionEnded(_))
        ));
    }
    store.close().unwrap();
}
