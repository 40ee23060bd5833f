//! The timer engine's rounds on the Rust core alone: put N timer messages an hour ahead, then
//! time the enqueue rounds (wheel and timer log) and the dequeue rounds (delivery of the whole
//! backlog once due). Usage: `timer_bench [messages] [store dir]`.

use std::time::{Duration, Instant};

use rmqstore_core::{Message, MessageStore, StoreConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map_or(1_000_000, |a| a.parse().expect("messages"));
    let dir = args.next().map_or_else(
        || std::env::temp_dir().join(format!("rmqstore-timer-bench-{}", std::process::id())),
        Into::into,
    );
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = StoreConfig {
        mapped_file_size_commit_log: 256 << 20,
        message_index_enable: false,
        timer_precision_ms: 100,
        ..StoreConfig::default()
    };
    let store = MessageStore::open(&dir, cfg).expect("open");
    let deliver = rmqstore_core::now_millis() + 3_600_000;
    let t = Instant::now();
    for i in 0..n {
        let m = Message {
            topic: "Due".into(),
            body: vec![b'x'; 64],
            queue_id: (i % 8) as i32,
            properties: vec![(
                "TIMER_DELIVER_MS".into(),
                (deliver + (i % 10_000) as i64).to_string(),
            )],
            ..Message::default()
        };
        store.put_message(&m).expect("put");
    }
    let put = t.elapsed();
    while store
        .dispatch_step(64 << 20, Duration::ZERO)
        .expect("dispatch")
        .behind
        > 0
    {}
    let t = Instant::now();
    while store
        .timer_enqueue(rmqstore_core::now_millis(), 65_536)
        .expect("enqueue")
        .messages
        > 0
    {}
    let enqueue = t.elapsed();
    let due = deliver + 10_200;
    let t = Instant::now();
    let mut delivered = 0;
    while delivered < n as u64 {
        delivered += store.timer_dequeue(due, 65_536).expect("dequeue").delivered;
    }
    let dequeue = t.elapsed();
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "{n} messages: timer put {:.0} msg/s, enqueue {:.0} msg/s, delivery {:.0} msg/s",
        rate(put),
        rate(enqueue),
        rate(dequeue)
    );
    store.close().expect("close");
    let _ = std::fs::remove_dir_all(&dir);
}
