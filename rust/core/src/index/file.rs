//! One index file (`IndexFile`): the mapped file, its in-memory header, putting keys and walking
//! a key's bucket chain (the byte layout is [`crate::format::index`]).
//!
//! Concurrency contract: one writer (dispatch) and any number of readers at once, lock-free for
//! readers. Every access to the mapped bytes goes through an `AtomicU32` at a 4-byte aligned
//! offset (every field of the format is 4-aligned; an `i64` is two words, high word first, which
//! is its big-endian layout), so readers never race non-atomically with the writer. Entries are
//! written once, before the slot that publishes them is stored with `Release`; a reader loads the
//! slot with `Acquire` and thereby sees the entry and everything older in its chain. The header
//! is kept in memory as atomics (as RocketMQ keeps `IndexHeader`) and copied into the mapping
//! after every put, so the file is byte-identical to RocketMQ's at any moment. Writers of one
//! file are serialized by a mutex, so `put_key` is safe to call from anywhere.
//!
//! Nothing read from a file is trusted: slot and chain values are range-checked, chain walks are
//! bounded by the number of entries, arithmetic on stored times wraps like Java's, so a damaged
//! file gives wrong answers but never a panic or an out-of-bounds access.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use memmap2::MmapRaw;

use super::{lock, LOG_TARGET};
use crate::error::{Result, StoreError};
use crate::format::index::*;

mod entries;

/// One index file (`IndexFile`).
pub(crate) struct IndexFile {
    path: PathBuf,
    file_name: String,
    hash_slot_num: i32,
    /// `keyHash % hashSlotNum` by multiplication (a division per key is slow).
    slot_mod: FastMod,
    index_num: i32,
    map: MmapRaw,
    /// Number of 4-byte words in the mapping.
    words: usize,
    begin_timestamp: AtomicI64,
    end_timestamp: AtomicI64,
    begin_phy_offset: AtomicI64,
    end_phy_offset: AtomicI64,
    hash_slot_count: AtomicI32,
    index_count: AtomicI32,
    /// `index_count` at the last flush (-1: never flushed since creation).
    flushed_count: AtomicI32,
    /// Serializes writers of the mapping (puts and header writes).
    writer: Mutex<()>,
    /// Kept for reserving blocks (`fallocate`) ahead of the writes.
    file: File,
    /// Bytes from the start whose blocks are reserved: the mapping is only written below this,
    /// so a full disk fails a put instead of faulting the process (SIGBUS).
    reserved: AtomicU64,
    /// The end dispatch resumes after and a next file is seeded from, when the open confirmed
    /// that the entries run past the header's end ([`IndexFile::covered_end`]).
    adopted_end: std::sync::OnceLock<(i64, i64)>,
    /// Tests: accesses asked for outside the mapping (each refused); must stay 0, as every
    /// position is range-checked before it is asked for.
    #[cfg(test)]
    stray: std::sync::atomic::AtomicUsize,
}

/// Blocks reserved at a time ahead of the entry being written.
const RESERVE_CHUNK: u64 = 1 << 20;

impl std::fmt::Debug for IndexFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexFile")
            .field("path", &self.path)
            .field("header", &self.header())
            .finish()
    }
}

impl IndexFile {
    /// Creates a new index file at `path` (never overwriting one) with its full length reserved,
    /// seeded like RocketMQ's constructor: `end_phy_offset` (if > 0) becomes begin and end phy
    /// offset, `end_timestamp` (if > 0) begin and end timestamp. Only those seeded fields are
    /// written into the file until the first put or flush, as RocketMQ does.
    pub(crate) fn create(
        path: &Path,
        hash_slot_num: i32,
        index_num: i32,
        end_phy_offset: i64,
        end_timestamp: i64,
    ) -> Result<IndexFile> {
        let size = index_file_size(hash_slot_num, index_num)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| StoreError::io("cannot create index file", path, e))?;
        // Sparse, as RocketMQ's `setLength`: a default index file is 420 MB but only the pages
        // touched (slots in use, entries written) take disk space. The commitlog segments, which
        // hold the data, are the ones reserved up front.
        let made = file
            .set_len(size as u64)
            .map_err(|e| StoreError::io("cannot size index file", path, e))
            .and_then(|()| Self::map(path, &file, hash_slot_num, index_num, size));
        let f = match made {
            Ok(f) => f,
            Err(e) => {
                drop(file);
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        };
        f.flushed_count.store(-1, Ordering::Relaxed);
        let slots_end = ((HEADER_WORDS + hash_slot_num as usize) * 4) as u64;
        if let Err(e) = f.reserve_to(slots_end) {
            drop(f);
            let _ = std::fs::remove_file(path);
            return Err(StoreError::io(
                "cannot reserve space for index file",
                path,
                e,
            ));
        }
        f.populate_slots();
        if end_phy_offset > 0 {
            f.begin_phy_offset.store(end_phy_offset, Ordering::Relaxed);
            f.end_phy_offset.store(end_phy_offset, Ordering::Relaxed);
            f.put_i64(W_BEGIN_PHY_OFFSET, end_phy_offset);
            f.put_i64(W_END_PHY_OFFSET, end_phy_offset);
        }
        if end_timestamp > 0 {
            f.begin_timestamp.store(end_timestamp, Ordering::Relaxed);
            f.end_timestamp.store(end_timestamp, Ordering::Relaxed);
            f.put_i64(W_BEGIN_TIMESTAMP, end_timestamp);
            f.put_i64(W_END_TIMESTAMP, end_timestamp);
        }
        Ok(f)
    }

    /// Faults the header and slot table in, writable, in one call (`MADV_POPULATE_WRITE`):
    /// slots are written at random, and a page fault for each first touch would otherwise land
    /// on the dispatch thread one by one. Entries are written in order and fault as they go.
    /// Kernels without the advice just skip it.
    fn populate_slots(&self) {
        let bytes = (HEADER_WORDS + self.hash_slot_num as usize) * 4;
        let len = bytes.div_ceil(4096) * 4096;
        let len = len.min(self.words * 4);
        // SAFETY: the range lies inside this mapping; the advice only faults pages in.
        unsafe {
            libc::madvise(
                self.map.as_mut_ptr().cast::<libc::c_void>(),
                len,
                libc::MADV_POPULATE_WRITE,
            );
        }
    }

    /// Maps an existing index file and loads its header (`indexCount <= 0` is taken as 1).
    /// A file of the wrong size is [`StoreError::Corrupted`].
    pub(crate) fn load(path: &Path, hash_slot_num: i32, index_num: i32) -> Result<IndexFile> {
        let size = index_file_size(hash_slot_num, index_num)?;
        let (file, len) = crate::util::open_store_file_len(
            path,
            OpenOptions::new().read(true).write(true),
            "index file",
        )?;
        if len != size as u64 {
            return Err(StoreError::corrupted(
                path,
                format!(
                    "index file is {len} bytes, expected {size} \
                     ({hash_slot_num} hash slots, {index_num} entries)"
                ),
            ));
        }
        let f = Self::map(path, &file, hash_slot_num, index_num, size)?;
        let begin_ts = f.get_i64(W_BEGIN_TIMESTAMP, Ordering::Relaxed).unwrap_or(0);
        let end_ts = f.get_i64(W_END_TIMESTAMP, Ordering::Relaxed).unwrap_or(0);
        let begin_phy = f
            .get_i64(W_BEGIN_PHY_OFFSET, Ordering::Relaxed)
            .unwrap_or(0);
        let end_phy = f.get_i64(W_END_PHY_OFFSET, Ordering::Relaxed).unwrap_or(0);
        let slots = f.get_i32(W_HASH_SLOT_COUNT, Ordering::Relaxed).unwrap_or(0);
        let on_disk_count = f.get_i32(W_INDEX_COUNT, Ordering::Relaxed).unwrap_or(0);
        let count = on_disk_count.max(1);
        f.begin_timestamp.store(begin_ts, Ordering::Relaxed);
        f.end_timestamp.store(end_ts, Ordering::Relaxed);
        f.begin_phy_offset.store(begin_phy, Ordering::Relaxed);
        f.end_phy_offset.store(end_phy, Ordering::Relaxed);
        f.hash_slot_count.store(slots, Ordering::Relaxed);
        f.index_count.store(count, Ordering::Relaxed);
        // Clean unless the count was corrected (a flush then writes the corrected header).
        f.flushed_count.store(on_disk_count, Ordering::Relaxed);
        Ok(f)
    }

    /// Reserves the blocks of what the file has in use (header, slots, entries written), so a
    /// slot update through the mapping never lands in a hole the disk cannot fill (best effort:
    /// a put reserves again before writing). Not part of loading: it changes the file's times.
    pub(super) fn reserve_in_use(&self) {
        let count = self.index_count.load(Ordering::Relaxed);
        let used = (self.entry_word(count.min(self.index_num - 1)) * 4) as u64;
        let _ = self.reserve_to(used);
    }

    fn map(
        path: &Path,
        file: &File,
        hash_slot_num: i32,
        index_num: i32,
        size: i64,
    ) -> Result<IndexFile> {
        let map = MmapRaw::map_raw(file).map_err(|e| StoreError::io("cannot map", path, e))?;
        if map.len() as u64 != size as u64 {
            return Err(StoreError::corrupted(
                path,
                "mapping length differs from the index file size",
            ));
        }
        if !(map.as_ptr() as usize).is_multiple_of(std::mem::align_of::<AtomicU32>()) {
            return Err(StoreError::corrupted(path, "mapping is not word-aligned"));
        }
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(IndexFile {
            path: path.to_path_buf(),
            file_name,
            hash_slot_num,
            slot_mod: FastMod::new(hash_slot_num as u32),
            index_num,
            words: map.len() / 4,
            map,
            begin_timestamp: AtomicI64::new(0),
            end_timestamp: AtomicI64::new(0),
            begin_phy_offset: AtomicI64::new(0),
            end_phy_offset: AtomicI64::new(0),
            hash_slot_count: AtomicI32::new(0),
            index_count: AtomicI32::new(1),
            flushed_count: AtomicI32::new(1),
            writer: Mutex::new(()),
            file: file
                .try_clone()
                .map_err(|e| StoreError::io("cannot open", path, e))?,
            reserved: AtomicU64::new(0),
            adopted_end: std::sync::OnceLock::new(),
            #[cfg(test)]
            stray: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// Makes sure the blocks of the first `end` bytes are allocated (`fallocate`), a chunk
    /// ahead. Where the file system cannot reserve (EOPNOTSUPP), writes go ahead unreserved.
    fn reserve_to(&self, end: u64) -> std::io::Result<()> {
        let have = self.reserved.load(Ordering::Acquire);
        if end <= have {
            return Ok(());
        }
        let size = (self.words * 4) as u64;
        let target = end
            .max(have + RESERVE_CHUNK)
            .div_ceil(4096)
            .saturating_mul(4096)
            .min(size);
        // SAFETY: plain syscall on an owned descriptor; the range lies inside the file.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                have as libc::off_t,
                (target - have) as libc::off_t,
            )
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if !matches!(
                err.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
            ) {
                return Err(err);
            }
        }
        self.reserved.store(target, Ordering::Release);
        Ok(())
    }

    /// The mapping as 32-bit atomics (the only way it is ever accessed).
    fn word_slice(&self) -> &[AtomicU32] {
        // SAFETY: the mapping is `self.words * 4` bytes long (its size is 40 + 4h + 20n), lives
        // as long as `self`, and its base is page-aligned (checked to be 4-aligned in `map`).
        // `AtomicU32` has the size and alignment of `u32`. Within this process the bytes are
        // only ever accessed through these atomics, so there are no non-atomic data races.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<AtomicU32>(), self.words) }
    }

    /// Word `word` of the mapping, `None` outside it.
    #[inline]
    fn word(&self, word: usize) -> Option<&AtomicU32> {
        let w = self.word_slice().get(word);
        #[cfg(test)]
        if w.is_none() {
            self.stray.fetch_add(1, Ordering::Relaxed);
        }
        w
    }

    /// Tests: how many accesses were asked for outside the mapping.
    #[cfg(test)]
    pub(super) fn stray_accesses(&self) -> usize {
        self.stray.load(Ordering::Relaxed)
    }

    fn get_i32(&self, word: usize, order: Ordering) -> Option<i32> {
        self.word(word).map(|a| u32::from_be(a.load(order)) as i32)
    }

    fn put_i32(&self, word: usize, v: i32, order: Ordering) {
        if let Some(a) = self.word(word) {
            a.store((v as u32).to_be(), order);
        }
    }

    fn get_i64(&self, word: usize, order: Ordering) -> Option<i64> {
        let hi = self.get_i32(word, order)? as u32;
        let lo = self.get_i32(word + 1, order)? as u32;
        Some(((u64::from(hi) << 32) | u64::from(lo)) as i64)
    }

    fn put_i64(&self, word: usize, v: i64) {
        self.put_i32(word, (v >> 32) as i32, Ordering::Relaxed);
        self.put_i32(word + 1, v as i32, Ordering::Relaxed);
    }

    fn slot_word(&self, key_hash: i32) -> usize {
        slot_word(self.slot_mod, key_hash)
    }

    /// Word position of entry `n` (`n` must be in `0..index_num`).
    fn entry_word(&self, n: i32) -> usize {
        entry_word(self.hash_slot_num, n)
    }

    /// Copies the in-memory header into the mapping (`IndexHeader.updateByteBuffer`).
    /// Callers hold the writer lock.
    fn write_header(&self) {
        let h = self.header();
        self.put_i64(W_BEGIN_TIMESTAMP, h.begin_timestamp);
        self.put_i64(W_END_TIMESTAMP, h.end_timestamp);
        self.put_i64(W_BEGIN_PHY_OFFSET, h.begin_phy_offset);
        self.put_i64(W_END_PHY_OFFSET, h.end_phy_offset);
        self.put_i32(W_HASH_SLOT_COUNT, h.hash_slot_count, Ordering::Relaxed);
        self.put_i32(W_INDEX_COUNT, h.index_count, Ordering::Relaxed);
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The file name (`yyyyMMddHHmmssSSS` for files made by [`super::IndexService`]).
    pub(crate) fn file_name(&self) -> &str {
        &self.file_name
    }

    /// The in-memory header (what the file holds after the next flush; after any put the file
    /// already holds it).
    pub(crate) fn header(&self) -> IndexHeader {
        IndexHeader {
            begin_timestamp: self.begin_timestamp.load(Ordering::Acquire),
            end_timestamp: self.end_timestamp.load(Ordering::Acquire),
            begin_phy_offset: self.begin_phy_offset.load(Ordering::Acquire),
            end_phy_offset: self.end_phy_offset.load(Ordering::Acquire),
            hash_slot_count: self.hash_slot_count.load(Ordering::Acquire),
            index_count: self.index_count.load(Ordering::Acquire),
        }
    }

    pub(crate) fn begin_timestamp(&self) -> i64 {
        self.begin_timestamp.load(Ordering::Acquire)
    }

    pub(crate) fn end_timestamp(&self) -> i64 {
        self.end_timestamp.load(Ordering::Acquire)
    }

    pub(crate) fn end_phy_offset(&self) -> i64 {
        self.end_phy_offset.load(Ordering::Acquire)
    }

    pub(crate) fn index_count(&self) -> i32 {
        self.index_count.load(Ordering::Acquire)
    }

    /// `isWriteFull`: `indexCount >= indexNum`.
    pub(crate) fn is_write_full(&self) -> bool {
        self.index_count() >= self.index_num
    }

    /// `putKey` (docs/format.md#index-slots-and-entries): appends an entry for `key` and makes it
    /// the head of its bucket; `false` when the file is full.
    #[cfg(test)]
    pub(crate) fn put_key(&self, key: &str, phy_offset: i64, store_timestamp: i64) -> bool {
        self.put_key_hash(index_key_hash(key), phy_offset, store_timestamp)
    }

    /// Whether the message at `phy_offset` is already indexed here or in an earlier file: its
    /// offset is below the end offset, or at it when that end is a real indexed message (the
    /// file has entries, or its end was seeded from the previous file). RocketMQ's check is
    /// `phy_offset < end` only, which indexes the last message twice when dispatch resumes at it.
    pub(crate) fn indexed(&self, phy_offset: i64) -> bool {
        let end = self.end_phy_offset();
        phy_offset < end || (phy_offset == end && (end > 0 || self.index_count() > 1))
    }

    /// Hints the CPU to fetch the slot of `key_hash` (the index's one random access) ahead of
    /// the put that needs it, so the misses of a message's keys overlap.
    #[inline]
    pub(crate) fn prefetch_slot(&self, key_hash: i32) {
        #[cfg(target_arch = "x86_64")]
        {
            let word = self.slot_word(key_hash);
            if word < self.words {
                // SAFETY: the address is inside the mapping; a prefetch never faults.
                unsafe {
                    let p = self.map.as_ptr().add(word * 4).cast::<i8>();
                    std::arch::x86_64::_mm_prefetch(p, std::arch::x86_64::_MM_HINT_T0);
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = key_hash;
    }

    /// [`IndexFile::put_key`] for a key whose index hash is already known.
    #[cfg(test)]
    pub(crate) fn put_key_hash(
        &self,
        key_hash: i32,
        phy_offset: i64,
        store_timestamp: i64,
    ) -> bool {
        self.put_key_hashes(&[key_hash], phy_offset, store_timestamp) == 1
    }

    /// Puts the keys of one message (their index hashes) under one lock and one header update;
    /// returns how many fit (the rest go to the next file).
    #[cfg(test)]
    pub(crate) fn put_key_hashes(
        &self,
        key_hashes: &[i32],
        phy_offset: i64,
        store_timestamp: i64,
    ) -> usize {
        self.writer().put(key_hashes, phy_offset, store_timestamp)
    }

    /// Takes the file's writer lock for several puts; the header is written once, when the
    /// writer is dropped.
    pub(crate) fn writer(&self) -> IndexFileWriter<'_> {
        IndexFileWriter {
            file: self,
            _guard: lock(&self.writer),
            wrote: false,
        }
    }

    /// One entry of `putKey`, without the header update. Callers hold the writer lock.
    fn put_entry(&self, key_hash: i32, phy_offset: i64, store_timestamp: i64) -> bool {
        let count = self.index_count.load(Ordering::Relaxed);
        if count >= self.index_num || count < 1 {
            if count >= self.index_num {
                log::debug!(
                    target: LOG_TARGET,
                    "over index file capacity: index count = {count}; index max num = {}",
                    self.index_num
                );
            }
            return false;
        }
        let slot_word = self.slot_word(key_hash);
        let entry_word = self.entry_word(count);
        if slot_word >= self.words || entry_word + ENTRY_WORDS > self.words {
            return false;
        }
        if let Err(e) = self.reserve_to(((entry_word + ENTRY_WORDS) * 4) as u64) {
            log::error!(
                target: LOG_TARGET,
                "cannot reserve space in index file {} ({e}); the key is not indexed here",
                self.path.display()
            );
            return false;
        }
        let mut slot_value = self.get_i32(slot_word, Ordering::Relaxed).unwrap_or(0);
        if slot_value <= 0 || slot_value > count {
            slot_value = 0;
        }
        let begin = self.begin_timestamp.load(Ordering::Relaxed);
        let time_diff = if begin <= 0 {
            0
        } else {
            (store_timestamp.wrapping_sub(begin) / 1000).clamp(0, i64::from(i32::MAX)) as i32
        };
        self.put_i32(entry_word + E_KEY_HASH, key_hash, Ordering::Relaxed);
        self.put_i64(entry_word + E_PHY_OFFSET, phy_offset);
        self.put_i32(entry_word + E_TIME_DIFF, time_diff, Ordering::Relaxed);
        self.put_i32(entry_word + E_PREV_INDEX, slot_value, Ordering::Relaxed);
        // Publishes the entry (and, by program order, every older one) to readers.
        self.put_i32(slot_word, count, Ordering::Release);

        if count <= 1 {
            self.begin_phy_offset.store(phy_offset, Ordering::Release);
            self.begin_timestamp
                .store(store_timestamp, Ordering::Release);
        }
        if slot_value == 0 {
            let slots = self.hash_slot_count.load(Ordering::Relaxed);
            self.hash_slot_count
                .store(slots.wrapping_add(1), Ordering::Release);
        }
        self.index_count.store(count + 1, Ordering::Release);
        self.end_phy_offset.store(phy_offset, Ordering::Release);
        self.end_timestamp.store(store_timestamp, Ordering::Release);
        true
    }

    /// `isTimeMatched`: whether `[begin, end]` intersects the file's time range.
    pub(crate) fn is_time_matched(&self, begin: i64, end: i64) -> bool {
        let fb = self.begin_timestamp();
        let fe = self.end_timestamp();
        (begin < fb && end > fe) || (begin >= fb && begin <= fe) || (end >= fb && end <= fe)
    }

    /// `selectPhyOffset`: the offsets of entries whose hash equals `key`'s and whose time lies in
    /// `[begin, end]`, newest first, at most `max_num`. Hash collisions are returned too.
    #[cfg(test)]
    pub(crate) fn select_phy_offsets(
        &self,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Vec<i64> {
        let mut out = Vec::new();
        self.select_phy_offsets_into(&mut out, key, max_num, begin, end);
        out
    }

    /// `IndexFile::select_phy_offsets` appending to `out`, stopping once `out` holds `max_num`
    /// offsets (RocketMQ shares one list over all files of a query).
    pub(crate) fn select_phy_offsets_into(
        &self,
        out: &mut Vec<i64>,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) {
        let key_hash = index_key_hash(key);
        let count = self.index_count.load(Ordering::Acquire);
        let Some(slot_value) = self.get_i32(self.slot_word(key_hash), Ordering::Acquire) else {
            return;
        };
        if slot_value <= 0 || slot_value > count || count <= 1 {
            return;
        }
        let file_begin = self.begin_timestamp.load(Ordering::Acquire);
        let mut next = slot_value;
        // A sound chain strictly descends, so it has fewer than `index_num` links; the bound
        // only matters for damaged files, where a cycle would otherwise loop forever.
        let mut steps = 0;
        loop {
            if out.len() >= max_num || next >= self.index_num || steps >= self.index_num {
                break;
            }
            steps += 1;
            let w = self.entry_word(next);
            let (Some(hash_read), Some(phy_read), Some(diff), Some(prev)) = (
                self.get_i32(w + E_KEY_HASH, Ordering::Relaxed),
                self.get_i64(w + E_PHY_OFFSET, Ordering::Relaxed),
                self.get_i32(w + E_TIME_DIFF, Ordering::Relaxed),
                self.get_i32(w + E_PREV_INDEX, Ordering::Relaxed),
            ) else {
                break;
            };
            if diff < 0 {
                break;
            }
            let time_read = file_begin.wrapping_add(i64::from(diff) * 1000);
            if hash_read == key_hash && time_read >= begin && time_read <= end {
                out.push(phy_read);
            }
            if prev <= 0 || prev > count || prev == next || time_read < begin {
                break;
            }
            next = prev;
        }
    }

    /// Whether entries were added since the last flush.
    pub(crate) fn is_dirty(&self) -> bool {
        self.flushed_count.load(Ordering::Acquire) != self.index_count()
    }

    /// `IndexFile.flush`: writes the header into the mapping and forces the file to disk.
    pub(crate) fn flush(&self) -> Result<()> {
        let count = {
            let _w = lock(&self.writer);
            self.write_header();
            self.index_count.load(Ordering::Relaxed)
        };
        self.map
            .flush()
            .map_err(|e| StoreError::io("cannot flush index file", &self.path, e))?;
        self.flushed_count.store(count, Ordering::Release);
        Ok(())
    }

    /// Deletes the file; the mapping stays valid for readers still holding this `IndexFile`.
    pub(crate) fn destroy(&self) -> Result<()> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io("cannot delete index file", &self.path, e)),
        }
    }
}

/// Exclusive writing access to one index file (see [`IndexFile::writer`]).
pub(crate) struct IndexFileWriter<'a> {
    file: &'a IndexFile,
    _guard: MutexGuard<'a, ()>,
    wrote: bool,
}

impl IndexFileWriter<'_> {
    /// Puts the keys of one message; returns how many fit (the rest go to the next file).
    pub(crate) fn put(
        &mut self,
        key_hashes: &[i32],
        phy_offset: i64,
        store_timestamp: i64,
    ) -> usize {
        let mut put = 0;
        for &key_hash in key_hashes {
            if !self.file.put_entry(key_hash, phy_offset, store_timestamp) {
                break;
            }
            put += 1;
        }
        self.wrote |= put > 0;
        put
    }
}

impl Drop for IndexFileWriter<'_> {
    fn drop(&mut self) {
        if self.wrote {
            self.file.write_header();
        }
    }
}

impl IndexFile {
    /// Begin phy offset: the commitlog offset of the first message with an entry here.
    pub(crate) fn begin_phy_offset(&self) -> i64 {
        self.begin_phy_offset.load(Ordering::Acquire)
    }

    /// The commitlog offset entry `n` holds (`None` outside `1..indexCount` or the file).
    pub(crate) fn entry_phy_offset(&self, n: i32) -> Option<i64> {
        if n < 1 || n >= self.index_count() || n >= self.index_num {
            return None;
        }
        self.get_i64(self.entry_word(n) + E_PHY_OFFSET, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::{java_hash, now_millis};

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rmqstore-index-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn disk_header(path: &Path) -> IndexHeader {
        IndexHeader::from_bytes(&std::fs::read(path).unwrap()).unwrap()
    }

    fn be_i32(b: &[u8], at: usize) -> i32 {
        i32::from_be_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn be_i64(b: &[u8], at: usize) -> i64 {
        i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
    }

    /// IndexFileTest.testPutKey / testSelectPhyOffset.
    #[test]
    fn index_file_test_port() {
        let d = tmp("filetest");
        let p = d.join("100");
        let f = IndexFile::create(&p, 100, 400, 0, 0).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 8440);
        for i in 0..399i64 {
            assert!(f.put_key(&i.to_string(), i, now_millis()), "put {i}");
        }
        assert!(f.is_write_full());
        assert!(!f.put_key("400", 400, now_millis()));
        let got = f.select_phy_offsets("60", 10, 0, i64::MAX);
        assert_eq!(got, vec![60]);
        let h = f.header();
        assert_eq!(h.index_count, 400);
        assert_eq!(h.begin_phy_offset, 0);
        assert_eq!(h.end_phy_offset, 398);
        // 399 keys over 100 slots: every slot is used.
        assert_eq!(h.hash_slot_count, 100);
        f.destroy().unwrap();
        assert!(!p.exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn header_and_entries_on_disk_match_the_layout() {
        let d = tmp("layout");
        let p = d.join("20240101000000000");
        let (slots, entries) = (16, 8);
        let f = IndexFile::create(&p, slots, entries, 5000, 1_700_000_000_000).unwrap();
        // Only the seeded fields are written before the first put (as RocketMQ does).
        let h = disk_header(&p);
        assert_eq!(
            h,
            IndexHeader {
                begin_timestamp: 1_700_000_000_000,
                end_timestamp: 1_700_000_000_000,
                begin_phy_offset: 5000,
                end_phy_offset: 5000,
                hash_slot_count: 0,
                index_count: 0,
            }
        );
        assert_eq!(f.header().index_count, 1);

        // First entry: timeDiff against the seeded begin (7.5 s → 7), then begin is overwritten.
        assert!(f.put_key("T#a", 6000, 1_700_000_007_500));
        assert!(f.put_key("T#b", 7000, 1_700_000_010_000));
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(be_i64(&bytes, 0), 1_700_000_007_500);
        assert_eq!(be_i64(&bytes, 8), 1_700_000_010_000);
        assert_eq!(be_i64(&bytes, 16), 6000);
        assert_eq!(be_i64(&bytes, 24), 7000);
        assert_eq!(be_i32(&bytes, 32), 2);
        assert_eq!(be_i32(&bytes, 36), 3);
        assert_eq!(
            IndexHeader::from_bytes(&bytes).unwrap().to_bytes(),
            bytes[..40]
        );

        let ha = index_key_hash("T#a");
        let slot_a = 40 + (ha % slots) as usize * 4;
        assert_eq!(be_i32(&bytes, slot_a), 1);
        let e1 = 40 + slots as usize * 4 + 20;
        assert_eq!(be_i32(&bytes, e1), ha);
        assert_eq!(be_i64(&bytes, e1 + 4), 6000);
        assert_eq!(be_i32(&bytes, e1 + 12), 7);
        assert_eq!(be_i32(&bytes, e1 + 16), 0);
        let e2 = e1 + 20;
        assert_eq!(be_i32(&bytes, e2), index_key_hash("T#b"));
        assert_eq!(be_i64(&bytes, e2 + 4), 7000);
        assert_eq!(be_i32(&bytes, e2 + 12), 2); // (10_000 - 7_500) / 1000
                                                // Entry 0 is never written.
        assert!(bytes[40 + slots as usize * 4..e1].iter().all(|&b| b == 0));

        // Same key again: chained to entry 1, hashSlotCount unchanged.
        assert!(f.put_key("T#a", 8000, 1_700_000_020_000));
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(be_i32(&bytes, slot_a), 3);
        let e3 = e1 + 40;
        assert_eq!(be_i32(&bytes, e3 + 16), 1);
        assert_eq!(be_i32(&bytes, 32), 2);
        assert_eq!(be_i32(&bytes, 36), 4);
        assert_eq!(disk_header(&p), f.header());
        f.flush().unwrap();
        assert_eq!(disk_header(&p), f.header());

        // A new unseeded file gets indexCount 1 on disk only at flush.
        let p2 = d.join("20240101000000001");
        let g = IndexFile::create(&p2, slots, entries, 0, 0).unwrap();
        assert_eq!(disk_header(&p2), IndexHeader::default());
        assert!(g.is_dirty());
        g.flush().unwrap();
        assert!(!g.is_dirty());
        assert_eq!(disk_header(&p2).index_count, 1);
        // No overwrite of an existing file.
        assert!(IndexFile::create(&p2, slots, entries, 0, 0).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn time_diff_is_clamped() {
        let d = tmp("clamp");
        let f = IndexFile::create(&d.join("f"), 4, 8, 0, 10_000).unwrap();
        // Earlier than the seeded begin: 0.
        assert!(f.put_key("k", 1, 5_000));
        // Far in the future: i32::MAX.
        assert!(f.put_key("k", 2, 5_000 + (i64::from(i32::MAX) + 10) * 1000));
        assert!(f.put_key("k", 3, -1_000_000));
        let bytes = std::fs::read(d.join("f")).unwrap();
        let e = |n: usize| 40 + 16 + n * 20;
        assert_eq!(be_i32(&bytes, e(1) + 12), 0);
        assert_eq!(be_i32(&bytes, e(2) + 12), i32::MAX);
        assert_eq!(be_i32(&bytes, e(3) + 12), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn collisions_are_chained_newest_first() {
        assert_eq!(java_hash("T#Aa"), java_hash("T#BB"));
        let d = tmp("chain");
        let f = IndexFile::create(&d.join("f"), 7, 32, 0, 0).unwrap();
        let t0 = 1_700_000_000_000;
        assert!(f.put_key("T#Aa", 100, t0));
        assert!(f.put_key("T#other", 150, t0 + 500));
        assert!(f.put_key("T#BB", 200, t0 + 1000));
        assert!(f.put_key("T#Aa", 300, t0 + 2000));
        assert_eq!(
            f.select_phy_offsets("T#Aa", 10, 0, i64::MAX),
            vec![300, 200, 100]
        );
        assert_eq!(
            f.select_phy_offsets("T#BB", 10, 0, i64::MAX),
            vec![300, 200, 100]
        );
        assert_eq!(f.select_phy_offsets("T#Aa", 2, 0, i64::MAX), vec![300, 200]);
        assert!(f.select_phy_offsets("T#none", 10, 0, i64::MAX).is_empty());
        assert!(f.select_phy_offsets("T#Aa", 0, 0, i64::MAX).is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn time_range_filtering() {
        let d = tmp("time");
        let f = IndexFile::create(&d.join("f"), 3, 64, 0, 0).unwrap();
        let t0 = 1_700_000_000_000;
        for i in 0..10 {
            assert!(f.put_key("T#k", 1000 + i, t0 + i * 10_000));
        }
        assert!(f.is_time_matched(t0 - 1, t0 + 1));
        assert!(f.is_time_matched(t0 + 50_000, t0 + 60_000));
        assert!(f.is_time_matched(t0 - 10, t0 + 1_000_000));
        assert!(!f.is_time_matched(t0 - 100, t0 - 1));
        assert!(!f.is_time_matched(t0 + 90_001, t0 + 100_000));
        let all = f.select_phy_offsets("T#k", 64, t0, t0 + 90_000);
        assert_eq!(all, (1000..1010).rev().collect::<Vec<_>>());
        // Entries 3..=5 (times t0+30s..t0+50s); the walk stops below `begin`.
        assert_eq!(
            f.select_phy_offsets("T#k", 64, t0 + 30_000, t0 + 50_000),
            vec![1005, 1004, 1003]
        );
        assert!(f
            .select_phy_offsets("T#k", 64, t0 + 100_000, i64::MAX)
            .is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// Property-based fuzzing of the index file parser: files that are valid, mutated, cut short
/// or made long, or whose header and chains hold extreme values, are loaded and queried (and
/// written to); nothing panics, no access is asked for outside the mapping, and what was put
/// into a valid file is found again after reloading it.
#[cfg(test)]
mod fuzz_tests {
    use super::*;
    use crate::format::index::IndexHeader;
    use crate::index::IndexService;
    use proptest::prelude::*;
    use proptest::sample::Index;

    const T0: i64 = 1_700_000_000_000;

    fn tmp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("rmqstore-index-fuzz-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn key(k: u8) -> String {
        format!("T#k{k}")
    }

    /// Puts `puts` (key number, milliseconds after the previous put) into a new file of the
    /// given geometry at `path`; returns the (key number, phy offset) of each put that fitted.
    fn make_file(
        path: &Path,
        slots: i32,
        entries: i32,
        seed: Option<(i64, i64)>,
        puts: &[(u8, i64)],
    ) -> (IndexFile, Vec<(u8, i64)>) {
        let (phy0, ts0) = seed.unwrap_or((0, 0));
        let f = IndexFile::create(path, slots, entries, phy0, ts0).unwrap();
        let mut done = Vec::new();
        let mut ts = T0;
        for (i, &(k, step)) in puts.iter().enumerate() {
            ts += step;
            let phy = phy0 + 100 + i as i64 * 10;
            if f.put_key(&key(k), phy, ts) {
                done.push((k, phy));
            }
        }
        (f, done)
    }

    /// Queries, chain counts and puts over `f` with the given keys and windows.
    fn exercise(f: &IndexFile, keys: &[String], windows: &[(i64, i64)]) {
        for k in keys {
            for &(b, e) in windows {
                let _ = f.select_phy_offsets(k, 64, b, e);
                let _ = f.select_phy_offsets(k, usize::MAX, b, e);
                let _ = f.is_time_matched(b, e);
            }
            let h = index_key_hash(k);
            for phy in [0, 100, 110, -1, i64::MAX, i64::MIN] {
                let _ = f.count_entries(h, phy);
            }
            let _ = f.indexed(100);
        }
        for (i, k) in keys.iter().enumerate() {
            let _ = f.put_key(k, i as i64, T0 + i as i64);
            let _ = f.select_phy_offsets(k, 64, i64::MIN, i64::MAX);
        }
        let _ = f.header();
        let _ = f.is_dirty();
        f.flush().unwrap();
    }

    /// Loads the folder as a service and queries and builds through it.
    fn exercise_service(dir: &Path, slots: i32, entries: i32, keys: &[String]) {
        let s = IndexService::load(dir, slots, entries).unwrap();
        s.set_max_msgs_num_batch(usize::MAX);
        for (j, k) in keys.iter().enumerate() {
            let _ = s.query_offset("T", k, 64, 0, i64::MAX);
            let _ = s.query_offset("T", k, usize::MAX, i64::MIN, i64::MAX);
            s.build_index("T", Some(k), Some(k), 1 << 40 | j as i64, T0, 0)
                .unwrap();
            let _ = s.query_offset("T", k, 64, i64::MIN, i64::MAX);
        }
        let _ = s.gaps(0);
        let _ = s.progress();
        for f in s.files() {
            assert_eq!(f.stray_accesses(), 0, "{}", f.path().display());
        }
        s.flush().unwrap();
    }

    fn puts() -> impl Strategy<Value = Vec<(u8, i64)>> {
        proptest::collection::vec((0u8..8, 0i64..3000), 0..48)
    }

    fn extreme_i32(entries: i32) -> impl Strategy<Value = i32> {
        prop_oneof![
            Just(i32::MIN),
            Just(-1),
            Just(0),
            Just(1),
            Just(entries - 1),
            Just(entries),
            Just(entries + 1),
            Just(i32::MAX),
            any::<i32>(),
        ]
    }

    fn extreme_i64() -> impl Strategy<Value = i64> {
        prop_oneof![
            Just(i64::MIN),
            Just(-1),
            Just(0),
            Just(T0),
            Just(i64::MAX),
            any::<i64>(),
        ]
    }

    fn windows() -> impl Strategy<Value = Vec<(i64, i64)>> {
        proptest::collection::vec((extreme_i64(), extreme_i64()), 1..4)
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Every put that fitted is found by a query, newest first, after a flush and a reload;
        /// the header and the chain counts survive the reload too.
        #[test]
        fn valid_files_round_trip(
            slots in 1i32..=16,
            entries in 2i32..=40,
            seeded in any::<bool>(),
            puts in puts(),
        ) {
            let d = tmp("roundtrip");
            let path = d.join("20240101000000000");
            let seed = seeded.then_some((5000, T0 - 10_000));
            let (f, done) = make_file(&path, slots, entries, seed, &puts);
            prop_assert_eq!(done.len(), puts.len().min(entries as usize - 1));
            let header = f.header();
            f.flush().unwrap();
            drop(f);
            let f = IndexFile::load(&path, slots, entries).unwrap();
            prop_assert_eq!(f.header(), header);
            prop_assert!(!f.is_dirty());
            for k in 0u8..8 {
                let want: Vec<i64> =
                    done.iter().rev().filter(|(x, _)| *x == k).map(|(_, p)| *p).collect();
                let got = f.select_phy_offsets(&key(k), usize::MAX, 0, i64::MAX);
                prop_assert_eq!(got, want.clone());
                for p in &want {
                    prop_assert_eq!(f.count_entries(index_key_hash(&key(k)), *p), 1);
                }
            }
            prop_assert_eq!(f.stray_accesses(), 0);
            drop(f);
            let _ = std::fs::remove_dir_all(&d);
        }

        /// Messages built through the service (rolling over small files) are all found after a
        /// reload.
        #[test]
        fn service_round_trip(
            slots in 1i32..=8,
            entries in 2i32..=10,
            msgs in proptest::collection::vec((1u8..16, 0i64..3000), 1..40),
        ) {
            let d = tmp("svcroundtrip");
            let dir = d.join("index");
            let s = IndexService::load(&dir, slots, entries).unwrap();
            let mut ts = T0;
            for (i, &(mask, step)) in msgs.iter().enumerate() {
                ts += step;
                let keys: Vec<String> =
                    (0..4).filter(|b| mask & (1 << b) != 0).map(|b| format!("k{b}")).collect();
                s.build_index("T", Some(&keys.join(" ")), None, i as i64 * 10, ts, 0).unwrap();
            }
            s.flush().unwrap();
            drop(s);
            let s = IndexService::load(&dir, slots, entries).unwrap();
            s.set_max_msgs_num_batch(usize::MAX);
            for b in 0..4u8 {
                let want: Vec<i64> = (0..msgs.len())
                    .rev()
                    .filter(|&i| msgs[i].0 & (1 << b) != 0)
                    .map(|i| i as i64 * 10)
                    .collect();
                let got = s.query_offset("T", &format!("k{b}"), usize::MAX, 0, i64::MAX);
                prop_assert_eq!(got.phy_offsets, want);
            }
            for f in s.files() {
                prop_assert_eq!(f.stray_accesses(), 0);
            }
            drop(s);
            let _ = std::fs::remove_dir_all(&d);
        }

        /// A valid file with random bytes flipped (anywhere, or in the header and slots).
        #[test]
        fn mutated_files_are_safe(
            slots in 1i32..=16,
            entries in 2i32..=40,
            puts in puts(),
            flips in proptest::collection::vec((any::<Index>(), any::<bool>(), 1u8..=255), 1..16),
            windows in windows(),
        ) {
            let d = tmp("mutated");
            let path = d.join("20240101000000000");
            let (f, _) = make_file(&path, slots, entries, None, &puts);
            f.flush().unwrap();
            drop(f);
            let mut bytes = std::fs::read(&path).unwrap();
            let front = 40 + slots as usize * 4;
            for (at, in_front, x) in flips {
                let i = if in_front { at.index(front) } else { at.index(bytes.len()) };
                bytes[i] ^= x;
            }
            std::fs::write(&path, &bytes).unwrap();
            let f = IndexFile::load(&path, slots, entries).unwrap();
            let keys: Vec<String> = (0..8).map(key).collect();
            exercise(&f, &keys, &windows);
            prop_assert_eq!(f.stray_accesses(), 0);
            drop(f);
            exercise_service(&d, slots, entries, &keys);
            let _ = std::fs::remove_dir_all(&d);
        }

        /// Extreme values in the header (counts, timestamps, offsets), the slots and the chain
        /// links of a file.
        #[test]
        fn extreme_header_and_links_are_safe(
            (slots, entries) in (1i32..=16, 2i32..=40),
            puts in puts(),
            counts in (extreme_i32(40), extreme_i32(40)),
            stamps in (extreme_i64(), extreme_i64(), extreme_i64(), extreme_i64()),
            links in proptest::collection::vec((any::<Index>(), extreme_i32(40)), 0..24),
            windows in windows(),
        ) {
            let d = tmp("extreme");
            let path = d.join("20240101000000000");
            let (f, _) = make_file(&path, slots, entries, None, &puts);
            f.flush().unwrap();
            drop(f);
            let mut bytes = std::fs::read(&path).unwrap();
            let h = IndexHeader {
                begin_timestamp: stamps.0,
                end_timestamp: stamps.1,
                begin_phy_offset: stamps.2,
                end_phy_offset: stamps.3,
                hash_slot_count: counts.0,
                index_count: counts.1,
            };
            bytes[..40].copy_from_slice(&h.to_bytes());
            // Slots, and the prevIndex and timeDiff words of entries.
            let words = bytes.len() / 4;
            for (at, v) in links {
                let w = 10 + at.index(words - 10);
                bytes[w * 4..w * 4 + 4].copy_from_slice(&v.to_be_bytes());
            }
            std::fs::write(&path, &bytes).unwrap();
            let f = IndexFile::load(&path, slots, entries).unwrap();
            prop_assert_eq!(f.header().index_count, counts.1.max(1));
            let keys: Vec<String> = (0..8).map(key).collect();
            exercise(&f, &keys, &windows);
            prop_assert_eq!(f.stray_accesses(), 0);
            drop(f);
            exercise_service(&d, slots, entries, &keys);
            let _ = std::fs::remove_dir_all(&d);
        }

        /// A file cut short or made longer is refused with an error naming it (by the file and
        /// by the service; an empty file is a leftover the service sets aside).
        #[test]
        fn cut_or_lengthened_files_are_refused(
            slots in 1i32..=16,
            entries in 2i32..=40,
            puts in puts(),
            len in any::<Index>(),
        ) {
            let d = tmp("cut");
            let path = d.join("20240101000000000");
            let (f, _) = make_file(&path, slots, entries, None, &puts);
            f.flush().unwrap();
            drop(f);
            let mut bytes = std::fs::read(&path).unwrap();
            let size = bytes.len();
            let len = len.index(2 * size + 64);
            prop_assume!(len != size);
            bytes.resize(len, 0x5a);
            std::fs::write(&path, &bytes).unwrap();
            match IndexFile::load(&path, slots, entries) {
                Err(StoreError::Corrupted { path: p, reason }) => {
                    prop_assert_eq!(&p, &path);
                    let want = format!("index file is {len} bytes, expected {size}");
                    prop_assert!(reason.starts_with(&want), "{}", reason);
                }
                other => prop_assert!(false, "{:?}", other),
            }
            match IndexService::load(&d, slots, entries) {
                Ok(s) if len == 0 => prop_assert!(s.files().is_empty()),
                Err(StoreError::Corrupted { path: p, .. }) if len > 0 => prop_assert_eq!(&p, &path),
                other => prop_assert!(false, "{:?}", other),
            }
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}
