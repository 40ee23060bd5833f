//! Dispatch ("reput", STORE_SPEC §7): reads committed records from the commitlog and builds the
//! consume queues and index files from them. One call does one chunk; the service loop lives
//! in Python (`rmqstore._services.ReputMessageService`).

use std::sync::Arc;

use crate::commitlog::CommitLog;
use crate::consume_queue::ConsumeQueue;
use crate::consume_queue_store::ConsumeQueueStore;
use crate::error::Result;
use crate::index::IndexService;
use crate::message::{check_record, sysflag, tags_code, DecodedRecord, DispatchProps, RecordCheck};

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

/// The consume queue last written, so runs of one queue skip the table lookup.
struct CqCache {
    last: Option<Arc<ConsumeQueue>>,
}

impl CqCache {
    fn get(
        &mut self,
        cqs: &ConsumeQueueStore,
        topic: &str,
        queue_id: i32,
    ) -> Result<Arc<ConsumeQueue>> {
        if let Some(cq) = &self.last {
            if cq.queue_id() == queue_id && cq.topic() == topic {
                return Ok(cq.clone());
            }
        }
        let cq = cqs.find_or_create(topic, queue_id)?;
        self.last = Some(cq.clone());
        Ok(cq)
    }
}

/// Builds the consume queue unit and index keys of one record (`doDispatch`).
fn dispatch_one(
    d: &DecodedRecord<'_>,
    cqs: &ConsumeQueueStore,
    index: Option<&IndexService>,
    cache: &mut CqCache,
) -> Result<()> {
    let topic = d.topic_str();
    let props = DispatchProps::scan(d.properties);
    let tx = d.transaction_type();
    if tx == sysflag::TRANSACTION_NOT_TYPE || tx == sysflag::TRANSACTION_COMMIT_TYPE {
        let cq = cache.get(cqs, &topic, d.queue_id)?;
        cq.put(
            d.physical_offset,
            d.total_size,
            tags_code(props.tags),
            d.queue_offset,
        )?;
    }
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
    Ok(())
}

/// Dispatches from `*from` up to the confirm offset, at most about `max_bytes` of records.
pub fn reput(
    commitlog: &CommitLog,
    cqs: &ConsumeQueueStore,
    index: Option<&IndexService>,
    from: &mut i64,
    max_bytes: i64,
) -> Result<ReputStep> {
    let mut step = ReputStep::default();
    let mut cache = CqCache { last: None };
    let end = commitlog.confirm_offset();
    let min = commitlog.min_offset();
    if min >= 0 && *from < min {
        // Dispatch fell behind expiry: nothing below the minimum exists any more.
        *from = min;
    }
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
            match check_record(&data[at..], false) {
                RecordCheck::Message(d) => {
                    dispatch_one(&d, cqs, index, &mut cache)?;
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
    step.reput_offset = *from;
    step.behind = (commitlog.confirm_offset() - *from).max(0);
    Ok(step)
}
