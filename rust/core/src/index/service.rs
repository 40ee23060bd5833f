//! The index files of a store ([`IndexService`]): loading the folder, building entries from
//! dispatched batches and rolling to a new file when one is full, queries over the files newest
//! to oldest, flushing, and deleting files (expiry, recovery, truncation).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use super::gaps::remove_held_by_files_at;
use super::{lock, read_lock, write_lock, IndexBatch, IndexFile, LOG_TARGET};
use crate::error::{Result, StoreError};
use crate::format::index::{
    build_key, index_file_name, index_file_size, is_index_file_name, next_index_file_name,
    INDEX_FILE_NAME_LEN,
};
use crate::util::now_millis;

/// `maxMsgsNumBatch` default: the most offsets one query returns.
const DEFAULT_MAX_MSGS_NUM_BATCH: usize = 64;
/// `MAX_TRY_IDX_CREATE`: attempts at creating a new index file, 1 s apart.
const MAX_TRY_IDX_CREATE: u32 = 3;

/// `QueryOffsetResult`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct QueryResult {
    /// Commitlog offsets, newest first (hash matches: callers re-check the key).
    pub phy_offsets: Vec<i64>,
    /// End timestamp of the newest index file (0 if there is none).
    pub index_last_update_timestamp: i64,
    /// End phy offset of the newest index file (0 if there is none).
    pub index_last_update_phy_offset: i64,
}

/// The index files of a store, under `<root>/index` (`IndexService`).
pub(crate) struct IndexService {
    pub(super) dir: PathBuf,
    pub(super) hash_slot_num: i32,
    pub(super) index_num: i32,
    max_msgs_num_batch: AtomicUsize,
    /// Dispatch also puts `topic#T#tags` (RocketMQ 5.4+).
    index_tags: std::sync::atomic::AtomicBool,
    /// Oldest first. Readers snapshot it; only the writer and deletions change it.
    pub(super) files: RwLock<Vec<Arc<IndexFile>>>,
    /// Serializes index building, rolling and recovery-time deletion, and caches the file
    /// being written (cleared by anything that deletes files).
    pub(super) writer: Mutex<Option<Arc<IndexFile>>>,
    /// Background flushes of files that became full.
    pending_flushes: Mutex<Vec<JoinHandle<()>>>,
    /// End timestamp of the newest full file known to be on disk (the checkpoint's
    /// `indexMsgTimestamp`), 0 if none.
    pub(super) index_msg_timestamp: Arc<AtomicI64>,
    /// Empty (0-byte) files found at load: a crash between creating an index file and sizing
    /// it. They hold nothing; [`IndexService::remove_empty_leftovers`] deletes them.
    empty_leftovers: Mutex<Vec<PathBuf>>,
}

impl std::fmt::Debug for IndexService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexService")
            .field("dir", &self.dir)
            .field("files", &self.file_names())
            .finish()
    }
}

impl IndexService {
    /// Loads every index file of `dir` in name order. Every entry must be a 17-digit name of a
    /// file of the exact size, else [`StoreError::Corrupted`] naming it, reported before any
    /// file is mapped; a 0-byte file (a crash between creating and sizing it, which RocketMQ's
    /// store also opens) holds nothing and is set aside for
    /// [`IndexService::remove_empty_leftovers`]. A missing folder is an empty index (it is
    /// created with the first file).
    pub(crate) fn load(dir: &Path, hash_slot_num: i32, index_num: i32) -> Result<IndexService> {
        let size = index_file_size(hash_slot_num, index_num)?;
        let mut names = Vec::new();
        let mut empty = Vec::new();
        match std::fs::read_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io("cannot list index folder", dir, e)),
            Ok(rd) => {
                for entry in rd {
                    let entry =
                        entry.map_err(|e| StoreError::io("cannot list index folder", dir, e))?;
                    let path = entry.path();
                    let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                        return Err(StoreError::corrupted(
                            &path,
                            "unexpected file in the index folder (name is not UTF-8)",
                        ));
                    };
                    if !is_index_file_name(&name) {
                        return Err(StoreError::corrupted(
                            &path,
                            "unexpected file in the index folder \
                             (index files are named yyyyMMddHHmmssSSS)",
                        ));
                    }
                    let meta = std::fs::symlink_metadata(&path)
                        .map_err(|e| StoreError::io("cannot stat index file", &path, e))?;
                    if !meta.file_type().is_file() {
                        return Err(StoreError::corrupted(
                            &path,
                            "index entry is not a regular file (a link, folder, FIFO or device)",
                        ));
                    }
                    if meta.len() == 0 {
                        empty.push(path);
                        continue;
                    }
                    if meta.len() != size as u64 {
                        return Err(StoreError::corrupted(
                            &path,
                            format!(
                                "index file is {} bytes, expected {size} \
                                 ({hash_slot_num} hash slots, {index_num} entries)",
                                meta.len()
                            ),
                        ));
                    }
                    names.push(name);
                }
            }
        }
        names.sort();
        let mut files = Vec::with_capacity(names.len());
        for name in &names {
            let f = IndexFile::load(&dir.join(name), hash_slot_num, index_num)?;
            log::info!(target: LOG_TARGET, "loaded index file {}", f.path().display());
            files.push(Arc::new(f));
        }
        Ok(IndexService {
            dir: dir.to_path_buf(),
            hash_slot_num,
            index_num,
            max_msgs_num_batch: AtomicUsize::new(DEFAULT_MAX_MSGS_NUM_BATCH),
            index_tags: std::sync::atomic::AtomicBool::new(false),
            files: RwLock::new(files),
            writer: Mutex::new(None),
            pending_flushes: Mutex::new(Vec::new()),
            index_msg_timestamp: Arc::new(AtomicI64::new(0)),
            empty_leftovers: Mutex::new(empty),
        })
    }

    /// Once opening may change files: reserves the blocks the loaded files have in use (see
    /// `IndexFile::reserve_in_use`).
    pub(crate) fn reserve_loaded(&self) {
        for f in self.files.read().unwrap_or_else(|p| p.into_inner()).iter() {
            f.reserve_in_use();
        }
    }

    /// Deletes the 0-byte index files found at load (see [`IndexService::load`]); returns how
    /// many. Called once opening may change files.
    pub(crate) fn remove_empty_leftovers(&self) -> Result<usize> {
        let leftovers = std::mem::take(&mut *lock(&self.empty_leftovers));
        for path in &leftovers {
            log::warn!(
                target: LOG_TARGET,
                "removing empty index file {} (a crash left it before it was sized)",
                path.display()
            );
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io("cannot remove empty index file", path, e)),
            }
        }
        Ok(leftovers.len())
    }

    /// `maxMsgsNumBatch`: the cap on `max_num` in [`IndexService::query_offset`].
    pub(crate) fn max_msgs_num_batch(&self) -> usize {
        self.max_msgs_num_batch.load(Ordering::Relaxed)
    }

    pub(crate) fn set_max_msgs_num_batch(&self, n: usize) {
        self.max_msgs_num_batch.store(n, Ordering::Relaxed);
    }

    /// Whether dispatch also indexes TAGS values (see [`crate::StoreConfig::index_tags`]).
    pub(crate) fn index_tags(&self) -> bool {
        self.index_tags.load(Ordering::Relaxed)
    }

    pub(crate) fn set_index_tags(&self, on: bool) {
        self.index_tags.store(on, Ordering::Relaxed);
    }

    /// The files, oldest first (a snapshot).
    pub(crate) fn files(&self) -> Vec<Arc<IndexFile>> {
        read_lock(&self.files).clone()
    }

    /// The file names, oldest first.
    pub(crate) fn file_names(&self) -> Vec<String> {
        read_lock(&self.files)
            .iter()
            .map(|f| f.file_name().to_owned())
            .collect()
    }

    /// The newest file, if any.
    pub(crate) fn last_file(&self) -> Option<Arc<IndexFile>> {
        read_lock(&self.files).last().cloned()
    }

    /// Commitlog offset of the last message with an entry in the index (dispatch must resume at
    /// or before it for the index to be complete), `None` when no file holds an entry.
    pub(crate) fn progress(&self) -> Option<i64> {
        read_lock(&self.files)
            .iter()
            .rev()
            .find(|f| f.index_count() > 1)
            .map(|f| f.resume_end().0)
    }

    /// At open: when the last file with entries holds entries past its header's end
    /// ([`IndexFile::covered_end`], RocketMQ 4.9.8's header race), and `confirms` (the file,
    /// the offset) says the commitlog holds a message there whose keys the file holds, that is
    /// where the index ends ([`IndexFile::adopt_end`]): dispatch resumes there and a new file is
    /// seeded from it, so the messages are not indexed twice. Entries that are not confirmed
    /// (a damaged file) are not trusted: the header's end stays, and at worst messages are
    /// indexed twice, never skipped. Returns the adopted end.
    pub(crate) fn adopt_covered_end(
        &self,
        confirms: impl Fn(&IndexFile, i64) -> bool,
    ) -> Option<i64> {
        let last = read_lock(&self.files)
            .iter()
            .rev()
            .find(|f| f.index_count() > 1)
            .cloned()?;
        let (phy, ts) = last.covered_end();
        if phy <= last.end_phy_offset() {
            return None;
        }
        if !confirms(&last, phy) {
            log::warn!(
                target: LOG_TARGET,
                "index file {} has entries past its header's end {} (up to {phy}) that the \
                 commitlog does not confirm: the header's end is kept",
                last.path().display(),
                last.end_phy_offset()
            );
            return None;
        }
        log::info!(
            target: LOG_TARGET,
            "index file {} holds messages up to commitlog offset {phy}, past its header's end \
             {} (another writer's header): the index resumes there",
            last.path().display(),
            last.end_phy_offset()
        );
        last.adopt_end((phy, ts));
        Some(phy)
    }

    /// After a crash: deletes trailing files that hold no entry (made just before the crash),
    /// so they do not hide that the messages after the last entry need indexing.
    pub(crate) fn drop_empty_tail(&self) -> Result<usize> {
        let mut w = lock(&self.writer);
        *w = None;
        self.join_pending_flushes();
        let mut files = write_lock(&self.files);
        let mut dropped = 0;
        while let Some(f) = files.last() {
            if f.index_count() > 1 {
                break;
            }
            f.destroy()?;
            files.pop();
            dropped += 1;
        }
        Ok(dropped)
    }

    /// End timestamp of the newest full file flushed so far (by a roll or by
    /// [`IndexService::flush`]), 0 if none: what RocketMQ stores as the checkpoint's
    /// `indexMsgTimestamp`.
    pub(crate) fn index_msg_timestamp(&self) -> i64 {
        self.index_msg_timestamp.load(Ordering::Acquire)
    }

    /// `buildIndex` for one dispatched message (see [`IndexBatch::add`]).
    #[cfg(test)]
    pub(crate) fn build_index(
        &self,
        topic: &str,
        keys: Option<&str>,
        uniq_key: Option<&str>,
        phy_offset: i64,
        store_timestamp: i64,
        sys_flag: i32,
    ) -> Result<()> {
        let mut batch = IndexBatch::default();
        batch.add(
            topic,
            keys,
            uniq_key,
            None,
            phy_offset,
            store_timestamp,
            sys_flag,
        );
        self.build_batch(&mut batch)
    }

    /// Puts the keys of a batch of dispatched messages, in order, and empties the batch.
    /// Messages below the last file's end phy offset (already indexed) are skipped. Rolls to a
    /// new file when the last is full. The slots of all the batch's keys are prefetched first,
    /// so the misses of the index's random accesses overlap. An error means no index file could
    /// be created (RocketMQ then stops building).
    pub(crate) fn build_batch(&self, batch: &mut IndexBatch) -> Result<()> {
        batch.hash_pending();
        let mut w = lock(&self.writer);
        let mut file = match w.take() {
            Some(f) if !f.is_write_full() => f,
            _ => self.retry_get_and_create_last_file()?,
        };
        // Slots are prefetched this many keys ahead of the put that needs them.
        const AHEAD: usize = 32;
        let mut prefetched = batch.hashes.len().min(AHEAD);
        for &h in &batch.hashes[..prefetched] {
            file.prefetch_slot(h);
        }
        // One writer lock for the whole batch; a full file is replaced and the message that did
        // not fit continues in the new one (whose end phy offset is then that message's).
        let mut result = Ok(());
        let (mut i, mut start) = (0, 0);
        while i < batch.messages.len() {
            let mut full = false;
            {
                let mut writer = file.writer();
                while i < batch.messages.len() {
                    let (phy_offset, store_timestamp, end) = batch.messages[i];
                    let horizon = (end + AHEAD).min(batch.hashes.len());
                    while prefetched < horizon {
                        file.prefetch_slot(batch.hashes[prefetched]);
                        prefetched += 1;
                    }
                    let first = if i == 0 { 0 } else { batch.messages[i - 1].2 };
                    // A message the file already indexed is skipped, unless its keys are being
                    // continued after a roll. The message at the index's end, dispatched again
                    // at resume, may have been cut by a crash between its keys (or between a
                    // file filling and the next being made): the keys no file holds are put,
                    // moved to the end of its range.
                    let put = if end <= start {
                        false
                    } else if start > first || !file.indexed(phy_offset) {
                        true
                    } else if phy_offset == file.end_phy_offset() {
                        let mut rest = batch.hashes[start..end].to_vec();
                        remove_held_by_files_at(&mut rest, &self.files(), &[], phy_offset);
                        start = end - rest.len();
                        batch.hashes[start..end].copy_from_slice(&rest);
                        !rest.is_empty()
                    } else {
                        false
                    };
                    if put {
                        let keys = &batch.hashes[start..end];
                        let done = writer.put(keys, phy_offset, store_timestamp);
                        if done < keys.len() {
                            start += done;
                            full = true;
                            break;
                        }
                    }
                    start = end;
                    i += 1;
                }
            }
            if !full {
                break;
            }
            log::debug!(
                target: LOG_TARGET,
                "index file {} is full, trying to create another one",
                file.path().display()
            );
            let fresh = match self.retry_get_and_create_last_file() {
                Ok(f) => f,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            if Arc::ptr_eq(&fresh, &file) || fresh.is_write_full() {
                result = Err(StoreError::corrupted(
                    fresh.path(),
                    "a new index file refused a key",
                ));
                break;
            }
            file = fresh;
        }
        *w = Some(file);
        batch.hashes.clear();
        batch.messages.clear();
        result
    }

    /// `retryGetAndCreateIndexFile`: up to [`MAX_TRY_IDX_CREATE`] attempts, 1 s apart.
    /// Callers hold the writer lock.
    fn retry_get_and_create_last_file(&self) -> Result<Arc<IndexFile>> {
        let mut attempt = 0;
        loop {
            match self.get_and_create_last_file() {
                Ok(f) => return Ok(f),
                Err(e) => {
                    attempt += 1;
                    log::error!(
                        target: LOG_TARGET,
                        "cannot create an index file (attempt {attempt} of {MAX_TRY_IDX_CREATE}): {e}"
                    );
                    if attempt >= MAX_TRY_IDX_CREATE {
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
    }

    /// `getAndCreateLastIndexFile`: the last file unless it is full; otherwise a new file named
    /// after the current local time (the next free millisecond if taken, and always after the
    /// last name so name order stays creation order), seeded with the previous file's end phy
    /// offset and end timestamp. The previous (full) file is flushed in the background.
    fn get_and_create_last_file(&self) -> Result<Arc<IndexFile>> {
        let prev = self.last_file();
        if let Some(f) = &prev {
            if !f.is_write_full() {
                return Ok(Arc::clone(f));
            }
        }
        let (end_phy, end_ts) = prev.as_ref().map_or((0, 0), |f| f.resume_end());
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| StoreError::io("cannot create index folder", &self.dir, e))?;
        let now = now_millis();
        let mut name = index_file_name(now).ok_or_else(|| {
            StoreError::io(
                "cannot name an index file after the local time in",
                &self.dir,
                io::Error::other(format!("localtime_r failed for {now} ms")),
            )
        })?;
        if let Some(p) = &prev {
            if is_index_file_name(p.file_name()) && name.as_str() <= p.file_name() {
                // The last file may be a gap file (18 digits): step on from its 17-digit base.
                let base = &p.file_name()[..INDEX_FILE_NAME_LEN];
                name = next_index_file_name(base).unwrap_or(name);
            }
        }
        let file = loop {
            let path = self.dir.join(&name);
            match IndexFile::create(&path, self.hash_slot_num, self.index_num, end_phy, end_ts) {
                Ok(f) => break f,
                Err(e) if e.os_errno() == Some(libc::EEXIST) => {
                    name = next_index_file_name(&name).ok_or(e)?;
                }
                Err(e) => return Err(e),
            }
        };
        log::info!(target: LOG_TARGET, "created index file {}", file.path().display());
        let file = Arc::new(file);
        write_lock(&self.files).push(Arc::clone(&file));
        if let Some(prev) = prev {
            self.flush_in_background(prev);
        }
        Ok(file)
    }

    fn flush_in_background(&self, file: Arc<IndexFile>) {
        let mut pending = lock(&self.pending_flushes);
        pending.retain(|h| !h.is_finished());
        let (f, stamp) = (Arc::clone(&file), Arc::clone(&self.index_msg_timestamp));
        let spawned = std::thread::Builder::new()
            .name("FlushIndexFileThread".into())
            .spawn(move || {
                if let Err(e) = flush_file(&f, &stamp) {
                    log::error!(target: LOG_TARGET, "{e}");
                }
            });
        match spawned {
            Ok(h) => pending.push(h),
            Err(e) => {
                log::warn!(
                    target: LOG_TARGET,
                    "cannot start an index flush thread ({e}); flushing inline"
                );
                if let Err(e) = flush_file(&file, &self.index_msg_timestamp) {
                    log::error!(target: LOG_TARGET, "{e}");
                }
            }
        }
    }

    pub(super) fn join_pending_flushes(&self) {
        let handles = std::mem::take(&mut *lock(&self.pending_flushes));
        for h in handles {
            let _ = h.join();
        }
    }

    /// `queryOffset`: up to `min(max_num, max_msgs_num_batch)` offsets of messages
    /// of `topic` whose key (or unique key) hashes like `key`, stored in `[begin, end]`, walking
    /// the files newest to oldest.
    pub(crate) fn query_offset(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> QueryResult {
        let max_num = max_num.min(self.max_msgs_num_batch());
        let files = self.files();
        let mut result = QueryResult {
            phy_offsets: Vec::with_capacity(max_num.min(1024)),
            ..QueryResult::default()
        };
        if let Some(last) = files.last() {
            result.index_last_update_timestamp = last.end_timestamp();
            result.index_last_update_phy_offset = last.end_phy_offset();
        }
        let full_key = build_key(topic, key);
        for f in files.iter().rev() {
            if f.is_time_matched(begin, end) {
                f.select_phy_offsets_into(&mut result.phy_offsets, &full_key, max_num, begin, end);
            }
            if f.begin_timestamp() < begin || result.phy_offsets.len() >= max_num {
                break;
            }
        }
        result
    }

    /// Forces every file with unflushed entries to disk (after waiting for background flushes of
    /// full files). Full files flushed update [`IndexService::index_msg_timestamp`].
    pub(crate) fn flush(&self) -> Result<()> {
        self.join_pending_flushes();
        let mut first_err = None;
        for f in self.files() {
            if f.is_dirty() {
                if let Err(e) = flush_file(&f, &self.index_msg_timestamp) {
                    log::error!(target: LOG_TARGET, "{e}");
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// `deleteExpiredFile(offset)`: deletes the leading files, never the last one, whose end phy
    /// offset is below `min_commit_log_offset`. Returns how many were deleted.
    pub(crate) fn delete_expired(&self, min_commit_log_offset: i64) -> Result<usize> {
        let mut w = lock(&self.writer);
        *w = None;
        let mut files = write_lock(&self.files);
        let candidates = files.len().saturating_sub(1);
        let mut deleted = 0;
        let mut result = Ok(());
        while deleted < candidates {
            let f = &files[deleted];
            if f.end_phy_offset() >= min_commit_log_offset {
                break;
            }
            if let Err(e) = f.destroy() {
                result = Err(e);
                break;
            }
            log::info!(target: LOG_TARGET, "deleted expired index file {}", f.path().display());
            deleted += 1;
        }
        files.drain(..deleted);
        result.map(|()| deleted)
    }

    /// For recovery after an abnormal exit: deletes every file whose end timestamp is after
    /// `timestamp` (the checkpoint's `indexMsgTimestamp`); re-dispatch rebuilds them.
    /// Returns how many were deleted.
    pub(crate) fn destroy_newer_than(&self, timestamp: i64) -> Result<usize> {
        let mut _w = lock(&self.writer);
        *_w = None;
        self.join_pending_flushes();
        let mut files = write_lock(&self.files);
        let mut deleted = 0;
        let mut result = Ok(());
        files.retain(|f| {
            if result.is_err() || f.end_timestamp() <= timestamp {
                return true;
            }
            match f.destroy() {
                Ok(()) => {
                    log::info!(
                        target: LOG_TARGET,
                        "deleted index file {} (end timestamp {} after {timestamp})",
                        f.path().display(),
                        f.end_timestamp()
                    );
                    deleted += 1;
                    false
                }
                Err(e) => {
                    result = Err(e);
                    true
                }
            }
        });
        result.map(|()| deleted)
    }

    /// After the commitlog was truncated at `phy_offset`: deletes every file holding an entry
    /// at or past it (files are in offset order, so these are the newest ones). Returns the
    /// offset dispatch must re-index from to rebuild what those files also held below the cut
    /// (the first deleted file's begin offset), or `None` when nothing was deleted.
    pub(crate) fn truncate_from(&self, phy_offset: i64) -> Result<Option<i64>> {
        let mut _w = lock(&self.writer);
        *_w = None;
        self.join_pending_flushes();
        let mut files = write_lock(&self.files);
        let mut rebuild_from = None;
        while let Some(f) = files.last() {
            if f.index_count() <= 1 || f.end_phy_offset() < phy_offset {
                break;
            }
            let begin = f.header().begin_phy_offset;
            f.destroy()?;
            log::info!(
                target: LOG_TARGET,
                "deleted index file {}: it indexes messages past the commitlog end {phy_offset}",
                f.path().display()
            );
            files.pop();
            rebuild_from = Some(begin.clamp(0, phy_offset));
        }
        Ok(rebuild_from)
    }

    /// `destroy`: deletes every index file.
    #[allow(
        dead_code,
        reason = "RocketMQ's store destroy calls it; rmqstore's is yet to come"
    )]
    pub(crate) fn destroy(&self) -> Result<()> {
        let mut _w = lock(&self.writer);
        *_w = None;
        self.join_pending_flushes();
        let mut files = write_lock(&self.files);
        while let Some(f) = files.first() {
            f.destroy()?;
            files.remove(0);
        }
        Ok(())
    }
}

/// `IndexService.flush(f)`: flushes `file` and, if it is full, records its end timestamp as the
/// checkpoint's `indexMsgTimestamp`.
pub(super) fn flush_file(file: &IndexFile, index_msg_timestamp: &AtomicI64) -> Result<()> {
    let full_end = file.is_write_full().then(|| file.end_timestamp());
    file.flush()?;
    if let Some(ts) = full_end {
        index_msg_timestamp.fetch_max(ts, Ordering::AcqRel);
    }
    Ok(())
}

impl Drop for IndexService {
    fn drop(&mut self) {
        self.join_pending_flushes();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::index::IndexHeader;
    use crate::format::sysflag;
    use proptest::prelude::*;
    use std::fs::OpenOptions;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rmqstore-index-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn service(d: &Path, slots: i32, entries: i32) -> IndexService {
        IndexService::load(&d.join("index"), slots, entries).unwrap()
    }

    #[test]
    fn service_query_port() {
        // IndexServiceTest.query.
        let d = tmp("svcquery");
        let s = service(&d, 10_000, 10_000);
        let now = now_millis();
        s.build_index("fooBar", Some("test_keys"), None, 1000, now, 0)
            .unwrap();
        let r = s.query_offset("fooBar", "test_keys", 100, now - 3000, now);
        assert_eq!(r.phy_offsets, vec![1000]);
        assert_eq!(r.index_last_update_timestamp, now);
        assert_eq!(r.index_last_update_phy_offset, 1000);
        // Empty key and huge max_num do not fail.
        let r = s.query_offset("fooBar", "", usize::MAX, 0, i64::MAX);
        assert!(r.phy_offsets.is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn build_index_keys_uniq_rollback_and_skips() {
        let d = tmp("build");
        let s = service(&d, 64, 128);
        let t = 1_700_000_000_000;
        s.build_index("T", Some("a  b "), Some("U1"), 100, t, 0)
            .unwrap();
        assert_eq!(s.last_file().unwrap().index_count(), 4);
        // ROLLBACK is skipped; PREPARED and COMMIT are indexed.
        s.build_index(
            "T",
            Some("rb"),
            Some("U2"),
            200,
            t + 1,
            sysflag::TRANSACTION_ROLLBACK_TYPE,
        )
        .unwrap();
        s.build_index(
            "T",
            Some("p"),
            None,
            300,
            t + 2,
            sysflag::TRANSACTION_PREPARED_TYPE,
        )
        .unwrap();
        // The second time, equal to the end phy offset: that message, dispatched again at
        // resume, is already indexed (RocketMQ compares with `<` and would index it twice).
        for _ in 0..2 {
            s.build_index(
                "T",
                Some("c"),
                None,
                400,
                t + 3,
                sysflag::TRANSACTION_COMMIT_TYPE,
            )
            .unwrap();
        }
        // Below the end phy offset: already indexed, skipped.
        s.build_index("T", Some("old"), None, 399, t + 4, 0)
            .unwrap();
        // At the end again, with a key no file holds (a crash cut its keys): only that is put.
        s.build_index("T", Some("c cut"), None, 400, t + 3, 0)
            .unwrap();
        let q = |k: &str| s.query_offset("T", k, 64, 0, i64::MAX).phy_offsets;
        assert_eq!(q("a"), vec![100]);
        assert_eq!(q("b"), vec![100]);
        assert_eq!(q("U1"), vec![100]);
        assert!(q("").is_empty());
        assert!(q("rb").is_empty());
        assert!(q("U2").is_empty());
        assert_eq!(q("p"), vec![300]);
        assert_eq!(q("c"), vec![400]);
        assert!(q("old").is_empty());
        assert_eq!(q("cut"), vec![400]);
        assert!(s
            .query_offset("Other", "a", 64, 0, i64::MAX)
            .phy_offsets
            .is_empty());
        assert_eq!(s.last_file().unwrap().index_count(), 7);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A crash after a file filled during a message's keys, before the next file was made (or
    /// while it was still empty, so it is dropped at open): dispatch resumes at that message,
    /// the index's end, and puts the keys no file holds into the new file, once; the keys the
    /// full file holds are not put twice. Reopening after that finds nothing missing.
    #[test]
    fn resume_puts_the_keys_a_crash_cut_from_the_last_message() {
        let d = tmp("cut");
        let dir = d.join("index");
        std::fs::create_dir_all(&dir).unwrap();
        let t = 1_700_000_000_000;
        // Three entries a file: message 100's keys a0 b0, then a1 of message 200 (b1 cut).
        let full = IndexFile::create(&dir.join("20240101120000100"), 8, 4, 0, t).unwrap();
        for (key, phy) in [("T#a0", 100), ("T#b0", 100), ("T#a1", 200)] {
            assert!(full.put_key(key, phy, t + phy));
        }
        assert!(full.is_write_full());
        drop(full);
        let keys = |phy: i64| format!("a{} b{}", phy / 100 - 1, phy / 100 - 1);
        for open in 0..3 {
            let s = IndexService::load(&dir, 8, 4).unwrap();
            assert_eq!(s.progress(), Some(if open == 0 { 200 } else { 300 }));
            let from = s.progress().unwrap();
            let mut batch = IndexBatch::default();
            for phy in (from..=300).step_by(100) {
                batch.add("T", Some(&keys(phy)), None, None, phy, t + phy, 0);
            }
            s.build_batch(&mut batch).unwrap();
            for key in ["a0", "b0"] {
                assert_eq!(s.query_offset("T", key, 64, 0, i64::MAX).phy_offsets, [100]);
            }
            for key in ["a1", "b1"] {
                let r = s.query_offset("T", key, 64, 0, i64::MAX);
                assert_eq!(r.phy_offsets, [200], "open {open}: {key}");
            }
            for key in ["a2", "b2"] {
                assert_eq!(s.query_offset("T", key, 64, 0, i64::MAX).phy_offsets, [300]);
            }
            // The second file is full after the first open: later opens make a third, empty.
            let with_entries = s.files().iter().filter(|f| f.index_count() > 1).count();
            assert_eq!(with_entries, 2, "open {open}");
            assert_eq!(s.gaps(100).len(), 0, "open {open}");
            s.flush().unwrap();
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn max_msgs_num_batch_caps_queries() {
        let d = tmp("batch");
        let s = service(&d, 16, 512);
        for i in 0..100 {
            s.build_index("T", Some("k"), None, i * 10, 1_700_000_000_000 + i, 0)
                .unwrap();
        }
        assert_eq!(
            s.query_offset("T", "k", 1000, 0, i64::MAX)
                .phy_offsets
                .len(),
            64
        );
        s.set_max_msgs_num_batch(10);
        let r = s.query_offset("T", "k", 1000, 0, i64::MAX).phy_offsets;
        assert_eq!(r, (90..100).rev().map(|i| i * 10).collect::<Vec<_>>());
        assert_eq!(
            s.query_offset("T", "k", 3, 0, i64::MAX).phy_offsets.len(),
            3
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn rolling_names_queries_reload_and_expiry() {
        let d = tmp("roll");
        let dir = d.join("index");
        // 3 entries per file; every message has 2 keys (uniq + one shared key).
        let s = IndexService::load(&dir, 8, 4).unwrap();
        let t0 = 1_700_000_000_000;
        for i in 0..20i64 {
            s.build_index(
                "T",
                Some(&format!("shared k{i}")),
                Some(&format!("U{i}")),
                i * 100,
                t0 + i * 1000,
                0,
            )
            .unwrap();
        }
        // 60 keys, 3 per file.
        let names = s.file_names();
        assert_eq!(names.len(), 20);
        assert!(names.iter().all(|n| is_index_file_name(n)));
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, names, "distinct and in creation order");
        let files = s.files();
        for w in files.windows(2) {
            // Seeded from the previous file, then the first put overwrote begin.
            assert!(w[1].header().begin_phy_offset >= w[0].end_phy_offset());
            assert!(w[0].is_write_full());
        }

        let q = |s: &IndexService, k: &str, max: usize| {
            s.query_offset("T", k, max, 0, i64::MAX).phy_offsets
        };
        let expect: Vec<i64> = (0..20).rev().map(|i| i * 100).collect();
        assert_eq!(q(&s, "shared", 64), expect);
        assert_eq!(q(&s, "shared", 5), expect[..5]);
        for i in 0..20i64 {
            assert_eq!(q(&s, &format!("U{i}"), 64), vec![i * 100]);
            assert_eq!(q(&s, &format!("k{i}"), 64), vec![i * 100]);
        }
        // Time window: messages 5..=9.
        let r = s.query_offset("T", "shared", 64, t0 + 5000, t0 + 9000);
        assert_eq!(r.phy_offsets, vec![900, 800, 700, 600, 500]);
        assert_eq!(r.index_last_update_phy_offset, 1900);
        assert_eq!(r.index_last_update_timestamp, t0 + 19_000);

        s.flush().unwrap();
        assert!(s.index_msg_timestamp() > 0);
        let answers: Vec<_> = ["shared", "U3", "k17", "nope"]
            .iter()
            .map(|k| s.query_offset("T", k, 64, 0, i64::MAX))
            .collect();
        drop(s);

        let s = IndexService::load(&dir, 8, 4).unwrap();
        assert_eq!(s.file_names(), names);
        for (k, a) in ["shared", "U3", "k17", "nope"].iter().zip(&answers) {
            assert_eq!(&s.query_offset("T", k, 64, 0, i64::MAX), a);
        }
        // Re-dispatching an old message is skipped after reload too.
        s.build_index("T", Some("late"), None, 1000, t0, 0).unwrap();
        assert!(q(&s, "late", 64).is_empty());

        // Expiry: files wholly below offset 1000 (their end phy offset < 1000).
        let before = s.files().len();
        let n = s.delete_expired(1000).unwrap();
        assert!(n > 0);
        assert_eq!(s.files().len(), before - n);
        assert!(s.files().iter().all(|f| f.end_phy_offset() >= 1000));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), before - n);
        assert_eq!(q(&s, "shared", 64), expect[..10]);
        // Never the last file (here the empty file the skipped "late" message rolled to).
        let last = s.last_file().unwrap().file_name().to_owned();
        s.delete_expired(i64::MAX).unwrap();
        assert_eq!(s.file_names(), vec![last]);
        assert!(q(&s, "U19", 64).is_empty());

        // A new file after reload keeps the names ordered.
        for i in 20..30i64 {
            s.build_index("T", Some("more"), None, i * 100, t0 + i * 1000, 0)
                .unwrap();
        }
        let names = s.file_names();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, names);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn destroy_newer_than_drops_late_files() {
        let d = tmp("newer");
        let s = service(&d, 8, 3);
        let t0 = 1_700_000_000_000;
        for i in 0..6i64 {
            s.build_index("T", Some("k"), None, i * 10, t0 + i * 1000, 0)
                .unwrap();
        }
        // 2 entries per file: ends at t0+1000, t0+3000, t0+5000.
        assert_eq!(s.files().len(), 3);
        assert_eq!(s.destroy_newer_than(t0 + 3000).unwrap(), 1);
        assert_eq!(s.files().len(), 2);
        assert_eq!(
            s.query_offset("T", "k", 64, 0, i64::MAX).phy_offsets,
            vec![30, 20, 10, 0]
        );
        // Re-dispatch rebuilds from the last kept file's end (its last message, already
        // indexed, is not indexed twice).
        for i in 3..6i64 {
            s.build_index("T", Some("k"), None, i * 10, t0 + i * 1000, 0)
                .unwrap();
        }
        assert_eq!(
            s.query_offset("T", "k", 64, 0, i64::MAX).phy_offsets,
            vec![50, 40, 30, 20, 10, 0]
        );
        s.destroy().unwrap();
        assert!(s.files().is_empty());
        assert_eq!(std::fs::read_dir(d.join("index")).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn load_rejects_strangers_and_wrong_sizes_before_changing_anything() {
        let d = tmp("reject");
        let dir = d.join("index");
        // Missing folder: empty.
        assert!(IndexService::load(&dir, 8, 4).unwrap().files().is_empty());
        assert!(matches!(
            IndexService::load(&dir, 0, 4),
            Err(StoreError::Config { .. })
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("20240101000000000");
        IndexFile::create(&good, 8, 4, 0, 0).unwrap();
        std::fs::write(dir.join("notes.txt"), b"x").unwrap();
        match IndexService::load(&dir, 8, 4) {
            Err(StoreError::Corrupted { path, .. }) => assert!(path.ends_with("notes.txt")),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(dir.join("notes.txt")).unwrap();
        let bad = dir.join("20240101000000001");
        std::fs::write(&bad, vec![0u8; 100]).unwrap();
        match IndexService::load(&dir, 8, 4) {
            Err(StoreError::Corrupted { path, reason }) => {
                assert!(path.ends_with("20240101000000001"));
                assert!(reason.contains("100 bytes"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            IndexFile::load(&bad, 8, 4),
            Err(StoreError::Corrupted { .. })
        ));
        // Nothing was changed.
        assert_eq!(std::fs::metadata(&bad).unwrap().len(), 100);
        assert_eq!(std::fs::metadata(&good).unwrap().len(), 40 + 32 + 80);
        std::fs::remove_file(&bad).unwrap();
        // Wrong settings for the files present: wrong size.
        assert!(matches!(
            IndexService::load(&dir, 16, 4),
            Err(StoreError::Corrupted { .. })
        ));
        std::fs::create_dir(dir.join("20240101000000002")).unwrap();
        assert!(matches!(
            IndexService::load(&dir, 8, 4),
            Err(StoreError::Corrupted { .. })
        ));
        std::fs::remove_dir(dir.join("20240101000000002")).unwrap();
        assert_eq!(IndexService::load(&dir, 8, 4).unwrap().files().len(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn truncated_file_is_corrupted_and_garbage_header_is_safe() {
        let d = tmp("damaged");
        let dir = d.join("index");
        let s = IndexService::load(&dir, 8, 16).unwrap();
        for i in 0..10 {
            s.build_index("T", Some("k"), None, i, 1_700_000_000_000 + i, 0)
                .unwrap();
        }
        let path = s.last_file().unwrap().path().to_path_buf();
        drop(s);
        let full = std::fs::read(&path).unwrap();

        // Truncated: an error naming the file.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(full.len() as u64 - 3).unwrap();
        drop(f);
        match IndexService::load(&dir, 8, 16) {
            Err(StoreError::Corrupted { path: p, .. }) => assert_eq!(p, path),
            other => panic!("{other:?}"),
        }

        // Garbage header: indexCount huge, negative begin timestamp, self-loop slots.
        let mut bytes = full.clone();
        bytes[36..40].copy_from_slice(&i32::MAX.to_be_bytes());
        bytes[0..8].copy_from_slice(&i64::MIN.to_be_bytes());
        for s in 0..8 {
            let at = 40 + s * 4;
            bytes[at..at + 4].copy_from_slice(&15i32.to_be_bytes());
        }
        std::fs::write(&path, &bytes).unwrap();
        let s = IndexService::load(&dir, 8, 16).unwrap();
        let _ = s.query_offset("T", "k", 64, i64::MIN, i64::MAX);
        // Full by its header: the next message rolls to a new file.
        s.build_index("T", Some("k"), None, 100, 1_700_000_001_000, 0)
            .unwrap();
        assert_eq!(s.files().len(), 2);
        assert_eq!(
            s.query_offset("T", "k", 1, 0, i64::MAX).phy_offsets,
            vec![100]
        );

        // (The rewrite below truncates the file: nothing may map it meanwhile.)
        drop(s);

        // indexCount <= 0 is taken as 1.
        let mut bytes = full;
        bytes[36..40].copy_from_slice(&(-5i32).to_be_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let f = IndexFile::load(&path, 8, 16).unwrap();
        assert_eq!(f.index_count(), 1);
        assert!(f.is_dirty());
        assert!(f.select_phy_offsets("T#k", 64, 0, i64::MAX).is_empty());
        assert!(f.put_key("T#k", 5, 1_700_000_000_000));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn readers_run_beside_the_writer() {
        let d = tmp("concurrent");
        let s = Arc::new(service(&d, 32, 64));
        let t0 = 1_700_000_000_000;
        let writer = {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                for i in 0..2000i64 {
                    s.build_index("T", Some("k"), Some(&format!("U{i}")), i, t0 + i, 0)
                        .unwrap();
                }
            })
        };
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    for _ in 0..300 {
                        let r = s.query_offset("T", "k", 64, 0, i64::MAX).phy_offsets;
                        // Newest first, offsets only ever from the writer.
                        assert!(r.windows(2).all(|w| w[0] > w[1]), "{r:?}");
                        assert!(r.iter().all(|&o| (0..2000).contains(&o)));
                    }
                })
            })
            .collect();
        writer.join().unwrap();
        for r in readers {
            r.join().unwrap();
        }
        let r = s.query_offset("T", "k", 64, 0, i64::MAX).phy_offsets;
        assert_eq!(r, (1936..2000).rev().collect::<Vec<_>>());
        assert_eq!(
            s.query_offset("T", "U1234", 64, 0, i64::MAX).phy_offsets,
            vec![1234]
        );
        s.flush().unwrap();
        let _ = std::fs::remove_dir_all(&d);
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 128,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Random bytes over the header, slots and entries: loading, querying and putting never
        /// panic or hang.
        #[test]
        fn random_file_contents_are_safe(
            body in proptest::collection::vec(any::<u8>(), (40 + 8 * 4 + 16 * 20)..=(40 + 8 * 4 + 16 * 20)),
            keep_header in any::<bool>(),
            small_values in any::<bool>(),
            keys in proptest::collection::vec("[a-z]{0,3}", 1..6),
        ) {
            let d = tmp("prop");
            let path = d.join("20240101000000000");
            let mut bytes = body;
            if small_values {
                // Make slot/prev values mostly land in range so chains are actually walked.
                for w in bytes[40..].chunks_mut(4) {
                    w[0] = 0;
                    w[1] = 0;
                    w[2] = 0;
                    w[3] %= 20;
                }
            }
            if keep_header {
                let h = IndexHeader {
                    begin_timestamp: 1_700_000_000_000,
                    end_timestamp: 1_700_000_100_000,
                    begin_phy_offset: 0,
                    end_phy_offset: 1000,
                    hash_slot_count: 3,
                    index_count: 12,
                };
                bytes[..40].copy_from_slice(&h.to_bytes());
            }
            std::fs::write(&path, &bytes).unwrap();
            let f = IndexFile::load(&path, 8, 16).unwrap();
            for k in &keys {
                let _ = f.select_phy_offsets(k, 64, 0, i64::MAX);
                let _ = f.select_phy_offsets(k, usize::MAX, i64::MIN, i64::MAX);
                let _ = f.is_time_matched(0, i64::MAX);
            }
            for (i, k) in keys.iter().enumerate() {
                let _ = f.put_key(k, i as i64, 1_700_000_000_000 + i as i64);
                let _ = f.select_phy_offsets(k, 64, 0, i64::MAX);
            }
            f.flush().unwrap();
            drop(f);
            let s = IndexService::load(&d, 8, 16).unwrap();
            for (j, k) in keys.iter().enumerate() {
                let _ = s.query_offset("T", k, 64, 0, i64::MAX);
                let phy = 2000 + j as i64;
                s.build_index("T", Some(k), Some(k), phy, 1_700_000_200_000, 0).unwrap();
                // (Open-ended: the first entry of a rolled file carries RocketMQ's time skew.)
                let r = s.query_offset("T", k, 64, 1_700_000_200_000, i64::MAX);
                if keep_header {
                    prop_assert_eq!(r.phy_offsets.first(), Some(&phy));
                }
            }
            drop(s);
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}
