//! The pending list for operators ([`crate::MessageStore::pending_transactions`]): the
//! transactions whose halves, from the half progress on, are not resolved.
//!
//! A transaction may have several halves in the queue (the original and the check's copies);
//! it is listed once, by its latest half, in the order of its first half. It is resolved, and
//! left out, when an op message (at or after the op progress) names any of its halves or the
//! original of an immunity re-put (`TRAN_PREPARED_QUEUE_OFFSET`), or when this process's
//! table holds it as ended (committed, rolled back or discarded, op maybe still queued).

use std::collections::{HashMap, HashSet};

use super::copy::{parse_java_int, parse_java_long, HalfProps};
use crate::format::DecodedRecord;

/// One unresolved transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingTx {
    pub transaction_id: String,
    /// Commitlog offset of its latest half (the original or the check's last copy).
    pub half_offset: i64,
    pub half_queue_offset: i64,
    /// `REAL_TOPIC` / `REAL_QID` ("" / -1 when missing).
    pub topic: String,
    pub queue_id: i32,
    /// `PGROUP` ("" when missing).
    pub producer_group: String,
    pub born_timestamp: i64,
    /// Store time of its latest half.
    pub store_timestamp: i64,
    /// `TRANSACTION_CHECK_TIMES` of its latest half (0 when absent).
    pub check_times: i32,
}

/// The list being built: op bodies first, then the halves in queue order.
#[derive(Debug, Default)]
pub(crate) struct PendingList {
    /// Half queue offsets the op messages name.
    named: HashSet<i64>,
    /// Transaction id -> its entry in `entries` (by its first half).
    by_id: HashMap<String, usize>,
    entries: Vec<Option<PendingTx>>,
    resolved: HashSet<String>,
}

impl PendingList {
    /// An op message's body (`"q1,q2,...,"`).
    pub(crate) fn add_op_body(&mut self, body: &[u8]) {
        for part in body.split(|b| *b == b',') {
            if let Some(v) = std::str::from_utf8(part).ok().and_then(parse_java_long) {
                self.named.insert(v);
            }
        }
    }

    /// The half `d` at half queue offset `queue_offset`; `ended` when the table holds its
    /// transaction as ended.
    pub(crate) fn add_half(
        &mut self,
        queue_offset: i64,
        d: &DecodedRecord<'_>,
        p: &HalfProps<'_>,
        ended: bool,
    ) {
        // A half without an id is its own transaction (it cannot be ended by id).
        let id = match p.id() {
            Some(id) => id.to_owned(),
            None => format!("@{}", d.physical_offset),
        };
        let prepared_named = p
            .prepared_queue_offset
            .and_then(parse_java_long)
            .is_some_and(|v| self.named.contains(&v));
        if ended || prepared_named || self.named.contains(&queue_offset) {
            if let Some(k) = self.by_id.remove(&id) {
                self.entries[k] = None;
            }
            self.resolved.insert(id);
            return;
        }
        if self.resolved.contains(&id) {
            return;
        }
        let tx = PendingTx {
            transaction_id: id.clone(),
            half_offset: d.physical_offset,
            half_queue_offset: queue_offset,
            topic: p.real_topic.unwrap_or_default().to_owned(),
            queue_id: p.real_qid.and_then(parse_java_int).unwrap_or(-1),
            producer_group: p.producer_group.unwrap_or_default().to_owned(),
            born_timestamp: d.born_timestamp,
            store_timestamp: d.store_timestamp,
            check_times: p.check_times.and_then(parse_java_int).unwrap_or(0),
        };
        match self.by_id.get(&id) {
            Some(&k) => self.entries[k] = Some(tx),
            None => {
                self.by_id.insert(id, self.entries.len());
                self.entries.push(Some(tx));
            }
        }
    }

    /// The unresolved transactions, at most `limit`, in the order of their first halves.
    pub(crate) fn finish(self, limit: usize) -> Vec<PendingTx> {
        self.entries.into_iter().flatten().take(limit).collect()
    }
}
