//! Opening a store: the staged open of a writable store (every file checked before the first
//! byte changes, then recovery and the dispatch catch-up) and the read-only open.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::{Arc, Mutex, RwLock};

use crate::commitlog::{CommitLog, RecoveryReport, RecoveryStart};
use crate::config::{FlushDiskType, StoreConfig};
use crate::dispatch::store_sinks;
use crate::error::{Result, StoreError};
use crate::file::allocate::{AllocateConfig, Allocator};
use crate::file::checkpoint::{AbortFile, StoreCheckpoint};
use crate::file::lockfile::StoreLock;
use crate::file::transient_pool::TransientStorePool;
use crate::index::IndexService;
use crate::queue::store::ConsumeQueueStore;
use crate::wait::DataSignal;

use super::{MessageStore, Open, StateMachine, StoreState, OPEN_DISPATCH_CHUNK};
use crate::schedule::{DelayLevelHook, DelayLevels};

/// The delay levels of a configuration [`StoreConfig::validate`] passed (which parsed them).
fn delay_levels(config: &StoreConfig) -> DelayLevels {
    DelayLevels::parse(&config.message_delay_level).unwrap_or_default()
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
        let tombstones = crate::queue::tombstones::Tombstones::load(&root.join("config"))?;
        let cqs = Arc::new(
            ConsumeQueueStore::load(
                &root.join("consumequeue"),
                config.consume_queue_units_per_file(),
            )?
            .with_tombstones(tombstones),
        );
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
            Some(Arc::new(index))
        } else {
            None
        };
        machine.transit(StoreState::LoadIndexOk)?;
        if config.timer_wheel_enable {
            crate::timer::check_files(root)?;
        }
        before_changes()?;
        // Everything was found as expected: from here on, opening may change files.
        super::topics_clean::remove_deleting_leftovers(root);
        let checkpoint = StoreCheckpoint::open(&root.join("checkpoint"))?;
        commitlog.queue().remove_empty_leftover()?;
        cqs.remove_empty_leftovers()?;
        if let Some(index) = &index {
            index.remove_empty_leftovers()?;
            index.reserve_loaded();
        }
        machine.transit(StoreState::RecoverBegin)?;
        // SAFETY: the queues were loaded just now and are not shared yet.
        unsafe { cqs.recover() }?;
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
        let deleted = |topic: &str, at: i64| cqs.tombstones().covers(topic, at);
        let mut recovery =
            unsafe { commitlog.recover(config.check_crc_on_recover, start, deleted) }?;
        machine.transit(StoreState::RecoverCommitlogOk)?;
        recovery.abnormal = !last_exit_ok;
        // Consume queues never point past the commitlog's valid end; what they hold before
        // the scan's start completes the topic-queue table (`recoverTopicQueueTable`).
        // SAFETY: the queues are not shared yet.
        unsafe { cqs.truncate_dirty(recovery.process_offset) }?;
        cqs.tombstones().clamp_to(recovery.process_offset)?;
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
            // The last file may hold messages past its header's end (RocketMQ 4.9.8's header
            // race): confirmed against the commitlog, dispatch resumes after them.
            index.adopt_covered_end(|f, phy| {
                crate::dispatch::file_holds_message(&commitlog, index, f, phy)
            });
            let min = commitlog.min_offset().max(0);
            match index.progress() {
                Some(p) => dispatch_from = dispatch_from.min(p.max(min)),
                None if !last_exit_ok => dispatch_from = min,
                None => {}
            }
            // Keys missing between two index files (RocketMQ can lose a file's worth, see
            // `dispatch::fill_index_gaps`) are indexed again, in files between the two.
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
            sinks: store_sinks(&cqs, index.as_ref(), &Arc::new(delay_levels(&config))),
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
        let mut store = MessageStore::assemble(
            root, machine, config, allocator, signal, open, recovery, false,
        );
        store.attach_timer(root)?;
        Ok(store)
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
        let levels = Arc::new(delay_levels(&config));
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
            put_hooks: if read_only {
                Vec::new()
            } else {
                vec![Box::new(DelayLevelHook::new(levels.clone()))]
            },
            schedule: super::schedule::ScheduleProgress::new(levels),
            timer: None,
            tx: crate::transaction::TxState::new(),
            tx_check_round: std::sync::Mutex::default(),
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
                "{} is not a message store: it has no {} folder (open it for writing to create a store)",
                root.display(),
                commitlog_dir.display()
            )));
        }
        let machine = Arc::new(StateMachine::default());
        machine.transit(StoreState::LoadBegin)?;
        let (allocator, signal, commitlog) =
            Self::load_commitlog(&config, &commitlog_dir, None, true)?;
        let cqs = Arc::new(ConsumeQueueStore::load_read_only(
            &root.join("consumequeue"),
            config.consume_queue_units_per_file(),
        )?);
        let open = Open {
            commitlog,
            // Never used: a read-only store does not dispatch.
            sinks: store_sinks(&cqs, None, &Arc::new(delay_levels(&config))),
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
}
