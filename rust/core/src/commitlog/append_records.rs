//! Independent records of one queue laid down in one hold of the append lock.
//!
//! A put takes the append lock once per message. The transaction check re-appends every due
//! half message as a new record of the half queue (`putBackHalfMsgQueue`); each copy has its
//! own properties, born time and host, so they are not a batch in RocketMQ's sense (one
//! envelope, many bodies). [`EncodedRecords`] holds such records encoded whole outside the
//! lock, with only the three fields the lock decides left open (queue offset, physical offset,
//! store timestamp); [`CommitLog::append_encoded`] places them all in one lock hold, rolling
//! to a new segment between two records when the current one is full (an end-of-file blank
//! record closes it, as for any put), so each record lands whole in one segment.

use super::{AppendResult, CommitLog};
use crate::format::{
    check_envelope, publish_size, sysflag, write_blank, PutMessageStatus, RecordEnvelope,
    RecordTemplate, END_FILE_MIN_BLANK_LENGTH, MAX_QUEUE_OFFSET,
};
use crate::util::now_millis;

/// Where one encoded record lies in [`EncodedRecords`]'s buffer.
#[derive(Clone, Copy, Debug)]
struct Slot {
    start: usize,
    len: usize,
    /// Offset of STORETIMESTAMP in the record (after a 4- or 16-byte born host).
    store_ts_pos: usize,
}

/// Records of one topic and queue, encoded outside the append lock (see the module header).
#[derive(Debug)]
pub(crate) struct EncodedRecords {
    topic: String,
    queue_id: i32,
    /// Whether the records take queue offsets (transaction type NOT or COMMIT), the same for
    /// all of them.
    consumes_offsets: bool,
    buf: Vec<u8>,
    slots: Vec<Slot>,
}

/// What [`CommitLog::append_encoded`] placed: `(commitlog offset, queue offset)` of each record
/// in order, and the status of the first one that could not be placed (`PutOk` when all were).
#[derive(Debug)]
pub(crate) struct Placed {
    pub status: PutMessageStatus,
    pub records: Vec<(i64, i64)>,
    pub store_timestamp: i64,
}

impl EncodedRecords {
    /// An empty set for records of `topic`/`queue_id` whose transaction type is `NOT` or
    /// `COMMIT` (`consumes_offsets`) or `PREPARED`/`ROLLBACK`.
    pub(crate) fn new(topic: &str, queue_id: i32, consumes_offsets: bool) -> EncodedRecords {
        EncodedRecords {
            topic: topic.to_owned(),
            queue_id,
            consumes_offsets,
            buf: Vec::new(),
            slots: Vec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.slots.clear();
    }
}

impl CommitLog {
    /// Encodes one record into `out` as a put of `env` (whose topic and queue must be `out`'s)
    /// with `props` as its properties string and `body` as stored: the checks a put makes
    /// (topic, queue, properties length, body and record size) give the status that refuses
    /// it, and nothing is added then.
    pub(crate) fn encode_record(
        &self,
        out: &mut EncodedRecords,
        env: &RecordEnvelope<'_>,
        props: &str,
        body: &[u8],
    ) -> Result<(), PutMessageStatus> {
        if env.topic != out.topic || env.queue_id != out.queue_id {
            return Err(PutMessageStatus::MessageIllegal);
        }
        let tx = sysflag::transaction_value(env.sys_flag);
        let consumes = matches!(
            tx,
            sysflag::TRANSACTION_NOT_TYPE | sysflag::TRANSACTION_COMMIT_TYPE
        );
        if consumes != out.consumes_offsets {
            return Err(PutMessageStatus::MessageIllegal);
        }
        check_envelope(env, props)?;
        let template = RecordTemplate::new(env, props);
        let prepared = template.prepare(body, &self.limits)?;
        let start = out.buf.len();
        let len = prepared.total_len as usize;
        out.buf.resize(start + len, 0);
        template.write_record(&mut out.buf[start..], &prepared, 0, 0, 0, true);
        out.slots.push(Slot {
            start,
            len,
            store_ts_pos: crate::format::BORN_HOST_POSITION
                + if env.born_host.is_v6() { 20 } else { 8 },
        });
        Ok(())
    }

    /// Appends the records of `recs` in order in one hold of the append lock (see the module
    /// header), then, in SYNC_FLUSH mode, waits once for all of them to be forced. Records
    /// after one that cannot be placed (no new segment, queue offsets exhausted) are not
    /// written; [`Placed::status`] says why.
    pub(crate) fn append_encoded(&self, recs: &EncodedRecords) -> Placed {
        let mut placed = Placed {
            status: PutMessageStatus::PutOk,
            records: Vec::with_capacity(recs.len()),
            store_timestamp: 0,
        };
        if recs.is_empty() {
            return placed;
        }
        if let Err(s) = self.admission() {
            placed.status = s;
            return placed;
        }
        let n = recs.slots.len();
        let mut st = self.lock_put();
        let store_ts = now_millis().max(st.last_store_ts);
        let mut queue_offset = if recs.consumes_offsets {
            st.next_queue_offset(&recs.topic, recs.queue_id)
        } else {
            0
        };
        if recs.consumes_offsets && queue_offset > MAX_QUEUE_OFFSET + 1 - n as i64 {
            self.unlock_put(st);
            log::error!(
                target: "rmqstore.commitlog",
                "queue {}/{} is at queue offset {queue_offset}: {n} more messages would pass \
                 the largest queue offset ({MAX_QUEUE_OFFSET})",
                recs.topic,
                recs.queue_id,
            );
            placed.status = PutMessageStatus::UnknownError;
            return placed;
        }
        let blank = i64::from(END_FILE_MIN_BLANK_LENGTH);
        let mut i = 0;
        let mut last_file = None;
        while i < n {
            let file = match self.queue.last() {
                Some(f) if !f.is_full() => f,
                _ => match self.new_segment() {
                    Ok(f) => f,
                    Err(s) => {
                        placed.status = s;
                        break;
                    }
                },
            };
            let free = file.file_size() - file.wrote_position();
            // The records from i that fit before the segment's end, leaving room for a blank.
            let mut j = i;
            let mut bytes: i64 = 0;
            while j < n && bytes + recs.slots[j].len as i64 + blank <= free {
                bytes += recs.slots[j].len as i64;
                j += 1;
            }
            if j == i {
                if file.wrote_position() == 0 {
                    // A record larger than a whole segment (encode_record's limits rule it out).
                    placed.status = PutMessageStatus::MessageIllegal;
                    break;
                }
                // END_OF_FILE: an 8-byte blank record claims the rest of the segment.
                // SAFETY: the append lock is held.
                unsafe { file.append_with(free, |b| write_blank(b, free as i32)) };
                self.allocator.schedule_munlock(file.clone());
                continue;
            }
            let base = file.file_from_offset() + file.wrote_position();
            let from = recs.slots[i].start;
            // SAFETY: the append lock is held.
            let wrote = unsafe {
                file.append_with(bytes, |dst| {
                    // Each record whole before its size (publish_size): a kill in the middle
                    // leaves the records before it and none of its own bytes readable.
                    let mut phy = base;
                    for (k, slot) in recs.slots[i..j].iter().enumerate() {
                        let at = slot.start - from;
                        let rec = &mut dst[at..at + slot.len];
                        let src = &recs.buf[slot.start..slot.start + slot.len];
                        rec[..4].fill(0);
                        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
                        rec[4..].copy_from_slice(&src[4..]);
                        let qo = if recs.consumes_offsets {
                            queue_offset + k as i64
                        } else {
                            0
                        };
                        write_i64(rec, crate::format::QUEUE_OFFSET_POSITION, qo);
                        write_i64(rec, crate::format::PHYSICAL_OFFSET_POSITION, phy);
                        write_i64(rec, slot.store_ts_pos, store_ts);
                        publish_size(rec, slot.len as i32);
                        phy += slot.len as i64;
                    }
                })
            };
            debug_assert!(wrote.is_some());
            let mut phy = base;
            for (k, slot) in recs.slots[i..j].iter().enumerate() {
                let qo = if recs.consumes_offsets {
                    queue_offset + k as i64
                } else {
                    0
                };
                placed.records.push((phy, qo));
                phy += slot.len as i64;
            }
            if recs.consumes_offsets {
                queue_offset += (j - i) as i64;
            }
            last_file = Some(file);
            i = j;
        }
        if let Some(file) = &last_file {
            file.set_store_timestamp(store_ts);
            st.last_store_ts = store_ts;
            if recs.consumes_offsets {
                st.set_queue_offset(&recs.topic, recs.queue_id, queue_offset);
            }
        }
        self.unlock_put(st);
        placed.store_timestamp = store_ts;
        if let (Some(first), Some(last)) = (placed.records.first(), placed.records.last()) {
            let last_len = recs.slots[placed.records.len() - 1].len as i64;
            // One wait (SYNC_FLUSH) or commit request (write buffers) for all of them.
            let r = AppendResult {
                status: PutMessageStatus::PutOk,
                wrote_offset: first.0,
                wrote_bytes: last.0 + last_len - first.0,
                queue_offset: first.1,
                store_timestamp: store_ts,
                record_sizes: Default::default(),
            };
            let r = self.handle_disk_flush(r, None);
            if r.status != PutMessageStatus::PutOk && placed.status == PutMessageStatus::PutOk {
                placed.status = r.status;
            }
        }
        placed
    }
}

fn write_i64(rec: &mut [u8], at: usize, v: i64) {
    rec[at..at + 8].copy_from_slice(&v.to_be_bytes());
}
