//! The running flags and disk ratios of `Store` (RocketMQ's `RunningFlags`); each call runs
//! with the GIL released (the ratios read the file systems).

use pyo3::prelude::*;
use rmqstore_core::StoreError;

use crate::store::Store;

#[pymethods]
impl Store {
    /// The running flags' bits now (`rmqstore.RunningFlags`).
    fn running_flags(&self, py: Python<'_>) -> PyResult<i32> {
        self.run(py, |s| s.running_flags())
    }

    /// Re-reads how full the commitlog's and the consume queues' file systems are (setting or
    /// clearing DISK_FULL and LOGIC_DISK_FULL) and returns both used fractions.
    fn disk_ratios(&self, py: Python<'_>) -> PyResult<(f64, f64)> {
        self.run(py, |s| s.disk_ratios())
    }

    /// Sets (`on`) or clears running flag `bits`; returns the bits after.
    fn set_running_flags(&self, py: Python<'_>, bits: i64, on: bool) -> PyResult<i32> {
        self.run(py, |s| match i32::try_from(bits) {
            Ok(bits) => s.set_running_flags(bits, on),
            Err(_) => Err(StoreError::InvalidArgument(format!(
                "running flag bits {bits:#x} are not RocketMQ's: the bits are 1 (NOT_READABLE) \
                 to 64 (LOGIC_DISK_FULL)"
            ))),
        })
    }
}
