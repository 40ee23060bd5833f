//! Index gaps ([`IndexGap`]): stretches of the commitlog between neighbouring index files that
//! no file covers, found by [`IndexService::gaps`] and re-indexed into files named between the
//! neighbours by [`IndexService::fill_gap`].

use std::sync::Arc;

use super::service::flush_file;
use super::{lock, write_lock, IndexBatch, IndexFile, IndexService, LOG_TARGET};
use crate::error::{Result, StoreError};
use crate::format::index::gap_file_names;

/// A stretch of the commitlog between two neighbouring index files that hold entries (or
/// before the first of them) that no file covers: the messages from `from` to `to`, both
/// included, may have keys that no file holds. The two boundary messages may be partly indexed
/// (a message whose keys do not all fit in a file continues in the next one).
///
/// Such a stretch is normal when it holds only messages without keys. It is a loss when
/// RocketMQ made two index files in the same millisecond: it names a new file after the
/// current time (`yyyyMMddHHmmssSSS`) and opens an existing file of that name, so the second
/// file overwrites the first, whose entries are gone (seen with RocketMQ 5.5.1 under load).
#[derive(Clone, Debug)]
pub(crate) struct IndexGap {
    /// The file before the gap (`None`: the gap lies before the first file).
    pub prev: Option<Arc<IndexFile>>,
    /// The file after the gap.
    pub next: Arc<IndexFile>,
    /// Commitlog offset of the first message that may lack entries: the previous file's last
    /// message, or the commitlog's first before the first file.
    pub from: i64,
    /// Commitlog offset of the last message that may lack entries: the next file's first.
    pub to: i64,
}

/// Removes from `hashes` as many occurrences of each hash as `file` holds entries of it for
/// the message at `phy_offset`.
fn remove_indexed(hashes: &mut Vec<i32>, file: &IndexFile, phy_offset: i64) {
    let mut distinct = hashes.clone();
    distinct.sort_unstable();
    distinct.dedup();
    for h in distinct {
        let mut present = file.count_entries(h, phy_offset);
        hashes.retain(|&x| {
            if x == h && present > 0 {
                present -= 1;
                false
            } else {
                true
            }
        });
    }
}

impl IndexService {
    /// The stretches of the commitlog from `min_offset` on that no index file covers (see
    /// [`IndexGap`]), oldest first. Files without entries cover nothing and are passed over.
    pub(crate) fn gaps(&self, min_offset: i64) -> Vec<IndexGap> {
        let mut out = Vec::new();
        let mut prev: Option<Arc<IndexFile>> = None;
        for f in self.files() {
            if f.index_count() <= 1 {
                continue;
            }
            let from = prev
                .as_ref()
                .map_or(min_offset, |p| p.end_phy_offset())
                .max(min_offset);
            let to = f.begin_phy_offset();
            if to > from {
                out.push(IndexGap {
                    prev: prev.clone(),
                    next: Arc::clone(&f),
                    from,
                    to,
                });
            }
            prev = Some(f);
        }
        out
    }

    /// Puts the entries that the messages of `batch` (the messages of `gap`, in commitlog order)
    /// lack into new files between the gap's neighbours: every key of a message inside the gap,
    /// and the keys of the boundary messages that their file does not hold. A gap file is named
    /// after the file before it with one more digit (see
    /// [`crate::format::index::GAP_FILE_NAME_LEN`]), so that name order stays offset and time
    /// order for RocketMQ and rmqstore, and is seeded like a file made by a roll. Returns how
    /// many entries were written. When the nine names between the neighbours are used up, the
    /// rest stays unindexed (logged).
    pub(crate) fn fill_gap(&self, gap: &IndexGap, batch: &mut IndexBatch) -> Result<usize> {
        batch.hash_pending();
        let mut missing: Vec<(i64, i64, Vec<i32>)> = Vec::new();
        let mut start = 0;
        for &(phy, ts, end) in &batch.messages {
            let mut hashes = batch.hashes[start..end].to_vec();
            start = end;
            if let Some(p) = &gap.prev {
                if phy == p.end_phy_offset() {
                    remove_indexed(&mut hashes, p, phy);
                }
            }
            if phy == gap.next.begin_phy_offset() {
                remove_indexed(&mut hashes, &gap.next, phy);
            }
            if !hashes.is_empty() {
                missing.push((phy, ts, hashes));
            }
        }
        batch.hashes.clear();
        batch.messages.clear();
        if missing.is_empty() {
            return Ok(0);
        }
        let mut w = lock(&self.writer);
        *w = None;
        self.join_pending_flushes();
        let mut names = gap_file_names(
            gap.prev.as_ref().map(|p| p.file_name()),
            gap.next.file_name(),
        )
        .into_iter();
        let (mut seed_phy, mut seed_ts) = gap
            .prev
            .as_ref()
            .map_or((0, 0), |p| (p.end_phy_offset(), p.end_timestamp()));
        let mut made: Vec<Arc<IndexFile>> = Vec::new();
        let mut written = 0;
        let mut result = Ok(());
        'messages: for (phy, ts, hashes) in &missing {
            let mut rest = &hashes[..];
            while !rest.is_empty() {
                let file = match made.last() {
                    Some(f) if !f.is_write_full() => Arc::clone(f),
                    last => {
                        if let Some(f) = last {
                            (seed_phy, seed_ts) = (f.end_phy_offset(), f.end_timestamp());
                        }
                        let created = loop {
                            let Some(name) = names.next() else {
                                break None;
                            };
                            let path = self.dir.join(&name);
                            match IndexFile::create(
                                &path,
                                self.hash_slot_num,
                                self.index_num,
                                seed_phy,
                                seed_ts,
                            ) {
                                Ok(f) => break Some(Ok(f)),
                                Err(e) if e.os_errno() == Some(libc::EEXIST) => {}
                                Err(e) => break Some(Err(e)),
                            }
                        };
                        match created {
                            Some(Ok(f)) => {
                                log::info!(
                                    target: LOG_TARGET,
                                    "created index file {} for keys missing between {} and {}",
                                    f.path().display(),
                                    gap.prev.as_ref().map_or("the start", |p| p.file_name()),
                                    gap.next.file_name()
                                );
                                let f = Arc::new(f);
                                made.push(Arc::clone(&f));
                                f
                            }
                            Some(Err(e)) => {
                                result = Err(e);
                                break 'messages;
                            }
                            None => {
                                log::error!(
                                    target: LOG_TARGET,
                                    "no file name left between index files {} and {}: keys of \
                                     messages from commitlog offset {phy} on stay unindexed",
                                    gap.prev.as_ref().map_or("(none)", |p| p.file_name()),
                                    gap.next.file_name()
                                );
                                break 'messages;
                            }
                        }
                    }
                };
                let put = file.writer().put(rest, *phy, *ts);
                if put == 0 && !file.is_write_full() {
                    result = Err(StoreError::corrupted(
                        file.path(),
                        "a new index file refused a key",
                    ));
                    break 'messages;
                }
                written += put;
                rest = &rest[put..];
            }
        }
        if !made.is_empty() {
            let mut files = write_lock(&self.files);
            let at = files.partition_point(|f| f.file_name() < made[0].file_name());
            files.splice(at..at, made.iter().cloned());
        }
        drop(w);
        for f in &made {
            let flushed = flush_file(f, &self.index_msg_timestamp);
            if result.is_ok() {
                result = flushed;
            }
        }
        result.map(|()| written)
    }
}
