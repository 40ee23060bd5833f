//! Transactional messages' methods of `Store` (GIL released around each core call) and their
//! helpers: the end target from Python, the end's dict and the figures' dict.

use std::time::Duration;

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyInt, PyString, PyType};
use rmqstore_core::format::HostAddr;
use rmqstore_core::{EndOutcome, TxStats, TxTarget};

use crate::args;
use crate::message::{Message, PutMessageResult};
use crate::store::Store;

/// `half_offset_or_transaction_id`: a half message's commitlog offset (an int >= 0, not a
/// bool) or a transaction id (a non-empty str), checked with the messages
/// `MessageStore.end_transaction` documents.
pub(crate) fn target(obj: &Bound<'_, PyAny>) -> PyResult<TxTarget> {
    const NAME: &str = "half_offset_or_transaction_id";
    let py = obj.py();
    if obj.is_instance_of::<PyString>() {
        let text = args::text(obj, NAME)?;
        if text.is_empty() {
            return Err(args::invalid(py, NAME, "the transaction id is empty"));
        }
        return Ok(TxTarget::Id(text.to_string()));
    }
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        if let Ok(v) = obj.extract::<i64>() {
            if v >= 0 {
                return Ok(TxTarget::Offset(v));
            }
        }
        let shown = obj.str().map(|s| s.to_string()).unwrap_or_default();
        if obj.lt(0i32)? {
            return Err(args::invalid(
                py,
                NAME,
                format!("a commitlog offset must be >= 0, got {shown}"),
            ));
        }
        return Err(crate::errors::error_of_class(
            py,
            "ArgumentOverflowError",
            format!(
                "{NAME}: a commitlog offset must be at most {}, got {shown}",
                i64::MAX
            ),
        ));
    }
    Err(args::type_error(
        NAME,
        "a half message's commitlog offset (int) or a transaction id (str)",
        obj,
    ))
}

/// `commit`: exactly a bool (`end_transaction(offset, 1)` is a mistake, not a commit).
fn commit_flag(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    args::boolean(obj, "commit")
}

/// `prepare_message`'s `msg`: a `rmqstore.Message`.
fn message_arg<'a, 'py>(obj: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, Message>> {
    obj.cast::<Message>()
        .map_err(|_| args::type_error("msg", "a rmqstore.Message", obj))
}

/// `prepare_message`'s `producer_group`: None, or a non-empty str.
fn producer_group_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<PyBackedStr>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if !obj.is_instance_of::<PyString>() {
        return Err(args::type_error("producer_group", "a str or None", obj));
    }
    let group = args::text(obj, "producer_group")?;
    if group.is_empty() {
        return Err(crate::errors::error_of_class(
            obj.py(),
            "InvalidArgumentError",
            "producer_group is empty (None means the default)".to_owned(),
        ));
    }
    Ok(Some(group))
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

/// What `end_transaction_result` builds its answer with, looked up once:
/// `rmqstore._transaction.EndTransactionResult` (a frozen dataclass with `__slots__`), how an
/// instance is made and each field set, and `TransactionState.COMMIT` / `ROLLBACK`.
struct EndResultType {
    cls: Py<PyType>,
    make: Make,
    commit: Py<PyAny>,
    rollback: Py<PyAny>,
}

/// How an `EndTransactionResult` is made.
enum Make {
    /// The class's `tp_alloc` (what `object.__new__` calls for it), then each slot's member
    /// descriptor's `tp_descr_set` (what `object.__setattr__` calls once it found the
    /// descriptor), in `FIELDS` order: no call through Python, no attribute lookup per field.
    Slots {
        alloc: ffi::allocfunc,
        fields: Vec<(Py<PyAny>, ffi::descrsetfunc)>,
    },
    /// Anything else (a class whose fields are not plain slots): `object.__new__`, then
    /// `object.__setattr__` by name.
    Generic { new: Py<PyAny> },
}

/// `EndTransactionResult`'s fields, in the order `end_result` gives their values.
const FIELDS: [&str; 6] = [
    "transaction_id",
    "half_offset",
    "half_queue_offset",
    "state",
    "ended",
    "put_result",
];

static END_RESULT_TYPE: PyOnceLock<EndResultType> = PyOnceLock::new();

/// `Make::Slots` when every field of `cls` is a member descriptor of its own (`__slots__`),
/// else `None`.
fn slot_maker(cls: &Bound<'_, PyType>) -> PyResult<Option<Make>> {
    let py = cls.py();
    let own = cls.getattr(intern!(py, "__dict__"))?;
    let mut fields = Vec::with_capacity(FIELDS.len());
    for name in FIELDS {
        let Ok(descr) = own.get_item(name) else {
            return Ok(None);
        };
        let kind = descr.get_type();
        if kind.name()?.to_str()? != "member_descriptor" {
            return Ok(None);
        }
        // SAFETY: `kind` is a live type object; PyType_GetSlot accepts static types (3.10+)
        // and answers NULL for a slot the type does not fill.
        let set = unsafe { ffi::PyType_GetSlot(kind.as_type_ptr(), ffi::Py_tp_descr_set) };
        if set.is_null() {
            return Ok(None);
        }
        // SAFETY: the Py_tp_descr_set slot holds a `descrsetfunc`.
        let set: ffi::descrsetfunc = unsafe { std::mem::transmute(set) };
        fields.push((descr.unbind(), set));
    }
    // SAFETY: as above; Py_tp_alloc holds an `allocfunc` (every type has one).
    let alloc = unsafe { ffi::PyType_GetSlot(cls.as_type_ptr(), ffi::Py_tp_alloc) };
    if alloc.is_null() {
        return Ok(None);
    }
    // SAFETY: the Py_tp_alloc slot holds an `allocfunc`.
    let alloc: ffi::allocfunc = unsafe { std::mem::transmute(alloc) };
    Ok(Some(Make::Slots { alloc, fields }))
}

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
        let cls = py
            .import("rmqstore._transaction")?
            .getattr("EndTransactionResult")?
            .cast_into::<PyType>()?;
        let make = match slot_maker(&cls)? {
            Some(m) => m,
            None => Make::Generic {
                new: py
                    .get_type::<pyo3::types::PyAny>()
                    .getattr(intern!(py, "__new__"))?
                    .unbind(),
            },
        };
        Ok(EndResultType {
            cls: cls.unbind(),
            make,
            commit: state.getattr("COMMIT")?.unbind(),
            rollback: state.getattr("ROLLBACK")?.unbind(),
        })
    })?;
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
    let values: [Bound<'py, PyAny>; 6] = [
        PyString::new(py, &out.transaction_id).into_any(),
        out.half_offset.into_pyobject(py)?.into_any(),
        out.half_queue_offset.into_pyobject(py)?.into_any(),
        state.bind(py).clone(),
        PyBool::new(py, out.ended).to_owned().into_any(),
        result,
    ];
    let cls = t.cls.bind(py);
    match &t.make {
        Make::Slots { alloc, fields } => {
            // SAFETY: `alloc` is the class's own tp_alloc, called as object.__new__ calls it
            // (a new reference, or NULL with an exception set).
            let raw = unsafe { alloc(cls.as_type_ptr(), 0) };
            // SAFETY: a new reference (or NULL: the error is fetched).
            let obj = unsafe { Bound::from_owned_ptr_or_err(py, raw)? };
            for ((descr, set), value) in fields.iter().zip(values.iter()) {
                // SAFETY: `set` is the descriptor type's tp_descr_set, given that descriptor,
                // an instance of the class it belongs to and a live value (it takes its own
                // reference); 0 or -1 with an exception set.
                let rc = unsafe { set(descr.as_ptr(), obj.as_ptr(), value.as_ptr()) };
                if rc != 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            Ok(obj)
        }
        Make::Generic { new } => {
            let obj = new.bind(py).call1((cls,))?;
            for (name, value) in FIELDS.iter().zip(values.iter()) {
                set_field(&obj, &PyString::intern(py, name), value)?;
            }
            Ok(obj)
        }
    }
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

    /// Stores ``msg`` as the half message of a new transaction (RocketMQ 5.x's
    /// ``sendMessageInTransaction`` and ``parseHalfMessageInner``): in
    /// ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, its real topic and queue kept as ``REAL_TOPIC`` /
    /// ``REAL_QID``, ``TRAN_MSG=true``, ``PGROUP`` = ``producer_group`` (``"DEFAULT_PRODUCER"``
    /// when None, unless the message has ``PGROUP``), and its ``UNIQ_KEY`` (generated when it
    /// has none) as ``__transactionId__``. No consumer of the real topic sees it until
    /// ``end_transaction`` commits it.
    ///
    /// ``result.transaction_id`` is the transaction's id and ``result.wrote_offset`` the half's
    /// commitlog offset; either identifies it to ``end_transaction``. Bad content is answered
    /// by ``result.status`` (a timer property: MESSAGE_ILLEGAL; ``DELAY`` is dropped, as
    /// RocketMQ's client drops it): nothing is stored, and the ``transaction_id`` the message
    /// was given names no transaction. ``msg`` not a ``Message``, or ``producer_group`` not a
    /// str or None, raise ``ArgumentTypeError``; an empty ``producer_group``
    /// ``InvalidArgumentError``. A read-only store raises ``StoreReadOnlyError``.
    #[pyo3(signature = (msg, *, producer_group=None))]
    fn prepare_message(
        &self,
        py: Python<'_>,
        msg: &Bound<'_, PyAny>,
        producer_group: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PutMessageResult> {
        let msg = message_arg(msg)?;
        let group = producer_group_arg(producer_group)?;
        let m = &msg.get().inner;
        let group = group.as_deref();
        let (r, id) = self.run(py, |s| s.prepare_message(m, group))?;
        Ok(PutMessageResult {
            inner: r,
            store_host: self.inner.config().store_host,
            transaction_id: Some(id),
        })
    }

    /// Commits or rolls back the transaction of a half message, named by its commitlog offset
    /// (int) or its transaction id (str), exactly once; answered as a dict (the check
    /// service's call).
    fn end_transaction<'py>(
        &self,
        py: Python<'py>,
        target: &Bound<'py, PyAny>,
        commit: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let target = self::target(target)?;
        let commit = commit_flag(commit)?;
        let out = self.run(py, |s| s.end_transaction(target, commit))?;
        outcome(py, out, self.inner.config().store_host)
    }

    /// Commits (``commit=True``) or rolls back a prepared transaction, named by its half's
    /// commitlog offset (``wrote_offset`` of ``prepare_message``, or ``half_offset`` of
    /// ``pending_transactions``) or by its transaction id (RocketMQ's
    /// ``EndTransactionProcessor``); answered as ``rmqstore.EndTransactionResult``.
    ///
    /// A commit puts the message into its real topic and queue (COMMIT type,
    /// ``preparedTransactionOffset`` = the half's offset) and queues the op entry marking the
    /// half resolved; a rollback queues only the op entry. Op entries are written in batches
    /// by the op batch service (``transaction_op_msg_max_size``,
    /// ``transaction_op_batch_interval``; with an interval of 0 the service is woken here)
    /// and at close.
    ///
    /// Safe from any number of threads: a transaction is ended once. ``TransactionEndedError``
    /// when it was committed or rolled back already (here, by the check service, before a
    /// restart or by a RocketMQ broker on these files): nothing is written, and a committed
    /// transaction never gets a second real message. ``TransactionNotFoundError`` when no half
    /// message starts at the offset or the id is unknown. A commit whose real put fails (a
    /// full disk) returns ``ended=False`` with the put's status in ``put_result``: the
    /// transaction stays pending. A ``bool`` or other type as the target, or a ``commit``
    /// that is not a bool, raise ``ArgumentTypeError``; a negative offset or an empty id
    /// ``InvalidArgumentError``; an offset past 2**63 - 1 ``ArgumentOverflowError``.
    fn end_transaction_result<'py>(
        &self,
        py: Python<'py>,
        half_offset_or_transaction_id: &Bound<'py, PyAny>,
        commit: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let target = self::target(half_offset_or_transaction_id)?;
        let commit = commit_flag(commit)?;
        let out = self.run(py, |s| s.end_transaction(target, commit))?;
        end_result(py, out, self.inner.config().store_host)
    }

    /// Waits up to `timeout_ms` for an op entry that is due at once (an end with
    /// `transaction_op_batch_interval` = 0) or for `transaction_wake_ops` / `stop_services`;
    /// true once the services are stopped.
    fn transaction_wait_ops(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::timeout_ms)] timeout_ms: u64,
    ) -> PyResult<bool> {
        let timeout = Duration::from_millis(timeout_ms);
        self.run(py, |s| s.transaction_wait_ops(timeout))
    }

    /// Ends a `transaction_wait_ops` in progress (the op service's stop).
    fn transaction_wake_ops(&self) {
        self.inner.transaction_wake_ops();
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
