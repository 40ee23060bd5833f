//! The ordered segments of one folder (RocketMQ's `MappedFileQueue`): 20-digit names, strict
//! load, lookup by offset, truncation of a dirty tail and flushing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::error::{Result, StoreError};
use crate::file::mapped_file::MappedFile;
use crate::util::{file_name_to_offset, offset_to_file_name};

pub(crate) struct MappedFileQueue {
    dir: PathBuf,
    file_size: i64,
    files: RwLock<Vec<Arc<MappedFile>>>,
    flushed_where: AtomicI64,
    committed_where: AtomicI64,
    store_timestamp: AtomicI64,
    /// An empty last segment found at load, removed once opening may change files.
    empty_leftover: Mutex<Option<PathBuf>>,
    /// Segments a deletion took out of `files` while something still held them, oldest first:
    /// unlinked once nothing does, or once the forcible interval has passed (RocketMQ keeps
    /// such a segment first in its queue, unavailable, until `destroy` succeeds).
    hanged: Mutex<Vec<Arc<MappedFile>>>,
    /// Last time a read-only queue looked for segments removed from its front (ms).
    front_checked_ms: AtomicI64,
}

/// What one deletion attempt on the first segment did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrontDeletion {
    /// The segment was taken out and its file removed.
    Deleted(PathBuf),
    /// The segment was taken out but is still held: its file stays until nothing holds it or
    /// the forcible interval has passed.
    Held(PathBuf),
    /// Nothing to delete: a single (writing) segment, or the first one does not qualify.
    Kept,
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How often a read-only queue checks whether the writer removed its first segments.
const READ_ONLY_FRONT_CHECK_MS: i64 = 20;

impl std::fmt::Debug for MappedFileQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFileQueue")
            .field("dir", &self.dir)
            .field("files", &self.files().len())
            .finish()
    }
}

/// What a folder scan found, before anything is changed.
struct Listing {
    files: Vec<(i64, PathBuf, u64)>,
}

fn list_segments(dir: &Path, file_size: i64) -> Result<Listing> {
    let entries = std::fs::read_dir(dir).map_err(|e| StoreError::io("cannot list", dir, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io("cannot list", dir, e))?;
        let path = entry.path();
        let name = entry.file_name();
        let Some(offset) = name.to_str().and_then(file_name_to_offset) else {
            return Err(StoreError::corrupted(
                &path,
                "unexpected file in a segment folder (names must be 20-digit offsets)",
            ));
        };
        let meta = std::fs::symlink_metadata(&path)
            .map_err(|e| StoreError::io("cannot stat", &path, e))?;
        if !meta.is_file() {
            return Err(StoreError::corrupted(
                &path,
                "not a regular file in a segment folder",
            ));
        }
        files.push((offset, path, meta.len()));
    }
    files.sort_by_key(|f| f.0);
    let n = files.len();
    for (i, (offset, path, len)) in files.iter().enumerate() {
        let last = i + 1 == n;
        if *len != file_size as u64 && !(last && *len == 0) {
            return Err(StoreError::corrupted(
                path,
                format!(
                    "segment is {len} bytes but the configured size is {file_size} \
                     (was the store written with another segment size?)"
                ),
            ));
        }
        if offset.checked_add(file_size).is_none() {
            return Err(StoreError::corrupted(
                path,
                format!(
                    "segment offset {offset} is too large: the segment would end past the \
                     largest offset ({})",
                    i64::MAX
                ),
            ));
        }
        if offset % file_size != 0 {
            return Err(StoreError::corrupted(
                path,
                format!(
                    "segment offset {offset} is not a multiple of the segment size {file_size}"
                ),
            ));
        }
        if i > 0 && *offset != files[i - 1].0 + file_size {
            return Err(StoreError::corrupted(
                path,
                format!(
                    "gap before this segment: the previous one starts at {}",
                    files[i - 1].0
                ),
            ));
        }
    }
    Ok(Listing { files })
}

impl MappedFileQueue {
    /// Loads every segment of `dir` (created if missing). The folder is checked whole before
    /// anything changes: a foreign file, a link, a wrong size or a gap is an error naming the
    /// file. A last file of length 0 (a crash during allocation) holds nothing: it is set aside
    /// for [`MappedFileQueue::remove_empty_leftover`], which removes it as RocketMQ does once
    /// opening may change files.
    pub(crate) fn load(dir: &Path, file_size: i64) -> Result<MappedFileQueue> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io("cannot create", dir, e))?;
        let listing = list_segments(dir, file_size)?;
        let mut files = Vec::with_capacity(listing.files.len());
        let mut leftover = None;
        for (offset, path, len) in listing.files {
            if len == 0 {
                leftover = Some(path);
                continue;
            }
            files.push(Arc::new(MappedFile::open_existing(
                &path, offset, file_size,
            )?));
        }
        let flushed = files
            .last()
            .map(|f| f.file_from_offset() + file_size)
            .unwrap_or(0);
        Ok(MappedFileQueue {
            dir: dir.to_path_buf(),
            file_size,
            files: RwLock::new(files),
            flushed_where: AtomicI64::new(flushed),
            committed_where: AtomicI64::new(flushed),
            store_timestamp: AtomicI64::new(0),
            empty_leftover: Mutex::new(leftover),
            hanged: Mutex::new(Vec::new()),
            front_checked_ms: AtomicI64::new(0),
        })
    }

    /// Removes the empty last segment [`MappedFileQueue::load`] set aside, if any; true if one
    /// was removed.
    pub(crate) fn remove_empty_leftover(&self) -> Result<bool> {
        let Some(path) = self
            .empty_leftover
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return Ok(false);
        };
        log::warn!(
            target: "rmqstore.mapped_file_queue",
            "removing empty segment {} left by an interrupted allocation",
            path.display()
        );
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(StoreError::io("cannot remove empty segment", &path, e)),
        }
    }

    /// Loads the segments of `dir` for reading only (a read-only store), changing nothing: a
    /// missing folder is an empty queue, and a last segment another process is still creating
    /// (not yet of the configured size) is left out until [`MappedFileQueue::reload_read_only`]
    /// finds it whole. Segments start with nothing readable (see
    /// [`MappedFile::set_read_only_position`]).
    pub(crate) fn load_read_only(dir: &Path, file_size: i64) -> Result<MappedFileQueue> {
        let q = MappedFileQueue {
            dir: dir.to_path_buf(),
            file_size,
            files: RwLock::new(Vec::new()),
            flushed_where: AtomicI64::new(0),
            committed_where: AtomicI64::new(0),
            store_timestamp: AtomicI64::new(0),
            empty_leftover: Mutex::new(None),
            hanged: Mutex::new(Vec::new()),
            front_checked_ms: AtomicI64::new(0),
        };
        q.reload_read_only()?;
        Ok(q)
    }

    /// Read-only queues: picks up segments another process added after the last one known, and
    /// forgets those it deleted from the front. Returns true when the list changed.
    pub(crate) fn reload_read_only(&self) -> Result<bool> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(StoreError::io("cannot list", &self.dir, e)),
        };
        let mut on_disk = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io("cannot list", &self.dir, e))?;
            if let Some(offset) = entry.file_name().to_str().and_then(file_name_to_offset) {
                if offset % self.file_size == 0 && offset.checked_add(self.file_size).is_some() {
                    on_disk.push(offset);
                }
            }
        }
        on_disk.sort_unstable();
        let mut files = self.write_files();
        let mut changed = false;
        // Deleted from the front (expired): forget them (readers holding one keep its mapping).
        let first_on_disk = on_disk.first().copied().unwrap_or(i64::MAX);
        let before = files.len();
        files.retain(|f| f.file_from_offset() >= first_on_disk);
        changed |= files.len() != before;
        let mut next = files.last().map(|f| f.file_from_offset() + self.file_size);
        for offset in on_disk {
            if next.is_some_and(|n| offset < n) {
                continue;
            }
            if next.is_some_and(|n| offset != n) {
                // A gap: the files after it cannot be placed; stop at what is contiguous.
                break;
            }
            match MappedFile::open_read_only(&self.path_for(offset), offset, self.file_size) {
                Ok(Some(f)) => {
                    files.push(Arc::new(f));
                    next = Some(offset + self.file_size);
                    changed = true;
                }
                // Still being created: the next reload sees it.
                Ok(None) => break,
                // Deleted by the writer since the listing: at the front (nothing placed yet)
                // the next one takes its place, elsewhere the next reload sees the change.
                Err(StoreError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    if files.is_empty() {
                        continue;
                    }
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(changed)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn file_size(&self) -> i64 {
        self.file_size
    }

    /// Path of the segment starting at `offset`.
    pub(crate) fn path_for(&self, offset: i64) -> PathBuf {
        self.dir.join(offset_to_file_name(offset))
    }

    fn read_files(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<MappedFile>>> {
        self.files.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_files(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<MappedFile>>> {
        self.files.write().unwrap_or_else(|p| p.into_inner())
    }

    /// A snapshot of the segments, oldest first.
    pub(crate) fn files(&self) -> Vec<Arc<MappedFile>> {
        self.read_files().clone()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.read_files().is_empty()
    }

    pub(crate) fn first(&self) -> Option<Arc<MappedFile>> {
        self.read_files().first().cloned()
    }

    pub(crate) fn last(&self) -> Option<Arc<MappedFile>> {
        self.read_files().last().cloned()
    }

    /// Where the next segment starts: right after the last one, or the segment holding
    /// `start_offset` when the queue is empty.
    pub(crate) fn next_file_offset(&self, start_offset: i64) -> i64 {
        match self.last() {
            Some(last) => last.file_from_offset() + self.file_size,
            None => start_offset - start_offset.rem_euclid(self.file_size),
        }
    }

    /// Appends a freshly created segment; it must start right after the current last one.
    pub(crate) fn push(&self, file: Arc<MappedFile>) -> Result<()> {
        let mut files = self.write_files();
        if let Some(last) = files.last() {
            if file.file_from_offset() != last.file_from_offset() + self.file_size {
                return Err(StoreError::corrupted(
                    file.path(),
                    "new segment does not follow the last one",
                ));
            }
        }
        files.push(file);
        Ok(())
    }

    /// `findMappedFileByOffset`: the segment holding `offset`, if any.
    pub(crate) fn find_by_offset(&self, offset: i64) -> Option<Arc<MappedFile>> {
        let files = self.read_files();
        let first = files.first()?;
        let last = files.last()?;
        if offset < first.file_from_offset() || offset >= last.file_from_offset() + self.file_size {
            return None;
        }
        let idx = (offset / self.file_size - first.file_from_offset() / self.file_size) as usize;
        match files.get(idx) {
            Some(f)
                if f.file_from_offset() <= offset
                    && offset < f.file_from_offset() + self.file_size =>
            {
                Some(f.clone())
            }
            _ => files
                .iter()
                .find(|f| {
                    f.file_from_offset() <= offset && offset < f.file_from_offset() + self.file_size
                })
                .cloned(),
        }
    }

    /// `getMinOffset`: start of the first segment, -1 when empty.
    pub(crate) fn min_offset(&self) -> i64 {
        self.first().map(|f| f.file_from_offset()).unwrap_or(-1)
    }

    /// `getMaxOffset`: end of the readable region of the last segment, 0 when empty.
    pub(crate) fn max_offset(&self) -> i64 {
        self.last()
            .map(|f| f.file_from_offset() + f.read_position())
            .unwrap_or(0)
    }

    pub(crate) fn flushed_where(&self) -> i64 {
        self.flushed_where.load(Ordering::Acquire)
    }

    pub(crate) fn set_flushed_where(&self, offset: i64) {
        self.flushed_where.store(offset, Ordering::Release);
    }

    /// How far the segments' write buffers are committed to the files (`getCommittedWhere`).
    pub(crate) fn committed_where(&self) -> i64 {
        self.committed_where.load(Ordering::Acquire)
    }

    pub(crate) fn set_committed_where(&self, offset: i64) {
        self.committed_where.store(offset, Ordering::Release);
    }

    /// The segment a commit or flush position is in (the first segment for position 0, whatever
    /// offset it starts at).
    fn segment_at(&self, position: i64) -> Option<Arc<MappedFile>> {
        self.find_by_offset(position)
            .or_else(|| if position == 0 { self.first() } else { None })
    }

    /// `commit(leastPages)` on the segment holding the committed position; true iff nothing
    /// moved. A segment without a write buffer counts as committed up to what it holds.
    pub(crate) fn commit(&self, least_pages: i64) -> Result<bool> {
        let where_ = self.committed_where();
        let Some(file) = self.segment_at(where_) else {
            return Ok(true);
        };
        let new_where = file.file_from_offset() + file.commit(least_pages)?;
        // Only ever forward: a concurrent truncation sets it lower itself.
        let moved = new_where > where_;
        if moved {
            self.set_committed_where(new_where);
        }
        Ok(!moved)
    }

    /// Store timestamp of the last message seen by a `flush(0)`.
    pub(crate) fn store_timestamp(&self) -> i64 {
        self.store_timestamp.load(Ordering::Acquire)
    }

    /// `flush(leastPages)` on the segment holding the flushed position; true iff nothing moved.
    pub(crate) fn flush(&self, least_pages: i64) -> Result<bool> {
        let where_ = self.flushed_where();
        let Some(file) = self.segment_at(where_) else {
            return Ok(true);
        };
        let ts = file.store_timestamp();
        let offset = file.flush(least_pages)?;
        let new_where = file.file_from_offset() + offset;
        let unchanged = new_where == where_;
        self.set_flushed_where(new_where);
        if least_pages == 0 {
            self.store_timestamp.store(ts, Ordering::Release);
        }
        Ok(unchanged)
    }

    /// Removes the file of a segment already taken out of `files`, as
    /// `DefaultMappedFile.destroy(intervalForcibly)` does: at once when nothing but the
    /// caller's one handle holds it, else only once `forcibly_ms` have passed since the first
    /// attempt. Removing the name never invalidates a mapping: holders keep reading the same
    /// bytes until they let go. True when the file was removed.
    fn try_unlink(file: &Arc<MappedFile>, forcibly_ms: i64, now: i64) -> Result<bool> {
        let first = file.shutdown(now);
        let holders = Arc::strong_count(file).saturating_sub(1);
        if holders > 0 && now.saturating_sub(first) < forcibly_ms {
            log::warn!(
                target: "rmqstore.mapped_file_queue",
                "segment {} is still held by {holders} reader(s): its deletion waits for them \
                 (at most {forcibly_ms} ms after the first attempt)",
                file.path().display()
            );
            return Ok(false);
        }
        file.destroy()?;
        log::info!(
            target: "rmqstore.mapped_file_queue",
            "deleted segment {}{}",
            file.path().display(),
            if holders > 0 {
                format!(" (forcibly: {holders} reader(s) keep their mapping)")
            } else {
                String::new()
            }
        );
        Ok(true)
    }

    fn lock_hanged(&self) -> std::sync::MutexGuard<'_, Vec<Arc<MappedFile>>> {
        self.hanged.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Segments taken out of the queue whose files are still there because something held
    /// them, oldest first.
    pub(crate) fn hanged_paths(&self) -> Vec<PathBuf> {
        self.lock_hanged()
            .iter()
            .map(|f| f.path().to_path_buf())
            .collect()
    }

    /// `retryDeleteFirstFile` for every segment a deletion took out while it was held, oldest
    /// first, stopping at the first one still held. Returns the paths removed and whether one
    /// is still waiting.
    pub(crate) fn retry_hanged(&self, forcibly_ms: i64, now: i64) -> Result<(Vec<PathBuf>, bool)> {
        let mut hanged = self.lock_hanged();
        let mut removed = Vec::new();
        while let Some(f) = hanged.first() {
            if !Self::try_unlink(f, forcibly_ms, now)? {
                return Ok((removed, true));
            }
            removed.push(f.path().to_path_buf());
            hanged.remove(0);
        }
        Ok((removed, false))
    }

    /// At close: removes the files of every segment still waiting in the hanged list, held
    /// or not (holders keep their mappings). Failures are logged.
    pub(crate) fn remove_hanged(&self) {
        if let Err(e) = self.retry_hanged(0, now_ms()) {
            log::warn!(target: "rmqstore.mapped_file_queue", "{e}");
        }
    }

    /// One step of `deleteExpiredFileByTime` / `deleteExpiredFileByOffset`: when the queue has
    /// more than one segment (the last, being written, is never deleted) and `qualifies` says
    /// the first may go, takes it out of the queue (no reader finds it from then on) and
    /// removes its file as [`MappedFileQueue::try_unlink`] says; a segment still held waits in
    /// the hanged list for [`MappedFileQueue::retry_hanged`].
    pub(crate) fn delete_first_if(
        &self,
        qualifies: impl FnOnce(&MappedFile) -> bool,
        forcibly_ms: i64,
        now: i64,
    ) -> Result<FrontDeletion> {
        let (file, new_min) = {
            let mut files = self.write_files();
            if files.len() < 2 || !qualifies(&files[0]) {
                return Ok(FrontDeletion::Kept);
            }
            let file = files.remove(0);
            (file, files[0].file_from_offset())
        };
        // Nothing below the new first segment is flushed or committed any more.
        self.flushed_where.fetch_max(new_min, Ordering::AcqRel);
        self.committed_where.fetch_max(new_min, Ordering::AcqRel);
        let path = file.path().to_path_buf();
        match Self::try_unlink(&file, forcibly_ms, now) {
            Ok(true) => Ok(FrontDeletion::Deleted(path)),
            Ok(false) => {
                self.lock_hanged().push(file);
                Ok(FrontDeletion::Held(path))
            }
            Err(e) => {
                self.lock_hanged().push(file);
                Err(e)
            }
        }
    }

    /// Read-only queues: whether the writer removed the first segment since it was loaded
    /// (looked at most every [`READ_ONLY_FRONT_CHECK_MS`]); the caller then reloads.
    pub(crate) fn front_removed(&self) -> bool {
        let now = now_ms();
        let last = self.front_checked_ms.load(Ordering::Acquire);
        if now.saturating_sub(last) < READ_ONLY_FRONT_CHECK_MS
            || self
                .front_checked_ms
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return false;
        }
        self.first().is_some_and(|f| !f.is_on_disk())
    }

    /// `truncateDirtyFiles`: the segment holding `offset` ends there (its tail zeroed), later
    /// segments are deleted.
    ///
    /// # Safety
    /// As [`MappedFile::truncate_to`]: no slice of the queue's bytes past `offset` may be alive
    /// and nothing may append to the queue until this returns.
    pub(crate) unsafe fn truncate_dirty(&self, offset: i64) -> Result<()> {
        let mut files = self.write_files();
        let mut keep = Vec::with_capacity(files.len());
        for f in files.drain(..) {
            let end = f.file_from_offset() + self.file_size;
            if end > offset {
                if offset >= f.file_from_offset() {
                    // SAFETY: the caller excludes readers past `offset` and appenders.
                    unsafe { f.truncate_to(offset - f.file_from_offset()) }?;
                    keep.push(f);
                } else {
                    log::info!(
                        target: "rmqstore.mapped_file_queue",
                        "deleting segment {} past the truncation offset {offset}",
                        f.path().display()
                    );
                    f.destroy()?;
                }
            } else {
                keep.push(f);
            }
        }
        *files = keep;
        drop(files);
        if self.flushed_where() > offset {
            self.set_flushed_where(offset);
        }
        if self.committed_where() > offset {
            self.set_committed_where(offset);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rmqstore-mfq-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn fill(q: &MappedFileQueue, n: usize, rec: i64) {
        for _ in 0..n {
            let last = q.last().filter(|f| !f.is_full());
            let f = match last {
                Some(f) => f,
                None => {
                    let off = q.next_file_offset(0);
                    let f =
                        Arc::new(MappedFile::create(&q.path_for(off), off, q.file_size()).unwrap());
                    q.push(f.clone()).unwrap();
                    f
                }
            };
            unsafe { f.append_with(rec, |b| b.fill(1)) }.unwrap();
        }
    }

    #[test]
    fn roll_find_flush_like_mapped_file_queue_test() {
        let d = tmp("roll");
        let q = MappedFileQueue::load(&d, 1024).unwrap();
        fill(&q, 128, 16); // 2 files of 1 KiB
        assert_eq!(q.files().len(), 2);
        assert_eq!(q.max_offset(), 2048);
        assert_eq!(q.min_offset(), 0);
        assert_eq!(q.find_by_offset(0).unwrap().file_from_offset(), 0);
        assert_eq!(q.find_by_offset(1023).unwrap().file_from_offset(), 0);
        assert_eq!(q.find_by_offset(1024).unwrap().file_from_offset(), 1024);
        assert_eq!(q.find_by_offset(2047).unwrap().file_from_offset(), 1024);
        assert!(q.find_by_offset(2048).is_none());
        assert!(q.find_by_offset(-1).is_none());
        // flush(0) moves 1 KiB per call and returns false while it moves.
        q.set_flushed_where(0);
        assert!(!q.flush(0).unwrap());
        assert_eq!(q.flushed_where(), 1024);
        assert!(!q.flush(0).unwrap());
        assert_eq!(q.flushed_where(), 2048);
        assert!(q.flush(0).unwrap());
        // Truncation into the first file deletes the second.
        unsafe { q.truncate_dirty(512) }.unwrap();
        assert_eq!(q.files().len(), 1);
        assert_eq!(q.max_offset(), 512);
        assert!(!d.join("00000000000000001024").exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn strict_load() {
        let d = tmp("strict");
        let q = MappedFileQueue::load(&d, 1024).unwrap();
        fill(&q, 100, 16);
        drop(q);
        // A zero-length last file is left out, and removed once the caller says changes may
        // begin.
        std::fs::write(d.join("00000000000000002048"), b"").unwrap();
        let q = MappedFileQueue::load(&d, 1024).unwrap();
        assert_eq!(q.files().len(), 2);
        assert!(d.join("00000000000000002048").exists());
        assert!(q.remove_empty_leftover().unwrap());
        assert!(!d.join("00000000000000002048").exists());
        assert!(!q.remove_empty_leftover().unwrap());
        drop(q);
        // Wrong configured size: error naming the file, nothing removed.
        let err = MappedFileQueue::load(&d, 2048).unwrap_err().to_string();
        assert!(err.contains("00000000000000000000"), "{err}");
        // A stray file.
        std::fs::write(d.join("notes.txt"), b"x").unwrap();
        let err = MappedFileQueue::load(&d, 1024).unwrap_err().to_string();
        assert!(err.contains("notes.txt"), "{err}");
        std::fs::remove_file(d.join("notes.txt")).unwrap();
        // A gap.
        std::fs::rename(
            d.join("00000000000000001024"),
            d.join("00000000000000003072"),
        )
        .unwrap();
        let err = MappedFileQueue::load(&d, 1024).unwrap_err().to_string();
        assert!(err.contains("gap"), "{err}");
        assert!(d.join("00000000000000003072").exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn commit_moves_across_buffered_and_direct_segments() {
        let d = tmp("commit");
        let pool = crate::file::transient_pool::TransientStorePool::new(1, 1024).unwrap();
        let q = MappedFileQueue::load(&d, 1024).unwrap();
        q.set_committed_where(0);
        // Segment 0 borrows the only buffer; segment 1 is written directly.
        for off in [0, 1024] {
            let f = Arc::new(MappedFile::create(&q.path_for(off), off, 1024).unwrap());
            if let Some(b) = pool.borrow() {
                f.attach_write_buffer(b).unwrap();
            }
            q.push(f.clone()).unwrap();
            unsafe { f.append_with(1024, |b| b.fill(off as u8 / 4 + 1)) }.unwrap();
        }
        // Segment 1 reads at once, segment 0 only after its commit: the queue's end says 2048,
        // which is why the commitlog bounds reads by the committed position with a pool.
        assert_eq!(q.max_offset(), 2048);
        assert!(q.files()[0].read(0, 1).is_none());
        assert!(!q.commit(0).unwrap());
        assert_eq!(q.committed_where(), 1024);
        assert_eq!(
            pool.available(),
            1,
            "a fully committed segment gives its buffer back"
        );
        assert!(!q.commit(0).unwrap());
        assert_eq!(q.committed_where(), 2048);
        assert!(q.commit(0).unwrap(), "nothing left to commit");
        assert_eq!(
            std::fs::read(d.join("00000000000000000000")).unwrap(),
            [1u8; 1024]
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Whether the first segment may go: always.
    fn any(_: &MappedFile) -> bool {
        true
    }

    /// MappedFileQueueTest.testDeleteExpiredFileByTime with a held segment: a segment a
    /// reader holds is taken out of the queue at once (no new reader finds it, the minimum
    /// moves past it) but its file stays until the reader lets go, or until the forcible
    /// interval has passed since the first attempt; the next segments wait behind it.
    #[test]
    fn a_held_segment_waits_for_its_reader_or_the_forcible_interval() {
        let d = tmp("held");
        let q = MappedFileQueue::load(&d, 1024).unwrap();
        fill(&q, 64 * 5, 16); // 5 full segments
        let files = q.files();
        let paths: Vec<PathBuf> = files.iter().map(|f| f.path().to_path_buf()).collect();
        let reader = files[0].clone();
        drop(files);
        let now = now_ms();
        let step = q.delete_first_if(any, 10_000, now).unwrap();
        assert_eq!(step, FrontDeletion::Held(paths[0].clone()));
        assert!(!reader.is_available());
        assert!(paths[0].exists(), "held: the file stays");
        assert_eq!(q.min_offset(), 1024, "but no reader finds it any more");
        assert!(q.find_by_offset(0).is_none());
        assert_eq!(q.hanged_paths(), vec![paths[0].clone()]);
        // Still held, before the interval: nothing moves (retried later, ahead of the rest).
        assert_eq!(q.retry_hanged(10_000, now + 9_999).unwrap(), (vec![], true));
        assert!(paths[0].exists());
        // The reader lets go: the next retry removes it.
        drop(reader);
        assert_eq!(
            q.retry_hanged(10_000, now + 1).unwrap(),
            (vec![paths[0].clone()], false)
        );
        assert!(!paths[0].exists());
        assert!(q.hanged_paths().is_empty());
        // Held again, then forced once the interval has passed since the first attempt.
        let reader = q.first().unwrap();
        assert_eq!(
            q.delete_first_if(any, 10_000, now).unwrap(),
            FrontDeletion::Held(paths[1].clone())
        );
        assert_eq!(q.retry_hanged(10_000, now + 5_000).unwrap(), (vec![], true));
        assert_eq!(
            q.retry_hanged(10_000, now + 10_000).unwrap(),
            (vec![paths[1].clone()], false)
        );
        assert!(!paths[1].exists());
        // The holder still reads its bytes (the mapping outlives the name).
        assert!(reader.read(0, 1024).unwrap().iter().all(|&b| b == 1));
        drop(reader);
        // Unreferenced: removed at once, whatever the interval.
        assert_eq!(
            q.delete_first_if(any, i64::MAX, now).unwrap(),
            FrontDeletion::Deleted(paths[2].clone())
        );
        // At close, a held segment's file goes whatever the interval.
        let reader = q.first().unwrap();
        let p = reader.path().to_path_buf();
        assert_eq!(
            q.delete_first_if(any, i64::MAX, now).unwrap(),
            FrontDeletion::Held(p.clone())
        );
        q.remove_hanged();
        assert!(!p.exists() && q.hanged_paths().is_empty());
        assert!(reader.read(0, 16).is_some());
        drop(reader);
        // Never the last segment.
        assert_eq!(q.delete_first_if(any, 0, now).unwrap(), FrontDeletion::Kept);
        assert_eq!(q.files().len(), 1);
        assert!(paths[4].exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A reader holding a segment's bytes across its deletion (forced, while it reads) keeps
    /// reading the right bytes, and a queue reloaded afterwards starts at the next segment.
    #[test]
    fn a_reader_holding_bytes_across_deletion_reads_the_right_bytes() {
        let d = tmp("hold-bytes");
        let q = MappedFileQueue::load(&d, 4096).unwrap();
        for seg in 0..3u8 {
            let off = q.next_file_offset(0);
            let f = Arc::new(MappedFile::create(&q.path_for(off), off, 4096).unwrap());
            q.push(f.clone()).unwrap();
            unsafe {
                f.append_with(4096, |b| {
                    for (i, x) in b.iter_mut().enumerate() {
                        *x = (i as u8).wrapping_mul(7).wrapping_add(seg);
                    }
                })
            }
            .unwrap();
        }
        let held = q.find_by_offset(100).unwrap();
        let bytes = held.read(0, 4096).unwrap();
        let expected: Vec<u8> = (0..4096).map(|i| (i as u8).wrapping_mul(7)).collect();
        assert_eq!(bytes, &expected[..]);
        // Forced (interval 0): the file is unlinked while `bytes` is alive.
        let step = q.delete_first_if(any, 0, now_ms()).unwrap();
        assert_eq!(step, FrontDeletion::Deleted(d.join("00000000000000000000")));
        assert!(!d.join("00000000000000000000").exists());
        // The inode lives while it is mapped: every byte reads back the same.
        assert_eq!(bytes, &expected[..]);
        assert_eq!(held.read(4000, 96).unwrap(), &expected[4000..]);
        drop(held);
        drop(q);
        let q = MappedFileQueue::load(&d, 4096).unwrap();
        assert_eq!(q.min_offset(), 4096);
        let second = q.first().unwrap();
        assert_eq!(second.read(1, 1).unwrap(), &[7u8.wrapping_add(1)]);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// MappedFileQueueTest.testDeleteExpiredFileByOffset (consume queues): leading segments go
    /// while the `qualifies` test holds, stopping at the first that fails.
    #[test]
    fn deletion_stops_at_the_first_segment_that_does_not_qualify() {
        let d = tmp("qualify");
        let q = MappedFileQueue::load(&d, 1024).unwrap();
        fill(&q, 64 * 6, 16);
        let keep_from = 3 * 1024;
        let mut removed = 0;
        while let FrontDeletion::Deleted(_) = q
            .delete_first_if(|f| f.file_from_offset() + 1024 <= keep_from, 0, now_ms())
            .unwrap()
        {
            removed += 1;
        }
        assert_eq!(removed, 3);
        assert_eq!(q.min_offset(), keep_from);
        // The flushed and committed positions never stay below the first segment.
        assert!(q.flushed_where() >= keep_from);
        assert!(q.committed_where() >= keep_from);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A read-only queue forgets the segments the writer removed from its front, and a
    /// listing that races a removal never fails.
    #[test]
    fn read_only_queue_drops_removed_front_segments() {
        let d = tmp("ro-front");
        let q = MappedFileQueue::load(&d, 1024).unwrap();
        fill(&q, 64 * 4, 16);
        let ro = MappedFileQueue::load_read_only(&d, 1024).unwrap();
        assert_eq!(ro.files().len(), 4);
        let held = ro.first().unwrap();
        for _ in 0..2 {
            q.delete_first_if(any, 0, now_ms()).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(
            READ_ONLY_FRONT_CHECK_MS as u64 + 5,
        ));
        assert!(ro.front_removed());
        assert!(ro.reload_read_only().unwrap());
        assert_eq!(ro.min_offset(), 2048);
        assert_eq!(ro.files().len(), 2);
        // A holder of a removed segment keeps its mapping.
        unsafe { held.set_read_only_position(1024) };
        assert_eq!(held.read(0, 16).unwrap(), &[1u8; 16]);
        // Nothing left on disk in front of what is known: nothing changes, nothing fails.
        assert!(!ro.reload_read_only().unwrap());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn read_only_reload_finds_new_whole_segments_only() {
        let d = tmp("ro");
        let q = MappedFileQueue::load(&d, 1024).unwrap();
        fill(&q, 64, 16); // one full segment
        let ro = MappedFileQueue::load_read_only(&d, 1024).unwrap();
        assert_eq!(ro.files().len(), 1);
        assert_eq!(
            ro.files()[0].read_position(),
            0,
            "nothing trusted before a refresh"
        );
        assert!(!ro.reload_read_only().unwrap());
        // A segment still being created (not yet its full size) is left for later.
        std::fs::write(d.join("00000000000000001024"), b"").unwrap();
        assert!(!ro.reload_read_only().unwrap());
        std::fs::remove_file(d.join("00000000000000001024")).unwrap();
        fill(&q, 64, 16);
        assert!(ro.reload_read_only().unwrap());
        assert_eq!(ro.files().len(), 2);
        // Nothing was created by the read-only side.
        assert!(MappedFileQueue::load_read_only(&d.join("missing"), 1024)
            .unwrap()
            .is_empty());
        assert!(!d.join("missing").exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
