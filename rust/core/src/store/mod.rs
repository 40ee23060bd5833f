//! The message store: one folder, locked while open, holding the commitlog, the consume queues
//! and the index files (later layers add checkpoint and abort files).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::commitlog::{
    AppendResult, Batch, CommitLog, CommitRequests, RecoveryReport, RecoveryStart,
};
use crate::config::{FlushDiskType, StoreConfig};
use crate::dispatch::{reput, ReputStep};
use crate::error::{Result, StoreError};
use crate::file::allocate::{AllocateConfig, Allocator, ServiceStep};
use crate::file::checkpoint::{AbortFile, StoreCheckpoint};
use crate::file::lockfile::StoreLock;
use crate::file::transient_pool::TransientStorePool;
use crate::format::{find_property, property, CqUnit, Message, MessageExt};
use crate::index::IndexService;
use crate::queue::consume_queue::ConsumeQueue;
use crate::queue::store::ConsumeQueueStore;
use crate::read::{GetMessageResult, TagFilter, TimeBoundary};
use crate::wait::DataSignal;

struct Open {
    commitlog: CommitLog,
    cqs: ConsumeQueueStore,
    index: Option<IndexService>,
    /// Where dispatch continues; the mutex makes one dispatcher run at a time.
    reput_from: Mutex<i64>,
    /// Mirror of `reput_from` for lock-free reads.
    reput_offset: AtomicI64,
    /// Store timestamp of the last message dispatched to a consume queue.
    logics_dispatched: AtomicI64,
    /// Damaged records dispatch passed over (see [`ReputStep::skipped`]).
    skipped_records: std::sync::atomic::AtomicU64,
    /// `None` for a read-only store (it writes nothing), as are the abort marker and lock.
    checkpoint: Option<StoreCheckpoint>,
    abort: Option<AbortFile>,
    _lock: Option<StoreLock>,
}

impl Open {
    fn dispatch(&self, max_bytes: i64) -> Result<ReputStep> {
        let mut from = self.reput_from.lock().unwrap_or_else(|p| p.into_inner());
        let step = reput(
            &self.commitlog,
            &self.cqs,
            self.index.as_ref(),
            &mut from,
            max_bytes,
        );
        self.reput_offset.store(*from, Ordering::Release);
        if let Ok(s) = &step {
            self.skipped_records.fetch_add(s.skipped, Ordering::Relaxed);
            if s.last_store_timestamp > 0 {
                self.logics_dispatched
                    .fetch_max(s.last_store_timestamp, Ordering::AcqRel);
            }
        }
        step
    }

    /// Forces the consume queues; a thorough round (`least_pages == 0`) also moves the
    /// checkpoint's logics timestamp to what was dispatched before it (`FlushConsumeQueueService`).
    fn flush_consume_queues(&self, least_pages: i64) -> Result<()> {
        let Some(checkpoint) = &self.checkpoint else {
            return Ok(());
        };
        let logics = self.logics_dispatched.load(Ordering::Acquire);
        self.cqs.flush(least_pages)?;
        if least_pages == 0 && logics > 0 {
            checkpoint
                .logics_msg_timestamp
                .store(logics, Ordering::Release);
        }
        Ok(())
    }

    /// Writes the checkpoint: the commitlog's and index's timestamps as of their last forces.
    fn flush_checkpoint(&self) -> Result<()> {
        let Some(checkpoint) = &self.checkpoint else {
            return Ok(());
        };
        let physic = self.commitlog.queue().store_timestamp();
        if physic > 0 {
            checkpoint
                .physic_msg_timestamp
                .store(physic, Ordering::Release);
        }
        if let Some(index) = &self.index {
            let ts = index.index_msg_timestamp();
            if ts > 0 {
                checkpoint.index_msg_timestamp.store(ts, Ordering::Release);
            }
        }
        checkpoint.flush()
    }

    fn behind(&self) -> i64 {
        if self.commitlog.is_read_only() {
            // What another process dispatched is all a read-only store sees.
            return 0;
        }
        (self.commitlog.confirm_offset() - self.reput_offset.load(Ordering::Acquire)).max(0)
    }
}

pub struct MessageStore {
    root: PathBuf,
    machine: Arc<StateMachine>,
    config: StoreConfig,
    allocator: Arc<Allocator>,
    signal: Arc<DataSignal>,
    commits: Arc<CommitRequests>,
    stopping: AtomicBool,
    /// `None` once closed. Operations hold the read side, close takes the write side, so close
    /// waits for calls in flight and no call runs against a closed store.
    state: RwLock<Option<Open>>,
    recovery: RecoveryReport,
    read_only: bool,
    /// [`crate::fork::generation`] when opened: a different one means this process is a
    /// forked child of the one that opened the store.
    fork_generation: u64,
    /// The process that opened the store.
    pid: u32,
}

/// Total physical memory (`StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE`), 24 GiB if unknown.
fn total_physical_memory() -> i64 {
    // SAFETY: sysinfo fills a plain struct.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    if unsafe { libc::sysinfo(&mut info) } == 0 {
        let total = (info.totalram as i64).saturating_mul(i64::from(info.mem_unit));
        if total > 0 {
            return total;
        }
    }
    24 * 1024 * 1024 * 1024
}

/// Dispatch chunk used while opening (catch-up before the store is handed out).
const OPEN_DISPATCH_CHUNK: i64 = 64 * 1024 * 1024;

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
        Self::open_checked(root, config, || Ok(()))
    }

    /// [`MessageStore::open`], calling `before_changes` once every file the store keeps has
    /// been found as expected and before the first byte of the store is changed (recovery,
    /// repairs, the abort marker): the caller checks its own files there (the Python side's
    /// `config/*.json`), and an error from it leaves the store as it was.
    pub fn open_checked(
        root: &Path,
        config: StoreConfig,
        before_changes: impl FnOnce() -> Result<()>,
    ) -> Result<MessageStore> {
        config.validate()?;
        if root.as_os_str().is_empty() {
            return Err(StoreError::InvalidArgument(
                "the store path is empty (give a folder, e.g. \"./store\")".to_owned(),
            ));
        }
        let machine = Arc::new(StateMachine::default());
        machine.transit(StoreState::LoadBegin)?;
        std::fs::create_dir_all(root).map_err(|e| StoreError::io("cannot create", root, e))?;
        let lock = StoreLock::acquire(root)?;
        let commitlog_dir = config
            .store_path_commit_log
            .clone()
            .unwrap_or_else(|| root.join("commitlog"));
        // Everything the store will write is checked before anything changes: a refused open
        // leaves every file as it was.
        let abort = AbortFile::new(root);
        abort.check()?;
        let last_exit_ok = abort.last_exit_ok();
        StoreCheckpoint::check(&root.join("checkpoint"))?;
        for (dir, what) in [
            (commitlog_dir.as_path(), "commitlog"),
            (&root.join("consumequeue"), "consumequeue"),
            (&root.join("index"), "index"),
            (&root.join("config"), "config"),
        ] {
            crate::util::check_dir_or_absent(dir, what)?;
        }
        let pool = if config.transient_store_pool_enable {
            Some(TransientStorePool::new(
                config.transient_store_pool_size as usize,
                config.mapped_file_size_commit_log,
            )?)
        } else {
            None
        };
        let (allocator, signal, commitlog) =
            Self::load_commitlog(&config, &commitlog_dir, pool, false)?;
        machine.transit(StoreState::LoadCommitlogOk)?;
        if let Err(e) = commitlog.refresh_disk_full() {
            log::warn!(target: "rmqstore.disk", "cannot read disk usage: {e}");
        }
        let cqs = ConsumeQueueStore::load(
            &root.join("consumequeue"),
            config.consume_queue_units_per_file(),
        )?;
        machine.transit(StoreState::LoadConsumeQueueOk)?;
        machine.transit(StoreState::LoadCompactionOk)?;
        let index = if config.message_index_enable {
            let index = IndexService::load(
                &root.join("index"),
                config.max_hash_slot_num,
                config.max_index_num,
            )?;
            // query_message caps results itself (after exact key checks).
            index.set_max_msgs_num_batch(usize::MAX);
            index.set_index_tags(config.index_tags);
            Some(index)
        } else {
            None
        };
        machine.transit(StoreState::LoadIndexOk)?;
        before_changes()?;
        // Everything was found as expected: from here on, opening may change files.
        let checkpoint = StoreCheckpoint::open(&root.join("checkpoint"))?;
        commitlog.queue().remove_empty_leftover()?;
        cqs.remove_empty_leftovers()?;
        if let Some(index) = &index {
            index.remove_empty_leftovers()?;
            index.reserve_loaded();
        }
        machine.transit(StoreState::RecoverBegin)?;
        cqs.recover()?;
        machine.transit(StoreState::RecoverConsumeQueueOk)?;
        let start = if last_exit_ok {
            RecoveryStart::Normal {
                dispatch_from: cqs.max_physic_offset(),
            }
        } else {
            RecoveryStart::Abnormal {
                min_timestamp: checkpoint.min_timestamp(),
                dispatch_from: cqs.max_physic_offset(),
            }
        };
        // SAFETY: the commitlog was loaded just now and is not shared yet: nothing else reads
        // or appends to it.
        let mut recovery = unsafe { commitlog.recover(config.check_crc_on_recover, start) }?;
        machine.transit(StoreState::RecoverCommitlogOk)?;
        recovery.abnormal = !last_exit_ok;
        // Consume queues never point past the commitlog's valid end; what they hold before
        // the scan's start completes the topic-queue table (`recoverTopicQueueTable`).
        cqs.truncate_dirty(recovery.process_offset)?;
        commitlog.merge_queue_offsets(cqs.offset_table());
        cqs.correct_min_offsets(commitlog.min_offset().max(0));
        // Dispatch resumes after the last record the queues hold (everything, when the
        // queues are gone: deleting consumequeue/ rebuilds it).
        let mut dispatch_from = match cqs.max_physic_offset() {
            -1 => commitlog.min_offset().max(0),
            m => m.max(commitlog.min_offset().max(0)),
        };
        // Index files never point past the commitlog either: drop those that do and re-index
        // from where the first of them began (consume queue units are skipped if present).
        if let Some(index) = &index {
            if let Some(from) = index.truncate_from(recovery.process_offset)? {
                dispatch_from = dispatch_from.min(from.max(commitlog.min_offset().max(0)));
            }
            // After a crash, index files written after the checkpoint's index time may hold
            // torn pages, and a file made just before the crash may hold nothing: drop them.
            if !last_exit_ok {
                index.destroy_newer_than(checkpoint.min_timestamp_index())?;
                index.drop_empty_tail()?;
            }
            // The index may lag the consume queues (a separate thread builds it): resume
            // dispatch at its last indexed message. With no entry at all, re-index everything
            // after a crash; after a clean stop the index was complete (messages without keys
            // leave no entry).
            let min = commitlog.min_offset().max(0);
            match index.progress() {
                Some(p) => dispatch_from = dispatch_from.min(p.max(min)),
                None if !last_exit_ok => dispatch_from = min,
                None => {}
            }
            // Keys missing between two index files (RocketMQ can lose a file's worth, see
            // `reput::fill_index_gaps`) are indexed again, in files between the two.
            let refilled = crate::dispatch::fill_index_gaps(&commitlog, index)?;
            if refilled > 0 {
                log::warn!(
                    target: "rmqstore.store",
                    "re-indexed {refilled} keys missing between index files"
                );
            }
        }
        machine.transit(StoreState::RecoverTopicQueueTableOk)?;
        let open = Open {
            commitlog,
            cqs,
            index,
            reput_from: Mutex::new(dispatch_from),
            reput_offset: AtomicI64::new(dispatch_from),
            logics_dispatched: AtomicI64::new(0),
            skipped_records: std::sync::atomic::AtomicU64::new(0),
            checkpoint: Some(checkpoint),
            abort: Some(abort),
            _lock: Some(lock),
        };
        while open.behind() > 0 {
            let step = open.dispatch(OPEN_DISPATCH_CHUNK)?;
            if step.bytes == 0 {
                break;
            }
        }
        if let Some(lock) = &open._lock {
            lock.mark_open()?;
        }
        // Present while open: a crash leaves it behind (`lastExitOK` at the next open).
        if let Some(abort) = &open.abort {
            abort.create()?;
        }
        machine.transit(StoreState::Running)?;
        log::info!(
            target: "rmqstore.store",
            "opened {}: {} messages, commitlog [{}, {}), {} consume queues",
            root.display(),
            recovery.messages,
            open.commitlog.min_offset().max(0),
            open.commitlog.max_offset(),
            open.cqs.all().len()
        );
        Ok(MessageStore::assemble(
            root, machine, config, allocator, signal, open, recovery, false,
        ))
    }

    /// The commitlog of `dir` with its allocator (which makes no segment for a read-only
    /// store) and dispatch signal.
    fn load_commitlog(
        config: &StoreConfig,
        dir: &Path,
        pool: Option<TransientStorePool>,
        read_only: bool,
    ) -> Result<(Arc<Allocator>, Arc<DataSignal>, CommitLog)> {
        let allocator = Arc::new(Allocator::new(
            dir.to_path_buf(),
            AllocateConfig {
                file_size: config.mapped_file_size_commit_log,
                warm: config.warm_mapped_file_enable && !read_only,
                warm_sync: config.flush_disk_type == FlushDiskType::SyncFlush,
                warm_flush_pages: config.flush_least_pages_when_warm_mapped_file,
                munlock_delay: crate::file::allocate::MUNLOCK_DELAY,
            },
            pool.clone(),
        ));
        let signal = Arc::new(DataSignal::default());
        let commitlog = CommitLog::load(
            dir,
            config,
            allocator.clone(),
            signal.clone(),
            pool,
            read_only,
        )?;
        Ok((allocator, signal, commitlog))
    }

    /// The handle around an opened store.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        root: &Path,
        machine: Arc<StateMachine>,
        config: StoreConfig,
        allocator: Arc<Allocator>,
        signal: Arc<DataSignal>,
        open: Open,
        recovery: RecoveryReport,
        read_only: bool,
    ) -> MessageStore {
        MessageStore {
            root: root.to_path_buf(),
            machine,
            config,
            allocator,
            signal,
            commits: open.commitlog.commit_requests(),
            stopping: AtomicBool::new(false),
            state: RwLock::new(Some(open)),
            recovery,
            read_only,
            fork_generation: crate::fork::generation(),
            pid: std::process::id(),
        }
    }

    /// Opens an existing store for reading only, while another process may be writing it:
    /// no lock is taken, no file is created, changed or removed, and no recovery runs. What is
    /// readable is what the writer has dispatched into the consume queues, each unit checked
    /// against its commitlog record where another process may be writing it (so a torn unit or
    /// record is never returned). New queues and segments are picked up as reads reach them.
    /// Key lookups (`query_message`) are not available: the index files are not opened.
    pub fn open_read_only(root: &Path, config: StoreConfig) -> Result<MessageStore> {
        config.validate()?;
        let commitlog_dir = config
            .store_path_commit_log
            .clone()
            .unwrap_or_else(|| root.join("commitlog"));
        if !commitlog_dir.is_dir() {
            return Err(StoreError::InvalidArgument(format!(
                "{} is not a message store: it has no {} folder (open it for writing to create                  a store)",
                root.display(),
                commitlog_dir.display()
            )));
        }
        let machine = Arc::new(StateMachine::default());
        machine.transit(StoreState::LoadBegin)?;
        let (allocator, signal, commitlog) =
            Self::load_commitlog(&config, &commitlog_dir, None, true)?;
        let cqs = ConsumeQueueStore::load_read_only(
            &root.join("consumequeue"),
            config.consume_queue_units_per_file(),
        )?;
        let open = Open {
            commitlog,
            cqs,
            index: None,
            reput_from: Mutex::new(0),
            reput_offset: AtomicI64::new(0),
            logics_dispatched: AtomicI64::new(0),
            skipped_records: std::sync::atomic::AtomicU64::new(0),
            checkpoint: None,
            abort: None,
            _lock: None,
        };
        machine.transit(StoreState::Running)?;
        Ok(MessageStore::assemble(
            root,
            machine,
            config,
            allocator,
            signal,
            open,
            RecoveryReport::default(),
            true,
        ))
    }

    /// Opened with [`MessageStore::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Refuses calls that would change a read-only store.
    fn writable(&self, what: &str) -> Result<()> {
        if self.read_only {
            Err(StoreError::ReadOnly(what.to_owned()))
        } else {
            Ok(())
        }
    }

    /// The queue `topic`/`queue_id` ready to read: on a read-only store, found even if it
    /// appeared since the last look, and refreshed up to what the writer has dispatched.
    fn readable_queue(
        &self,
        o: &Open,
        topic: &str,
        queue_id: i32,
    ) -> Result<Option<Arc<ConsumeQueue>>> {
        if !self.read_only {
            return Ok(o.cqs.find(topic, queue_id));
        }
        let cq = match o.cqs.find(topic, queue_id) {
            Some(cq) => cq,
            None => {
                o.cqs.discover()?;
                match o.cqs.find(topic, queue_id) {
                    Some(cq) => cq,
                    None => return Ok(None),
                }
            }
        };
        cq.refresh_read_only(o.commitlog.min_offset().max(0), |u| {
            o.commitlog.record_matches_unit(topic, queue_id, u)
        })?;
        Ok(Some(cq))
    }

    /// True in a process forked from the one that opened the store (see [`crate::fork`]): the
    /// store is then unusable here, and closing or dropping it does nothing.
    pub fn is_forked_copy(&self) -> bool {
        crate::fork::generation() != self.fork_generation
    }

    /// `Err` in a forked child of the process that opened the store (see
    /// [`MessageStore::is_forked_copy`]), with the message every call gives there.
    pub fn check_not_forked(&self) -> Result<()> {
        if self.is_forked_copy() {
            return Err(self.forked_error());
        }
        Ok(())
    }

    fn forked_error(&self) -> StoreError {
        StoreError::ForkedCopy(format!(
            "the store {} was opened by process {} before this process forked from it: a \
             forked child cannot use its parent's store (open the store in the child itself, \
             once the parent has closed it)",
            self.root.display(),
            self.pid
        ))
    }

    fn with_open<T>(&self, f: impl FnOnce(&Open) -> T) -> Result<T> {
        self.check_not_forked()?;
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

    /// The lifecycle state (`getStateMachine().getCurrentState()`).
    pub fn state(&self) -> StoreState {
        self.machine.get()
    }

    pub fn is_closed(&self) -> bool {
        if self.is_forked_copy() {
            return true;
        }
        self.state
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    pub fn put_message(&self, msg: &Message) -> Result<AppendResult> {
        self.writable("put_message")?;
        self.with_open(|o| o.commitlog.put_message(msg))
    }

    pub fn put_messages(&self, batch: &Batch<'_>) -> Result<AppendResult> {
        self.writable("put_messages")?;
        self.with_open(|o| o.commitlog.put_messages(batch))
    }

    /// The message whose record starts at `offset`; `None` outside the commitlog.
    pub fn look_message_by_offset(&self, offset: i64) -> Result<Option<MessageExt>> {
        self.with_open(|o| o.commitlog.look_message(offset))?
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

    /// Forces everything written to disk now (commitlog, consume queues, index files);
    /// returns the flushed commitlog offset.
    pub fn flush(&self) -> Result<i64> {
        self.writable("flush")?;
        self.with_open(|o| {
            let flushed = o.commitlog.flush_all()?;
            o.flush_consume_queues(0)?;
            if let Some(index) = &o.index {
                index.flush()?;
            }
            o.flush_checkpoint()?;
            Ok(flushed)
        })?
    }

    /// `isOffsetAligned`: a valid message record (CRC checked) starts at `offset`.
    pub fn is_offset_aligned(&self, offset: i64) -> Result<bool> {
        self.with_open(|o| o.commitlog.is_aligned(offset))
    }

    /// `truncateFiles`: cuts the commitlog at `offset`, which must be the start of a valid
    /// message, dropping every message from there on from the commitlog, the consume queues and
    /// the index; writing continues at `offset` with the queue offsets that held there. Returns
    /// false (and changes nothing) when `offset` is at or past the end. Calls in flight finish
    /// first; others wait until the cut is done.
    pub fn truncate_files(&self, offset: i64) -> Result<bool> {
        self.writable("truncate_files")?;
        let guard = self.state.write().unwrap_or_else(|p| p.into_inner());
        let Some(o) = guard.as_ref() else {
            return Err(StoreError::Closed);
        };
        // Write buffers hold nothing readable yet: commit them so every record can be cut.
        o.commitlog.flush_all()?;
        if offset >= o.commitlog.max_offset() {
            return Ok(false);
        }
        if !o.commitlog.is_aligned(offset) {
            return Err(StoreError::InvalidArgument(format!(
                "offset {offset} is not the start of a valid message; nothing was truncated"
            )));
        }
        // Dispatch everything first, so the queues know every queue offset below the cut.
        while o.behind() > 0 {
            if o.dispatch(OPEN_DISPATCH_CHUNK)?.bytes == 0 {
                break;
            }
        }
        o.cqs.truncate_dirty(offset)?;
        let mut resume = offset;
        if let Some(index) = &o.index {
            if let Some(from) = index.truncate_from(offset)? {
                resume = resume.min(from);
            }
        }
        self.allocator.discard_ready();
        // SAFETY: the state's write lock is held: no other call is in flight, and no call
        // leaves a slice of the commitlog behind.
        unsafe { o.commitlog.truncate(offset, o.cqs.offset_table()) }?;
        {
            let mut from = o.reput_from.lock().unwrap_or_else(|p| p.into_inner());
            *from = resume.max(o.commitlog.min_offset().max(0));
            o.reput_offset.store(*from, Ordering::Release);
        }
        // Re-index what the dropped index files also held below the cut.
        while o.behind() > 0 {
            if o.dispatch(OPEN_DISPATCH_CHUNK)?.bytes == 0 {
                break;
            }
        }
        log::warn!(
            target: "rmqstore.store",
            "truncated {} at commitlog offset {offset}",
            self.root.display()
        );
        Ok(true)
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
        self.stopping.store(true, Ordering::SeqCst);
        self.signal.wake();
        self.allocator.shutdown();
        self.commits.stop();
        let _ = self.with_open(|o| o.commitlog.stop_group_commit());
    }

    /// One round of the commit service (`CommitRealTimeService`, transient store pool): waits
    /// up to `timeout` unless a put asked for a commit, then commits write buffers holding at
    /// least `least_pages` pages (0: anything).
    pub fn commit_step(
        &self,
        least_pages: i64,
        timeout: Duration,
    ) -> Result<crate::commitlog::CommitStep> {
        self.writable("the commit service")?;
        // Waits without holding the store open, so a truncation or close need not wait for it.
        let stopped = self.commits.wait(timeout);
        let committed = if stopped {
            false
        } else {
            self.with_open(|o| o.commitlog.commit_pages(least_pages))??
        };
        Ok(crate::commitlog::CommitStep { committed, stopped })
    }

    /// The transient store pool's buffers: (free, total), `None` when the pool is disabled
    /// (`remainTransientStoreBufferNumbs`).
    pub fn transient_store_pool_buffers(&self) -> Result<Option<(usize, usize)>> {
        self.with_open(|o| o.commitlog.pool().map(|p| (p.available(), p.total())))
    }

    /// How far the write buffers are committed into the commitlog files (`getCommittedWhere`);
    /// without the transient store pool, the written end.
    pub fn committed_where(&self) -> Result<i64> {
        self.with_open(|o| match o.commitlog.pool() {
            Some(_) => o.commitlog.queue().committed_where(),
            None => o.commitlog.max_offset(),
        })
    }

    // -- flush ------------------------------------------------------------------------------

    /// From now on a service thread calls [`MessageStore::group_commit_step`] (SYNC_FLUSH).
    pub fn attach_group_commit(&self) -> Result<()> {
        self.writable("group commit")?;
        self.with_open(|o| o.commitlog.attach_group_commit())
    }

    /// One round of the group-commit service.
    pub fn group_commit_step(
        &self,
        timeout: Duration,
    ) -> Result<crate::commitlog::GroupCommitStep> {
        self.writable("group commit")?;
        self.with_open(|o| o.commitlog.group_commit_step(timeout))
    }

    /// Group-commit rounds (each waiting up to `timeout` for a producer) until the services
    /// stop or `budget` has passed: the service thread comes back to Python between batches of
    /// rounds, not after every force, so it does not queue for the GIL behind the producers it
    /// is about to wake. `flushed` is true when any round forced.
    pub fn group_commit_run(
        &self,
        timeout: Duration,
        budget: Duration,
    ) -> Result<crate::commitlog::GroupCommitStep> {
        let start = Instant::now();
        let mut flushed = false;
        loop {
            let mut step = self.group_commit_step(timeout)?;
            flushed |= step.flushed;
            if step.stopped || start.elapsed() >= budget {
                step.flushed = flushed;
                return Ok(step);
            }
        }
    }

    /// Forces the group-commit service has done so far.
    pub fn group_commit_forces(&self) -> Result<u64> {
        self.with_open(|o| o.commitlog.group_commit_forces())
    }

    /// Producers waiting for a group-commit force now.
    pub fn group_commit_waiting(&self) -> Result<usize> {
        self.with_open(|o| o.commitlog.group_commit_waiting())
    }

    /// One round of the periodic commitlog flush (`FlushRealTimeService`); returns the flushed
    /// offset.
    pub fn flush_commitlog(&self, least_pages: i64) -> Result<i64> {
        self.writable("flush_commitlog")?;
        self.with_open(|o| o.commitlog.flush_pages(least_pages))?
    }

    /// One round of `FlushConsumeQueueService`: forces consume queues with at least
    /// `least_pages` pages waiting (0: anything).
    pub fn flush_consume_queues(&self, least_pages: i64) -> Result<()> {
        self.writable("flush_consume_queues")?;
        self.with_open(|o| o.flush_consume_queues(least_pages))?
    }

    /// Writes and forces the `checkpoint` file (every second, and at close).
    pub fn flush_checkpoint(&self) -> Result<()> {
        self.writable("flush_checkpoint")?;
        self.with_open(|o| o.flush_checkpoint())?
    }

    /// Re-reads the disk usage of the commitlog's file system, refusing or accepting puts from
    /// now on; returns the used fraction (called every second by a service, and at each new
    /// segment).
    pub fn check_disk_space(&self) -> Result<f64> {
        self.with_open(|o| o.commitlog.refresh_disk_full())?
    }

    /// How far the commitlog is forced to disk (`getFlushedWhere`).
    pub fn flushed_where(&self) -> Result<i64> {
        self.with_open(|o| o.commitlog.queue().flushed_where())
    }

    // -- dispatch ---------------------------------------------------------------------------

    /// One round of the dispatch service: dispatches up to `max_bytes` of confirmed records, or
    /// when there is nothing to do, parks up to `timeout` for new ones first.
    pub fn dispatch_step(&self, max_bytes: i64, timeout: Duration) -> Result<ReputStep> {
        self.writable("dispatch")?;
        self.with_open(|o| {
            if o.behind() == 0 && !self.stopping.load(Ordering::SeqCst) {
                self.signal.wait(timeout, || {
                    o.behind() > 0 || self.stopping.load(Ordering::SeqCst)
                });
            }
            o.dispatch(max_bytes)
        })?
    }

    /// Dispatch rounds of up to `max_bytes` each, as long as there is work, until the services
    /// stop or `budget` has passed (an idle round parks up to `timeout` and ends the run):
    /// under a steady trickle of puts (SYNC_FLUSH confirms a few messages per force) the
    /// service thread stays in Rust instead of queueing for the GIL after every round.
    pub fn dispatch_run(
        &self,
        max_bytes: i64,
        timeout: Duration,
        budget: Duration,
    ) -> Result<ReputStep> {
        let start = Instant::now();
        let mut total = self.dispatch_step(max_bytes, timeout)?;
        while total.bytes > 0 && !self.stopping.load(Ordering::SeqCst) {
            let left = budget.saturating_sub(start.elapsed());
            if left.is_zero() {
                break;
            }
            let step = self.dispatch_step(max_bytes, timeout.min(left))?;
            total.behind = step.behind;
            if step.bytes == 0 {
                break;
            }
            total.dispatched += step.dispatched;
            total.skipped += step.skipped;
            total.bytes += step.bytes;
            total.reput_offset = step.reput_offset;
            if step.last_store_timestamp != 0 {
                total.last_store_timestamp = step.last_store_timestamp;
            }
        }
        Ok(total)
    }

    /// Damaged records dispatch has passed over since the store opened: records whose topic or
    /// queue id is not one a put accepts (bytes outside the body CRC), which get no consume
    /// queue unit and no index entry, and are logged.
    pub fn skipped_records(&self) -> Result<u64> {
        self.with_open(|o| o.skipped_records.load(Ordering::Relaxed))
    }

    /// Confirmed commitlog bytes not dispatched yet (`dispatchBehindBytes`). At 0, every
    /// message put so far is visible to reads.
    pub fn dispatch_behind_bytes(&self) -> Result<i64> {
        self.with_open(|o| o.behind())
    }

    /// `getConfirmOffset`.
    pub fn confirm_offset(&self) -> Result<i64> {
        self.with_open(|o| o.commitlog.confirm_offset())
    }

    // -- reads ------------------------------------------------------------------------------

    /// `getMessage` (STORE_SPEC §8.1) with RocketMQ's statuses and next offsets. Tags are
    /// matched by code in the consume queue and then by the real tag string, so a hash collision
    /// never returns a message of another tag.
    pub fn get_message(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msg_nums: i32,
        filter: &TagFilter,
    ) -> Result<GetMessageResult> {
        self.with_open(|o| {
            crate::read::get_message(
                &o.commitlog,
                self.readable_queue(o, topic, queue_id)?.as_deref(),
                offset,
                max_msg_nums,
                filter,
                &crate::read::PullLimits::from_config(&self.config, total_physical_memory()),
            )
        })?
    }

    fn with_queue<T>(
        &self,
        topic: &str,
        queue_id: i32,
        absent: T,
        f: impl FnOnce(&Open, &ConsumeQueue) -> T,
    ) -> Result<T> {
        self.with_open(|o| {
            Ok(match self.readable_queue(o, topic, queue_id)? {
                Some(cq) => f(o, &cq),
                None => absent,
            })
        })?
    }

    /// `getMaxOffsetInQueue`: the next queue offset to be dispatched (0 for an unknown queue).
    pub fn max_offset_in_queue(&self, topic: &str, queue_id: i32) -> Result<i64> {
        self.with_queue(topic, queue_id, 0, |_, cq| cq.max_offset())
    }

    /// `getMinOffsetInQueue` (0 for an unknown queue).
    pub fn min_offset_in_queue(&self, topic: &str, queue_id: i32) -> Result<i64> {
        self.with_queue(topic, queue_id, 0, |_, cq| cq.min_offset())
    }

    /// `getMessageTotalInQueue`.
    pub fn message_total_in_queue(&self, topic: &str, queue_id: i32) -> Result<i64> {
        self.with_queue(topic, queue_id, 0, |_, cq| {
            cq.max_offset() - cq.min_offset()
        })
    }

    /// The consume queue unit at `queue_offset`, if present.
    pub fn queue_unit(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: i64,
    ) -> Result<Option<CqUnit>> {
        self.with_queue(topic, queue_id, None, |_, cq| cq.get(queue_offset))
    }

    /// `getCommitLogOffsetInQueue`: the unit's commitlog offset, 0 when absent.
    pub fn commit_log_offset_in_queue(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: i64,
    ) -> Result<i64> {
        Ok(self
            .queue_unit(topic, queue_id, queue_offset)?
            .map_or(0, |u| u.phy_offset))
    }

    /// `getMessageStoreTimeStamp`: store timestamp of the message at a queue offset, -1 if none.
    pub fn message_store_timestamp(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: i64,
    ) -> Result<i64> {
        self.with_queue(topic, queue_id, -1, |o, cq| match cq.get(queue_offset) {
            Some(u) if !u.is_pre_blank() => o.commitlog.store_timestamp_at(u.phy_offset, u.size),
            _ => -1,
        })
    }

    /// `getEarliestMessageTime(topic, queue)`: store timestamp at the queue's minimum, -1 if none.
    pub fn earliest_message_time(&self, topic: &str, queue_id: i32) -> Result<i64> {
        let min = self.min_offset_in_queue(topic, queue_id)?;
        self.message_store_timestamp(topic, queue_id, min)
    }

    /// `getOffsetInQueueByTime` with a LOWER or UPPER boundary (STORE_SPEC §8.2).
    pub fn offset_in_queue_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp: i64,
        boundary: TimeBoundary,
    ) -> Result<i64> {
        self.with_queue(topic, queue_id, 0, |o, cq| {
            crate::read::offset_by_time(&o.commitlog, cq, timestamp, boundary)
        })
    }

    /// Bulk read of a queue as Arrow column buffers (see [`crate::read::read_batch`]), with
    /// the store's read checks (`check_crc_on_read`); compressed bodies are decompressed when
    /// `decompress` is given as true, or, when `None`, as `decompress_body_on_read` says.
    pub fn read_batch(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msgs: usize,
        include_properties: bool,
        decompress: Option<bool>,
    ) -> Result<crate::read::BatchColumns> {
        self.with_open(|o| {
            let opts = crate::read::ReadOptions {
                include_properties,
                check_crc: o.commitlog.checks_crc_on_read(),
                decompress: decompress.unwrap_or_else(|| o.commitlog.decompresses_on_read()),
            };
            match self.readable_queue(o, topic, queue_id)? {
                Some(cq) => crate::read::read_batch(&o.commitlog, &cq, offset, max_msgs, opts),
                None => Ok(crate::read::BatchColumns {
                    next_offset: offset.max(0),
                    ..crate::read::BatchColumns::empty()
                }),
            }
        })?
    }

    /// Topics that have a consume queue.
    pub fn topics(&self) -> Result<Vec<String>> {
        self.with_open(|o| {
            o.cqs.discover()?;
            Ok(o.cqs.topics())
        })?
    }

    /// Queue ids of a topic, ascending.
    pub fn queue_ids(&self, topic: &str) -> Result<Vec<i32>> {
        self.with_open(|o| {
            o.cqs.discover()?;
            Ok(o.cqs.queue_ids(topic))
        })?
    }

    /// `queryMessage`: messages whose KEYS entry or UNIQ_KEY equals `key` exactly, stored within
    /// `[begin, end]`, newest first, at most `max_num`.
    pub fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Result<Vec<MessageExt>> {
        self.query_index(topic, key, false, max_num, begin, end)
    }

    /// Messages of `topic` whose TAGS value equals `tag` exactly, newest first, through the
    /// `topic#T#tags` index entries RocketMQ 5.4+ writes (and rmqstore with
    /// [`StoreConfig::index_tags`]); messages indexed without them are not found.
    pub fn query_message_by_tag(
        &self,
        topic: &str,
        tag: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Result<Vec<MessageExt>> {
        self.query_index(topic, tag, true, max_num, begin, end)
    }

    fn query_index(
        &self,
        topic: &str,
        key: &str,
        by_tag: bool,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Result<Vec<MessageExt>> {
        if self.read_only {
            return Err(StoreError::ReadOnly(
                "query_message (key lookups read the index files, which a read-only store does                  not open yet)"
                    .to_owned(),
            ));
        }
        self.with_open(|o| {
            let Some(index) = o.index.as_ref() else {
                return Ok(Vec::new());
            };
            let mut found: Vec<MessageExt> = Vec::new();
            // At most maxMsgsNumBatch results, as RocketMQ. Index answers are hash matches with
            // times rounded to seconds: read each candidate (newest first) and keep exact key
            // and time matches. Candidates are fetched in growing rounds until enough matches
            // are found or the index has no more, so hash collisions never crowd out a match.
            let max_num = max_num.min(self.config.max_msgs_num_batch.max(1) as usize);
            let mut seen = std::collections::HashSet::new();
            let mut want = max_num.saturating_mul(4).max(16);
            let mut checked = 0;
            let indexed_key = if by_tag {
                format!("{}{key}", crate::format::index::TAG_KEY_INFIX)
            } else {
                key.to_owned()
            };
            loop {
                let q = index.query_offset(
                    topic,
                    &indexed_key,
                    want,
                    begin.saturating_sub(1000),
                    i64::MAX,
                );
                for &off in q.phy_offsets.iter().skip(checked) {
                    if found.len() >= max_num {
                        break;
                    }
                    if !seen.insert(off) {
                        continue;
                    }
                    // Candidates are matched on the record as stored, then the matching one
                    // is read as every read is (CRC checked, body decompressed): a damaged
                    // record this query returns is an error, one it skips is not its concern.
                    let candidate = o.commitlog.with_record(off, |file, d, data| {
                        let props = std::str::from_utf8(d.properties).unwrap_or("");
                        let prop = |name| find_property(props, name);
                        let key_matches = if by_tag {
                            prop(property::TAGS) == Some(key)
                        } else {
                            prop(property::KEYS).is_some_and(|keys| {
                                keys.split(property::KEY_SEPARATOR)
                                    .any(|k| !k.is_empty() && k == key)
                            }) || prop(property::UNIQ_KEY) == Some(key)
                        };
                        let matches = d.topic == topic.as_bytes()
                            && key_matches
                            && (begin..=end).contains(&d.store_timestamp);
                        matches.then(|| o.commitlog.read_message(file, d, data))
                    });
                    if let Ok(Some(Some(m))) = candidate {
                        found.push(m?);
                    }
                }
                if found.len() >= max_num || q.phy_offsets.len() < want {
                    break;
                }
                checked = q.phy_offsets.len();
                want = want.saturating_mul(4);
            }
            found.sort_by(|a, b| {
                b.store_timestamp
                    .cmp(&a.store_timestamp)
                    .then(b.commit_log_offset.cmp(&a.commit_log_offset))
            });
            Ok(found)
        })?
    }

    /// Clean shutdown: waits for calls in flight, stops allocation (deleting unused
    /// pre-allocated segments), forces everything to disk and releases the lock. Idempotent.
    pub fn close(&self) -> Result<()> {
        if self.is_forked_copy() {
            // The parent's store: nothing of it is this process's to stop, flush or release.
            return Ok(());
        }
        let mut guard = self.state.write().unwrap_or_else(|p| p.into_inner());
        let Some(open) = guard.take() else {
            return Ok(());
        };
        let _ = self.machine.transit(StoreState::ShutdownBegin);
        if self.read_only {
            // Nothing was written: let go of the mappings.
            drop(open);
            let _ = self.machine.transit(StoreState::ShutdownOk);
            return Ok(());
        }
        self.stopping.store(true, Ordering::SeqCst);
        self.signal.wake();
        self.commits.stop();
        self.allocator.shutdown();
        self.allocator.wait_idle(Duration::from_secs(10));
        let flushed = open.commitlog.flush_all();
        // Dispatch what was confirmed by that flush, so a clean close leaves nothing behind.
        let mut dispatched = Ok(());
        while open.behind() > 0 {
            match open.dispatch(OPEN_DISPATCH_CHUNK) {
                Ok(step) if step.bytes > 0 => {}
                Ok(_) => break,
                Err(e) => {
                    dispatched = Err(e);
                    break;
                }
            }
        }
        let cq_flushed = open.flush_consume_queues(0);
        let index_flushed = open.index.as_ref().map_or(Ok(()), |i| i.flush());
        let checkpointed = open.flush_checkpoint();
        // A clean shutdown removes the abort marker, unless something could not be made
        // durable or dispatch is behind (the next open then recovers as after a crash).
        let clean = flushed.is_ok()
            && dispatched.is_ok()
            && cq_flushed.is_ok()
            && index_flushed.is_ok()
            && checkpointed.is_ok()
            && open.behind() == 0;
        let abort_removed = match &open.abort {
            Some(abort) if clean => abort.remove(),
            _ => Ok(()),
        };
        for f in open.commitlog.queue().files() {
            f.munlock();
        }
        drop(open);
        self.allocator.release_pool();
        let _ = self.machine.transit(StoreState::ShutdownOk);
        flushed.map(|_| ())?;
        dispatched?;
        cq_flushed?;
        index_flushed?;
        checkpointed?;
        abort_removed
    }
}

impl Drop for MessageStore {
    fn drop(&mut self) {
        if self.is_forked_copy() {
            // The open files, maps and index writers are the parent's: leave them untouched
            // (their drops could wait on locks the parent's threads held at the fork).
            let open = self
                .state
                .get_mut()
                .map_or_else(|p| p.into_inner().take(), Option::take);
            std::mem::forget(open);
            return;
        }
        if let Err(e) = self.close() {
            log::error!(target: "rmqstore.store", "closing {} failed: {e}", self.root.display());
        }
    }
}

/// The store's lifecycle (`MessageStoreStateMachine`, STORE_SPEC §18): states only move forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum StoreState {
    Init = 0,
    LoadBegin = 10,
    LoadCommitlogOk = 11,
    LoadConsumeQueueOk = 12,
    LoadCompactionOk = 13,
    LoadIndexOk = 14,
    RecoverBegin = 20,
    RecoverConsumeQueueOk = 21,
    RecoverCommitlogOk = 22,
    RecoverTopicQueueTableOk = 23,
    Running = 30,
    ShutdownBegin = 40,
    ShutdownOk = 41,
}

impl StoreState {
    pub const ALL: [StoreState; 13] = [
        StoreState::Init,
        StoreState::LoadBegin,
        StoreState::LoadCommitlogOk,
        StoreState::LoadConsumeQueueOk,
        StoreState::LoadCompactionOk,
        StoreState::LoadIndexOk,
        StoreState::RecoverBegin,
        StoreState::RecoverConsumeQueueOk,
        StoreState::RecoverCommitlogOk,
        StoreState::RecoverTopicQueueTableOk,
        StoreState::Running,
        StoreState::ShutdownBegin,
        StoreState::ShutdownOk,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StoreState::Init => "INIT",
            StoreState::LoadBegin => "LOAD_BEGIN",
            StoreState::LoadCommitlogOk => "LOAD_COMMITLOG_OK",
            StoreState::LoadConsumeQueueOk => "LOAD_CONSUME_QUEUE_OK",
            StoreState::LoadCompactionOk => "LOAD_COMPACTION_OK",
            StoreState::LoadIndexOk => "LOAD_INDEX_OK",
            StoreState::RecoverBegin => "RECOVER_BEGIN",
            StoreState::RecoverConsumeQueueOk => "RECOVER_CONSUME_QUEUE_OK",
            StoreState::RecoverCommitlogOk => "RECOVER_COMMITLOG_OK",
            StoreState::RecoverTopicQueueTableOk => "RECOVER_TOPIC_QUEUE_TABLE_OK",
            StoreState::Running => "RUNNING",
            StoreState::ShutdownBegin => "SHUTDOWN_BEGIN",
            StoreState::ShutdownOk => "SHUTDOWN_OK",
        }
    }

    /// RocketMQ's numeric state value.
    pub fn value(self) -> u8 {
        self as u8
    }
}

/// Forward-only state holder.
#[derive(Debug)]
pub struct StateMachine {
    state: std::sync::atomic::AtomicU8,
}

impl Default for StateMachine {
    fn default() -> Self {
        StateMachine {
            state: std::sync::atomic::AtomicU8::new(StoreState::Init as u8),
        }
    }
}

impl StateMachine {
    pub fn get(&self) -> StoreState {
        let v = self.state.load(Ordering::Acquire);
        StoreState::ALL
            .iter()
            .copied()
            .find(|s| *s as u8 == v)
            .unwrap_or(StoreState::Init)
    }

    /// Moves to `to`; a transition backwards (or to the same state) is refused and leaves the
    /// state as it was.
    pub fn transit(&self, to: StoreState) -> Result<()> {
        let from = self.get();
        if to <= from {
            return Err(StoreError::InvalidArgument(format!(
                "store state cannot go from {} back to {}",
                from.name(),
                to.name()
            )));
        }
        self.state.store(to as u8, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod state_tests {
    use super::*;

    #[test]
    fn forward_only() {
        let m = StateMachine::default();
        assert_eq!(m.get(), StoreState::Init);
        m.transit(StoreState::LoadBegin).unwrap();
        m.transit(StoreState::Running).unwrap();
        assert!(m.transit(StoreState::LoadBegin).is_err());
        assert_eq!(
            m.get(),
            StoreState::Running,
            "a failed transition keeps the state"
        );
        assert!(m.transit(StoreState::Running).is_err());
        m.transit(StoreState::ShutdownOk).unwrap();
        assert_eq!(m.get().name(), "SHUTDOWN_OK");
        assert_eq!(m.get().value(), 41);
    }
}
