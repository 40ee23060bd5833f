//! The commitlog: every message of every topic appended to one sequence of segments
//! (RocketMQ's `CommitLog`), plus the topic-queue offset table that numbers messages per queue.
//!
//! [`CommitLog`] is defined here with its offsets; its work is spread by concern:
//! - `append`: puts (single and batch), the append lock and the topic-queue offset table;
//! - `group_commit`: SYNC_FLUSH producers waiting for their bytes to be forced, and the
//!   service rounds that force for them (the waiting itself is [`crate::wait`]);
//! - `flush`: the commit (transient store pool) and flush rounds, and a full flush;
//! - `recovery`: the recovery scan at open, and truncation;
//! - `read`: records and messages read back by offset;
//! - `disk`: disk usage and the disk-full state;
//! - `check`: whether a record is legal at a position (shared with dispatch).

mod append;
mod append_records;
mod check;
mod disk;
mod flush;
mod group_commit;
mod prefault;
mod queue_offsets;
mod read;
mod recovery;

pub use append::{AppendResult, Batch, RecordSizes};
pub(crate) use append_records::EncodedRecords;
pub(crate) use check::{queue_fields_are_legal, queue_position_is_legal};
pub(crate) use flush::CommitRequests;
pub use flush::CommitStep;
pub use group_commit::GroupCommitStep;
pub use recovery::{RecoveryReport, RecoveryStart};

use std::path::Path;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::Result;
use crate::file::allocate::Allocator;
use crate::file::mapped_file_queue::MappedFileQueue;
use crate::file::transient_pool::TransientStorePool;
use crate::format::{HostAddr, MessageLimits, END_FILE_MIN_BLANK_LENGTH};
use crate::running_flags::RunningFlags;
use crate::wait::DataSignal;

use append::PutState;
use group_commit::GroupCommit;

/// The commitlog of one store: its segments, the append path and the flush state. Used only
/// inside the crate (public because `dispatch` and `read` still take it in public functions).
pub(crate) struct CommitLog {
    queue: MappedFileQueue,
    /// SYNC_FLUSH: only flushed bytes are confirmed (readable by dispatch) and puts wait for
    /// their bytes to be forced.
    sync_flush: bool,
    /// `syncFlushTimeout`.
    sync_flush_timeout: Duration,
    group: GroupCommit,
    /// One flusher at a time (group commit, periodic flush, `flush()`, close).
    flush_lock: Mutex<()>,
    /// The store's running flags (DISK_FULL: the disk holding the commitlog is above
    /// `disk_space_warning_level_ratio`); a put is admitted only while they allow writes.
    flags: Arc<RunningFlags>,
    disk_warning_ratio: f64,
    busy_timeout_ms: i64,
    signal: Arc<DataSignal>,
    allocator: Arc<Allocator>,
    put: Mutex<PutState>,
    /// When the current holder took the append lock (0 = not held): `beginTimeInLock`.
    begin_time_in_lock: AtomicI64,
    store_host: HostAddr,
    limits: MessageLimits,
    /// Write buffers of the segments (`transientStorePoolEnable`); `None` when disabled.
    pool: Option<TransientStorePool>,
    /// One committer at a time (commit service, flushes, truncation).
    commit_lock: Mutex<()>,
    commits: Arc<CommitRequests>,
    wake_commit_on_put: bool,
    read_only: bool,
    /// `check_crc_on_read`: reads verify body CRCs.
    check_crc_on_read: bool,
    /// `decompress_body_on_read`: reads give compressed bodies back decompressed.
    decompress_on_read: bool,
    /// The prefault rounds' progress (one round at a time).
    prefault: Mutex<prefault::PrefaultState>,
}

impl CommitLog {
    /// Loads the segments of `dir` with the commitlog settings of `config`.
    pub(crate) fn load(
        dir: &Path,
        config: &crate::config::StoreConfig,
        allocator: Arc<Allocator>,
        signal: Arc<DataSignal>,
        pool: Option<TransientStorePool>,
        read_only: bool,
    ) -> Result<CommitLog> {
        let file_size = config.mapped_file_size_commit_log;
        let queue = if read_only {
            MappedFileQueue::load_read_only(dir, file_size)?
        } else {
            MappedFileQueue::load(dir, file_size)?
        };
        if read_only {
            for f in queue.files() {
                // SAFETY: a read-only commitlog: its files are mapped read-only and this
                // process never appends to them.
                unsafe { f.set_read_only_position(file_size) };
            }
        }
        Ok(CommitLog {
            queue,
            sync_flush: config.flush_disk_type == crate::config::FlushDiskType::SyncFlush,
            sync_flush_timeout: Duration::from_millis(config.sync_flush_timeout.max(0) as u64),
            group: GroupCommit::default(),
            flush_lock: Mutex::new(()),
            flags: Arc::new(RunningFlags::new(if read_only {
                crate::running_flags::NOT_WRITEABLE
            } else {
                0
            })),
            disk_warning_ratio: f64::from(config.disk_space_warning_level_ratio) / 100.0,
            busy_timeout_ms: config.os_page_cache_busy_timeout_mills,
            signal,
            allocator,
            put: Mutex::new(PutState::default()),
            begin_time_in_lock: AtomicI64::new(0),
            store_host: config.store_host,
            limits: MessageLimits {
                max_message_size: config.max_message_size,
                max_record_in_segment: file_size - i64::from(END_FILE_MIN_BLANK_LENGTH),
            },
            pool,
            commit_lock: Mutex::new(()),
            commits: Arc::new(CommitRequests::default()),
            wake_commit_on_put: config.wake_commit_when_put_message,
            read_only,
            check_crc_on_read: config.check_crc_on_read,
            decompress_on_read: config.decompress_body_on_read,
            prefault: Mutex::default(),
        })
    }

    /// Another process writes this commitlog (a read-only store).
    pub(crate) fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Read-only commitlogs: picks up segments the writing process added (or deleted from the
    /// front). Their bytes are read only where a consume queue unit points, and checked there.
    pub(crate) fn refresh_read_only(&self) -> Result<()> {
        if self.read_only && self.queue.reload_read_only()? {
            for f in self.queue.files() {
                // SAFETY: a read-only commitlog (checked above): this process never appends
                // to its files.
                unsafe { f.set_read_only_position(f.file_size()) };
            }
        }
        Ok(())
    }

    /// Read-only commitlogs: forgets the segments the writing process deleted from the front
    /// (looked for at most every few ms, see [`MappedFileQueue::front_removed`]).
    pub(crate) fn drop_removed_front_read_only(&self) -> Result<()> {
        if self.read_only && self.queue.front_removed() {
            self.refresh_read_only()?;
        }
        Ok(())
    }

    /// Where the commit service waits for puts.
    pub(crate) fn commit_requests(&self) -> Arc<CommitRequests> {
        self.commits.clone()
    }

    /// The transient store pool, when enabled.
    pub(crate) fn pool(&self) -> Option<&TransientStorePool> {
        self.pool.as_ref()
    }

    pub(crate) fn queue(&self) -> &MappedFileQueue {
        &self.queue
    }

    pub(crate) fn min_offset(&self) -> i64 {
        self.queue.min_offset()
    }

    /// `getMaxOffset`: the end of what readers may see (with the transient store pool, what is
    /// committed: appends still in a write buffer are not readable yet).
    pub(crate) fn max_offset(&self) -> i64 {
        if self.pool.is_some() {
            self.queue.committed_where().min(self.queue.max_offset())
        } else {
            self.queue.max_offset()
        }
    }

    /// `getConfirmOffset`: how far dispatch may read. SYNC_FLUSH: the flushed offset;
    /// ASYNC_FLUSH: the readable end ([`CommitLog::max_offset`]). The one place that bound is
    /// decided.
    pub(crate) fn confirm_offset(&self) -> i64 {
        if self.sync_flush {
            self.queue.flushed_where().min(self.max_offset())
        } else {
            self.max_offset()
        }
    }
}
