//! The store's side of the transaction check ([`crate::transaction::check`]): one round of
//! `TransactionalMessageServiceImpl.check` over half queue 0 with the exactly-once lookup
//! before each re-append, the half as the producer's checker sees it, and the pending list.
//!
//! # Copies in batches
//!
//! A half that needs a check is re-appended (RocketMQ's `putBackHalfMsgQueue`). One put per
//! copy would take the append lock once per half; the round instead encodes each copy while
//! its half is borrowed from the segment and appends the copies of up to [`COPY_BATCH`] halves
//! in one hold of the append lock ([`crate::commitlog::EncodedRecords`]), waiting once for a
//! SYNC_FLUSH force. The batch is appended before anything else the round writes (a discard,
//! the end of the round), so records land in walk order, and a failed append ends the round
//! at the first half whose copy was not placed (the next round starts there again).
//!
//! # Where the time goes
//!
//! With a million transactions pending in memory (`tx_check_bench`), a lookup in the table is
//! a cache miss or two; paid one at a time between the work of two halves they were half of
//! the round. Before the walk looks at a chunk of [`UNIT_CHUNK`] half units, their keys are
//! made and their table entries looked up back to back ([`Round::warm_table`]), so the misses
//! overlap. A copy's
//! properties string is spliced from the half's when that one is already in the map's order
//! (`HalfProps::render_into`). The first write to each new commitlog page (the kernel zeroing
//! it) costs the copies what it costs any put; `warm_mapped_file_enable` with the allocation
//! service moves it off the appending thread for both.
//!
//! # Exactly once
//!
//! Before a half is copied (or discarded), its transaction's lock is taken and its state
//! looked up (the table, else `find_commit`): a committed transaction gets only the op of this
//! half (if none names it yet) and is not asked about; an ended one is passed (op likewise).
//! The copy is registered in the table once it is placed, under the lock again, as the
//! transaction's latest half, unless the transaction ended in between (an `end_transaction`
//! on another thread): then the table keeps the end and the copy is not asked about (the next
//! round finds it committed or ended and writes its op). Holding the lock from the lookup to
//! the registration would mean holding many transactions' locks at once (one batch), which
//! the table forbids; the rule above gives the same outcome: no commit is ever written for a
//! transaction the table or the records know as ended.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{MessageStore, Open};
use crate::commitlog::EncodedRecords;
use crate::error::{Result, StoreError};
use crate::format::{CqUnit, MessageExt, PutMessageStatus};
use crate::queue::consume_queue::ConsumeQueue;
use crate::transaction::check::{
    calculate_op_offset, judge, CheckParams, CheckStep, LastOps, OpMap, Verdict, OP_CHUNK,
};
use crate::transaction::copy::{
    copy_envelope, discard_message, id_of, map_items, parse_java_int, HalfProps,
    TRANSACTION_CHECK_TIMES, TRAN_PREPARED_QUEUE_OFFSET,
};
use crate::transaction::pending::{PendingList, PendingTx};
use crate::transaction::table::{Hashed, TxKey};
use crate::transaction::{TxCounters, TxEntry, TxPhase, HALF_TOPIC, OP_TOPIC, REMOVE_TAG};

/// Copies appended in one hold of the append lock.
pub(crate) const COPY_BATCH: usize = 1024;
/// Half queue units read from the consume queue at a time.
const UNIT_CHUNK: usize = 1024;
/// RocketMQ's `MAX_RETRY_COUNT_WHEN_HALF_NULL`: the second unreadable half of a round ends it.
const MAX_NULL_HALVES: u32 = 1;

/// The buffers a round leaves for the next one (under the one-round lock): a round of a
/// thousand copies otherwise grows its batch to a few hundred KiB again, reallocating and
/// copying as it goes, and faults in fresh pages for it.
#[derive(Default)]
pub(crate) struct CheckScratch {
    batch: Option<EncodedRecords>,
    props: String,
    warm: Vec<Hashed>,
    pending: Vec<PendingCopy>,
}

/// A copy encoded into the batch, not yet appended.
struct PendingCopy {
    /// Its transaction's table key (hashed once, at the lookup).
    key: Option<TxKey>,
    /// The half it copies: its queue offset (where the round restarts if the copy is not
    /// placed).
    half_queue_offset: i64,
    /// Asked about (a check copy) or not (an immunity re-put).
    ask: bool,
}

/// What the state lookup says of a transaction.
enum Known {
    /// Not ended as far as the table and the records tell.
    Open,
    /// A later copy of the transaction exists (the table's latest half is after this one):
    /// this one is passed.
    Superseded,
    Committed,
    Ended,
}

/// The op queue read in chunks from the op progress.
struct OpReader {
    cq: Option<Arc<ConsumeQueue>>,
    next: i64,
    last: LastOps,
}

/// How one half's judgement ended for the walk.
enum Step {
    /// Move past it.
    Pass,
    /// End the round here (the half stays for the next round).
    Stop,
    /// Read more op messages and judge it again.
    MoreOps,
    /// Passed, and `max_to_check` copies are made: end the round with more to do.
    Full,
}

/// One round's state.
struct Round<'a> {
    store: &'a MessageStore,
    o: &'a Open,
    p: CheckParams,
    max_to_check: usize,
    /// The half progress when the round began (`miniOffset` of `fillOpRemoveMap`).
    mini: i64,
    ops: OpMap,
    reader: OpReader,
    batch: EncodedRecords,
    pending: Vec<PendingCopy>,
    /// Copies to ask about made so far (placed or in the batch).
    asked: usize,
    /// The first half whose copy could not be appended: the round ends there.
    restart: Option<i64>,
    /// The properties string of the copy being encoded (its allocation reused).
    props_buf: String,
    /// The table keys of the next units, for [`Round::warm_table`] (its allocation reused).
    warm_scratch: Vec<Hashed>,
    step: CheckStep,
}

impl MessageStore {
    /// One check round (see [`crate::transaction::check`]): from the half progress, judges
    /// each half as RocketMQ's check does, with the exactly-once lookup before a copy; ends
    /// when a half is too young or fresh, at the end of the queue, on a failed put, or once
    /// `max_to_check` copies to ask about are made (`done` false). Moves the half progress
    /// past what it passed and the op progress past the op messages it used up
    /// (`calculateOpOffset`).
    pub fn transaction_check(&self, p: CheckParams, max_to_check: usize) -> Result<CheckStep> {
        self.writable("transaction_check")?;
        self.with_open(|o| {
            let mut scratch = self
                .tx_check_round
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let mut round = Round::new(self, o, p, max_to_check, &mut scratch);
            let step = round.run();
            round.give_back(&mut scratch);
            step
        })?
    }

    /// The half message at commitlog offset `offset` as the producer's checker sees it
    /// (`AbstractTransactionalMessageCheckListener.sendCheckMessage`): topic and queue are its
    /// `REAL_TOPIC` / `REAL_QID`, the rest as stored (its properties hold the transaction
    /// id). `None` when no half record starts there.
    pub fn transaction_message(&self, offset: i64) -> Result<Option<MessageExt>> {
        self.with_open(|o| {
            let m = match o.commitlog.look_message(offset) {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(None),
                Err(StoreError::InvalidArgument(_)) => return Ok(None),
                Err(e) => return Err(e),
            };
            if m.topic() != HALF_TOPIC {
                return Ok(None);
            }
            Ok(Some(checker_view(m)))
        })?
    }

    /// The transactions not resolved, from the half progress (see
    /// [`crate::transaction::pending`]): the latest copy of each, oldest first, at most
    /// `limit`.
    pub fn pending_transactions(&self, limit: usize) -> Result<Vec<PendingTx>> {
        self.with_open(|o| {
            if !self.read_only {
                // The check's latest copies are in the half queue once dispatched.
                Self::tx_catch_up(o)?;
            }
            let mut list = PendingList::default();
            let half_cq = o.cqs.find(HALF_TOPIC, 0);
            let op_cq = o.cqs.find(OP_TOPIC, 0);
            let half_from = clamp_to(&half_cq, self.tx.half_progress.load(Ordering::Acquire));
            let op_from = clamp_to(&op_cq, self.tx.op_progress.load(Ordering::Acquire));
            if let Some(cq) = &op_cq {
                cq.scan(op_from, cq.max_offset(), |u| {
                    o.commitlog.with_unit_record(u.phy_offset, u.size, |d| {
                        let p = HalfProps::parse(d.properties);
                        if p.tags == Some(REMOVE_TAG) {
                            list.add_op_body(d.body);
                        }
                    });
                    true
                });
            }
            let Some(cq) = half_cq else {
                return Ok(Vec::new());
            };
            cq.scan(half_from, cq.max_offset(), |u| {
                let seen = o.commitlog.with_unit_record(u.phy_offset, u.size, |d| {
                    if d.topic != HALF_TOPIC.as_bytes() {
                        return;
                    }
                    let p = HalfProps::parse(d.properties);
                    let ended = p.id().is_some_and(|id| {
                        self.tx
                            .table
                            .lock_id(id)
                            .get()
                            .is_some_and(|e| e.phase.is_ended())
                    });
                    list.add_half(u.queue_offset, d, &p, ended);
                });
                if seen.is_none() {
                    log::warn!(
                        target: "rmqstore.transaction",
                        "half queue offset {} (commitlog offset {}) cannot be read; left out of \
                         the pending list",
                        u.queue_offset,
                        u.phy_offset
                    );
                }
                true
            });
            Ok(list.finish(limit))
        })?
    }
}

/// The half as `sendCheckMessage` sends it: topic and queue set to the real ones.
fn checker_view(mut m: MessageExt) -> MessageExt {
    let real_topic = m.property(crate::schedule::REAL_TOPIC).map(str::to_owned);
    let real_qid = m
        .property(crate::schedule::REAL_QID)
        .and_then(parse_java_int);
    if let Some(t) = real_topic {
        m.set_topic(&t);
    }
    if let Some(q) = real_qid {
        m.queue_id = q;
    }
    m
}

/// `offset` within the queue's `[min, max]` (0 without a queue).
fn clamp_to(cq: &Option<Arc<ConsumeQueue>>, offset: i64) -> i64 {
    match cq {
        Some(cq) => {
            let (min, max) = (cq.min_offset(), cq.max_offset());
            offset.clamp(min, max.max(min))
        }
        None => 0,
    }
}

impl<'a> Round<'a> {
    fn new(
        store: &'a MessageStore,
        o: &'a Open,
        p: CheckParams,
        max_to_check: usize,
        scratch: &mut CheckScratch,
    ) -> Self {
        let mut batch = scratch
            .batch
            .take()
            .unwrap_or_else(|| EncodedRecords::new(HALF_TOPIC, 0, true));
        batch.clear();
        let mut pending = std::mem::take(&mut scratch.pending);
        pending.clear();
        Round {
            store,
            o,
            p,
            max_to_check,
            mini: 0,
            ops: OpMap::default(),
            reader: OpReader {
                cq: o.cqs.find(OP_TOPIC, 0),
                next: 0,
                last: LastOps::None,
            },
            batch,
            pending,
            asked: 0,
            restart: None,
            props_buf: std::mem::take(&mut scratch.props),
            warm_scratch: std::mem::take(&mut scratch.warm),
            step: CheckStep::default(),
        }
    }

    /// Leaves the round's buffers for the next round.
    fn give_back(self, scratch: &mut CheckScratch) {
        scratch.batch = Some(self.batch);
        scratch.props = self.props_buf;
        scratch.warm = self.warm_scratch;
        scratch.pending = self.pending;
    }

    /// The progress as stored, moved into each queue's `[min, max]` (logged when it was
    /// outside, as RocketMQ's pulls answer OFFSET_ILLEGAL and move it).
    fn progress(&self, half_cq: &Option<Arc<ConsumeQueue>>) -> (i64, i64) {
        let tx = &self.store.tx;
        let (h, op) = (
            tx.half_progress.load(Ordering::Acquire),
            tx.op_progress.load(Ordering::Acquire),
        );
        let (h2, op2) = (clamp_to(half_cq, h), clamp_to(&self.reader.cq, op));
        if h2 != h {
            log::warn!(target: "rmqstore.transaction", "half progress {h} is outside the half queue; moved to {h2}");
        }
        if op2 != op {
            log::warn!(target: "rmqstore.transaction", "op progress {op} is outside the op queue; moved to {op2}");
        }
        (h2, op2)
    }

    fn run(&mut self) -> Result<CheckStep> {
        let half_cq = self.o.cqs.find(HALF_TOPIC, 0);
        let (half_offset, op_offset) = self.progress(&half_cq);
        self.mini = half_offset;
        self.reader.next = op_offset;
        self.read_ops();
        // The walk ends at the queue's end as the round began: copies the round appends lie
        // after it (RocketMQ stops at them as stored after the round's start; a clock ahead
        // of the records would not).
        let end = half_cq.as_ref().map_or(0, |cq| cq.max_offset());
        let mut new_offset = half_offset;
        let mut i = half_offset;
        let mut nulls: u32 = 0;
        // The last unit counted in `examined` (a half judged again after more op messages
        // were read is counted once).
        let mut counted = i64::MIN;
        let mut units: Vec<CqUnit> = Vec::new();
        let mut done = true;
        while let Some(cq) = half_cq.as_ref().filter(|_| i < end) {
            if self.ops.resolve(i) {
                if counted != i {
                    self.step.examined += 1;
                }
                i += 1;
                new_offset = i;
                continue;
            }
            let unit = match units.first() {
                Some(u) if u.queue_offset <= i && i < u.queue_offset + units.len() as i64 => {
                    Some(units[(i - u.queue_offset) as usize])
                }
                _ => {
                    units = cq.units_from(i, UNIT_CHUNK).unwrap_or_default();
                    self.warm_table(&units);
                    units.first().filter(|u| u.queue_offset == i).copied()
                }
            };
            let Some(u) = unit else {
                // Below the queue's minimum now (its first segment was removed) or not
                // readable: continue at the minimum, as RocketMQ's pull answers.
                let min = cq.min_offset();
                if min > i {
                    log::warn!(target: "rmqstore.transaction", "half queue offset {i} is gone; continuing at {min}");
                    i = min;
                    new_offset = i;
                    continue;
                }
                break;
            };
            if counted != i {
                self.step.examined += 1;
                counted = i;
            }
            let o = self.o;
            let outcome = o
                .commitlog
                .with_unit_record(u.phy_offset, u.size, |d| {
                    if d.topic != HALF_TOPIC.as_bytes() || d.queue_offset != i {
                        return None;
                    }
                    Some(self.examine(i, d))
                })
                .flatten();
            let step = match outcome {
                Some(s) => s?,
                None => {
                    log::error!(
                        target: "rmqstore.transaction",
                        "half queue offset {i} points at commitlog offset {} ({} bytes), which is \
                         not a whole half message; passed",
                        u.phy_offset,
                        u.size
                    );
                    nulls += 1;
                    if nulls > MAX_NULL_HALVES {
                        break;
                    }
                    Step::Pass
                }
            };
            match step {
                Step::Pass => {
                    i += 1;
                    new_offset = i;
                }
                Step::Stop => break,
                Step::MoreOps => {
                    if self.reader.last == LastOps::None {
                        // RocketMQ would sleep a second here and look again (see the module
                        // header of transaction::check): the next round judges it.
                        break;
                    }
                    self.read_ops();
                }
                Step::Full => {
                    i += 1;
                    new_offset = i;
                    done = false;
                    break;
                }
            }
        }
        self.flush_copies()?;
        if let Some(restart) = self.restart {
            new_offset = new_offset.min(restart);
            done = true;
        }
        let new_op = calculate_op_offset(&mut self.ops.done, op_offset);
        let tx = &self.store.tx;
        tx.half_progress.store(new_offset, Ordering::Release);
        tx.op_progress.store(new_op, Ordering::Release);
        TxCounters::add(&tx.counters.checked, self.step.to_check.len() as u64);
        TxCounters::add(&tx.counters.discarded, self.step.discarded.len() as u64);
        TxCounters::add(&tx.counters.already_committed, self.step.already_committed);
        self.step.done = done;
        Ok(std::mem::take(&mut self.step))
    }

    /// Brings the table entries of the transactions of `units` into the CPU caches
    /// ([`crate::transaction::table::TxTable::warm`]) before the walk looks each one up under
    /// its lock: with many transactions in memory, a lookup is otherwise a cache miss paid
    /// alone. Halves an op already names are left out (the walk passes them without a lookup),
    /// and halves past the copies the round may still make (it ends there).
    fn warm_table(&mut self, units: &[CqUnit]) {
        let o = self.o;
        let ops = &self.ops;
        let left = self.max_to_check.saturating_sub(self.asked);
        let keys = units
            .iter()
            .filter(|u| !ops.names(u.queue_offset))
            .take(left)
            .filter_map(|u| {
                o.commitlog
                    .with_unit_record(u.phy_offset, u.size, |d| id_of(d.properties).map(TxKey::of))
                    .flatten()
            });
        self.store.tx.table.warm(keys, &mut self.warm_scratch);
    }

    /// `fillOpRemoveMap` from the reader's next op offset: up to [`OP_CHUNK`] op messages.
    fn read_ops(&mut self) {
        let Some(cq) = self.reader.cq.clone() else {
            self.reader.last = LastOps::None;
            return;
        };
        let units = if self.reader.next < cq.max_offset() {
            cq.units_from(self.reader.next, OP_CHUNK)
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut last_born = None;
        let o = self.o;
        for u in &units {
            let read = o.commitlog.with_unit_record(u.phy_offset, u.size, |d| {
                let p = HalfProps::parse(d.properties);
                let body = (!d.body.is_empty()).then_some(d.body);
                self.ops
                    .add_op(u.queue_offset, p.tags == Some(REMOVE_TAG), body, self.mini);
                d.born_timestamp
            });
            match read {
                Some(born) => last_born = Some(born),
                None => {
                    log::error!(
                        target: "rmqstore.transaction",
                        "op queue offset {} points at commitlog offset {}, which is not a whole \
                         op message; passed",
                        u.queue_offset,
                        u.phy_offset
                    );
                    self.ops.add_unreadable(u.queue_offset);
                }
            }
        }
        match units.last() {
            Some(u) => {
                self.reader.next = u.queue_offset + 1;
                self.reader.last = match last_born {
                    Some(last_born) => LastOps::Found { last_born },
                    // Only unreadable units: RocketMQ's pull finds no message list.
                    None => LastOps::None,
                };
            }
            None => self.reader.last = LastOps::None,
        }
    }

    /// Steps 2 to 5 for the half `d` at queue offset `i`, and what they write.
    fn examine(&mut self, i: i64, d: &crate::format::DecodedRecord<'_>) -> Result<Step> {
        let h = HalfProps::parse(d.properties);
        let verdict = judge(
            &self.p,
            &h,
            d.born_timestamp,
            d.store_timestamp,
            &mut self.ops,
            self.reader.last,
        );
        match verdict {
            Verdict::Fresh | Verdict::Young => Ok(Step::Stop),
            Verdict::MoreOps => Ok(Step::MoreOps),
            Verdict::ResolvedByPrepared => Ok(Step::Pass),
            Verdict::Discard(count) => self.discard(i, d, &h, count),
            Verdict::Check(count) => self.copy(i, d, &h, count, true),
            Verdict::Immunity(count) => self.copy(i, d, &h, count, false),
        }
    }

    /// The exactly-once lookup for the half at queue offset `i` (under the transaction's
    /// lock): `Some(step)` when the half is settled without a copy or discard.
    fn settled(
        &mut self,
        i: i64,
        d: &crate::format::DecodedRecord<'_>,
        h: &HalfProps<'_>,
        key: Option<&TxKey>,
    ) -> Result<Option<Step>> {
        let (Some(id), Some(key)) = (h.id(), key) else {
            return Ok(None);
        };
        let store = self.store;
        let mut g = store.tx.table.lock(key.clone());
        let known = match g.get() {
            Some(e) if e.phase == TxPhase::Committed => Known::Committed,
            Some(e) if e.phase.is_ended() => Known::Ended,
            Some(e) if e.half_queue_offset > i => Known::Superseded,
            Some(_) => Known::Open,
            None => {
                let real = h.real_topic.zip(h.real_qid.and_then(parse_java_int));
                match real {
                    Some((topic, qid)) => {
                        match store.find_commit(self.o, id, topic, qid, d.physical_offset)? {
                            Some(_) => {
                                g.set(TxEntry {
                                    phase: TxPhase::Committed,
                                    half_offset: d.physical_offset,
                                    half_queue_offset: i,
                                });
                                Known::Committed
                            }
                            None => Known::Open,
                        }
                    }
                    None => Known::Open,
                }
            }
        };
        match known {
            Known::Open => Ok(None),
            Known::Superseded => Ok(Some(Step::Pass)),
            Known::Committed | Known::Ended => {
                // The round read every op message (isNeedCheck needs that), so only a queued
                // entry can name this half besides the op map.
                let named = self.ops.names(i) || store.tx.ops.contains(i);
                if !named {
                    store.tx_enqueue_op(self.o, i)?;
                    if matches!(known, Known::Committed) {
                        self.step.already_committed += 1;
                        log::info!(
                            target: "rmqstore.transaction",
                            "transaction {id} (half queue offset {i}) was committed without its \
                             op message; the op is written, the producer is not asked"
                        );
                    }
                }
                drop(g);
                Ok(Some(Step::Pass))
            }
        }
    }

    /// `putBackHalfMsgQueue` (`ask`) or `putImmunityMsgBackToHalfQueue`: encodes the copy
    /// into the batch after the exactly-once lookup.
    fn copy(
        &mut self,
        i: i64,
        d: &crate::format::DecodedRecord<'_>,
        h: &HalfProps<'_>,
        count: i32,
        ask: bool,
    ) -> Result<Step> {
        let key = h.id().map(TxKey::of);
        if let Some(s) = self.settled(i, d, h, key.as_ref())? {
            return Ok(s);
        }
        let mut count_buf = [0u8; 12];
        let count_s = crate::transaction::records::itoa(count, &mut count_buf);
        let queue_offset_s;
        let mut props = std::mem::take(&mut self.props_buf);
        if ask {
            h.render_into(&[(TRANSACTION_CHECK_TIMES, count_s)], &mut props);
        } else {
            queue_offset_s = i.to_string();
            let prepared = h.prepared_queue_offset.unwrap_or(&queue_offset_s);
            h.render_into(
                &[
                    (TRANSACTION_CHECK_TIMES, count_s),
                    (TRAN_PREPARED_QUEUE_OFFSET, prepared),
                ],
                &mut props,
            );
        }
        let env = copy_envelope(d, HALF_TOPIC);
        if let Err(s) =
            self.store
                .with_commitlog_encode(self.o, &mut self.batch, &env, &props, d.body)
        {
            // The copy cannot be written (its properties grew past the limit): RocketMQ's put
            // fails the same way and retries forever; this half is logged and passed.
            log::error!(
                target: "rmqstore.transaction",
                "the copy of half queue offset {i} cannot be written ({}); passed",
                s.name()
            );
            return Ok(Step::Pass);
        }
        self.pending.push(PendingCopy {
            key,
            half_queue_offset: i,
            ask,
        });
        if ask {
            self.asked += 1;
        }
        if self.batch.len() >= COPY_BATCH && self.flush_copies()?.is_some() {
            return Ok(Step::Stop);
        }
        if ask && self.asked >= self.max_to_check {
            return Ok(Step::Full);
        }
        Ok(Step::Pass)
    }

    /// `resolveDiscardMsg`: the half moved to `TRANS_CHECK_MAX_TIME_TOPIC` after the
    /// exactly-once lookup (a committed transaction is not discarded: it gets its op).
    fn discard(
        &mut self,
        i: i64,
        d: &crate::format::DecodedRecord<'_>,
        h: &HalfProps<'_>,
        count: Option<i32>,
    ) -> Result<Step> {
        if let Some(s) = self.settled(i, d, h, h.id().map(TxKey::of).as_ref())? {
            return Ok(s);
        }
        // Copies of halves before this one first: records stay in walk order.
        if self.flush_copies()?.is_some() {
            return Ok(Step::Stop);
        }
        let count_s = count.map(|c| c.to_string());
        let puts: Vec<(&str, &str)> = count_s
            .as_deref()
            .map(|c| vec![(TRANSACTION_CHECK_TIMES, c)])
            .unwrap_or_default();
        let msg = discard_message(d, map_items(h, &puts));
        let r = self.store.put_message(&msg)?;
        if !r.is_ok() {
            log::error!(
                target: "rmqstore.transaction",
                "the half at queue offset {i} could not be moved to {} ({}); the next round \
                 tries again",
                crate::transaction::CHECK_MAX_TOPIC,
                r.status.name()
            );
            return Ok(Step::Stop);
        }
        log::error!(
            target: "rmqstore.transaction",
            "the half of transaction {} at queue offset {i} (commitlog offset {}) was checked \
             too many times or is older than the file reserved time; moved to {} at commitlog \
             offset {}",
            h.id().unwrap_or("?"),
            d.physical_offset,
            crate::transaction::CHECK_MAX_TOPIC,
            r.wrote_offset
        );
        if let Some(id) = h.id() {
            let mut g = self.store.tx_lock(id);
            if !g.get().is_some_and(|e| e.phase.is_ended()) {
                g.set(TxEntry {
                    phase: TxPhase::Discarded,
                    half_offset: d.physical_offset,
                    half_queue_offset: i,
                });
            }
        }
        // Beyond RocketMQ (which writes no op for a discarded half): the op marks it
        // resolved, so a round that starts before it again (a progress saved earlier) does not
        // discard it twice.
        self.store.tx_enqueue_op(self.o, i)?;
        self.step.discarded.push(d.physical_offset);
        Ok(Step::Pass)
    }

    /// Appends the batch of copies and registers them: `Some(half queue offset)` of the first
    /// half whose copy could not be placed (the round must end there), `None` when all were.
    fn flush_copies(&mut self) -> Result<Option<i64>> {
        if self.batch.is_empty() {
            return Ok(None);
        }
        let placed = self.o.commitlog.append_encoded(&self.batch);
        self.batch.clear();
        // Emptied here and handed back below (its allocation kept for the next batch).
        let mut pending = std::mem::take(&mut self.pending);
        let mut restart = None;
        for (k, c) in pending.drain(..).enumerate() {
            let Some(&(offset, queue_offset)) = placed.records.get(k) else {
                if restart.is_none() {
                    log::error!(
                        target: "rmqstore.transaction",
                        "the copy of half queue offset {} could not be appended ({}); the next \
                         round starts there",
                        c.half_queue_offset,
                        placed.status.name()
                    );
                    restart = Some(c.half_queue_offset);
                }
                continue;
            };
            let mut ask = c.ask;
            if let Some(key) = c.key {
                let mut g = self.store.tx.table.lock(key);
                match g.get() {
                    Some(e) if e.phase.is_ended() => ask = false,
                    _ => g.set(TxEntry {
                        phase: TxPhase::Pending,
                        half_offset: offset,
                        half_queue_offset: queue_offset,
                    }),
                }
            }
            if ask {
                self.step.to_check.push(offset);
            }
        }
        if placed.status != PutMessageStatus::PutOk && restart.is_none() {
            // All placed but the SYNC_FLUSH force timed out: stored, only not known forced.
            log::warn!(
                target: "rmqstore.transaction",
                "the check's copies were appended but their force answered {}",
                placed.status.name()
            );
        }
        if let Some(r) = restart {
            self.restart = Some(self.restart.map_or(r, |old| old.min(r)));
        }
        self.pending = pending;
        Ok(restart)
    }
}

impl MessageStore {
    /// Encodes a copy into `batch` with the commitlog's limits.
    fn with_commitlog_encode(
        &self,
        o: &Open,
        batch: &mut EncodedRecords,
        env: &crate::format::RecordEnvelope<'_>,
        props: &str,
        body: &[u8],
    ) -> std::result::Result<(), PutMessageStatus> {
        o.commitlog.encode_record(batch, env, props, body)
    }
}
