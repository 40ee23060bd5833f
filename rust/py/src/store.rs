//! The `Store` class: the Rust store handle the Python `MessageStore` drives. Every method that
//! touches files, maps or locks runs detached from the interpreter (GIL released) and holds no
//! Python object while it does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBytes, PyDict, PyList};
use rmqstore_core::format::HostAddr;
use rmqstore_core::now_millis;
use rmqstore_core::read::{BodyLayout, Column, ColumnMask, ReadRequest, TagFilter, TimeBoundary};
use rmqstore_core::Batch;
use rmqstore_core::MessageStore;

use crate::args;
use crate::buffer::{ColumnBuffer, SegmentBuffer};
use crate::errors::{invalid_argument, IntoPyResult};
use crate::message::{
    build_properties, keys_value, GetMessageResult, Message, MessageExt, PutMessageResult,
};
use crate::steps::{
    AllocationStep, CommitStep, DispatchStep, GroupCommitStep, PoolBuffers, ReadBatchBuffers,
};
use crate::timer;

/// The bodies of a batch, readable without the GIL.
///
/// `bytes` objects are immutable, so their buffers are read in place while this value keeps
/// them alive from the attached side of the call; the detached closure only ever sees plain
/// byte slices, never a Python object (the way hashlib's `update()` hashes a bytes object with
/// the GIL released). Mutable or foreign buffers (bytearray, memoryview, ...) are copied first,
/// because another thread could change them while the GIL is released.
struct Bodies<'py> {
    items: Vec<BodyRef<'py>>,
}

enum BodyRef<'py> {
    Bytes(Bound<'py, PyBytes>),
    Copied(Vec<u8>),
}

impl<'py> Bodies<'py> {
    fn gather(bodies: &Bound<'py, PyAny>) -> PyResult<Self> {
        let iter = bodies
            .try_iter()
            .map_err(|_| args::type_error("bodies", "an iterable of bytes", bodies))?;
        let mut items = Vec::with_capacity(bodies.len().unwrap_or(0));
        for item in iter {
            let item = item?;
            items.push(match item.cast_into::<PyBytes>() {
                Ok(b) => BodyRef::Bytes(b),
                Err(e) => BodyRef::Copied(crate::message::extract_bytes(
                    &e.into_inner(),
                    "every body",
                )?),
            });
        }
        Ok(Bodies { items })
    }

    fn slices(&self) -> Vec<&[u8]> {
        self.items
            .iter()
            .map(|b| match b {
                BodyRef::Bytes(b) => b.as_bytes(),
                BodyRef::Copied(v) => v.as_slice(),
            })
            .collect()
    }
}

/// The Rust store behind `rmqstore.MessageStore`.
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct Store {
    pub(crate) inner: Arc<MessageStore>,
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.inner.is_forked_copy() {
            // A forked child's copy of its parent's store: never closed, flushed or unmapped
            // here (see `rmqstore_core::fork`); its memory goes with the process.
            std::mem::forget(Arc::clone(&self.inner));
        }
    }
}

impl Store {
    /// Runs `f` on the store with the GIL released (every store call touches files or maps)
    /// and maps its error into the Python exception tree. (In a process forked from the one
    /// that opened the store, the core refuses the call: see `rmqstore_core::fork`.)
    pub(crate) fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&MessageStore) -> rmqstore_core::Result<T> + Send,
    ) -> PyResult<T> {
        let store = &self.inner;
        py.detach(|| {
            // No input should reach a panic; should one still happen (a bug), the caller gets
            // an `RmqStoreError` (an `Exception`), not PyO3's `PanicException` (which is not
            // one). The store's locks are poison-tolerant, so it stays usable.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(store))).unwrap_or_else(
                |payload| {
                    let what = payload
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic".to_owned());
                    Err(rmqstore_core::StoreError::Internal(format!(
                        "{what} (a bug in rmqstore: please report it)"
                    )))
                },
            )
        })
        .into_py_result()
    }

    /// `query_message` (by key) or `query_message_by_tag`.
    #[allow(clippy::too_many_arguments)]
    fn query_index(
        &self,
        py: Python<'_>,
        topic: &str,
        key: &str,
        by_tag: bool,
        max_num: usize,
        begin: i64,
        end: Option<i64>,
    ) -> PyResult<Vec<MessageExt>> {
        let end = end.unwrap_or(i64::MAX);
        let found = self.run(py, |s| {
            if by_tag {
                s.query_message_by_tag(topic, key, max_num, begin, end)
            } else {
                s.query_message(topic, key, max_num, begin, end)
            }
        })?;
        Ok(found.into_iter().map(MessageExt::new).collect())
    }
}

#[pymethods]
impl Store {
    /// Test hook: a call whose core side panics, to check that a panic reaches Python as an
    /// `RmqStoreError`.
    fn _panic_for_tests(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |_| -> rmqstore_core::Result<()> {
            panic!("a deliberate panic for the tests")
        })
    }

    /// Opens (creating if needed) the store folder: lock, load, recover; or, with
    /// `read_only`, an existing store without lock, changes or recovery. `before_changes` (a
    /// callable) runs once every file of the core has been found as expected and before any
    /// change: an exception from it refuses the open with the store as it was.
    #[new]
    #[pyo3(signature = (path, config, read_only=false, before_changes=None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        config: &Bound<'_, PyDict>,
        read_only: bool,
        before_changes: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let cfg = crate::config::config_from_dict(config)?;
        let mut raised: Option<PyErr> = None;
        let opened = py.detach(|| {
            if read_only {
                return MessageStore::open_read_only(&path, cfg);
            }
            MessageStore::open_checked(&path, cfg, || {
                let Some(callback) = &before_changes else {
                    return Ok(());
                };
                Python::attach(|py| callback.call0(py).map(drop)).map_err(|e| {
                    raised = Some(e);
                    rmqstore_core::StoreError::Internal("the open was refused".to_owned())
                })
            })
        });
        if let Some(e) = raised {
            return Err(e);
        }
        Ok(Store {
            inner: Arc::new(opened.into_py_result()?),
        })
    }

    /// Appends one message. Bad content is answered by ``result.status``, not raised.
    fn put_message(&self, py: Python<'_>, msg: &Bound<'_, Message>) -> PyResult<PutMessageResult> {
        let m = &msg.get().inner;
        let r = self.run(py, |s| s.put_message(m))?;
        Ok(PutMessageResult {
            inner: r,
            store_host: self.inner.config().store_host,
            transaction_id: None,
        })
    }

    #[pyo3(signature = (topic, queue_id, bodies, *, tags=None, keys=None, properties=None, flag=0, born_timestamp=None, born_host=None))]
    #[allow(clippy::too_many_arguments)]
    fn put_messages(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::queue_id)] queue_id: i32,
        bodies: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::tags)] tags: Option<PyBackedStr>,
        keys: Option<&Bound<'_, PyAny>>,
        properties: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = args::flag)] flag: i32,
        #[pyo3(from_py_with = args::born_timestamp)] born_timestamp: Option<i64>,
        #[pyo3(from_py_with = args::born_host)] born_host: Option<PyBackedStr>,
    ) -> PyResult<PutMessageResult> {
        let topic: &str = &topic;
        let tags: Option<&str> = tags.as_deref();
        let born_host: Option<&str> = born_host.as_deref();
        let keys = keys_value(keys)?;
        let props = build_properties(tags, keys, properties)?;
        let born_host = born_host
            .map(|h| crate::message::parse_host(h, "born_host"))
            .transpose()?;
        let bodies = Bodies::gather(bodies)?;
        let slices = bodies.slices();
        let store = &self.inner;
        let born_timestamp = born_timestamp.unwrap_or_else(now_millis);
        let r = py
            .detach(|| {
                store.put_messages(&Batch {
                    topic,
                    queue_id,
                    bodies: &slices,
                    properties: &props,
                    flag,
                    born_timestamp,
                    born_host,
                })
            })
            .into_py_result()?;
        Ok(PutMessageResult {
            inner: r,
            store_host: store.config().store_host,
            transaction_id: None,
        })
    }

    fn look_message_by_offset(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::offset)] offset: i64,
    ) -> PyResult<Option<MessageExt>> {
        let m = self.run(py, |s| s.look_message_by_offset(offset))?;
        Ok(m.map(MessageExt::new))
    }

    // -- dispatch ---------------------------------------------------------------------------

    /// Rounds of the dispatch service (one, or as many as find work within `budget_ms`).
    #[pyo3(signature = (max_bytes, timeout_ms, budget_ms=0))]
    fn dispatch_step(
        &self,
        py: Python<'_>,
        max_bytes: i64,
        timeout_ms: u64,
        budget_ms: u64,
    ) -> PyResult<DispatchStep> {
        let s = self.run(py, |s| {
            s.dispatch_run(
                max_bytes,
                Duration::from_millis(timeout_ms),
                Duration::from_millis(budget_ms),
            )
        })?;
        Ok(DispatchStep {
            dispatched: s.dispatched,
            bytes: s.bytes,
            reput_offset: s.reput_offset,
            behind: s.behind,
        })
    }

    // -- flush ------------------------------------------------------------------------------

    fn attach_group_commit(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |s| s.attach_group_commit())
    }

    /// Rounds of the group-commit service (one, or as many as fit in `budget_ms`).
    #[pyo3(signature = (timeout_ms, budget_ms=0))]
    fn group_commit_step(
        &self,
        py: Python<'_>,
        timeout_ms: u64,
        budget_ms: u64,
    ) -> PyResult<GroupCommitStep> {
        let s = self.run(py, |s| {
            s.group_commit_run(
                Duration::from_millis(timeout_ms),
                Duration::from_millis(budget_ms),
            )
        })?;
        Ok(GroupCommitStep {
            flushed: s.flushed,
            stopped: s.stopped,
            forces: s.forces,
        })
    }

    /// Damaged records dispatch has passed over since the store opened (their topic or queue
    /// id is not one a put accepts).
    fn skipped_records(&self, py: Python<'_>) -> PyResult<u64> {
        self.run(py, |s| s.skipped_records())
    }

    /// Forces the group-commit service has done so far.
    fn group_commit_forces(&self, py: Python<'_>) -> PyResult<u64> {
        self.run(py, |s| s.group_commit_forces())
    }

    /// One round of the commit service (transient store pool).
    fn commit_step(
        &self,
        py: Python<'_>,
        least_pages: i64,
        timeout_ms: u64,
    ) -> PyResult<CommitStep> {
        let s = self.run(py, |s| {
            s.commit_step(least_pages, Duration::from_millis(timeout_ms))
        })?;
        Ok(CommitStep {
            committed: s.committed,
            stopped: s.stopped,
        })
    }

    /// The transient store pool's buffers, `None` when the pool is disabled.
    fn transient_store_pool_buffers(&self, py: Python<'_>) -> PyResult<Option<PoolBuffers>> {
        let buffers = self.run(py, |s| s.transient_store_pool_buffers())?;
        Ok(buffers.map(|(available, total)| PoolBuffers { available, total }))
    }

    #[getter]
    fn read_only(&self) -> bool {
        self.inner.is_read_only()
    }

    fn get_committed_where(&self, py: Python<'_>) -> PyResult<i64> {
        self.run(py, |s| s.committed_where())
    }

    fn flush_commitlog(&self, py: Python<'_>, least_pages: i64) -> PyResult<i64> {
        self.run(py, |s| s.flush_commitlog(least_pages))
    }

    fn flush_consume_queues(&self, py: Python<'_>, least_pages: i64) -> PyResult<()> {
        self.run(py, |s| s.flush_consume_queues(least_pages))
    }

    fn is_offset_aligned(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::offset)] offset: i64,
    ) -> PyResult<bool> {
        self.run(py, |s| s.is_offset_aligned(offset))
    }

    fn truncate_files(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::offset)] offset: i64,
    ) -> PyResult<bool> {
        self.run(py, |s| s.truncate_files(offset))
    }

    fn check_disk_space(&self, py: Python<'_>) -> PyResult<f64> {
        self.run(py, |s| s.check_disk_space())
    }

    fn flush_checkpoint(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |s| s.flush_checkpoint())
    }

    fn get_flushed_where(&self, py: Python<'_>) -> PyResult<i64> {
        self.run(py, |s| s.flushed_where())
    }

    fn dispatch_behind_bytes(&self, py: Python<'_>) -> PyResult<i64> {
        self.run(py, |s| s.dispatch_behind_bytes())
    }

    fn get_confirm_offset(&self, py: Python<'_>) -> PyResult<i64> {
        self.run(py, |s| s.confirm_offset())
    }

    // -- reads ------------------------------------------------------------------------------

    #[pyo3(signature = (group, topic, queue_id, offset, max_msg_nums=32, subscription=None))]
    #[allow(clippy::too_many_arguments)]
    fn get_message(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::group)] group: PyBackedStr,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::queue_id)] queue_id: i32,
        #[pyo3(from_py_with = args::offset)] offset: i64,
        #[pyo3(from_py_with = args::max_msg_nums)] max_msg_nums: i32,
        #[pyo3(from_py_with = args::subscription)] subscription: Option<PyBackedStr>,
    ) -> PyResult<GetMessageResult> {
        let group: &str = &group;
        let topic: &str = &topic;
        let subscription: Option<&str> = subscription.as_deref();
        let _ = group; // RocketMQ uses the group for statistics only.
        let filter = TagFilter::parse(subscription.unwrap_or("*"));
        let r = self.run(py, |s| {
            s.get_message(topic, queue_id, offset, max_msg_nums, &filter)
        })?;
        GetMessageResult::new(py, r)
    }

    #[pyo3(signature = (topic, key, max_num=32, begin_timestamp=0, end_timestamp=None))]
    fn query_message(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::key)] key: PyBackedStr,
        #[pyo3(from_py_with = args::max_num)] max_num: usize,
        #[pyo3(from_py_with = args::begin_timestamp)] begin_timestamp: i64,
        #[pyo3(from_py_with = args::end_timestamp)] end_timestamp: Option<i64>,
    ) -> PyResult<Vec<MessageExt>> {
        let topic: &str = &topic;
        let key: &str = &key;
        self.query_index(
            py,
            topic,
            key,
            false,
            max_num,
            begin_timestamp,
            end_timestamp,
        )
    }

    #[pyo3(signature = (topic, tag, max_num=32, begin_timestamp=0, end_timestamp=None))]
    fn query_message_by_tag(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::tag)] tag: PyBackedStr,
        #[pyo3(from_py_with = args::max_num)] max_num: usize,
        #[pyo3(from_py_with = args::begin_timestamp)] begin_timestamp: i64,
        #[pyo3(from_py_with = args::end_timestamp)] end_timestamp: Option<i64>,
    ) -> PyResult<Vec<MessageExt>> {
        let topic: &str = &topic;
        let tag: &str = &tag;
        self.query_index(
            py,
            topic,
            tag,
            true,
            max_num,
            begin_timestamp,
            end_timestamp,
        )
    }

    fn get_max_offset_in_queue(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::queue_id)] queue_id: i32,
    ) -> PyResult<i64> {
        let topic: &str = &topic;
        self.run(py, |s| s.max_offset_in_queue(topic, queue_id))
    }

    fn get_min_offset_in_queue(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::queue_id)] queue_id: i32,
    ) -> PyResult<i64> {
        let topic: &str = &topic;
        self.run(py, |s| s.min_offset_in_queue(topic, queue_id))
    }

    fn get_message_total_in_queue(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::queue_id)] queue_id: i32,
    ) -> PyResult<i64> {
        let topic: &str = &topic;
        self.run(py, |s| s.message_total_in_queue(topic, queue_id))
    }

    fn get_commit_log_offset_in_queue(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::queue_id)] queue_id: i32,
        #[pyo3(from_py_with = args::consume_queue_offset)] consume_queue_offset: i64,
    ) -> PyResult<i64> {
        let topic: &str = &topic;
        self.run(py, |s| {
            s.commit_log_offset_in_queue(topic, queue_id, consume_queue_offset)
        })
    }

    fn get_message_store_timestamp(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::queue_id)] queue_id: i32,
        #[pyo3(from_py_with = args::consume_queue_offset)] consume_queue_offset: i64,
    ) -> PyResult<i64> {
        let topic: &str = &topic;
        self.run(py, |s| {
            s.message_store_timestamp(topic, queue_id, consume_queue_offset)
        })
    }

    fn get_earliest_message_time(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::queue_id)] queue_id: i32,
    ) -> PyResult<i64> {
        let topic: &str = &topic;
        self.run(py, |s| s.earliest_message_time(topic, queue_id))
    }

    #[pyo3(signature = (topic, queue_id, timestamp, boundary=None))]
    fn get_offset_in_queue_by_time(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::queue_id)] queue_id: i32,
        #[pyo3(from_py_with = args::timestamp)] timestamp: i64,
        #[pyo3(from_py_with = args::boundary)] boundary: Option<PyBackedStr>,
    ) -> PyResult<i64> {
        let topic: &str = &topic;
        let boundary: &str = boundary.as_deref().unwrap_or("lower");
        let boundary = match boundary.to_ascii_lowercase().as_str() {
            "lower" => TimeBoundary::Lower,
            "upper" => TimeBoundary::Upper,
            _ => {
                return Err(invalid_argument(format!(
                    "boundary must be \"lower\" or \"upper\", got {boundary:?}"
                )))
            }
        };
        self.run(py, |s| {
            s.offset_in_queue_by_time(topic, queue_id, timestamp, boundary)
        })
    }

    /// Bulk read of a queue as Arrow column buffers; `rmqstore._arrow` assembles the pyarrow
    /// RecordBatch.
    /// With `body_view`, the bodies are `binary_view` rows: `body_views` and `body_data`
    /// (decompressed bodies) in `columns`, and `body_buffers`, the mapped segment ranges the
    /// views point into (`SegmentBuffer`s, buffer indexes 0 to n-1; `body_data` is buffer n).
    /// With `columns` (names), only those columns are built and only their vectors given.
    #[pyo3(signature = (topic, queue_id, offset, max_msgs, include_properties=true, decompress=None, body_view=false, columns=None))]
    #[allow(clippy::too_many_arguments)]
    fn read_batch_buffers(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::queue_id)] queue_id: i32,
        #[pyo3(from_py_with = args::offset)] offset: i64,
        #[pyo3(from_py_with = args::max_msgs)] max_msgs: usize,
        #[pyo3(from_py_with = args::include_properties)] include_properties: bool,
        #[pyo3(from_py_with = args::decompress)] decompress: Option<bool>,
        #[pyo3(from_py_with = args::body_view)] body_view: bool,
        #[pyo3(from_py_with = args::columns)] columns: Option<ColumnMask>,
    ) -> PyResult<ReadBatchBuffers> {
        let topic: &str = &topic;
        let mut mask = columns.unwrap_or(ColumnMask::ALL);
        if !include_properties {
            mask = mask.without(Column::Properties);
        }
        let body = if body_view {
            BodyLayout::View
        } else {
            BodyLayout::Binary
        };
        let request = ReadRequest {
            columns: mask,
            decompress,
            body,
        };
        let mut cols = self.run(py, |s| {
            s.read_columns(topic, queue_id, offset, max_msgs, &request)
        })?;
        let (rows, next) = (cols.rows, cols.next_offset);
        let segments = std::mem::take(&mut cols.body_buffers)
            .into_iter()
            .map(|b| Py::new(py, SegmentBuffer::new(b)))
            .collect::<PyResult<Vec<_>>>()?;
        let d = PyDict::new(py);
        d.set_item("body_buffers", segments)?;
        for (name, column) in cols.into_named() {
            if Column::of_vector(name).is_some_and(|c| mask.contains(c)) {
                d.set_item(name, Py::new(py, ColumnBuffer::new(column))?)?;
            } else {
                column.recycle();
            }
        }
        Ok(ReadBatchBuffers {
            rows,
            next_offset: next,
            columns: d.unbind(),
        })
    }

    fn topics(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.run(py, |s| s.topics())
    }

    fn queue_ids(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
    ) -> PyResult<Vec<i32>> {
        let topic: &str = &topic;
        self.run(py, |s| s.queue_ids(topic))
    }

    fn get_max_phy_offset(&self, py: Python<'_>) -> PyResult<i64> {
        self.run(py, |s| s.max_phy_offset())
    }

    fn get_min_phy_offset(&self, py: Python<'_>) -> PyResult<i64> {
        self.run(py, |s| s.min_phy_offset())
    }

    fn next_queue_offset(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::queue_id)] queue_id: i32,
    ) -> PyResult<i64> {
        let topic: &str = &topic;
        self.run(py, |s| s.next_queue_offset(topic, queue_id))
    }

    fn flush(&self, py: Python<'_>) -> PyResult<i64> {
        self.run(py, |s| s.flush())
    }

    fn commitlog_segments<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let files = self.run(py, |s| s.commitlog_segments())?;
        PyList::new(py, files)
    }

    fn recovery_report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.inner.recovery_report().into_py_result()?;
        let d = PyDict::new(py);
        d.set_item("abnormal", r.abnormal)?;
        d.set_item("process_offset", r.process_offset)?;
        d.set_item("messages", r.messages)?;
        d.set_item("discarded_bytes", r.discarded_bytes)?;
        d.set_item("stop_reason", r.stop_reason.clone())?;
        d.set_item("start_offset", r.start_offset)?;
        Ok(d)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The lifecycle state's RocketMQ name (`rmqstore.StoreState`).
    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state().name()
    }

    fn attach_allocation_service(&self) {
        self.inner.attach_allocation_service();
    }

    /// One round of the allocation service.
    fn allocation_service_step(&self, py: Python<'_>, timeout_ms: u64) -> AllocationStep {
        let store = &self.inner;
        let s = py.detach(|| store.allocation_service_step(Duration::from_millis(timeout_ms)));
        AllocationStep {
            allocated: s.allocated,
            unlocked: s.unlocked,
            stopped: s.stopped,
            alloc_seconds: s.alloc_nanos as f64 / 1e9,
        }
    }

    fn preallocated_offsets(&self) -> Vec<i64> {
        self.inner.preallocated_offsets()
    }

    fn stop_services(&self, py: Python<'_>) {
        if self.inner.is_forked_copy() {
            return;
        }
        let store = &self.inner;
        py.detach(|| store.stop_services());
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |s| s.close())
    }

    // -- timer messages ---------------------------------------------------------------------

    /// Whether the timer engine runs (a writable store with `timer_wheel_enable`).
    fn timer_enabled(&self) -> bool {
        self.inner.timer_enabled()
    }

    /// One enqueue round of the timer (at most `max_msgs` timer queue messages).
    fn timer_enqueue<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: i64,
        #[pyo3(from_py_with = args::max_msgs)] max_msgs: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let s = self.run(py, |s| s.timer_enqueue(now_ms, max_msgs))?;
        timer::enqueue_step(py, &s)
    }

    /// One dequeue round of the timer: the slots due at `now_ms`, at most `max_msgs` messages.
    fn timer_dequeue<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::now_ms)] now_ms: i64,
        #[pyo3(from_py_with = args::max_msgs)] max_msgs: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let s = self.run(py, |s| s.timer_dequeue(now_ms, max_msgs))?;
        timer::dequeue_step(py, &s)
    }

    fn timer_flush(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |s| s.timer_flush())
    }

    fn timer_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.run(py, |s| s.timer_stats())?;
        timer::stats(py, &s)
    }

    /// Puts the delete marker that cancels a pending timer message (RocketMQ's recall).
    #[pyo3(signature = (topic, uniq_key, deliver_time_ms=None))]
    fn cancel_timer(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::uniq_key)] uniq_key: PyBackedStr,
        #[pyo3(from_py_with = args::deliver_time_ms)] deliver_time_ms: Option<i64>,
    ) -> PyResult<PutMessageResult> {
        let r = self.run(py, |s| s.cancel_timer(&topic, &uniq_key, deliver_time_ms))?;
        Ok(PutMessageResult {
            inner: r,
            store_host: self.inner.config().store_host,
            transaction_id: None,
        })
    }

    /// Checks an address string the way the store parses `store_host` / `born_host`.
    #[staticmethod]
    fn check_host(host: &str) -> PyResult<String> {
        HostAddr::parse(host)
            .map(|h| h.to_string())
            .ok_or_else(|| invalid_argument(format!("{host:?} is not an address")))
    }
}
