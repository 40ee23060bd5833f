//! `rmqstore._rmqstore`: the PyO3 binding of `rmqstore-core`. Thin by design: argument
//! extraction, GIL release around every file operation, result conversion and error mapping.

mod args;
mod buffer;
mod clean;
mod config;
mod errors;
mod message;
mod running_flags;
mod schedule;
mod steps;
mod store;
mod timer;
mod topics_clean;
mod transaction;
mod transaction_check;

#[pyo3::pymodule]
mod _rmqstore {
    #[pymodule_export]
    use crate::buffer::{ColumnBuffer, SegmentBuffer};
    #[pymodule_export]
    use crate::config::{check_settings, closest_setting, settings};
    #[pymodule_export]
    use crate::message::{GetMessageResult, Message, MessageExt, PutMessageResult};
    #[pymodule_export]
    use crate::schedule::ScheduleStep;
    #[pymodule_export]
    use crate::steps::{
        AllocationStep, CommitStep, DispatchStep, GroupCommitStep, PoolBuffers, PrefaultStep,
        ReadBatchBuffers,
    };
    #[pymodule_export]
    use crate::store::Store;

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        // Rust `log` records go to Python's `logging` (loggers named "rmqstore.*").
        let _ = pyo3_log::try_init();
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("BLANK_MAGIC_CODE", rmqstore_core::format::BLANK_MAGIC_CODE)?;
        m.add(
            "MESSAGE_MAGIC_CODE",
            rmqstore_core::format::MESSAGE_MAGIC_CODE_V1,
        )?;
        m.add(
            "MESSAGE_MAGIC_CODE_V2",
            rmqstore_core::format::MESSAGE_MAGIC_CODE_V2,
        )?;
        m.add("SYSTEM_TOPICS", rmqstore_core::SYSTEM_TOPICS.to_vec())?;
        m.add("SYSTEM_TOPIC_PREFIX", rmqstore_core::SYSTEM_TOPIC_PREFIX)?;
        Ok(())
    }
}
