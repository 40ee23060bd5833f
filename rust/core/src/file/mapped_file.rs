//! One fixed-size segment file mapped into memory (RocketMQ's `DefaultMappedFile`).
//!
//! Concurrency contract: one appender at a time (the owner's append lock), any number of readers.
//! Bytes below the read (committed) position are never changed again while readers may hold
//! them, except by [`MappedFile::truncate_to`], which callers run only with readers excluded.
//! The functions whose callers must uphold part of this contract are `unsafe` and say what in
//! their `# Safety` sections.
//! Positions are atomics published with release/acquire ordering, so a reader that sees a
//! position sees the bytes below.
//!
//! Without a write buffer, appends go straight into the mapping and are readable at once
//! (committed = wrote). With a buffer from the [`TransientStorePool`](crate::file::transient_pool),
//! appends go into the buffer and become readable only when [`MappedFile::commit`] has copied
//! them into the file; a fully committed segment gives its buffer back.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, Ordering};
use std::sync::Mutex;

use memmap2::{Advice, MmapOptions, MmapRaw};

use crate::error::{Result, StoreError};
use crate::file::segment_view::{self, SegmentView};
use crate::file::transient_pool::PoolBuffer;

mod populate;
pub(crate) use populate::Populate;

/// `OS_PAGE_SIZE`.
pub(crate) const OS_PAGE_SIZE: i64 = 4096;

static MLOCK_WARNED: AtomicBool = AtomicBool::new(false);

pub struct MappedFile {
    path: PathBuf,
    file_from_offset: i64,
    file_size: i64,
    // Kept open for the lifetime of the mapping (fsync, fallocate).
    file: File,
    map: MmapRaw,
    wrote: AtomicI64,
    committed: AtomicI64,
    flushed: AtomicI64,
    store_timestamp: AtomicI64,
    locked: AtomicBool,
    /// The write buffer lent by the transient store pool, while the segment has one. Its lock
    /// serialises commits.
    write_buffer: Mutex<Option<PoolBuffer>>,
    /// Where appends go when not null: the start of `write_buffer`.
    buffer_ptr: AtomicPtr<u8>,
    /// False once a deletion took the segment out of its queue (`ReferenceResource.available`).
    available: AtomicBool,
    /// When a deletion first tried to remove it, in ms since the epoch; 0 before
    /// (`firstShutdownTimestamp`).
    first_shutdown_ms: AtomicI64,
    /// The read-only mapping whose bytes bulk reads hand out, made at the first such read.
    view: Mutex<Option<std::sync::Arc<SegmentView>>>,
    /// The first view made, read without the lock while it is attached (reads take the view
    /// once a message).
    first_view: std::sync::OnceLock<std::sync::Arc<SegmentView>>,
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile")
            .field("path", &self.path)
            .field("from", &self.file_from_offset)
            .field("wrote", &self.wrote_position())
            .finish()
    }
}

fn size_to_usize(size: i64) -> usize {
    usize::try_from(size).expect("segment sizes are validated to be positive and < 2 GiB")
}

impl MappedFile {
    /// Creates a new segment of `file_size` bytes with its blocks reserved (so writes through the
    /// mapping cannot hit ENOSPC later, which would be a SIGBUS), then maps it.
    pub fn create(path: &Path, file_from_offset: i64, file_size: i64) -> Result<MappedFile> {
        // O_EXCL: never an existing file, nor a link (even one pointing nowhere).
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| StoreError::io("cannot create segment", path, e))?;
        if let Err(e) = reserve(&file, file_size) {
            drop(file);
            let _ = std::fs::remove_file(path);
            return Err(StoreError::io("cannot reserve space for segment", path, e));
        }
        match Self::map(path, file, file_from_offset, file_size, 0) {
            Ok(m) => Ok(m),
            Err(e) => {
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    /// Maps an existing segment; positions start at the end (recovery sets the real ones).
    pub(crate) fn open_existing(
        path: &Path,
        file_from_offset: i64,
        file_size: i64,
    ) -> Result<MappedFile> {
        let (file, len) = crate::util::open_store_file_len(
            path,
            OpenOptions::new().read(true).write(true),
            "segment",
        )?;
        if len != file_size as u64 {
            return Err(StoreError::corrupted(
                path,
                format!("segment is {len} bytes, expected {file_size}"),
            ));
        }
        Self::map(path, file, file_from_offset, file_size, file_size)
    }

    /// Maps an existing segment for reading only (a read-only store: the file may be written
    /// by another process). Nothing is readable until [`MappedFile::set_read_only_position`]
    /// says how far the bytes can be trusted. `None` when the file is not of `file_size`
    /// bytes yet (another process is creating it).
    pub(crate) fn open_read_only(
        path: &Path,
        file_from_offset: i64,
        file_size: i64,
    ) -> Result<Option<MappedFile>> {
        let (file, len) =
            crate::util::open_store_file_len(path, OpenOptions::new().read(true), "segment")?;
        if len != file_size as u64 {
            return Ok(None);
        }
        let map = MmapOptions::new()
            .map_raw_read_only(&file)
            .map_err(|e| StoreError::io("cannot map", path, e))?;
        Ok(Some(MappedFile {
            path: path.to_path_buf(),
            file_from_offset,
            file_size,
            file,
            map,
            wrote: AtomicI64::new(0),
            committed: AtomicI64::new(0),
            flushed: AtomicI64::new(0),
            store_timestamp: AtomicI64::new(0),
            locked: AtomicBool::new(false),
            write_buffer: Mutex::new(None),
            buffer_ptr: AtomicPtr::new(std::ptr::null_mut()),
            available: AtomicBool::new(true),
            first_shutdown_ms: AtomicI64::new(0),
            view: Mutex::new(None),
            first_view: std::sync::OnceLock::new(),
        }))
    }

    /// Read-only segments: how far their bytes have been checked and may be read.
    ///
    /// # Safety
    /// Nothing in this process appends to or commits into this file (it belongs to a read-only
    /// store): the positions it sets would make readers and an appender share bytes.
    pub(crate) unsafe fn set_read_only_position(&self, pos: i64) {
        let pos = pos.clamp(0, self.file_size);
        self.wrote.store(pos, Ordering::Release);
        self.committed.store(pos, Ordering::Release);
        self.flushed.store(pos, Ordering::Release);
    }

    /// Bytes `[pos, pos+len)` whatever the positions say: for read-only stores scanning what
    /// another process may still be writing. Callers validate what they find.
    ///
    /// # Safety
    /// Nothing in this process may write `[pos, pos+len)` while the returned slice lives (no
    /// [`MappedFile::append_with`], commit, [`MappedFile::truncate_to`] or
    /// [`MappedFile::warm`] on this file): the file belongs to a read-only store. Another
    /// process may still change the bytes; the caller must not trust them before validating.
    pub(crate) unsafe fn read_unchecked(&self, pos: i64, len: i64) -> Option<&[u8]> {
        if pos < 0 || len < 0 || pos + len > self.file_size {
            return None;
        }
        // SAFETY: inside the mapping, which lives as long as `self`; nothing in this process
        // writes the range (the caller's contract); the bytes may change under the reader
        // (another process appends), which callers tolerate by validating them.
        Some(unsafe {
            std::slice::from_raw_parts(
                self.map.as_ptr().add(size_to_usize(pos)),
                size_to_usize(len),
            )
        })
    }

    fn map(
        path: &Path,
        file: File,
        file_from_offset: i64,
        file_size: i64,
        position: i64,
    ) -> Result<MappedFile> {
        let map = MmapRaw::map_raw(&file).map_err(|e| StoreError::io("cannot map", path, e))?;
        if map.len() != size_to_usize(file_size) {
            return Err(StoreError::corrupted(
                path,
                "mapping length differs from file size",
            ));
        }
        Ok(MappedFile {
            path: path.to_path_buf(),
            file_from_offset,
            file_size,
            file,
            map,
            wrote: AtomicI64::new(position),
            committed: AtomicI64::new(position),
            flushed: AtomicI64::new(position),
            store_timestamp: AtomicI64::new(0),
            locked: AtomicBool::new(false),
            write_buffer: Mutex::new(None),
            buffer_ptr: AtomicPtr::new(std::ptr::null_mut()),
            available: AtomicBool::new(true),
            first_shutdown_ms: AtomicI64::new(0),
            view: Mutex::new(None),
            first_view: std::sync::OnceLock::new(),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn file_from_offset(&self) -> i64 {
        self.file_from_offset
    }

    pub(crate) fn file_size(&self) -> i64 {
        self.file_size
    }

    pub(crate) fn wrote_position(&self) -> i64 {
        self.wrote.load(Ordering::Acquire)
    }

    /// What readers may see (`getReadPosition`): the committed position, which is the wrote
    /// position for a segment without a write buffer.
    pub(crate) fn read_position(&self) -> i64 {
        self.committed.load(Ordering::Acquire)
    }

    /// Gives a fresh segment a write buffer from the transient store pool: appends go there
    /// until [`MappedFile::commit`] copies them into the file.
    pub(crate) fn attach_write_buffer(&self, mut buffer: PoolBuffer) -> Result<()> {
        if buffer.len() != size_to_usize(self.file_size) || self.wrote_position() != 0 {
            return Err(StoreError::corrupted(
                &self.path,
                "a write buffer fits only a new segment of the same size",
            ));
        }
        let mut slot = self.lock_buffer();
        let ptr = buffer.as_mut_ptr();
        *slot = Some(buffer);
        self.buffer_ptr.store(ptr, Ordering::Release);
        Ok(())
    }

    /// The segment still holds a write buffer (not fully committed).
    pub(crate) fn has_write_buffer(&self) -> bool {
        !self.buffer_ptr.load(Ordering::Acquire).is_null()
    }

    fn lock_buffer(&self) -> std::sync::MutexGuard<'_, Option<PoolBuffer>> {
        self.write_buffer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `isAbleToCommit`: full, or at least `least_pages` whole pages appended since the last
    /// commit (any byte when `least_pages` is 0).
    pub(crate) fn is_able_to_commit(&self, least_pages: i64) -> bool {
        self.is_able_to_move(
            self.committed_position(),
            self.wrote_position(),
            least_pages,
        )
    }

    /// Whether a commit or flush that has reached `done` should move towards `upto`: the
    /// segment is full and not done, or at least `least_pages` whole pages lie between them
    /// (any byte when `least_pages` is 0). RocketMQ's `isAbleToCommit` and `isAbleToFlush`.
    fn is_able_to_move(&self, done: i64, upto: i64, least_pages: i64) -> bool {
        if self.is_full() && done < self.file_size {
            return true;
        }
        if least_pages > 0 {
            return (upto / OS_PAGE_SIZE - done / OS_PAGE_SIZE) >= least_pages;
        }
        upto > done
    }

    /// `commit`: copies what was appended to the write buffer since the last commit into the
    /// file (when `is_able_to_commit(least_pages)`) and makes it readable; a fully committed
    /// segment returns its buffer to the pool. Returns the committed position.
    pub(crate) fn commit(&self, least_pages: i64) -> Result<i64> {
        let mut slot = self.lock_buffer();
        let Some(buffer) = slot.as_mut() else {
            return Ok(self.committed_position());
        };
        if !self.is_able_to_commit(least_pages) {
            return Ok(self.committed_position());
        }
        let from = self.committed_position();
        let to = self.wrote.load(Ordering::Acquire);
        if to > from {
            // SAFETY: [from, to) lies inside the buffer, was published by the appender (wrote
            // is loaded with acquire) and is not written again until a truncation, which
            // excludes commits.
            let src = unsafe {
                std::slice::from_raw_parts(
                    buffer.as_mut_ptr().add(size_to_usize(from)),
                    size_to_usize(to - from),
                )
            };
            // `from` is a record's start (appends publish whole records): its first 4 bytes
            // (the record's size) go to the file after the rest, so a process killed during
            // the copy leaves a size of 0 there (the end of the data), never a record whose
            // tail did not arrive (see format::publish_size).
            let io = |e| StoreError::io("cannot commit to", &self.path, e);
            let head = src.len().min(4);
            self.file
                .write_all_at(&[0u8; 4][..head], from as u64)
                .map_err(io)?;
            self.file
                .write_all_at(&src[head..], (from + head as i64) as u64)
                .map_err(io)?;
            self.file
                .write_all_at(&src[..head], from as u64)
                .map_err(io)?;
            self.committed.store(to, Ordering::Release);
        }
        if to == self.file_size {
            self.buffer_ptr
                .store(std::ptr::null_mut(), Ordering::Release);
            // Dropping the buffer gives it back to the pool.
            slot.take();
        }
        Ok(self.committed_position())
    }

    pub(crate) fn flushed_position(&self) -> i64 {
        self.flushed.load(Ordering::Acquire)
    }

    pub(crate) fn committed_position(&self) -> i64 {
        self.committed.load(Ordering::Acquire)
    }

    pub(crate) fn is_full(&self) -> bool {
        self.wrote_position() == self.file_size
    }

    pub(crate) fn store_timestamp(&self) -> i64 {
        self.store_timestamp.load(Ordering::Acquire)
    }

    pub(crate) fn set_store_timestamp(&self, ts: i64) {
        self.store_timestamp.store(ts, Ordering::Release);
    }

    /// Appends `len` bytes filled by `fill` at the wrote position and publishes them.
    /// Returns the in-file position written at, or `None` if they do not fit.
    ///
    /// # Safety
    /// Only one appender may run at a time on a file (the caller's append lock).
    pub unsafe fn append_with(&self, len: i64, fill: impl FnOnce(&mut [u8])) -> Option<i64> {
        let pos = self.wrote.load(Ordering::Relaxed);
        if len < 0 || pos + len > self.file_size {
            return None;
        }
        // A buffer is only given back once the segment is full, which the check above rules out.
        let buffer = self.buffer_ptr.load(Ordering::Acquire);
        let base = if buffer.is_null() {
            self.map.as_mut_ptr()
        } else {
            buffer
        };
        // SAFETY: [pos, pos+len) lies inside the mapping (or the equally long buffer), is beyond
        // every published position (so no reader or commit holds it) and the caller guarantees
        // no other appender.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(base.add(size_to_usize(pos)), size_to_usize(len))
        };
        fill(dst);
        self.wrote.store(pos + len, Ordering::Release);
        if buffer.is_null() {
            self.committed.store(pos + len, Ordering::Release);
        }
        Some(pos)
    }

    /// The readable bytes `[pos, pos+len)`, if all below the read position.
    pub(crate) fn read(&self, pos: i64, len: i64) -> Option<&[u8]> {
        let readable = self.read_position();
        if pos < 0 || len < 0 || pos + len > readable {
            return None;
        }
        // SAFETY: published bytes are immutable while readers exist (module contract).
        Some(unsafe {
            std::slice::from_raw_parts(
                self.map.as_ptr().add(size_to_usize(pos)),
                size_to_usize(len),
            )
        })
    }

    /// The readable bytes from `pos` to the read position.
    pub(crate) fn read_from(&self, pos: i64) -> Option<&[u8]> {
        let readable = self.read_position();
        if pos < 0 || pos > readable {
            return None;
        }
        self.read(pos, readable - pos)
    }

    /// The read-only mapping of this segment that bulk reads hand bytes out of (see
    /// [`SegmentView`]); it shows the same bytes as [`MappedFile::read`] below the read
    /// position. Made at the first call, and again after a truncation detached it.
    pub(crate) fn view(&self) -> Result<std::sync::Arc<SegmentView>> {
        if let Some(v) = self.first_view.get().filter(|v| v.is_attached()) {
            return Ok(v.clone());
        }
        let mut slot = self.view.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = slot.as_ref().filter(|v| v.is_attached()) {
            return Ok(v.clone());
        }
        let v = SegmentView::open(&self.file, &self.path, self.file_size)?;
        *slot = Some(v.clone());
        // Only the first view goes here; once it is detached, views come from the slot.
        let _ = self.first_view.set(v.clone());
        Ok(v)
    }

    /// `isAbleToFlush`: full, or at least `least_pages` whole pages written since the last flush
    /// (any byte when `least_pages` is 0).
    pub(crate) fn is_able_to_flush(&self, least_pages: i64) -> bool {
        self.is_able_to_move(self.flushed_position(), self.read_position(), least_pages)
    }

    /// Forces written bytes to disk when `is_able_to_flush(least_pages)`; returns the flushed
    /// position.
    pub(crate) fn flush(&self, least_pages: i64) -> Result<i64> {
        if self.is_able_to_flush(least_pages) {
            let flushed = self.flushed_position();
            let target = self.read_position();
            if target > flushed {
                self.map
                    .flush_range(size_to_usize(flushed), size_to_usize(target - flushed))
                    .map_err(|e| StoreError::io("cannot flush", &self.path, e))?;
            }
            self.flushed.store(target, Ordering::Release);
        }
        Ok(self.flushed_position())
    }

    /// Sets wrote/committed/flushed to `pos` and zeroes everything after it, so that stale
    /// records past a truncation point can never be read back by a later recovery.
    ///
    /// # Safety
    /// No slice of this file's bytes at or past `pos` (from [`MappedFile::read`],
    /// [`MappedFile::read_from`] or [`MappedFile::read_unchecked`]) may be alive, and no
    /// [`MappedFile::append_with`] may run, until this returns (recovery before the store is
    /// shared, truncation with every other user of the store excluded). A commit is excluded
    /// here.
    pub(crate) unsafe fn truncate_to(&self, pos: i64) -> Result<()> {
        let pos = pos.clamp(0, self.file_size);
        // Excludes a commit copying the range being dropped.
        let _buffer = self.lock_buffer();
        // Read batches that hold bytes past `pos` keep them (a private copy); later reads map
        // the file afresh.
        segment_view::detach_file(&self.file, &self.path, pos)?;
        self.view.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.wrote.store(pos, Ordering::Release);
        self.committed.store(pos, Ordering::Release);
        self.flushed.store(pos, Ordering::Release);
        // SAFETY: the caller excludes readers of the bytes past `pos` and appenders; the
        // buffer lock excludes a commit.
        unsafe { self.zero_range(pos, self.file_size) }
    }

    /// Zeroes `[from, to)` in the file.
    ///
    /// # Safety
    /// As [`MappedFile::truncate_to`] for the bytes from `from` on.
    unsafe fn zero_range(&self, from: i64, to: i64) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        // Whole pages are given back to the file system (they read as zeros afterwards and stay
        // reserved); the partial first page is zeroed by hand.
        let first_page_end = ((from + OS_PAGE_SIZE - 1) / OS_PAGE_SIZE * OS_PAGE_SIZE).min(to);
        // SAFETY: within the mapping; callers exclude readers of this range.
        unsafe {
            std::ptr::write_bytes(
                self.map.as_mut_ptr().add(size_to_usize(from)),
                0,
                size_to_usize(first_page_end - from),
            );
        }
        if first_page_end < to {
            let fd = self.file.as_raw_fd();
            // SAFETY: plain syscall on an owned descriptor.
            let rc = unsafe {
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_ZERO_RANGE,
                    first_page_end,
                    to - first_page_end,
                )
            };
            if rc != 0 {
                // Not supported here: write the zeros through the mapping, skipping pages that
                // already read as zero so untouched sparse space is not allocated.
                let base = self.map.as_mut_ptr();
                let mut at = first_page_end;
                while at < to {
                    let end = (at + OS_PAGE_SIZE).min(to);
                    let len = size_to_usize(end - at);
                    // SAFETY: within the mapping; readers excluded.
                    unsafe {
                        let p = base.add(size_to_usize(at));
                        let page = std::slice::from_raw_parts(p, len);
                        if page.iter().any(|&b| b != 0) {
                            std::ptr::write_bytes(p, 0, len);
                        }
                    }
                    at = end;
                }
            }
        }
        self.map
            .flush_range(size_to_usize(from), size_to_usize(first_page_end - from))
            .map_err(|e| StoreError::io("cannot flush", &self.path, e))
    }

    /// `warmMappedFile`: touches every page of the (still empty) file so that appends never
    /// page-fault, forcing every `pages_per_flush` pages when `sync` is set, then `mlock`s it.
    ///
    /// # Safety
    /// No [`MappedFile::append_with`] or commit may run on this file until this returns (it
    /// writes zeros past the wrote position it saw at the start): the caller owns the new file.
    pub unsafe fn warm(&self, sync: bool, pages_per_flush: i64) -> Result<()> {
        let base = self.map.as_mut_ptr();
        let start = self.wrote_position();
        let mut at = (start + OS_PAGE_SIZE - 1) / OS_PAGE_SIZE * OS_PAGE_SIZE;
        let mut since_flush = 0;
        let mut flushed_to = at;
        while at < self.file_size {
            // SAFETY: beyond the wrote position, so unpublished and read by nobody; no appender
            // runs (the caller's contract).
            unsafe { std::ptr::write_volatile(base.add(size_to_usize(at)), 0u8) };
            at += OS_PAGE_SIZE;
            since_flush += 1;
            if sync && pages_per_flush > 0 && since_flush >= pages_per_flush {
                self.map
                    .flush_range(size_to_usize(flushed_to), size_to_usize(at - flushed_to))
                    .map_err(|e| StoreError::io("cannot flush while warming", &self.path, e))?;
                flushed_to = at;
                since_flush = 0;
            }
        }
        if sync && flushed_to < self.file_size {
            self.map
                .flush_range(
                    size_to_usize(flushed_to),
                    size_to_usize(self.file_size - flushed_to),
                )
                .map_err(|e| StoreError::io("cannot flush while warming", &self.path, e))?;
        }
        self.mlock();
        Ok(())
    }

    /// `mlock` + `madvise(WILLNEED)`. When the OS refuses the lock, warn once and go on.
    pub(crate) fn mlock(&self) {
        match self.map.lock() {
            Ok(()) => self.locked.store(true, Ordering::Release),
            Err(e) => {
                if !MLOCK_WARNED.swap(true, Ordering::AcqRel) {
                    log::warn!(
                        target: "rmqstore.mapped_file",
                        "mlock of {} failed ({e}); warmed segments stay unlocked \
                         (raise RLIMIT_MEMLOCK or grant CAP_IPC_LOCK to lock them)",
                        self.path.display()
                    );
                }
            }
        }
        let _ = self.map.advise(Advice::WillNeed);
    }

    /// Releases an `mlock` taken by [`MappedFile::warm`].
    pub(crate) fn munlock(&self) {
        if self.locked.swap(false, Ordering::AcqRel) {
            let _ = self.map.unlock();
        }
    }

    pub(crate) fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Acquire)
    }

    /// `getLastModifiedTimestamp`: the file's modification time in ms since the epoch, read
    /// from the open descriptor (so a file another process already removed still answers);
    /// 0 when it cannot be read, which makes the segment count as expired.
    pub(crate) fn last_modified_ms(&self) -> i64 {
        self.file
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// `isAvailable`: false once a deletion took the segment out of its queue.
    #[cfg(test)]
    pub(crate) fn is_available(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    /// `shutdown(intervalForcibly)`'s first step: marks the segment unavailable and remembers
    /// when (the first call only). Returns when the first attempt was made.
    pub(crate) fn shutdown(&self, now_ms: i64) -> i64 {
        if self.available.swap(false, Ordering::AcqRel) {
            self.first_shutdown_ms.store(now_ms, Ordering::Release);
            return now_ms;
        }
        self.first_shutdown_ms.load(Ordering::Acquire)
    }

    /// Whether the file is still the one at its path (not removed, nor replaced by another).
    pub(crate) fn is_on_disk(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (self.file.metadata(), std::fs::symlink_metadata(&self.path)) {
            (Ok(open), Ok(named)) => open.ino() == named.ino() && open.dev() == named.dev(),
            (_, Err(e)) if e.kind() == io::ErrorKind::NotFound => false,
            // Cannot tell: keep it.
            _ => true,
        }
    }

    /// Deletes the file; the mapping stays valid for readers that still hold this segment.
    pub(crate) fn destroy(&self) -> Result<()> {
        self.munlock();
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io("cannot delete segment", &self.path, e)),
        }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        self.munlock();
    }
}

/// Gives the file its full length with blocks reserved. Falls back to a sparse `set_len` only
/// where the file system cannot reserve (EOPNOTSUPP); ENOSPC and other errors are reported.
fn reserve(file: &File, size: i64) -> io::Result<()> {
    // SAFETY: plain syscall on an owned descriptor.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => file.set_len(size as u64),
        _ => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rmqstore-mf-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn append_read_flush_truncate() {
        let d = tmp("basic");
        let p = d.join("00000000000000000000");
        let mf = MappedFile::create(&p, 0, 8192).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 8192);
        assert!(
            MappedFile::create(&p, 0, 8192).is_err(),
            "create never clobbers"
        );
        let pos = unsafe { mf.append_with(5, |b| b.copy_from_slice(b"hello")) }.unwrap();
        assert_eq!(pos, 0);
        assert_eq!(mf.read(0, 5).unwrap(), b"hello");
        assert!(mf.read(0, 6).is_none());
        assert!(mf.is_able_to_flush(0));
        assert!(!mf.is_able_to_flush(1));
        assert_eq!(mf.flush(0).unwrap(), 5);
        assert!(unsafe { mf.append_with(8188, |_| {}) }.is_none());
        let pos = unsafe { mf.append_with(5000, |b| b.fill(7)) }.unwrap();
        assert_eq!(pos, 5);
        unsafe { mf.truncate_to(3) }.unwrap();
        assert_eq!(mf.wrote_position(), 3);
        let reopened = MappedFile::open_existing(&p, 0, 8192).unwrap();
        assert_eq!(reopened.read(0, 8192).unwrap()[..3], *b"hel");
        assert!(reopened.read(3, 8189).unwrap().iter().all(|&b| b == 0));
        assert!(MappedFile::open_existing(&p, 0, 4096).is_err());
        unsafe { mf.warm(true, 1) }.unwrap();
        mf.munlock();
        mf.destroy().unwrap();
        assert!(!p.exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn write_buffer_commit_makes_bytes_readable_and_returns_the_buffer() {
        let d = tmp("buffer");
        let p = d.join("00000000000000000000");
        let pool = crate::file::transient_pool::TransientStorePool::new(1, 16384).unwrap();
        let mf = MappedFile::create(&p, 0, 16384).unwrap();
        mf.attach_write_buffer(pool.borrow().unwrap()).unwrap();
        assert!(mf.has_write_buffer());
        assert_eq!(pool.available(), 0);
        unsafe { mf.append_with(100, |b| b.fill(9)) }.unwrap();
        // Appended but not committed: neither readable nor in the file.
        assert_eq!((mf.wrote_position(), mf.read_position()), (100, 0));
        assert!(mf.read(0, 1).is_none());
        assert!(std::fs::read(&p).unwrap()[..100].iter().all(|&b| b == 0));
        assert!(!mf.is_able_to_commit(1));
        assert_eq!(mf.commit(1).unwrap(), 0, "less than a page waits");
        assert_eq!(mf.commit(0).unwrap(), 100);
        assert_eq!(mf.read(0, 100).unwrap(), &[9u8; 100][..]);
        assert_eq!(std::fs::read(&p).unwrap()[..100], [9u8; 100]);
        // Flush forces only what is committed.
        unsafe { mf.append_with(8000, |b| b.fill(3)) }.unwrap();
        assert_eq!(mf.flush(0).unwrap(), 100);
        assert!(mf.is_able_to_commit(1));
        assert_eq!(mf.commit(1).unwrap(), 8100);
        // A truncation drops committed and uncommitted bytes alike; appends resume there.
        unsafe { mf.truncate_to(50) }.unwrap();
        assert_eq!((mf.wrote_position(), mf.read_position()), (50, 50));
        assert!(std::fs::read(&p).unwrap()[50..8100].iter().all(|&b| b == 0));
        unsafe { mf.append_with(16384 - 50, |b| b.fill(5)) }.unwrap();
        assert!(
            mf.is_full() && mf.is_able_to_commit(100),
            "a full segment always commits"
        );
        assert_eq!(mf.commit(100).unwrap(), 16384);
        assert!(!mf.has_write_buffer());
        assert_eq!(pool.available(), 1, "fully committed: the buffer is back");
        let file = std::fs::read(&p).unwrap();
        assert_eq!(file[..50], [9u8; 50]);
        assert!(file[50..].iter().all(|&b| b == 5));
        // Without a buffer (given back, then truncated) appends are readable at once.
        unsafe { mf.truncate_to(16000) }.unwrap();
        unsafe { mf.append_with(10, |b| b.fill(1)) }.unwrap();
        assert_eq!(mf.read_position(), 16010);
        assert_eq!(mf.commit(0).unwrap(), 16010);
        // A used segment cannot take a buffer; a dropped segment gives its buffer back.
        assert!(mf.attach_write_buffer(pool.borrow().unwrap()).is_err());
        assert_eq!(pool.available(), 1);
        let p2 = d.join("00000000000000016384");
        let mf2 = MappedFile::create(&p2, 16384, 16384).unwrap();
        mf2.attach_write_buffer(pool.borrow().unwrap()).unwrap();
        assert_eq!(pool.available(), 0);
        drop(mf2);
        assert_eq!(pool.available(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }
}
