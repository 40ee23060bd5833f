//! How full the store's disks are: the used fraction of a file system, and the running flags
//! DISK_FULL (the commitlog's file system) and LOGIC_DISK_FULL (the consume queues') that make
//! puts fail with SERVICE_NOT_AVAILABLE while the disk is above the warning level.

use std::path::Path;
use std::sync::Arc;

use super::CommitLog;
use crate::error::{Result, StoreError};
use crate::running_flags::{self, RunningFlags};

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

/// [`disk_usage`] of the file system that holds `dir`, or would hold it once created: of its
/// nearest existing ancestor (RocketMQ reads -1 for a missing folder and then cleans at once; a
/// store whose consume queue folder is not created yet is not full).
pub(crate) fn disk_usage_of_nearest(dir: &Path) -> Result<f64> {
    let mut at = dir;
    while !at.exists() {
        match at.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => at = parent,
            _ => return disk_usage(Path::new(".")),
        }
    }
    disk_usage(at)
}

impl CommitLog {
    /// The store's running flags (held here: every put reads them).
    pub(crate) fn flags(&self) -> &Arc<RunningFlags> {
        &self.flags
    }

    /// Re-reads how full the commitlog's disk is and sets or clears DISK_FULL; returns the used
    /// fraction.
    pub(crate) fn refresh_disk_full(&self) -> Result<f64> {
        let used = disk_usage(self.queue.dir())?;
        self.mark_disk(
            running_flags::DISK_FULL,
            used,
            self.queue.dir(),
            "commitlog",
        );
        Ok(used)
    }

    /// Re-reads how full the consume queues' disk (`dir`) is and sets or clears
    /// LOGIC_DISK_FULL; returns the used fraction.
    pub(crate) fn refresh_logic_disk_full(&self, dir: &Path) -> Result<f64> {
        let used = disk_usage_of_nearest(dir)?;
        self.mark_disk(running_flags::LOGIC_DISK_FULL, used, dir, "consume queue");
        Ok(used)
    }

    /// Sets `bit` when `used` is above the warning level, else clears it; logs a change.
    fn mark_disk(&self, bit: i32, used: f64, dir: &Path, what: &str) {
        let full = used > self.disk_warning_ratio;
        if !self.flags.make(bit, full) {
            return;
        }
        let name = running_flags::describe(bit);
        if full {
            log::error!(
                target: "rmqstore.disk",
                "{what} disk of {} is {:.0} % used, above the warning level of {:.0} %: {name} \
                 set, puts are refused with SERVICE_NOT_AVAILABLE until space returns",
                dir.display(),
                used * 100.0,
                self.disk_warning_ratio * 100.0
            );
        } else {
            let still = self.flags.bits() & running_flags::NOT_WRITEABLE_MASK;
            log::warn!(
                target: "rmqstore.disk",
                "{what} disk of {} is back to {:.0} % used: {name} cleared{}",
                dir.display(),
                used * 100.0,
                if still == 0 {
                    ", puts are accepted again".to_owned()
                } else {
                    format!(" (puts still refused: {})", running_flags::describe(still))
                }
            );
        }
    }
}
