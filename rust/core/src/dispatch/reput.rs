//! The reput loop: one pass over committed records, each parsed once and offered to every sink
//! ([`DispatchSink`]); for a large backlog the sinks' batches are written on a second thread.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use super::sink::{DispatchSink, Dispatched};
use super::{view_next, ReputStep, PARALLEL_DISPATCH_BYTES};
use crate::commitlog::{queue_position_is_legal, CommitLog};
use crate::error::{Result, StoreError};
use crate::format::{be_i32, check_record, topic_is_legal, DispatchProps, RecordCheck, RecordView};

/// What one hand-over carries: each sink's batch, of the same messages.
#[derive(Default)]
struct DispatchBatch<B> {
    sinks: B,
    /// Messages in the batch.
    messages: usize,
}

/// Writes a batch through every sink, in order.
fn apply<S: DispatchSink>(
    sinks: &S,
    writer: &mut S::Writer,
    batch: &mut DispatchBatch<S::Batch>,
) -> Result<()> {
    sinks.apply(writer, &mut batch.sinks)?;
    batch.messages = 0;
    Ok(())
}

/// Where a pass's batches go.
enum Handoff<S: DispatchSink> {
    /// Applied on this thread.
    Inline(S::Writer),
    /// Applied by the second thread, which sends the emptied batches back for reuse.
    Channel(
        SyncSender<DispatchBatch<S::Batch>>,
        Receiver<DispatchBatch<S::Batch>>,
    ),
}

/// The dispatchers of one pass (`doDispatch` for each record): this thread parses each record
/// once and has each sink queue what it needs; the hand-off writes the batches.
struct Dispatcher<'a, S: DispatchSink> {
    sinks: &'a S,
    handoff: Handoff<S>,
    batch: DispatchBatch<S::Batch>,
    /// The topic of the current run, as raw bytes (UTF-8 decoded once per run).
    run_topic: Vec<u8>,
    /// Counts topic runs (see [`Dispatched::topic_run`]).
    topic_run: u64,
    topic: String,
    /// `topic` is a legal topic (checked once per run).
    run_topic_legal: bool,
    /// Records skipped for an illegal topic or queue id.
    skipped: u64,
}

impl<'a, S: DispatchSink> Dispatcher<'a, S> {
    fn new(sinks: &'a S, handoff: Handoff<S>) -> Self {
        Dispatcher {
            sinks,
            handoff,
            batch: DispatchBatch::default(),
            run_topic: Vec::new(),
            topic_run: 0,
            topic: String::new(),
            run_topic_legal: false,
            skipped: 0,
        }
    }

    fn record(&mut self, d: &RecordView<'_>, at: i64) -> Result<()> {
        let new_topic = d.topic != self.run_topic.as_slice();
        if new_topic {
            self.run_topic.clear();
            self.run_topic.extend_from_slice(d.topic);
            self.topic = String::from_utf8_lossy(d.topic).into_owned();
            // Invalid UTF-8 became U+FFFD, which no legal topic holds.
            self.run_topic_legal = topic_is_legal(&self.topic);
            self.topic_run += 1;
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
        let message = Dispatched {
            record: d,
            topic: &self.topic,
            topic_run: self.topic_run,
            props: &props,
        };
        self.sinks.add(&message, &mut self.batch.sinks)?;
        self.batch.messages += 1;
        match &mut self.handoff {
            Handoff::Inline(writer) if self.batch.messages >= INLINE_BATCH => {
                apply(self.sinks, writer, &mut self.batch)
            }
            Handoff::Channel(out, back) if self.batch.messages >= HANDOFF_BATCH => {
                self.sinks.seal(&mut self.batch.sinks);
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
        match &mut self.handoff {
            Handoff::Inline(writer) => apply(self.sinks, writer, &mut self.batch),
            Handoff::Channel(out, _) => {
                self.sinks.seal(&mut self.batch.sinks);
                out.send(std::mem::take(&mut self.batch))
                    .map_err(|_| StoreError::Internal("the dispatch writer thread stopped".into()))
            }
        }
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

/// Dispatches from `*from` up to the confirm offset, at most about `max_bytes` of records, to
/// `sinks`. For a large backlog (and a sink that wants it: the index) this thread parses the
/// records, builds the consume queues and hashes the index keys, and a second thread writes the
/// batches (the index keys, the consume queue units); the offset moves once both are done.
pub(crate) fn reput<S: DispatchSink>(
    commitlog: &CommitLog,
    sinks: &S,
    from: &mut i64,
    max_bytes: i64,
) -> Result<ReputStep> {
    let min = commitlog.min_offset();
    if min >= 0 && *from < min {
        // Dispatch fell behind expiry: nothing below the minimum exists any more.
        *from = min;
    }
    let end = commitlog.confirm_offset();
    let parallel =
        sinks.wants_writer_thread() && (end - *from).min(max_bytes) >= PARALLEL_DISPATCH_BYTES;
    // Parsing and writing on this thread (a small backlog, or no second thread to be had).
    let inline = |from: &mut i64| {
        let handoff = Handoff::Inline(S::Writer::default());
        pass(
            commitlog,
            Dispatcher::new(sinks, handoff),
            from,
            end,
            max_bytes,
        )
    };
    let mut step = if parallel {
        let (out, batches) = sync_channel::<DispatchBatch<S::Batch>>(8);
        let (give_back, reuse) = sync_channel::<DispatchBatch<S::Batch>>(8);
        let mut at = *from;
        let (parsed, written) = std::thread::scope(|s| {
            let writer = std::thread::Builder::new().spawn_scoped(s, move || -> Result<()> {
                let mut writer = S::Writer::default();
                for mut batch in batches {
                    apply(sinks, &mut writer, &mut batch)?;
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
            let handoff = Handoff::Channel(out, reuse);
            let parsed = pass(
                commitlog,
                Dispatcher::new(sinks, handoff),
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

/// One pass over the records in `[*from, end)`, at most about `max_bytes`. `*from` moves only
/// once everything up to the new position is built, so a failed pass is simply redone (consume
/// queue units and index keys already built are skipped).
fn pass<S: DispatchSink>(
    commitlog: &CommitLog,
    mut dispatcher: Dispatcher<'_, S>,
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
