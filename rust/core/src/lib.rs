//! rmqstore-core: a message store that reads and writes Apache RocketMQ's on-disk format byte
//! for byte (commitlog segments, and in later layers consume queues, index files, checkpoint).
//!
//! This crate has no Python in it; `rmqstore-py` binds it. Everything on disk is fixed-width
//! big-endian, as RocketMQ's Java `ByteBuffer`s write it.

pub mod allocate;
pub mod checkpoint;
pub mod commitlog;
pub mod compression;
pub mod config;
pub mod consume_queue;
pub mod consume_queue_store;
pub mod error;
pub mod fork;
pub mod index;
pub mod lockfile;
pub mod mapped_file;
pub mod mapped_file_queue;
pub mod message;
pub mod read;
pub mod reput;
pub mod store;
pub mod transient_pool;
pub mod util;
pub mod vec_pool;

pub use commitlog::{AppendResult, Batch, RecoveryReport, RecoveryStart};
pub use config::{FlushDiskType, StoreConfig};
pub use error::{Result, StoreError};
pub use message::{HostAddr, Message, MessageExt, PutMessageStatus};
pub use store::MessageStore;
