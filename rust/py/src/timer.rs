//! The timer engine's results as Python dicts (the `Store` methods in `store.rs` run the rounds
//! with the GIL released and hand their results here).

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rmqstore_core::{TimerDequeueStep, TimerEnqueueStep, TimerStats};

/// `Store.timer_enqueue`'s result.
pub(crate) fn enqueue_step<'py>(
    py: Python<'py>,
    s: &TimerEnqueueStep,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("messages", s.messages)?;
    d.set_item("logged", s.logged)?;
    d.set_item("delivered", s.delivered)?;
    d.set_item("behind", s.behind)?;
    d.set_item("stalled", s.stalled)?;
    Ok(d)
}

/// `Store.timer_dequeue`'s result.
pub(crate) fn dequeue_step<'py>(
    py: Python<'py>,
    s: &TimerDequeueStep,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("slots", s.slots)?;
    d.set_item("delivered", s.delivered)?;
    d.set_item("rolled", s.rolled)?;
    d.set_item("deleted", s.deleted)?;
    d.set_item("recovered", s.recovered)?;
    d.set_item("read_time_ms", s.read_time_ms)?;
    d.set_item("partial", s.partial)?;
    Ok(d)
}

/// `Store.timer_stats`'s result.
pub(crate) fn stats<'py>(py: Python<'py>, s: &TimerStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("enqueue_offset", s.enqueue_offset)?;
    d.set_item("queue_max_offset", s.queue_max_offset)?;
    d.set_item("read_time_ms", s.read_time_ms)?;
    d.set_item("write_time_ms", s.write_time_ms)?;
    d.set_item("pending", s.pending)?;
    d.set_item("timer_log_end", s.timer_log_end)?;
    d.set_item("enqueued", s.enqueued)?;
    d.set_item("delivered", s.delivered)?;
    d.set_item("rolled", s.rolled)?;
    d.set_item("deleted", s.deleted)?;
    d.set_item("dropped", s.dropped)?;
    d.set_item("recovered", s.recovered)?;
    Ok(d)
}
