//! Transactional messages' calls of `Store` (their Python methods are in `store.rs`, which
//! calls these): the end target from Python, the end's dict and the figures' dict.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString};
use rmqstore_core::format::HostAddr;
use rmqstore_core::{EndOutcome, TxStats, TxTarget};

use crate::args;
use crate::message::PutMessageResult;

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
