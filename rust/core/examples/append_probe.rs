//! Probe: batch append rate of the core alone vs memcpy into a faulted mapping.
use std::time::Instant;

use rmqstore_core::commitlog::Batch;
use rmqstore_core::{MessageStore, StoreConfig};

fn main() {
    let dir = std::env::temp_dir().join(format!("rmq-probe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = StoreConfig {
        warm_mapped_file_enable: true,
        ..StoreConfig::default()
    };
    let store = MessageStore::open(&dir, cfg).unwrap();
    let size = 1024usize;
    let n = 1024usize;
    let data: Vec<u8> = (0..size * n).map(|i| (i * 7 + 3) as u8).collect();
    let bodies: Vec<&[u8]> = data.chunks(size).collect();
    let props = vec![("TAGS".to_string(), "TagA".to_string())];
    let batch = Batch {
        topic: "T",
        queue_id: 0,
        bodies: &bodies,
        properties: &props,
        flag: 0,
        born_timestamp: 0,
        born_host: None,
    };
    store.put_messages(&batch).unwrap();
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(800);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let f0 = minflt();
    let t = Instant::now();
    for _ in 0..rounds {
        assert!(store.put_messages(&batch).unwrap().is_ok());
    }
    let dt = t.elapsed().as_secs_f64();
    println!("faults during loop: {}", minflt() - f0);
    let app = (rounds * n * size) as f64 / dt;
    if std::env::var("SKIP_MEMCPY").is_ok() {
        println!("core append {:.2} GB/s", app / 1e9);
        return;
    }
    let mut map = memmap2::MmapMut::map_anon(256 << 20).unwrap();
    map.fill(1);
    let t = Instant::now();
    let mut pos = 0;
    for _ in 0..rounds {
        if pos + data.len() > map.len() {
            pos = 0;
        }
        map[pos..pos + data.len()].copy_from_slice(&data);
        pos += data.len();
    }
    let dt = t.elapsed().as_secs_f64();
    let mc = (rounds * n * size) as f64 / dt;
    println!(
        "core append {:.2} GB/s, memcpy {:.2} GB/s, ratio {:.2}",
        app / 1e9,
        mc / 1e9,
        app / mc
    );
    store.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

fn minflt() -> i64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_minflt
}
