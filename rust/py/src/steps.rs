//! What the store's stepping calls return: one small frozen class per call, with named
//! read-only fields (the Python services read them once a round, or once a batch for
//! `ReadBatchBuffers`).

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// What `Store.dispatch_step` did (the core's `ReputStep`).
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct DispatchStep {
    /// Messages dispatched.
    #[pyo3(get)]
    pub dispatched: u64,
    /// Commitlog bytes consumed (records and blank records).
    #[pyo3(get)]
    pub bytes: i64,
    /// Where the next call starts.
    #[pyo3(get)]
    pub reput_offset: i64,
    /// Confirmed bytes not dispatched yet.
    #[pyo3(get)]
    pub behind: i64,
}

#[pymethods]
impl DispatchStep {
    fn __repr__(&self) -> String {
        format!(
            "DispatchStep(dispatched={}, bytes={}, reput_offset={}, behind={})",
            self.dispatched, self.bytes, self.reput_offset, self.behind
        )
    }
}

/// What `Store.group_commit_step` did.
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct GroupCommitStep {
    /// The last round forced the commitlog.
    #[pyo3(get)]
    pub flushed: bool,
    /// The service was told to stop.
    #[pyo3(get)]
    pub stopped: bool,
    /// Forces done so far.
    #[pyo3(get)]
    pub forces: u64,
}

#[pymethods]
impl GroupCommitStep {
    fn __repr__(&self) -> String {
        format!(
            "GroupCommitStep(flushed={}, stopped={}, forces={})",
            py_bool(self.flushed),
            py_bool(self.stopped),
            self.forces
        )
    }
}

/// What `Store.commit_step` (transient store pool) did.
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct CommitStep {
    /// Bytes were committed (readable now).
    #[pyo3(get)]
    pub committed: bool,
    /// The service was told to stop.
    #[pyo3(get)]
    pub stopped: bool,
}

#[pymethods]
impl CommitStep {
    fn __repr__(&self) -> String {
        format!(
            "CommitStep(committed={}, stopped={})",
            py_bool(self.committed),
            py_bool(self.stopped)
        )
    }
}

/// What `Store.allocation_service_step` did.
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct AllocationStep {
    /// Segments created.
    #[pyo3(get)]
    pub allocated: u32,
    /// Segments whose pages were unlocked (`munlock`).
    #[pyo3(get)]
    pub unlocked: u32,
    /// The service was told to stop.
    #[pyo3(get)]
    pub stopped: bool,
    /// Seconds spent creating (and warming) segments.
    #[pyo3(get)]
    pub alloc_seconds: f64,
}

#[pymethods]
impl AllocationStep {
    fn __repr__(&self) -> String {
        format!(
            "AllocationStep(allocated={}, unlocked={}, stopped={}, alloc_seconds={:?})",
            self.allocated,
            self.unlocked,
            py_bool(self.stopped),
            self.alloc_seconds
        )
    }
}

/// The transient store pool's write buffers (`Store.transient_store_pool_buffers`).
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct PoolBuffers {
    /// Buffers free to lend (`remainTransientStoreBufferNumbs`).
    #[pyo3(get)]
    pub available: usize,
    /// Buffers in the pool.
    #[pyo3(get)]
    pub total: usize,
}

#[pymethods]
impl PoolBuffers {
    fn __repr__(&self) -> String {
        format!(
            "PoolBuffers(available={}, total={})",
            self.available, self.total
        )
    }
}

/// One bulk read of a queue as Arrow column buffers (`Store.read_batch_buffers`);
/// `rmqstore._arrow` assembles the pyarrow RecordBatch.
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct ReadBatchBuffers {
    /// Rows read.
    #[pyo3(get)]
    pub rows: usize,
    /// The queue offset after the last row read (where the next read starts).
    #[pyo3(get)]
    pub next_offset: i64,
    /// `{column name: ColumnBuffer}`.
    #[pyo3(get)]
    pub columns: Py<PyDict>,
}

#[pymethods]
impl ReadBatchBuffers {
    fn __repr__(&self) -> String {
        format!(
            "ReadBatchBuffers(rows={}, next_offset={})",
            self.rows, self.next_offset
        )
    }
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// What `Store.prefault_step` did (the core's `PrefaultStep`).
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct PrefaultStep {
    /// Commitlog bytes faulted in ahead of the appender.
    #[pyo3(get)]
    pub bytes: i64,
    /// The service was told to stop.
    #[pyo3(get)]
    pub stopped: bool,
}

#[pymethods]
impl PrefaultStep {
    fn __repr__(&self) -> String {
        format!(
            "PrefaultStep(bytes={}, stopped={})",
            self.bytes,
            py_bool(self.stopped)
        )
    }
}

/// The prefault service's call of `Store` (beside the other services' calls in store.rs).
#[pymethods]
impl crate::store::Store {
    /// One round of the prefault service: waits up to `timeout_ms` until the appender nears
    /// the commitlog pages faulted in ahead of it, then faults in pages up to `window` bytes
    /// past its write position. Runs with the GIL released.
    fn prefault_step(
        &self,
        py: Python<'_>,
        window: i64,
        timeout_ms: u64,
    ) -> PyResult<PrefaultStep> {
        let s = self.run(py, |s| {
            s.prefault_step(window, std::time::Duration::from_millis(timeout_ms))
        })?;
        Ok(PrefaultStep {
            bytes: s.bytes,
            stopped: s.stopped,
        })
    }
}
