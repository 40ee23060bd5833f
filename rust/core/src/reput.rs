//! Dispatch ("reput", STORE_SPEC §7): reads committed records from the commitlog and builds the
//! consume queues and index files from them. One call does one chunk; the service loop lives
//! in Python (`rmqstore._services.ReputMessageService`).

use std::sync::Arc;

use crate::commitlog::CommitLog;
use crate::consume_queue::ConsumeQueue;
use crate::consume_queue_store::ConsumeQueueStore;
use crate::error::Result;
use crate::index::IndexService;
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

/// Which dispatchers a pass over the commitlog runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Targets {
    Both,
    ConsumeQueues,
    Index,
}

/// Builds the consume queue unit and/or index keys of one record (`doDispatch`).
fn dispatch_one(
    d: &RecordView<'_>,
    cqs: &ConsumeQueueStore,
    index: Option<&IndexService>,
    cache: &mut CqCache,
    targets: Targets,
) -> Result<()> {
    let topic = String::from_utf8_lossy(d.topic);
    let props = DispatchProps::scan(d.properties);
    let tx = d.transaction_type();
    if targets != Targets::Index
        && (tx == sysflag::TRANSACTION_NOT_TYPE || tx == sysflag::TRANSACTION_COMMIT_TYPE)
    {
        cache.put(cqs, &topic, d, tags_code(props.tags))?;
    }
    if targets != Targets::ConsumeQueues {
        if let Some(index) = index {
            index.build_index(
                &topic,
                props.keys,
                props.uniq_key,
                d.physical_offset,
                d.store_timestamp,
                d.sys_flag,
            )?;
        }
    }
    Ok(())
}

/// Confirmed bytes from which dispatch builds consume queues and index files on two threads at
/// once (each pass parses the records itself; below this a second thread is not worth starting).
pub const PARALLEL_DISPATCH_BYTES: i64 = 4 * 1024 * 1024;

/// Dispatches from `*from` up to the confirm offset, at most about `max_bytes` of records. A
/// large backlog is dispatched by two threads, one building consume queues and one building the
/// index, over the same records; both stop at the same record, so the offset moves once.
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
    let start = *from;
    let mut step = if index.is_some() && (end - start).min(max_bytes) >= PARALLEL_DISPATCH_BYTES {
        let run = |targets: Targets| {
            let mut at = start;
            pass(commitlog, cqs, index, &mut at, end, max_bytes, targets).map(|step| (step, at))
        };
        let (cq_pass, index_pass) = std::thread::scope(|s| {
            let index_pass = s.spawn(|| run(Targets::Index));
            let cq_pass = run(Targets::ConsumeQueues);
            let index_pass = index_pass.join().unwrap_or_else(|_| {
                Err(crate::error::StoreError::Internal(
                    "the index dispatch thread panicked".into(),
                ))
            });
            (cq_pass, index_pass)
        });
        let (cq_step, cq_at) = cq_pass?;
        let (_, index_at) = index_pass?;
        // Both passes apply the same stop rule to the same bytes.
        *from = cq_at.min(index_at);
        cq_step
    } else {
        pass(commitlog, cqs, index, from, end, max_bytes, Targets::Both)?
    };
    step.reput_offset = *from;
    step.behind = (commitlog.confirm_offset() - *from).max(0);
    Ok(step)
}

/// One pass over the records in `[*from, end)`, at most about `max_bytes`.
fn pass(
    commitlog: &CommitLog,
    cqs: &ConsumeQueueStore,
    index: Option<&IndexService>,
    from: &mut i64,
    end: i64,
    max_bytes: i64,
    targets: Targets,
) -> Result<ReputStep> {
    let mut step = ReputStep::default();
    let mut cache = CqCache { last: None };
    let file_size = commitlog.queue().file_size();
    'files: while *from < end && step.bytes < max_bytes {
        let Some((file, limit)) = commitlog.read_from(*from, end) else {
            break;
        };
        let pos = *from - file.file_from_offset();
        let Some(data) = file.read(pos, limit - pos) else {
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
            if rest.len() >= 8 {
                let total = be_i32(rest, 0);
                if total > 0 && total as usize <= rest.len() {
                    if let Some(v) = view_record(&rest[..total as usize]) {
                        dispatch_one(&v, cqs, index, &mut cache, targets)?;
                        at += total as usize;
                        *from += i64::from(total);
                        step.bytes += i64::from(total);
                        step.dispatched += 1;
                        continue;
                    }
                }
            }
            match check_record(rest, false) {
                RecordCheck::Message(d) => {
                    // Valid by the full check but not by the view: cannot happen, as both read
                    // the same fields; dispatch it through the view of its own bytes anyway.
                    let Some(v) = view_record(&rest[..d.total_size as usize]) else {
                        break 'files;
                    };
                    dispatch_one(&v, cqs, index, &mut cache, targets)?;
                    let size = d.total_size as usize;
                    at += size;
                    *from += size as i64;
                    step.bytes += size as i64;
                    step.dispatched += 1;
                }
                RecordCheck::Blank { .. } => {
                    let next = file.file_from_offset() + file_size;
                    step.bytes += next - *from;
                    *from = next;
                    continue 'files;
                }
                RecordCheck::Invalid { size, reason } if size > 0 => {
                    log::error!(
                        target: "rmqstore.reput",
                        "[BUG] invalid record at commitlog offset {} ({reason}); skipping {size} bytes",
                        *from
                    );
                    at += size as usize;
                    *from += i64::from(size);
                    step.bytes += i64::from(size);
                }
                RecordCheck::Invalid { reason, .. } => {
                    log::error!(
                        target: "rmqstore.reput",
                        "dispatch stopped: no valid record at commitlog offset {} ({reason})",
                        *from
                    );
                    break 'files;
                }
            }
        }
        if at == 0 {
            break;
        }
    }
    Ok(step)
}
