//! The transaction check round through the store's API: each decision of RocketMQ's
//! `TransactionalMessageServiceImpl.check` (resolved by an op, discarded by check count or by
//! age, the fresh and young stops, the immunity re-put, the copy with its incremented count,
//! the op progress of `calculateOpOffset`), the exactly-once branch after a crash, the pending
//! list, the progress bounds and damaged half records.

mod common;

use std::path::Path;
use std::time::Duration;

use common::TempDir;
use rmqstore_core::format::{check_record, property, sysflag, HostAddr, RecordCheck};
use rmqstore_core::read::TagFilter;
use rmqstore_core::transaction::{
    CheckParams, CheckStep, TxTarget, CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC,
};
use rmqstore_core::{Message, MessageStore, StoreConfig};

const HOUR: i64 = 3600 * 1000;
const RESERVED: i64 = 72 * HOUR;

fn config() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: 64 * 1024,
        mapped_file_size_consume_queue: 20 * 1000,
        max_hash_slot_num: 64,
        max_index_num: 1000,
        ..StoreConfig::default()
    }
}

fn open(dir: &Path) -> MessageStore {
    MessageStore::open(dir, config()).unwrap()
}

fn drain(store: &MessageStore) {
    while store.dispatch_step(1 << 20, Duration::ZERO).unwrap().behind > 0 {}
}

fn now() -> i64 {
    rmqstore_core::now_millis()
}

/// The clock once everything stored so far is at least a millisecond old (so a round does not
/// meet it as stored at its start).
fn later() -> i64 {
    std::thread::sleep(Duration::from_millis(2));
    now()
}

fn msg(topic: &str, key: &str, born: i64, extra: &[(&str, &str)]) -> Message {
    let mut properties = vec![
        (property::KEYS.to_owned(), key.to_owned()),
        (property::TAGS.to_owned(), "TagA".to_owned()),
        (property::WAIT.to_owned(), "true".to_owned()),
    ];
    for (k, v) in extra {
        properties.push(((*k).to_owned(), (*v).to_owned()));
    }
    Message {
        topic: topic.into(),
        queue_id: 2,
        body: format!("body-{key}").into_bytes(),
        flag: 7,
        born_timestamp: born,
        born_host: HostAddr::parse("10.1.2.3:4567"),
        properties,
        ..Message::default()
    }
}

/// Prepares a half of `Orders` born at `born`; (commitlog offset, transaction id).
fn prepare(store: &MessageStore, key: &str, born: i64, extra: &[(&str, &str)]) -> (i64, String) {
    let (r, id) = store
        .prepare_message(&msg("Orders", key, born, extra), Some("PG"))
        .unwrap();
    assert!(r.is_ok(), "{r:?}");
    (r.wrote_offset, id)
}

fn params(now_ms: i64) -> CheckParams {
    CheckParams {
        now_ms,
        timeout_ms: 6000,
        check_max: 15,
        file_reserved_ms: RESERVED,
    }
}

/// A round at `now_ms`, or later: a round starting in the millisecond a half was stored in
/// would stop at it as fresh (`storeTimestamp >= startTime`), so the clock is moved past the
/// last store first.
fn check(store: &MessageStore, now_ms: i64) -> CheckStep {
    drain(store);
    std::thread::sleep(Duration::from_millis(2));
    let s = store
        .transaction_check(params(now_ms.max(now())), usize::MAX)
        .unwrap();
    drain(store);
    s
}

fn flush_ops(store: &MessageStore) {
    store
        .transaction_flush_ops(now(), 4096, 3000, true)
        .unwrap();
    drain(store);
}

/// (topic, properties map, flag, born, body) of the record at `offset`.
struct Rec {
    topic: String,
    queue_id: i32,
    queue_offset: i64,
    flag: i32,
    sys_flag: i32,
    born: i64,
    born_host: HostAddr,
    reconsume: i32,
    body: Vec<u8>,
    props: String,
}

impl Rec {
    fn prop(&self, name: &str) -> Option<&str> {
        self.props
            .split('\u{2}')
            .filter_map(|i| i.split_once('\u{1}'))
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v)
            .next_back()
    }

    fn names(&self) -> Vec<&str> {
        self.props
            .split('\u{2}')
            .filter_map(|i| i.split_once('\u{1}'))
            .map(|(k, _)| k)
            .collect()
    }
}

fn record(store: &MessageStore, offset: i64) -> Rec {
    let m = store.look_message_by_offset(offset).unwrap().unwrap();
    let raw_props = m
        .properties()
        .iter()
        .map(|(k, v)| format!("{k}\u{1}{v}\u{2}"))
        .collect::<String>();
    Rec {
        topic: m.topic().into_owned(),
        queue_id: m.queue_id,
        queue_offset: m.queue_offset,
        flag: m.flag,
        sys_flag: m.sys_flag,
        born: m.born_timestamp,
        born_host: m.born_host,
        reconsume: m.reconsume_times,
        body: m.body().to_vec(),
        props: raw_props,
    }
}

/// The messages of `topic` queue 0 (commitlog offsets).
fn queue(store: &MessageStore, topic: &str) -> Vec<i64> {
    drain(store);
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let r = store
            .get_message(topic, 0, offset, 32, &TagFilter::all())
            .unwrap();
        if r.messages.is_empty() {
            return out;
        }
        offset = r.next_begin_offset;
        out.extend(r.messages.iter().map(|m| m.commit_log_offset));
    }
}

#[test]
fn a_half_resolved_by_an_op_is_passed_and_the_op_progress_moves_over_its_op() {
    let d = TempDir::new("txcheck", "resolved");
    let store = open(d.path());
    let old = now() - 60_000;
    let (h0, _) = prepare(&store, "a", old, &[]);
    let (h1, id1) = prepare(&store, "b", old, &[]);
    let (h2, _) = prepare(&store, "c", old, &[]);
    let e = store.end_transaction(TxTarget::Offset(h1), false).unwrap();
    assert_eq!(e.transaction_id, id1);
    flush_ops(&store);
    let s = check(&store, now());
    assert_eq!(s.examined, 3);
    assert!(s.done);
    assert_eq!(s.discarded, Vec::<i64>::new());
    assert_eq!(s.to_check.len(), 2);
    // The copies are of halves 0 and 2, in order.
    let c: Vec<Rec> = s.to_check.iter().map(|&o| record(&store, o)).collect();
    assert_eq!(c[0].body, record(&store, h0).body);
    assert_eq!(c[1].body, record(&store, h2).body);
    assert_eq!(store.transaction_offsets().unwrap(), (3, 1));
    let stats = store.transaction_stats().unwrap();
    assert_eq!(stats.checked, 2);
}

#[test]
fn a_copy_is_the_half_with_its_check_count_incremented_in_the_maps_order() {
    let d = TempDir::new("txcheck", "copy");
    let store = open(d.path());
    let old = now() - 60_000;
    let (h, id) = prepare(&store, "a", old, &[]);
    let half = record(&store, h);
    let s = check(&store, now());
    assert_eq!(s.to_check.len(), 1);
    let c1 = record(&store, s.to_check[0]);
    assert_eq!(c1.topic, HALF_TOPIC);
    assert_eq!((c1.queue_id, c1.queue_offset), (0, 1));
    assert_eq!(c1.prop("TRANSACTION_CHECK_TIMES"), Some("1"));
    assert_eq!(c1.body, half.body);
    assert_eq!((c1.born, c1.born_host), (half.born, half.born_host));
    assert_eq!(c1.sys_flag, half.sys_flag);
    // renewHalfMessageInner copies neither the flag nor the reconsume times.
    assert_eq!((half.flag, c1.flag, c1.reconsume), (7, 0, 0));
    let mut want: Vec<&str> = half.names();
    want.push("TRANSACTION_CHECK_TIMES");
    let mut got = c1.names();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);
    assert_eq!(c1.prop("__transactionId__"), Some(id.as_str()));
    // The next round copies the copy: count 2.
    let s = check(&store, now() + 1);
    assert_eq!(s.to_check.len(), 1);
    assert_eq!(s.examined, 1);
    let c2 = record(&store, s.to_check[0]);
    assert_eq!(c2.prop("TRANSACTION_CHECK_TIMES"), Some("2"));
    assert_eq!(store.transaction_offsets().unwrap().0, 2);
    // The checker sees the real topic and queue.
    let m = store.transaction_message(s.to_check[0]).unwrap().unwrap();
    assert_eq!(m.topic(), "Orders");
    assert_eq!(m.queue_id, 2);
    assert_eq!(m.property("__transactionId__"), Some(id.as_str()));
    // No half there: None.
    assert!(store
        .transaction_message(s.to_check[0] + 1)
        .unwrap()
        .is_none());
    assert!(store.transaction_message(-5).unwrap().is_none());
    assert!(store.transaction_message(1 << 40).unwrap().is_none());
}

#[test]
fn discard_by_check_count_moves_the_half_to_the_max_time_topic() {
    let d = TempDir::new("txcheck", "discard-count");
    let store = open(d.path());
    let old = now() - 60_000;
    let (h, _) = prepare(&store, "a", old, &[]);
    let p = CheckParams {
        check_max: 2,
        ..params(later())
    };
    drain(&store);
    let s1 = store.transaction_check(p, usize::MAX).unwrap();
    drain(&store);
    let s2 = store
        .transaction_check(
            CheckParams {
                now_ms: later(),
                ..p
            },
            usize::MAX,
        )
        .unwrap();
    drain(&store);
    assert_eq!((s1.to_check.len(), s2.to_check.len()), (1, 1));
    let c2 = s2.to_check[0];
    assert_eq!(
        record(&store, c2).prop("TRANSACTION_CHECK_TIMES"),
        Some("2")
    );
    let s3 = store
        .transaction_check(
            CheckParams {
                now_ms: later(),
                ..p
            },
            usize::MAX,
        )
        .unwrap();
    assert_eq!(s3.to_check, Vec::<i64>::new());
    assert_eq!(s3.discarded, vec![c2]);
    let moved = queue(&store, CHECK_MAX_TOPIC);
    assert_eq!(moved.len(), 1);
    let r = record(&store, moved[0]);
    let copy = record(&store, c2);
    // needDiscard leaves the map as it was: the record is the copy's, flag and all.
    assert_eq!(r.prop("TRANSACTION_CHECK_TIMES"), Some("2"));
    assert_eq!(r.props, copy.props);
    assert_eq!(r.body, record(&store, h).body);
    assert_eq!(r.flag, copy.flag);
    assert_eq!(store.transaction_stats().unwrap().discarded, 1);
    // Nothing pending; a later round does nothing.
    drain(&store);
    assert!(store.pending_transactions(10).unwrap().is_empty());
    let s4 = store
        .transaction_check(
            CheckParams {
                now_ms: later(),
                ..p
            },
            usize::MAX,
        )
        .unwrap();
    assert!(s4.to_check.is_empty() && s4.discarded.is_empty());
}

#[test]
fn discard_by_age_keeps_the_count_need_discard_put() {
    let d = TempDir::new("txcheck", "discard-age");
    let store = open(d.path());
    let ancient = now() - RESERVED - 60_000;
    let (h, _) = prepare(&store, "a", ancient, &[]);
    let s = check(&store, now());
    assert_eq!(s.discarded, vec![h]);
    assert!(s.to_check.is_empty());
    let moved = queue(&store, CHECK_MAX_TOPIC);
    let r = record(&store, moved[0]);
    assert_eq!(r.prop("TRANSACTION_CHECK_TIMES"), Some("1"));
    // toMessageExtBrokerInner keeps the flag.
    assert_eq!(r.flag, 7);
    assert_eq!(r.born, ancient);
    assert_eq!(store.transaction_offsets().unwrap().0, 1);
}

#[test]
fn the_walk_stops_at_a_fresh_or_young_half() {
    let d = TempDir::new("txcheck", "stops");
    let store = open(d.path());
    let t = now();
    let (_, _) = prepare(&store, "old", t - 60_000, &[]);
    later();
    let (young, _) = prepare(&store, "young", t, &[]);
    let (_, _) = prepare(&store, "after", t - 60_000, &[]);
    drain(&store);
    let stored_young = store
        .look_message_by_offset(young)
        .unwrap()
        .unwrap()
        .store_timestamp;
    // The round started before the young half was stored: fresh.
    let s = store
        .transaction_check(params(stored_young), usize::MAX)
        .unwrap();
    assert_eq!((s.to_check.len(), s.examined, s.done), (1, 2, true));
    assert_eq!(store.transaction_offsets().unwrap().0, 1);
    // Stored before the round, born within the timeout: young, the walk stops there.
    drain(&store);
    let s = store
        .transaction_check(params(stored_young.max(t) + 5000), usize::MAX)
        .unwrap();
    assert_eq!((s.to_check.len(), s.examined, s.done), (0, 1, true));
    assert_eq!(store.transaction_offsets().unwrap().0, 1);
    // Past the timeout: checked, then the one after it, then the first round's copy of the
    // old half (stored before this round).
    drain(&store);
    let s = store
        .transaction_check(params(t + 6001), usize::MAX)
        .unwrap();
    assert_eq!((s.to_check.len(), s.examined), (3, 3));
    let counts: Vec<String> = s
        .to_check
        .iter()
        .map(|&c| {
            record(&store, c)
                .prop("TRANSACTION_CHECK_TIMES")
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(counts, vec!["1", "1", "2"]);
}

#[test]
fn an_immunity_half_is_put_back_with_its_prepared_offset_then_resolved_through_it() {
    let d = TempDir::new("txcheck", "immunity");
    let store = open(d.path());
    let t = now();
    let (h, _) = prepare(
        &store,
        "a",
        t - 10_000,
        &[("CHECK_IMMUNITY_TIME_IN_SECONDS", "60")],
    );
    let s = check(&store, t);
    assert!(s.to_check.is_empty(), "{s:?}");
    assert_eq!(s.examined, 1);
    let copies = queue(&store, HALF_TOPIC);
    assert_eq!(copies.len(), 2);
    let c = record(&store, copies[1]);
    assert_eq!(c.prop("TRAN_PREPARED_QUEUE_OFFSET"), Some("0"));
    assert_eq!(c.prop("TRANSACTION_CHECK_TIMES"), Some("1"));
    assert_eq!(store.transaction_offsets().unwrap().0, 1);
    // The producer commits by the original offset: the op names queue offset 0, below the
    // progress; the re-put is resolved through its TRAN_PREPARED_QUEUE_OFFSET.
    store.end_transaction(TxTarget::Offset(h), true).unwrap();
    flush_ops(&store);
    let s = check(&store, t + 1);
    assert_eq!((s.examined, s.to_check.len()), (1, 0));
    assert_eq!(store.transaction_offsets().unwrap(), (2, 1));
    assert!(store.pending_transactions(10).unwrap().is_empty());
}

#[test]
fn the_op_progress_stops_at_an_op_still_naming_a_half_ahead() {
    let d = TempDir::new("txcheck", "opprogress");
    let store = open(d.path());
    let t = now();
    let (h0, _) = prepare(&store, "a", t - 60_000, &[]);
    let (h1, _) = prepare(&store, "b", t, &[]);
    store.end_transaction(TxTarget::Offset(h0), false).unwrap();
    flush_ops(&store);
    store.end_transaction(TxTarget::Offset(h1), false).unwrap();
    flush_ops(&store);
    // Both ops are read; only the first one's half is reached before ... the second half is
    // resolved too (step 1 needs no age): both ops used.
    let s = check(&store, t + 1);
    assert_eq!(s.examined, 2);
    assert_eq!(store.transaction_offsets().unwrap(), (2, 2));
    // A young half not named by an op stops the walk: an op naming a later half stays.
    let (_h2, _) = prepare(&store, "c", t + 10, &[]);
    let (h3, _) = prepare(&store, "d", t + 10, &[]);
    store.end_transaction(TxTarget::Offset(h3), false).unwrap();
    flush_ops(&store);
    let s = check(&store, t + 20);
    assert_eq!((s.examined, s.done), (1, true));
    assert_eq!(store.transaction_offsets().unwrap(), (2, 2));
}

#[test]
fn a_commit_written_before_a_crash_is_found_and_only_its_op_is_written() {
    let d = TempDir::new("txcheck", "exactly-once");
    let t = now();
    let (h, id) = {
        let store = open(d.path());
        let (h, id) = prepare(&store, "a", t - 60_000, &[]);
        // What a kill between the real put and the op leaves: the commit record, no op.
        let half = store.look_message_by_offset(h).unwrap().unwrap();
        let mut props = half.properties();
        props.retain(|(k, _)| k != "REAL_TOPIC" && k != "REAL_QID");
        let commit = Message {
            topic: "Orders".into(),
            queue_id: 2,
            body: half.body().to_vec(),
            sys_flag: sysflag::TRANSACTION_COMMIT_TYPE,
            born_timestamp: half.born_timestamp,
            born_host: Some(half.born_host),
            prepared_transaction_offset: h,
            properties: props,
            ..Message::default()
        };
        assert!(store.put_message(&commit).unwrap().is_ok());
        store.close().unwrap();
        (h, id)
    };
    let store = open(d.path());
    let s = check(&store, now());
    assert_eq!(s.to_check, Vec::<i64>::new());
    assert_eq!(s.already_committed, 1);
    flush_ops(&store);
    let ops = queue(&store, OP_TOPIC);
    assert_eq!(ops.len(), 1);
    assert_eq!(record(&store, ops[0]).body, b"0,");
    assert_eq!(queue(&store, "Orders").len(), 0); // queue 0 of Orders: nothing
    let real = store
        .get_message("Orders", 2, 0, 100, &TagFilter::all())
        .unwrap();
    assert_eq!(real.messages.len(), 1);
    assert_eq!(store.transaction_stats().unwrap().already_committed, 1);
    // The transaction is ended: ending it again is refused, nothing pending.
    assert!(store.end_transaction(TxTarget::Id(id), true).is_err());
    assert!(store.pending_transactions(10).unwrap().is_empty());
    let _ = h;
}

#[test]
fn the_pending_list_holds_the_latest_copy_of_each_unresolved_transaction() {
    let d = TempDir::new("txcheck", "pending");
    let store = open(d.path());
    let old = now() - 60_000;
    let (_h0, id0) = prepare(&store, "a", old, &[]);
    let (h1, _) = prepare(&store, "b", old, &[]);
    let (_h2, id2) = prepare(&store, "c", old, &[]);
    store.end_transaction(TxTarget::Offset(h1), true).unwrap();
    drain(&store);
    let p = store.pending_transactions(10).unwrap();
    assert_eq!(
        p.iter()
            .map(|t| t.transaction_id.as_str())
            .collect::<Vec<_>>(),
        vec![id0.as_str(), id2.as_str()]
    );
    assert_eq!(p[0].check_times, 0);
    assert_eq!(p[0].topic, "Orders");
    assert_eq!(p[0].queue_id, 2);
    assert_eq!(p[0].producer_group, "PG");
    drain(&store);
    let s = store
        .transaction_check(params(later()), usize::MAX)
        .unwrap();
    assert_eq!(s.to_check.len(), 2);
    // Right after the round (its copies not dispatched yet), the list has the copies.
    let p = store.pending_transactions(10).unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].half_offset, s.to_check[0]);
    assert_eq!(p[0].check_times, 1);
    assert_eq!(store.pending_transactions(1).unwrap().len(), 1);
    // Reopened (table empty), the ops and the progress still tell.
    flush_ops(&store);
    store.close().unwrap();
    let store = open(d.path());
    let p = store.pending_transactions(10).unwrap();
    assert_eq!(p.len(), 2, "{p:?}");
}

#[test]
fn max_to_check_ends_a_round_with_more_to_do() {
    let d = TempDir::new("txcheck", "max");
    let store = open(d.path());
    let old = now() - 60_000;
    for k in 0..5 {
        prepare(&store, &format!("k{k}"), old, &[]);
    }
    drain(&store);
    let s = store.transaction_check(params(later()), 2).unwrap();
    assert_eq!((s.to_check.len(), s.done), (2, false));
    assert_eq!(store.transaction_offsets().unwrap().0, 2);
    let s = store.transaction_check(params(later()), 2).unwrap();
    assert_eq!((s.to_check.len(), s.done), (2, false));
    let s = store.transaction_check(params(later()), 2).unwrap();
    assert_eq!((s.to_check.len(), s.done), (1, true));
    assert_eq!(store.transaction_offsets().unwrap().0, 5);
}

#[test]
fn progress_is_clamped_and_empty_queues_are_a_quiet_round() {
    let d = TempDir::new("txcheck", "bounds");
    let store = open(d.path());
    let s = store.transaction_check(params(now()), 10).unwrap();
    assert_eq!(
        s,
        CheckStep {
            done: true,
            ..CheckStep::default()
        }
    );
    assert_eq!(store.transaction_offsets().unwrap(), (0, 0));
    assert!(store.pending_transactions(10).unwrap().is_empty());
    let old = now() - 60_000;
    prepare(&store, "a", old, &[]);
    drain(&store);
    // A progress past the end is brought back to the end; before the start, to the start.
    assert_eq!(store.transaction_load(99, 99).unwrap(), (1, 0));
    let s = check(&store, now());
    assert_eq!(s.examined, 0);
    assert_eq!(store.transaction_load(-1, -1).unwrap(), (0, 0));
    let s = check(&store, now());
    assert_eq!(s.to_check.len(), 1);
}

#[test]
fn a_damaged_half_is_logged_and_passed() {
    let d = TempDir::new("txcheck", "damaged");
    let old = now() - 60_000;
    {
        let store = open(d.path());
        prepare(&store, "a", old, &[]);
        prepare(&store, "b", old, &[]);
        // A record of the half topic that is no half (no id, no real topic): judged as any
        // half, copied, never a panic.
        let bare = Message {
            topic: HALF_TOPIC.into(),
            body: b"bare".to_vec(),
            born_timestamp: old,
            ..Message::default()
        };
        assert!(store.put_message(&bare).unwrap().is_ok());
        prepare(&store, "c", old, &[]);
        drain(&store);
        store.close().unwrap();
    }
    // The first unit of the half queue gives a size its record does not have.
    let cq = d
        .path()
        .join("consumequeue")
        .join(HALF_TOPIC)
        .join("0")
        .join(format!("{:020}", 0));
    let mut units = std::fs::read(&cq).unwrap();
    units[8..12].copy_from_slice(&7i32.to_be_bytes());
    std::fs::write(&cq, &units).unwrap();
    let store = open(d.path());
    let s = check(&store, now());
    assert_eq!(s.examined, 4, "{s:?}");
    assert_eq!(s.to_check.len(), 3, "{s:?}");
    assert_eq!(store.transaction_offsets().unwrap().0, 4);
    let bare_copy = record(&store, s.to_check[1]);
    assert_eq!(bare_copy.body, b"bare");
    assert_eq!(bare_copy.prop("TRANSACTION_CHECK_TIMES"), Some("1"));
    let p = store.pending_transactions(10).unwrap();
    assert_eq!(p.len(), 3, "{p:?}");
}

#[test]
fn copies_cross_segments_whole_and_in_order() {
    let d = TempDir::new("txcheck", "segments");
    let store = open(d.path());
    let old = now() - 60_000;
    let mut halves = Vec::new();
    for k in 0..600 {
        halves.push(prepare(&store, &format!("key-{k}"), old, &[]).0);
    }
    let s = check(&store, now());
    assert_eq!(s.to_check.len(), 600);
    assert!(store.commitlog_segments().unwrap().len() > 3);
    for (k, &c) in s.to_check.iter().enumerate() {
        let r = record(&store, c);
        assert_eq!(r.body, format!("body-key-{k}").into_bytes());
        assert_eq!(r.queue_offset, 600 + k as i64);
    }
    let q = queue(&store, HALF_TOPIC);
    assert_eq!(q.len(), 1200);
    assert_eq!(&q[600..], &s.to_check[..]);
    // Each record passes the full check, CRC included.
    for &c in &s.to_check {
        let m = store.look_message_by_offset(c).unwrap().unwrap();
        assert!(matches!(
            check_record(&raw(d.path(), c, m.store_size), true),
            RecordCheck::Message(_)
        ));
    }
}

fn raw(dir: &Path, at: i64, size: i32) -> Vec<u8> {
    let seg_size = 64 * 1024;
    let base = at / seg_size * seg_size;
    let seg = std::fs::read(dir.join("commitlog").join(format!("{base:020}"))).unwrap();
    let off = (at - base) as usize;
    seg[off..off + size as usize].to_vec()
}

#[test]
fn ends_racing_check_rounds_commit_each_transaction_once() {
    let d = TempDir::new("txcheck", "race");
    let store = std::sync::Arc::new(open(d.path()));
    let old = now() - 60_000;
    let n = 1500;
    let ids: Vec<String> = (0..n)
        .map(|k| prepare(&store, &format!("r{k}"), old, &[]).1)
        .collect();
    drain(&store);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The check service and its checker: every copy asked about is committed by its offset.
    let checker = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut answered = 0;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                drain(&store);
                let s = store.transaction_check(params(later()), 64).unwrap();
                for c in s.to_check {
                    match store.end_transaction(TxTarget::Offset(c), true) {
                        Ok(_) => answered += 1,
                        Err(rmqstore_core::StoreError::TransactionEnded(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                store.transaction_flush_ops(now(), 4096, 0, false).unwrap();
            }
            answered
        })
    };
    // The producers end the same transactions by id at the same time, in the order the rounds
    // copy them (on a loaded machine they may finish before the rounds start: the test then
    // races less, and still counts).
    let mut ended = 0;
    std::thread::sleep(Duration::from_millis(5));
    for id in ids.iter() {
        match store.end_transaction(TxTarget::Id(id.clone()), true) {
            Ok(_) => ended += 1,
            Err(rmqstore_core::StoreError::TransactionEnded(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    let answered = checker.join().unwrap();
    // The rest (those the rounds had not reached) are committed by the check.
    let mut answered = answered;
    loop {
        drain(&store);
        let s = store
            .transaction_check(params(later()), usize::MAX)
            .unwrap();
        if s.to_check.is_empty() && s.done {
            break;
        }
        for c in s.to_check {
            if store.end_transaction(TxTarget::Offset(c), true).is_ok() {
                answered += 1;
            }
        }
    }
    assert_eq!(ended + answered, n, "each transaction committed once");
    drain(&store);
    let mut seen = std::collections::HashMap::new();
    let mut offset = 0;
    loop {
        let r = store
            .get_message("Orders", 2, offset, 32, &TagFilter::all())
            .unwrap();
        if r.messages.is_empty() {
            break;
        }
        offset = r.next_begin_offset;
        for m in r.messages {
            *seen
                .entry(m.property(property::UNIQ_KEY).unwrap().to_owned())
                .or_insert(0) += 1;
        }
    }
    assert_eq!(seen.len(), n);
    assert!(seen.values().all(|&c| c == 1));
    // A last round finds nothing to ask about.
    flush_ops(&store);
    let s = check(&store, now());
    assert!(s.to_check.is_empty(), "{s:?}");
}

/// The bucket of `name` in the broker's `HashMap<>(128)` (`HashMap.hash` of
/// `String.hashCode`; a message's few properties never make it grow).
fn bucket(name: &str) -> u32 {
    let h = name
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c))) as u32;
    (h ^ (h >> 16)) & 127
}

/// `messageProperties2String` of a map the items were put into in order (distinct names).
fn map_string(items: &[(String, String)]) -> String {
    let mut v: Vec<&(String, String)> = items.iter().collect();
    v.sort_by_key(|(k, _)| bucket(k)); // stable: a bucket keeps its put order
    v.iter().map(|(k, v)| format!("{k}\u{1}{v}\u{2}")).collect()
}

#[test]
fn copy_strings_are_the_maps_byte_for_byte_first_and_later_checks() {
    let d = TempDir::new("txcheck", "copybytes");
    let store = open(d.path());
    let old = now() - 60_000;
    // "Aa" and "BB" share a bucket (and a Java hash): their put order is kept; "xco" shares
    // the count's bucket: the count, put last, goes after it.
    assert_eq!(bucket("xco"), bucket("TRANSACTION_CHECK_TIMES"));
    let (h, _) = prepare(
        &store,
        "k",
        old,
        &[
            ("Aa", "1"),
            ("BB", "2"),
            ("zz", "3"),
            ("TRACE_ON", "true"),
            ("xco", "4"),
        ],
    );
    let half = record(&store, h);
    let items = |r: &Rec| -> Vec<(String, String)> {
        r.props
            .split('\u{2}')
            .filter_map(|i| i.split_once('\u{1}'))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    };
    // The half is stored in the map's order.
    assert_eq!(half.props, map_string(&items(&half)));
    let mut want = items(&half);
    want.push(("TRANSACTION_CHECK_TIMES".to_owned(), "1".to_owned()));
    let s = check(&store, now());
    let c1 = record(&store, s.to_check[0]);
    assert_eq!(c1.props, map_string(&want));
    for n in 2..=11 {
        let s = check(&store, now() + n);
        assert_eq!(s.to_check.len(), 1, "{s:?}");
        let c = record(&store, s.to_check[0]);
        for (k, v) in want.iter_mut() {
            if k == "TRANSACTION_CHECK_TIMES" {
                *v = n.to_string();
            }
        }
        assert_eq!(c.props, map_string(&want), "check {n}");
    }
}
