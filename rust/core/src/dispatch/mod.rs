//! Dispatch ("reput", STORE_SPEC §7): reads committed records from the commitlog and builds the
//! consume queues and index files from them. One call does one chunk; the service loop lives
//! in Python (`rmqstore._services.ReputMessageService`).

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use crate::commitlog::{queue_fields_are_legal, queue_position_is_legal, CommitLog};
use crate::error::{Result, StoreError};
use crate::file::mapped_file::MappedFile;
use crate::format::{
    be_i32, check_record, sysflag, tags_code, topic_is_legal, view_record, DispatchProps,
    RecordCheck, RecordView,
};
use crate::index::{IndexBatch, IndexService};
use crate::queue::consume_queue::ConsumeQueue;
use crate::queue::store::ConsumeQueueStore;

/// What one dispatch call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReputStep {
    /// Messages dispatched.
    pub dispatched: u64,
    /// Commitlog bytes consumed (records and blank records).
    pub bytes: i64,
    /// Where the next call starts.
    pub reput_offset: i64,
    /// Confirmed bytes not dispatched yet.
    pub behind: i64,
    /// Store timestamp of the last message dispatched (0 if none).
    pub last_store_timestamp: i64,
    /// Records passed over because their topic or queue id is not one a put accepts (damaged
    /// bytes outside the body CRC): they get no consume queue unit and no index entry.
    pub skipped: u64,
}

/// Consume queue units of dispatched messages waiting to be written, in commitlog order,
/// grouped in runs of one queue (the queue is looked up once per run).
#[derive(Default)]
struct CqBatch {
    /// Each run's queue and the end of its units in `units`.
    runs: Vec<(Arc<ConsumeQueue>, usize)>,
    /// Phy offset, record size, tags code, queue offset.
    units: Vec<(i64, i32, i64, i64)>,
}

/// What one hand-over carries: consume queue units, then index keys, of the same messages.
#[derive(Default)]
struct DispatchBatch {
    cq: CqBatch,
    index: IndexBatch,
    /// Messages in the batch.
    messages: usize,
}

/// Writes batches in order: consume queue units (keeping the tail segment of the queue last
/// written between runs and batches), then index keys.
struct Applier<'a> {
    index: Option<&'a IndexService>,
    tail: Option<(Arc<ConsumeQueue>, Option<Arc<MappedFile>>)>,
}

impl Applier<'_> {
    fn apply(&mut self, batch: &mut DispatchBatch) -> Result<()> {
        let mut start = 0;
        for (cq, end) in batch.cq.runs.drain(..) {
            if !self.tail.as_ref().is_some_and(|(t, _)| Arc::ptr_eq(t, &cq)) {
                self.tail = Some((cq, None));
            }
            if let Some((cq, tail)) = self.tail.as_mut() {
                for &(phy, size, tags, queue_offset) in &batch.cq.units[start..end] {
                    cq.put_cached(tail, phy, size, tags, queue_offset)?;
                }
            }
            start = end;
        }
        batch.cq.units.clear();
        if let Some(index) = self.index {
            index.build_batch(&mut batch.index)?;
        }
        batch.messages = 0;
        Ok(())
    }
}

/// Hints the CPU to fetch what the next records' dispatch reads while this one is dispatched:
/// the head of the record after next (assuming this size), the whole head (up to 128 bytes:
/// sysflag, hosts, timestamps, body length span two or three cache lines) of the record
/// `PREFETCH_AHEAD` records on, and the tail of the next record (topic and properties; its
/// size was fetched one record earlier). Records are read a few cache lines each, too far
/// apart for the hardware prefetcher to follow. (Without the head's later lines, `perf` put
/// 40 % of the parsing loop on the load of the sysflag and body length.)
#[inline]
fn prefetch_next(data: &[u8], this: usize, next: usize) {
    #[cfg(target_arch = "x86_64")]
    let next_tail = if next + 4 <= data.len() {
        let size = be_i32(data, next).max(0) as usize;
        (next + size).saturating_sub(128)
    } else {
        usize::MAX
    };
    // Further ahead, assuming records of this one's size: DRAM latency is several records'
    // worth of work.
    #[cfg(target_arch = "x86_64")]
    let step = next - this;
    #[cfg(target_arch = "x86_64")]
    for at in [
        next + step,
        next + PREFETCH_AHEAD * step,
        next + PREFETCH_AHEAD * step + 64,
        next + PREFETCH_AHEAD * step + 112,
        next_tail,
        next_tail.saturating_add(64),
        (next + PREFETCH_AHEAD * step).saturating_sub(128),
        (next + PREFETCH_AHEAD * step).saturating_sub(64),
    ] {
        if at < data.len() {
            // SAFETY: the address is inside `data`; a prefetch never faults.
            unsafe {
                std::arch::x86_64::_mm_prefetch(
                    data.as_ptr().add(at).cast::<i8>(),
                    std::arch::x86_64::_MM_HINT_T0,
                );
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, this, next);
}

/// How many records ahead dispatch prefetches (guessing their size from the current one).
const PREFETCH_AHEAD: usize = 4;

/// Messages applied at a time on the dispatching thread (their index slot misses overlap).
const INLINE_BATCH: usize = 16;
/// Messages per batch handed to the second thread.
const HANDOFF_BATCH: usize = 256;

/// Where a pass's batches go.
enum Sink<'a> {
    /// Applied on this thread.
    Inline(Applier<'a>),
    /// Applied by the second thread, which sends the emptied batches back for reuse.
    Channel(SyncSender<DispatchBatch>, Receiver<DispatchBatch>),
}

/// The dispatchers of one pass (`doDispatch` for each record): this thread parses each record
/// once and queues its consume queue unit and hashed index keys; the sink writes them.
struct Dispatcher<'a> {
    cqs: &'a ConsumeQueueStore,
    indexing: bool,
    /// Index TAGS values too (RocketMQ 5.4+).
    index_tags: bool,
    sink: Sink<'a>,
    batch: DispatchBatch,
    /// The topic and queue id of the current run, as raw bytes (UTF-8 decoded once per run).
    run_topic: Vec<u8>,
    run_queue: Option<i32>,
    topic: String,
    /// `topic` is a legal topic (checked once per run).
    run_topic_legal: bool,
    /// Records skipped for an illegal topic or queue id.
    skipped: u64,
    /// The last TAGS value and its code (tags repeat from message to message).
    last_tags: Vec<u8>,
    last_tags_code: i64,
}

impl<'a> Dispatcher<'a> {
    fn new(cqs: &'a ConsumeQueueStore, index: Option<&IndexService>, sink: Sink<'a>) -> Self {
        Dispatcher {
            cqs,
            indexing: index.is_some(),
            index_tags: index.is_some_and(IndexService::index_tags),
            sink,
            batch: DispatchBatch::default(),
            run_topic: Vec::new(),
            run_queue: None,
            topic: String::new(),
            run_topic_legal: false,
            skipped: 0,
            last_tags: Vec::new(),
            last_tags_code: 0,
        }
    }

    fn tags_code(&mut self, tags: Option<&str>) -> i64 {
        let Some(t) = tags else { return 0 };
        if t.as_bytes() != self.last_tags.as_slice() {
            self.last_tags_code = tags_code(Some(t));
            self.last_tags.clear();
            self.last_tags.extend_from_slice(t.as_bytes());
        }
        self.last_tags_code
    }

    fn record(&mut self, d: &RecordView<'_>, at: i64) -> Result<()> {
        let new_topic = d.topic != self.run_topic.as_slice();
        if new_topic {
            self.run_topic.clear();
            self.run_topic.extend_from_slice(d.topic);
            self.topic = String::from_utf8_lossy(d.topic).into_owned();
            // Invalid UTF-8 became U+FFFD, which no legal topic holds.
            self.run_topic_legal = topic_is_legal(&self.topic);
            self.run_queue = None;
        }
        // The topic and queue id name a consume queue folder, the queue offset a position in
        // it, the physical offset the record itself: a record whose fields a put would never
        // write (`../x`, `/abs`, a negative queue id, a queue offset past the largest, another
        // record's offset) is damaged, and none of its fields becomes a path or a unit.
        if !self.run_topic_legal
            || !queue_position_is_legal(d.queue_id, d.queue_offset)
            || d.physical_offset != at
        {
            self.skipped += 1;
            log::error!(
                target: "rmqstore.reput",
                "the record at commitlog offset {at} is damaged: its topic {:?}, queue id {}, \
                 queue offset {} or physical offset {} is not one a put writes (those bytes are \
                 outside the body CRC); it is not dispatched to a consume queue or the index",
                self.topic,
                d.queue_id,
                d.queue_offset,
                d.physical_offset
            );
            return Ok(());
        }
        let props = DispatchProps::scan(d.properties);
        let tx = d.transaction_type();
        if tx == sysflag::TRANSACTION_NOT_TYPE || tx == sysflag::TRANSACTION_COMMIT_TYPE {
            let cq = &mut self.batch.cq;
            if self.run_queue != Some(d.queue_id) || cq.runs.is_empty() {
                self.run_queue = Some(d.queue_id);
                cq.runs
                    .push((self.cqs.find_or_create(&self.topic, d.queue_id)?, 0));
            }
            let code = self.tags_code(props.tags);
            let cq = &mut self.batch.cq;
            cq.units
                .push((d.physical_offset, d.total_size, code, d.queue_offset));
            if let Some(run) = cq.runs.last_mut() {
                run.1 = cq.units.len();
            }
        }
        if self.indexing {
            self.batch.index.add(
                &self.topic,
                props.keys,
                props.uniq_key,
                props.tags.filter(|_| self.index_tags),
                d.physical_offset,
                d.store_timestamp,
                d.sys_flag,
            );
        }
        self.batch.messages += 1;
        match &mut self.sink {
            Sink::Inline(applier) if self.batch.messages >= INLINE_BATCH => {
                applier.apply(&mut self.batch)
            }
            Sink::Channel(out, back) if self.batch.messages >= HANDOFF_BATCH => {
                self.batch.index.hash_pending();
                let next = back.try_recv().unwrap_or_default();
                out.send(std::mem::replace(&mut self.batch, next))
                    .map_err(|_| StoreError::Internal("the dispatch writer thread stopped".into()))
            }
            _ => Ok(()),
        }
    }

    /// Writes (or hands over) what is still batched.
    fn finish(&mut self) -> Result<()> {
        if self.batch.messages == 0 {
            return Ok(());
        }
        match &mut self.sink {
            Sink::Inline(applier) => applier.apply(&mut self.batch),
            Sink::Channel(out, _) => {
                self.batch.index.hash_pending();
                out.send(std::mem::take(&mut self.batch))
                    .map_err(|_| StoreError::Internal("the dispatch writer thread stopped".into()))
            }
        }
    }
}

/// Confirmed bytes from which dispatch hands index building to a second thread (below this a
/// second thread is not worth starting).
pub const PARALLEL_DISPATCH_BYTES: i64 = 4 * 1024 * 1024;

/// Dispatches from `*from` up to the confirm offset, at most about `max_bytes` of records. For a
/// large backlog this thread parses the records, builds the consume queues and hashes the index
/// keys, and a second thread puts the keys into the index; the offset moves once both are done.
pub(crate) fn reput(
    commitlog: &CommitLog,
    cqs: &ConsumeQueueStore,
    index: Option<&IndexService>,
    from: &mut i64,
    max_bytes: i64,
) -> Result<ReputStep> {
    let min = commitlog.min_offset();
    if min >= 0 && *from < min {
        // Dispatch fell behind expiry: nothing below the minimum exists any more.
        *from = min;
    }
    let end = commitlog.confirm_offset();
    let parallel = index.is_some() && (end - *from).min(max_bytes) >= PARALLEL_DISPATCH_BYTES;
    // Parsing and writing on this thread (a small backlog, or no second thread to be had).
    let inline = |from: &mut i64| {
        let sink = Sink::Inline(Applier { index, tail: None });
        pass(
            commitlog,
            Dispatcher::new(cqs, index, sink),
            from,
            end,
            max_bytes,
        )
    };
    let mut step = if parallel {
        let (out, batches) = sync_channel::<DispatchBatch>(8);
        let (give_back, reuse) = sync_channel::<DispatchBatch>(8);
        let mut at = *from;
        let (parsed, written) = std::thread::scope(|s| {
            let writer = std::thread::Builder::new().spawn_scoped(s, move || -> Result<()> {
                let mut applier = Applier { index, tail: None };
                for mut batch in batches {
                    applier.apply(&mut batch)?;
                    // Emptied, with its capacity: the parsing thread refills it.
                    let _ = give_back.try_send(batch);
                }
                Ok(())
            });
            let writer = match writer {
                Ok(w) => w,
                Err(e) => {
                    log::warn!(
                        target: "rmqstore.reput",
                        "cannot start the dispatch writer thread ({e}); dispatching on this one"
                    );
                    return (inline(&mut at), Ok(()));
                }
            };
            let sink = Sink::Channel(out, reuse);
            let parsed = pass(
                commitlog,
                Dispatcher::new(cqs, index, sink),
                &mut at,
                end,
                max_bytes,
            );
            let written = writer.join().unwrap_or_else(|_| {
                Err(StoreError::Internal(
                    "the dispatch writer thread panicked".into(),
                ))
            });
            (parsed, written)
        });
        // The writer thread's own error explains a failed hand-over best.
        written?;
        let step = parsed?;
        *from = at;
        step
    } else {
        inline(from)?
    };
    step.reput_offset = *from;
    step.behind = (commitlog.confirm_offset() - *from).max(0);
    Ok(step)
}

/// The message record at the start of `rest`, viewed in place, if one whole record is there
/// (its TOTALSIZE within `rest`); anything else (a blank record, damage, the end) is `None`.
#[inline(always)]
fn view_next(rest: &[u8]) -> Option<RecordView<'_>> {
    let total = if rest.len() >= 8 { be_i32(rest, 0) } else { 0 };
    if total <= 0 || total as usize > rest.len() {
        return None;
    }
    view_record(&rest[..total as usize])
}

/// One pass over the records in `[*from, end)`, at most about `max_bytes`. `*from` moves only
/// once everything up to the new position is built, so a failed pass is simply redone (consume
/// queue units and index keys already built are skipped).
fn pass(
    commitlog: &CommitLog,
    mut dispatcher: Dispatcher<'_>,
    from: &mut i64,
    end: i64,
    max_bytes: i64,
) -> Result<ReputStep> {
    let mut step = ReputStep::default();
    let file_size = commitlog.queue().file_size();
    let mut pos = *from;
    'files: while pos < end && step.bytes < max_bytes {
        let Some((file, limit)) = commitlog.read_from(pos, end) else {
            break;
        };
        let in_file = pos - file.file_from_offset();
        let Some(data) = file.read(in_file, limit - in_file) else {
            break;
        };
        let mut at = 0usize;
        while at < data.len() {
            if step.bytes >= max_bytes {
                break 'files;
            }
            // Fast path: a whole message record viewed in place; anything else goes through the
            // full check for its exact outcome.
            let rest = &data[at..];
            if let Some(v) = view_next(rest) {
                let total = v.total_size;
                prefetch_next(data, at, at + total as usize);
                dispatcher.record(&v, pos)?;
                step.last_store_timestamp = v.store_timestamp;
                at += total as usize;
                pos += i64::from(total);
                step.bytes += i64::from(total);
                step.dispatched += 1;
                continue;
            }
            match check_record(rest, false) {
                RecordCheck::Blank { .. } => {
                    let next = file.file_from_offset() + file_size;
                    step.bytes += next - pos;
                    pos = next;
                    continue 'files;
                }
                RecordCheck::Invalid { size, reason } if size > 0 => {
                    log::error!(
                        target: "rmqstore.reput",
                        "[BUG] invalid record at commitlog offset {pos} ({reason}); skipping {size} bytes"
                    );
                    at += size as usize;
                    pos += i64::from(size);
                    step.bytes += i64::from(size);
                }
                other => {
                    // A record the full check accepts always has a view; anything else stops.
                    let reason = match other {
                        RecordCheck::Invalid { reason, .. } => reason,
                        _ => "record fields disagree",
                    };
                    log::error!(
                        target: "rmqstore.reput",
                        "dispatch stopped: no valid record at commitlog offset {pos} ({reason})"
                    );
                    break 'files;
                }
            }
        }
        if at == 0 {
            break;
        }
    }
    dispatcher.finish()?;
    step.skipped = dispatcher.skipped;
    *from = pos;
    Ok(step)
}

/// Records after a gap's first one read before a gap of messages without keys is taken for
/// what it is. RocketMQ loses index entries only when a file fills within the millisecond it
/// was made in, so every lost entry belongs to a message dispatched within one millisecond of
/// the gap's start: a few thousand records at most, keyed ones among the first. A stretch whose
/// first records have no keys is an ordinary gap (messages without keys between two files),
/// however long: it is not read to its end at every open.
pub const GAP_SCAN_RECORDS: usize = 20_000;

/// Re-indexes what the index files lack between neighbouring files ([`IndexService::gaps`]):
/// reads the messages of each gap from the commitlog and puts the entries no file holds into
/// files inserted between the neighbours ([`IndexService::fill_gap`]). Gaps of messages
/// without keys (the usual case) write nothing, and are read no further than
/// [`GAP_SCAN_RECORDS`] records (plus their last message). Returns how many entries were
/// written.
///
/// RocketMQ can leave such a gap: it names a new index file after the current millisecond and
/// opens an existing file of that name, so when two files are made within one millisecond the
/// second overwrites the first and the first's keys are lost, though the store was closed
/// cleanly. Dispatch never sees them again (it resumes after the last indexed message).
pub(crate) fn fill_index_gaps(commitlog: &CommitLog, index: &IndexService) -> Result<usize> {
    let min = commitlog.min_offset();
    let end = commitlog.confirm_offset();
    if min < 0 || end <= min {
        return Ok(0);
    }
    let mut written = 0;
    for gap in index.gaps(min) {
        if gap.from >= end {
            continue;
        }
        let to = gap.to.min(end - 1);
        let mut batch = IndexBatch::default();
        let tags = index.index_tags();
        let complete = scan_for_index(
            commitlog,
            gap.from,
            to,
            end,
            tags,
            GAP_SCAN_RECORDS,
            &mut batch,
        );
        if !complete {
            log::debug!(
                target: "rmqstore.reput",
                "index gap from commitlog offset {} to {to}: the first {GAP_SCAN_RECORDS} \
                 records have no keys, so no entry was lost there; not read further",
                gap.from
            );
            // The gap's last message may still lack its first keys (they went to the file
            // before the one after the gap).
            scan_for_index(commitlog, to, to, end, tags, usize::MAX, &mut batch);
        }
        written += index.fill_gap(&gap, &mut batch)?;
    }
    Ok(written)
}

/// Adds to `batch` the index keys of the records that start in `[from, to]` (reading no further
/// than `end`), as dispatch would. Returns false when it stopped after `limit` records past the
/// first because none of them has keys. A position that holds no valid record ends the scan
/// (logged): what was read so far is kept.
fn scan_for_index(
    commitlog: &CommitLog,
    from: i64,
    to: i64,
    end: i64,
    index_tags: bool,
    limit: usize,
    batch: &mut IndexBatch,
) -> bool {
    let file_size = commitlog.queue().file_size();
    let mut pos = from;
    let mut topic = String::new();
    let mut raw_topic: Vec<u8> = Vec::new();
    let mut records = 0usize;
    let mut keyed = false;
    'files: while pos <= to && pos < end {
        let Some((file, limit_in_file)) = commitlog.read_from(pos, end) else {
            break;
        };
        let in_file = pos - file.file_from_offset();
        let Some(data) = file.read(in_file, limit_in_file - in_file) else {
            break;
        };
        let mut at = 0usize;
        while at < data.len() && pos <= to {
            let rest = &data[at..];
            if let Some(v) = view_next(rest) {
                let total = v.total_size;
                if v.topic != raw_topic.as_slice() {
                    raw_topic.clear();
                    raw_topic.extend_from_slice(v.topic);
                    topic = String::from_utf8_lossy(v.topic).into_owned();
                }
                let props = DispatchProps::scan(v.properties);
                if pos != from && !keyed {
                    keyed = props.uniq_key.is_some()
                        || props
                            .keys
                            .is_some_and(|k| k.split(' ').any(|x| !x.is_empty()))
                        || (index_tags && props.tags.is_some());
                }
                // A damaged record dispatch passes over is not indexed here either.
                if v.physical_offset == pos
                    && queue_fields_are_legal(v.topic, v.queue_id, v.queue_offset)
                {
                    batch.add(
                        &topic,
                        props.keys,
                        props.uniq_key,
                        props.tags.filter(|_| index_tags),
                        v.physical_offset,
                        v.store_timestamp,
                        v.sys_flag,
                    );
                }
                at += total as usize;
                pos += i64::from(total);
                records += 1;
                if !keyed && records > limit {
                    return false;
                }
                continue;
            }
            if let RecordCheck::Blank { .. } = check_record(rest, false) {
                pos = file.file_from_offset() + file_size;
                continue 'files;
            }
            log::warn!(
                target: "rmqstore.reput",
                "re-indexing stopped: no valid record at commitlog offset {pos}"
            );
            break 'files;
        }
        if at == 0 {
            break;
        }
    }
    true
}
