//! Delivery rate of a delay level's due backlog (`schedule_deliver` rounds) next to plain
//! `put_message` of the same messages in the same process. `cargo run --release -p
//! rmqstore-core --example schedule_bench [messages] [body_size] [round]`: puts `messages`
//! delayed messages (level 1), dispatches them, delivers them all (a clock an hour ahead makes
//! the backlog due) in rounds of `round`, and puts the same messages again without a delay,
//! a tenth of each in turn.

use std::time::{Duration, Instant};

use rmqstore_core::format::property;
use rmqstore_core::{Message, MessageStore, StoreConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let round: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let dir = std::env::temp_dir().join(format!("rmqstore-schedule-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = StoreConfig {
        mapped_file_size_commit_log: 1 << 30,
        message_index_enable: std::env::var("NO_INDEX").is_err(),
        message_delay_level: "1s 5s".to_owned(),
        ..StoreConfig::default()
    };
    let store = MessageStore::open(&dir, cfg).expect("open");
    let body = vec![b'x'; size];
    let msg = |i: usize, delay: bool| {
        let mut properties = vec![
            (
                property::UNIQ_KEY.to_owned(),
                format!("7F0000010001{i:020X}"),
            ),
            (property::TAGS.to_owned(), "TagA".to_owned()),
        ];
        if delay {
            properties.push((property::DELAY.to_owned(), "1".to_owned()));
        }
        Message {
            topic: if delay { "Real" } else { "Plain" }.to_owned(),
            queue_id: (i % 4) as i32,
            body: body.clone(),
            properties,
            ..Message::default()
        }
    };
    let t = Instant::now();
    for i in 0..n {
        assert!(store.put_message(&msg(i, true)).unwrap().is_ok());
    }
    let put_delayed = t.elapsed();
    while store
        .dispatch_step(64 << 20, Duration::ZERO)
        .unwrap()
        .behind
        > 0
    {}
    let ahead = || rmqstore_core::now_millis() + 3_600_000;
    let plain: Vec<Message> = (0..n).map(|i| msg(i, false)).collect();
    // Delivery and plain puts alternate in slices of a tenth, so that both see the same load
    // on a shared machine and the same state of the commitlog's growth.
    let slice = n.div_ceil(10).max(1);
    let (mut deliver, mut put_plain) = (Duration::ZERO, Duration::ZERO);
    let mut delivered = 0u64;
    let mut rounds = 0u64;
    let mut put = 0usize;
    while delivered < n as u64 || put < n {
        let target = (delivered + slice as u64).min(n as u64);
        let t = Instant::now();
        while delivered < target {
            let s = store
                .schedule_deliver_at(1, round.min((target - delivered) as usize), ahead)
                .unwrap();
            assert!(s.status.is_none(), "{s:?}");
            delivered += s.delivered;
            rounds += 1;
        }
        deliver += t.elapsed();
        let end = (put + slice).min(n);
        let t = Instant::now();
        for m in &plain[put..end] {
            assert!(store.put_message(m).unwrap().is_ok());
        }
        put_plain += t.elapsed();
        put = end;
    }
    assert_eq!(delivered, n as u64);
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "{n} messages of {size} B: put with DELAY {:.0} msg/s; delivered in {rounds} rounds of \
         {round}: {:.0} msg/s; plain put_message {:.0} msg/s; delivery / plain put = {:.2}",
        rate(put_delayed),
        rate(deliver),
        rate(put_plain),
        put_plain.as_secs_f64() / deliver.as_secs_f64()
    );
    store.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
