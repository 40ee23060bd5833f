//! The message store: one folder, locked while open, holding the commitlog (and, in later
//! layers, consume queues, index files, checkpoint and abort files).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::allocate::{AllocateConfig, Allocator, ServiceStep};
use crate::commitlog::{AppendResult, Batch, CommitLog, RecoveryReport};
use crate::config::{FlushDiskType, StoreConfig};
use crate::error::{Result, StoreError};
use crate::lockfile::StoreLock;
use crate::message::{parse_properties, DecodedRecord, HostAddr, Message};

/// A message read back from the commitlog, owned (RocketMQ's `MessageExt`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageExt {
    pub topic: String,
    pub body: Vec<u8>,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    pub store_size: i32,
    pub body_crc: i32,
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: HostAddr,
    pub store_timestamp: i64,
    pub store_host: HostAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub properties: Vec<(String, String)>,
}

impl MessageExt {
    pub fn from_record(d: &DecodedRecord<'_>) -> MessageExt {
        MessageExt {
            topic: d.topic_str().into_owned(),
            body: d.body.to_vec(),
            queue_id: d.queue_id,
            queue_offset: d.queue_offset,
            commit_log_offset: d.physical_offset,
            store_size: d.total_size,
            body_crc: d.body_crc,
            flag: d.flag,
            sys_flag: d.sys_flag,
            born_timestamp: d.born_timestamp,
            born_host: d.born_host,
            store_timestamp: d.store_timestamp,
            store_host: d.store_host,
            reconsume_times: d.reconsume_times,
            prepared_transaction_offset: d.prepared_transaction_offset,
            properties: parse_properties(&d.properties_str()),
        }
    }

    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn msg_id(&self) -> String {
        crate::message::message_id(&self.store_host, self.commit_log_offset)
    }
}

struct Open {
    commitlog: CommitLog,
    _lock: StoreLock,
}

pub struct MessageStore {
    root: PathBuf,
    config: StoreConfig,
    allocator: Arc<Allocator>,
    /// `None` once closed. Operations hold the read side, close takes the write side, so close
    /// waits for calls in flight and no call runs against a closed store.
    state: RwLock<Option<Open>>,
    recovery: RecoveryReport,
}

impl std::fmt::Debug for MessageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageStore")
            .field("root", &self.root)
            .finish()
    }
}

impl MessageStore {
    /// Opens (creating if needed) the store in `root`: lock, load, recover.
    pub fn open(root: &Path, config: StoreConfig) -> Result<MessageStore> {
        config.validate()?;
        std::fs::create_dir_all(root).map_err(|e| StoreError::io("cannot create", root, e))?;
        let lock = StoreLock::acquire(root)?;
        let commitlog_dir = config
            .store_path_commit_log
            .clone()
            .unwrap_or_else(|| root.join("commitlog"));
        let allocator = Arc::new(Allocator::new(
            commitlog_dir.clone(),
            AllocateConfig {
                file_size: config.mapped_file_size_commit_log,
                warm: config.warm_mapped_file_enable,
                warm_sync: config.flush_disk_type == FlushDiskType::SyncFlush,
                warm_flush_pages: config.flush_least_pages_when_warm_mapped_file,
                munlock_delay: crate::allocate::MUNLOCK_DELAY,
            },
        ));
        let commitlog = CommitLog::load(
            &commitlog_dir,
            config.mapped_file_size_commit_log,
            allocator.clone(),
            config.store_host,
            config.max_message_size,
        )?;
        let recovery = commitlog.recover(config.check_crc_on_recover)?;
        lock.mark_open()?;
        log::info!(
            target: "rmqstore.store",
            "opened {}: {} messages, commitlog [{}, {})",
            root.display(),
            recovery.messages,
            commitlog.min_offset().max(0),
            commitlog.max_offset()
        );
        Ok(MessageStore {
            root: root.to_path_buf(),
            config,
            allocator,
            state: RwLock::new(Some(Open {
                commitlog,
                _lock: lock,
            })),
            recovery,
        })
    }

    fn with_open<T>(&self, f: impl FnOnce(&Open) -> T) -> Result<T> {
        let guard = self.state.read().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref() {
            Some(open) => Ok(f(open)),
            None => Err(StoreError::Closed),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// What the recovery at open found.
    pub fn recovery_report(&self) -> Result<RecoveryReport> {
        self.with_open(|_| self.recovery.clone())
    }

    pub fn is_closed(&self) -> bool {
        self.state
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    pub fn put_message(&self, msg: &Message) -> Result<AppendResult> {
        self.with_open(|o| o.commitlog.put_message(msg))
    }

    pub fn put_messages(&self, batch: &Batch<'_>) -> Result<AppendResult> {
        self.with_open(|o| o.commitlog.put_messages(batch))
    }

    /// The message whose record starts at `offset`; `None` outside the commitlog.
    pub fn look_message_by_offset(&self, offset: i64) -> Result<Option<MessageExt>> {
        self.with_open(|o| o.commitlog.with_record(offset, MessageExt::from_record))?
    }

    /// `getMinPhyOffset`: start of the first segment, -1 when the commitlog is empty.
    pub fn min_phy_offset(&self) -> Result<i64> {
        self.with_open(|o| o.commitlog.min_offset())
    }

    /// `getMaxPhyOffset`: end of the last record written.
    pub fn max_phy_offset(&self) -> Result<i64> {
        self.with_open(|o| o.commitlog.max_offset())
    }

    /// The next queue offset a put to this queue would get.
    pub fn next_queue_offset(&self, topic: &str, queue_id: i32) -> Result<i64> {
        self.with_open(|o| o.commitlog.next_queue_offset(topic, queue_id))
    }

    /// Segment file names of the commitlog, oldest first.
    pub fn commitlog_segments(&self) -> Result<Vec<PathBuf>> {
        self.with_open(|o| {
            o.commitlog
                .queue()
                .files()
                .iter()
                .map(|f| f.path().to_path_buf())
                .collect()
        })
    }

    /// Forces everything written to disk; returns the flushed offset.
    pub fn flush(&self) -> Result<i64> {
        self.with_open(|o| o.commitlog.flush_all())?
    }

    /// From now on a service thread calls [`MessageStore::allocation_service_step`].
    pub fn attach_allocation_service(&self) {
        self.allocator.attach_service();
    }

    /// One round of the allocation service (see [`Allocator::service_step`]).
    pub fn allocation_service_step(&self, timeout: Duration) -> ServiceStep {
        self.allocator.service_step(timeout)
    }

    /// Segments pre-allocated and not yet used.
    pub fn preallocated_offsets(&self) -> Vec<i64> {
        self.allocator.ready_offsets()
    }

    /// Stops the background services' Rust side so their threads can be joined.
    pub fn stop_services(&self) {
        self.allocator.shutdown();
    }

    /// Clean shutdown: waits for calls in flight, stops allocation (deleting unused
    /// pre-allocated segments), forces everything to disk and releases the lock. Idempotent.
    pub fn close(&self) -> Result<()> {
        let mut guard = self.state.write().unwrap_or_else(|p| p.into_inner());
        let Some(open) = guard.take() else {
            return Ok(());
        };
        self.allocator.shutdown();
        self.allocator.wait_idle(Duration::from_secs(10));
        let flushed = open.commitlog.flush_all();
        for f in open.commitlog.queue().files() {
            f.munlock();
        }
        drop(open);
        flushed.map(|_| ())
    }
}

impl Drop for MessageStore {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!(target: "rmqstore.store", "closing {} failed: {e}", self.root.display());
        }
    }
}
