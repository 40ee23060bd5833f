//! rmqstore-core: a message store that reads and writes Apache RocketMQ's on-disk format byte
//! for byte (commitlog segments, consume queues, index files, checkpoint, abort marker).
//!
//! This crate has no Python in it; `rmqstore-py` binds it. Everything on disk is fixed-width
//! big-endian, as RocketMQ's Java `ByteBuffer`s write it.

pub mod commitlog;
pub mod config;
pub mod dispatch;
pub mod error;
pub mod file;
pub mod fork;
pub mod format;
pub mod index;
pub mod queue;
pub mod read;
pub mod store;
pub mod util;
pub(crate) mod wait;

pub use commitlog::{AppendResult, Batch, RecoveryReport, RecoveryStart};
pub use config::{FlushDiskType, StoreConfig};
pub use error::{Result, StoreError};
pub use format::{HostAddr, Message, MessageExt, PutMessageStatus};
pub use store::MessageStore;
