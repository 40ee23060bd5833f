//! The put path: a message or batch checked, encoded and appended under the append lock
//! (`asyncPutMessage`, `asyncPutMessages`, `DefaultAppendMessageCallback`), rolling to a new
//! segment behind an end-of-file blank record, and the topic-queue offset table it numbers
//! messages with.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, MutexGuard};

use super::queue_offsets::QueueOffsets;
use super::CommitLog;
use crate::file::mapped_file::MappedFile;
use crate::format::MAX_QUEUE_OFFSET;
use crate::format::{
    check_envelope, publish_size, render_properties, sysflag, write_blank, HostAddr, Message,
    PreparedBody, PutMessageStatus, RecordEnvelope, RecordTemplate, END_FILE_MIN_BLANK_LENGTH,
};
use crate::util::now_millis;

/// The outcome of a put: RocketMQ's `PutMessageResult` + `AppendMessageResult`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendResult {
    pub status: PutMessageStatus,
    /// Commitlog offset of the first record (-1 when nothing was written).
    pub wrote_offset: i64,
    /// Bytes of all records written.
    pub wrote_bytes: i64,
    /// Queue offset of the first record.
    pub queue_offset: i64,
    pub store_timestamp: i64,
    /// Size of each record, in order (one entry for a single put).
    pub record_sizes: RecordSizes,
}

/// The size of each record a put wrote, in order: a slice of `i32`. The one size of a single
/// put is kept inline, so a put allocates nothing for its result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordSizes(Sizes);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Sizes {
    #[default]
    None,
    One(i32),
    Many(Vec<i32>),
}

impl RecordSizes {
    /// The size of the one record of a single put.
    pub fn one(size: i32) -> RecordSizes {
        RecordSizes(Sizes::One(size))
    }
}

impl From<Vec<i32>> for RecordSizes {
    fn from(v: Vec<i32>) -> RecordSizes {
        RecordSizes(match v.len() {
            0 => Sizes::None,
            1 => Sizes::One(v[0]),
            _ => Sizes::Many(v),
        })
    }
}

impl Deref for RecordSizes {
    type Target = [i32];

    fn deref(&self) -> &[i32] {
        match &self.0 {
            Sizes::None => &[],
            Sizes::One(size) => std::slice::from_ref(size),
            Sizes::Many(v) => v,
        }
    }
}

impl<'a> IntoIterator for &'a RecordSizes {
    type Item = &'a i32;
    type IntoIter = std::slice::Iter<'a, i32>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl AppendResult {
    pub(crate) fn failed(status: PutMessageStatus) -> AppendResult {
        AppendResult {
            status,
            wrote_offset: -1,
            wrote_bytes: 0,
            queue_offset: -1,
            store_timestamp: 0,
            record_sizes: RecordSizes::default(),
        }
    }

    /// `isOk`: the message was appended (a FLUSH_DISK_TIMEOUT put is stored, only not yet
    /// known to be forced).
    pub fn is_ok(&self) -> bool {
        matches!(
            self.status,
            PutMessageStatus::PutOk | PutMessageStatus::FlushDiskTimeout
        )
    }

    pub fn msg_num(&self) -> usize {
        self.record_sizes.len()
    }

    /// Commitlog offset of every record.
    pub fn record_offsets(&self) -> impl Iterator<Item = i64> + '_ {
        self.record_sizes
            .iter()
            .scan(self.wrote_offset, |at, &size| {
                let here = *at;
                *at += i64::from(size);
                Some(here)
            })
    }
}

/// A batch of bodies that share topic, queue, properties and the rest of the envelope.
#[derive(Debug)]
pub struct Batch<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub bodies: &'a [&'a [u8]],
    pub properties: &'a [(String, String)],
    pub flag: i32,
    pub born_timestamp: i64,
    pub born_host: Option<HostAddr>,
}

#[derive(Default)]
pub(super) struct PutState {
    /// topic -> queue id -> next queue offset (`topicQueueTable`), with the last put's queue
    /// cached in front of it.
    pub(super) queue_offsets: QueueOffsets,
    /// Store timestamps never go backwards, even if the wall clock does.
    pub(super) last_store_ts: i64,
}

impl PutState {
    pub(super) fn next_queue_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.queue_offsets.get(topic, queue_id)
    }

    pub(super) fn set_queue_offset(&mut self, topic: &str, queue_id: i32, next: i64) {
        self.queue_offsets.set(topic, queue_id, next);
    }

    /// Raises the next queue offset to `next` if it is lower (recovery and its merges).
    pub(super) fn raise_queue_offset(&mut self, topic: &str, queue_id: i32, next: i64) {
        self.queue_offsets.raise(topic, queue_id, next);
    }
}

impl CommitLog {
    /// `removeQueueFromTopicQueueTable`: the next put to `topic`/`queue_id` gets queue offset
    /// 0 (the queue was deleted).
    pub(crate) fn remove_queue_offset(&self, topic: &str, queue_id: i32) {
        let mut st = self.put.lock().unwrap_or_else(|p| p.into_inner());
        st.queue_offsets.remove(topic, queue_id);
    }

    /// Takes the append lock and reads the clock once: the time is both when the lock was
    /// taken (`beginTimeInLock`, for [`CommitLog::is_os_page_cache_busy`]) and the store
    /// timestamp's candidate, as `CommitLog.asyncPutMessage` uses one `now()` for both.
    pub(super) fn lock_put(&self) -> PutLock<'_> {
        let guard = self.put.lock().unwrap_or_else(|p| p.into_inner());
        let now = now_millis();
        self.begin_time_in_lock.store(now, Ordering::Release);
        PutLock {
            guard,
            begin_time_in_lock: &self.begin_time_in_lock,
            now,
        }
    }

    pub(super) fn unlock_put(&self, g: PutLock<'_>) {
        drop(g);
    }

    /// How long the append lock has been held, 0 when free (`lockTimeMills`).
    pub(crate) fn lock_time_millis(&self) -> i64 {
        let begin = self.begin_time_in_lock.load(Ordering::Acquire);
        if begin == 0 {
            0
        } else {
            (now_millis() - begin).max(0)
        }
    }

    fn envelope<'a>(
        &self,
        topic: &'a str,
        queue_id: i32,
        flag: i32,
        sys_flag: i32,
        born_timestamp: i64,
        born_host: Option<HostAddr>,
    ) -> RecordEnvelope<'a> {
        RecordEnvelope {
            topic,
            queue_id,
            flag,
            sys_flag,
            born_timestamp,
            born_host: born_host.unwrap_or(self.store_host),
            store_host: self.store_host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        }
    }

    /// The checks RocketMQ's put hook makes before encoding: running flags that stop writes (a
    /// full disk, ...) refuse them, and a writer stuck in the append lock makes others back off.
    pub(super) fn admission(&self) -> Result<(), PutMessageStatus> {
        if !self.flags.is_writeable() {
            return Err(PutMessageStatus::ServiceNotAvailable);
        }
        if self.is_os_page_cache_busy() {
            return Err(PutMessageStatus::OsPageCacheBusy);
        }
        Ok(())
    }

    /// `isOSPageCacheBusy`: the append lock has been held longer than the busy timeout.
    pub(crate) fn is_os_page_cache_busy(&self) -> bool {
        let held = self.lock_time_millis();
        held > self.busy_timeout_ms && held < 10_000_000
    }

    /// Appends one message (`asyncPutMessage`); in SYNC_FLUSH mode it then waits for the force
    /// (`handleDiskFlush`). There is no HA wait: replication is not built yet. The properties
    /// are rendered straight into the record's template (no string of their own).
    pub(crate) fn put_message(&self, msg: &Message) -> AppendResult {
        if let Err(s) = self.admission() {
            return AppendResult::failed(s);
        }
        let env = self.message_envelope(msg);
        // Checked first, then built in place: the template is not moved out of a `Result`.
        let len = match RecordTemplate::check_properties(&env, &msg.properties) {
            Ok(len) => len,
            Err(s) => return AppendResult::failed(s),
        };
        let template = RecordTemplate::with_checked_properties(&env, &msg.properties, len);
        self.append_one(
            &template,
            &msg.body,
            msg.property(crate::format::property::WAIT),
        )
    }

    /// Appends `msg` with `body` (not `msg.body`) and `props` as its stored properties string
    /// (already a valid one) instead of one rendered from `msg.properties`; `wait` is the WAIT
    /// value the flush honours. The schedule service's re-put writes the body and properties
    /// string RocketMQ's `messageTimeUp` keeps, copied from the original record.
    pub(crate) fn put_message_as(
        &self,
        msg: &Message,
        body: &[u8],
        props: &str,
        wait: Option<&str>,
    ) -> AppendResult {
        if let Err(s) = self.admission() {
            return AppendResult::failed(s);
        }
        let env = self.message_envelope(msg);
        if let Err(s) = check_envelope(&env, props) {
            return AppendResult::failed(s);
        }
        self.append_one(&RecordTemplate::new(&env, props), body, wait)
    }

    /// The envelope of a single message's record.
    fn message_envelope<'m>(&self, msg: &'m Message) -> RecordEnvelope<'m> {
        let mut env = self.envelope(
            &msg.topic,
            msg.queue_id,
            msg.flag,
            msg.sys_flag,
            msg.born_timestamp,
            msg.born_host,
        );
        env.reconsume_times = msg.reconsume_times;
        env.prepared_transaction_offset = msg.prepared_transaction_offset;
        env
    }

    /// Appends one record of `template` with `body` and waits as `handleDiskFlush` does.
    fn append_one(
        &self,
        template: &RecordTemplate<'_>,
        body: &[u8],
        wait: Option<&str>,
    ) -> AppendResult {
        match template.prepare(body, &self.limits) {
            Ok(body) => {
                let r = self.append(template, std::slice::from_ref(&body));
                self.handle_disk_flush(r, wait)
            }
            Err(s) => AppendResult::failed(s),
        }
    }

    /// Appends a batch as contiguous records in one segment with one store timestamp
    /// (`asyncPutMessages`).
    pub(crate) fn put_messages(&self, batch: &Batch<'_>) -> AppendResult {
        if let Err(s) = self.admission() {
            return AppendResult::failed(s);
        }
        if batch.bodies.is_empty() {
            return AppendResult::failed(PutMessageStatus::MessageIllegal);
        }
        let props = match render_properties(
            batch
                .properties
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        ) {
            Ok(p) => p,
            Err(s) => return AppendResult::failed(s),
        };
        let env = self.envelope(
            batch.topic,
            batch.queue_id,
            batch.flag,
            0,
            batch.born_timestamp,
            batch.born_host,
        );
        if let Err(s) = check_envelope(&env, &props) {
            return AppendResult::failed(s);
        }
        let template = RecordTemplate::new(&env, &props);
        let mut prepared = Vec::with_capacity(batch.bodies.len());
        let mut total: i64 = 0;
        for body in batch.bodies {
            match template.prepare(body, &self.limits) {
                Ok(p) => {
                    total += i64::from(p.total_len);
                    prepared.push(p);
                }
                Err(s) => return AppendResult::failed(s),
            }
        }
        if total > self.limits.max_record_in_segment {
            // A batch lands whole in one segment, so it cannot be larger than one.
            return AppendResult::failed(PutMessageStatus::MessageIllegal);
        }
        let r = self.append(&template, &prepared);
        let wait = batch
            .properties
            .iter()
            .find(|(k, _)| k == crate::format::property::WAIT)
            .map(|(_, v)| v.as_str());
        self.handle_disk_flush(r, wait)
    }

    /// `handleDiskFlush`: in SYNC_FLUSH mode a put returns once its bytes are forced, or with
    /// FLUSH_DISK_TIMEOUT after `syncFlushTimeout` (the message is stored either way); a message
    /// whose WAIT property is "false" does not wait.
    pub(super) fn handle_disk_flush(
        &self,
        mut r: AppendResult,
        wait: Option<&str>,
    ) -> AppendResult {
        if self.pool.is_some() && !self.sync_flush && self.wake_commit_on_put && r.is_ok() {
            self.commits.request();
        }
        if self.sync_flush && r.status == PutMessageStatus::PutOk && wait != Some("false") {
            let end = r.wrote_offset + r.wrote_bytes;
            if !self.await_flush(end) {
                r.status = PutMessageStatus::FlushDiskTimeout;
            }
        }
        r
    }

    /// The SYNC_FLUSH wait of a put appended with `WAIT=false`, done later (a transaction's
    /// puts are appended under its lock and wait for the force after releasing it):
    /// `FLUSH_DISK_TIMEOUT` when the force did not come in time.
    pub(crate) fn await_put_flush(&self, mut r: AppendResult) -> AppendResult {
        if self.sync_flush && r.status == PutMessageStatus::PutOk {
            let end = r.wrote_offset + r.wrote_bytes;
            if !self.await_flush(end) {
                r.status = PutMessageStatus::FlushDiskTimeout;
            }
        }
        r
    }

    /// Whether a put with this WAIT value waits for the force.
    pub(crate) fn put_waits(&self, wait: Option<&str>) -> bool {
        self.sync_flush && wait != Some("false")
    }

    pub(super) fn new_segment(&self) -> Result<Arc<MappedFile>, PutMessageStatus> {
        if let Err(e) = self.refresh_disk_full() {
            log::warn!(target: "rmqstore.disk", "cannot read disk usage: {e}");
        }
        let offset = self.queue.next_file_offset(0);
        if offset.checked_add(self.queue.file_size()).is_none() {
            log::error!(
                target: "rmqstore.commitlog",
                "no commitlog segment can start at offset {offset}: it would end past the \
                 largest offset ({}); the store is full",
                i64::MAX
            );
            return Err(PutMessageStatus::CreateMappedFileFailed);
        }
        match self.allocator.obtain(offset) {
            Ok(f) => {
                if let Err(e) = self.queue.push(f.clone()) {
                    log::error!(target: "rmqstore.commitlog", "{e}");
                    let _ = f.destroy();
                    return Err(PutMessageStatus::CreateMappedFileFailed);
                }
                Ok(f)
            }
            Err(e) => {
                log::error!(target: "rmqstore.commitlog", "create mapped file failed: {e}");
                Err(PutMessageStatus::CreateMappedFileFailed)
            }
        }
    }

    /// Lays `records` down contiguously under the append lock.
    fn append(&self, template: &RecordTemplate<'_>, records: &[PreparedBody<'_>]) -> AppendResult {
        let total: i64 = records.iter().map(|r| i64::from(r.total_len)).sum();
        let consumes_offsets = matches!(
            template.transaction_type(),
            sysflag::TRANSACTION_NOT_TYPE | sysflag::TRANSACTION_COMMIT_TYPE
        );
        let mut lock = self.lock_put();
        let now = lock.now;
        let st: &mut PutState = &mut lock;
        let store_ts = now.max(st.last_store_ts);
        // The queue's slot, looked up once (in the last-queue cache, else the table; a queue's
        // first put inserts it at 0): read here, advanced after the write.
        let slot = consumes_offsets.then(|| {
            st.queue_offsets
                .slot_for_put(template.topic, template.queue_id)
        });
        let base_queue_offset = slot.map_or(0, |s| s.load(Ordering::Relaxed));
        // The last record's queue offset is base + len - 1, and must not pass the largest.
        if base_queue_offset > MAX_QUEUE_OFFSET + 1 - records.len() as i64 {
            // The queue's units could not be placed: refuse rather than wrap.
            drop(lock);
            log::error!(
                target: "rmqstore.commitlog",
                "queue {}/{} is at queue offset {base_queue_offset}: {} more messages would pass \
                 the largest queue offset ({MAX_QUEUE_OFFSET})",
                template.topic,
                template.queue_id,
                records.len()
            );
            return AppendResult::failed(PutMessageStatus::UnknownError);
        }
        let mut file = match self.queue.last() {
            Some(f) if !f.is_full() => f,
            _ => match self.new_segment() {
                Ok(f) => f,
                Err(s) => {
                    drop(lock);
                    return AppendResult::failed(s);
                }
            },
        };
        let free = file.file_size() - file.wrote_position();
        if total + i64::from(END_FILE_MIN_BLANK_LENGTH) > free {
            // END_OF_FILE: an 8-byte blank record claims the rest of the segment.
            // SAFETY: the append lock is held.
            unsafe { file.append_with(free, |b| write_blank(b, free as i32)) };
            self.allocator.schedule_munlock(file.clone());
            file = match self.new_segment() {
                Ok(f) => f,
                Err(s) => {
                    drop(lock);
                    return AppendResult::failed(s);
                }
            };
            if total + i64::from(END_FILE_MIN_BLANK_LENGTH)
                > file.file_size() - file.wrote_position()
            {
                drop(lock);
                return AppendResult::failed(PutMessageStatus::UnknownError);
            }
        }
        let wrote_offset = file.file_from_offset() + file.wrote_position();
        // SAFETY: the append lock is held.
        let placed = unsafe {
            file.append_with(total, |dst| {
                let mut at = 0usize;
                let mut phy = wrote_offset;
                for (i, r) in records.iter().enumerate() {
                    let len = r.total_len as usize;
                    let qo = if consumes_offsets {
                        base_queue_offset + i as i64
                    } else {
                        0
                    };
                    // The first record's size is written after every other byte of the
                    // batch: a kill anywhere before leaves none of it (publish_size).
                    template.write_record(&mut dst[at..at + len], r, qo, phy, store_ts, i > 0);
                    at += len;
                    phy += i64::from(r.total_len);
                }
                if let Some(first) = records.first() {
                    publish_size(dst, first.total_len);
                }
            })
        };
        debug_assert!(placed.is_some());
        file.set_store_timestamp(store_ts);
        if consumes_offsets {
            let next = base_queue_offset + records.len() as i64;
            if let Some(slot) = slot {
                slot.store(next, Ordering::Relaxed);
            }
        }
        st.last_store_ts = store_ts;
        drop(lock);
        AppendResult {
            status: PutMessageStatus::PutOk,
            wrote_offset,
            wrote_bytes: total,
            queue_offset: base_queue_offset,
            store_timestamp: store_ts,
            record_sizes: match records {
                [one] => RecordSizes::one(one.total_len),
                _ => records
                    .iter()
                    .map(|r| r.total_len)
                    .collect::<Vec<_>>()
                    .into(),
            },
        }
    }

    /// The next queue offset a put to `topic`/`queue_id` would get.
    pub(crate) fn next_queue_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.put
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .next_queue_offset(topic, queue_id)
    }
}

/// The append lock held (see [`CommitLog::lock_put`]): the put state, and the time it was
/// taken. Releasing it clears `beginTimeInLock` first, then unlocks.
pub(super) struct PutLock<'a> {
    guard: MutexGuard<'a, PutState>,
    begin_time_in_lock: &'a AtomicI64,
    /// The clock read when the lock was taken (milliseconds since the epoch).
    pub(super) now: i64,
}

impl Drop for PutLock<'_> {
    fn drop(&mut self) {
        self.begin_time_in_lock.store(0, Ordering::Release);
    }
}

impl Deref for PutLock<'_> {
    type Target = PutState;

    fn deref(&self) -> &PutState {
        &self.guard
    }
}

impl DerefMut for PutLock<'_> {
    fn deref_mut(&mut self) -> &mut PutState {
        &mut self.guard
    }
}
