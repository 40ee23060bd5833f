//! The read path: `getMessage` with tag filtering and batch limits, offsets by time
//! (docs/architecture.md#reads), and bulk reads into Arrow columns.
//!
//! - `filter.rs`: subscription expressions ([`TagFilter`]).
//! - `get_message.rs`: `getMessage` over one queue, its statuses and batch limits.
//! - `by_time.rs`: `getOffsetInQueueByTime`.
//! - `batch.rs`: `read_batch`, a bulk read of one queue (on two threads when large).
//! - `columns.rs`: the Arrow column vectors a bulk read fills ([`BatchColumns`]).
//! - `mask.rs`: which columns a bulk read builds ([`ColumnMask`], [`ReadRequest`]).
//! - `row_filter.rs`: which rows a bulk read builds ([`RowFilter`]: tags, store times).
//! - `vec_pool.rs`: the column vectors of dropped batches, kept for the next reads.

mod batch;
mod by_time;
mod columns;
mod filter;
mod get_message;
mod mask;
mod row_filter;
pub(crate) mod vec_pool;

pub use crate::file::segment_view::SegmentView;
pub use batch::{set_parallel_reads, ParallelReads, PARALLEL_READ_UNITS};
pub use by_time::TimeBoundary;
pub use columns::{BatchColumns, BodyBuffer, ColumnVec};
pub use filter::TagFilter;
pub use get_message::{GetMessageResult, GetMessageStatus};
pub use mask::{Column, ColumnMask, ReadRequest};
pub use row_filter::{RowFilter, Scanned};

pub(crate) use batch::{read_batch, ReadOptions};
pub(crate) use columns::VIEW_BUFFER_MAX;

/// How a bulk read gives the bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyLayout {
    /// Copied into one buffer (Arrow `binary`: i32 offsets and the bytes).
    Binary,
    /// Arrow `binary_view`: 16-byte views pointing into the mapped segments (bodies of up to
    /// 12 bytes inside their view, decompressed bodies into an owned buffer).
    View,
}
pub(crate) use by_time::offset_by_time;
pub(crate) use get_message::{get_message, PullLimits};
