//! The store's side of transactional messages (`crate::transaction`): prepare, end (commit
//! or rollback, exactly once), the op batching, the check progress and the figures, and the
//! internal API the check round uses (documented in `transaction/mod.rs`).

use std::sync::atomic::Ordering;

use super::{hooks, MessageStore, Open, OPEN_DISPATCH_CHUNK};
use crate::commitlog::AppendResult;
use crate::error::{Result, StoreError};
use crate::format::{
    for_each_property, property, sysflag, DecodedRecord, Message, PutMessageStatus,
};
use crate::schedule::order::java_map_order;
use crate::transaction::records::{
    commit_properties, cut_real_queue, half_properties, PutScan, StoredProps, OP_PROPERTIES,
};
use crate::transaction::table::{TxGuard, TxKey};
use crate::transaction::uniq::{new_uniq_id, UniqId};
use crate::transaction::{
    lookup, EndOutcome, TxCounters, TxEntry, TxPhase, TxStats, TxTarget, HALF_TOPIC, OP_TOPIC,
};
use crate::util::now_millis;

/// A half message as the table needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HalfRecord {
    pub(crate) offset: i64,
    pub(crate) queue_offset: i64,
    pub(crate) id: String,
    /// `REAL_TOPIC` / `REAL_QID`, when usable.
    pub(crate) real: Option<(String, i32)>,
}

/// `resetTransactionValue`.
fn with_transaction_type(sys_flag: i32, tx_type: i32) -> i32 {
    (sys_flag & !sysflag::TRANSACTION_ROLLBACK_TYPE) | tx_type
}

impl MessageStore {
    // ---- internal API (see transaction/mod.rs) ----

    /// Locks transaction `id` (its table stripe) and gives its table entry.
    #[allow(dead_code)] // the check round's
    pub(crate) fn tx_lock(&self, id: &str) -> TxGuard<'_> {
        self.tx.table.lock_id(id)
    }

    /// Dispatches everything written, so the consume queues and the index hold it (what is
    /// written but not yet confirmed, e.g. a `WAIT=false` put in SYNC_FLUSH mode or bytes in a
    /// write buffer, is committed and forced first: the table forgets old ends, and the
    /// lookup that replaces it must see every record written before).
    pub(crate) fn tx_catch_up(o: &Open) -> Result<()> {
        if o.commitlog.confirm_offset() < o.commitlog.max_offset() {
            o.commitlog.flush_all()?;
        }
        while o.behind() > 0 {
            if o.dispatch(OPEN_DISPATCH_CHUNK)?.bytes == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Runs `f` on the record at `offset` (`None` from `f`: not the record wanted); a record
    /// still in a write buffer of the transient store pool, not committed to its file yet, is
    /// committed and read again. `None` when no record starts there or `f` gives none.
    fn tx_record_at<T>(
        o: &Open,
        offset: i64,
        f: impl Fn(&DecodedRecord<'_>) -> Option<T>,
    ) -> Result<Option<T>> {
        let read = || {
            o.commitlog
                .with_record(offset, |_, d, _| f(d))
                .ok()
                .flatten()
                .flatten()
        };
        if let Some(v) = read() {
            return Ok(Some(v));
        }
        if offset >= 0 && offset < o.commitlog.max_offset() {
            o.commitlog.commit_pages(0)?;
            return Ok(read());
        }
        Ok(None)
    }

    /// The half message at `offset`: `TransactionNotFound` when there is none.
    pub(crate) fn tx_half_at(o: &Open, offset: i64) -> Result<HalfRecord> {
        let not_found = || {
            StoreError::TransactionNotFound(format!(
                "no transaction half message at commitlog offset {offset}"
            ))
        };
        Self::tx_record_at(o, offset, |d| {
            if d.topic != HALF_TOPIC.as_bytes() {
                return None;
            }
            let sp = StoredProps::parse(d.properties);
            Some(HalfRecord {
                offset,
                queue_offset: d.queue_offset,
                id: sp.transaction_id()?.to_owned(),
                real: sp.real_queue().map(|(t, q)| (t.to_owned(), q)),
            })
        })?
        .ok_or_else(not_found)
    }

    /// The transaction id of the half message at `offset` (`__transactionId__`, else
    /// `UNIQ_KEY`, as `StoredProps::transaction_id` reads it) in one pass over its properties,
    /// nothing else parsed: `TransactionNotFound` when there is no half there.
    pub(crate) fn tx_half_id_at(o: &Open, offset: i64) -> Result<String> {
        let not_found = || {
            StoreError::TransactionNotFound(format!(
                "no transaction half message at commitlog offset {offset}"
            ))
        };
        Self::tx_record_at(o, offset, |d| {
            if d.topic != HALF_TOPIC.as_bytes() {
                return None;
            }
            // The last usable value of each (a map keeps the last one).
            let (mut tx_id, mut uniq) = (None, None);
            for_each_property(d.properties, |k, v| {
                if v.is_empty() {
                    return;
                }
                let slot = if k == property::TRANSACTION_ID.as_bytes() {
                    &mut tx_id
                } else if k == property::UNIQ_KEY.as_bytes() {
                    &mut uniq
                } else {
                    return;
                };
                if let Ok(v) = std::str::from_utf8(v) {
                    *slot = Some(v);
                }
            });
            tx_id.or(uniq).map(str::to_owned)
        })?
        .ok_or_else(not_found)
    }

    /// The halves (original and copies) of transaction `id` the records hold at or after the
    /// half progress, by the index (after dispatch caught up) or a scan of the half queue;
    /// newest last.
    pub(crate) fn tx_halves_of(&self, o: &Open, id: &str) -> Result<Vec<HalfRecord>> {
        Self::tx_catch_up(o)?;
        let mut found: Vec<HalfRecord> = Vec::new();
        let keep = |off: i64, found: &mut Vec<HalfRecord>| {
            if let Ok(h) = Self::tx_half_at(o, off) {
                if h.id == id && !found.iter().any(|f| f.offset == off) {
                    found.push(h);
                }
            }
        };
        if let Some(index) = &o.index {
            let q = index.query_offset(HALF_TOPIC, id, usize::MAX, 0, i64::MAX);
            for off in q.phy_offsets {
                keep(off, &mut found);
            }
        } else if let Some(cq) = o.cqs.find(HALF_TOPIC, 0) {
            let from = self.tx.half_progress.load(Ordering::Acquire);
            let mut offsets = Vec::new();
            cq.scan(from, cq.max_offset(), |u| {
                let hit = o.commitlog.with_unit_record(u.phy_offset, u.size, |d| {
                    StoredProps::parse(d.properties).transaction_id() == Some(id)
                });
                if hit == Some(true) {
                    offsets.push(u.phy_offset);
                }
                true
            });
            for off in offsets {
                keep(off, &mut found);
            }
        }
        found.sort_by_key(|h| h.offset);
        Ok(found)
    }

    /// `find_commit`: the commitlog offset of a COMMIT record of transaction `id` in
    /// `real_topic` (see transaction/mod.rs): by the index after dispatch caught up, else (the
    /// index off, or more key-hash matches than one index query gives) by a scan of
    /// `real_topic`/`real_qid` from the first unit past `half_offset`.
    pub(crate) fn find_commit(
        &self,
        o: &Open,
        id: &str,
        real_topic: &str,
        real_qid: i32,
        half_offset: i64,
    ) -> Result<Option<i64>> {
        Self::tx_catch_up(o)?;
        if let Some(index) = &o.index {
            match lookup::commit_by_index(&o.commitlog, index, id, real_topic) {
                lookup::IndexAnswer::Found(off) => return Ok(Some(off)),
                lookup::IndexAnswer::NotFound => return Ok(None),
                // More key-hash matches than one query gives: the queue scan decides.
                lookup::IndexAnswer::Truncated => {}
            }
        }
        Ok(o.cqs
            .find(real_topic, real_qid)
            .and_then(|cq| lookup::commit_by_scan(&o.commitlog, &cq, id, real_topic, half_offset)))
    }

    /// Whether an op entry names half queue offset `half_queue_offset`: queued, or in an op
    /// message at or after the op progress.
    pub(crate) fn tx_op_done(&self, o: &Open, half_queue_offset: i64) -> Result<bool> {
        if self.tx.ops.contains(half_queue_offset) {
            return Ok(true);
        }
        Self::tx_catch_up(o)?;
        let Some(cq) = o.cqs.find(OP_TOPIC, 0) else {
            return Ok(false);
        };
        let from = self.tx.op_progress.load(Ordering::Acquire);
        Ok(lookup::scan_ops(&o.commitlog, &cq, from, |v| {
            v == half_queue_offset
        }))
    }

    /// Queues the op entry of half queue offset `half_queue_offset`; writes op messages at
    /// once (on this thread) when the queued text reaches the op max size.
    pub(crate) fn tx_enqueue_op(&self, o: &Open, half_queue_offset: i64) -> Result<()> {
        let max = self.tx.op_max_size.load(Ordering::Relaxed);
        let interval = self.tx.op_interval_ms.load(Ordering::Relaxed);
        if self.tx.ops.push(half_queue_offset, max) {
            self.tx_write_ops(o, now_millis(), max, interval, false)?;
        } else if interval == 0 {
            // Due at once: the op batch service writes it (`transaction_wait_ops` returns).
            self.tx.op_wake.request();
        }
        Ok(())
    }

    /// The op batch service's wait between rounds: up to `timeout`, ended at once by an op
    /// entry due at once (`transaction_op_batch_interval` = 0), `transaction_wake_ops` or
    /// `stop_services`; true once the services are stopped. Holds nothing of the store.
    pub fn transaction_wait_ops(&self, timeout: std::time::Duration) -> Result<bool> {
        self.writable("transaction_wait_ops")?;
        self.check_not_forked()?;
        Ok(self.tx.op_wake.wait(timeout))
    }

    /// Ends a `transaction_wait_ops` in progress (the op service is asked to stop).
    pub fn transaction_wake_ops(&self) {
        self.tx.op_wake.request();
    }

    /// Writes the op messages due (see `crate::transaction::op::OpQueue::write_due`);
    /// returns when the next round is due.
    fn tx_write_ops(
        &self,
        o: &Open,
        now_ms: i64,
        max_size: i32,
        interval_ms: i64,
        force: bool,
    ) -> Result<i64> {
        let round = self
            .tx
            .ops
            .write_due(now_ms, max_size, interval_ms, force, |body| {
                Self::put_op(o, body)
            });
        TxCounters::add(&self.tx.counters.ops_written, round.written);
        if let Some(failed) = round.failed {
            log::error!(
                target: "rmqstore.transaction",
                "an op message could not be written ({}); its {} entries stay queued",
                failed.status.name(),
                self.tx.ops.queued()
            );
            return Err(StoreError::Internal(format!(
                "the op message put failed with {}",
                failed.status.name()
            )));
        }
        Ok(round.next_run_ms)
    }

    /// Puts one op message (`makeOpMessageInner`): op topic, queue 0, tag `d`, sysflag 0, born
    /// now from the store host, `WAIT=false` (no flush wait). The put hooks do not see it (the
    /// op topic is the store's own).
    fn put_op(o: &Open, body: &[u8]) -> AppendResult {
        let m = Message {
            topic: OP_TOPIC.to_owned(),
            queue_id: 0,
            born_timestamp: now_millis(),
            ..Message::default()
        };
        o.commitlog
            .put_message_as(&m, body, OP_PROPERTIES, Some("false"))
    }

    /// After a truncation: the table forgets everything (halves past the cut are gone and
    /// their offsets will hold other records), queued op entries of removed halves are
    /// dropped, and the check progress is clamped to the queues.
    pub(super) fn tx_after_truncate(&self, o: &Open) {
        self.tx.truncations.fetch_add(1, Ordering::AcqRel);
        self.tx.table.clear();
        let top = |topic: &str| o.cqs.find(topic, 0).map_or(0, |cq| cq.max_offset());
        let half_end = top(HALF_TOPIC);
        self.tx.ops.retain_below(half_end);
        self.tx.half_progress.fetch_min(half_end, Ordering::AcqRel);
        self.tx
            .op_progress
            .fetch_min(top(OP_TOPIC), Ordering::AcqRel);
    }

    /// Close: writes every queued op entry.
    pub(super) fn tx_close_ops(&self, o: &Open) -> Result<()> {
        if self.tx.ops.queued() == 0 {
            return Ok(());
        }
        let max = self.tx.op_max_size.load(Ordering::Relaxed);
        let interval = self.tx.op_interval_ms.load(Ordering::Relaxed);
        self.tx_write_ops(o, now_millis(), max, interval, true)
            .map(drop)
    }

    /// Whether a put hook may act on a put of `topic` whose raw properties hold DELAY (`delay`)
    /// and a timer property (`timer`): each hook's own cheap answer
    /// ([`PutMessageHook::may_apply_to_raw`]), before any properties are decoded.
    fn hooks_may_apply(&self, topic: &str, delay: bool, timer: bool) -> bool {
        self.put_hooks
            .iter()
            .any(|h| h.may_apply_to_raw(topic, delay, timer))
    }

    /// Puts `env` with `body` and the stored properties string `props`, through the put hooks:
    /// they see the message with `view` as its properties map; when one changes it, its map is
    /// rendered again (in the map's order), as RocketMQ's transforming hooks do. The SYNC_FLUSH
    /// wait the message's WAIT asks for is left to the caller when the second value is true
    /// (`CommitLog::await_put_flush`, once the transaction's lock
    /// is released: a force is not waited for under a lock other transactions share).
    fn put_through_hooks(
        &self,
        o: &Open,
        env: Message,
        body: &[u8],
        props: &str,
        scan: PutScan<'_>,
        view: impl FnOnce() -> Vec<(String, String)>,
    ) -> (AppendResult, bool) {
        // `scan` is `PutScan::of(props)` (the callers have it from a pass of their own).
        debug_assert_eq!(scan, PutScan::of(props.as_bytes()));
        let PutScan { wait, delay, timer } = scan;
        // The separators are ASCII: a value between them is whole UTF-8 of `props`.
        let wait = wait.and_then(|w| std::str::from_utf8(w).ok());
        let later = o.commitlog.put_waits(wait);
        let no_wait = Some("false");
        if !self.hooks_may_apply(&env.topic, delay, timer) {
            return (
                o.commitlog.put_message_as(&env, body, props, no_wait),
                later,
            );
        }
        let mut msg = env;
        msg.properties = view();
        if !self.put_hooks.iter().any(|h| h.applies_to(&msg)) {
            return (
                o.commitlog.put_message_as(&msg, body, props, no_wait),
                later,
            );
        }
        msg.body = body.to_vec();
        let before = msg.clone();
        if let Some(refused) = hooks::run(&self.put_hooks, &mut msg, |h, m| h.before_put(m)) {
            return (AppendResult::failed(refused), false);
        }
        if before.topic == msg.topic
            && before.queue_id == msg.queue_id
            && before.sys_flag == msg.sys_flag
            && before.properties == msg.properties
            && before.body == msg.body
            && before.flag == msg.flag
        {
            return (
                o.commitlog.put_message_as(&msg, body, props, no_wait),
                later,
            );
        }
        // A rewritten message (its WAIT as the hook left it) waits here, as any put.
        msg.properties = java_map_order(std::mem::take(&mut msg.properties), |p| p.0.as_str());
        (o.commitlog.put_message(&msg), false)
    }

    // ---- API ----

    /// `prepareMessage`: stores `msg` as a transaction half message (see
    /// `crate::transaction`'s records): `RMQ_SYS_TRANS_HALF_TOPIC` queue 0, invisible in its
    /// real topic, through the put path. Returns the put's result and the transaction id (the
    /// message's `UNIQ_KEY`, generated when it has none). A refused put is a status, as for
    /// any put; a message with a timer property, an illegal topic, or the `UNIQ_KEY` of a
    /// transaction this process already holds is `MESSAGE_ILLEGAL`.
    pub fn prepare_message(
        &self,
        msg: &Message,
        producer_group: Option<&str>,
    ) -> Result<(AppendResult, String)> {
        self.writable("prepare_message")?;
        self.with_open(|o| {
            // Read in the same hold of the store's state as the append (a truncation takes it
            // exclusively): see `LastHalf`.
            let truncations = self.tx.truncations.load(Ordering::Acquire);
            let own = msg
                .properties
                .iter()
                .rev()
                .find(|(k, v)| k == property::UNIQ_KEY && !v.is_empty())
                .map(|p| p.1.as_str());
            let generated;
            let mut buf = [0u8; 32];
            let (id, key): (&str, TxKey) = match own {
                Some(u) => (u, TxKey::of(u)),
                None => {
                    generated = new_uniq_id(&self.config.store_host, now_millis());
                    let key = match &generated {
                        UniqId::V4(v) => TxKey::Hex(*v),
                        UniqId::V6(s) => TxKey::Text(s.as_str().into()),
                    };
                    (generated.as_str(&mut buf), key)
                }
            };
            let illegal = || Ok((AppendResult::failed(PutMessageStatus::MessageIllegal), id.to_owned()));
            if !crate::format::topic_is_legal(&msg.topic) || msg.queue_id < 0 || msg.topic == HALF_TOPIC {
                return illegal();
            }
            let props = match half_properties(
                &msg.properties,
                producer_group,
                id,
                &msg.topic,
                msg.queue_id,
            ) {
                Ok(p) => p,
                Err(s) => return Ok((AppendResult::failed(s), id.to_owned())),
            };
            // A generated id is new: no lookup. The message's own may name a known transaction.
            let fresh = own.is_none();
            let cached_key = key.clone();
            let g = self.tx.table.lock(key);
            if !fresh && g.get().is_some() {
                log::warn!(
                    target: "rmqstore.transaction",
                    "prepare_message refused: transaction {id} (the message's UNIQ_KEY) is already known"
                );
                return illegal();
            }
            let env = Message {
                topic: HALF_TOPIC.to_owned(),
                queue_id: 0,
                flag: msg.flag,
                sys_flag: with_transaction_type(msg.sys_flag, sysflag::TRANSACTION_NOT_TYPE),
                born_timestamp: msg.born_timestamp,
                born_host: msg.born_host,
                reconsume_times: msg.reconsume_times,
                ..Message::default()
            };
            // The half's string has no DELAY and no timer property (dropped, refused above),
            // and the message's WAIT (non-empty: an empty value was refused by the rendering).
            let scan = PutScan {
                wait: msg
                    .properties
                    .iter()
                    .rev()
                    .find(|(k, _)| k == property::WAIT)
                    .map(|p| p.1.as_bytes()),
                delay: false,
                timer: false,
            };
            let (r, wait) = self.put_through_hooks(o, env, &msg.body, &props, scan, || {
                StoredProps::parse(props.as_bytes())
                    .items
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            });
            if r.is_ok() {
                let e = TxEntry {
                    phase: TxPhase::Pending,
                    half_offset: r.wrote_offset,
                    half_queue_offset: r.queue_offset,
                };
                if fresh {
                    g.set_new(e);
                } else {
                    let mut g = g;
                    g.set(e);
                }
                TxCounters::add(&self.tx.counters.prepared, 1);
                self.tx
                    .remember_half(truncations, r.wrote_offset, id, cached_key);
            } else {
                drop(g);
            }
            // The force is waited for with the transaction's lock released.
            let r = if wait { o.commitlog.await_put_flush(r) } else { r };
            Ok((r, id.to_owned()))
        })?
    }

    /// `endTransaction`: commits (the real message stored, then the op queued) or rolls back
    /// (the op queued) the transaction of a half message, named by the half's (or a copy's)
    /// commitlog offset or by its id, exactly once: `TransactionNotFound` when there is no
    /// such half, `TransactionEnded` when it was already committed or rolled back (by this
    /// process, an earlier one or the check). A real put that fails leaves the transaction
    /// pending (`ended` false, no op).
    pub fn end_transaction(&self, target: TxTarget, commit: bool) -> Result<EndOutcome> {
        self.writable("end_transaction")?;
        self.with_open(|o| self.end_in(o, target, commit))?
    }

    fn end_in(&self, o: &Open, target: TxTarget, commit: bool) -> Result<EndOutcome> {
        // The id and the offset of the half named (its whole record is read only when the
        // table does not know the transaction).
        let (id, named_at, key) = match target {
            TxTarget::Offset(off) => match self.tx.recall_half(off) {
                Some((id, key)) => (id, Some(off), Some(key)),
                None => (Self::tx_half_id_at(o, off)?, Some(off), None),
            },
            TxTarget::Id(id) => (id, None, None),
        };
        let mut g = match key {
            Some(key) => self.tx.table.lock(key),
            None => self.tx.table.lock_id(&id),
        };
        let ended = |how: &str| {
            Err(StoreError::TransactionEnded(format!(
                "transaction {id} was already {how}"
            )))
        };
        let mut known = false;
        let latest = match g.get() {
            Some(e) => match e.phase {
                TxPhase::Pending => {
                    known = true;
                    e
                }
                TxPhase::Committed => return ended("committed"),
                TxPhase::RolledBack => return ended("rolled back"),
                TxPhase::Discarded => return ended("discarded after its check count"),
            },
            None => {
                // Not known here: read its state from the records.
                let mut halves = self.tx_halves_of(o, &id)?;
                let named = named_at.map(|off| Self::tx_half_at(o, off)).transpose()?;
                if let Some(h) = &named {
                    if !halves.iter().any(|x| x.offset == h.offset) {
                        halves.push(h.clone());
                        halves.sort_by_key(|x| x.offset);
                    }
                }
                let Some(last) = halves.last() else {
                    return Err(StoreError::TransactionNotFound(format!(
                        "no transaction half message has id {id}"
                    )));
                };
                let entry = TxEntry {
                    phase: TxPhase::Pending,
                    half_offset: last.offset,
                    half_queue_offset: last.queue_offset,
                };
                let first = halves[0].offset;
                if let Some((topic, qid)) = &last.real {
                    if self.find_commit(o, &id, topic, *qid, first)?.is_some() {
                        g.set(TxEntry {
                            phase: TxPhase::Committed,
                            ..entry
                        });
                        return ended("committed");
                    }
                }
                let progress = self.tx.half_progress.load(Ordering::Acquire);
                if last.queue_offset < progress || self.tx_op_done(o, last.queue_offset)? {
                    g.set(TxEntry {
                        phase: TxPhase::RolledBack,
                        ..entry
                    });
                    return ended("rolled back (or discarded)");
                }
                entry
            }
        };
        let half_offset = named_at.unwrap_or(latest.half_offset);
        // The table's latest half was written by this process (prepare, or the check's copy):
        // its properties string is the map's own rendering.
        let own = known && half_offset == latest.half_offset;
        let mut outcome = EndOutcome {
            transaction_id: id.clone(),
            half_offset,
            half_queue_offset: latest.half_queue_offset,
            commit,
            real: None,
            ended: true,
        };
        let mut force_wait = false;
        if commit {
            let (r, wait) = self.put_commit(o, &id, half_offset, own)?;
            let ok = r.is_ok();
            outcome.real = Some(r);
            force_wait = wait;
            if !ok {
                outcome.ended = false;
                if g.get().is_none() {
                    g.set(latest);
                }
                return Ok(outcome);
            }
            g.set(TxEntry {
                phase: TxPhase::Committed,
                ..latest
            });
            TxCounters::add(&self.tx.counters.committed, 1);
        } else {
            g.set(TxEntry {
                phase: TxPhase::RolledBack,
                ..latest
            });
            TxCounters::add(&self.tx.counters.rolled_back, 1);
        }
        if let Err(e) = self.tx_enqueue_op(o, latest.half_queue_offset) {
            // The entry stays queued for the next round; the end itself is done.
            log::warn!(target: "rmqstore.transaction", "writing op messages failed: {e}");
        }
        drop(g);
        // The commit's force is waited for with the transaction's lock released: the commit
        // is appended, and the table says so, before any other decision can look.
        if force_wait {
            outcome.real = outcome.real.map(|r| o.commitlog.await_put_flush(r));
        }
        Ok(outcome)
    }

    /// Puts the commit of the half at `half_offset` (`endMessageTransaction`). `own`: the half
    /// was written by this process (its properties string is the map's rendering: the commit's
    /// is that string without `REAL_TOPIC` and `REAL_QID`, cut out without parsing it into a
    /// map). The second value: the SYNC_FLUSH wait the commit's WAIT asks for is still to do
    /// (`o.commitlog.await_put_flush(r)`, after releasing the transaction's lock).
    /// The half must be one of transaction `id` (a record of another at that offset, e.g.
    /// after a truncation, is `TransactionNotFound`).
    pub(crate) fn put_commit(
        &self,
        o: &Open,
        id: &str,
        half_offset: i64,
        own: bool,
    ) -> Result<(AppendResult, bool)> {
        let not_found = || {
            StoreError::TransactionNotFound(format!(
                "no transaction half message of {id} at commitlog offset {half_offset}"
            ))
        };
        let put = |d: &DecodedRecord<'_>| -> Result<(AppendResult, bool)> {
            if d.topic != HALF_TOPIC.as_bytes() {
                return Err(not_found());
            }
            let bad = || {
                StoreError::InvalidArgument(format!(
                    "the half message at commitlog offset {half_offset} has no usable \
                     REAL_TOPIC / REAL_QID: it cannot be committed"
                ))
            };
            let (topic, qid, props, scan) = if own {
                let cut = cut_real_queue(d.properties).ok_or_else(bad)?;
                if cut.3 != Some(id) {
                    return Err(not_found());
                }
                (cut.0, cut.1, cut.2, Some(cut.4))
            } else {
                let sp = StoredProps::parse(d.properties);
                if sp.transaction_id() != Some(id) {
                    return Err(not_found());
                }
                let (topic, qid) = sp.real_queue().ok_or_else(bad)?;
                (topic, qid, commit_properties(&sp), None)
            };
            let scan = scan.unwrap_or_else(|| PutScan::of(props.as_bytes()));
            let env = Message {
                topic: topic.to_owned(),
                queue_id: qid,
                flag: d.flag,
                sys_flag: with_transaction_type(d.sys_flag, sysflag::TRANSACTION_COMMIT_TYPE),
                born_timestamp: d.born_timestamp,
                born_host: Some(d.born_host),
                reconsume_times: d.reconsume_times,
                prepared_transaction_offset: half_offset,
                ..Message::default()
            };
            Ok(self.put_through_hooks(o, env, d.body, &props, scan, || {
                // The map the hooks see has TRAN_MSG cleared.
                StoredProps::parse(props.as_bytes())
                    .items
                    .iter()
                    .filter(|(k, _)| *k != property::TRAN_MSG)
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            }))
        };
        Self::tx_record_at(o, half_offset, |d| Some(put(d)))?.ok_or_else(not_found)?
    }

    /// One round of the op batch service (`batchSendOpMessage`): writes the op messages due at
    /// `now_ms` (the queued text reached `max_size`, or `interval_ms` passed since the last
    /// write; everything with `force`). Returns when the next round is due: 0 when nothing is
    /// queued, `now_ms` when a full message waits. `max_size` and `interval_ms` are also what
    /// `end_transaction` uses from now on for its own writes.
    pub fn transaction_flush_ops(
        &self,
        now_ms: i64,
        max_size: i32,
        interval_ms: i64,
        force: bool,
    ) -> Result<i64> {
        self.writable("transaction_flush_ops")?;
        if max_size <= 0 || interval_ms < 0 {
            return Err(StoreError::InvalidArgument(format!(
                "transaction_flush_ops: max_size must be above 0 and interval_ms at least 0 \
                 (got {max_size}, {interval_ms})"
            )));
        }
        self.tx.op_max_size.store(max_size, Ordering::Relaxed);
        self.tx.op_interval_ms.store(interval_ms, Ordering::Relaxed);
        self.with_open(|o| self.tx_write_ops(o, now_ms, max_size, interval_ms, force))?
    }

    /// Sets the check progress (the half and op queue offsets saved in `consumerOffset.json`;
    /// -1: the queue's minimum), each clamped to its queue's `[min, max]`; returns them.
    pub fn transaction_load(&self, half_offset: i64, op_offset: i64) -> Result<(i64, i64)> {
        self.writable("transaction_load")?;
        self.with_open(|o| {
            let clamp = |topic: &str, v: i64| {
                let (min, max) = o
                    .cqs
                    .find(topic, 0)
                    .map_or((0, 0), |cq| (cq.min_offset(), cq.max_offset()));
                let c = if v < 0 { min } else { v.clamp(min, max.max(min)) };
                if v >= 0 && c != v {
                    log::warn!(
                        target: "rmqstore.transaction",
                        "{topic}: saved offset {v} is outside its queue's [{min}, {max}]; corrected to {c}"
                    );
                }
                c
            };
            let h = clamp(HALF_TOPIC, half_offset);
            let p = clamp(OP_TOPIC, op_offset);
            self.tx.half_progress.store(h, Ordering::Release);
            self.tx.op_progress.store(p, Ordering::Release);
            (h, p)
        })
    }

    /// The check progress: (half queue offset, op queue offset).
    pub fn transaction_offsets(&self) -> Result<(i64, i64)> {
        self.with_open(|_| {
            (
                self.tx.half_progress.load(Ordering::Acquire),
                self.tx.op_progress.load(Ordering::Acquire),
            )
        })
    }

    /// The transaction figures.
    pub fn transaction_stats(&self) -> Result<TxStats> {
        self.with_open(|_| {
            let c = &self.tx.counters;
            let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            TxStats {
                prepared: n(&c.prepared),
                committed: n(&c.committed),
                rolled_back: n(&c.rolled_back),
                ops_written: n(&c.ops_written),
                op_entries_queued: self.tx.ops.queued(),
                checked: n(&c.checked),
                discarded: n(&c.discarded),
                already_committed: n(&c.already_committed),
                pending_in_memory: self.tx.table.pending(),
            }
        })
    }
}
