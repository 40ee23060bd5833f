//! The commitlog: every message of every topic appended to one sequence of segments
//! (RocketMQ's `CommitLog`), plus the topic-queue offset table that numbers messages per queue.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Result, StoreError};
use crate::file::allocate::Allocator;
use crate::file::mapped_file::MappedFile;
use crate::file::mapped_file_queue::MappedFileQueue;
use crate::file::transient_pool::TransientStorePool;
use crate::format::{
    body_crc_matches, check_envelope, check_record, render_properties, sysflag, tags_code,
    view_record, write_blank, CqUnit, DecodedRecord, DispatchProps, HostAddr, Message, MessageExt,
    MessageLimits, PreparedBody, PutMessageStatus, RecordCheck, RecordEnvelope, RecordTemplate,
    END_FILE_MIN_BLANK_LENGTH, MAX_QUEUE_OFFSET,
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
    pub record_sizes: Vec<i32>,
}

impl AppendResult {
    pub fn failed(status: PutMessageStatus) -> AppendResult {
        AppendResult {
            status,
            wrote_offset: -1,
            wrote_bytes: 0,
            queue_offset: -1,
            store_timestamp: 0,
            record_sizes: Vec::new(),
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
struct PutState {
    /// topic -> queue id -> next queue offset (`topicQueueTable`).
    queue_offsets: HashMap<String, HashMap<i32, i64>>,
    /// Store timestamps never go backwards, even if the wall clock does.
    last_store_ts: i64,
}

impl PutState {
    fn next_queue_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.queue_offsets
            .get(topic)
            .and_then(|q| q.get(&queue_id))
            .copied()
            .unwrap_or(0)
    }

    /// The queues of `topic`, allocating its name only the first time.
    fn queues_mut(&mut self, topic: &str) -> &mut HashMap<i32, i64> {
        if !self.queue_offsets.contains_key(topic) {
            self.queue_offsets.insert(topic.to_owned(), HashMap::new());
        }
        self.queue_offsets.get_mut(topic).expect("inserted above")
    }

    fn set_queue_offset(&mut self, topic: &str, queue_id: i32, next: i64) {
        self.queues_mut(topic).insert(queue_id, next);
    }

    /// Raises the next queue offset to `next` if it is lower (recovery and its merges).
    fn raise_queue_offset(&mut self, topic: &str, queue_id: i32, next: i64) {
        let e = self.queues_mut(topic).entry(queue_id).or_insert(next);
        *e = (*e).max(next);
    }
}

/// How recovery chooses the segment its scan starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryStart {
    /// After a clean shutdown (`recoverNormally`): the newest segment starting at or before
    /// `dispatch_from`, the largest commitlog offset the consume queues hold (-1: none).
    Normal { dispatch_from: i64 },
    /// After a crash (`recoverAbnormally`): the newest segment whose first message was stored
    /// at or before the checkpoint's `min_timestamp`. Unlike RocketMQ it must also start at or
    /// before `dispatch_from`: queues lost with the crash (or deleted) are rebuilt from the
    /// scan's start, so the topic-queue table covers every message dispatch will replay.
    Abnormal {
        min_timestamp: i64,
        dispatch_from: i64,
    },
}

/// What recovery found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The previous run did not shut down cleanly (an `abort` file was there).
    pub abnormal: bool,
    /// End of the last valid record.
    pub process_offset: i64,
    /// Messages checked by the scan (those from `start_offset` on).
    pub messages: u64,
    /// Where the scan began: the start of the segment chosen as RocketMQ chooses it.
    pub start_offset: i64,
    /// Bytes past `process_offset` that held data (not zeros) and were discarded.
    pub discarded_bytes: i64,
    /// Why the scan stopped, when it stopped at something other than clean zeros.
    pub stop_reason: Option<String>,
}

/// `UtilAll.getDiskPartitionSpaceUsedPercent`: used / (used + available to us), of the file
/// system holding `dir`.
pub fn disk_usage(dir: &Path) -> Result<f64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| StoreError::InvalidArgument(format!("{} has a NUL byte", dir.display())))?;
    // SAFETY: statvfs fills a plain struct from a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(StoreError::io(
            "cannot read disk usage of",
            dir,
            std::io::Error::last_os_error(),
        ));
    }
    let used = (st.f_blocks.saturating_sub(st.f_bfree)) as f64;
    let avail = st.f_bavail as f64;
    Ok(if used + avail > 0.0 {
        used / (used + avail)
    } else {
        1.0
    })
}

/// Whether a record's topic, queue id and queue offset are ones the store can file under:
/// a topic a put accepts (it names a folder), a queue id >= 0 and a queue offset whose
/// consume queue position fits (`0..=MAX_QUEUE_OFFSET`). These bytes are outside the body CRC;
/// a record failing this is damaged.
pub fn queue_fields_are_legal(topic: &[u8], queue_id: i32, queue_offset: i64) -> bool {
    queue_position_is_legal(queue_id, queue_offset)
        && std::str::from_utf8(topic).is_ok_and(crate::format::topic_is_legal)
}

/// The queue part of [`queue_fields_are_legal`] (for callers that check the topic once for a
/// run of records).
#[inline]
pub fn queue_position_is_legal(queue_id: i32, queue_offset: i64) -> bool {
    queue_id >= 0 && (0..=MAX_QUEUE_OFFSET).contains(&queue_offset)
}

/// `check_record` for the record that should start at commitlog offset `here`: a record whose
/// PHYSICALOFFSET field names another offset (a record image inside a body, stale bytes moved by
/// a copy) is not the record at `here`.
pub fn check_record_at(buf: &[u8], here: i64, check_crc: bool) -> RecordCheck<'_> {
    match check_record(buf, check_crc) {
        RecordCheck::Message(d) if d.physical_offset != here => RecordCheck::Invalid {
            size: -1,
            reason: "PHYSICALOFFSET field disagrees with the record's position",
        },
        other => other,
    }
}

/// True when the 8 bytes of a record head (size + magic) are all zero (or absent).
fn is_zero_header(buf: &[u8]) -> bool {
    buf.iter().take(8).all(|&b| b == 0)
}

/// Bytes from the start of `buf` to its last non-zero byte (0 if all zero). Word-wise from the
/// end, which is fast over the long runs of zeros a segment tail holds.
fn nonzero_extent(buf: &[u8]) -> i64 {
    let mut end = buf.len();
    while end >= 8 && buf[end - 8..end] == [0u8; 8] {
        end -= 8;
    }
    while end > 0 && buf[end - 1] == 0 {
        end -= 1;
    }
    end as i64
}

/// How dispatch waits for new bytes. Puts do not signal (a wake-up per put would cost every
/// producer a system call whenever dispatch is idle); dispatch polls every millisecond while
/// idle, as RocketMQ's reput thread does, and is woken at once only for shutdown.
#[derive(Default)]
pub struct DataSignal {
    lock: Mutex<()>,
    cv: Condvar,
}

/// Poll interval of an idle dispatcher (RocketMQ's reput sleeps 1 ms between rounds).
pub const DISPATCH_POLL: Duration = Duration::from_millis(1);

impl DataSignal {
    /// Waits up to `timeout` until `ready()` holds, checking every [`DISPATCH_POLL`].
    pub fn wait(&self, timeout: Duration, ready: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + timeout;
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while !ready() {
            let now = std::time::Instant::now();
            if now >= deadline {
                return;
            }
            g = self
                .cv
                .wait_timeout(g, DISPATCH_POLL.min(deadline - now))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Wakes a waiter at once (shutdown, or a flush that confirmed new bytes).
    pub fn wake(&self) {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.cv.notify_all();
    }
}

/// Group commit (`GroupCommitService`): producers of SYNC_FLUSH puts wait here until their
/// bytes are forced; one service thread forces for all of them at once.
#[derive(Default)]
struct GroupCommit {
    state: Mutex<GroupState>,
    /// A producer started waiting.
    request: Condvar,
    /// Set once under `state`; read by parked producers without the lock.
    stopped: AtomicBool,
    /// `state.waiters.len()`, kept under `state`: the service reads it without the lock while
    /// it spins for producers to come back.
    waiting: AtomicUsize,
}

impl GroupCommit {
    /// Publishes the number of waiting producers (called under `state`).
    fn publish_waiting(&self, st: &GroupState) {
        self.waiting.store(st.waiters.len(), Ordering::Release);
    }

    /// Spins, yielding the CPU, until `wanted` producers wait, the group is stopped or `until`.
    fn spin_for_waiters(&self, wanted: usize, until: Instant) {
        while self.waiting.load(Ordering::Acquire) < wanted
            && !self.stopped.load(Ordering::Acquire)
            && Instant::now() < until
        {
            std::thread::yield_now();
        }
    }
}

#[derive(Default)]
struct GroupState {
    /// Producers waiting for a force: the offset each needs forced, and the thread to unpark
    /// once it is (RocketMQ completes each request's future; only those are woken).
    waiters: Vec<(i64, std::thread::Thread)>,
    /// Producers whose bytes are forced and that are still to be unparked. The service unparks
    /// a few and each producer it wakes unparks a few more before it returns (a relay), so a
    /// force of many producers' bytes costs the service a few wake-ups, not one per producer,
    /// and it starts the next force sooner; the wake-ups run on the producers' threads while
    /// the service waits for the disk.
    relay: Vec<std::thread::Thread>,
    /// The service waits on `request` until this many producers wait (usize::MAX while it
    /// forces: it looks at `waiters` before it waits again); only the put that reaches the
    /// count makes the system call.
    notify_at: usize,
    /// Producers the last force released, and how long that force took: the next round waits
    /// (at most that long) for as many to come back before it forces, so that a force covers
    /// every producer that is about to ask for one (PostgreSQL's `commit_delay` idea, bounded
    /// by the disk's own latency; a lone producer never waits).
    last_released: usize,
    last_force: Duration,
    attached: bool,
    stopped: bool,
    forces: u64,
}

/// How many threads the service and each woken producer unpark from the relay.
const RELAY_FANOUT: usize = 2;
/// The longest a group-commit round waits for producers released by the last force.
const MAX_GATHER: Duration = Duration::from_millis(1);
/// Short waits spin before they sleep. Waking a sleeping thread on an idle CPU is slow where
/// CPUs are virtual (a halted vCPU must be woken by its host: 20-50 us measured on the
/// benchmark machine with `--example wake_latency`, 1-2 us on the same CPU), and a burst of
/// 32 producers hands the GIL and the group from thread to thread, so every sleeping
/// hand-off was paid in series. A waiter
/// that spins for a little while, giving the CPU away at each turn (`sched_yield`), keeps its
/// CPU awake for the next hand-off and sees its own event without a wake-up; past the window
/// it sleeps as before, so a slow disk or an idle store costs no CPU. The figures are in
/// `benches/README.md` (issue 4).
///
/// How long a producer that waits with others spins before it parks (a lone producer parks at
/// once: nobody hands anything on to it).
const PRODUCER_SPIN: Duration = Duration::from_micros(50);
/// How long, at most, the service spins while it gathers the producers of the last force
/// (within the gather window, which is bounded by the last force's duration; not at all when
/// the last force released nobody).
const GATHER_SPIN: Duration = Duration::from_micros(300);

/// The commit service's side of the transient store pool (`CommitRealTimeService`): puts ask
/// for a commit round without a system call unless the service is idle. Shared with the store,
/// so that the service waits without holding the store open (a truncation or close waits for
/// calls in flight).
#[derive(Default)]
pub struct CommitRequests {
    /// A put appended since the service last looked (`wakeCommitWhenPutMessage`).
    requested: AtomicBool,
    stopped: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

impl CommitRequests {
    /// Asks for a round: one atomic load when a request is already pending.
    pub fn request(&self) {
        if !self.requested.load(Ordering::Acquire) && !self.requested.swap(true, Ordering::AcqRel) {
            let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.cv.notify_one();
        }
    }

    /// Waits up to `timeout` for a request (or a stop), then clears it; true once stopped.
    pub fn wait(&self, timeout: Duration) -> bool {
        if !self.requested.load(Ordering::Acquire) && !self.stopped.load(Ordering::Acquire) {
            let g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            if !self.requested.load(Ordering::Acquire) && !self.stopped.load(Ordering::Acquire) {
                drop(
                    self.cv
                        .wait_timeout(g, timeout)
                        .unwrap_or_else(|p| p.into_inner()),
                );
            }
        }
        self.requested.store(false, Ordering::Release);
        self.stopped.load(Ordering::Acquire)
    }

    /// Ends the service's waits (shutdown).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.cv.notify_all();
    }
}

/// What one commit round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStep {
    /// Bytes were committed (readable now).
    pub committed: bool,
    pub stopped: bool,
}

/// What one group-commit round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupCommitStep {
    pub flushed: bool,
    pub stopped: bool,
    /// Forces done so far.
    pub forces: u64,
}

pub struct CommitLog {
    queue: MappedFileQueue,
    /// SYNC_FLUSH: only flushed bytes are confirmed (readable by dispatch) and puts wait for
    /// their bytes to be forced.
    sync_flush: bool,
    /// `syncFlushTimeout`.
    sync_flush_timeout: Duration,
    group: GroupCommit,
    /// One flusher at a time (group commit, periodic flush, `flush()`, close).
    flush_lock: Mutex<()>,
    /// The disk holding the commitlog is above `disk_space_warning_level_ratio`.
    disk_full: AtomicBool,
    disk_warning_ratio: f64,
    busy_timeout_ms: i64,
    signal: Arc<DataSignal>,
    allocator: Arc<Allocator>,
    put: Mutex<PutState>,
    /// When the current holder took the append lock (0 = not held): `beginTimeInLock`.
    begin_time_in_lock: AtomicI64,
    store_host: HostAddr,
    limits: MessageLimits,
    /// Write buffers of the segments (`transientStorePoolEnable`); `None` when disabled.
    pool: Option<TransientStorePool>,
    /// One committer at a time (commit service, flushes, truncation).
    commit_lock: Mutex<()>,
    commits: Arc<CommitRequests>,
    wake_commit_on_put: bool,
    read_only: bool,
    /// `check_crc_on_read`: reads verify body CRCs.
    check_crc_on_read: bool,
    /// `decompress_body_on_read`: reads give compressed bodies back decompressed.
    decompress_on_read: bool,
}

impl CommitLog {
    /// Loads the segments of `dir` with the commitlog settings of `config`.
    pub fn load(
        dir: &Path,
        config: &crate::config::StoreConfig,
        allocator: Arc<Allocator>,
        signal: Arc<DataSignal>,
        pool: Option<TransientStorePool>,
        read_only: bool,
    ) -> Result<CommitLog> {
        let file_size = config.mapped_file_size_commit_log;
        let queue = if read_only {
            MappedFileQueue::load_read_only(dir, file_size)?
        } else {
            MappedFileQueue::load(dir, file_size)?
        };
        if read_only {
            for f in queue.files() {
                f.set_read_only_position(file_size);
            }
        }
        Ok(CommitLog {
            queue,
            sync_flush: config.flush_disk_type == crate::config::FlushDiskType::SyncFlush,
            sync_flush_timeout: Duration::from_millis(config.sync_flush_timeout.max(0) as u64),
            group: GroupCommit::default(),
            flush_lock: Mutex::new(()),
            disk_full: AtomicBool::new(false),
            disk_warning_ratio: f64::from(config.disk_space_warning_level_ratio) / 100.0,
            busy_timeout_ms: config.os_page_cache_busy_timeout_mills,
            signal,
            allocator,
            put: Mutex::new(PutState::default()),
            begin_time_in_lock: AtomicI64::new(0),
            store_host: config.store_host,
            limits: MessageLimits {
                max_message_size: config.max_message_size,
                max_record_in_segment: file_size - i64::from(END_FILE_MIN_BLANK_LENGTH),
            },
            pool,
            commit_lock: Mutex::new(()),
            commits: Arc::new(CommitRequests::default()),
            wake_commit_on_put: config.wake_commit_when_put_message,
            read_only,
            check_crc_on_read: config.check_crc_on_read,
            decompress_on_read: config.decompress_body_on_read,
        })
    }

    /// Another process writes this commitlog (a read-only store).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Read-only commitlogs: picks up segments the writing process added (or deleted from the
    /// front). Their bytes are read only where a consume queue unit points, and checked there.
    pub fn refresh_read_only(&self) -> Result<()> {
        if self.read_only && self.queue.reload_read_only()? {
            for f in self.queue.files() {
                f.set_read_only_position(f.file_size());
            }
        }
        Ok(())
    }

    /// Whether the record a consume queue unit of `topic`/`queue_id` points at is that unit's
    /// message, whole: same offset, size, queue, queue offset and tags code. Read-only stores
    /// check the units another process is writing with it.
    pub fn record_matches_unit(&self, topic: &str, queue_id: i32, u: &CqUnit) -> bool {
        let file = match self.queue.find_by_offset(u.phy_offset) {
            Some(f) => f,
            None => {
                if self.refresh_read_only().is_err() {
                    return false;
                }
                match self.queue.find_by_offset(u.phy_offset) {
                    Some(f) => f,
                    None => return false,
                }
            }
        };
        let Some(data) = file.read(u.phy_offset - file.file_from_offset(), i64::from(u.size))
        else {
            return false;
        };
        view_record(data).is_some_and(|d| {
            d.physical_offset == u.phy_offset
                && d.queue_id == queue_id
                && d.queue_offset == u.queue_offset
                && d.topic == topic.as_bytes()
                && tags_code(DispatchProps::scan(d.properties).tags) == u.tags_code
        })
    }

    /// Where the commit service waits for puts.
    pub fn commit_requests(&self) -> Arc<CommitRequests> {
        self.commits.clone()
    }

    /// The transient store pool, when enabled.
    pub fn pool(&self) -> Option<&TransientStorePool> {
        self.pool.as_ref()
    }

    pub fn queue(&self) -> &MappedFileQueue {
        &self.queue
    }

    pub fn store_host(&self) -> HostAddr {
        self.store_host
    }

    fn lock_put(&self) -> MutexGuard<'_, PutState> {
        let g = self.put.lock().unwrap_or_else(|p| p.into_inner());
        self.begin_time_in_lock
            .store(now_millis(), Ordering::Release);
        g
    }

    fn unlock_put(&self, g: MutexGuard<'_, PutState>) {
        self.begin_time_in_lock.store(0, Ordering::Release);
        drop(g);
    }

    /// How long the append lock has been held, 0 when free (`lockTimeMills`).
    pub fn lock_time_millis(&self) -> i64 {
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

    /// The checks RocketMQ's put hook makes before encoding: a full disk refuses writes, and a
    /// writer stuck in the append lock makes others back off.
    fn admission(&self) -> Result<(), PutMessageStatus> {
        if self.disk_full.load(Ordering::Acquire) {
            return Err(PutMessageStatus::ServiceNotAvailable);
        }
        if self.is_os_page_cache_busy() {
            return Err(PutMessageStatus::OsPageCacheBusy);
        }
        Ok(())
    }

    /// `isOSPageCacheBusy`: the append lock has been held longer than the busy timeout.
    pub fn is_os_page_cache_busy(&self) -> bool {
        let held = self.lock_time_millis();
        held > self.busy_timeout_ms && held < 10_000_000
    }

    /// Re-reads how full the commitlog's disk is and sets or clears the disk-full state;
    /// returns the used fraction.
    pub fn refresh_disk_full(&self) -> Result<f64> {
        let used = disk_usage(self.queue.dir())?;
        let full = used > self.disk_warning_ratio;
        let was = self.disk_full.swap(full, Ordering::AcqRel);
        if full != was {
            if full {
                log::error!(
                    target: "rmqstore.disk",
                    "disk of {} is {:.0} % used, above the warning level of {:.0} %: puts are \
                     refused with SERVICE_NOT_AVAILABLE until space returns",
                    self.queue.dir().display(),
                    used * 100.0,
                    self.disk_warning_ratio * 100.0
                );
            } else {
                log::warn!(
                    target: "rmqstore.disk",
                    "disk of {} is back to {:.0} % used: puts are accepted again",
                    self.queue.dir().display(),
                    used * 100.0
                );
            }
        }
        Ok(used)
    }

    pub fn is_disk_full(&self) -> bool {
        self.disk_full.load(Ordering::Acquire)
    }

    /// Appends one message (`asyncPutMessage`, without the flush/HA waits of later layers).
    pub fn put_message(&self, msg: &Message) -> AppendResult {
        if let Err(s) = self.admission() {
            return AppendResult::failed(s);
        }
        let props =
            match render_properties(msg.properties.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
                Ok(p) => p,
                Err(s) => return AppendResult::failed(s),
            };
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
        if let Err(s) = check_envelope(&env, &props) {
            return AppendResult::failed(s);
        }
        let template = RecordTemplate::new(&env, &props);
        match template.prepare(&msg.body, &self.limits) {
            Ok(body) => {
                let r = self.append(&template, std::slice::from_ref(&body));
                self.handle_disk_flush(r, msg.property(crate::format::property::WAIT))
            }
            Err(s) => AppendResult::failed(s),
        }
    }

    /// Appends a batch as contiguous records in one segment with one store timestamp
    /// (`asyncPutMessages`).
    pub fn put_messages(&self, batch: &Batch<'_>) -> AppendResult {
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
    fn handle_disk_flush(&self, mut r: AppendResult, wait: Option<&str>) -> AppendResult {
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

    /// Waits until the commitlog is forced up to `target`. Without a group-commit service the
    /// caller forces it itself.
    fn await_flush(&self, target: i64) -> bool {
        if self.queue.flushed_where() >= target {
            return true;
        }
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        if !st.attached || st.stopped {
            drop(st);
            return match self.flush_all() {
                Ok(flushed) => flushed >= target,
                Err(e) => {
                    log::error!(target: "rmqstore.flush", "force failed: {e}");
                    false
                }
            };
        }
        let me = std::thread::current();
        st.waiters.push((target, me.clone()));
        self.group.publish_waiting(&st);
        if st.waiters.len() >= st.notify_at {
            self.group.request.notify_one();
        }
        let grouped = st.waiters.len() > 1 || st.last_released > 1;
        drop(st);
        let begin = Instant::now();
        let deadline = begin + self.sync_flush_timeout;
        let spin_until = begin
            + if grouped {
                PRODUCER_SPIN
            } else {
                Duration::ZERO
            };
        // Spins for a moment (see PRODUCER_SPIN), then parks until the service unparks this
        // thread (its target forced) or the deadline; the flushed offset decides, so a stray
        // unpark only costs one more look.
        let ok = loop {
            if self.queue.flushed_where() >= target {
                break true;
            }
            let now = Instant::now();
            if now >= deadline || self.group.stopped.load(Ordering::Acquire) {
                break false;
            }
            if now < spin_until {
                std::thread::yield_now();
            } else {
                std::thread::park_timeout(deadline - now);
            }
        };
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        // The entry is still listed if this wait timed out or stopped, or if it saw the force
        // before the service took the lock again (a spinning producer often does): left
        // there, the service would put a producer that is no longer waiting in the relay.
        st.waiters.retain(|(_, t)| t.id() != me.id());
        self.group.publish_waiting(&st);
        // Done waiting (perhaps before the relay reached this thread): no unpark is owed to
        // it any more, so none is spent on it while it waits for a later put.
        st.relay.retain(|t| t.id() != me.id());
        // Pass the wake-up on (whichever way this wait ended, so none is ever dropped).
        let next = Self::take_relay(&mut st);
        drop(st);
        next.into_iter().for_each(|t| t.unpark());
        ok
    }

    /// Up to [`RELAY_FANOUT`] producers to unpark next.
    fn take_relay(st: &mut GroupState) -> Vec<std::thread::Thread> {
        let n = st.relay.len().min(RELAY_FANOUT);
        st.relay.drain(..n).collect()
    }

    /// Forces the group-commit rounds have done so far.
    pub fn group_commit_forces(&self) -> u64 {
        self.group
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .forces
    }

    /// Producers waiting for a force now.
    pub fn group_commit_waiting(&self) -> usize {
        self.group.waiting.load(Ordering::Acquire)
    }

    /// From now on a service thread calls [`CommitLog::group_commit_step`].
    pub fn attach_group_commit(&self) {
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        st.attached = true;
    }

    /// Stops group commit: waiting producers return (FLUSH_DISK_TIMEOUT unless forced).
    pub fn stop_group_commit(&self) {
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        st.stopped = true;
        self.group.stopped.store(true, Ordering::Release);
        self.group.request.notify_all();
        for (_, t) in st.waiters.drain(..) {
            t.unpark();
        }
        self.group.publish_waiting(&st);
        for t in st.relay.drain(..) {
            t.unpark();
        }
    }

    /// One round of the group-commit service: waits up to `timeout` for a waiting producer,
    /// then forces everything written (RocketMQ forces every round, requests or not).
    pub fn group_commit_step(&self, timeout: Duration) -> GroupCommitStep {
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        let start = Instant::now();
        let gather_until = start + st.last_force.min(MAX_GATHER);
        // Spins only for producers the last force released: none is coming back after a
        // round that released nobody (an idle store, or puts that do not wait).
        let spin_until = if st.last_released > 0 {
            start + st.last_force.min(GATHER_SPIN)
        } else {
            start
        };
        let wanted = st.last_released.max(1);
        loop {
            let waiting = st.waiters.len();
            if st.stopped || waiting >= wanted {
                break;
            }
            let now = Instant::now();
            if now < spin_until {
                // The producers of the last force are on their way back: spin for them (see
                // GATHER_SPIN) rather than sleep until the last one's notify wakes this thread.
                drop(st);
                self.group.spin_for_waiters(wanted, spin_until);
                st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
                continue;
            }
            let until = if now < gather_until {
                // Gathering: wake when `wanted` producers wait, or at the end of the window.
                st.notify_at = wanted;
                gather_until
            } else if waiting > 0 {
                break;
            } else if now < start + timeout {
                // Nobody waits: the first producer to come starts the force.
                st.notify_at = 1;
                start + timeout
            } else {
                // A round forces even without producers (RocketMQ's 10 ms rounds).
                break;
            };
            st = self
                .group
                .request
                .wait_timeout(st, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        st.notify_at = usize::MAX;
        if st.stopped {
            return GroupCommitStep {
                flushed: false,
                stopped: true,
                forces: st.forces,
            };
        }
        drop(st);
        let before = self.queue.flushed_where();
        let forcing = Instant::now();
        let result = self.flush_all();
        let took = forcing.elapsed();
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        st.last_force = took;
        let flushed = matches!(result, Ok(after) if after > before);
        if flushed {
            st.forces += 1;
        }
        let failed = result.is_err();
        if let Err(e) = result {
            log::error!(target: "rmqstore.flush", "group commit force failed: {e}");
        }
        // Wake exactly the producers whose bytes are now forced: a few here, the rest through
        // the relay.
        let forced = self.queue.flushed_where();
        let GroupState { waiters, relay, .. } = &mut *st;
        let before_release = relay.len();
        waiters.retain(|(target, t)| {
            let ready = *target <= forced;
            if ready {
                relay.push(t.clone());
            }
            !ready
        });
        self.group.publish_waiting(&st);
        st.last_released = st.relay.len() - before_release;
        let done = Self::take_relay(&mut st);
        let forces = st.forces;
        drop(st);
        done.into_iter().for_each(|t| t.unpark());
        if failed {
            // Waiting producers stay listed, so the next round would start at once: pace the
            // retries (they time out with FLUSH_DISK_TIMEOUT if forcing keeps failing).
            std::thread::sleep(timeout);
        }
        GroupCommitStep {
            flushed,
            stopped: false,
            forces,
        }
    }

    /// `CommitRealTimeService`'s round: commits the write buffers holding at least
    /// `least_pages` uncommitted pages (0: anything); true when bytes were committed.
    pub fn commit_pages(&self, least_pages: i64) -> Result<bool> {
        if self.pool.is_none() {
            return Ok(false);
        }
        let _g = self.commit_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut moved = false;
        // A round may finish one segment and start the next (RocketMQ commits one per call
        // and loops on its next round; this does the same work without the wait).
        for _ in 0..self.queue.files().len() + 1 {
            if self.queue.commit(least_pages)? {
                break;
            }
            moved = true;
        }
        Ok(moved)
    }

    /// `FlushRealTimeService`'s round: forces the segment holding the flushed position when at
    /// least `least_pages` pages are waiting (0: anything), returns the flushed offset.
    pub fn flush_pages(&self, least_pages: i64) -> Result<i64> {
        let _g = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        let moved = !self.queue.flush(least_pages)?;
        if moved && self.sync_flush {
            self.signal.wake();
        }
        Ok(self.queue.flushed_where())
    }

    fn new_segment(&self) -> Result<Arc<MappedFile>, PutMessageStatus> {
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
        let mut st = self.lock_put();
        let store_ts = now_millis().max(st.last_store_ts);
        let base_queue_offset = if consumes_offsets {
            st.next_queue_offset(template.topic, template.queue_id)
        } else {
            0
        };
        // The last record's queue offset is base + len - 1, and must not pass the largest.
        if base_queue_offset > MAX_QUEUE_OFFSET + 1 - records.len() as i64 {
            // The queue's units could not be placed: refuse rather than wrap.
            self.unlock_put(st);
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
                    self.unlock_put(st);
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
                    self.unlock_put(st);
                    return AppendResult::failed(s);
                }
            };
            if total + i64::from(END_FILE_MIN_BLANK_LENGTH)
                > file.file_size() - file.wrote_position()
            {
                self.unlock_put(st);
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
                    template.write_record(&mut dst[at..at + len], r, qo, phy, store_ts);
                    at += len;
                    phy += i64::from(r.total_len);
                }
            })
        };
        debug_assert!(placed.is_some());
        file.set_store_timestamp(store_ts);
        st.last_store_ts = store_ts;
        if consumes_offsets {
            st.set_queue_offset(
                template.topic,
                template.queue_id,
                base_queue_offset + records.len() as i64,
            );
        }
        self.unlock_put(st);
        AppendResult {
            status: PutMessageStatus::PutOk,
            wrote_offset,
            wrote_bytes: total,
            queue_offset: base_queue_offset,
            store_timestamp: store_ts,
            record_sizes: records.iter().map(|r| r.total_len).collect(),
        }
    }

    /// The next queue offset a put to `topic`/`queue_id` would get.
    pub fn next_queue_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.put
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .next_queue_offset(topic, queue_id)
    }

    pub fn min_offset(&self) -> i64 {
        self.queue.min_offset()
    }

    /// `getMaxOffset`: the end of what readers may see (with the transient store pool, what is
    /// committed: appends still in a write buffer are not readable yet).
    pub fn max_offset(&self) -> i64 {
        if self.pool.is_some() {
            self.queue.committed_where().min(self.queue.max_offset())
        } else {
            self.queue.max_offset()
        }
    }

    /// `getConfirmOffset`: how far dispatch may read. SYNC_FLUSH: the flushed offset;
    /// ASYNC_FLUSH: the readable end ([`CommitLog::max_offset`]). The one place that bound is
    /// decided.
    pub fn confirm_offset(&self) -> i64 {
        if self.sync_flush {
            self.queue.flushed_where().min(self.max_offset())
        } else {
            self.max_offset()
        }
    }

    pub fn signal(&self) -> &DataSignal {
        &self.signal
    }

    /// Calls `f` with the segment and the record starting at `offset` (decoded, and the bytes
    /// from its start to the end of the readable region): `Ok(None)` when the offset is outside
    /// the commitlog, an error when it is inside but not the start of a message.
    pub fn with_record<T>(
        &self,
        offset: i64,
        f: impl FnOnce(&MappedFile, &DecodedRecord<'_>, &[u8]) -> T,
    ) -> Result<Option<T>> {
        if offset < 0 || offset >= self.max_offset() {
            return Ok(None);
        }
        let Some(file) = self.queue.find_by_offset(offset) else {
            return Ok(None);
        };
        let pos = offset - file.file_from_offset();
        let Some(data) = file.read_from(pos) else {
            return Ok(None);
        };
        match check_record_at(data, offset, false) {
            RecordCheck::Message(d) => Ok(Some(f(&file, &d, data))),
            RecordCheck::Blank { .. } => Err(StoreError::InvalidArgument(format!(
                "offset {offset} is the end-of-file blank record of segment {}, not a message",
                file.path().display()
            ))),
            RecordCheck::Invalid { reason, .. } => Err(StoreError::InvalidArgument(format!(
                "offset {offset} is not the start of a message ({reason})"
            ))),
        }
    }

    /// Whether reads check body CRCs (`check_crc_on_read`).
    pub fn checks_crc_on_read(&self) -> bool {
        self.check_crc_on_read
    }

    /// Whether reads decompress compressed bodies (`decompress_body_on_read`).
    pub fn decompresses_on_read(&self) -> bool {
        self.decompress_on_read
    }

    /// The message of a record decoded from `file`, as reads give it: its body CRC checked
    /// (with `check_crc_on_read`) and its body decompressed (with `decompress_body_on_read`);
    /// a mismatch or an undecompressible body is a [`StoreError::CorruptRecord`].
    pub fn read_message(
        &self,
        file: &MappedFile,
        d: &DecodedRecord<'_>,
        data: &[u8],
    ) -> Result<MessageExt> {
        if self.check_crc_on_read && !body_crc_matches(d.body, d.body_crc) {
            return Err(StoreError::corrupt_record(
                file.path(),
                d.physical_offset,
                format!(
                    "its body CRC is {:#010x} but its {}-byte body has {:#010x}",
                    d.body_crc,
                    d.body.len(),
                    crate::util::masked_crc32(d.body)
                ),
            ));
        }
        let mut m = MessageExt::from_record(d, data);
        if self.decompress_on_read {
            m.decompress()
                .map_err(|e| StoreError::corrupt_record(file.path(), d.physical_offset, e.0))?;
        }
        Ok(m)
    }

    /// `lookMessageByOffset`: the message whose record starts at `offset` (checked and
    /// decompressed as [`CommitLog::read_message`]); `None` outside the commitlog.
    pub fn look_message(&self, offset: i64) -> Result<Option<MessageExt>> {
        self.with_record(offset, |file, d, data| self.read_message(file, d, data))?
            .transpose()
    }

    /// The segment recovery starts from (STORE_SPEC §5.4 step 2, §5.5 step 1): walking back
    /// from the newest, the first whose first record is a message (CRC checked) with a store
    /// timestamp, matching `start`; segment 0 when none matches (it is never checked).
    fn recovery_start(files: &[Arc<MappedFile>], start: RecoveryStart) -> usize {
        (1..files.len())
            .rev()
            .find(|&idx| {
                let file = &files[idx];
                let data = file.read_from(0).unwrap_or(&[]);
                let RecordCheck::Message(d) = check_record_at(data, file.file_from_offset(), true)
                else {
                    return false;
                };
                d.store_timestamp != 0
                    && match start {
                        RecoveryStart::Normal { dispatch_from } => {
                            file.file_from_offset() <= dispatch_from
                        }
                        RecoveryStart::Abnormal {
                            min_timestamp,
                            dispatch_from,
                        } => {
                            d.store_timestamp <= min_timestamp
                                && file.file_from_offset() <= dispatch_from
                        }
                    }
            })
            .unwrap_or(0)
    }

    /// Rebuilds the write position by scanning from the segment `start` chooses with
    /// `check_crc`, stopping at the first invalid record and truncating there. The topic-queue
    /// table holds what the scan saw; [`CommitLog::merge_queue_offsets`] adds the consume
    /// queues' view of the segments before it.
    pub fn recover(&self, check_crc: bool, start: RecoveryStart) -> Result<RecoveryReport> {
        let files = self.queue.files();
        let mut report = RecoveryReport::default();
        let mut table = PutState::default();
        let mut last_ts = 0i64;
        let first = Self::recovery_start(&files, start);
        // Every scan ends at a blank record of the last segment or at an invalid record.
        let mut process_offset = files.get(first).map(|f| f.file_from_offset()).unwrap_or(0);
        report.start_offset = process_offset;
        'files: for (idx, file) in files.iter().enumerate().skip(first) {
            let data = file.read_from(0).unwrap_or(&[]);
            let mut pos = 0usize;
            loop {
                let here = file.file_from_offset() + pos as i64;
                match check_record_at(&data[pos..], here, check_crc) {
                    RecordCheck::Message(d) => {
                        pos += d.total_size as usize;
                        report.messages += 1;
                        last_ts = last_ts.max(d.store_timestamp);
                        // Damaged queue fields (outside the body CRC) are left out of the
                        // table, as dispatch leaves the record out of the queues.
                        if matches!(
                            d.transaction_type(),
                            sysflag::TRANSACTION_NOT_TYPE | sysflag::TRANSACTION_COMMIT_TYPE
                        ) && queue_fields_are_legal(d.topic, d.queue_id, d.queue_offset)
                        {
                            table.raise_queue_offset(
                                &d.topic_str(),
                                d.queue_id,
                                d.queue_offset + 1,
                            );
                        }
                    }
                    RecordCheck::Blank { .. } => {
                        match files.get(idx + 1) {
                            Some(next) => process_offset = next.file_from_offset(),
                            None => process_offset = file.file_from_offset() + pos as i64,
                        }
                        continue 'files;
                    }
                    RecordCheck::Invalid { reason, .. } => {
                        process_offset = here;
                        // Zeros at the stop point are the clean end of the log (a later
                        // segment that starts with zeros is an unused pre-allocated one).
                        let later = &files[idx + 1..];
                        let damaged = !is_zero_header(&data[pos..])
                            || later
                                .iter()
                                .any(|f| !is_zero_header(f.read_from(0).unwrap_or(&[])));
                        if damaged {
                            report.discarded_bytes = nonzero_extent(&data[pos..])
                                + later
                                    .iter()
                                    .map(|f| nonzero_extent(f.read_from(0).unwrap_or(&[])))
                                    .sum::<i64>();
                            report.stop_reason = Some(reason.to_string());
                            log::warn!(
                                target: "rmqstore.recovery",
                                "commitlog recovery stopped at offset {process_offset} in {}: \
                                 {reason}; {} byte(s) of data after it are discarded and the \
                                 commitlog is truncated there ({} later segment(s) deleted)",
                                file.path().display(),
                                report.discarded_bytes,
                                later.len()
                            );
                        }
                        break 'files;
                    }
                }
            }
        }
        report.process_offset = process_offset;
        self.queue.truncate_dirty(process_offset)?;
        self.queue.set_flushed_where(process_offset);
        self.queue.set_committed_where(process_offset);
        let mut st = self.put.lock().unwrap_or_else(|p| p.into_inner());
        st.queue_offsets = table.queue_offsets;
        st.last_store_ts = last_ts;
        Ok(report)
    }

    /// Raises the next queue offsets to those of `table` (from the consume queues, truncated
    /// to the recovered end): queues whose last messages lie before the scan's start segment.
    pub fn merge_queue_offsets(&self, table: HashMap<String, HashMap<i32, i64>>) {
        let mut st = self.put.lock().unwrap_or_else(|p| p.into_inner());
        for (topic, queues) in table {
            for (queue_id, next) in queues {
                st.raise_queue_offset(&topic, queue_id, next);
            }
        }
    }

    /// `isOffsetAligned`: a message record whose CRC checks starts at `offset`.
    pub fn is_aligned(&self, offset: i64) -> bool {
        let Some(file) = self.queue.find_by_offset(offset) else {
            return false;
        };
        file.read_from(offset - file.file_from_offset())
            .is_some_and(|data| {
                matches!(check_record_at(data, offset, true), RecordCheck::Message(_))
            })
    }

    /// Cuts the commitlog at `offset` (later segments deleted, the rest of the cut one zeroed)
    /// and installs the queue offset table that holds below it. Callers exclude every other
    /// user of the store.
    pub fn truncate(&self, offset: i64, table: HashMap<String, HashMap<i32, i64>>) -> Result<()> {
        let _c = self.commit_lock.lock().unwrap_or_else(|p| p.into_inner());
        let _f = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = self.put.lock().unwrap_or_else(|p| p.into_inner());
        self.queue.truncate_dirty(offset)?;
        if self.queue.flushed_where() > offset {
            self.queue.set_flushed_where(offset);
        }
        st.queue_offsets = table;
        Ok(())
    }

    /// Commits and forces everything written to disk; returns the flushed offset.
    pub fn flush_all(&self) -> Result<i64> {
        self.commit_pages(0)?;
        let _g = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..self.queue.files().len() + 1 {
            if self.queue.flush(0)? {
                break;
            }
        }
        if self.sync_flush {
            self.signal.wake();
        }
        Ok(self.queue.flushed_where())
    }

    /// A readable slice of the commitlog from `offset` to the end of its segment's readable
    /// region (bounded by `end`), with the segment it lives in.
    pub fn read_from(&self, offset: i64, end: i64) -> Option<(Arc<MappedFile>, i64)> {
        let file = self.queue.find_by_offset(offset)?;
        let limit = (end - file.file_from_offset()).min(file.read_position());
        Some((file, limit))
    }

    /// The message of the record a consume queue unit points at (`offset`, `size`), checked
    /// and decompressed as [`CommitLog::read_message`]: `Ok(None)` when its segment is gone or
    /// the bytes are not readable yet, a [`StoreError::CorruptRecord`] when they are there but
    /// are not a whole message record starting at `offset`.
    pub fn message_at(&self, offset: i64, size: i32) -> Result<Option<MessageExt>> {
        let Some(file) = self.queue.find_by_offset(offset) else {
            return Ok(None);
        };
        let Some(data) = file.read(offset - file.file_from_offset(), i64::from(size)) else {
            return Ok(None);
        };
        match check_record_at(data, offset, false) {
            RecordCheck::Message(d) if d.total_size == size => {
                self.read_message(&file, &d, data).map(Some)
            }
            RecordCheck::Message(d) => Err(StoreError::corrupt_record(
                file.path(),
                offset,
                format!(
                    "a consume queue unit gives it {size} bytes but the record holds {}",
                    d.total_size
                ),
            )),
            RecordCheck::Blank { .. } => Err(StoreError::corrupt_record(
                file.path(),
                offset,
                "a consume queue unit points at the end-of-file blank record",
            )),
            RecordCheck::Invalid { reason, .. } => Err(StoreError::corrupt_record(
                file.path(),
                offset,
                format!("a consume queue unit points at it, but it is not a message ({reason})"),
            )),
        }
    }

    /// STORETIMESTAMP of the record at `offset` (`pickupStoreTimestamp`), -1 if unreadable.
    pub fn store_timestamp_at(&self, offset: i64, size: i32) -> i64 {
        if offset < self.min_offset() || offset + i64::from(size) > self.max_offset() {
            return -1;
        }
        let Some(file) = self.queue.find_by_offset(offset) else {
            return -1;
        };
        let Some(head) = file.read(offset - file.file_from_offset(), 80.min(i64::from(size)))
        else {
            return -1;
        };
        if head.len() < crate::format::SYSFLAG_POSITION + 4 {
            return -1;
        }
        let sys_flag = crate::format::be_i32(head, crate::format::SYSFLAG_POSITION);
        let at = crate::format::BORN_HOST_POSITION
            + if sys_flag & sysflag::BORNHOST_V6 != 0 {
                20
            } else {
                8
            };
        if head.len() < at + 8 {
            return -1;
        }
        crate::format::be_i64(head, at)
    }
}
