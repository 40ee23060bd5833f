//! The transaction check's methods of `Store` (GIL released around each core call): one check
//! round, the half as the producer's checker sees it, the pending list; and their results as
//! Python values.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rmqstore_core::transaction::{CheckParams, CheckStep, PendingTx};

use crate::args::{self, int};
use crate::message::MessageExt;
use crate::store::Store;

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

/// The transaction check (a `#[pymethods]` block of its own).
#[pymethods]
impl Store {
    // -- transaction check (issue 18) -----------------------------------------------------

    /// One transaction check round (RocketMQ's `TransactionalMessageServiceImpl.check`, with
    /// the exactly-once lookup): a dict with `to_check` (commitlog offsets of the copies to
    /// ask the producer about), `discarded`, `already_committed`, `examined`, `done`.
    fn transaction_check<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: i64,
        #[pyo3(from_py_with = timeout_ms)] timeout_ms: i64,
        #[pyo3(from_py_with = check_max)] check_max: i32,
        #[pyo3(from_py_with = file_reserved_ms)] file_reserved_ms: i64,
        #[pyo3(from_py_with = max_to_check)] max_to_check: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let p = params(now_ms, timeout_ms, check_max, file_reserved_ms);
        let s = self.run(py, |s| s.transaction_check(p, max_to_check))?;
        step(py, &s)
    }

    /// The half message at commitlog offset `offset` as the producer's checker sees it (real
    /// topic and queue); None when no half message starts there.
    fn transaction_message(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::offset)] offset: i64,
    ) -> PyResult<Option<MessageExt>> {
        let m = self.run(py, |s| s.transaction_message(offset))?;
        Ok(m.map(MessageExt::new))
    }

    /// The unresolved transactions from the check progress (the latest half of each), at
    /// most `limit`, as dicts.
    fn pending_transactions<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = limit)] limit: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        let list = self.run(py, |s| s.pending_transactions(limit))?;
        pending(py, &list)
    }
}
