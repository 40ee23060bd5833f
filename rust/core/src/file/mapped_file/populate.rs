//! Faulting a segment's pages in ahead of the appender (the commitlog's prefault service).
//!
//! The first write to each page of a new segment makes the kernel find a page, zero it and map
//! it: about a third of a small put's time when the appending thread pays it (docs/perf-log.md).
//! RocketMQ moves that work off the put path for whole segments (`warmMapedFileEnable`, which
//! writes a zero into every page and `mlock`s the file). Here a service thread faults a window
//! of pages ahead of the write position instead, without writing anything: `MADV_POPULATE_WRITE`
//! (Linux 5.14) prepares the pages exactly as a write fault would and leaves their bytes alone,
//! so it may run while the appender writes the same pages.

use std::io;

use super::{size_to_usize, MappedFile, OS_PAGE_SIZE};

/// How [`MappedFile::populate`] faulted pages in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Populate {
    /// `MADV_POPULATE_WRITE`: pages mapped writable, as the appender's first write would.
    Write,
    /// The kernel lacks it (before 5.14): `MADV_WILLNEED` reads the range into the page cache
    /// (zero-filled pages of the reserved, unwritten range), which leaves the appender's write
    /// fault without the zeroing.
    WillNeed,
}

impl MappedFile {
    /// Faults the pages of `[from, to)` (file positions, clamped to the segment, widened to
    /// whole pages) into this segment's writable mapping without changing a byte. Tries `how`
    /// and answers what it used: [`Populate::WillNeed`] once the kernel refused
    /// `MADV_POPULATE_WRITE` as unknown. Other refusals (memory, a truncated file) are errors;
    /// nothing was changed either way.
    pub(crate) fn populate(&self, from: i64, to: i64, how: Populate) -> io::Result<Populate> {
        let from = from.clamp(0, self.file_size) / OS_PAGE_SIZE * OS_PAGE_SIZE;
        let to = to.clamp(from, self.file_size);
        if from >= to {
            return Ok(how);
        }
        // SAFETY: `[from, to)` lies within the mapping (the segment's size), whose start is page
        // aligned as is `from`; neither advice changes the mapping's contents.
        let advise = |advice: libc::c_int| unsafe {
            let rc = libc::madvise(
                self.map.as_mut_ptr().add(size_to_usize(from)).cast(),
                size_to_usize(to - from),
                advice,
            );
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        if how == Populate::Write {
            match advise(libc::MADV_POPULATE_WRITE) {
                Ok(()) => return Ok(Populate::Write),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(e),
            }
        }
        advise(libc::MADV_WILLNEED)?;
        Ok(Populate::WillNeed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages counted resident by `mincore` in `[from, to)` of the mapping.
    fn resident(f: &MappedFile, from: i64, to: i64) -> usize {
        let pages = size_to_usize((to - from) / OS_PAGE_SIZE);
        let mut vec = vec![0u8; pages];
        // SAFETY: a page-aligned range of the mapping and a vector of one byte per page.
        let rc = unsafe {
            libc::mincore(
                f.map.as_mut_ptr().add(size_to_usize(from)).cast(),
                size_to_usize(to - from),
                vec.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }

    /// The whole mapping (the test is its only user).
    fn bytes(f: &MappedFile) -> &[u8] {
        // SAFETY: the mapping is `file_size` bytes and nothing writes to it meanwhile.
        unsafe { std::slice::from_raw_parts(f.map.as_ptr(), size_to_usize(f.file_size)) }
    }

    #[test]
    fn populating_faults_the_range_in_and_changes_no_byte() {
        let dir = std::env::temp_dir().join(format!("rmqstore-populate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // 64 MiB: a fault reads the pages around it in as well (megabytes on some kernels), so
        // the ranges looked at lie far apart.
        let page = |n: i64| n * OS_PAGE_SIZE;
        let size = page(16384);
        let f = MappedFile::create(&dir.join("00000000000000000000"), 0, size).unwrap();
        assert_eq!(resident(&f, page(8192), page(8208)), 0);
        // Unaligned ends: widened to whole pages at the start, clamped to the file at the end.
        let how = f
            .populate(page(8192) + 10, page(8208), Populate::Write)
            .unwrap();
        assert_eq!(
            how,
            Populate::Write,
            "the kernel has MADV_POPULATE_WRITE (5.14+)"
        );
        assert_eq!(resident(&f, page(8192), page(8208)), 16);
        assert_eq!(resident(&f, 0, page(16)), 0, "no page far from the range");
        f.populate(page(16380), i64::MAX, how).unwrap();
        assert_eq!(resident(&f, page(16380), size), 4);
        // Pages the appender wrote keep their bytes.
        // SAFETY: this test is the file's only user.
        let at = unsafe { f.append_with(100, |b| b.fill(7)) }.unwrap();
        assert_eq!(at, 0);
        f.populate(0, page(4), how).unwrap();
        // Nothing to do, and ranges outside the file, are no-ops.
        f.populate(size, size + 10, how).unwrap();
        f.populate(-5, -1, how).unwrap();
        assert_eq!(&bytes(&f)[..100], &[7u8; 100][..]);
        assert!(bytes(&f)[100..].iter().all(|&b| b == 0));
        // The fallback reads the range in, also without changing a byte.
        f.populate(page(4096), page(4104), Populate::WillNeed)
            .unwrap();
        assert_eq!(&bytes(&f)[..100], &[7u8; 100][..]);
        assert!(bytes(&f)[100..].iter().all(|&b| b == 0));
        drop(f);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
