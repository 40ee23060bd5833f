//! rmqstore's Rust core in issue 20's same-run peer table (`benches/peers/run.py`, `make
//! bench-peers`): one round of every figure, printed as one JSON line of msg/s.
//!
//! `cargo run --release -p rmqstore-core --example peer_bench DIR N128 N1K WARMUP`: for bodies of
//! 128 B (N128 messages) and 1 KiB (N1K messages), in fresh stores under DIR (removed after):
//! - `put_<size>`: single `put_message` of one prebuilt message (topic, queue 0, body, no
//!   properties) in a loop, one thread, ASYNC_FLUSH, with the services a store opened from
//!   Python runs beside its puts (segment allocation, the prefault service) on threads of
//!   their own, dispatch not running;
//! - `dispatch_<size>`: the dispatch steps that then build the consume queue and index of those
//!   messages (timed apart: RocketMQ builds them behind the put, in its reput service);
//! - `read_batch_<size>` / `read_batch8k_<size>`: `read_batch` of the whole queue at 65,536 and
//!   8,192 rows a call, every column (properties included), body CRCs checked, bodies as
//!   `binary_view` rows pointing into the mapped segments (the Python API's default);
//! - `read_batch_binary_<size>`: the same at 65,536 rows a call with the bodies copied into a
//!   `binary` column;
//! - `read_bodies_<size>` / `read_bodies8k_<size>`: `read_columns` of the columns `queue_offset`
//!   and `body` only (a consumer of the bytes, as Chronicle Queue's tailer reads them), at
//!   65,536 and 8,192 rows a call, body CRCs checked, bodies as `binary_view` rows;
//! - `get_message_<size>`: `get_message` of the whole queue, 32 messages a call (RocketMQ's pull
//!   size), each message's body length summed;
//! - `batch_put_<size>`: `put_messages` of batches of 1,000 bodies into another fresh store.
//!
//! WARMUP messages first go through the same phases in a store of their own, untimed (the
//! Java peers need it for their JIT; here it only evens out the page cache's state).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rmqstore_core::read::{BodyLayout, Column, ColumnMask, ReadRequest, TagFilter};
use rmqstore_core::{Batch, Message, MessageStore, StoreConfig};

const TOPIC: &str = "PeerTopic";
const BATCH: usize = 1000;

fn body(size: usize) -> Vec<u8> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    path
}

fn config() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: 1 << 30,
        check_crc_on_read: true,
        ..StoreConfig::default()
    }
}

/// The put path's services, as a store opened from Python runs them (`rmqstore._services`):
/// segment allocation ahead of need and the commitlog prefault service (its default window).
struct Services<'a> {
    store: &'a MessageStore,
    threads: Vec<std::thread::ScopedJoinHandle<'a, ()>>,
}

impl<'a> Services<'a> {
    fn start(scope: &'a std::thread::Scope<'a, '_>, store: &'a MessageStore) -> Services<'a> {
        store.attach_allocation_service();
        let window = config().prefault_window_commit_log;
        let threads = vec![
            scope.spawn(move || {
                while !store
                    .allocation_service_step(Duration::from_millis(100))
                    .stopped
                {}
            }),
            scope.spawn(move || {
                while !store
                    .prefault_step(window, Duration::from_millis(100))
                    .expect("prefault")
                    .stopped
                {}
            }),
        ];
        Services { store, threads }
    }

    fn stop(self) {
        self.store.stop_services();
        for t in self.threads {
            t.join().expect("service thread");
        }
    }
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

/// Single puts, dispatch and the three reads of `n` messages: the rates by key.
fn single_round(dir: &Path, size: usize, n: usize) -> Vec<(String, f64)> {
    let path = fresh(dir, "rmqstore-core");
    let store = MessageStore::open(&path, config()).expect("open");
    let msg = Message {
        topic: TOPIC.to_owned(),
        body: body(size),
        ..Message::default()
    };
    let put = std::thread::scope(|scope| {
        let services = Services::start(scope, &store);
        let t = Instant::now();
        for _ in 0..n {
            assert!(store.put_message(&msg).expect("put").is_ok());
        }
        let put = t.elapsed();
        services.stop();
        put
    });
    let t = Instant::now();
    while store
        .dispatch_step(64 << 20, Duration::ZERO)
        .expect("dispatch")
        .behind
        > 0
    {}
    let dispatch = t.elapsed();
    assert_eq!(
        store.max_offset_in_queue(TOPIC, 0).expect("max offset"),
        n as i64
    );
    let mut out = vec![
        (format!("put_{size}"), rate(n, put)),
        (format!("dispatch_{size}"), rate(n, dispatch)),
    ];
    let bodies = ColumnMask::NONE
        .with(Column::QueueOffset)
        .with(Column::Body);
    for (key, rows_a_call, body, columns) in [
        ("read_batch", 65_536, BodyLayout::View, ColumnMask::ALL),
        ("read_batch8k", 8_192, BodyLayout::View, ColumnMask::ALL),
        (
            "read_batch_binary",
            65_536,
            BodyLayout::Binary,
            ColumnMask::ALL,
        ),
        ("read_bodies", 65_536, BodyLayout::View, bodies),
        ("read_bodies8k", 8_192, BodyLayout::View, bodies),
    ] {
        let request = ReadRequest {
            columns,
            decompress: None,
            body,
        };
        let t = Instant::now();
        let (mut offset, mut rows) = (0i64, 0usize);
        while offset < n as i64 {
            let cols = store
                .read_columns(TOPIC, 0, offset, rows_a_call, &request)
                .expect("read_batch");
            assert!(cols.rows > 0, "read_batch stopped at {offset}");
            let views = cols.body_views.len() / 16;
            let offsets = cols.body_offsets.len().saturating_sub(1);
            assert_eq!(views.max(offsets), cols.rows, "a body a row");
            assert_eq!(cols.queue_offset.first(), Some(&offset), "queue offsets");
            rows += cols.rows;
            offset = cols.next_offset;
        }
        out.push((format!("{key}_{size}"), rate(n, t.elapsed())));
        assert_eq!(rows, n);
    }
    let filter = TagFilter::all();
    let t = Instant::now();
    let (mut offset, mut got, mut bytes) = (0i64, 0usize, 0usize);
    while offset < n as i64 {
        let r = store
            .get_message(TOPIC, 0, offset, 32, &filter)
            .expect("get_message");
        assert!(!r.messages.is_empty(), "get_message stopped at {offset}");
        for m in &r.messages {
            bytes += m.body().len();
        }
        got += r.messages.len();
        offset = r.next_begin_offset;
    }
    out.push((format!("get_message_{size}"), rate(n, t.elapsed())));
    assert_eq!((got, bytes), (n, n * size));
    store.close().expect("close");
    std::fs::remove_dir_all(&path).expect("remove");
    out
}

/// `put_messages` of `n` bodies in batches of [`BATCH`] into a fresh store: msg/s.
fn batch_round(dir: &Path, size: usize, n: usize) -> f64 {
    let path = fresh(dir, "rmqstore-core-batch");
    let store = MessageStore::open(&path, config()).expect("open");
    let b = body(size);
    let bodies: Vec<&[u8]> = vec![&b; BATCH];
    let r = std::thread::scope(|scope| {
        let services = Services::start(scope, &store);
        let t = Instant::now();
        let mut done = 0;
        while done < n {
            let k = BATCH.min(n - done);
            let batch = Batch {
                topic: TOPIC,
                queue_id: 0,
                bodies: &bodies[..k],
                properties: &[],
                flag: 0,
                born_timestamp: 0,
                born_host: None,
            };
            assert!(store.put_messages(&batch).expect("put_messages").is_ok());
            done += k;
        }
        let r = rate(n, t.elapsed());
        services.stop();
        r
    });
    store.close().expect("close");
    std::fs::remove_dir_all(&path).expect("remove");
    r
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 4 {
        eprintln!("usage: peer_bench DIR N128 N1K WARMUP");
        std::process::exit(2);
    }
    let dir = PathBuf::from(&args[0]);
    let num = |i: usize| -> usize {
        args[i].parse().unwrap_or_else(|_| {
            eprintln!("peer_bench: {:?} is not a count", args[i]);
            std::process::exit(2)
        })
    };
    let (n128, n1k, warmup) = (num(1), num(2), num(3));
    let mut rates: Vec<(String, f64)> = Vec::new();
    // Warm-up: every phase of both sizes, untimed, before any timed phase (as the Java peers).
    for size in [128, 1024] {
        if warmup > 0 {
            single_round(&dir, size, warmup);
            batch_round(&dir, size, warmup);
        }
    }
    for (size, n) in [(128, n128), (1024, n1k)] {
        rates.extend(single_round(&dir, size, n));
        rates.push((format!("batch_put_{size}"), batch_round(&dir, size, n)));
    }
    let fields: Vec<String> = rates
        .iter()
        .map(|(k, v)| format!("\"{k}\": {v:.1}"))
        .collect();
    println!("{{\"peer\": \"rmqstore-core\", {}}}", fields.join(", "));
}
