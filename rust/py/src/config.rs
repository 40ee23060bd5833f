//! Store settings across the binding, driven by the core's settings table
//! (`rmqstore_core::config::SETTINGS`): `settings()` gives Python the table, and a Python dict
//! of settings becomes a core `StoreConfig` setting by setting through that table, so the
//! binding names no setting itself.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString};
use rmqstore_core::config::{self, SettingKind, SettingValue, SETTINGS};
use rmqstore_core::{StoreConfig, StoreError};

use crate::errors::{error_of_class, to_pyerr, IntoPyResult};

/// A `StoreConfigError` naming `setting`.
fn bad(setting: &str, reason: String) -> PyErr {
    to_pyerr(StoreError::config(setting, reason))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// `value` (a Python object) as the core value of a setting of `kind`.
fn to_value(name: &str, kind: SettingKind, value: &Bound<'_, PyAny>) -> PyResult<SettingValue> {
    let wrong = || {
        let got = match kind {
            SettingKind::Int { .. } | SettingKind::Bool => type_name(value),
            _ => value
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| type_name(value)),
        };
        bad(name, format!("must be {}, got {got}", kind.expected()))
    };
    Ok(match kind {
        SettingKind::Int { min, max } => {
            if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
                return Err(wrong());
            }
            SettingValue::Int(value.extract::<i64>().map_err(|_| {
                bad(
                    name,
                    format!("must be between {min} and {max}, got {value}"),
                )
            })?)
        }
        SettingKind::Bool => {
            if !value.is_instance_of::<PyBool>() {
                return Err(wrong());
            }
            SettingValue::Bool(value.extract()?)
        }
        SettingKind::Choice(_)
        | SettingKind::Host
        | SettingKind::DelayLevels
        | SettingKind::Hours => {
            if !value.is_instance_of::<PyString>() {
                return Err(wrong());
            }
            SettingValue::Str(value.extract()?)
        }
        SettingKind::OptionalPath => {
            if value.is_none() {
                SettingValue::Path(None)
            } else {
                SettingValue::Path(Some(value.extract().map_err(|_| wrong())?))
            }
        }
    })
}

/// The core `StoreConfig` of a dict of settings (what the Python `StoreConfig.to_dict` gives):
/// defaults for the settings it leaves out, each value checked against the settings table. An
/// unknown name raises `UnknownSettingError` naming the nearest known one.
pub fn config_from_dict(cfg: &Bound<'_, PyDict>) -> PyResult<StoreConfig> {
    let mut c = StoreConfig::default();
    for (key, value) in cfg.iter() {
        let name: String = key.extract().map_err(|_| {
            error_of_class(
                cfg.py(),
                "UnknownSettingError",
                format!("setting names are str, got {}", type_name(&key)),
            )
        })?;
        let Some(setting) = config::setting(&name) else {
            let msg = format!("unknown setting '{name}'{}", config::did_you_mean(&name));
            let err = error_of_class(cfg.py(), "UnknownSettingError", msg);
            err.value(cfg.py()).setattr("setting", &name)?;
            return Err(err);
        };
        c.set(&name, to_value(&name, setting.kind, &value)?)
            .into_py_result()?;
    }
    Ok(c)
}

/// The Python form of a setting's value.
fn value_to_py(py: Python<'_>, value: SettingValue) -> PyResult<Bound<'_, PyAny>> {
    Ok(match value {
        SettingValue::Int(v) => v.into_pyobject(py)?.into_any(),
        SettingValue::Bool(v) => PyBool::new(py, v).to_owned().into_any(),
        SettingValue::Str(s) => PyString::new(py, &s).into_any(),
        SettingValue::Path(None) => py.None().into_bound(py),
        SettingValue::Path(Some(p)) => PyString::new(py, &p.to_string_lossy()).into_any(),
    })
}

/// The settings table: for every store setting, in field order, a dict of `name`,
/// `rocketmq_name` (None for rmqstore's own settings), `type` ("int", "bool", "choice", "host",
/// "path", "delay_levels" or "hours"), `default`, `min` and `max` (ints only), `choices` (choices only) and `doc`.
#[pyfunction]
pub fn settings(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let defaults = StoreConfig::default();
    let out = PyList::empty(py);
    for s in SETTINGS {
        let d = PyDict::new(py);
        d.set_item("name", s.name)?;
        d.set_item("rocketmq_name", s.rocketmq_name)?;
        let (kind, min, max, choices) = match s.kind {
            SettingKind::Int { min, max } => ("int", Some(min), Some(max), None),
            SettingKind::Bool => ("bool", None, None, None),
            SettingKind::Choice(names) => ("choice", None, None, Some(names.to_vec())),
            SettingKind::Host => ("host", None, None, None),
            SettingKind::OptionalPath => ("path", None, None, None),
            SettingKind::DelayLevels => ("delay_levels", None, None, None),
            SettingKind::Hours => ("hours", None, None, None),
        };
        d.set_item("type", kind)?;
        let default = defaults
            .get(s.name)
            .expect("every setting of the table is a field");
        d.set_item("default", value_to_py(py, default)?)?;
        d.set_item("min", min)?;
        d.set_item("max", max)?;
        d.set_item("choices", choices)?;
        d.set_item("doc", s.doc)?;
        out.append(d)?;
    }
    Ok(out)
}

/// The setting RocketMQ calls `name`, else the one spelled most like it, if any is close: the
/// core's suggestion for an unknown setting, so that Python's errors suggest the same one.
#[pyfunction]
pub fn closest_setting(name: &str) -> Option<&'static str> {
    config::closest_setting(name)
}

/// Builds the core `StoreConfig` of a dict of settings and validates it, as opening a store
/// does: raises what opening would raise for these settings, and nothing else.
#[pyfunction]
pub fn check_settings(settings: &Bound<'_, PyDict>) -> PyResult<()> {
    config_from_dict(settings)?.validate().into_py_result()
}
