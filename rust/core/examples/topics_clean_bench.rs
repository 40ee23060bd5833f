//! Costs of topic deletion. `cargo run --release -p rmqstore-core --example topics_clean_bench
//! [messages] [rounds]`.
//!
//! 1. Dispatch with a deleted topic's tombstone present against without (two stores, the same
//!    messages, rounds alternated): messages alternate between two topics, so every message
//!    starts a new topic run and the tombstone lookup (once per run) is paid on each.
//! 2. `delete_topics` of a topic of 64 queues holding the messages (the commitlog forced just
//!    before, which the deletion would do first), next to the `put_message` of the same
//!    messages.

use std::time::{Duration, Instant};

use rmqstore_core::{Message, MessageStore, StoreConfig};

fn config() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: 1 << 28,
        message_index_enable: false,
        ..StoreConfig::default()
    }
}

fn msg(topic: &str, queue_id: i32) -> Message {
    Message {
        topic: topic.into(),
        queue_id,
        body: vec![7u8; 128],
        ..Message::default()
    }
}

fn drain(store: &MessageStore) -> Duration {
    let t = Instant::now();
    while store
        .dispatch_step(64 << 20, Duration::ZERO)
        .expect("dispatch")
        .behind
        > 0
    {}
    t.elapsed()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let base = std::env::temp_dir().join(format!("rmqstore-topics-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let mut with = Vec::new();
    let mut without = Vec::new();
    for round in 0..rounds {
        for tomb in [round % 2 == 0, round % 2 == 1] {
            let dir = base.join(format!("r{round}-{tomb}"));
            let store = MessageStore::open(&dir, config()).expect("open");
            if tomb {
                let r = store.put_message(&msg("Z", 0)).expect("put");
                assert!(r.is_ok(), "{:?}", r.status);
                drain(&store);
                assert_eq!(store.delete_topics(&["Z"]).expect("delete"), 1);
            }
            for i in 0..n {
                let topic = if i % 2 == 0 { "A" } else { "B" };
                store.put_message(&msg(topic, (i % 8) as i32)).expect("put");
            }
            let rate = n as f64 / drain(&store).as_secs_f64();
            if tomb {
                with.push(rate);
            } else {
                without.push(rate);
            }
            store.close().expect("close");
            drop(store);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (w, wo) = (median(&mut with), median(&mut without));
    println!(
        "dispatch, alternating topics: with a tombstone {:.0} msg/s, without {:.0} msg/s, \
         ratio {:.3}",
        w,
        wo,
        w / wo
    );

    let dir = base.join("delete");
    let store = MessageStore::open(&dir, config()).expect("open");
    let t = Instant::now();
    for i in 0..n {
        store
            .put_message(&msg("Doomed", (i % 64) as i32))
            .expect("put");
    }
    let put = t.elapsed();
    drain(&store);
    // The deletion forces the commitlog first; forced here, it is the deletion alone.
    let t = Instant::now();
    store.flush().expect("flush");
    let flush = t.elapsed();
    // A producer of another topic runs meanwhile: its slowest put is the time it waited.
    let store = std::sync::Arc::new(store);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                store.put_message(&msg("Other", 0)).expect("put");
                slowest = slowest.max(t.elapsed());
            }
            slowest
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    assert_eq!(store.delete_topics(&["Doomed"]).expect("delete"), 1);
    let delete = t.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let slowest = producer.join().expect("producer");
    // The same producer as long again without a deletion (dispatch as the deletion did it).
    stop.store(false, std::sync::atomic::Ordering::Relaxed);
    let producer = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                store.put_message(&msg("Other", 0)).expect("put");
                slowest = slowest.max(t.elapsed());
            }
            slowest
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    while t.elapsed() < delete {
        store.flush().expect("flush");
        drain(&store);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let baseline = producer.join().expect("producer");
    let store = std::sync::Arc::try_unwrap(store).expect("one owner");
    println!("flush before it: {:.1} ms", flush.as_secs_f64() * 1e3);
    println!(
        "slowest put of another topic meanwhile: {:.1} ms (without a deletion, flushing and \
         dispatching as long: {:.1} ms)",
        slowest.as_secs_f64() * 1e3,
        baseline.as_secs_f64() * 1e3
    );
    println!(
        "delete_topics of 64 queues, {n} messages: {:.1} ms; put_message of them {:.1} ms \
         (delete / put {:.4})",
        delete.as_secs_f64() * 1e3,
        put.as_secs_f64() * 1e3,
        delete.as_secs_f64() / put.as_secs_f64()
    );
    store.close().expect("close");
    drop(store);
    let _ = std::fs::remove_dir_all(&base);
}
