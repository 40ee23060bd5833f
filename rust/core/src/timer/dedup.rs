//! Exact delivery after a crash (see the module header of [`crate::timer`] for the argument):
//! what the engine did after its last checkpoint is found again at open, so that re-walking
//! the timer queue and the wheel from the checkpoint does not do it twice.
//!
//! - [`logged_since`]: the commitlog offsets of the timer messages the timer log holds a unit
//!   for at or after the enqueue's resume point (the enqueue passes over them instead of
//!   linking them into the wheel a second time).
//! - [`scan_copies`]: the copies the timer put (to their real topic, or back into the timer
//!   topic when rolled) stored from a given time on, each reduced to a [`CopyKey`]; the
//!   enqueue (for messages delivered at enqueue) and the dequeue (for slots up to the latest
//!   one delivered) pass over an original whose copy is among them.

use std::collections::{HashMap, HashSet};

use crate::commitlog::CommitLog;
use crate::format::timer::{is_magic_ok, TIMER_LOG_BLANK_MAGIC, UNIT_SIZE};
use crate::format::{
    be_i32, be_i64, check_record, for_each_property, HostAddr, Message, RecordCheck,
};
use crate::schedule::recover::{first_record_at_or_after, for_each_record};

use super::log::TimerLog;
use super::TIMER_TOPIC;

/// How far before the scan's reference time the copy scan starts: a copy is stored at or after
/// the slot time it was delivered for (the write time follows the clock), so only a clock that
/// stepped back or a put that read the clock late needs the margin.
pub(crate) const COPY_SCAN_SLACK_MS: i64 = 10_000;

/// The TIMER_ENQUEUE_MS of a copy put at enqueue, the message due already
/// (`TimerMessageStore.enqueue` builds its request with `Long.MAX_VALUE`).
pub(crate) const DIRECT_ENQUEUE_MS: i64 = i64::MAX;

/// What ties a copy to its original: every field `convertMessage` copies or sets that does not
/// depend on the moment of the put (TIMER_DEQUEUE_MS, the store time and offsets do). The
/// TIMER_ENQUEUE_MS is the write time of the wheel unit the copy came from, so two units of one
/// message are told apart; two originals share a key only if they carry the same topic, queue,
/// body, flag, born time and host, UNIQ_KEY and deliver time, i.e. are the same message.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CopyKey {
    topic: Box<[u8]>,
    queue_id: i32,
    born_timestamp: i64,
    born_host: HostAddr,
    body_crc: i32,
    body_len: usize,
    flag: i32,
    out_ms: Box<[u8]>,
    enqueue_ms: Box<[u8]>,
    uniq_key: Option<Box<[u8]>>,
    roll_times: Option<Box<[u8]>>,
}

/// The properties a key uses (last value of a name wins, as Java's map).
#[derive(Default)]
struct KeyProps<'a> {
    out_ms: Option<&'a [u8]>,
    enqueue_ms: Option<&'a [u8]>,
    dequeue_ms: Option<&'a [u8]>,
    uniq_key: Option<&'a [u8]>,
    roll_times: Option<&'a [u8]>,
}

impl<'a> KeyProps<'a> {
    fn take(&mut self, k: &'a [u8], v: &'a [u8]) {
        let slot = match k {
            b"TIMER_OUT_MS" => &mut self.out_ms,
            b"TIMER_ENQUEUE_MS" => &mut self.enqueue_ms,
            b"TIMER_DEQUEUE_MS" => &mut self.dequeue_ms,
            b"UNIQ_KEY" => &mut self.uniq_key,
            b"TIMER_ROLL_TIMES" => &mut self.roll_times,
            _ => return,
        };
        *slot = Some(v);
    }
}

impl CopyKey {
    /// The key of the copy `out` (built by delivery, not yet put, its properties as the hooks
    /// see them) will be, `body_crc` and `body_len` the BODYCRC and length of its body.
    pub(crate) fn of_put(out: &Message, body_crc: i32, body_len: usize) -> Option<CopyKey> {
        let mut p = KeyProps::default();
        for (k, v) in &out.properties {
            p.take(k.as_bytes(), v.as_bytes());
        }
        Some(CopyKey {
            topic: out.topic.as_bytes().into(),
            queue_id: out.queue_id,
            born_timestamp: out.born_timestamp,
            born_host: out.born_host?,
            body_crc,
            body_len,
            flag: out.flag,
            out_ms: p.out_ms?.into(),
            enqueue_ms: p.enqueue_ms?.into(),
            uniq_key: p.uniq_key.map(Into::into),
            roll_times: p.roll_times.map(Into::into),
        })
    }
}

/// The copies found by [`scan_copies`], counted by key.
#[derive(Debug, Default)]
pub(crate) struct Copies {
    /// Copies put at enqueue (TIMER_ENQUEUE_MS is `Long.MAX_VALUE`).
    pub direct: HashMap<CopyKey, u32>,
    /// Copies put by the dequeue of a slot at or after the scan's first slot.
    pub wheel: HashMap<CopyKey, u32>,
    /// The latest slot time a wheel copy may come from (-1 without one).
    pub last_slot_ms: i64,
}

/// Takes one copy of `key` out of `copies`: whether there was one.
pub(crate) fn take(copies: &mut HashMap<CopyKey, u32>, key: &CopyKey) -> bool {
    match copies.get_mut(key) {
        Some(n) if *n > 1 => {
            *n -= 1;
            true
        }
        Some(_) => {
            copies.remove(key);
            true
        }
        None => false,
    }
}

/// Finds the copies the timer stored from `since_ms` on (the first record stored at or after
/// it): records carrying TIMER_OUT_MS, TIMER_ENQUEUE_MS and TIMER_DEQUEUE_MS, in their real
/// topic or (rolled, with TIMER_ROLL_TIMES) in the timer topic. Wheel copies of slots before
/// `first_slot_ms` are left out (those slots are never walked again); `format_time` rounds a
/// time to its slot, `roll_span_ms` is how far past its unit's write time a rolled unit's slot
/// lies at most.
pub(crate) fn scan_copies(
    commitlog: &CommitLog,
    since_ms: i64,
    first_slot_ms: i64,
    roll_span_ms: i64,
    format_time: impl Fn(i64) -> i64,
) -> Copies {
    let mut copies = Copies {
        last_slot_ms: -1,
        ..Copies::default()
    };
    let start = first_record_at_or_after(commitlog, since_ms.max(0)).max(commitlog.min_offset());
    let end = commitlog.max_offset();
    for_each_record(commitlog, start, end, |_, rec| {
        let RecordCheck::Message(d) = check_record(rec, false) else {
            return;
        };
        let mut p = KeyProps::default();
        for_each_property(d.properties, |k, v| p.take(k, v));
        let (Some(out_ms), Some(enqueue_ms), Some(_)) = (p.out_ms, p.enqueue_ms, p.dequeue_ms)
        else {
            return;
        };
        let roll = d.topic == TIMER_TOPIC.as_bytes();
        if roll && p.roll_times.is_none() {
            return;
        }
        let parse = |v: &[u8]| std::str::from_utf8(v).ok()?.parse::<i64>().ok();
        let (Some(out), Some(enq)) = (parse(out_ms), parse(enqueue_ms)) else {
            return;
        };
        let key = CopyKey {
            topic: d.topic.into(),
            queue_id: d.queue_id,
            born_timestamp: d.born_timestamp,
            born_host: d.born_host,
            body_crc: d.body_crc,
            body_len: d.body.len(),
            flag: d.flag,
            out_ms: out_ms.into(),
            enqueue_ms: enqueue_ms.into(),
            uniq_key: p.uniq_key.map(Into::into),
            roll_times: p.roll_times.map(Into::into),
        };
        if enq == DIRECT_ENQUEUE_MS {
            *copies.direct.entry(key).or_insert(0) += 1;
            return;
        }
        // The slot the unit was in: the deliver time's, or for a rolled unit at most the
        // roll span past its write time.
        let slot = if roll {
            format_time(enq.saturating_add(roll_span_ms))
        } else {
            format_time(out)
        };
        if slot < first_slot_ms {
            return;
        }
        copies.last_slot_ms = copies.last_slot_ms.max(slot);
        *copies.wheel.entry(key).or_insert(0) += 1;
    });
    copies
}

/// The commitlog offsets the timer log's units point at, from its end back to the first unit
/// pointing before `from_phy` (units are appended in timer queue order, so their message
/// offsets grow along the log); at most `max_units` units are read.
pub(crate) fn logged_since(log: &TimerLog, from_phy: i64, max_units: u64) -> HashSet<i64> {
    let mut set = HashSet::new();
    let mut read = 0u64;
    let unit = UNIT_SIZE as usize;
    for f in log.queue().files().iter().rev() {
        let Some(data) = f.read_from(0) else {
            continue;
        };
        let limit = usize::try_from(f.read_position())
            .unwrap_or(0)
            .min(data.len());
        let mut offsets = Vec::new();
        let mut position = 0usize;
        while position + unit <= limit {
            let b = &data[position..];
            let magic = be_i32(b, 12);
            if magic == TIMER_LOG_BLANK_MAGIC
                || i64::from(be_i32(b, 0)) != UNIT_SIZE
                || !is_magic_ok(magic)
            {
                break;
            }
            offsets.push(be_i64(b, 28));
            position += unit;
        }
        for offset_py in offsets.into_iter().rev() {
            read += 1;
            if offset_py < from_phy || read > max_units {
                return set;
            }
            set.insert(offset_py);
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_since_reads_the_log_back_across_segments_to_the_resume_point() {
        let d = std::env::temp_dir().join(format!("rmqstore-timerdedup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let log = TimerLog::load(&d, 1024).unwrap();
        let mut unit = crate::timer::log::test_unit(100);
        // 50 units (19 a segment, a filler closing each full one), messages 100 bytes apart.
        for i in 0..50 {
            unit.offset_py = 100 * i;
            // SAFETY: the only appender of a log nothing else reads.
            unsafe { log.append(&unit.encode()) }.unwrap();
        }
        assert_eq!(log.queue().files().len(), 3);
        let want = |from: i64| (from..50).map(|i| 100 * i).collect::<HashSet<i64>>();
        assert_eq!(logged_since(&log, 100 * 45, 1000), want(45));
        // Back over two fillers into the first segment.
        assert_eq!(logged_since(&log, 100 * 10, 1000), want(10));
        assert_eq!(logged_since(&log, 0, 1000), want(0));
        assert!(logged_since(&log, 100 * 50, 1000).is_empty());
        // At most `max_units` units are read.
        assert_eq!(logged_since(&log, 0, 5), want(45));
        drop(log);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn copies_are_counted_and_taken_one_at_a_time() {
        let out = Message {
            topic: "T".into(),
            body: b"b".to_vec(),
            born_host: Some(HostAddr::V4 {
                ip: [127, 0, 0, 1],
                port: 1,
            }),
            properties: vec![
                ("TIMER_OUT_MS".into(), "1000".into()),
                ("TIMER_ENQUEUE_MS".into(), "900".into()),
                ("TIMER_DEQUEUE_MS".into(), "1001".into()),
            ],
            ..Message::default()
        };
        let key = CopyKey::of_put(&out, 7, out.body.len()).unwrap();
        // Another unit of the same message (another write time) is another key.
        let mut other = out.clone();
        other.properties[1].1 = "800".into();
        let other = CopyKey::of_put(&other, 7, other.body.len()).unwrap();
        assert_ne!(key, other);
        let mut copies = HashMap::new();
        copies.insert(key.clone(), 2);
        assert!(!take(&mut copies, &other));
        assert!(take(&mut copies, &key));
        assert!(take(&mut copies, &key));
        assert!(!take(&mut copies, &key));
        assert!(copies.is_empty());
        // No TIMER_ENQUEUE_MS: not a copy the timer puts.
        let mut bare = out;
        bare.properties.remove(1);
        assert!(CopyKey::of_put(&bare, 7, bare.body.len()).is_none());
    }
}
