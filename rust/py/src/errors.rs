//! Maps core errors onto the Python exception tree of `rmqstore.errors`, where each class also
//! derives from the stdlib exception that fits (OSError, ValueError, ...).

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;
use rmqstore_core::StoreError;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let module = ERRORS.get_or_try_init(py, || py.import("rmqstore.errors").map(Bound::unbind))?;
    module.bind(py).getattr(name)
}

fn build(py: Python<'_>, err: &StoreError) -> PyResult<PyErr> {
    let msg = err.to_string();
    let exc = match err {
        StoreError::Io { path, source, .. } => {
            let cls = class(py, "StoreIOError")?;
            match source.raw_os_error() {
                Some(errno) => cls.call1((errno, msg, path.to_string_lossy().into_owned()))?,
                None => cls.call1((msg,))?,
            }
        }
        StoreError::Locked { path, .. } => {
            let e = class(py, "StoreLockedError")?.call1((msg,))?;
            e.setattr("path", path.to_string_lossy().into_owned())?;
            e
        }
        StoreError::Corrupted { path, .. } => {
            let e = class(py, "StoreCorruptedError")?.call1((msg,))?;
            e.setattr("path", path.to_string_lossy().into_owned())?;
            e
        }
        StoreError::CorruptRecord { path, offset, .. } => {
            let e = class(py, "CorruptRecordError")?.call1((msg,))?;
            e.setattr("path", path.to_string_lossy().into_owned())?;
            e.setattr("offset", *offset)?;
            e
        }
        StoreError::Config { setting, .. } => {
            let e = class(py, "StoreConfigError")?.call1((msg,))?;
            e.setattr("setting", setting.as_str())?;
            e
        }
        StoreError::InvalidArgument(_) => class(py, "InvalidArgumentError")?.call1((msg,))?,
        StoreError::Closed | StoreError::ForkedCopy(_) => {
            class(py, "StoreClosedError")?.call1((msg,))?
        }
        StoreError::ReadOnly(_) => class(py, "StoreReadOnlyError")?.call1((msg,))?,
        StoreError::TransactionNotFound(_) => {
            class(py, "TransactionNotFoundError")?.call1((msg,))?
        }
        StoreError::TransactionEnded(_) => class(py, "TransactionEndedError")?.call1((msg,))?,
        // The core enum is non-exhaustive: anything new is still an RmqStoreError.
        _ => class(py, "RmqStoreError")?.call1((msg,))?,
    };
    Ok(PyErr::from_value(exc))
}

/// The Python exception for a core error.
pub fn to_pyerr(err: StoreError) -> PyErr {
    Python::attach(|py| {
        build(py, &err).unwrap_or_else(|import_err| {
            PyRuntimeError::new_err(format!("{err} (and rmqstore.errors failed: {import_err})"))
        })
    })
}

/// An exception of class `rmqstore.errors.<name>` with `msg` (a RuntimeError naming the problem
/// if the module cannot be imported).
pub fn error_of_class(py: Python<'_>, name: &str, msg: String) -> PyErr {
    match class(py, name).and_then(|c| c.call1((msg.as_str(),))) {
        Ok(e) => PyErr::from_value(e),
        Err(import_err) => {
            PyRuntimeError::new_err(format!("{msg} (and rmqstore.errors failed: {import_err})"))
        }
    }
}

/// An `InvalidArgumentError` (a `ValueError`) with `msg`.
pub fn invalid_argument(msg: impl Into<String>) -> PyErr {
    to_pyerr(StoreError::InvalidArgument(msg.into()))
}

pub trait IntoPyResult<T> {
    fn into_py_result(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, StoreError> {
    fn into_py_result(self) -> PyResult<T> {
        self.map_err(to_pyerr)
    }
}
