//! The state of a transaction read from the records, for one this process does not know:
//! its commit (by index or by a consume queue scan) and its op entries.

use crate::commitlog::CommitLog;
use crate::format::{find_property, property, sysflag, DecodedRecord};
use crate::index::IndexService;
use crate::queue::consume_queue::ConsumeQueue;

/// Whether `d` is a commit of transaction `id` in `real_topic`: transaction type COMMIT,
/// a `preparedTransactionOffset` (0 included: the first half of a store is at offset 0) and
/// `UNIQ_KEY` = `id`.
pub(crate) fn is_commit_of(d: &DecodedRecord<'_>, id: &str, real_topic: &str) -> bool {
    d.topic == real_topic.as_bytes()
        && sysflag::transaction_value(d.sys_flag) == sysflag::TRANSACTION_COMMIT_TYPE
        && d.prepared_transaction_offset >= 0
        && std::str::from_utf8(d.properties)
            .ok()
            .and_then(|p| find_property(p, property::UNIQ_KEY))
            == Some(id)
}

/// What the index says of a commit of the id.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum IndexAnswer {
    Found(i64),
    NotFound,
    /// The query filled its batch (`max_msgs_num_batch` key-hash matches, newest first)
    /// without the commit: older candidates were not looked at.
    Truncated,
}

/// Candidates the index gives for the id (key-hash matches), each record read and checked.
pub(crate) fn commit_by_index(
    commitlog: &CommitLog,
    index: &IndexService,
    id: &str,
    real_topic: &str,
) -> IndexAnswer {
    let q = index.query_offset(real_topic, id, usize::MAX, 0, i64::MAX);
    let found = q.phy_offsets.iter().copied().find(|&off| {
        matches!(
            commitlog.with_record(off, |_, d, _| is_commit_of(d, id, real_topic)),
            Ok(Some(true))
        )
    });
    match found {
        Some(off) => IndexAnswer::Found(off),
        None if q.phy_offsets.len() >= index.max_msgs_num_batch() => IndexAnswer::Truncated,
        None => IndexAnswer::NotFound,
    }
}

/// The first unit of `cq` whose record lies after `half_offset` (units are in commitlog order).
pub(crate) fn first_unit_after(cq: &ConsumeQueue, half_offset: i64) -> i64 {
    let (mut lo, mut hi) = (cq.min_offset(), cq.max_offset());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match cq.get(mid) {
            Some(u) if u.phy_offset <= half_offset => lo = mid + 1,
            Some(_) => hi = mid,
            // A unit that cannot be read (removed under us): search above it.
            None => lo = mid + 1,
        }
    }
    lo
}

/// A scan of the real queue from the first unit past the half (the index is off).
pub(crate) fn commit_by_scan(
    commitlog: &CommitLog,
    cq: &ConsumeQueue,
    id: &str,
    real_topic: &str,
    half_offset: i64,
) -> Option<i64> {
    let from = first_unit_after(cq, half_offset);
    let mut found = None;
    cq.scan(from, cq.max_offset(), |u| {
        if commitlog.with_unit_record(u.phy_offset, u.size, |d| is_commit_of(d, id, real_topic))
            == Some(true)
        {
            found = Some(u.phy_offset);
            return false;
        }
        true
    });
    found
}

/// Calls `f` with every half queue offset the op messages of `cq` name, from queue offset
/// `from` to the end (records tagged `d`, bodies `"q1,q2,...,"`); stops when `f` returns true.
/// Returns whether it stopped so.
pub(crate) fn scan_ops(
    commitlog: &CommitLog,
    cq: &ConsumeQueue,
    from: i64,
    mut f: impl FnMut(i64) -> bool,
) -> bool {
    let mut hit = false;
    cq.scan(from, cq.max_offset(), |u| {
        commitlog.with_unit_record(u.phy_offset, u.size, |d| {
            let tagged = std::str::from_utf8(d.properties)
                .ok()
                .and_then(|p| find_property(p, property::TAGS))
                == Some(super::REMOVE_TAG);
            if !tagged {
                return;
            }
            for part in d.body.split(|&b| b == b',') {
                let Some(v) = std::str::from_utf8(part)
                    .ok()
                    .and_then(|s| s.trim().parse::<i64>().ok())
                else {
                    continue;
                };
                if f(v) {
                    hit = true;
                    return;
                }
            }
        });
        !hit
    });
    hit
}
