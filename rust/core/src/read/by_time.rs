//! `getOffsetInQueueByTime`: the queue offset of a store time, with a LOWER or UPPER
//! boundary (docs/architecture.md#queue-lookups-and-offsets-by-time).

use crate::commitlog::CommitLog;
use crate::queue::consume_queue::ConsumeQueue;

/// Which side of an exact or missing timestamp `offset_by_time` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeBoundary {
    Lower,
    Upper,
}

/// `getOffsetInQueueByTime`: LOWER gives the first unit stored at or after `timestamp` (the
/// queue's max offset when none is), UPPER the last unit stored at or before it. Store times
/// grow with commitlog offsets, so a binary search over the queue holds. Units whose records are
/// gone count as older than anything. The answer is clamped to `[min, max]`.
pub(crate) fn offset_by_time(
    commitlog: &CommitLog,
    cq: &ConsumeQueue,
    timestamp: i64,
    boundary: TimeBoundary,
) -> i64 {
    let min = cq.min_offset();
    let max = cq.max_offset();
    if min >= max {
        return min.max(0).min(max);
    }
    let ts_at = |i: i64| -> i64 {
        match cq.get(i) {
            Some(u) if !u.is_pre_blank() => commitlog.store_timestamp_at(u.phy_offset, u.size),
            _ => -1,
        }
    };
    // First index whose time is >= timestamp (LOWER), or > timestamp (for UPPER, minus one).
    let first_at_or_after = |strict: bool| -> i64 {
        let (mut lo, mut hi) = (min, max);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let t = ts_at(mid);
            let before = if strict {
                t <= timestamp
            } else {
                t < timestamp
            };
            if before {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    let r = match boundary {
        TimeBoundary::Lower => first_at_or_after(false),
        TimeBoundary::Upper => first_at_or_after(true) - 1,
    };
    r.clamp(min, max)
}
