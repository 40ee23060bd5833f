//! How full the commitlog's disk is: the used fraction of its file system, and the disk-full
//! state that makes puts fail with SERVICE_NOT_AVAILABLE.

use std::path::Path;
use std::sync::atomic::Ordering;

use super::CommitLog;
use crate::error::{Result, StoreError};

/// `UtilAll.getDiskPartitionSpaceUsedPercent`: used / (used + available to us), of the file
/// system holding `dir`.
pub(crate) fn disk_usage(dir: &Path) -> Result<f64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| StoreError::InvalidArgument(format!("{} has a NUL byte", dir.display())))?;
    // SAFETY: statvfs fills a plain struct from a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(StoreError::io(
            "cannot read disk usage of",
            dir,
            std::io::Error::last_os_error(),
        ));
    }
    let used = (st.f_blocks.saturating_sub(st.f_bfree)) as f64;
    let avail = st.f_bavail as f64;
    Ok(if used + avail > 0.0 {
        used / (used + avail)
    } else {
        1.0
    })
}

impl CommitLog {
    /// Re-reads how full the commitlog's disk is and sets or clears the disk-full state;
    /// returns the used fraction.
    pub(crate) fn refresh_disk_full(&self) -> Result<f64> {
        let used = disk_usage(self.queue.dir())?;
        let full = used > self.disk_warning_ratio;
        let was = self.disk_full.swap(full, Ordering::AcqRel);
        if full != was {
            if full {
                log::error!(
                    target: "rmqstore.disk",
                    "disk of {} is {:.0} % used, above the warning level of {:.0} %: puts are \
                     refused with SERVICE_NOT_AVAILABLE until space returns",
                    self.queue.dir().display(),
                    used * 100.0,
                    self.disk_warning_ratio * 100.0
                );
            } else {
                log::warn!(
                    target: "rmqstore.disk",
                    "disk of {} is back to {:.0} % used: puts are accepted again",
                    self.queue.dir().display(),
                    used * 100.0
                );
            }
        }
        Ok(used)
    }
}
