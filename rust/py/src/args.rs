//! Argument extraction with the package's exceptions. PyO3's own extraction raises a bare
//! `OverflowError` (an int out of range), `TypeError` (a wrong type) or `UnicodeEncodeError` (a
//! str holding a lone surrogate) that names no argument. Every argument of the public API goes
//! through these functions instead (`#[pyo3(from_py_with = args::offset)]`), so a bad value is
//! an `rmqstore.ArgumentOverflowError` (also an `OverflowError`), `ArgumentTypeError` (also a
//! `TypeError`) or `InvalidArgumentError` (a `ValueError`) whose message starts with the
//! argument's name.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyUnicodeError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBool, PyString};

use crate::errors::error_of_class;

/// The range of an integer type, for messages.
pub trait IntRange {
    const MIN: i128;
    const MAX: i128;
}

macro_rules! int_range {
    ($($t:ty),*) => {$(
        impl IntRange for $t {
            const MIN: i128 = <$t>::MIN as i128;
            const MAX: i128 = <$t>::MAX as i128;
        }
    )*};
}
int_range!(i32, i64, u64, usize);

/// Up to 40 characters of `obj`'s repr (a 5,000-digit int stays readable in a message).
fn short_repr(obj: &Bound<'_, PyAny>) -> String {
    let r = obj
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "<unprintable>".to_owned());
    if r.chars().count() > 40 {
        let head: String = r.chars().take(30).collect();
        format!("{head}... ({} characters)", r.chars().count())
    } else {
        r
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// An `ArgumentTypeError` for `name`.
pub fn type_error(name: &str, wanted: &str, obj: &Bound<'_, PyAny>) -> PyErr {
    error_of_class(
        obj.py(),
        "ArgumentTypeError",
        format!("{name} must be {wanted}, not {}", type_name(obj)),
    )
}

/// An `InvalidArgumentError` for `name`.
pub fn invalid(py: Python<'_>, name: &str, problem: impl std::fmt::Display) -> PyErr {
    error_of_class(py, "InvalidArgumentError", format!("{name}: {problem}"))
}

/// An integer argument of type `T`.
pub fn int<'py, T>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<T>
where
    T: for<'a> FromPyObject<'a, 'py> + IntRange,
{
    match obj.extract::<T>().map_err(Into::<PyErr>::into) {
        Ok(v) => Ok(v),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => Err(error_of_class(
            obj.py(),
            "ArgumentOverflowError",
            format!(
                "{name} must be between {} and {}, got {}",
                T::MIN,
                T::MAX,
                short_repr(obj)
            ),
        )),
        Err(e) if e.is_instance_of::<PyTypeError>(obj.py()) => Err(type_error(name, "an int", obj)),
        Err(e) => Err(e),
    }
}

/// Text that must encode as UTF-8 (no lone surrogates).
pub fn text(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<PyBackedStr> {
    let Ok(s) = obj.cast::<PyString>() else {
        return Err(type_error(name, "a str", obj));
    };
    s.clone().try_into().map_err(|e: PyErr| {
        if e.is_instance_of::<PyUnicodeError>(obj.py()) {
            invalid(
                obj.py(),
                name,
                format!(
                    "{} is not valid text: {} (a lone surrogate cannot be stored as UTF-8)",
                    short_repr(obj),
                    e.value(obj.py())
                ),
            )
        } else {
            e
        }
    })
}

/// A bool (not any truthy object: `read_batch(..., include_properties="no")` is a mistake).
pub fn boolean(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    match obj.cast::<PyBool>() {
        Ok(b) => Ok(b.is_true()),
        Err(_) => Err(type_error(name, "a bool", obj)),
    }
}

/// `kind`'s value, or None for None.
fn optional<'py, T>(
    obj: &Bound<'py, PyAny>,
    name: &str,
    kind: impl FnOnce(&Bound<'py, PyAny>, &str) -> PyResult<T>,
) -> PyResult<Option<T>> {
    if obj.is_none() {
        return Ok(None);
    }
    kind(obj, name).map(Some)
}

/// One extraction function per argument name of the public API, for `from_py_with`; `kind?`
/// also takes None.
macro_rules! named {
    ($f:ident: $kind:ident -> $t:ty $(, $($rest:tt)*)?) => {
        pub fn $f(obj: &Bound<'_, PyAny>) -> PyResult<$t> {
            $kind(obj, stringify!($f))
        }
        $(named!($($rest)*);)?
    };
    ($f:ident: $kind:ident? -> $t:ty $(, $($rest:tt)*)?) => {
        pub fn $f(obj: &Bound<'_, PyAny>) -> PyResult<Option<$t>> {
            optional(obj, stringify!($f), $kind)
        }
        $(named!($($rest)*);)?
    };
    () => {};
}

named!(
    offset: int -> i64,
    queue_id: int -> i32,
    flag: int -> i32,
    max_msg_nums: int -> i32,
    max_num: int -> usize,
    max_msgs: int -> usize,
    begin_timestamp: int -> i64,
    end_timestamp: int? -> i64,
    born_timestamp: int? -> i64,
    timestamp: int -> i64,
    consume_queue_offset: int -> i64,
    topic: text -> PyBackedStr,
    group: text -> PyBackedStr,
    key: text -> PyBackedStr,
    tag: text -> PyBackedStr,
    boundary: text? -> PyBackedStr,
    tags: text? -> PyBackedStr,
    subscription: text? -> PyBackedStr,
    born_host: text? -> PyBackedStr,
    include_properties: boolean -> bool,
    decompress: boolean? -> bool,
    body_view: boolean -> bool,
    now_ms: int -> i64,
    uniq_key: text -> PyBackedStr,
    deliver_time_ms: int? -> i64,
    timeout_ms: int -> u64,
);

/// `columns` of `read_batch_buffers`: None (every column) or an iterable of column names (not
/// one str), each known and given once (`rmqstore_core::read::ColumnMask::from_names`).
pub fn columns(obj: &Bound<'_, PyAny>) -> PyResult<Option<rmqstore_core::read::ColumnMask>> {
    if obj.is_none() {
        return Ok(None);
    }
    let wanted = "None or a sequence of column names";
    if obj.is_instance_of::<PyString>() {
        return Err(type_error("columns", wanted, obj));
    }
    let iter = obj
        .try_iter()
        .map_err(|_| type_error("columns", wanted, obj))?;
    let mut names = Vec::new();
    for item in iter {
        names.push(text(&item?, "columns")?);
    }
    rmqstore_core::read::ColumnMask::from_names(&names)
        .map(Some)
        .map_err(|e| invalid(obj.py(), "columns", e))
}
