//! Dispatch ("reput", docs/architecture.md#dispatch): reads committed records from the commitlog
//! and hands each message to the store's sinks, which build the consume queues and index files from
//! them. One call does one chunk; the service loop lives in Python
//! (`rmqstore._services.ReputMessageService`).
//!
//! - `reput.rs`: the loop (parsing each record once, batching, the second writing thread);
//! - `sink.rs`: the sinks (`CommitLogDispatcher`): consume queue and index;
//! - `gaps.rs`: re-indexing keys missing between index files, at open.

mod gaps;
mod reput;
mod sink;

pub(crate) use gaps::{file_holds_message, fill_index_gaps};
pub(crate) use reput::reput;
pub(crate) use sink::{store_sinks, StoreSinks};

use crate::format::{be_i32, view_record, RecordView};

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

/// Confirmed bytes from which dispatch hands index building to a second thread (below this a
/// second thread is not worth starting).
pub const PARALLEL_DISPATCH_BYTES: i64 = 4 * 1024 * 1024;

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
