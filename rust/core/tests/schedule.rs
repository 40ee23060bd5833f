//! Delay levels through the store's API: the put transformation (exact record bytes), the
//! consume queue's deliver times (also when a queue is rebuilt from the commitlog), delivery
//! (`messageTimeUp`'s record, drops, a failed put retried) and the progress loaded after a
//! crash.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::TempDir;
use rmqstore_core::format::{check_record, property, sysflag, HostAddr, RecordCheck};
use rmqstore_core::schedule::SCHEDULE_TOPIC;
use rmqstore_core::{
    Batch, Message, MessageStore, PutBatch, PutMessageHook, PutMessageStatus, StoreConfig,
};

fn config(levels: &str) -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: 256 * 1024,
        mapped_file_size_consume_queue: 20 * 1000,
        max_hash_slot_num: 64,
        max_index_num: 1000,
        message_delay_level: levels.to_owned(),
        ..StoreConfig::default()
    }
}

fn open(dir: &Path, levels: &str) -> MessageStore {
    MessageStore::open(dir, config(levels)).unwrap()
}

fn drain(store: &MessageStore) {
    while store.dispatch_step(1 << 20, Duration::ZERO).unwrap().behind > 0 {}
}

fn delayed(topic: &str, queue_id: i32, delay: &str, key: &str) -> Message {
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
            (property::UNIQ_KEY.into(), format!("U-{key}")),
            (property::DELAY.into(), delay.into()),
            (property::WAIT.into(), "true".into()),
        ],
        ..Message::default()
    }
}

/// The stored record at commitlog offset `at`, read from the segment file.
fn raw_record(dir: &Path, at: i64) -> Vec<u8> {
    let seg = std::fs::read(dir.join("commitlog").join(format!("{:020}", 0))).unwrap();
    let size = i32::from_be_bytes(seg[at as usize..at as usize + 4].try_into().unwrap());
    seg[at as usize..at as usize + size as usize].to_vec()
}

fn props_of(rec: &[u8]) -> String {
    match check_record(rec, true) {
        RecordCheck::Message(d) => String::from_utf8(d.properties.to_vec()).unwrap(),
        other => panic!("not a record: {other:?}"),
    }
}

/// The consume queue unit `(phy, size, tags code)` at `index`, from the file.
fn cq_unit(dir: &Path, topic: &str, queue_id: i32, index: usize) -> (i64, i32, i64) {
    let f = std::fs::read(
        dir.join("consumequeue")
            .join(topic)
            .join(queue_id.to_string())
            .join(format!("{:020}", 0)),
    )
    .unwrap();
    let u = &f[index * 20..index * 20 + 20];
    (
        i64::from_be_bytes(u[..8].try_into().unwrap()),
        i32::from_be_bytes(u[8..12].try_into().unwrap()),
        i64::from_be_bytes(u[12..20].try_into().unwrap()),
    )
}

fn java_hash(s: &str) -> i64 {
    let mut h: i32 = 0;
    for u in s.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(u));
    }
    i64::from(h)
}

#[test]
fn a_delayed_put_is_stored_in_the_schedule_topic_with_rocketmqs_bytes() {
    let d = TempDir::new("schedule", "transform");
    let store = open(d.path(), "1s 5s 10s");
    let r = store.put_message(&delayed("TopicA", 2, "3", "k1")).unwrap();
    assert_eq!(r.status, PutMessageStatus::PutOk);
    let rec = raw_record(d.path(), r.wrote_offset);
    let RecordCheck::Message(m) = check_record(&rec, true) else {
        panic!()
    };
    assert_eq!(m.topic, SCHEDULE_TOPIC.as_bytes());
    assert_eq!(m.queue_id, 2, "level 3 is queue 2");
    // Java's HashMap<>(128) order for these names (see schedule::order's test).
    assert_eq!(
        props_of(&rec),
        "UNIQ_KEY\u{1}U-k1\u{2}DELAY\u{1}3\u{2}TAGS\u{1}TagA\u{2}KEYS\u{1}k1\u{2}WAIT\u{1}true\u{2}\
         REAL_TOPIC\u{1}TopicA\u{2}REAL_QID\u{1}2\u{2}"
    );
    assert_eq!((m.flag, m.reconsume_times, m.body), (7, 2, &b"body-k1"[..]));
    drain(&store);
    // The unit's tags code is the deliver time: store time + level 3's 10 s.
    let (phy, size, tags) = cq_unit(d.path(), SCHEDULE_TOPIC, 2, 0);
    assert_eq!((phy, size), (r.wrote_offset, rec.len() as i32));
    assert_eq!(tags, r.store_timestamp + 10_000);
    assert_eq!(store.max_offset_in_queue("TopicA", 2).unwrap(), 0);
    let stats = store.schedule_stats().unwrap();
    assert_eq!(stats.len(), 3);
    assert_eq!(
        (
            stats[2].level,
            stats[2].delay_ms,
            stats[2].offset,
            stats[2].max_offset
        ),
        (3, 10_000, 0, 1)
    );
    assert_eq!(
        (stats[2].pending, stats[2].oldest_due_ms),
        (1, Some(r.store_timestamp + 10_000))
    );
    assert_eq!((stats[0].pending, stats[0].oldest_due_ms), (0, None));
    assert_eq!(store.schedule_levels(), vec![1000, 5000, 10_000]);
}

#[test]
fn levels_are_clamped_and_other_delays_are_left_alone() {
    let d = TempDir::new("schedule", "clamp");
    let store = open(d.path(), "1s 5s");
    // Above the maximum: the last level, DELAY rewritten to it.
    let mut m = delayed("TopicA", 0, "99", "k");
    m.properties = vec![
        (property::DELAY.into(), "99".into()),
        (property::TAGS.into(), "T".into()),
    ];
    m.topic = "X".into();
    let r = store.put_message(&m).unwrap();
    let rec = raw_record(d.path(), r.wrote_offset);
    assert_eq!(
        props_of(&rec),
        "DELAY\u{1}2\u{2}TAGS\u{1}T\u{2}REAL_TOPIC\u{1}X\u{2}REAL_QID\u{1}0\u{2}"
    );
    let RecordCheck::Message(v) = check_record(&rec, false) else {
        panic!()
    };
    assert_eq!((v.topic, v.queue_id), (SCHEDULE_TOPIC.as_bytes(), 1));
    // "+2" and "02" are level 2 (Integer.parseInt), kept as written.
    let r2 = store.put_message(&delayed("A", 0, "+2", "p")).unwrap();
    assert!(props_of(&raw_record(d.path(), r2.wrote_offset)).contains("DELAY\u{1}+2\u{2}"));
    // 0 and negative levels: stored as given, in their own topic.
    for delay in ["0", "-1"] {
        let r = store.put_message(&delayed("Own", 1, delay, "z")).unwrap();
        assert_eq!(r.status, PutMessageStatus::PutOk);
        let rec = raw_record(d.path(), r.wrote_offset);
        let RecordCheck::Message(v) = check_record(&rec, false) else {
            panic!()
        };
        assert_eq!((v.topic, v.queue_id), (&b"Own"[..], 1));
        assert!(!props_of(&rec).contains("REAL_TOPIC"));
    }
    // Not a number: RocketMQ's put throws and stores nothing.
    let end = store.max_phy_offset().unwrap();
    for delay in ["abc", "1.5", "2147483648", " 1"] {
        let r = store.put_message(&delayed("A", 0, delay, "n")).unwrap();
        assert_eq!(r.status, PutMessageStatus::MessageIllegal, "{delay}");
    }
    assert_eq!(store.max_phy_offset().unwrap(), end);
    drain(&store);
    assert_eq!(store.max_offset_in_queue("Own", 1).unwrap(), 2);
    let (_, _, tags) = cq_unit(d.path(), "Own", 1, 0);
    assert_eq!(tags, java_hash("TagA"), "other topics keep the TAGS hash");
}

#[test]
fn transactions_and_batches() {
    let d = TempDir::new("schedule", "tx");
    let store = open(d.path(), "1s 5s");
    // A PREPARED message keeps its topic and DELAY (RocketMQ transforms NOT and COMMIT only);
    // a COMMIT one is transformed.
    let mut p = delayed("TxTopic", 0, "1", "p");
    p.sys_flag = sysflag::TRANSACTION_PREPARED_TYPE;
    let r = store.put_message(&p).unwrap();
    let rec = raw_record(d.path(), r.wrote_offset);
    let RecordCheck::Message(v) = check_record(&rec, false) else {
        panic!()
    };
    assert_eq!(v.topic, b"TxTopic");
    assert!(props_of(&rec).contains("DELAY\u{1}1\u{2}"));
    let mut c = delayed("TxTopic", 0, "1", "c");
    c.sys_flag = sysflag::TRANSACTION_COMMIT_TYPE;
    let r = store.put_message(&c).unwrap();
    let rec = raw_record(d.path(), r.wrote_offset);
    let RecordCheck::Message(v) = check_record(&rec, false) else {
        panic!()
    };
    assert_eq!(v.topic, SCHEDULE_TOPIC.as_bytes());
    // A PREPARED message in the schedule topic with a DELAY that is not a number would stop
    // RocketMQ's dispatch: refused.
    let mut bad = delayed(SCHEDULE_TOPIC, 0, "x", "b");
    bad.sys_flag = sysflag::TRANSACTION_PREPARED_TYPE;
    assert_eq!(
        store.put_message(&bad).unwrap().status,
        PutMessageStatus::MessageIllegal
    );
    // Batches with a delay level are MESSAGE_ILLEGAL (asyncPutMessages).
    let bodies: Vec<&[u8]> = vec![b"a", b"b"];
    for (delay, want) in [
        ("1", PutMessageStatus::MessageIllegal),
        ("x", PutMessageStatus::MessageIllegal),
        ("0", PutMessageStatus::PutOk),
    ] {
        let props = vec![(property::DELAY.to_string(), delay.to_string())];
        let batch = Batch {
            topic: "B",
            queue_id: 0,
            bodies: &bodies,
            properties: &props,
            flag: 0,
            born_timestamp: 0,
            born_host: None,
        };
        assert_eq!(store.put_messages(&batch).unwrap().status, want, "{delay}");
    }
}

#[test]
fn a_rebuilt_schedule_queue_holds_deliver_times_not_tag_hashes() {
    // A store holding delayed messages whose consume queues are rebuilt from the commitlog
    // (RocketMQ's or rmqstore's, e.g. after the consumequeue folder was lost): the units of the
    // schedule topic must hold deliver times, as RocketMQ's dispatch writes them.
    let d = TempDir::new("schedule", "rebuild");
    let mut written = Vec::new();
    {
        let store = open(d.path(), "1s 5s 10s");
        for (i, level) in ["1", "3", "9"].iter().enumerate() {
            written.push(
                store
                    .put_message(&delayed("T", 0, level, &i.to_string()))
                    .unwrap(),
            );
        }
        store.close().unwrap();
    }
    std::fs::remove_dir_all(d.path().join("consumequeue")).unwrap();
    std::fs::remove_file(d.path().join("checkpoint")).unwrap();
    let store = open(d.path(), "1s 5s 10s");
    drain(&store);
    assert_eq!(
        cq_unit(d.path(), SCHEDULE_TOPIC, 0, 0).2,
        written[0].store_timestamp + 1000
    );
    assert_eq!(
        cq_unit(d.path(), SCHEDULE_TOPIC, 2, 0).2,
        written[1].store_timestamp + 10_000
    );
    // Level 9 was clamped to 3 at the put.
    assert_eq!(
        cq_unit(d.path(), SCHEDULE_TOPIC, 2, 1).2,
        written[2].store_timestamp + 10_000
    );
    store.close().unwrap();
}

/// Refuses puts to a topic while `on` is set.
struct Refuse(Arc<AtomicBool>);

impl PutMessageHook for Refuse {
    fn name(&self) -> &str {
        "refuse"
    }
    fn before_put(&self, msg: &mut Message) -> Result<(), PutMessageStatus> {
        if self.0.load(Ordering::Relaxed) && msg.topic == "Blocked" {
            return Err(PutMessageStatus::OsPageCacheBusy);
        }
        Ok(())
    }
    fn before_put_batch(&self, _: &mut PutBatch<'_>) -> Result<(), PutMessageStatus> {
        Ok(())
    }
}

fn ahead() -> i64 {
    rmqstore_core::now_millis() + 3_600_000
}

#[test]
fn delivery_rebuilds_the_message_as_message_time_up_does() {
    let d = TempDir::new("schedule", "deliver");
    let on = Arc::new(AtomicBool::new(false));
    let mut store = open(d.path(), "1s 5s");
    store.add_put_hook(Box::new(Refuse(on.clone())));
    let mut compressed = delayed("Real", 3, "2", "c");
    compressed.sys_flag = sysflag::COMPRESSED;
    compressed.body = vec![0x78, 0x9c, 1, 2, 3];
    let originals = [
        store.put_message(&delayed("Real", 1, "2", "a")).unwrap(),
        store.put_message(&compressed).unwrap(),
        store
            .put_message(&delayed("RMQ_SYS_TRANS_HALF_TOPIC", 0, "2", "h"))
            .unwrap(),
        store.put_message(&delayed("Blocked", 0, "2", "b")).unwrap(),
        store.put_message(&delayed("Real", 1, "2", "z")).unwrap(),
    ];
    drain(&store);
    // Not due yet with the real clock: nothing moves, the due time is reported.
    let s = store.schedule_deliver(2, 100).unwrap();
    assert_eq!((s.delivered, s.dropped, s.offset), (0, 0, 0));
    assert_eq!(s.next_due_ms, Some(originals[0].store_timestamp + 5000));
    // Due (a clock an hour ahead): the first two are delivered, the half-topic one dropped,
    // the blocked one stops the round with its status and stays.
    on.store(true, Ordering::Relaxed);
    let s = store.schedule_deliver_at(2, 100, ahead).unwrap();
    assert_eq!((s.delivered, s.dropped, s.offset), (2, 1, 3));
    assert_eq!(s.status, Some(PutMessageStatus::OsPageCacheBusy));
    assert!(s.next_due_ms.is_some());
    assert_eq!(store.schedule_offsets().unwrap()[&2], 3);
    // Retried by the next round once puts pass; max_msgs bounds a round.
    on.store(false, Ordering::Relaxed);
    let s = store.schedule_deliver_at(2, 1, ahead).unwrap();
    assert_eq!(
        (s.delivered, s.dropped, s.offset, s.status),
        (1, 0, 4, None)
    );
    assert_eq!(s.next_due_ms, Some(originals[4].store_timestamp + 5000));
    let s = store.schedule_deliver_at(2, 100, ahead).unwrap();
    assert_eq!((s.delivered, s.offset, s.next_due_ms), (1, 5, None));
    drain(&store);
    // The copy of the first: real topic and queue, the original's properties string, body,
    // flag, born time and host, reconsume times, sysflag; its unit has the TAGS hash.
    let copy_at = store.commit_log_offset_in_queue("Real", 1, 0).unwrap();
    let copy = raw_record(d.path(), copy_at);
    let orig = raw_record(d.path(), originals[0].wrote_offset);
    assert_eq!(props_of(&copy), props_of(&orig));
    let (RecordCheck::Message(c), RecordCheck::Message(o)) =
        (check_record(&copy, true), check_record(&orig, true))
    else {
        panic!()
    };
    assert_eq!((c.topic, c.queue_id), (&b"Real"[..], 1));
    assert_eq!(
        (
            c.body,
            c.flag,
            c.born_timestamp,
            c.born_host,
            c.reconsume_times,
            c.sys_flag
        ),
        (
            o.body,
            o.flag,
            o.born_timestamp,
            o.born_host,
            o.reconsume_times,
            o.sys_flag
        )
    );
    assert_eq!(cq_unit(d.path(), "Real", 1, 0).2, java_hash("TagA"));
    // The compressed body stays as stored, with its sysflag.
    let cc = raw_record(
        d.path(),
        store.commit_log_offset_in_queue("Real", 3, 0).unwrap(),
    );
    let RecordCheck::Message(cc) = check_record(&cc, true) else {
        panic!()
    };
    assert_eq!(cc.body, &[0x78, 0x9c, 1, 2, 3]);
    assert_eq!(cc.sys_flag & sysflag::COMPRESSED, sysflag::COMPRESSED);
    // Delivered copies are not scheduled again (their DELAY stays in the stored string).
    assert_eq!(store.max_offset_in_queue(SCHEDULE_TOPIC, 1).unwrap(), 5);
    assert_eq!(store.max_offset_in_queue("Real", 1).unwrap(), 2);
    assert_eq!(store.max_offset_in_queue("Blocked", 0).unwrap(), 1);
    assert_eq!(
        store
            .max_offset_in_queue("RMQ_SYS_TRANS_HALF_TOPIC", 0)
            .unwrap(),
        0
    );
    // A level outside the table is an argument error.
    assert!(store.schedule_deliver(3, 1).is_err());
    assert!(store.schedule_deliver(0, 1).is_err());
    store.close().unwrap();
}

#[test]
fn loading_a_stale_table_skips_what_was_delivered_after_it_was_saved() {
    let d = TempDir::new("schedule", "recover");
    let saved_at;
    {
        let store = open(d.path(), "1s 5s");
        for i in 0..10 {
            store
                .put_message(&delayed("R", i % 2, "1", &i.to_string()))
                .unwrap();
        }
        // Two identical messages (no UNIQ_KEY): only one copy may count for each.
        for _ in 0..2 {
            let mut m = delayed("R", 0, "1", "same");
            m.properties.retain(|(k, _)| k != property::UNIQ_KEY);
            store.put_message(&m).unwrap();
        }
        drain(&store);
        assert_eq!(store.schedule_deliver_at(1, 3, ahead).unwrap().offset, 3);
        // The table is saved here (clock read first), then 8 more are delivered, then the
        // process "dies" (the store is closed without saving the table again).
        saved_at = rmqstore_core::now_millis();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(store.schedule_deliver_at(1, 8, ahead).unwrap().offset, 11);
        store.close().unwrap();
    }
    let store = open(d.path(), "1s 5s");
    let table = HashMap::from([(1, 3), (2, 0), (7, 42)]);
    let got = store.schedule_load(&table, saved_at).unwrap();
    assert_eq!(got[&1], 11, "{got:?}");
    assert_eq!(got[&2], 0);
    assert_eq!(got[&7], 42, "unknown levels are kept");
    // Without a save time the scan starts at the oldest pending original: same answer.
    assert_eq!(store.schedule_load(&table, 0).unwrap()[&1], 11);
    // Out-of-range saved offsets are clamped; a missing level starts at the queue's minimum.
    assert_eq!(
        store.schedule_load(&HashMap::from([(1, 999)]), 0).unwrap()[&1],
        12
    );
    assert_eq!(store.schedule_load(&HashMap::new(), 0).unwrap()[&1], 11);
    // The last one is delivered exactly once.
    let s = store.schedule_deliver_at(1, 100, ahead).unwrap();
    assert_eq!((s.delivered, s.offset), (1, 12));
    drain(&store);
    assert_eq!(
        store.max_offset_in_queue("R", 0).unwrap() + store.max_offset_in_queue("R", 1).unwrap(),
        12
    );
    store.close().unwrap();
}

#[test]
fn a_malformed_level_string_is_refused_at_open() {
    let d = TempDir::new("schedule", "config");
    let e = MessageStore::open(d.path(), config("1x")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "message_delay_level: level 1 ('1x') must end with a unit s, m, h or d in '1x'"
    );
    let mut c = StoreConfig::default();
    assert!(c
        .set(
            "message_delay_level",
            rmqstore_core::config::SettingValue::Str("5s 1d".into())
        )
        .is_ok());
    assert!(c
        .set(
            "message_delay_level",
            rmqstore_core::config::SettingValue::Str("5s  1d".into())
        )
        .is_err());
}
