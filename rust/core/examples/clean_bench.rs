//! Retention's cost, as ratios against puts of the same messages in the same run:
//! - puts while another thread removes expired segments and cleans the consume queues and
//!   index, against the same puts without it (both dispatching as they go);
//! - one deletion round of `segments` segments (commitlog, then consume queues and index)
//!   against putting the messages that filled them.
//!
//! `cargo run --release -p rmqstore-core --example clean_bench [messages] [rounds]`
//! (TMPDIR picks the file system).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmqstore_core::{Message, MessageStore, StoreConfig};

const SEGMENT: i64 = 4 << 20;

fn config() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: SEGMENT,
        mapped_file_size_consume_queue: 20 * 20_000,
        ..StoreConfig::default()
    }
}

fn messages(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| Message {
            topic: format!("T{}", i % 8),
            queue_id: (i % 4) as i32,
            body: vec![(i % 251) as u8; 1024],
            properties: vec![("KEYS".into(), format!("k{i}"))],
            ..Message::default()
        })
        .collect()
}

fn drain(store: &MessageStore) {
    while store
        .dispatch_step(64 << 20, Duration::ZERO)
        .expect("dispatch")
        .behind
        > 0
    {}
}

/// Seconds to put `msgs` (dispatching every 1,000), with a deleting thread when `clean`.
fn put_run(dir: &std::path::Path, msgs: &[Message], clean: bool) -> (f64, usize) {
    let _ = std::fs::remove_dir_all(dir);
    let store = Arc::new(MessageStore::open(dir, config()).expect("open"));
    let stop = Arc::new(AtomicBool::new(false));
    let deleter = clean.then(|| {
        let store = store.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut removed = 0;
            while !stop.load(Ordering::Relaxed) {
                removed += store
                    .delete_expired_commit_log_files(0, 0, 0, true, 10)
                    .expect("delete")
                    .len();
                store.clean_consume_queues(0).expect("clean");
                std::thread::sleep(Duration::from_millis(2));
            }
            removed
        })
    });
    let t = Instant::now();
    for (i, m) in msgs.iter().enumerate() {
        assert!(store.put_message(m).expect("put").is_ok());
        if i % 1000 == 999 {
            drain(&store);
        }
    }
    drain(&store);
    let secs = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let removed = deleter.map_or(0, |h| h.join().expect("deleter"));
    store.close().expect("close");
    let _ = std::fs::remove_dir_all(dir);
    (secs, removed)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let base = std::env::temp_dir().join(format!("rmqstore-clean-bench-{}", std::process::id()));
    let msgs = messages(n);
    let (mut plain, mut cleaning, mut removed) = (Vec::new(), Vec::new(), 0);
    let (mut put_secs, mut delete_secs, mut deleted) = (Vec::new(), Vec::new(), 0);
    for _ in 0..rounds {
        plain.push(put_run(&base.join("plain"), &msgs, false).0);
        let (s, r) = put_run(&base.join("cleaning"), &msgs, true);
        cleaning.push(s);
        removed = r;
        // One round removing every segment but the last, against the puts that filled them.
        let dir = base.join("round");
        let _ = std::fs::remove_dir_all(&dir);
        let store = MessageStore::open(&dir, config()).expect("open");
        let t = Instant::now();
        for m in &msgs {
            assert!(store.put_message(m).expect("put").is_ok());
        }
        drain(&store);
        put_secs.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        deleted = store
            .delete_expired_commit_log_files(0, 0, 0, true, i32::MAX)
            .expect("delete")
            .len();
        store.clean_consume_queues(0).expect("clean");
        delete_secs.push(t.elapsed().as_secs_f64());
        store.close().expect("close");
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::remove_dir_all(&base);
    let (p, c) = (median(plain), median(cleaning));
    println!(
        "puts of {n} x 1 KiB: {:.0} msg/s alone, {:.0} msg/s while deleting \
         ({removed} segments removed meanwhile): ratio {:.2}",
        n as f64 / p,
        n as f64 / c,
        p / c
    );
    let (ps, ds) = (median(put_secs), median(delete_secs));
    println!(
        "one round removing {deleted} segments (+ queues, index): {:.1} ms, \
         {:.4} of the {:.0} ms the puts that filled them took",
        ds * 1e3,
        ds / ps,
        ps * 1e3
    );
}
