//! Dispatch ("reput", STORE_SPEC §7): reads committed records from the commitlog and builds the
//! consume queues and index files from them. One call does one chunk; the service loop lives
//! in Python (`rmqstore._services.ReputMessageService`).

use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;

use crate::commitlog::CommitLog;
use crate::consume_queue::ConsumeQueue;
use crate::consume_queue_store::ConsumeQueueStore;
use crate::error::{Result, StoreError};
use crate::index::{IndexBatch, IndexService};
use crate::mapped_file::MappedFile;
use crate::message::{
    be_i32, check_record, sysflag, tags_code, view_record, DispatchProps, RecordCheck, RecordView,
};

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
}

/// The consume queue last written and its tail segment, so runs of one queue skip the table
/// and segment lookups.
struct CqCache {
    last: Option<(Arc<ConsumeQueue>, Option<Arc<MappedFile>>)>,
}

impl CqCache {
    fn put(
        &mut self,
        cqs: &ConsumeQueueStore,
        topic: &str,
        d: &RecordView<'_>,
        tags_code: i64,
    ) -> Result<()> {
        let hit = self
            .last
            .as_ref()
            .is_some_and(|(cq, _)| cq.queue_id() == d.queue_id && cq.topic() == topic);
        if !hit {
            self.last = Some((cqs.find_or_create(topic, d.queue_id)?, None));
        }
        if let Some((cq, tail)) = self.last.as_mut() {
            cq.put_cached(
                tail,
                d.physical_offset,
                d.total_size,
                tags_code,
                d.queue_offset,
            )?;
        }
        Ok(())
    }
}

/// Hints the CPU to fetch what the next records' dispatch reads while this one is dispatched:
/// the head of the record after next (assuming this size), and the tail of the next record
/// (topic and properties; its size was fetched one record earlier). Records are read a few
/// cache lines each, too far apart for the hardware prefetcher to follow.
#[inline]
fn prefetch_next(data: &[u8], this: usize, next: usize) {
    #[cfg(target_arch = "x86_64")]
    let next_tail = if next + 4 <= data.len() {
        let size = be_i32(data, next).max(0) as usize;
        (next + size).saturating_sub(128)
    } else {
        usize::MAX
    };
    #[cfg(target_arch = "x86_64")]
    for at in [
        next + (next - this),
        next_tail,
        next_tail.saturating_add(64),
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

/// Index keys are put this many messages at a time (their slot misses overlap).
const INDEX_BATCH: usize = 16;
/// Messages per batch handed to the index thread.
const INDEX_HANDOFF: usize = 256;

/// Where a pass's index keys go.
enum IndexOut<'a> {
    None,
    /// Put on this thread.
    Inline(&'a IndexService),
    /// Hashed here, put by the index thread.
    Channel(SyncSender<IndexBatch>),
}

/// The dispatchers of one pass (`doDispatch` for each record).
struct Dispatcher<'a> {
    cqs: &'a ConsumeQueueStore,
    index: IndexOut<'a>,
    cache: CqCache,
    batch: IndexBatch,
}

impl Dispatcher<'_> {
    fn record(&mut self, d: &RecordView<'_>) -> Result<()> {
        let topic = String::from_utf8_lossy(d.topic);
        let props = DispatchProps::scan(d.properties);
        let tx = d.transaction_type();
        if tx == sysflag::TRANSACTION_NOT_TYPE || tx == sysflag::TRANSACTION_COMMIT_TYPE {
            self.cache.put(self.cqs, &topic, d, tags_code(props.tags))?;
        }
        if matches!(self.index, IndexOut::None) {
            return Ok(());
        }
        self.batch.add(
            &topic,
            props.keys,
            props.uniq_key,
            d.physical_offset,
            d.store_timestamp,
            d.sys_flag,
        );
        match &self.index {
            IndexOut::Inline(index) if self.batch.len() >= INDEX_BATCH => {
                index.build_batch(&mut self.batch)
            }
            IndexOut::Channel(out) if self.batch.len() >= INDEX_HANDOFF => out
                .send(std::mem::take(&mut self.batch))
                .map_err(|_| StoreError::Internal("the index dispatch thread stopped".into())),
            _ => Ok(()),
        }
    }

    /// Puts (or hands over) what is still batched.
    fn finish(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        match &self.index {
            IndexOut::Inline(index) => index.build_batch(&mut self.batch),
            IndexOut::Channel(out) => out
                .send(std::mem::take(&mut self.batch))
                .map_err(|_| StoreError::Internal("the index dispatch thread stopped".into())),
            IndexOut::None => Ok(()),
        }
    }
}

/// Confirmed bytes from which dispatch hands index building to a second thread (below this a
/// second thread is not worth starting).
pub const PARALLEL_DISPATCH_BYTES: i64 = 4 * 1024 * 1024;

/// Dispatches from `*from` up to the confirm offset, at most about `max_bytes` of records. For a
/// large backlog this thread parses the records, builds the consume queues and hashes the index
/// keys, and a second thread puts the keys into the index; the offset moves once both are done.
pub fn reput(
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
    let mut step = match index {
        Some(index) if (end - *from).min(max_bytes) >= PARALLEL_DISPATCH_BYTES => {
            let (out, batches) = sync_channel::<IndexBatch>(8);
            let mut at = *from;
            let (parsed, indexed) = std::thread::scope(|s| {
                let indexer = s.spawn(move || -> Result<()> {
                    for mut batch in batches {
                        index.build_batch(&mut batch)?;
                    }
                    Ok(())
                });
                let parsed = pass(
                    commitlog,
                    cqs,
                    IndexOut::Channel(out),
                    &mut at,
                    end,
                    max_bytes,
                );
                let indexed = indexer.join().unwrap_or_else(|_| {
                    Err(StoreError::Internal(
                        "the index dispatch thread panicked".into(),
                    ))
                });
                (parsed, indexed)
            });
            // The index thread's own error explains a failed hand-over best.
            indexed?;
            let step = parsed?;
            *from = at;
            step
        }
        Some(index) => pass(
            commitlog,
            cqs,
            IndexOut::Inline(index),
            from,
            end,
            max_bytes,
        )?,
        None => pass(commitlog, cqs, IndexOut::None, from, end, max_bytes)?,
    };
    step.reput_offset = *from;
    step.behind = (commitlog.confirm_offset() - *from).max(0);
    Ok(step)
}

/// One pass over the records in `[*from, end)`, at most about `max_bytes`. `*from` moves only
/// once everything up to the new position is built, so a failed pass is simply redone (consume
/// queue units and index keys already built are skipped).
fn pass(
    commitlog: &CommitLog,
    cqs: &ConsumeQueueStore,
    index: IndexOut<'_>,
    from: &mut i64,
    end: i64,
    max_bytes: i64,
) -> Result<ReputStep> {
    let mut step = ReputStep::default();
    let mut dispatcher = Dispatcher {
        cqs,
        index,
        cache: CqCache { last: None },
        batch: IndexBatch::default(),
    };
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
            let total = if rest.len() >= 8 { be_i32(rest, 0) } else { 0 };
            let view = (total > 0 && total as usize <= rest.len())
                .then(|| view_record(&rest[..total as usize]))
                .flatten();
            if let Some(v) = view {
                prefetch_next(data, at, at + total as usize);
                dispatcher.record(&v)?;
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
    *from = pos;
    Ok(step)
}
