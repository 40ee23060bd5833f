//! The core's batch-append rate without Python, next to a plain memcpy into an already-faulted
//! mapping of the same kind (a reserved segment-sized file, mapped shared, one write per page),
//! to fresh positions as appends use. `cargo run --release -p rmqstore-core --example
//! append_bench [body_size] [rounds]`; prints both rates and their ratio.

use std::time::Instant;

use rmqstore_core::Batch;
use rmqstore_core::MappedFile;
use rmqstore_core::{MessageStore, StoreConfig};

const SEGMENT: i64 = 1 << 30;

fn main() {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(400);
    let n = (1 << 20) / size;
    let dir = std::env::temp_dir().join(format!("rmqstore-append-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data: Vec<u8> = (0..size * n).map(|i| (i * 7 + 3) as u8).collect();

    let cfg = StoreConfig {
        warm_mapped_file_enable: true,
        mapped_file_size_commit_log: SEGMENT,
        ..StoreConfig::default()
    };
    let store = MessageStore::open(&dir.join("store"), cfg).expect("open store");
    let bodies: Vec<&[u8]> = data.chunks(size).collect();
    let props = vec![("TAGS".to_string(), "TagA".to_string())];
    let batch = Batch {
        topic: "BenchTopic",
        queue_id: 0,
        bodies: &bodies,
        properties: &props,
        flag: 0,
        born_timestamp: 0,
        born_host: None,
    };
    assert!(store.put_messages(&batch).expect("put").is_ok());
    let t = Instant::now();
    for _ in 0..rounds {
        assert!(store.put_messages(&batch).expect("put").is_ok());
    }
    let append = (rounds * data.len()) as f64 / t.elapsed().as_secs_f64();
    store.close().expect("close");

    let seg = MappedFile::create(&dir.join("memcpy"), 0, SEGMENT).expect("create");
    // SAFETY: the file was created just now and nothing else uses it.
    unsafe { seg.warm(false, 1) }.expect("warm");
    let t = Instant::now();
    for _ in 0..rounds {
        // SAFETY: this is the only appender of the file.
        unsafe { seg.append_with(data.len() as i64, |dst| dst.copy_from_slice(&data)) }
            .expect("fits");
    }
    let memcpy = (rounds * data.len()) as f64 / t.elapsed().as_secs_f64();
    drop(seg);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "body {size} B: core batch append {:.2} GB/s, memcpy {:.2} GB/s, ratio {:.2}",
        append / 1e9,
        memcpy / 1e9,
        append / memcpy
    );
}
