//! Exact progress after a crash: the copies delivered after the progress table was saved are
//! already in the commitlog; find them and move each level past their originals (see the module
//! header of [`crate::schedule`] for the argument).

use super::deliver::time_up;
use super::levels::{parse_java_int, DelayLevels};
use super::SCHEDULE_TOPIC;
use crate::commitlog::CommitLog;
use crate::format::{
    be_i32, be_i64, for_each_property, property, sysflag, view_record, HostAddr, BLANK_MAGIC_CODE,
    BORN_HOST_POSITION, SYSFLAG_POSITION,
};
use crate::queue::consume_queue::ConsumeQueue;

/// How far before the save time the scan starts: a copy appended just before the table was
/// read but whose progress was recorded just after it is found too.
pub const SCAN_SLACK_MS: i64 = 10_000;

/// Most units passed over (unreadable, half topic, bad REAL_QID: dropped by delivery anyway)
/// while looking for a level's next original.
const MAX_DROPPABLE_LOOKAHEAD: i64 = 1024;

/// What identifies a delivered copy of an original: the fields `messageTimeUp` copies.
#[derive(Debug, PartialEq, Eq)]
struct Fingerprint {
    /// The original's queue offset in its level's queue, and its commitlog offset.
    index: i64,
    phy: i64,
    topic: String,
    queue_id: i32,
    born_timestamp: i64,
    born_host: HostAddr,
    body_crc: i32,
    body_len: usize,
    flag: i32,
    uniq_key: Option<String>,
}

/// The next original of a level from `from`: the first unit that delivery would put (units it
/// would drop are passed over), `None` when there is none before the queue's end.
fn next_original(commitlog: &CommitLog, cq: &ConsumeQueue, from: i64) -> Option<Fingerprint> {
    let mut found = None;
    let mut looked = 0;
    cq.scan(from, cq.max_offset(), |u| {
        looked += 1;
        let fp = commitlog.with_unit_record(u.phy_offset, u.size, |d| {
            time_up(d).ok().map(|t| Fingerprint {
                index: u.queue_offset,
                phy: u.phy_offset,
                uniq_key: t.msg.property(property::UNIQ_KEY).map(str::to_owned),
                topic: t.msg.topic,
                queue_id: t.msg.queue_id,
                born_timestamp: d.born_timestamp,
                born_host: d.born_host,
                body_crc: d.body_crc,
                body_len: d.body.len(),
                flag: d.flag,
            })
        });
        match fp.flatten() {
            Some(f) => {
                found = Some(f);
                false
            }
            None => looked < MAX_DROPPABLE_LOOKAHEAD,
        }
    });
    found
}

/// The commitlog offset of the first record stored at or after `at_ms` (store timestamps only
/// grow along the log), found by a binary search over the segments' first records and a walk
/// of one segment; the log's end when there is none.
pub(crate) fn first_record_at_or_after(commitlog: &CommitLog, at_ms: i64) -> i64 {
    let files = commitlog.queue().files();
    let first_ts = |i: usize| -> Option<i64> {
        let f = &files[i];
        let data = f.read_from(0)?;
        record_head(data).and_then(|(_, ts)| ts)
    };
    // The last segment whose first record is stored before `at_ms`: the answer is in it or at
    // the start of the next one.
    let (mut lo, mut hi) = (0usize, files.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        match first_ts(mid) {
            Some(ts) if ts < at_ms => lo = mid + 1,
            _ => hi = mid,
        }
    }
    let end = commitlog.max_offset();
    if lo == 0 {
        return files.first().map_or(end, |f| f.file_from_offset());
    }
    let f = &files[lo - 1];
    let Some(data) = f.read_from(0) else {
        return end;
    };
    let mut pos = 0usize;
    while pos < data.len() {
        match record_head(&data[pos..]) {
            Some((size, Some(ts))) => {
                if ts >= at_ms {
                    return f.file_from_offset() + pos as i64;
                }
                pos += size;
            }
            // The blank record or the end of what is written: the next segment starts after.
            _ => break,
        }
    }
    files
        .get(lo)
        .map_or(end, |next| next.file_from_offset())
        .min(end)
}

/// TOTALSIZE and STORETIMESTAMP of the record starting `data` (`None` for the timestamp of a
/// blank record, `None` in all for what is not a record head).
fn record_head(data: &[u8]) -> Option<(usize, Option<i64>)> {
    if data.len() < 8 {
        return None;
    }
    let size = be_i32(data, 0);
    if be_i32(data, 4) == BLANK_MAGIC_CODE {
        return Some((size.max(8) as usize, None));
    }
    if size <= 0 || data.len() < SYSFLAG_POSITION + 4 {
        return None;
    }
    let sys_flag = be_i32(data, SYSFLAG_POSITION);
    let at = BORN_HOST_POSITION
        + if sys_flag & sysflag::BORNHOST_V6 != 0 {
            20
        } else {
            8
        };
    if data.len() < at + 8 {
        return None;
    }
    Some((size as usize, Some(be_i64(data, at))))
}

/// Moves each level of `progress` (index = level - 1) past the originals whose copies are in
/// the commitlog from the scan start (the first record stored at or after `persisted_at_ms`
/// minus [`SCAN_SLACK_MS`], never before the oldest pending original) to the end. Returns the
/// number of copies found for each level.
pub(crate) fn advance_past_copies(
    levels: &DelayLevels,
    commitlog: &CommitLog,
    queues: &[Option<std::sync::Arc<ConsumeQueue>>],
    progress: &mut [i64],
    persisted_at_ms: i64,
) -> Vec<u64> {
    let n = progress.len();
    let mut found = vec![0u64; n];
    let mut expected: Vec<Option<Fingerprint>> = (0..n)
        .map(|i| {
            queues[i]
                .as_deref()
                .and_then(|cq| next_original(commitlog, cq, progress[i]))
        })
        .collect();
    let Some(oldest) = expected.iter().flatten().map(|f| f.phy).min() else {
        return found;
    };
    let since = if persisted_at_ms > 0 {
        first_record_at_or_after(commitlog, persisted_at_ms.saturating_sub(SCAN_SLACK_MS))
    } else {
        0
    };
    let start = oldest.max(since).max(commitlog.min_offset().max(0));
    let end = commitlog.max_offset();
    log::info!(
        target: "rmqstore.schedule",
        "looking for delivered copies in commitlog [{start}, {end})"
    );
    for_each_record(commitlog, start, end, |phy, rec| {
        let Some(d) = view_record(rec) else {
            return;
        };
        if d.topic == SCHEDULE_TOPIC.as_bytes() {
            return;
        }
        let copy = Copy { rec, phy };
        if let Some(level) = copy.matches(levels, &expected) {
            let i = (level - 1) as usize;
            if let Some(e) = &expected[i] {
                progress[i] = e.index + 1;
            }
            found[i] += 1;
            expected[i] = queues[i]
                .as_deref()
                .and_then(|cq| next_original(commitlog, cq, progress[i]));
        }
    });
    found
}

/// Calls `f(physical offset, record)` for every message record of the commitlog from `start`
/// (a record start) to the end of what each segment holds, in order; a segment's walk stops at
/// its end-of-file blank or at bytes that are not a record. Files wholly before `start` or at
/// or past `end` are not read.
pub(crate) fn for_each_record(
    commitlog: &CommitLog,
    start: i64,
    end: i64,
    mut f: impl FnMut(i64, &[u8]),
) {
    for file in commitlog.queue().files() {
        let base = file.file_from_offset();
        if base + file.file_size() <= start || base >= end {
            continue;
        }
        let Some(data) = file.read_from(0) else {
            continue;
        };
        let mut pos = usize::try_from(start - base).unwrap_or(0);
        while pos < data.len() {
            let Some((size, Some(_))) = record_head(&data[pos..]) else {
                break;
            };
            let Some(rec) = data.get(pos..pos + size) else {
                break;
            };
            f(base + pos as i64, rec);
            pos += size;
        }
    }
}

/// A record that may be a delivered copy.
struct Copy<'a> {
    rec: &'a [u8],
    phy: i64,
}

impl Copy<'_> {
    /// The level whose next original this is a copy of, if any: a copy keeps the original's
    /// properties string (DELAY, REAL_TOPIC and REAL_QID included), body, flag, born time and
    /// host, and lands after it in its real topic and queue.
    fn matches(&self, levels: &DelayLevels, expected: &[Option<Fingerprint>]) -> Option<i32> {
        let crate::format::RecordCheck::Message(d) = crate::format::check_record(self.rec, false)
        else {
            return None;
        };
        let (mut delay, mut uniq) = (None, None);
        let (mut has_topic, mut has_qid) = (false, false);
        for_each_property(d.properties, |k, v| {
            if v.is_empty() {
                return;
            }
            match k {
                b"DELAY" => delay = Some(v),
                b"REAL_TOPIC" => has_topic = true,
                b"REAL_QID" => has_qid = true,
                b"UNIQ_KEY" => uniq = Some(v),
                _ => {}
            }
        });
        if !(has_topic && has_qid) {
            return None;
        }
        let level = std::str::from_utf8(delay?).ok().and_then(parse_java_int)?;
        let level = level.min(levels.max_level());
        if level <= 0 {
            return None;
        }
        let e = expected.get((level - 1) as usize)?.as_ref()?;
        let same = self.phy > e.phy
            && d.topic == e.topic.as_bytes()
            && d.queue_id == e.queue_id
            && d.born_timestamp == e.born_timestamp
            && d.born_host == e.born_host
            && d.body_crc == e.body_crc
            && d.body.len() == e.body_len
            && d.flag == e.flag
            && uniq == e.uniq_key.as_deref().map(str::as_bytes);
        same.then_some(level)
    }
}
