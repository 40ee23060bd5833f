//! Transactions (prepare + commit, one thread) next to plain `put_message` of the same
//! messages in the same process. `cargo run --release -p rmqstore-core --example tx_bench
//! [transactions] [body_size]`: alternates tenths of puts and of transactions (each a
//! `prepare_message` and an `end_transaction` by id, commit), ASYNC_FLUSH, no services running
//! (the op messages are written by the ending thread when a batch is full).

use std::time::{Duration, Instant};

use rmqstore_core::format::property;
use rmqstore_core::{Message, MessageStore, StoreConfig, TxTarget};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(128);
    let dir = std::env::temp_dir().join(format!("rmqstore-tx-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = StoreConfig {
        mapped_file_size_commit_log: 1 << 30,
        ..StoreConfig::default()
    };
    let store = MessageStore::open(&dir, cfg).expect("open");
    let msg = Message {
        topic: "TopicTx".to_owned(),
        body: vec![b'x'; size],
        properties: vec![(property::TAGS.to_owned(), "TagA".to_owned())],
        ..Message::default()
    };
    let (mut put_time, mut tx_time) = (Duration::ZERO, Duration::ZERO);
    let chunk = n / 10;
    for _ in 0..10 {
        let t = Instant::now();
        for _ in 0..chunk {
            assert!(store.put_message(&msg).unwrap().is_ok());
        }
        put_time += t.elapsed();
        let t = Instant::now();
        for _ in 0..chunk {
            let (r, id) = store.prepare_message(&msg, None).unwrap();
            assert!(r.is_ok());
            let out = store.end_transaction(TxTarget::Id(id), true).unwrap();
            assert!(out.ended);
        }
        tx_time += t.elapsed();
        // Keep the page cache and dispatch from piling up between tenths.
        while store
            .dispatch_step(64 << 20, Duration::ZERO)
            .unwrap()
            .behind
            > 0
        {}
    }
    let total = (chunk * 10) as f64;
    let puts = total / put_time.as_secs_f64();
    let txs = total / tx_time.as_secs_f64();
    println!(
        "put_message {puts:.0}/s  prepare+commit {txs:.0} tx/s  ratio {:.3}  ({:?})",
        txs / puts,
        store.transaction_stats().unwrap()
    );
    store.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
