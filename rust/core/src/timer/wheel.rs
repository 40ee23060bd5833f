//! The `timerwheel` file (RocketMQ's `TimerWheel`, docs/format.md#timer-files): a ring of
//! `2 x 604800` 32-byte slots, mapped whole. Slot fields are read and written through atomics
//! on the mapping (each field is aligned to its size), so the put hook's flow-control read of a
//! slot's count never races the engine's writes; the engine serialises whole-slot updates.
//!
//! RocketMQ works on a heap copy of the file and writes changed bytes back at each flush; this
//! writes the mapping directly, so a killed process leaves every update in the page cache and
//! a flush only forces it.
//!
//! The file is sparse, as RocketMQ makes it (`setLength`): a store that never holds a timer
//! message spends no disk on it. A page of the mapping is written only once its blocks are
//! reserved (`fallocate` of that page, remembered in a bitmap filled at open from the file's
//! data ranges), so a full disk makes an enqueue fail with an error instead of a SIGBUS; a page
//! never reserved holds only zeros and is read without touching the mapping (on tmpfs even a
//! read of a hole allocates memory and can fail the same way).

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Result, StoreError};
use crate::format::timer::{slot_index, Slot, SLOTS_TOTAL, SLOT_SIZE, WHEEL_FILE_LEN};

/// Bytes per page of the reservation bitmap.
const PAGE: i64 = 4096;
/// Pages of the wheel.
const PAGES: i64 = WHEEL_FILE_LEN / PAGE;

/// The mapped `timerwheel` of one store.
pub(crate) struct TimerWheel {
    path: PathBuf,
    file: File,
    map: MmapRaw,
    precision_ms: i64,
    /// One bit per page: its blocks are reserved (it may hold data).
    reserved: Vec<AtomicU64>,
}

impl std::fmt::Debug for TimerWheel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerWheel")
            .field("path", &self.path)
            .finish()
    }
}

impl TimerWheel {
    /// Checks `path` before anything changes: absent, or a regular file of 0 bytes (created,
    /// never sized) or exactly RocketMQ's length (`Timer wheel length:... != expected`).
    pub(crate) fn check(path: &Path) -> Result<()> {
        crate::util::check_fixed_size_or_absent(
            path,
            "timer wheel",
            WHEEL_FILE_LEN as u64,
            &format!(" (2 x {SLOTS_TOTAL} slots of {SLOT_SIZE} bytes)"),
        )
    }

    /// Opens (creating and sizing if needed) the wheel at `path` for `precision_ms`. A new
    /// file's blocks are reserved, so a write through the mapping cannot fail for lack of space.
    pub(crate) fn open(path: &Path, precision_ms: i64) -> Result<TimerWheel> {
        let (file, len) = crate::util::open_fixed_size_file(
            path,
            "timer wheel",
            WHEEL_FILE_LEN as u64,
            &format!(" (2 x {SLOTS_TOTAL} slots of {SLOT_SIZE} bytes)"),
        )?;
        if len == 0 {
            file.set_len(WHEEL_FILE_LEN as u64)
                .map_err(|e| StoreError::io("cannot size timer wheel", path, e))?;
        }
        let reserved =
            data_pages(&file).map_err(|e| StoreError::io("cannot map holes of", path, e))?;
        let map = MmapOptions::new()
            .map_raw(&file)
            .map_err(|e| StoreError::io("cannot map", path, e))?;
        if map.len() as u64 != WHEEL_FILE_LEN as u64 {
            return Err(StoreError::corrupted(path, "timer wheel mapping is short"));
        }
        Ok(TimerWheel {
            path: path.to_path_buf(),
            file,
            map,
            precision_ms,
            reserved,
        })
    }

    /// The field at byte `at` of slot `index` as an atomic long.
    fn long(&self, index: i64, at: i64) -> &AtomicI64 {
        debug_assert!((0..SLOTS_TOTAL * 2).contains(&index) && at % 8 == 0 && at <= 16);
        // SAFETY: index is in the ring and `at` within the slot, so the 8 bytes lie inside the
        // mapping, which lives as long as `self`; the mapping is page aligned and slots are 32
        // bytes, so the field is 8-byte aligned; the bytes are only ever accessed atomically
        // by this process.
        unsafe {
            AtomicI64::from_ptr(
                self.map
                    .as_mut_ptr()
                    .add((index * SLOT_SIZE + at) as usize)
                    .cast(),
            )
        }
    }

    fn int(&self, index: i64, at: i64) -> &AtomicI32 {
        debug_assert!((0..SLOTS_TOTAL * 2).contains(&index) && (at == 24 || at == 28));
        // SAFETY: as `long`, for a 4-byte aligned field.
        unsafe {
            AtomicI32::from_ptr(
                self.map
                    .as_mut_ptr()
                    .add((index * SLOT_SIZE + at) as usize)
                    .cast(),
            )
        }
    }

    fn page_reserved(&self, page: i64) -> bool {
        self.reserved[(page / 64) as usize].load(Ordering::Acquire) & (1 << (page % 64)) != 0
    }

    /// Reserves the blocks of the page holding slot `index` before its first write.
    fn reserve(&self, index: i64) -> Result<()> {
        let page = index * SLOT_SIZE / PAGE;
        if self.page_reserved(page) {
            return Ok(());
        }
        // SAFETY: plain syscall on an owned descriptor.
        let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, page * PAGE, PAGE) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            // A file system without fallocate: nothing better can be done than to write.
            if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(StoreError::io(
                    "cannot reserve a page of the timer wheel",
                    &self.path,
                    e,
                ));
            }
        }
        self.reserved[(page / 64) as usize].fetch_or(1 << (page % 64), Ordering::AcqRel);
        Ok(())
    }

    /// Reserves the blocks of the page holding the slot of `time_ms` (before anything that
    /// will link to it is written elsewhere).
    pub(crate) fn reserve_slot(&self, time_ms: i64) -> Result<()> {
        match self.index(time_ms) {
            Some(i) => self.reserve(i),
            None => Ok(()),
        }
    }

    fn index(&self, time_ms: i64) -> Option<i64> {
        slot_index(time_ms, self.precision_ms)
    }

    /// `getRawSlot`: the slot the ring holds where `time_ms` would go, whatever its time.
    pub(crate) fn raw_slot(&self, time_ms: i64) -> Slot {
        let Some(i) = self.index(time_ms) else {
            return Slot::BLANK;
        };
        if !self.page_reserved(i * SLOT_SIZE / PAGE) {
            // A hole: zeros, read without faulting the page in.
            return Slot {
                time_ms: 0,
                first_pos: 0,
                last_pos: 0,
                num: 0,
                magic: 0,
            };
        }
        Slot {
            time_ms: i64::from_be(self.long(i, 0).load(Ordering::Acquire))
                .wrapping_mul(self.precision_ms),
            first_pos: i64::from_be(self.long(i, 8).load(Ordering::Acquire)),
            last_pos: i64::from_be(self.long(i, 16).load(Ordering::Acquire)),
            num: i32::from_be(self.int(i, 24).load(Ordering::Acquire)),
            magic: i32::from_be(self.int(i, 28).load(Ordering::Acquire)),
        }
    }

    /// `getSlot`: the slot of `time_ms`, or [`Slot::BLANK`] when the ring position holds another
    /// time (or nothing).
    pub(crate) fn slot(&self, time_ms: i64) -> Slot {
        let slot = self.raw_slot(time_ms);
        if time_ms < 0 || slot.time_ms != time_ms / self.precision_ms * self.precision_ms {
            return Slot::BLANK;
        }
        slot
    }

    /// `putSlot(timeMs, firstPos, lastPos, num, magic)`.
    pub(crate) fn put_slot(
        &self,
        time_ms: i64,
        first: i64,
        last: i64,
        num: i32,
        magic: i32,
    ) -> Result<()> {
        let Some(i) = self.index(time_ms) else {
            return Ok(());
        };
        self.reserve(i)?;
        self.put_positions(i, time_ms, first, last);
        self.int(i, 24).store(num.to_be(), Ordering::Release);
        self.int(i, 28).store(magic.to_be(), Ordering::Release);
        Ok(())
    }

    /// `putSlot(timeMs, firstPos, lastPos)`: the count and magic bytes stay as they are.
    fn put_positions(&self, i: i64, time_ms: i64, first: i64, last: i64) {
        self.long(i, 0)
            .store((time_ms / self.precision_ms).to_be(), Ordering::Release);
        self.long(i, 8).store(first.to_be(), Ordering::Release);
        self.long(i, 16).store(last.to_be(), Ordering::Release);
    }

    /// `reviseSlot(timeMs, firstPos, lastPos, force)` (`None` is RocketMQ's `IGNORE`): on the
    /// slot of `time_ms`, sets the positions given; on a ring position holding another time,
    /// and only with `force`, makes it the slot of `time_ms` with both positions set to the
    /// given ones.
    pub(crate) fn revise_slot(
        &self,
        time_ms: i64,
        first: Option<i64>,
        last: Option<i64>,
        force: bool,
    ) -> Result<()> {
        let Some(i) = self.index(time_ms) else {
            return Ok(());
        };
        self.reserve(i)?;
        let stored = i64::from_be(self.long(i, 0).load(Ordering::Acquire));
        if stored != time_ms / self.precision_ms {
            if force {
                let last = last.unwrap_or(-2);
                self.put_positions(i, time_ms, first.unwrap_or(last), last);
            }
            return Ok(());
        }
        if let Some(first) = first {
            self.long(i, 8).store(first.to_be(), Ordering::Release);
        }
        if let Some(last) = last {
            self.long(i, 16).store(last.to_be(), Ordering::Release);
        }
        Ok(())
    }

    /// `checkPhyPos`: the smallest first position among the slots of the whole ring from
    /// `time_start_ms` on whose last position is past `max_offset` (`i64::MAX` when none is).
    pub(crate) fn check_phy_pos(&self, time_start_ms: i64, max_offset: i64) -> i64 {
        let mut min_first = i64::MAX;
        self.each_slot_from(time_start_ms, |s| {
            if s.last_pos > max_offset && s.first_pos < min_first {
                min_first = s.first_pos;
            }
        });
        min_first
    }

    /// Calls `f` with every slot of the ring that belongs to its time from `time_start_ms` on
    /// (one turn of the ring).
    pub(crate) fn each_slot_from(&self, time_start_ms: i64, mut f: impl FnMut(Slot)) {
        let p = self.precision_ms;
        let start = time_start_ms.max(0) / p * p;
        for k in 0..SLOTS_TOTAL * 2 {
            let Some(t) = k.checked_mul(p).and_then(|d| start.checked_add(d)) else {
                return;
            };
            let s = self.slot(t);
            if !s.is_blank() {
                f(s);
            }
        }
    }

    /// `getNum`: messages counted in the slot of `time_ms`.
    pub(crate) fn num(&self, time_ms: i64) -> i32 {
        self.slot(time_ms).num
    }

    /// `getAllNum`: messages counted in the slots of the ring from `time_start_ms` on.
    pub(crate) fn all_num(&self, time_start_ms: i64) -> i64 {
        let mut n = 0i64;
        self.each_slot_from(time_start_ms, |s| n += i64::from(s.num));
        n
    }

    /// Forces the mapping to disk.
    pub(crate) fn flush(&self) -> Result<()> {
        self.map
            .flush()
            .map_err(|e| StoreError::io("cannot flush", &self.path, e))
    }
}

/// The reservation bitmap of `file`: the pages its data ranges (`SEEK_DATA` / `SEEK_HOLE`)
/// cover; every page when the file system cannot say.
fn data_pages(file: &File) -> std::io::Result<Vec<AtomicU64>> {
    let words = ((PAGES + 63) / 64) as usize;
    let bits: Vec<AtomicU64> = (0..words).map(|_| AtomicU64::new(0)).collect();
    let mark = |from: i64, to: i64| {
        let mut p = from / PAGE;
        while p * PAGE < to.min(WHEEL_FILE_LEN) {
            bits[(p / 64) as usize].fetch_or(1 << (p % 64), Ordering::Relaxed);
            p += 1;
        }
    };
    let fd = file.as_raw_fd();
    let mut at = 0i64;
    while at < WHEEL_FILE_LEN {
        // SAFETY: plain syscalls on an owned descriptor.
        let data = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if data < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                // No data from `at` on.
                Some(libc::ENXIO) => break,
                // Holes unknown: take every page as data.
                Some(libc::EINVAL) => {
                    mark(0, WHEEL_FILE_LEN);
                    break;
                }
                _ => return Err(e),
            }
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error());
        }
        mark(data, hole);
        at = hole;
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rmqstore-wheel-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn slots_like_timer_wheel_test() {
        let d = tmp("slots");
        let path = d.join("timerwheel");
        let w = TimerWheel::open(&path, 1000).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 38_707_200);
        let t = 1_700_000_000_000;
        assert!(w.slot(t).is_blank());
        assert_eq!((w.slot(t).first_pos, w.slot(t).last_pos), (-1, -1));
        w.put_slot(t, 1, 2, 3, 4).unwrap();
        let s = w.slot(t + 999);
        assert_eq!(
            (s.time_ms, s.first_pos, s.last_pos, s.num, s.magic),
            (t, 1, 2, 3, 4)
        );
        // Two turns later the same ring position belongs to another time.
        let later = t + 2 * SLOTS_TOTAL * 1000;
        assert!(w.slot(later).is_blank());
        assert_eq!(w.raw_slot(later).time_ms, t);
        assert_eq!(w.num(t), 3);
        w.put_slot(t + 1000, 5, 6, 7, 0).unwrap();
        assert_eq!(w.all_num(t), 10);
        assert_eq!(w.all_num(t + 1000), 7);
        // reviseSlot: same time sets what is given; another time only with force.
        w.revise_slot(t, None, Some(9), false).unwrap();
        assert_eq!((w.slot(t).first_pos, w.slot(t).last_pos), (1, 9));
        w.revise_slot(later, None, Some(11), false).unwrap();
        assert_eq!(w.slot(t).last_pos, 9);
        w.revise_slot(later, None, Some(11), true).unwrap();
        let s = w.slot(later);
        assert_eq!((s.first_pos, s.last_pos, s.num), (11, 11, 3));
        // checkPhyPos
        assert_eq!(w.check_phy_pos(t, 100), i64::MAX);
        // Slot t now belongs to `later` (another turn): only t + 1000 counts.
        assert_eq!(w.check_phy_pos(t, 5), 5);
        w.flush().unwrap();
        drop(w);
        // The stored time is the time over the precision.
        let bytes = std::fs::read(&path).unwrap();
        let i = slot_index(t + 1000, 1000).unwrap() as usize * 32;
        assert_eq!(&bytes[i..i + 8], &1_700_000_001i64.to_be_bytes());
        // Reopened, the slots are there.
        let w = TimerWheel::open(&path, 1000).unwrap();
        assert_eq!(w.slot(t + 1000).last_pos, 6);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_wheel_is_sparse_and_pages_are_reserved_as_written() {
        use std::os::unix::fs::MetadataExt;
        let d = tmp("sparse");
        let path = d.join("timerwheel");
        let w = TimerWheel::open(&path, 100).unwrap();
        let blocks = || std::fs::metadata(&path).unwrap().blocks() * 512;
        assert!(
            blocks() < 64 * 1024,
            "a new wheel takes no space: {}",
            blocks()
        );
        // Holes read as blank slots without touching the mapping.
        assert_eq!(w.all_num(0), 0);
        let t = 1_700_000_000_000;
        w.put_slot(t, 1, 2, 3, 0).unwrap();
        let after = blocks();
        assert!((4096..64 * 1024).contains(&after), "{after}");
        drop(w);
        // Reopened: the written page is found as data, the rest stays holes.
        let w = TimerWheel::open(&path, 100).unwrap();
        assert_eq!(w.slot(t).num, 3);
        let i = slot_index(t, 100).unwrap();
        assert!(w.page_reserved(i * SLOT_SIZE / PAGE));
        assert!(!w.page_reserved((i * SLOT_SIZE / PAGE + 7) % PAGES));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_wheel_of_another_length_is_refused() {
        let d = tmp("len");
        let path = d.join("timerwheel");
        std::fs::write(&path, vec![0u8; 1000]).unwrap();
        let e = TimerWheel::check(&path).unwrap_err().to_string();
        assert!(
            e.contains("timer wheel is 1000 bytes, expected 38707200"),
            "{e}"
        );
        assert!(TimerWheel::open(&path, 1000).is_err());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1000);
        // An empty file (created, never sized) is sized.
        std::fs::write(&path, b"").unwrap();
        TimerWheel::check(&path).unwrap();
        TimerWheel::open(&path, 100).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 38_707_200);
        let _ = std::fs::remove_dir_all(&d);
    }
}
