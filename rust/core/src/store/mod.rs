//! The message store's facade: one folder, locked while open, holding the commitlog, the consume
//! queues, the index files, the checkpoint and the abort marker. [`MessageStore`] is the one handle
//! the binding uses; its methods live by concern:
//!
//! - `open.rs`: the staged open (everything checked before the first byte changes, then recovery
//!   and the dispatch catch-up) and the read-only open;
//! - `queries.rs`: reads and lookups (messages by queue, by time, by key or tag; offsets; topics);
//! - `services.rs`: one round of each background service (allocation, commit, group commit,
//!   flushes, dispatch), called by Python's service threads;
//! - `hooks.rs`: put hooks, which may rewrite or refuse a message before it is appended;
//! - `state.rs`: the lifecycle state machine;
//! - `timer.rs`: timer messages (the engine's rounds, cancellation);
//! - `running_flags.rs`: the running flags and the disks' used ratios;
//! - here: the store's parts while open, the put path, flush, truncation and close.

mod clean;
mod hooks;
mod open;
mod queries;
mod running_flags;
mod schedule;
mod services;
mod state;
mod timer;
mod topics_clean;
mod transaction;
mod transaction_check;

pub use hooks::{PutBatch, PutMessageHook};
pub use services::PrefaultStep;
pub(crate) use state::StateMachine;
pub use state::StoreState;
pub use timer::RECALL_MESSAGE_TAG;
pub use topics_clean::{is_lmq_topic, is_system_topic, SYSTEM_TOPICS, SYSTEM_TOPIC_PREFIX};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::commitlog::{AppendResult, Batch, CommitLog, CommitRequests, RecoveryReport};
use crate::config::StoreConfig;
use crate::dispatch::{reput, ReputStep, StoreSinks};
use crate::error::{Result, StoreError};
use crate::file::allocate::Allocator;
use crate::file::checkpoint::{AbortFile, StoreCheckpoint};
use crate::file::lockfile::StoreLock;
use crate::format::Message;
use crate::index::IndexService;
use crate::queue::store::ConsumeQueueStore;
use crate::wait::DataSignal;

/// The store's parts while it is open (`None` in [`MessageStore`] once closed).
pub(crate) struct Open {
    commitlog: CommitLog,
    cqs: Arc<ConsumeQueueStore>,
    index: Option<Arc<IndexService>>,
    /// What dispatch builds from each message: the consume queues and the index.
    sinks: StoreSinks,
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
        let step = reput(&self.commitlog, &self.sinks, &mut from, max_bytes);
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

/// A message store open in one folder (see the module header): the handle every call goes
/// through, shared between threads.
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
    /// Run on every put before it is appended, in order (the delay-level hook, then any
    /// added).
    put_hooks: Vec<Box<dyn PutMessageHook>>,
    /// The delay levels and each level's delivery progress.
    schedule: schedule::ScheduleProgress,
    /// The timer message engine (a writable store with `timer_wheel_enable`).
    timer: Option<Arc<crate::timer::TimerEngine>>,
    /// Transactional messages: the table, the op queue, the check progress, the counters.
    tx: crate::transaction::TxState,
    /// One transaction check round at a time (`transaction_check`).
    tx_check_round: Mutex<transaction_check::CheckScratch>,
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

    /// True in a process forked from the one that opened the store (see [`crate::fork`]): the
    /// store is then unusable here, and closing or dropping it does nothing.
    pub fn is_forked_copy(&self) -> bool {
        crate::fork::generation() != self.fork_generation
    }

    /// `Err` in a forked child of the process that opened the store (see
    /// [`MessageStore::is_forked_copy`]), with the message every call gives there.
    pub(crate) fn check_not_forked(&self) -> Result<()> {
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

    /// Adds a put hook: from now on it runs on every put, after the hooks added before it (see
    /// [`PutMessageHook`]). Hooks are added while the store is set up, before it is shared.
    pub fn add_put_hook(&mut self, hook: Box<dyn PutMessageHook>) {
        self.put_hooks.push(hook);
    }

    /// Appends `msg` once every put hook has passed it (rewritten as they rewrote it); a hook's
    /// refusal is returned as the put's status, with nothing appended.
    pub fn put_message(&self, msg: &Message) -> Result<AppendResult> {
        self.writable("put_message")?;
        self.with_open(|o| {
            if !self.put_hooks.iter().any(|h| h.applies_to(msg)) {
                return o.commitlog.put_message(msg);
            }
            let mut msg = msg.clone();
            match hooks::run(&self.put_hooks, &mut msg, |h, m| h.before_put(m)) {
                Some(refused) => AppendResult::failed(refused),
                None => o.commitlog.put_message(&msg),
            }
        })
    }

    /// Appends a batch once every put hook has passed it, as [`MessageStore::put_message`].
    pub fn put_messages(&self, batch: &Batch<'_>) -> Result<AppendResult> {
        self.writable("put_messages")?;
        self.with_open(|o| {
            if !self.put_hooks.iter().any(|h| h.applies_to_batch(batch)) {
                return o.commitlog.put_messages(batch);
            }
            let mut head = PutBatch::from_batch(batch);
            match hooks::run(&self.put_hooks, &mut head, |h, b| h.before_put_batch(b)) {
                Some(refused) => AppendResult::failed(refused),
                None => o.commitlog.put_messages(&head.as_batch()),
            }
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
        // SAFETY: the state's write lock is held: no other call is in flight, and no call
        // leaves a slice of a queue behind.
        unsafe { o.cqs.truncate_dirty(offset) }?;
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
        // Deleted topics' tombstones end at the cut: what is put from there on is new.
        o.cqs.tombstones().clamp_to(offset)?;
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
        self.tx_after_truncate(o);
        log::warn!(
            target: "rmqstore.store",
            "truncated {} at commitlog offset {offset}",
            self.root.display()
        );
        Ok(true)
    }

    /// Clean shutdown: waits for calls in flight, stops allocation (deleting unused
    /// pre-allocated segments), forces everything to disk and releases the lock. Idempotent.
    pub fn close(&self) -> Result<()> {
        if self.is_forked_copy() {
            // The parent's store: nothing of it is this process's to stop, flush or release.
            return Ok(());
        }
        let mut guard = self.state.write().unwrap_or_else(|p| p.into_inner());
        // The timer's checkpoint first (RocketMQ stops its timer store before the message
        // store): what it says was delivered or enqueued is then in the files below.
        let timer_flushed = match (&self.timer, guard.is_some()) {
            (Some(timer), true) => timer.flush(),
            _ => Ok(()),
        };
        let Some(open) = guard.take() else {
            return Ok(());
        };
        let _ = self.machine.transit(StoreState::ShutdownBegin);
        // Queued op messages are written before the files close (the op batch service's last
        // round).
        let ops_written = if self.read_only {
            Ok(())
        } else {
            self.tx_close_ops(&open)
        };
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
        // Segments a deletion took out while a reader held them go now (the readers keep
        // their mappings): retention.
        open.commitlog.queue().remove_hanged();
        for cq in open.cqs.all() {
            cq.remove_hanged();
        }
        drop(open);
        self.allocator.release_pool();
        let _ = self.machine.transit(StoreState::ShutdownOk);
        flushed.map(|_| ())?;
        timer_flushed?;
        ops_written?;
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
