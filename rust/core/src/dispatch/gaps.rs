//! Re-indexing at open what the index files lack between neighbouring files (keys RocketMQ can
//! lose when two index files are made within one millisecond).

use super::view_next;
use crate::commitlog::{queue_fields_are_legal, CommitLog};
use crate::error::Result;
use crate::format::{check_record, DispatchProps, RecordCheck};
use crate::index::{IndexBatch, IndexFile, IndexService};

/// Records after a gap's first one read before a gap of messages without keys is taken for
/// what it is. RocketMQ loses index entries only when a file fills within the millisecond it
/// was made in, so every lost entry belongs to a message dispatched within one millisecond of
/// the gap's start: a few thousand records at most, keyed ones among the first. A stretch whose
/// first records have no keys is an ordinary gap (messages without keys between two files),
/// however long: it is not read to its end at every open.
pub(crate) const GAP_SCAN_RECORDS: usize = 20_000;

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
/// cleanly. Dispatch never sees them again (it resumes after the last indexed message). When
/// RocketMQ 4.9.8's flush of the first file also wrote its header over the second's, the file
/// claims the lost messages; such a file bounds no gap (see [`crate::index`]'s `IndexGap`).
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

/// Whether the commitlog holds a message starting at `phy_offset` (below its confirmed end)
/// with a key that `file` holds an entry of for that offset: what [`IndexService::adopt_covered_end`]
/// asks before it trusts entries past a file's header.
pub(crate) fn file_holds_message(
    commitlog: &CommitLog,
    index: &IndexService,
    file: &IndexFile,
    phy_offset: i64,
) -> bool {
    let end = commitlog.confirm_offset();
    if phy_offset < commitlog.min_offset().max(0) || phy_offset >= end {
        return false;
    }
    let mut batch = IndexBatch::default();
    scan_for_index(
        commitlog,
        phy_offset,
        phy_offset,
        end,
        index.index_tags(),
        usize::MAX,
        &mut batch,
    );
    batch.first_message().is_some_and(|(phy, hashes)| {
        phy == phy_offset && hashes.iter().any(|&h| file.count_entries(h, phy) > 0)
    })
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
