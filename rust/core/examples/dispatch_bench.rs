//! Dispatch rate of the core (consume queue unit + index keys per message) next to the batch
//! append rate of the same messages. `cargo run --release -p rmqstore-core --example
//! dispatch_bench [body_size] [batches]`. `STEP=<bytes>` dispatches in steps of that size
//! (below `PARALLEL_DISPATCH_BYTES` every step runs on one thread); `NO_INDEX=1` turns the index
//! off; `PAUSE_MS` waits between the append and the dispatch.

use std::time::{Duration, Instant};

use rmqstore_core::Batch;
use rmqstore_core::{MessageStore, StoreConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let batches: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let per_batch = 1024;
    let dir = std::env::temp_dir().join(format!("rmqstore-dispatch-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = StoreConfig {
        warm_mapped_file_enable: true,
        mapped_file_size_commit_log: 1 << 30,
        message_index_enable: std::env::var("NO_INDEX").is_err(),
        ..StoreConfig::default()
    };
    let store = MessageStore::open(&dir, cfg).expect("open");
    let data: Vec<u8> = (0..size * per_batch).map(|i| (i * 31 + 7) as u8).collect();
    let bodies: Vec<&[u8]> = data.chunks(size).collect();
    let mut append = Duration::ZERO;
    let mut dispatch = Duration::ZERO;
    let mut n = 0u64;
    for i in 0..batches {
        let props = vec![("KEYS".to_string(), format!("order-{i} user-{i}"))];
        let t = Instant::now();
        let r = store
            .put_messages(&Batch {
                topic: "BenchTopic",
                queue_id: (i & 7) as i32,
                bodies: &bodies,
                properties: &props,
                flag: 0,
                born_timestamp: 0,
                born_host: None,
            })
            .expect("put");
        assert!(r.is_ok());
        append += t.elapsed();
    }
    if let Ok(ms) = std::env::var("PAUSE_MS") {
        eprintln!("appended; dispatching in {ms} ms");
        std::thread::sleep(Duration::from_millis(ms.parse().unwrap_or(0)));
    }
    let step_bytes: i64 = std::env::var("STEP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64 << 20);
    let t = Instant::now();
    loop {
        let s = store
            .dispatch_step(step_bytes, Duration::ZERO)
            .expect("dispatch");
        n += s.dispatched;
        if s.behind == 0 {
            break;
        }
    }
    dispatch += t.elapsed();
    let msgs = (batches * per_batch) as f64;
    println!(
        "body {size} B: append {:.2} M msg/s, dispatch {:.2} M msg/s ({n} dispatched), ratio {:.2}",
        msgs / append.as_secs_f64() / 1e6,
        msgs / dispatch.as_secs_f64() / 1e6,
        append.as_secs_f64() / dispatch.as_secs_f64()
    );
    store.close().expect("close");
    let _ = std::fs::remove_dir_all(&dir);
}
