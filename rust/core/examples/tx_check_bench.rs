//! Check-back scan rate (`transaction_check` rounds over pending half messages with no op
//! messages: every half is due, so each one is looked up and copied back into the half queue)
//! next to plain `put_message` of the same copies in the same process.
//! `cargo run --release -p rmqstore-core --example tx_check_bench [halves] [body_size] [round]`:
//! prepares `halves` transactions born a minute ago, dispatches them, then runs check rounds of
//! at most `round` copies and puts the same copies as plain messages, a tenth of each in turn.
//! With `REOPEN=1` the store is reopened before the rounds (the in-memory table is empty: each
//! half's state comes from `find_commit`); `NO_INDEX=1` turns the index off. `WARM=1` sets
//! `warm_mapped_file_enable` and runs the allocation service on a thread of its own, as the
//! Python store does (`AllocateMappedFileService` + `warmMappedFile`: the next segment is
//! created and every page touched before an append reaches it, so neither the copies nor the
//! puts pay the first-write page faults); `PREFAULT_MB=32` runs the allocation service and the
//! prefault service (that window) on threads of their own, as the Python store does by default;
//! `SEGMENT_MB` sets the commitlog segment size (default 1024).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmqstore_core::format::{property, HostAddr};
use rmqstore_core::transaction::{CheckParams, HALF_TOPIC};
use rmqstore_core::{Message, MessageStore, StoreConfig};

/// CPU time of this thread (the machine may be shared: wall rates move with its load).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(128);
    let round: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let dir = std::env::temp_dir().join(format!("rmqstore-txcheck-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let warm = std::env::var("WARM").is_ok();
    let segment_mb: i64 = std::env::var("SEGMENT_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let cfg = StoreConfig {
        mapped_file_size_commit_log: segment_mb << 20,
        message_index_enable: std::env::var("NO_INDEX").is_err(),
        warm_mapped_file_enable: warm,
        ..StoreConfig::default()
    };
    let prefault: i64 = std::env::var("PREFAULT_MB")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0)
        << 20;
    let store = Arc::new(MessageStore::open(&dir, cfg.clone()).expect("open"));
    let service = (warm || prefault > 0).then(|| services(&store, prefault));
    let body = vec![b'x'; size];
    let born = rmqstore_core::now_millis() - 60_000;
    let msg = |i: usize| Message {
        topic: "Orders".to_owned(),
        queue_id: (i % 4) as i32,
        body: body.clone(),
        born_timestamp: born,
        born_host: HostAddr::parse("10.0.0.1:5000"),
        properties: vec![
            (property::TAGS.to_owned(), "TagA".to_owned()),
            (property::KEYS.to_owned(), format!("order-{i}")),
        ],
        ..Message::default()
    };
    let t = Instant::now();
    let mut halves = Vec::with_capacity(n);
    for i in 0..n {
        let (r, _) = store.prepare_message(&msg(i), Some("PG")).unwrap();
        assert!(r.is_ok());
        halves.push(r.wrote_offset);
    }
    let prepare = t.elapsed();
    while store
        .dispatch_step(64 << 20, Duration::ZERO)
        .unwrap()
        .behind
        > 0
    {}
    // The plain peer: each copy as a put of its own (what a put per copy costs), built from
    // the halves before the rounds start.
    let plain: Vec<Message> = halves
        .iter()
        .map(|&h| {
            let m = store.look_message_by_offset(h).unwrap().unwrap();
            let mut properties = m.properties();
            properties.push(("TRANSACTION_CHECK_TIMES".to_owned(), "1".to_owned()));
            Message {
                topic: HALF_TOPIC.to_owned(),
                queue_id: 0,
                body: m.body().to_vec(),
                sys_flag: m.sys_flag,
                born_timestamp: m.born_timestamp,
                born_host: Some(m.born_host),
                properties,
                ..Message::default()
            }
        })
        .collect();
    if std::env::var("RESOLVED").is_ok() {
        // Every transaction rolled back: a round only walks halves its op messages name.
        for &h in &halves {
            store
                .end_transaction(rmqstore_core::TxTarget::Offset(h), false)
                .unwrap();
        }
        store
            .transaction_flush_ops(rmqstore_core::now_millis(), 4096, 3000, true)
            .unwrap();
        while store
            .dispatch_step(64 << 20, Duration::ZERO)
            .unwrap()
            .behind
            > 0
        {}
        let t = Instant::now();
        let s = store.transaction_check(
            CheckParams {
                now_ms: rmqstore_core::now_millis() + 1000,
                timeout_ms: 6000,
                check_max: 15,
                file_reserved_ms: 72 * 3_600_000,
            },
            usize::MAX,
        );
        let s = s.unwrap();
        let took = t.elapsed();
        assert_eq!(s.examined, n as u64);
        assert!(s.to_check.is_empty());
        println!(
            "{n} halves resolved by op messages: one round examined {:.0} halves/s (op progress {:?})",
            n as f64 / took.as_secs_f64(),
            store.transaction_offsets().unwrap()
        );
        stop(store, service);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let (store, service) = if std::env::var("REOPEN").is_ok() {
        stop(store, service);
        let store = Arc::new(MessageStore::open(&dir, cfg).expect("reopen"));
        let service = (warm || prefault > 0).then(|| services(&store, prefault));
        (store, service)
    } else {
        (store, service)
    };
    let p = CheckParams {
        now_ms: rmqstore_core::now_millis() + 1000,
        timeout_ms: 6000,
        check_max: 15,
        file_reserved_ms: 72 * 3_600_000,
    };
    let slice = n.div_ceil(10).max(1);
    let (mut check, mut put_plain) = (Duration::ZERO, Duration::ZERO);
    let (mut check_cpu, mut put_cpu) = (Duration::ZERO, Duration::ZERO);
    let (mut examined, mut copied, mut rounds) = (0u64, 0usize, 0u64);
    let mut put = 0usize;
    let mut failed = 0u32;
    while copied < n || put < n {
        let target = (copied + slice).min(n);
        let (t, c) = (Instant::now(), thread_cpu());
        while copied < target {
            let s = store
                .transaction_check(p, round.min(target - copied))
                .unwrap();
            examined += s.examined;
            copied += s.to_check.len();
            rounds += 1;
            if s.to_check.is_empty() {
                // The copies could not be appended (a segment not delivered in time by a
                // loaded machine): the round ended where they start; the next one retries.
                failed += 1;
                assert!(failed < 100, "{s:?}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        check += t.elapsed();
        check_cpu += thread_cpu() - c;
        let end = if std::env::var("ONLY_CHECK").is_ok() {
            n
        } else {
            (put + slice).min(n)
        };
        let (t, c) = (Instant::now(), thread_cpu());
        for m in plain[put..end]
            .iter()
            .filter(|_| std::env::var("ONLY_CHECK").is_err())
        {
            assert!(store.put_message(m).unwrap().is_ok());
        }
        put_plain += t.elapsed();
        put_cpu += thread_cpu() - c;
        put = end;
    }
    assert_eq!(copied, n);
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "{n} halves of {size} B: prepare {:.0} tx/s; check rounds ({rounds} of up to {round} \
         copies, {failed} failed): {:.0} halves/s examined ({examined} examined, {copied} copied); plain \
         put_message of the copies {:.0} msg/s; check / plain put = {:.2}; thread CPU per \
         half: check {:.2} us, plain put {:.2} us ({:.2})",
        rate(prepare),
        examined as f64 / check.as_secs_f64(),
        rate(put_plain),
        put_plain.as_secs_f64() / check.as_secs_f64(),
        check_cpu.as_secs_f64() * 1e6 / n as f64,
        put_cpu.as_secs_f64() * 1e6 / n as f64,
        put_cpu.as_secs_f64() / check_cpu.as_secs_f64()
    );
    stop(store, service);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The allocation service, and the prefault service when `prefault` > 0, on threads of their
/// own (what `rmqstore._services` runs).
fn services(store: &Arc<MessageStore>, prefault: i64) -> Vec<std::thread::JoinHandle<()>> {
    store.attach_allocation_service();
    let s = Arc::clone(store);
    let mut threads = vec![std::thread::spawn(move || {
        while !s
            .allocation_service_step(Duration::from_millis(100))
            .stopped
        {}
    })];
    if prefault > 0 {
        let s = Arc::clone(store);
        threads.push(std::thread::spawn(move || {
            while !s
                .prefault_step(prefault, Duration::from_millis(100))
                .unwrap()
                .stopped
            {}
        }));
    }
    threads
}

/// Stops the service threads (if any) and closes the store.
fn stop(store: Arc<MessageStore>, service: Option<Vec<std::thread::JoinHandle<()>>>) {
    if let Some(threads) = service {
        store.stop_services();
        for h in threads {
            h.join().unwrap();
        }
    }
    store.close().unwrap();
}
