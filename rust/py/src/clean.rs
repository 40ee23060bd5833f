//! Retention's methods of `Store` (a `#[pymethods]` block of its own): the expired commitlog
//! segments, the segments whose deletion waited for a reader, the consume queue and index
//! files below the commitlog's minimum. Each runs with the GIL released (they remove files
//! and may sleep between removals).

use pyo3::prelude::*;

use crate::args::{boolean, int};
use crate::store::Store;

/// Argument extraction for `from_py_with` (the names are the Python parameter names).
fn expired_ms(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    int(obj, "expired_ms")
}

fn interval_ms(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    int(obj, "interval_ms")
}

fn destroy_forcibly_ms(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    int(obj, "destroy_forcibly_ms")
}

fn clean_at_once(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    boolean(obj, "clean_at_once")
}

fn batch_max(obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    int(obj, "batch_max")
}

#[pymethods]
impl Store {
    // -- retention (issue 19) -------------------------------------------------------------

    /// `deleteExpiredFileByTime` on the commitlog: removes the oldest segments last modified
    /// at least `expired_ms` ago (any, with `clean_at_once`), never the last one, stopping at
    /// the first that does not qualify and after `batch_max`, sleeping `interval_ms` between
    /// two; a segment a reader holds waits up to `destroy_forcibly_ms`. Returns the paths
    /// removed.
    fn delete_expired_commit_log_files(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = expired_ms)] expired_ms: i64,
        #[pyo3(from_py_with = interval_ms)] interval_ms: i64,
        #[pyo3(from_py_with = destroy_forcibly_ms)] destroy_forcibly_ms: i64,
        #[pyo3(from_py_with = clean_at_once)] clean_at_once: bool,
        #[pyo3(from_py_with = batch_max)] batch_max: i32,
    ) -> PyResult<Vec<String>> {
        let paths = self.run(py, |s| {
            s.delete_expired_commit_log_files(
                expired_ms,
                interval_ms,
                destroy_forcibly_ms,
                clean_at_once,
                batch_max,
            )
        })?;
        Ok(paths
            .into_iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect())
    }

    /// `reDeleteHangedFile`: retries the commitlog segments whose deletion waited for a
    /// reader; True when one was removed.
    fn redelete_hanged_file(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = destroy_forcibly_ms)] destroy_forcibly_ms: i64,
    ) -> PyResult<bool> {
        self.run(py, |s| s.redelete_hanged_file(destroy_forcibly_ms))
    }

    /// `CleanConsumeQueueService`: removes the consume queue and index files wholly below the
    /// commitlog's minimum offset, sleeping `interval_ms` after each queue that removed
    /// files; returns (consume queue files removed, index files removed).
    fn clean_consume_queues(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = interval_ms)] interval_ms: i64,
    ) -> PyResult<(usize, usize)> {
        self.run(py, |s| s.clean_consume_queues(interval_ms))
    }
}
