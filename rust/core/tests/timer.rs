//! Timer messages end to end on the Rust API: the put hook, enqueue and dequeue rounds, roll,
//! cancellation, flush and reopen, and the files RocketMQ reads.

mod common;

use std::time::Duration;

use common::TempDir;
use rmqstore_core::format::timer::{TimerCheckFields, TimerLogUnit, MAGIC_DEFAULT, MAGIC_ROLL};
use rmqstore_core::read::TagFilter;
use rmqstore_core::{Message, MessageStore, PutMessageStatus, StoreConfig, TIMER_TOPIC};

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

fn msg(topic: &str, key: &str, props: &[(&str, String)]) -> Message {
    let mut properties = vec![("UNIQ_KEY".to_owned(), key.to_owned())];
    properties.extend(props.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    Message {
        topic: topic.into(),
        body: key.as_bytes().to_vec(),
        queue_id: 2,
        properties,
        ..Message::default()
    }
}

fn drain(store: &MessageStore) {
    while store.dispatch_step(1 << 20, Duration::ZERO).unwrap().behind > 0 {}
}

/// Every message of `topic`/`queue` as (body, properties).
fn queue(store: &MessageStore, topic: &str, q: i32) -> Vec<rmqstore_core::MessageExt> {
    drain(store);
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let r = store
            .get_message(topic, q, offset, 32, &TagFilter::all())
            .unwrap();
        if r.messages.is_empty() {
            return out;
        }
        offset = r.next_begin_offset;
        out.extend(r.messages);
    }
}

fn bodies(v: &[rmqstore_core::MessageExt]) -> Vec<String> {
    v.iter()
        .map(|m| String::from_utf8_lossy(m.body()).into_owned())
        .collect()
}

fn now() -> i64 {
    rmqstore_core::now_millis()
}

#[test]
fn due_messages_reach_their_real_queue_in_deliver_order() {
    let d = TempDir::new("timer", "due");
    let store = MessageStore::open(d.path(), config()).unwrap();
    // A minute ahead: however slow this machine, nothing is due before the enqueue below.
    let t0 = now() + 60_000;
    for (i, delay) in [900, 300, 600, 300].iter().enumerate() {
        let r = store
            .put_message(&msg(
                "TopicA",
                &format!("k{i}"),
                &[("TIMER_DELIVER_MS", (t0 + delay).to_string())],
            ))
            .unwrap();
        assert_eq!(r.status, PutMessageStatus::PutOk);
    }
    drain(&store);
    assert_eq!(queue(&store, TIMER_TOPIC, 0).len(), 4);
    let e = store.timer_enqueue(now(), 100).unwrap();
    assert_eq!((e.messages, e.logged, e.delivered), (4, 4, 0));
    // Nothing is due before its time.
    let early = store.timer_dequeue(t0 + 100, 100).unwrap();
    assert_eq!(early.delivered, 0);
    assert!(queue(&store, "TopicA", 2).is_empty());
    let s = store.timer_dequeue(t0 + 400, 100).unwrap();
    assert_eq!(s.delivered, 2);
    assert_eq!(bodies(&queue(&store, "TopicA", 2)), vec!["k1", "k3"]);
    let s = store.timer_dequeue(t0 + 1000, 100).unwrap();
    assert_eq!(s.delivered, 2);
    let got = queue(&store, "TopicA", 2);
    assert_eq!(bodies(&got), vec!["k1", "k3", "k2", "k0"]);
    let m = &got[0];
    assert_eq!(m.property("REAL_TOPIC"), None);
    assert_eq!(m.property("REAL_QID"), None);
    assert_eq!(m.property("WAIT"), Some("false"));
    assert!(m.property("TIMER_OUT_MS").is_some());
    assert!(m.property("TIMER_ENQUEUE_MS").is_some());
    assert!(m.property("TIMER_DEQUEUE_MS").is_some());
    let stats = store.timer_stats().unwrap();
    assert_eq!((stats.enqueued, stats.delivered, stats.pending), (4, 4, 0));
    store.close().unwrap();
}

#[test]
fn due_at_enqueue_is_delivered_at_once_and_past_times_skip_the_timer() {
    let d = TempDir::new("timer", "direct");
    let store = MessageStore::open(d.path(), config()).unwrap();
    let t0 = now();
    store
        .put_message(&msg("T", "a", &[("TIMER_DELAY_MS", "250".into())]))
        .unwrap();
    // A deliver time in the past is stored in its own topic.
    let past = store
        .put_message(&msg("T", "b", &[("TIMER_DELIVER_MS", "5".into())]))
        .unwrap();
    assert!(past.is_ok());
    drain(&store);
    assert_eq!(bodies(&queue(&store, "T", 2)), vec!["b"]);
    // Enqueued only after its time: delivered by the enqueue round, never logged.
    let e = store.timer_enqueue(t0 + 2000, 10).unwrap();
    assert_eq!((e.logged, e.delivered), (0, 1));
    let got = queue(&store, "T", 2);
    assert_eq!(bodies(&got), vec!["b", "a"]);
    assert_eq!(
        got[1].property("TIMER_ENQUEUE_MS"),
        Some(i64::MAX.to_string().as_str())
    );
    store.close().unwrap();
}

#[test]
fn statuses_for_illegal_and_disabled() {
    let d = TempDir::new("timer", "status");
    let store = MessageStore::open(d.path(), config()).unwrap();
    let too_long = (3 * 24 * 3600 + 1).to_string();
    let r = store
        .put_message(&msg("T", "a", &[("TIMER_DELAY_SEC", too_long)]))
        .unwrap();
    assert_eq!(r.status, PutMessageStatus::WheelTimerMsgIllegal);
    let r = store
        .put_message(&msg("T", "a", &[("TIMER_DELAY_MS", "soon".into())]))
        .unwrap();
    assert_eq!(r.status, PutMessageStatus::WheelTimerMsgIllegal);
    store.close().unwrap();
    drop(store);
    let off = StoreConfig {
        timer_wheel_enable: false,
        ..config()
    };
    let store = MessageStore::open(d.path(), off).unwrap();
    assert!(!store.timer_enabled());
    let r = store
        .put_message(&msg("T", "a", &[("TIMER_DELAY_MS", "1000".into())]))
        .unwrap();
    assert_eq!(r.status, PutMessageStatus::WheelTimerNotEnable);
    assert!(store.timer_stats().is_err());
    store.close().unwrap();
}

#[test]
fn long_delays_roll_through_the_timer_topic() {
    let d = TempDir::new("timer", "roll");
    let cfg = StoreConfig {
        timer_roll_window_slot: 6,
        ..config()
    };
    let store = MessageStore::open(d.path(), cfg).unwrap();
    let t0 = now();
    store
        .put_message(&msg("T", "far", &[("TIMER_DELAY_MS", "2000".into())]))
        .unwrap();
    drain(&store);
    store.timer_enqueue(t0, 10).unwrap();
    // The unit is a roll unit in a slot at most the window (600 ms) ahead.
    let log = std::fs::read(d.path().join("timerlog").join("00000000000000000000")).unwrap();
    let u = TimerLogUnit::decode(&log).unwrap();
    assert_eq!(u.magic, MAGIC_DEFAULT | MAGIC_ROLL);
    assert!(u.delay_time <= 600, "{}", u.delay_time);
    let mut rolled = 0;
    let mut t = t0;
    while queue(&store, "T", 2).is_empty() {
        t += 100;
        assert!(t < t0 + 10_000, "never delivered");
        rolled += store.timer_dequeue(t, 100).unwrap().rolled;
        drain(&store);
        store.timer_enqueue(t, 100).unwrap();
    }
    assert!(t >= t0 + 2000 - 100, "delivered early at +{}", t - t0);
    assert!(rolled >= 1);
    let m = &queue(&store, "T", 2)[0];
    assert_eq!(
        m.property("TIMER_ROLL_TIMES"),
        Some(rolled.to_string().as_str())
    );
    store.close().unwrap();
}

#[test]
fn cancel_drops_the_message_and_never_delivers_the_marker() {
    let d = TempDir::new("timer", "cancel");
    let store = MessageStore::open(d.path(), config()).unwrap();
    let t0 = now();
    for k in ["keep", "gone"] {
        store
            .put_message(&msg("T", k, &[("TIMER_DELAY_MS", "500".into())]))
            .unwrap();
    }
    drain(&store);
    let r = store.cancel_timer("T", "gone", None).unwrap();
    assert_eq!(r.status, PutMessageStatus::PutOk);
    // Unknown keys are an error without a deliver time.
    assert!(store.cancel_timer("T", "nope", None).is_err());
    drain(&store);
    store.timer_enqueue(t0, 100).unwrap();
    let s = store.timer_dequeue(t0 + 2000, 100).unwrap();
    assert_eq!((s.delivered, s.deleted), (1, 1));
    assert_eq!(bodies(&queue(&store, "T", 2)), vec!["keep"]);
    assert!(
        queue(&store, "T", 0).is_empty(),
        "the marker is never delivered"
    );
    // Cancelling what is due already is illegal.
    let r = store.cancel_timer("T", "keep", Some(t0 - 1)).unwrap();
    assert_eq!(r.status, PutMessageStatus::WheelTimerMsgIllegal);
    store.close().unwrap();
}

#[test]
fn reopen_continues_from_the_checkpoint_and_files_are_rocketmqs() {
    let d = TempDir::new("timer", "reopen");
    let t0 = now();
    {
        let store = MessageStore::open(d.path(), config()).unwrap();
        for i in 0..30 {
            store
                .put_message(&msg(
                    "T",
                    &format!("m{i}"),
                    &[("TIMER_DELAY_MS", (300 + 100 * (i % 5)).to_string())],
                ))
                .unwrap();
        }
        drain(&store);
        let e = store.timer_enqueue(t0, 1000).unwrap();
        assert_eq!(e.logged, 30);
        store.close().unwrap();
    }
    assert_eq!(
        std::fs::metadata(d.path().join("timerwheel"))
            .unwrap()
            .len(),
        38_707_200
    );
    // 30 units of 52 bytes over segments of 20 units: two segments.
    assert_eq!(
        std::fs::read_dir(d.path().join("timerlog"))
            .unwrap()
            .count(),
        2
    );
    let ck = std::fs::read(d.path().join("config").join("timercheck")).unwrap();
    assert_eq!(ck.len(), 4096);
    let f = TimerCheckFields::decode(&ck).unwrap();
    assert_eq!(
        (f.last_timer_queue_offset, f.master_timer_queue_offset),
        (30, 30)
    );
    assert!(f.counter >= 1);
    let store = MessageStore::open(d.path(), config()).unwrap();
    let e = store.timer_enqueue(now(), 1000).unwrap();
    assert_eq!(e.messages, 0, "nothing enqueued twice");
    let s = store.timer_dequeue(t0 + 5000, 1000).unwrap();
    assert_eq!(s.delivered, 30);
    let mut got = bodies(&queue(&store, "T", 2));
    got.sort();
    let mut want: Vec<String> = (0..30).map(|i| format!("m{i}")).collect();
    want.sort();
    assert_eq!(got, want);
    store.close().unwrap();
}

#[test]
fn a_wheel_of_the_wrong_length_refuses_the_open_and_changes_nothing() {
    let d = TempDir::new("timer", "badwheel");
    std::fs::write(d.path().join("timerwheel"), vec![0u8; 4096]).unwrap();
    let e = MessageStore::open(d.path(), config())
        .unwrap_err()
        .to_string();
    assert!(e.contains("38707200"), "{e}");
    assert!(!d.path().join("abort").exists());
    assert!(!d.path().join("timerlog").exists());
}

/// A put as a hook saw it: topic and properties.
type SeenPut = (String, Vec<(String, String)>);

/// Records the topic and properties of every put it sees.
struct Seen(std::sync::Arc<std::sync::Mutex<Vec<SeenPut>>>);

impl rmqstore_core::PutMessageHook for Seen {
    fn name(&self) -> &str {
        "seen"
    }

    fn before_put(&self, msg: &mut Message) -> Result<(), PutMessageStatus> {
        self.0
            .lock()
            .unwrap()
            .push((msg.topic.clone(), msg.properties.clone()));
        Ok(())
    }
}

#[test]
fn the_timer_hook_runs_before_hooks_added_later() {
    let d = TempDir::new("timer", "hookorder");
    let mut store = MessageStore::open(d.path(), config()).unwrap();
    let seen = std::sync::Arc::default();
    store.add_put_hook(Box::new(Seen(std::sync::Arc::clone(&seen))));
    store
        .put_message(&msg("T", "a", &[("TIMER_DELAY_MS", "5000".into())]))
        .unwrap();
    // A delay-level message loses its timer properties before the next hook sees it.
    store
        .put_message(&msg(
            "T",
            "b",
            &[("DELAY", "2".into()), ("TIMER_DELAY_MS", "5000".into())],
        ))
        .unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].0, TIMER_TOPIC);
    // The delay-level hook (every store has it, before any hook added later) ran in between.
    assert_eq!(seen[1].0, "SCHEDULE_TOPIC_XXXX");
    assert!(seen[1].1.iter().all(|(k, _)| !k.starts_with("TIMER_")));
    drop(seen);
    store.close().unwrap();
}

#[test]
fn recovery_relinks_the_wheel_from_the_log_and_cuts_a_torn_tail() {
    use rmqstore_core::format::timer::slot_index;
    let d = TempDir::new("timer", "recover");
    let t0 = now();
    let deliver = (t0 + 60_000) / 100 * 100 + 50;
    {
        let store = MessageStore::open(d.path(), config()).unwrap();
        for i in 0..5 {
            store
                .put_message(&msg(
                    "T",
                    &format!("r{i}"),
                    &[("TIMER_DELIVER_MS", deliver.to_string())],
                ))
                .unwrap();
        }
        drain(&store);
        assert_eq!(store.timer_enqueue(t0, 100).unwrap().logged, 5);
        store.close().unwrap();
    }
    // The wheel lost the last three links of the slot (as if its page was written back before
    // they were made), and a torn unit follows the last good one in the log.
    let slot_time = deliver / 100 * 100;
    let wheel_path = d.path().join("timerwheel");
    let mut wheel = std::fs::read(&wheel_path).unwrap();
    let at = slot_index(slot_time, 100).unwrap() as usize * 32;
    assert_eq!(&wheel[at + 16..at + 24], &208i64.to_be_bytes());
    wheel[at + 16..at + 24].copy_from_slice(&52i64.to_be_bytes());
    std::fs::write(&wheel_path, &wheel).unwrap();
    let log_path = d.path().join("timerlog").join("00000000000000000000");
    let mut log = std::fs::read(&log_path).unwrap();
    let mut torn = TimerLogUnit::decode(&log[..52]).unwrap();
    torn.magic = 0x100;
    log[260..312].copy_from_slice(&torn.encode());
    std::fs::write(&log_path, &log).unwrap();
    let store = MessageStore::open(d.path(), config()).unwrap();
    let log = std::fs::read(&log_path).unwrap();
    assert!(log[260..312].iter().all(|b| *b == 0), "torn unit cut");
    let s = store.timer_dequeue(deliver + 200, 100).unwrap();
    assert_eq!(s.delivered, 5);
    assert_eq!(
        bodies(&queue(&store, "T", 2)),
        vec!["r0", "r1", "r2", "r3", "r4"]
    );
    // Nothing was enqueued twice.
    assert_eq!(store.timer_enqueue(now(), 100).unwrap().messages, 0);
    store.close().unwrap();
}
