//! The transaction check's calls of `Store` (their Python methods are in `store.rs`, which
//! calls these with the GIL released): one check round, the half as the producer's checker
//! sees it, the pending list; and their results as Python values.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rmqstore_core::transaction::{CheckParams, CheckStep, PendingTx};

use crate::args::int;

/// Argument extraction for `from_py_with` (the names are the Python parameter names).
pub(crate) fn timeout_ms(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    int(obj, "timeout_ms")
}

pub(crate) fn check_max(obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    int(obj, "check_max")
}

pub(crate) fn file_reserved_ms(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    int(obj, "file_reserved_ms")
}

pub(crate) fn max_to_check(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    int(obj, "max_to_check")
}

pub(crate) fn limit(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    int(obj, "limit")
}

pub(crate) fn params(
    now_ms: i64,
    timeout_ms: i64,
    check_max: i32,
    file_reserved_ms: i64,
) -> CheckParams {
    CheckParams {
        now_ms,
        timeout_ms,
        check_max,
        file_reserved_ms,
    }
}

/// `Store.transaction_check`'s result.
pub(crate) fn step<'py>(py: Python<'py>, s: &CheckStep) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("to_check", PyList::new(py, &s.to_check)?)?;
    d.set_item("discarded", PyList::new(py, &s.discarded)?)?;
    d.set_item("already_committed", s.already_committed)?;
    d.set_item("examined", s.examined)?;
    d.set_item("done", s.done)?;
    Ok(d)
}

/// `Store.pending_transactions`'s result: one dict per transaction.
pub(crate) fn pending<'py>(py: Python<'py>, list: &[PendingTx]) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for t in list {
        let d = PyDict::new(py);
        d.set_item("transaction_id", &t.transaction_id)?;
        d.set_item("half_offset", t.half_offset)?;
        d.set_item("half_queue_offset", t.half_queue_offset)?;
        d.set_item("topic", &t.topic)?;
        d.set_item("queue_id", t.queue_id)?;
        d.set_item("producer_group", &t.producer_group)?;
        d.set_item("born_timestamp", t.born_timestamp)?;
        d.set_item("store_timestamp", t.store_timestamp)?;
        d.set_item("check_times", t.check_times)?;
        out.append(d)?;
    }
    Ok(out)
}
