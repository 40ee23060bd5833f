//! Transactional messages in RocketMQ 5.x's layout (`TransactionalMessageBridge`,
//! `TransactionalMessageServiceImpl`, `EndTransactionProcessor`): a producer stores a *half*
//! message in `HALF_TOPIC` queue 0 (invisible in its real topic), then ends the transaction:
//! a commit puts the message into its real topic and queue with the COMMIT type, and both a
//! commit and a rollback mark the half resolved with an *op* message in `OP_TOPIC` (tag
//! `REMOVE_TAG`, body the comma-terminated half queue offsets), batched as RocketMQ's
//! `TransactionalOpBatchService` does.
//!
//! - `records`: the byte rules of the half, commit and op records (properties in Java
//!   `HashMap` order, see `crate::schedule`'s `order`).
//! - `uniq`: `UNIQ_KEY` generation in `MessageClientIDSetter`'s layout.
//! - `table`: the in-memory transaction table, striped; a stripe's mutex is the
//!   per-transaction lock.
//! - `op`: the queue of op entries waiting to be written (`MessageQueueOpContext`) and the op
//!   messages cut from it (`getOpMessage`).
//! - `lookup`: the exactly-once state lookup of a transaction this process does not know:
//!   `find_commit` (index query, or a consume queue scan with the index off) and the op state.
//!
//! # A transaction is its UNIQ_KEY
//!
//! The half carries `__transactionId__` = `UNIQ_KEY` (generated when the message has none).
//! Every decision on one transaction (an `end_transaction`, a check) holds that transaction's
//! lock (`crate::MessageStore`'s `tx_lock`) across: the state lookup, the real put, the op
//! enqueue. The state is:
//!
//! 1. the table's entry when this process prepared, copied or ended the transaction (the fast
//!    path: no record lookup beyond the half itself, no dispatch wait, no index query);
//! 2. otherwise `find_commit`: a record of the half's `REAL_TOPIC` with transaction type
//!    COMMIT, `UNIQ_KEY` = the id and a `preparedTransactionOffset` (0 is the first half of a
//!    store, so `>= 0`), found through the index
//!    after dispatch caught up (each candidate record read and checked), or by a scan of the
//!    real queue's consume queue from the first unit past the half when
//!    `message_index_enable` is off;
//! 3. then the op state: an op entry naming the half's queue offset (op messages at or after
//!    the op progress, plus the entries still queued), or the half lying below the half
//!    progress (the check passed it: resolved, discarded or copied).
//!
//! So a commit is never written twice: a committed transaction is found (1 or 2) before any
//! real put, whether its op was written or not (a SIGKILL between the real put and the op
//! write leaves a commit that 2 finds).
//!
//! # Internal API for the check round (`transaction/check.rs`, `store/transaction_check.rs`)
//!
//! On `crate::MessageStore` (`store/transaction.rs`), all `pub(crate)`:
//!
//! - `tx_lock(&self, id: &str) -> TxGuard<'_>`: locks the transaction's stripe; the guard
//!   reads and writes the table's entry of that id (`table::TxGuard::get`,
//!   `table::TxGuard::set`, `table::TxGuard::remove`). Hold it across the lookup, the
//!   puts and the op enqueue of one decision. Never take two at once (stripes are shared by
//!   many ids: a second lock can deadlock with the first).
//! - `tx_enqueue_op(&self, o: &Open, half_queue_offset: i64) -> Result<()>`: queues the op
//!   entry `"<offset>,"`; when the queued text reaches the op max size the op messages are
//!   written at once on the caller's thread (FIFO: every entry queued before is in them or
//!   in an earlier one).
//! - `find_commit(&self, o: &Open, id: &str, real_topic: &str, real_qid: i32,
//!   half_offset: i64) -> Result<Option<i64>>`: the commitlog offset of a COMMIT record of
//!   the transaction, see 2 above.
//! - `tx_op_done(&self, o: &Open, half_queue_offset: i64) -> Result<bool>`: whether an op
//!   entry names that half queue offset (written at or after the op progress, or queued).
//! - `tx_half_at(o: &Open, offset: i64) -> Result<HalfRecord>`: the half at a commitlog
//!   offset, as the table needs it (id, queue offset, real topic and queue).
//! - `tx_halves_of(&self, o: &Open, id: &str) -> Result<Vec<HalfRecord>>`: the halves
//!   (original and copies) of a transaction the records hold at or after the half progress,
//!   oldest first.
//! - `tx_catch_up(o: &Open) -> Result<()>`: dispatches everything written (forcing what is
//!   written but not confirmed first), so queues and index hold it.
//! - `put_commit(&self, o: &Open, id: &str, half_offset: i64, own: bool) ->
//!   Result<(AppendResult, bool)>`: the commit of the half at `half_offset` (which must be
//!   one of `id`), through the put hooks; `own` when the half was written by this process
//!   (its properties are cut, not re-rendered). When the second value is true the SYNC_FLUSH
//!   wait is still to do: `o.commitlog.await_put_flush(r)`, after the transaction's lock is
//!   released.
//! - `self.tx` (`TxState`): the table, the op queue, the half and op progress
//!   (`TxState::half_progress`, `TxState::op_progress`) and the counters
//!   (`TxCounters`; the check round adds `checked`, `discarded`, `already_committed`).
//!
//! Lock order: transaction stripe, then the op queue, then the commitlog's append lock. The
//! op queue's lock is held while an op message is put (so op messages are written in the
//! order their entries were queued); nothing that holds it takes a stripe.

pub mod check;
pub(crate) mod copy;
pub(crate) mod lookup;
pub(crate) mod op;
pub mod pending;
pub(crate) mod records;
pub(crate) mod table;
pub(crate) mod uniq;

use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU64, Ordering};

use crate::commitlog::AppendResult;

pub(crate) use table::{TxEntry, TxKey, TxPhase, TxTable};

pub use check::{CheckParams, CheckStep};
pub use pending::PendingTx;

/// `TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC`.
pub const HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// `TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC`.
pub const OP_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// `TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC`: where halves checked too often go.
pub const CHECK_MAX_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
/// `MixAll.CID_SYS_RMQ_TRANS`: the group whose consumer offsets hold the check progress.
pub const TRANS_GROUP: &str = "CID_RMQ_SYS_TRANS";
/// `TransactionalMessageUtil.REMOVE_TAG`: the tag of op messages.
pub const REMOVE_TAG: &str = "d";
/// `MixAll.DEFAULT_PRODUCER_GROUP`.
pub const DEFAULT_PRODUCER_GROUP: &str = "DEFAULT_PRODUCER";
/// `BrokerConfig.transactionOpMsgMaxSize` default.
pub const DEFAULT_OP_MSG_MAX_SIZE: i32 = 4096;
/// `BrokerConfig.transactionOpBatchInterval` default (ms).
pub const DEFAULT_OP_BATCH_INTERVAL_MS: i64 = 3000;

/// Which transaction `crate::MessageStore::end_transaction` ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxTarget {
    /// The commitlog offset of its half (or of a copy the check made).
    Offset(i64),
    /// Its transaction id (the half's `UNIQ_KEY` / `__transactionId__`).
    Id(String),
}

/// What `crate::MessageStore::end_transaction` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndOutcome {
    pub transaction_id: String,
    /// The half the commit was built from (the one named, or the latest copy for an id).
    pub half_offset: i64,
    /// The half queue offset the op names (the transaction's latest copy).
    pub half_queue_offset: i64,
    pub commit: bool,
    /// The real message's put (a commit), `None` for a rollback.
    pub real: Option<AppendResult>,
    /// False when the real put failed: the transaction is still pending and no op was queued.
    pub ended: bool,
}

/// The transaction figures (`crate::MessageStore::transaction_stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Halves stored by `prepare_message`.
    pub prepared: u64,
    /// Transactions committed (real message stored) by `end_transaction` or the check.
    pub committed: u64,
    pub rolled_back: u64,
    /// Op messages written.
    pub ops_written: u64,
    /// Op entries queued and not yet written.
    pub op_entries_queued: u64,
    /// Halves the check round asked about.
    pub checked: u64,
    /// Halves moved to `TRANS_CHECK_MAX_TIME_TOPIC`.
    pub discarded: u64,
    /// Halves the check found committed without their op (the op was then written).
    pub already_committed: u64,
    /// Transactions the table holds as pending.
    pub pending_in_memory: u64,
}

/// The counters behind `TxStats`.
#[derive(Debug, Default)]
pub(crate) struct TxCounters {
    pub(crate) prepared: AtomicU64,
    pub(crate) committed: AtomicU64,
    pub(crate) rolled_back: AtomicU64,
    pub(crate) ops_written: AtomicU64,
    pub(crate) checked: AtomicU64,
    pub(crate) discarded: AtomicU64,
    pub(crate) already_committed: AtomicU64,
}

impl TxCounters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// The half this thread prepared last, so that ending it by its offset (the usual
/// `end_transaction(result.wrote_offset, ...)` right after `prepare_message`) needs no read
/// of the half's record to learn its id. Keyed by the store (`TxState::serial`) and its
/// truncation count (`TxState::truncations`, read in the same hold of the store's state as
/// the append): a truncation, which could put another record at that offset, makes it stale.
/// Even a stale id could not end another transaction: the commit reads the half again under
/// the transaction's lock and refuses a record of another id.
#[derive(Default)]
pub(crate) struct LastHalf {
    store: u64,
    truncations: u64,
    offset: i64,
    id: String,
    /// The id as the table's key (not parsed again).
    key: Option<TxKey>,
}

thread_local! {
    static LAST_HALF: std::cell::RefCell<LastHalf> = std::cell::RefCell::new(LastHalf::default());
}

/// Serials of `TxState`s (0: none).
static SERIALS: AtomicU64 = AtomicU64::new(1);

impl TxState {
    /// Remembers, for this thread, that the half at `offset` is transaction `id`;
    /// `truncations` as read before the half was appended.
    pub(crate) fn remember_half(&self, truncations: u64, offset: i64, id: &str, key: TxKey) {
        LAST_HALF.with(|l| {
            let mut l = l.borrow_mut();
            l.store = self.serial;
            l.truncations = truncations;
            l.offset = offset;
            l.id.clear();
            l.id.push_str(id);
            l.key = Some(key);
        });
    }

    /// The id of the half at `offset` when this thread prepared it last and no truncation
    /// happened since.
    pub(crate) fn recall_half(&self, offset: i64) -> Option<(String, TxKey)> {
        let truncations = self.truncations.load(Ordering::Acquire);
        LAST_HALF.with(|l| {
            let l = l.borrow();
            if l.store != self.serial || l.truncations != truncations || l.offset != offset {
                return None;
            }
            l.key.clone().map(|k| (l.id.clone(), k))
        })
    }
}

/// The store's transaction state: table, op queue, progress, counters.
#[derive(Debug)]
pub(crate) struct TxState {
    pub(crate) table: TxTable,
    pub(crate) ops: op::OpQueue,
    /// Next half queue offset the check examines (`RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS`).
    pub(crate) half_progress: AtomicI64,
    /// Next op queue offset the check reads (`RMQ_SYS_TRANS_OP_HALF_TOPIC@CID_RMQ_SYS_TRANS`).
    pub(crate) op_progress: AtomicI64,
    /// The op max size and batch interval of the last `transaction_flush_ops` call (RocketMQ's
    /// defaults until then): an end that makes the queued text reach it writes at once.
    pub(crate) op_max_size: AtomicI32,
    pub(crate) op_interval_ms: AtomicI64,
    /// Wakes the op batch service (an entry due at once: interval 0).
    pub(crate) op_wake: op::OpWake,
    pub(crate) counters: TxCounters,
    /// This state's serial (`LastHalf`'s key).
    pub(crate) serial: u64,
    /// Truncations of the store (`MessageStore::truncate_files`), counted under the state's
    /// write lock.
    pub(crate) truncations: AtomicU64,
}

impl TxState {
    pub(crate) fn new() -> TxState {
        TxState {
            table: TxTable::new(),
            ops: op::OpQueue::new(crate::util::now_millis()),
            half_progress: AtomicI64::new(0),
            op_progress: AtomicI64::new(0),
            op_max_size: AtomicI32::new(DEFAULT_OP_MSG_MAX_SIZE),
            op_interval_ms: AtomicI64::new(DEFAULT_OP_BATCH_INTERVAL_MS),
            op_wake: op::OpWake::default(),
            counters: TxCounters::default(),
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
            truncations: AtomicU64::new(0),
        }
    }
}

impl Default for TxState {
    fn default() -> Self {
        Self::new()
    }
}
