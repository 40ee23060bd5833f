//! `read_batch`: a bulk read of one queue into Arrow columns, on one thread or, for a large
//! read, two.

use crate::commitlog::CommitLog;
use crate::error::{Result, StoreError};
use crate::format::{body_crc_matches, view_record};
use crate::queue::consume_queue::ConsumeQueue;

use crate::file::segment_view::SegmentView;

use super::columns::{BatchColumns, BodyAt, PropsSplit};
use super::mask::{Column, ColumnMask};
use super::row_filter::RowFilter;

/// Most bytes of bodies (and of any other variable column) one bulk read returns, so that the
/// i32 offsets of the Arrow columns cannot overflow.
pub(crate) const READ_BATCH_MAX_BYTES: usize = 512 * 1024 * 1024;

/// Units from which a bulk read is split over two threads (when a core is idle, see
/// [`ParallelReads`]).
pub const PARALLEL_READ_UNITS: usize = 16 * 1024;

/// When a bulk read of at least [`PARALLEL_READ_UNITS`] units is split over two threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParallelReads {
    /// When a CPU is idle at the time of the call: fewer threads runnable on the machine
    /// (`/proc/loadavg`, the calling thread included) than CPUs this process may use. A helper
    /// thread that would find no free core only makes the caller wait for it (the join), so
    /// both sizes of read take the same path at any moment.
    Auto,
    /// Always (the tests of the two-thread path use it).
    Always,
    /// Never: one thread at every size. The default: on a quiet machine the second thread's
    /// vectors faulted about 138 pages a call at 65,536 rows (CI, test_read_zerocopy), which
    /// the one-thread read does not.
    Never,
}

static PARALLEL_READS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(2);

/// Sets, for the whole process, when bulk reads use a second thread ([`ParallelReads::Never`]
/// by default). Every policy gives the same rows; only the time differs.
pub fn set_parallel_reads(policy: ParallelReads) {
    let v = match policy {
        ParallelReads::Auto => 0,
        ParallelReads::Always => 1,
        ParallelReads::Never => 2,
    };
    PARALLEL_READS.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// Whether a read of [`PARALLEL_READ_UNITS`] or more units takes a second thread now.
fn second_thread_pays() -> bool {
    match PARALLEL_READS.load(std::sync::atomic::Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => cpu_idle(),
    }
}

/// Whether fewer threads are runnable on the machine than this process has CPUs (the fourth
/// field of `/proc/loadavg`: runnable / all, the calling thread among the runnable). Where
/// that cannot be read, yes (the two-thread read of the builds before).
fn cpu_idle() -> bool {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if cpus < 2 {
        return false;
    }
    let Ok(text) = std::fs::read_to_string("/proc/loadavg") else {
        return true;
    };
    match runnable_of_loadavg(&text) {
        Some(runnable) => runnable < cpus,
        None => true,
    }
}

/// The runnable count of a `/proc/loadavg` line (`0.50 0.40 0.30 2/345 6789`).
fn runnable_of_loadavg(text: &str) -> Option<usize> {
    let field = text.split_ascii_whitespace().nth(3)?;
    field.split_once('/')?.0.parse().ok()
}

/// What a bulk read builds and checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReadOptions {
    /// The columns built (the others' vectors stay empty).
    pub columns: ColumnMask,
    /// Verify each record's body CRC.
    pub check_crc: bool,
    /// Give compressed bodies back decompressed.
    pub decompress: bool,
    /// Bodies as `binary_view` rows pointing into the segments' mappings (decompressed ones
    /// into an owned buffer), not copied into a `binary` column.
    pub body_view: bool,
    /// Most bytes one `binary_view` data buffer spans (`columns::VIEW_BUFFER_MAX`; smaller in
    /// tests of the split).
    pub view_buffer_max: i64,
}

/// Bulk read of a queue from `offset`: up to `max_msgs` messages as Arrow column buffers,
/// across consume queue segments. Units whose records are gone (their segment deleted) are
/// skipped; a unit whose record is there but damaged (not the unit's message, or a body CRC
/// mismatch with `check_crc`), or whose body cannot be decompressed, fails the read with a
/// [`StoreError::CorruptRecord`] naming the segment, the offset and the queue offset. A large
/// read is built by two threads, each over half of the units, and joined. With a `filter`,
/// the units read are at most `max_msgs` and only the rows it lets through are built
/// (`BatchColumns::scanned` counts the units gone over).
pub(crate) fn read_batch(
    commitlog: &CommitLog,
    cq: &ConsumeQueue,
    offset: i64,
    max_msgs: usize,
    opts: ReadOptions,
    filter: &RowFilter,
) -> Result<BatchColumns> {
    let max = cq.max_offset();
    let start = offset.max(cq.min_offset());
    // Any count, however large, asks for at most the rest of the queue.
    let max_msgs_i64 = i64::try_from(max_msgs).unwrap_or(i64::MAX);
    let n = max.saturating_sub(start).clamp(0, max_msgs_i64) as usize;
    let mut cols = read_halves(commitlog, cq, start, max, max_msgs, n, opts, filter)?;
    cols.finish_views();
    Ok(cols)
}

/// [`read_batch`] of `n` units from `start` (below `max`): on one thread, or on two when large
/// (unfiltered reads only: a filtered half's rows do not say where it stopped).
#[allow(clippy::too_many_arguments)]
fn read_halves(
    commitlog: &CommitLog,
    cq: &ConsumeQueue,
    start: i64,
    max: i64,
    max_msgs: usize,
    n: usize,
    opts: ReadOptions,
    filter: &RowFilter,
) -> Result<BatchColumns> {
    if !filter.is_none() {
        return read_range(commitlog, cq, start, max, max_msgs, n, opts, filter);
    }
    if n < PARALLEL_READ_UNITS || !second_thread_pays() {
        return read_range(commitlog, cq, start, max, max_msgs, n, opts, filter);
    }
    let mid = start + (n / 2) as i64;
    let second_half = || {
        read_range(
            commitlog,
            cq,
            mid,
            start + n as i64,
            n - n / 2,
            n - n / 2,
            opts,
            filter,
        )
    };
    let (first, second) = std::thread::scope(|s| {
        let second = std::thread::Builder::new().spawn_scoped(s, second_half);
        // The first half's vectors have room for both, so the join never regrows them (a
        // regrown vector's new pages would be faulted in afresh).
        let first = read_range(commitlog, cq, start, mid, n / 2, n, opts, filter);
        // No thread could be started: this one reads the second half too.
        let second = match second {
            Ok(j) => j.join().ok(),
            Err(_) => Some(second_half()),
        };
        (first, second)
    });
    let mut first = match first {
        Ok(first) => first,
        Err(e) => {
            if let Some(Ok(second)) = second {
                second.recycle();
            }
            return Err(e);
        }
    };
    match second {
        Some(Ok(second)) => {
            // When the first half stopped early (size cap), the second would leave a gap.
            if first.next_offset >= mid {
                first.append(&second);
            }
            second.recycle();
        }
        Some(Err(e)) => {
            first.recycle();
            return Err(e);
        }
        None => {}
    }
    Ok(first)
}

/// Reads units `[start, limit)`, at most `max_rows` messages, into vectors with room for the
/// `room` units from `start` (at least the rows read). With a `filter`, at most `max_rows`
/// units are gone over, and only the rows it lets through are built.
#[allow(clippy::too_many_arguments)]
fn read_range(
    commitlog: &CommitLog,
    cq: &ConsumeQueue,
    start: i64,
    limit: i64,
    max_rows: usize,
    room: usize,
    opts: ReadOptions,
    filter: &RowFilter,
) -> Result<BatchColumns> {
    let n = limit
        .saturating_sub(start)
        .clamp(0, i64::try_from(max_rows).unwrap_or(i64::MAX)) as usize;
    let room = room.max(n);
    // Size the body column from the record sizes in the queue so it never regrows (views need
    // no room for bodies: they are not copied).
    let bodies = opts.columns.contains(Column::Body);
    let mut bytes = 0usize;
    if room > 0 && bodies && !opts.body_view {
        cq.scan(start, start + room as i64, |u| {
            bytes += u.size.max(0) as usize;
            true
        });
    }
    let mut cols = BatchColumns::with_mask(
        room,
        bytes.min(READ_BATCH_MAX_BYTES),
        opts.body_view,
        opts.columns,
    );
    let mut next = start;
    let mut file: Option<std::sync::Arc<crate::file::mapped_file::MappedFile>> = None;
    // The read-only mapping of `file` that `binary_view` bodies point into.
    let mut view: Option<std::sync::Arc<SegmentView>> = None;
    let mut split = PropsSplit::default();
    let mut failed: Option<StoreError> = None;
    let filtered = !filter.is_none();
    // The schedule topic's units hold delivery times, not tag hashes.
    let codes_are_hashes = cq.topic() != crate::schedule::SCHEDULE_TOPIC;
    let mut scanned = super::row_filter::Scanned::default();
    let mut units = 0usize;
    let commit_min = if filtered { commitlog.min_offset() } else { 0 };
    cq.scan(start, limit, |u| {
        if cols.rows >= max_rows || (filtered && units >= max_rows) {
            return false;
        }
        units += 1;
        next = u.queue_offset + 1;
        if u.is_pre_blank() {
            return true;
        }
        if filter.passes_over(u.tags_code, codes_are_hashes) {
            // Not read: counted as there unless its segment was removed before this read.
            if u.phy_offset >= commit_min {
                scanned.note(u.queue_offset);
            }
            return true;
        }
        let in_file = file.as_ref().is_some_and(|f| {
            u.phy_offset >= f.file_from_offset()
                && u.phy_offset < f.file_from_offset() + f.file_size()
        });
        if !in_file {
            file = commitlog.queue().find_by_offset(u.phy_offset);
            view = None;
        }
        let Some(f) = file.as_ref() else {
            return true;
        };
        let Some(data) = f.read(u.phy_offset - f.file_from_offset(), i64::from(u.size)) else {
            return true;
        };
        let damaged = |reason: String| {
            StoreError::corrupt_record(
                f.path(),
                u.phy_offset,
                format!(
                    "{reason} (queue {}/{} offset {})",
                    cq.topic(),
                    cq.queue_id(),
                    u.queue_offset
                ),
            )
        };
        let Some(d) = view_record(data).filter(|d| d.physical_offset == u.phy_offset) else {
            failed = Some(damaged(format!(
                "the consume queue unit points at {} bytes that are not its message record",
                u.size
            )));
            return false;
        };
        if opts.check_crc && !body_crc_matches(d.body, d.body_crc) {
            failed = Some(damaged(format!(
                "its body CRC is {:#010x} but its {}-byte body has {:#010x}",
                d.body_crc,
                d.body.len(),
                crate::util::masked_crc32(d.body)
            )));
            return false;
        }
        scanned.note(u.queue_offset);
        if filtered && !filter.matches(&d) {
            return true;
        }
        let body_at = if opts.body_view && bodies {
            if view.is_none() {
                match f.view() {
                    Ok(v) => view = Some(v),
                    Err(e) => {
                        failed = Some(e);
                        return false;
                    }
                }
            }
            // The body is a slice of the record's bytes `data`, which start at `phy_offset`.
            let in_record = d.body.as_ptr() as usize - data.as_ptr() as usize;
            view.as_ref().map(|view| BodyAt {
                view,
                offset: u.phy_offset - f.file_from_offset() + in_record as i64,
            })
        } else {
            None
        };
        if let Err(e) = cols.push(&d, cq.queue_id(), u.phy_offset, opts, &mut split, body_at) {
            failed = Some(damaged(e.0));
            return false;
        }
        // The size cap: stop after this row.
        cols.body_data.len() <= READ_BATCH_MAX_BYTES / 2
            && cols.props_value_data.len() <= READ_BATCH_MAX_BYTES / 2
    });
    if let Some(e) = failed {
        cols.recycle();
        return Err(e);
    }
    cols.next_offset = next;
    cols.scanned = scanned;
    Ok(cols)
}

#[cfg(test)]
mod tests {
    use super::runnable_of_loadavg;

    #[test]
    fn the_runnable_count_of_loadavg() {
        assert_eq!(runnable_of_loadavg("0.50 0.40 0.30 2/345 6789\n"), Some(2));
        assert_eq!(runnable_of_loadavg("9.07 8.39 5.86 13/231 29510"), Some(13));
        assert_eq!(runnable_of_loadavg("0.50 0.40 0.30"), None);
        assert_eq!(runnable_of_loadavg("0.50 0.40 0.30 x/345 1"), None);
        assert_eq!(runnable_of_loadavg(""), None);
    }
}
