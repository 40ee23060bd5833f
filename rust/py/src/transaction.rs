//! Transactional messages' methods of `Store` (GIL released around each core call) and their
//! helpers: the end target from Python, the end's dict and the figures' dict.

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyInt, PyString};
use rmqstore_core::format::HostAddr;
use rmqstore_core::{EndOutcome, TxStats, TxTarget};

use crate::args;
use crate::message::{Message, PutMessageResult};
use crate::store::Store;

/// `half_offset_or_transaction_id`: an int (the half's commitlog offset) or a str (the
/// transaction id).
pub(crate) fn target(obj: &Bound<'_, PyAny>) -> PyResult<TxTarget> {
    if obj.is_instance_of::<PyBool>() {
        return Err(args::type_error(
            "half_offset_or_transaction_id",
            "an int (commitlog offset) or a str (transaction id)",
            obj,
        ));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(TxTarget::Id(s.to_str()?.to_owned()));
    }
    if obj.is_instance_of::<PyInt>() {
        return obj.extract::<i64>().map(TxTarget::Offset).map_err(|_| {
            crate::errors::invalid_argument(
                "half_offset_or_transaction_id is out of the int64 range",
            )
        });
    }
    Err(args::type_error(
        "half_offset_or_transaction_id",
        "an int (commitlog offset) or a str (transaction id)",
        obj,
    ))
}

/// `end_transaction`'s answer as the contract's dict.
pub(crate) fn outcome<'py>(
    py: Python<'py>,
    out: EndOutcome,
    store_host: HostAddr,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "transaction_id"), out.transaction_id)?;
    d.set_item(intern!(py, "half_offset"), out.half_offset)?;
    d.set_item(intern!(py, "half_queue_offset"), out.half_queue_offset)?;
    d.set_item(intern!(py, "commit"), out.commit)?;
    d.set_item(intern!(py, "ended"), out.ended)?;
    let result = match out.real {
        Some(inner) => Some(Bound::new(
            py,
            PutMessageResult {
                inner,
                store_host,
                transaction_id: None,
            },
        )?),
        None => None,
    };
    d.set_item(intern!(py, "result"), result)?;
    Ok(d)
}

/// What `end_transaction_result` builds its answer with, looked up once: `object.__new__`,
/// `rmqstore._transaction.EndTransactionResult` and `TransactionState.COMMIT` / `ROLLBACK`.
struct EndResultType {
    new: Py<PyAny>,
    cls: Py<PyAny>,
    commit: Py<PyAny>,
    rollback: Py<PyAny>,
}

static END_RESULT_TYPE: PyOnceLock<EndResultType> = PyOnceLock::new();

/// Sets attribute `name` of `obj` as `object.__setattr__` does (a frozen dataclass's own
/// `__setattr__` refuses every assignment; its `__init__` assigns through `object`'s too).
fn set_field(
    obj: &Bound<'_, PyAny>,
    name: &Bound<'_, PyString>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // SAFETY: the three pointers are live objects held by the caller for the whole call;
    // PyObject_GenericSetAttr takes its own references to what it keeps.
    let rc = unsafe { ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), value.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(PyErr::fetch(obj.py()))
    }
}

/// `end_transaction`'s answer as the package's `EndTransactionResult` (a frozen dataclass),
/// built here at once: the fields set as its `__init__` sets them, without the dict and the
/// Python-level constructor in between.
pub(crate) fn end_result<'py>(
    py: Python<'py>,
    out: EndOutcome,
    store_host: HostAddr,
) -> PyResult<Bound<'py, PyAny>> {
    let t = END_RESULT_TYPE.get_or_try_init(py, || -> PyResult<EndResultType> {
        let state = py.import("rmqstore.enums")?.getattr("TransactionState")?;
        Ok(EndResultType {
            new: py
                .get_type::<pyo3::types::PyAny>()
                .getattr(intern!(py, "__new__"))?
                .unbind(),
            cls: py
                .import("rmqstore._transaction")?
                .getattr("EndTransactionResult")?
                .unbind(),
            commit: state.getattr("COMMIT")?.unbind(),
            rollback: state.getattr("ROLLBACK")?.unbind(),
        })
    })?;
    let obj = t.new.bind(py).call1((t.cls.bind(py),))?;
    let result = match out.real {
        Some(inner) => Bound::new(
            py,
            PutMessageResult {
                inner,
                store_host,
                transaction_id: None,
            },
        )?
        .into_any(),
        None => py.None().into_bound(py),
    };
    let state = if out.commit { &t.commit } else { &t.rollback };
    set_field(
        &obj,
        intern!(py, "transaction_id"),
        &PyString::new(py, &out.transaction_id),
    )?;
    set_field(
        &obj,
        intern!(py, "half_offset"),
        &out.half_offset.into_pyobject(py)?.into_any(),
    )?;
    set_field(
        &obj,
        intern!(py, "half_queue_offset"),
        &out.half_queue_offset.into_pyobject(py)?.into_any(),
    )?;
    set_field(&obj, intern!(py, "state"), state.bind(py))?;
    set_field(
        &obj,
        intern!(py, "ended"),
        PyBool::new(py, out.ended).as_any(),
    )?;
    set_field(&obj, intern!(py, "put_result"), &result)?;
    Ok(obj)
}

/// `transaction_stats()` as a dict of ints.
pub(crate) fn stats(py: Python<'_>, s: TxStats) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in [
        ("prepared", s.prepared),
        ("committed", s.committed),
        ("rolled_back", s.rolled_back),
        ("ops_written", s.ops_written),
        ("op_entries_queued", s.op_entries_queued),
        ("checked", s.checked),
        ("discarded", s.discarded),
        ("already_committed", s.already_committed),
        ("pending_in_memory", s.pending_in_memory),
    ] {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// Transactional messages (a `#[pymethods]` block of its own: `Store`'s methods by concern).
#[pymethods]
impl Store {
    // -- transactional messages --------------------------------------------------------------

    /// Stores `msg` as a transaction half message; the result's `transaction_id` names it.
    #[pyo3(signature = (msg, producer_group=None))]
    fn prepare_message(
        &self,
        py: Python<'_>,
        msg: &Bound<'_, Message>,
        producer_group: Option<PyBackedStr>,
    ) -> PyResult<PutMessageResult> {
        let m = &msg.get().inner;
        let group = producer_group.as_deref();
        let (r, id) = self.run(py, |s| s.prepare_message(m, group))?;
        Ok(PutMessageResult {
            inner: r,
            store_host: self.inner.config().store_host,
            transaction_id: Some(id),
        })
    }

    /// Commits or rolls back the transaction of a half message, named by its commitlog offset
    /// (int) or its transaction id (str), exactly once.
    fn end_transaction<'py>(
        &self,
        py: Python<'py>,
        target: &Bound<'py, PyAny>,
        commit: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let target = self::target(target)?;
        let out = self.run(py, |s| s.end_transaction(target, commit))?;
        outcome(py, out, self.inner.config().store_host)
    }

    /// `end_transaction` answered as `rmqstore.EndTransactionResult` (what
    /// `MessageStore.end_transaction` returns) instead of the dict.
    fn end_transaction_result<'py>(
        &self,
        py: Python<'py>,
        target: &Bound<'py, PyAny>,
        commit: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let target = self::target(target)?;
        let out = self.run(py, |s| s.end_transaction(target, commit))?;
        end_result(py, out, self.inner.config().store_host)
    }

    /// One round of the op batch service: writes the op messages due; returns when the next
    /// round is due (ms; 0 when nothing is queued).
    fn transaction_flush_ops(
        &self,
        py: Python<'_>,
        now_ms: i64,
        max_size: i32,
        interval_ms: i64,
        force: bool,
    ) -> PyResult<i64> {
        self.run(py, |s| {
            s.transaction_flush_ops(now_ms, max_size, interval_ms, force)
        })
    }

    /// Sets the check progress (-1: the queue's minimum), clamped to each queue; returns it.
    fn transaction_load(
        &self,
        py: Python<'_>,
        half_offset: i64,
        op_offset: i64,
    ) -> PyResult<(i64, i64)> {
        self.run(py, |s| s.transaction_load(half_offset, op_offset))
    }

    /// The check progress: (half queue offset, op queue offset).
    fn transaction_offsets(&self, py: Python<'_>) -> PyResult<(i64, i64)> {
        self.run(py, |s| s.transaction_offsets())
    }

    /// The transaction figures.
    fn transaction_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.run(py, |s| s.transaction_stats())?;
        stats(py, s)
    }
}
