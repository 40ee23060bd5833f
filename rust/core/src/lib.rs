//! rmqstore-core: a message store that reads and writes Apache RocketMQ's on-disk format byte
//! for byte (commitlog segments, consume queues, index files, checkpoint, abort marker).
//!
//! This crate has no Python in it; `rmqstore-py` binds it. Everything on disk is fixed-width
//! big-endian, as RocketMQ's Java `ByteBuffer`s write it.

// The layers, lowest first: format, file, wait, commitlog, queue, index, schedule, dispatch, read,
// store, timer (the timer engine runs on the store facade; the store's open attaches it)
// (docs/architecture.md#layers; each uses only the ones before it). `format`, `read` and `config` are
// public namespaces (and `schedule`, the delay levels): the record codec, the read path's result types and the settings table are
// part of the API the binding and tools use. The other layers are the crate's own; what callers
// need of them is re-exported below.
pub(crate) mod commitlog;
pub(crate) mod dispatch;
pub(crate) mod file;
pub mod format;
pub(crate) mod index;
pub(crate) mod queue;
pub mod read;
pub mod running_flags;
pub mod schedule;
pub(crate) mod store;
pub(crate) mod timer;
pub mod transaction;
pub(crate) mod wait;

pub mod config;
pub mod consumer_offsets;
pub mod error;
pub mod fork;
pub(crate) mod util;

pub use commitlog::{
    AppendResult, Batch, CommitStep, GroupCommitStep, RecordSizes, RecoveryReport, RecoveryStart,
};
pub use config::{FlushDiskType, StoreConfig};
pub use dispatch::{ReputStep, PARALLEL_DISPATCH_BYTES};
pub use error::{Result, StoreError};
pub use file::allocate::ServiceStep;
pub use file::mapped_file::MappedFile;
pub use format::{HostAddr, Message, MessageExt, PutMessageStatus};
pub use running_flags::RunningFlags;
pub use store::{
    is_lmq_topic, is_system_topic, MessageStore, PrefaultStep, PutBatch, PutMessageHook,
    StoreState, RECALL_MESSAGE_TAG, SYSTEM_TOPICS, SYSTEM_TOPIC_PREFIX,
};
pub use timer::{TimerDequeueStep, TimerEnqueueStep, TimerStats, TIMER_TOPIC};
pub use transaction::{CheckParams, CheckStep, EndOutcome, PendingTx, TxStats, TxTarget};
pub use util::now_millis;
