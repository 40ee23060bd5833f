//! Single `put_message` from one thread, without Python: `count` puts of one prebuilt message
//! (topic `BenchTopic`, queue 0, a tag, a key and a `body_size`-byte body) into a warmed
//! segment large enough for all of them, ASYNC_FLUSH. `cargo run --release -p rmqstore-core
//! --example put_bench [body_size] [count] [rounds]`; prints the median rate of the rounds (each
//! round in a fresh store, its first segment made and warmed before the clock starts).
//! `PLAIN=1` puts a message without properties; `COLD=1` leaves the segment unwarmed (the
//! putting thread then takes the first-touch page faults, as with RocketMQ's default settings).

use std::time::Instant;

use rmqstore_core::{Message, MessageStore, StoreConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(128);
    let count: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let plain = std::env::var_os("PLAIN").is_some();
    let cold = std::env::var_os("COLD").is_some();
    // Each record is the body plus about 130 bytes of head, topic and properties.
    let segment = ((count as u64 + 16) * (size as u64 + 192)).next_power_of_two() as i64;
    let msg = Message {
        topic: "BenchTopic".into(),
        body: (0..size).map(|i| (i * 7 + 3) as u8).collect(),
        properties: if plain {
            Vec::new()
        } else {
            vec![("TAGS".into(), "TagA".into()), ("KEYS".into(), "k1".into())]
        },
        ..Message::default()
    };
    let mut rates = Vec::new();
    for round in 0..rounds {
        let dir =
            std::env::temp_dir().join(format!("rmqstore-put-bench-{}-{round}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = StoreConfig {
            warm_mapped_file_enable: !cold,
            mapped_file_size_commit_log: segment,
            ..StoreConfig::default()
        };
        let store = MessageStore::open(&dir, cfg).expect("open store");
        assert!(store.put_message(&msg).expect("put").is_ok());
        let t = Instant::now();
        for _ in 0..count {
            let r = store.put_message(&msg).expect("put");
            debug_assert!(r.is_ok());
            std::hint::black_box(r);
        }
        let rate = count as f64 / t.elapsed().as_secs_f64();
        assert_eq!(store.commitlog_segments().expect("segments").len(), 1);
        store.close().expect("close");
        let _ = std::fs::remove_dir_all(&dir);
        rates.push(rate);
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "single put, {size} B bodies: median {:.3} M msg/s over {rounds} rounds of {count} \
         (min {:.3}, max {:.3})",
        rates[rates.len() / 2] / 1e6,
        rates[0] / 1e6,
        rates[rates.len() - 1] / 1e6
    );
}
