//! rocketmq-rust's store (crate `rocketmq-store` 1.0.0, its default local-file store) in
//! rmqstore's same-run peer table (`benches/peers/run.py`): one round of every figure, printed
//! as one JSON line of msg/s.
//!
//! `rmq-peer-rocketmq-rust DIR N128 N1K WARMUP`: for bodies of 128 B (N128 messages) and 1 KiB
//! (N1K messages), in fresh stores under DIR (removed after), ASYNC_FLUSH, 1 GiB commitlog
//! segments, the store's services not started (as the crate's own performance collector does
//! for appends), one runtime worker thread:
//! - `put_<size>`: `put_message` of a `MessageExtBrokerInner` (topic, queue 0, body) built for
//!   each put (the store takes the message by value);
//! - `read_<size>`: the reput pass (`reput_once`, untimed) that builds the consume queue, then
//!   `get_message` of the whole queue, 32 messages a call, each returned record's body located
//!   in its bytes and copied into a reusable buffer, as a consumer decoding it would;
//! - `batch_put_<size>`: `put_messages` of batches of 1,000 bodies (a `MessageExtBatch` whose
//!   body is the client's encoding of the messages, encoded once before the clock starts, as a
//!   producer does before it sends) into another fresh store.
//!
//! WARMUP messages first go through the same phases in a store of their own, untimed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use cheetah_string::CheetahString;
use dashmap::DashMap;
use rocketmq_model::common::config::TopicConfig;
use rocketmq_model::common::message::message_batch::MessageExtBatch;
use rocketmq_model::common::message::message_ext_broker_inner::MessageExtBrokerInner;
use rocketmq_model::common::message::MessageTrait;
use rocketmq_model::utils::crc32_utils::crc32;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};
use rocketmq_store::{
    BrokerReadStore, BrokerWriteStore, FlushDiskType, GetMessageStatus, LocalFileMessageStore,
    MessageStoreConfig, PutMessageStatus, StoreRuntimeConfig,
};
use rocketmq_store_local::commit_log::append::micro_batch::MicroBatchPolicy;

const TOPIC: &str = "PeerTopic";
const BATCH: usize = 1000;
/// Where a commitlog record's body length sits when both hosts are IPv4 (RocketMQ's layout:
/// total size, magic, body CRC, queue id, flag, queue offset, physical offset, sys flag, born
/// timestamp, born host, store timestamp, store host, reconsume times, prepared tx offset).
const BODY_LEN_AT: usize = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8;
const SYS_FLAG_AT: usize = 4 + 4 + 4 + 4 + 4 + 8 + 8;
/// MessageSysFlag's BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG.
const HOST_V6_FLAGS: i32 = 0x10 | 0x20;

fn body(size: usize) -> Bytes {
    Bytes::from(
        (0..size)
            .map(|i| b'a' + (i % 26) as u8)
            .collect::<Vec<u8>>(),
    )
}

fn topic() -> CheetahString {
    CheetahString::from_static_str(TOPIC)
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path).expect("create the store folder");
    path
}

fn open(owner: &RuntimeOwner, path: &Path) -> LocalFileMessageStore {
    let config = MessageStoreConfig {
        store_path_root_dir: path.to_string_lossy().to_string().into(),
        flush_disk_type: FlushDiskType::AsyncFlush,
        mapped_file_size_commit_log: 1 << 30,
        ha_listen_port: 0,
        timer_wheel_enable: false,
        ..MessageStoreConfig::default()
    };
    let mut store = LocalFileMessageStore::new(
        Arc::new(config),
        MicroBatchPolicy::disabled(1).expect("policy"),
        Arc::new(StoreRuntimeConfig::default()),
        Arc::new(DashMap::<CheetahString, Arc<TopicConfig>>::new()),
        None,
        false,
        owner.root_context().component("rmq-peer-bench"),
    )
    .expect("create the store")
    .expect("timer store configuration");
    store
        .wire_owned_root_dependencies()
        .expect("wire the store");
    store
}

fn message(body: &Bytes) -> MessageExtBrokerInner {
    let mut msg = MessageExtBrokerInner::default();
    msg.set_topic(topic());
    msg.message_ext_inner.set_queue_id(0);
    msg.set_body(body.clone());
    msg
}

fn rate(n: usize, started: Instant) -> f64 {
    n as f64 / started.elapsed().as_secs_f64().max(1e-9)
}

/// Single puts and the read of `n` messages: (put, read) msg/s.
fn single_round(owner: &RuntimeOwner, dir: &Path, size: usize, n: usize) -> (f64, f64) {
    let path = fresh(dir, "rocketmq-rust");
    let b = body(size);
    let mut store = open(owner, &path);
    let rates = owner.block_on(async {
        let t = Instant::now();
        for _ in 0..n {
            let r = store.put_message(message(&b)).await;
            assert_eq!(r.put_message_status(), PutMessageStatus::PutOk);
        }
        let put = rate(n, t);
        let topic = topic();
        while store.get_max_offset_in_queue(&topic, 0) < n as i64 {
            store.reput_once().await;
        }
        let group = CheetahString::from_static_str("peer");
        let mut into = vec![0u8; size.max(4096)];
        let (mut offset, mut got, mut bytes, mut check) = (0i64, 0usize, 0usize, 0u64);
        let t = Instant::now();
        while offset < n as i64 {
            let r = store
                .get_message(&group, &topic, 0, offset, 32, None)
                .await
                .expect("get_message result");
            assert_eq!(r.status(), Some(GetMessageStatus::Found), "at {offset}");
            for m in r.message_mapped_list() {
                let rec = m.get_buffer();
                let flags =
                    i32::from_be_bytes(rec[SYS_FLAG_AT..SYS_FLAG_AT + 4].try_into().unwrap());
                assert_eq!(flags & HOST_V6_FLAGS, 0, "IPv6 hosts move the body");
                let len = i32::from_be_bytes(rec[BODY_LEN_AT..BODY_LEN_AT + 4].try_into().unwrap())
                    as usize;
                let start = BODY_LEN_AT + 4;
                into[..len].copy_from_slice(&rec[start..start + len]);
                check += u64::from(into[len - 1]);
                bytes += len;
                got += 1;
            }
            offset = r.next_begin_offset();
        }
        let read = rate(n, t);
        assert_eq!((got, bytes), (n, n * size));
        assert_eq!(check, n as u64 * u64::from(b[size - 1]));
        (put, read)
    });
    drop(store);
    std::fs::remove_dir_all(&path).expect("remove");
    rates
}

/// The client's encoding of a batch (RocketMQ's `MessageDecoder.encodeMessages`): per message
/// total size, magic, body CRC, flag, body length, body, properties length (no properties).
fn encoded_batch(b: &Bytes, k: usize) -> Bytes {
    let mut out = BytesMut::with_capacity(k * (b.len() + 22));
    let crc = crc32(b) as i32;
    for _ in 0..k {
        out.put_i32((4 + 4 + 4 + 4 + 4 + b.len() + 2) as i32);
        out.put_i32(0);
        out.put_i32(crc);
        out.put_i32(0);
        out.put_i32(b.len() as i32);
        out.put_slice(b);
        out.put_i16(0);
    }
    out.freeze()
}

/// `put_messages` of `n` bodies in batches of [`BATCH`]: msg/s.
fn batch_round(owner: &RuntimeOwner, dir: &Path, size: usize, n: usize) -> f64 {
    let path = fresh(dir, "rocketmq-rust-batch");
    let b = body(size);
    let full = encoded_batch(&b, BATCH);
    let mut store = open(owner, &path);
    let r = owner.block_on(async {
        let t = Instant::now();
        let mut done = 0;
        while done < n {
            let k = BATCH.min(n - done);
            let encoded = if k == BATCH {
                full.clone()
            } else {
                encoded_batch(&b, k)
            };
            let mut inner = MessageExtBrokerInner::default();
            inner.set_topic(topic());
            inner.message_ext_inner.set_queue_id(0);
            inner.set_body(encoded);
            let batch = MessageExtBatch {
                message_ext_broker_inner: inner,
                is_inner_batch: false,
                encoded_buff: None,
            };
            let r = store.put_messages(batch).await;
            assert_eq!(r.put_message_status(), PutMessageStatus::PutOk);
            done += k;
        }
        rate(n, t)
    });
    drop(store);
    std::fs::remove_dir_all(&path).expect("remove");
    r
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 4 {
        eprintln!("usage: rmq-peer-rocketmq-rust DIR N128 N1K WARMUP");
        std::process::exit(2);
    }
    let dir = PathBuf::from(&args[0]);
    let num = |i: usize| -> usize {
        args[i].parse().unwrap_or_else(|_| {
            eprintln!("rmq-peer-rocketmq-rust: {:?} is not a count", args[i]);
            std::process::exit(2)
        })
    };
    let (n128, n1k, warmup) = (num(1), num(2), num(3));
    let owner = RuntimeOwner::plan(RuntimeConfig {
        worker_threads: 1,
        thread_name: "rmq-peer-bench".to_string(),
        ..RuntimeConfig::default()
    })
    .expect("runtime configuration")
    .build()
    .expect("runtime");
    let mut fields = Vec::new();
    for (size, n) in [(128, n128), (1024, n1k)] {
        if warmup > 0 {
            single_round(&owner, &dir, size, warmup);
            batch_round(&owner, &dir, size, warmup);
        }
        let (put, read) = single_round(&owner, &dir, size, n);
        let batch = batch_round(&owner, &dir, size, n);
        fields.push(format!("\"put_{size}\": {put:.1}"));
        fields.push(format!("\"read_{size}\": {read:.1}"));
        fields.push(format!("\"batch_put_{size}\": {batch:.1}"));
    }
    println!("{{\"peer\": \"rocketmq-rust\", {}}}", fields.join(", "));
    owner.shutdown_runtime_blocking().expect("runtime shutdown");
}
