//! Bulk-read rate of the core (`read_batch` column building) over one queue of 128-byte
//! messages. `cargo run --release -p rmqstore-core --example read_bench [messages] [distinct]`:
//! with `distinct`, every message carries properties of its own (a `UNIQ_KEY`, as messages
//! from RocketMQ clients do), so no row repeats the previous row's properties. `RMQ_NO_CRC=1`
//! turns the body CRC check off; `RMQ_BODY=1024` sets the body size (128 by default);
//! `RMQ_ROWS` the rows a call (65,536; `messages` is rounded down to a multiple of 1,000, the
//! puts' batch); bodies are `binary_view` rows (the Python API's
//! default) unless `RMQ_BINARY=1` asks for them copied into a `binary` column. `RMQ_COLUMNS`
//! (comma-separated names, e.g. `body,queue_offset`; empty for none) builds only those
//! columns (every column by default). `RMQ_NO_PROPS=1` puts the messages without properties (no
//! tags, no keys: the messages of the peer benchmark, `peer_bench`). `RMQ_PARALLEL=always|never`
//! sets when a read takes a second thread (`read::set_parallel_reads`; by default when a CPU is
//! idle).

use std::time::{Duration, Instant};

use rmqstore_core::read::{set_parallel_reads, BodyLayout, ColumnMask, ParallelReads, ReadRequest};
use rmqstore_core::Batch;
use rmqstore_core::{MessageStore, StoreConfig};

/// CPU time of the process so far (every thread's).
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse::<usize>().ok())
        .unwrap_or(400_000)
        / 1000
        * 1000;
    let dir = std::env::temp_dir().join(format!("rmqstore-read-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // RMQ_NO_CRC=1: reads without the body CRC check, to measure what it costs.
    let cfg = StoreConfig {
        mapped_file_size_commit_log: 256 << 20,
        check_crc_on_read: std::env::var_os("RMQ_NO_CRC").is_none(),
        ..StoreConfig::default()
    };
    let store = MessageStore::open(&dir, cfg).expect("open");
    let size: usize = std::env::var("RMQ_BODY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128);
    let rows: usize = std::env::var("RMQ_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(65_536);
    let layout = if std::env::var_os("RMQ_BINARY").is_some() {
        BodyLayout::Binary
    } else {
        BodyLayout::View
    };
    let columns = match std::env::var("RMQ_COLUMNS") {
        Ok(names) => {
            let names: Vec<&str> = names.split(',').filter(|n| !n.is_empty()).collect();
            ColumnMask::from_names(&names).expect("RMQ_COLUMNS")
        }
        Err(_) => ColumnMask::ALL,
    };
    match std::env::var("RMQ_PARALLEL").as_deref() {
        Ok("always") => set_parallel_reads(ParallelReads::Always),
        Ok("never") => set_parallel_reads(ParallelReads::Never),
        _ => {}
    }
    let request = ReadRequest {
        columns,
        decompress: None,
        body: layout,
    };
    let body = vec![7u8; size];
    let bodies: Vec<&[u8]> = vec![&body[..]; 1000];
    let distinct = std::env::args().nth(2).as_deref() == Some("distinct");
    let mut props = vec![
        ("TAGS".to_string(), "TagA".to_string()),
        ("KEYS".to_string(), "a b".to_string()),
    ];
    if std::env::var_os("RMQ_NO_PROPS").is_some() {
        props.clear();
    }
    let (batches, per_batch) = if distinct { (n, 1) } else { (n / 1000, 1000) };
    for i in 0..batches {
        if distinct {
            props.retain(|(k, _)| k != "UNIQ_KEY");
            props.push(("UNIQ_KEY".to_string(), format!("7F000001{i:024X}")));
        }
        let batch = Batch {
            topic: "ReadTopic",
            queue_id: 0,
            bodies: &bodies[..per_batch],
            properties: &props,
            flag: 0,
            born_timestamp: 0,
            born_host: None,
        };
        assert!(store.put_messages(&batch).expect("put").is_ok());
    }
    while store
        .dispatch_step(64 << 20, Duration::ZERO)
        .expect("dispatch")
        .behind
        > 0
    {}
    for _ in 0..5 {
        let (t, cpu) = (Instant::now(), process_cpu());
        let mut offset = 0i64;
        while offset < n as i64 {
            let cols = store
                .read_columns("ReadTopic", 0, offset, rows, &request)
                .expect("read");
            assert!(cols.next_offset > offset, "no progress at {offset}");
            offset = cols.next_offset;
        }
        let (wall, cpu) = (t.elapsed(), process_cpu() - cpu);
        println!(
            "read_batch columns: {:.2} M msg/s, process CPU {:.1} ns a message",
            n as f64 / wall.as_secs_f64() / 1e6,
            cpu.as_secs_f64() * 1e9 / n as f64
        );
    }
    store.close().expect("close");
    let _ = std::fs::remove_dir_all(&dir);
}
