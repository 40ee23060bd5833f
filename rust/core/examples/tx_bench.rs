//! Transactions (prepare + commit, one thread) next to plain `put_message` of the same
//! message, in the same process. `cargo run --release -p rmqstore-core --example tx_bench
//! [transactions] [body_size] [rounds]`: each round puts `transactions` messages into a fresh
//! store, then runs as many transactions (a `prepare_message` and an `end_transaction` by id,
//! commit) in another fresh store (the order alternates between rounds), ASYNC_FLUSH, no
//! services (op messages are written by the ending thread when a batch is full). Each side
//! writes fresh commitlog pages: interleaving them in one store would let one side use the
//! pages the page cache's read-ahead zeroed for the other. Prints wall and thread-CPU rates and
//! the median ratio of transactions/s to puts/s. `PREFAULT_MB=16` runs the prefault service's
//! rounds (a 16 MiB window) in another thread, as a store opened from Python does.

use std::time::{Duration, Instant};

use rmqstore_core::format::property;
use rmqstore_core::{Message, MessageStore, StoreConfig, TxTarget};

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct passed.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(300_000);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(128);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
    // PREFAULT_MB=16: a thread makes the prefault service's rounds with that window.
    let prefault: i64 = std::env::var("PREFAULT_MB")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0)
        << 20;
    let msg = Message {
        topic: "TopicTx".to_owned(),
        body: vec![b'x'; size],
        properties: vec![(property::TAGS.to_owned(), "TagA".to_owned())],
        ..Message::default()
    };
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let mut res = [(Duration::ZERO, Duration::ZERO); 2];
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for kind in order {
            let dir = std::env::temp_dir()
                .join(format!("rmqstore-tx-bench-{}-{kind}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let cfg = StoreConfig {
                mapped_file_size_commit_log: 1 << 30,
                ..StoreConfig::default()
            };
            let store = MessageStore::open(&dir, cfg).expect("open");
            let done = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|scope| {
                if prefault > 0 {
                    // The prefault service's rounds, as the Python service makes them.
                    scope.spawn(|| {
                        while !done.load(std::sync::atomic::Ordering::Relaxed) {
                            store
                                .prefault_step(prefault, Duration::from_millis(20))
                                .unwrap();
                        }
                    });
                }
                let (t, c) = (Instant::now(), thread_cpu());
                for _ in 0..n {
                    if kind == 0 {
                        assert!(store.put_message(&msg).unwrap().is_ok());
                    } else {
                        let (r, id) = store.prepare_message(&msg, None).unwrap();
                        assert!(r.is_ok());
                        assert!(store.end_transaction(TxTarget::Id(id), true).unwrap().ended);
                    }
                }
                res[kind] = (t.elapsed(), thread_cpu() - c);
                done.store(true, std::sync::atomic::Ordering::Relaxed);
            });
            store.close().unwrap();
            let _ = std::fs::remove_dir_all(&dir);
        }
        let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
        let (put, tx) = (res[0], res[1]);
        println!(
            "round {round}: put {:.0}/s ({:.2} us cpu)  tx {:.0}/s ({:.2} us cpu)",
            n as f64 / put.0.as_secs_f64(),
            per(put.1),
            n as f64 / tx.0.as_secs_f64(),
            per(tx.1)
        );
        ratios.push((
            put.0.as_secs_f64() / tx.0.as_secs_f64(),
            put.1.as_secs_f64() / tx.1.as_secs_f64(),
        ));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "median ratio tx/put: wall {:.3}  cpu {:.3}",
        median(ratios.iter().map(|r| r.0).collect()),
        median(ratios.iter().map(|r| r.1).collect())
    );
}
