//! `SegmentView`: a second, read-only mapping of a segment file whose bytes bulk reads hand out
//! without copying them (the `binary_view` body column of `read_batch`).
//!
//! A batch holds an `Arc` of the view of every segment its bodies point into, so the mapping
//! lives as long as the batch: past the end of the store, the deletion of the file, or the drop
//! of the [`MappedFile`](crate::file::mapped_file::MappedFile) that made it.
//!
//! A returned batch's bytes never change. The store never rewrites readable bytes except by a
//! truncation (`truncate_files`, or the recovery of a dirty tail when a store is opened again in
//! this process), and every truncation of a file first calls [`detach_file`]: each live view of
//! that file whose handed-out bytes reach past the cut gets those pages replaced, at the same
//! addresses, by a private copy (an anonymous mapping moved over them with `mremap`), so the
//! batches keep their bytes while the file is zeroed. A detached view is never handed out
//! again. Views are found by the file's device and inode, so the views made by a store that was
//! closed (and still held by its batches) are found by the store opened after it.
//!
//! What this cannot cover: another process rewriting the file (a writer's own recovery, seen by
//! a read-only store here) changes the shared pages under every mapping of it.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Result, StoreError};

const PAGE: i64 = 4096;

/// A read-only mapping of a whole segment file.
pub struct SegmentView {
    map: MmapRaw,
    len: i64,
    /// End of the bytes ever handed out from this view (what a truncation must preserve).
    pinned_end: AtomicI64,
    /// Some pages were replaced by a private copy: the view no longer shows the file.
    detached: AtomicBool,
}

impl std::fmt::Debug for SegmentView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentView")
            .field("len", &self.len)
            .field("pinned_end", &self.pinned_end.load(Ordering::Relaxed))
            .field("detached", &self.detached.load(Ordering::Relaxed))
            .finish()
    }
}

type FileKey = (u64, u64);

/// Live views by file (device, inode).
static VIEWS: Mutex<Option<HashMap<FileKey, Vec<Weak<SegmentView>>>>> = Mutex::new(None);

fn registry() -> std::sync::MutexGuard<'static, Option<HashMap<FileKey, Vec<Weak<SegmentView>>>>> {
    VIEWS.lock().unwrap_or_else(|p| p.into_inner())
}

fn key_of(file: &File, path: &Path) -> Result<FileKey> {
    let m = file
        .metadata()
        .map_err(|e| StoreError::io("cannot stat segment", path, e))?;
    Ok((m.dev(), m.ino()))
}

impl SegmentView {
    /// Maps the first `len` bytes of `file` read-only and registers the view.
    pub(crate) fn open(file: &File, path: &Path, len: i64) -> Result<Arc<SegmentView>> {
        let size = usize::try_from(len)
            .map_err(|_| StoreError::corrupted(path, format!("segment length {len}")))?;
        let key = key_of(file, path)?;
        let map = MmapOptions::new()
            .len(size)
            .map_raw_read_only(file)
            .map_err(|e| StoreError::io("cannot map segment for reading", path, e))?;
        let view = Arc::new(SegmentView {
            map,
            len,
            pinned_end: AtomicI64::new(0),
            detached: AtomicBool::new(false),
        });
        let mut reg = registry();
        let list = reg.get_or_insert_with(HashMap::new).entry(key).or_default();
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&view));
        // Forget files whose views are all gone, now and then.
        if let Some(map) = reg.as_mut() {
            if map.len() > 64 {
                map.retain(|_, l| {
                    l.retain(|w| w.strong_count() > 0);
                    !l.is_empty()
                });
            }
        }
        Ok(view)
    }

    /// Length of the view (the segment's size).
    pub fn len(&self) -> i64 {
        self.len
    }

    /// Never: a segment has at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether this view may still be handed out (it shows the file).
    pub(crate) fn is_attached(&self) -> bool {
        !self.detached.load(Ordering::Acquire)
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> *const u8 {
        self.map.as_ptr()
    }

    /// Bytes `[start, end)` of the view, which a batch holding this view may keep: they never
    /// change while the view lives. `None` outside the view.
    pub fn bytes(&self, start: i64, end: i64) -> Option<&[u8]> {
        if start < 0 || end < start || end > self.len {
            return None;
        }
        // SAFETY: inside the mapping, which lives as long as `self`; the pages are read-only
        // and their content is preserved by `detach_file` before any truncation rewrites them.
        Some(unsafe {
            std::slice::from_raw_parts(
                self.map.as_ptr().add(start as usize),
                (end - start) as usize,
            )
        })
    }

    /// Records that bytes up to `end` were handed out (a truncation below it copies them).
    pub(crate) fn pin(&self, end: i64) {
        self.pinned_end
            .fetch_max(end.min(self.len), Ordering::AcqRel);
    }

    /// Replaces the pages holding `[from, pinned_end)` by a private copy, at the same
    /// addresses. Returns whether anything was copied.
    fn detach_from(&self, from: i64, path: &Path) -> Result<bool> {
        let pinned = self.pinned_end.load(Ordering::Acquire);
        let start = (from.max(0) / PAGE) * PAGE;
        let end = pinned.saturating_add(PAGE - 1) / PAGE * PAGE;
        let end = end.min(self.len);
        if start >= end {
            return Ok(false);
        }
        let len = (end - start) as usize;
        // SAFETY: `start..end` lies inside the mapping (page-aligned, `end` at most its length,
        // which mmap rounded up to whole pages). The anonymous mapping is ours until it is moved
        // over the view's pages; mremap replaces them atomically (a reader sees the file's page
        // or its copy, both with the same bytes, as nothing writes the file meanwhile).
        unsafe {
            let dst = self.map.as_ptr().add(start as usize) as *mut libc::c_void;
            let copy = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if copy == libc::MAP_FAILED {
                return Err(detach_error(path));
            }
            std::ptr::copy_nonoverlapping(dst as *const u8, copy as *mut u8, len);
            if libc::mprotect(copy, len, libc::PROT_READ) != 0 {
                libc::munmap(copy, len);
                return Err(detach_error(path));
            }
            let moved = libc::mremap(
                copy,
                len,
                len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                dst,
            );
            if moved == libc::MAP_FAILED {
                libc::munmap(copy, len);
                return Err(detach_error(path));
            }
        }
        self.detached.store(true, Ordering::Release);
        Ok(true)
    }
}

fn detach_error(path: &Path) -> StoreError {
    StoreError::io(
        "cannot keep the bytes of live read batches before truncating",
        path,
        std::io::Error::last_os_error(),
    )
}

/// Before the bytes of `file` from `from` on are rewritten (a truncation): every live view of
/// the file keeps the bytes it handed out there as a private copy, and is handed out no more.
/// Returns how many views were detached.
pub(crate) fn detach_file(file: &File, path: &Path, from: i64) -> Result<usize> {
    let key = key_of(file, path)?;
    let views: Vec<Arc<SegmentView>> = {
        let reg = registry();
        reg.as_ref()
            .and_then(|m| m.get(&key))
            .map(|l| l.iter().filter_map(Weak::upgrade).collect())
            .unwrap_or_default()
    };
    let mut detached = 0;
    for v in views {
        if v.detach_from(from, path)? {
            detached += 1;
        }
    }
    if detached > 0 {
        log::info!(
            target: "rmqstore.read",
            "{}: {detached} mapping(s) held by live read batches keep a copy of their bytes \
             from offset {from} before the truncation",
            path.display()
        );
    }
    Ok(detached)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_detached_view_keeps_its_bytes_while_the_file_changes() {
        let dir = std::env::temp_dir().join(format!("rmq-segview-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("seg");
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let content: Vec<u8> = (0..3 * PAGE).map(|i| (i % 251) as u8 + 1).collect();
        f.write_all(&content).unwrap();
        let v = SegmentView::open(&f, &path, 3 * PAGE).unwrap();
        assert_eq!(v.bytes(0, 3 * PAGE).unwrap(), &content[..]);
        // Nothing handed out past the cut: nothing to copy, the view stays attached.
        v.pin(100);
        assert_eq!(detach_file(&f, &path, 5000).unwrap(), 0);
        assert!(v.is_attached());
        v.pin(6000);
        let before = v.bytes(4000, 6000).unwrap().to_vec();
        assert_eq!(detach_file(&f, &path, 5000).unwrap(), 1);
        assert!(!v.is_attached());
        // The file changes under the view (as a truncation zeroes it).
        use std::os::unix::fs::FileExt;
        f.write_all_at(&vec![0u8; (3 * PAGE) as usize], 0).unwrap();
        assert_eq!(v.bytes(4096, 6000).unwrap(), &before[96..]);
        // Pages below the first copied one still show the file.
        assert_eq!(v.bytes(0, 4096).unwrap(), &vec![0u8; 4096][..]);
        drop(v);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
