//! SYNC_FLUSH group commit without Python: one producer thread against 32, with a service
//! thread running the group-commit rounds as the Python `GroupCommitService` does.
//! `cargo run --release -p rmqstore-core --example group_commit_bench [puts_per_thread]`;
//! prints both rates, their ratio and the messages per force.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmqstore_core::{FlushDiskType, Message, MessageStore, StoreConfig};

fn put_loop(store: &MessageStore, n: usize) {
    let msg = Message {
        topic: "Sync".into(),
        body: vec![7u8; 128],
        ..Message::default()
    };
    for _ in 0..n {
        assert!(store.put_message(&msg).expect("put").is_ok());
    }
}

fn main() {
    let per_thread: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    let dir = std::env::temp_dir().join(format!("rmqstore-gc-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = StoreConfig {
        flush_disk_type: FlushDiskType::SyncFlush,
        mapped_file_size_commit_log: 64 << 20,
        ..StoreConfig::default()
    };
    let store = Arc::new(MessageStore::open(&dir, cfg).expect("open store"));
    store.attach_group_commit().expect("attach");
    let stop = Arc::new(AtomicBool::new(false));
    // Forces so far, as the service's rounds report them.
    let forces = Arc::new(AtomicU64::new(0));
    let service = {
        let (store, stop, forces) = (store.clone(), stop.clone(), forces.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let step = store
                    .group_commit_step(Duration::from_millis(10))
                    .expect("step");
                forces.store(step.forces, Ordering::Relaxed);
                if step.stopped {
                    break;
                }
            }
        })
    };
    put_loop(&store, 10);

    let t = Instant::now();
    put_loop(&store, per_thread * 4);
    let single = (per_thread * 4) as f64 / t.elapsed().as_secs_f64();

    let threads = 32;
    let forces_before = forces.load(Ordering::Relaxed);
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| put_loop(&store, per_thread));
        }
    });
    let elapsed = t.elapsed().as_secs_f64();
    let forces = forces.load(Ordering::Relaxed) - forces_before;
    let multi = (threads * per_thread) as f64 / elapsed;
    stop.store(true, Ordering::Relaxed);
    store.stop_services();
    service.join().expect("service");
    store.close().expect("close");
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "SYNC_FLUSH 128 B: one producer {single:.0} msg/s, {threads} producers {multi:.0} msg/s, \
         ratio {:.2}, {:.1} messages per force",
        multi / single,
        (threads * per_thread) as f64 / forces.max(1) as f64
    );
}
