//! `Message`, `MessageExt` and `PutMessageResult` as Python classes over the core types.

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyInt, PyList, PyString};
use rmqstore_core::format::{self as codec, property, HostAddr, PutMessageStatus};
use rmqstore_core::now_millis;
use rmqstore_core::read::{GetMessageResult as CoreGetMessageResult, GetMessageStatus};
use rmqstore_core::{AppendResult, MessageExt as CoreMessageExt};

use crate::args;

/// Copies a bytes-like object (bytes, bytearray, memoryview, any buffer) into a vector.
pub fn extract_bytes(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(b.to_vec());
    }
    if obj.is_instance_of::<PyString>() {
        return Err(crate::args::type_error(
            what,
            "bytes (encode the str first, e.g. text.encode())",
            obj,
        ));
    }
    match pyo3::buffer::PyBuffer::<u8>::get(obj) {
        Ok(buf) => buf.to_vec(obj.py()),
        Err(_) => Err(crate::args::type_error(what, "bytes-like", obj)),
    }
}

/// `keys` as a list of strings or one space-separated string; returns the KEYS value.
pub fn keys_value(keys: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    let Some(keys) = keys else { return Ok(None) };
    if keys.is_none() {
        return Ok(None);
    }
    let py = keys.py();
    if keys.is_instance_of::<PyString>() {
        let s = crate::args::text(keys, "keys")?;
        let joined = s
            .split(' ')
            .filter(|k| !k.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        return Ok((!joined.is_empty()).then_some(joined));
    }
    let mut parts: Vec<String> = Vec::new();
    let items = keys
        .try_iter()
        .map_err(|_| crate::args::type_error("keys", "a str or an iterable of str", keys))?;
    for item in items {
        let item = item?;
        let k = crate::args::text(&item, "every key")?;
        if k.is_empty() || k.contains(char::is_whitespace) {
            return Err(crate::args::invalid(
                py,
                "keys",
                format!(
                    "key {:?} is empty or contains white space (keys are stored space-separated)",
                    &*k
                ),
            ));
        }
        parts.push(k.to_string());
    }
    Ok((!parts.is_empty()).then(|| parts.join(" ")))
}

/// Builds the ordered property list: user properties, then TAGS and KEYS.
pub fn build_properties(
    tags: Option<&str>,
    keys: Option<String>,
    properties: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    if let Some(p) = properties.filter(|p| !p.is_none()) {
        let py = p.py();
        let dict = p
            .cast::<PyDict>()
            .map_err(|_| crate::args::type_error("properties", "a dict of str to str", p))?;
        for (k, v) in dict.iter() {
            let name = format!("properties[{}]", k.repr()?);
            let k = crate::args::text(&k, "properties (a name)")?;
            let v = crate::args::text(&v, &name)?;
            if (&*k == property::TAGS && tags.is_some())
                || (&*k == property::KEYS && keys.is_some())
            {
                return Err(crate::args::invalid(
                    py,
                    "properties",
                    format!("{} is given both as an argument and in properties", &*k),
                ));
            }
            out.push((k.to_string(), v.to_string()));
        }
    }
    if let Some(t) = tags.filter(|t| !t.is_empty()) {
        out.push((property::TAGS.to_owned(), t.to_owned()));
    }
    if let Some(k) = keys {
        out.push((property::KEYS.to_owned(), k));
    }
    Ok(out)
}

pub fn parse_host(s: &str, what: &str) -> PyResult<HostAddr> {
    HostAddr::parse(s).ok_or_else(|| {
        crate::errors::invalid_argument(format!(
            "{what} {s:?} is not an address like \"10.0.0.1:10911\" or \"[::1]:10911\""
        ))
    })
}

fn props_dict<'py>(py: Python<'py>, props: &[(String, String)]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in props {
        d.set_item(k, v)?;
    }
    Ok(d)
}

fn py_repr_opt(v: Option<&str>) -> String {
    v.map_or_else(|| "None".to_owned(), |s| format!("{s:?}"))
}

fn split_keys(v: Option<&str>) -> Vec<&str> {
    v.map(|s| {
        s.split(property::KEY_SEPARATOR)
            .filter(|k| !k.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";

/// The scheduling keyword arguments of `Message`, the property each one sets (as RocketMQ's
/// client `Message.setDelayTimeLevel`, `setDeliverTimeMs`, `setDelayTimeMs` and
/// `setDelayTimeSec` do: the value in decimal) and the largest value each takes. `DELAY` is
/// read by the broker with `Integer.parseInt`, the timer properties with `Long.parseLong`; a
/// delay in seconds is multiplied by 1000, so it stays below `Long.MAX_VALUE / 1000`.
const SCHEDULE_ARGS: [(&str, &str, i64); 4] = [
    ("delay_level", property::DELAY, i32::MAX as i64),
    ("deliver_time_ms", TIMER_DELIVER_MS, i64::MAX),
    ("delay_ms", TIMER_DELAY_MS, i64::MAX),
    ("delay_sec", TIMER_DELAY_SEC, i64::MAX / 1000),
];

/// One scheduling argument: an int (not a bool; any object with `__index__`) in `0..=max`.
fn schedule_int(obj: &Bound<'_, PyAny>, name: &str, max: i64) -> PyResult<i64> {
    let py = obj.py();
    if obj.is_instance_of::<PyBool>() {
        return Err(args::type_error(name, "an int", obj));
    }
    let value = if obj.is_instance_of::<PyInt>() {
        obj.clone()
    } else {
        obj.call_method0("__index__")
            .map_err(|_| args::type_error(name, "an int", obj))?
    };
    let negative = value.lt(0)?;
    if negative || value.gt(max)? {
        // str() of an int of more than 4300 digits raises: name its size instead.
        let bits: u64 = value.call_method0("bit_length")?.extract()?;
        let got = if bits <= 128 {
            value.str()?.to_string()
        } else {
            let sign = if negative { "-" } else { "" };
            format!(
                "{sign}an integer of about {} digits",
                bits * 30103 / 100_000 + 1
            )
        };
        let message = format!("{name} must be between 0 and {max}, got {got}");
        return Err(if negative {
            crate::errors::error_of_class(py, "InvalidArgumentError", message)
        } else {
            crate::errors::error_of_class(py, "ArgumentOverflowError", message)
        });
    }
    value.extract::<i64>()
}

/// The property of the one scheduling argument given (delay level or timer), checked; None
/// when none is. Two of them, or one beside any scheduling property in `properties`, are an
/// `InvalidArgumentError`: RocketMQ would silently let one win (`DELAY` over the timer
/// properties, then `TIMER_DELAY_SEC` over `TIMER_DELAY_MS` over `TIMER_DELIVER_MS`).
fn schedule_property(
    given: [Option<&Bound<'_, PyAny>>; 4],
    properties: &[(String, String)],
) -> PyResult<Option<(String, String)>> {
    let mut out: Option<(&str, &str, i64)> = None;
    for (&(name, prop, max), obj) in SCHEDULE_ARGS.iter().zip(given) {
        let Some(obj) = obj.filter(|o| !o.is_none()) else {
            continue;
        };
        let value = schedule_int(obj, name, max)?;
        if let Some((first, _, _)) = out {
            return Err(args::invalid(
                obj.py(),
                name,
                format!(
                    "give one of delay_level, deliver_time_ms, delay_ms and delay_sec, not \
                     {first} and {name}"
                ),
            ));
        }
        if let Some((k, _)) = properties
            .iter()
            .find(|(k, _)| SCHEDULE_ARGS.iter().any(|&(_, p, _)| p == k))
        {
            return Err(args::invalid(
                obj.py(),
                "properties",
                format!(
                    "{k} is a scheduling property and {name} is given as an argument: set \
                     the message's schedule one way only"
                ),
            ));
        }
        out = Some((name, prop, value));
    }
    Ok(out.map(|(_, prop, value)| (prop.to_owned(), value.to_string())))
}

/// A message to put. Immutable once built.
///
/// At most one of `delay_level` (property `DELAY`: one of the store's `message_delay_level`
/// levels, 1-based; 0 means not delayed), `deliver_time_ms` (`TIMER_DELIVER_MS`, epoch ms),
/// `delay_ms` (`TIMER_DELAY_MS`) and `delay_sec` (`TIMER_DELAY_SEC`) schedules the message, as
/// RocketMQ's client setters do; a value that is not an int, is negative or too large raises.
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct Message {
    pub inner: codec::Message,
}

#[pymethods]
impl Message {
    #[new]
    #[pyo3(signature = (topic, body, *, tags=None, keys=None, properties=None, flag=0, queue_id=0, born_timestamp=None, born_host=None, delay_level=None, deliver_time_ms=None, delay_ms=None, delay_sec=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        #[pyo3(from_py_with = args::topic)] topic: PyBackedStr,
        body: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::tags)] tags: Option<PyBackedStr>,
        keys: Option<&Bound<'_, PyAny>>,
        properties: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = args::flag)] flag: i32,
        #[pyo3(from_py_with = args::queue_id)] queue_id: i32,
        #[pyo3(from_py_with = args::born_timestamp)] born_timestamp: Option<i64>,
        #[pyo3(from_py_with = args::born_host)] born_host: Option<PyBackedStr>,
        delay_level: Option<&Bound<'_, PyAny>>,
        deliver_time_ms: Option<&Bound<'_, PyAny>>,
        delay_ms: Option<&Bound<'_, PyAny>>,
        delay_sec: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let body = extract_bytes(body, "body")?;
        let keys = keys_value(keys)?;
        let mut properties = build_properties(tags.as_deref(), keys, properties)?;
        let schedule = schedule_property(
            [delay_level, deliver_time_ms, delay_ms, delay_sec],
            &properties,
        )?;
        properties.extend(schedule);
        let born_host = born_host
            .as_deref()
            .map(|h| parse_host(h, "born_host"))
            .transpose()?;
        Ok(Message {
            inner: codec::Message {
                topic: topic.to_string(),
                body,
                queue_id,
                flag,
                sys_flag: 0,
                born_timestamp: born_timestamp.unwrap_or_else(now_millis),
                born_host,
                properties,
                reconsume_times: 0,
                prepared_transaction_offset: 0,
            },
        })
    }

    #[getter]
    fn topic(&self) -> &str {
        &self.inner.topic
    }
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.body)
    }
    #[getter]
    fn tags(&self) -> Option<&str> {
        self.inner.property(property::TAGS)
    }
    #[getter]
    fn keys(&self) -> Vec<&str> {
        split_keys(self.inner.property(property::KEYS))
    }
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        props_dict(py, &self.inner.properties)
    }
    #[getter]
    fn flag(&self) -> i32 {
        self.inner.flag
    }
    #[getter]
    fn queue_id(&self) -> i32 {
        self.inner.queue_id
    }
    #[getter]
    fn born_timestamp(&self) -> i64 {
        self.inner.born_timestamp
    }
    #[getter]
    fn born_host(&self) -> Option<String> {
        self.inner.born_host.map(|h| h.to_string())
    }
    /// The delay level the `DELAY` property holds (None when absent or not a decimal int).
    #[getter]
    fn delay_level(&self) -> Option<i32> {
        self.inner.property(property::DELAY)?.parse().ok()
    }
    /// `TIMER_DELIVER_MS`: the epoch millisecond to deliver at (None when absent or not a
    /// decimal long).
    #[getter]
    fn deliver_time_ms(&self) -> Option<i64> {
        self.inner.property(TIMER_DELIVER_MS)?.parse().ok()
    }
    /// `TIMER_DELAY_MS`: the delay in milliseconds after the store time.
    #[getter]
    fn delay_ms(&self) -> Option<i64> {
        self.inner.property(TIMER_DELAY_MS)?.parse().ok()
    }
    /// `TIMER_DELAY_SEC`: the delay in seconds after the store time.
    #[getter]
    fn delay_sec(&self) -> Option<i64> {
        self.inner.property(TIMER_DELAY_SEC)?.parse().ok()
    }

    fn __repr__(&self) -> String {
        format!(
            "Message(topic={:?}, body=<{} bytes>, tags={}, keys={:?}, queue_id={})",
            self.inner.topic,
            self.inner.body.len(),
            py_repr_opt(self.inner.property(property::TAGS)),
            split_keys(self.inner.property(property::KEYS)),
            self.inner.queue_id
        )
    }
}

/// A stored message read back from the commitlog (fields decoded on access).
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct MessageExt {
    pub inner: CoreMessageExt,
    /// `body`, made at its first access: the one copy of the body (the core's message leaves
    /// an uncompressed body in the segment's mapping).
    body: PyOnceLock<Py<PyBytes>>,
}

impl MessageExt {
    pub fn new(inner: CoreMessageExt) -> MessageExt {
        MessageExt {
            inner,
            body: PyOnceLock::new(),
        }
    }
}

#[pymethods]
impl MessageExt {
    #[getter]
    fn topic(&self) -> String {
        self.inner.topic().into_owned()
    }
    /// The body the producer sent: decompressed when the record is compressed (and the store
    /// reads with `decompress_body_on_read`).
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        self.body
            .get_or_init(py, || PyBytes::new(py, self.inner.body()).unbind())
            .bind(py)
            .clone()
    }
    /// The body bytes as stored in the record (compressed for a compressed record).
    #[getter]
    fn stored_body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.stored_body())
    }
    /// RocketMQ's name of the body's compression ("ZLIB", "LZ4", "ZSTD"), None when the body
    /// is stored uncompressed.
    #[getter]
    fn compression(&self) -> Option<String> {
        match rmqstore_core::format::compression::Compression::of_sys_flag(
            self.inner.stored_sys_flag(),
        )? {
            Ok(c) => Some(c.name().to_owned()),
            Err(value) => Some(format!("UNKNOWN({value})")),
        }
    }
    #[getter]
    fn queue_id(&self) -> i32 {
        self.inner.queue_id
    }
    #[getter]
    fn queue_offset(&self) -> i64 {
        self.inner.queue_offset
    }
    #[getter]
    fn commit_log_offset(&self) -> i64 {
        self.inner.commit_log_offset
    }
    #[getter]
    fn store_size(&self) -> i32 {
        self.inner.store_size
    }
    #[getter]
    fn body_crc(&self) -> i32 {
        self.inner.body_crc
    }
    #[getter]
    fn flag(&self) -> i32 {
        self.inner.flag
    }
    #[getter]
    fn sys_flag(&self) -> i32 {
        self.inner.sys_flag
    }
    #[getter]
    fn born_timestamp(&self) -> i64 {
        self.inner.born_timestamp
    }
    #[getter]
    fn born_host(&self) -> String {
        self.inner.born_host.to_string()
    }
    #[getter]
    fn store_timestamp(&self) -> i64 {
        self.inner.store_timestamp
    }
    #[getter]
    fn store_host(&self) -> String {
        self.inner.store_host.to_string()
    }
    #[getter]
    fn reconsume_times(&self) -> i32 {
        self.inner.reconsume_times
    }
    #[getter]
    fn prepared_transaction_offset(&self) -> i64 {
        self.inner.prepared_transaction_offset
    }
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        props_dict(py, &self.inner.properties())
    }
    #[getter]
    fn tags(&self) -> Option<&str> {
        self.inner.tags()
    }
    #[getter]
    fn keys(&self) -> Vec<&str> {
        self.inner.keys()
    }
    #[getter]
    fn msg_id(&self) -> String {
        self.inner.msg_id()
    }

    fn __repr__(&self) -> String {
        format!(
            "MessageExt(topic={:?}, queue_id={}, queue_offset={}, commit_log_offset={}, body=<{} bytes>, tags={})",
            self.inner.topic(),
            self.inner.queue_id,
            self.inner.queue_offset,
            self.inner.commit_log_offset,
            self.inner.body().len(),
            py_repr_opt(self.inner.tags()),
        )
    }
}

static GET_STATUS_MEMBERS: PyOnceLock<Vec<Py<PyAny>>> = PyOnceLock::new();
static PUT_STATUS_MEMBERS: PyOnceLock<Vec<Py<PyAny>>> = PyOnceLock::new();

/// Member `index` of the Python enum `rmqstore.enums.<class>`, whose members are looked up once
/// by RocketMQ's constant names (in the core enum's order) and cached in `cell`.
fn enum_member<'py>(
    py: Python<'py>,
    cell: &PyOnceLock<Vec<Py<PyAny>>>,
    class: &str,
    names: impl Iterator<Item = &'static str>,
    index: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let members = cell.get_or_try_init(py, || -> PyResult<Vec<Py<PyAny>>> {
        let cls = py.import("rmqstore.enums")?.getattr(class)?;
        names.map(|n| cls.getattr(n).map(Bound::unbind)).collect()
    })?;
    Ok(members[index].bind(py).clone())
}

/// The `rmqstore.GetMessageStatus` member for a core status.
pub fn get_status_member(py: Python<'_>, status: GetMessageStatus) -> PyResult<Bound<'_, PyAny>> {
    let names = GetMessageStatus::ALL.iter().map(|s| s.name());
    enum_member(
        py,
        &GET_STATUS_MEMBERS,
        "GetMessageStatus",
        names,
        status as usize,
    )
}

/// The `rmqstore.PutMessageStatus` member for a core status.
pub fn put_status_member(py: Python<'_>, status: PutMessageStatus) -> PyResult<Bound<'_, PyAny>> {
    let names = PutMessageStatus::ALL.iter().map(|s| s.name());
    enum_member(
        py,
        &PUT_STATUS_MEMBERS,
        "PutMessageStatus",
        names,
        status as usize,
    )
}

/// What `get_message` answered.
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct GetMessageResult {
    pub status: GetMessageStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub buffer_total_size: i64,
    pub messages: Py<PyList>,
}

impl GetMessageResult {
    pub fn new(py: Python<'_>, r: CoreGetMessageResult) -> PyResult<Self> {
        let list = PyList::empty(py);
        for m in r.messages {
            list.append(Py::new(py, MessageExt::new(m))?)?;
        }
        Ok(GetMessageResult {
            status: r.status,
            next_begin_offset: r.next_begin_offset,
            min_offset: r.min_offset,
            max_offset: r.max_offset,
            buffer_total_size: r.buffer_total_size,
            messages: list.unbind(),
        })
    }
}

#[pymethods]
impl GetMessageResult {
    #[getter]
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        get_status_member(py, self.status)
    }
    #[getter]
    fn next_begin_offset(&self) -> i64 {
        self.next_begin_offset
    }
    #[getter]
    fn min_offset(&self) -> i64 {
        self.min_offset
    }
    #[getter]
    fn max_offset(&self) -> i64 {
        self.max_offset
    }
    #[getter]
    fn buffer_total_size(&self) -> i64 {
        self.buffer_total_size
    }
    #[getter]
    fn messages<'py>(&self, py: Python<'py>) -> Bound<'py, PyList> {
        self.messages.bind(py).clone()
    }
    #[getter]
    fn message_count(&self, py: Python<'_>) -> usize {
        self.messages.bind(py).len()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "GetMessageResult(status={}, next_begin_offset={}, min_offset={}, max_offset={}, messages=<{}>)",
            self.status.name(),
            self.next_begin_offset,
            self.min_offset,
            self.max_offset,
            self.messages.bind(py).len()
        )
    }
}

/// What a put answered. Freed results are kept for reuse (a free list), so a put from one
/// thread reuses the object its previous result left instead of allocating one.
#[pyclass(frozen, freelist = 16, module = "rmqstore._rmqstore")]
pub struct PutMessageResult {
    pub inner: AppendResult,
    pub store_host: HostAddr,
    /// The transaction id of a `prepare_message` (None for ordinary puts).
    pub transaction_id: Option<String>,
}

#[pymethods]
impl PutMessageResult {
    #[getter]
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        put_status_member(py, self.inner.status)
    }
    #[getter]
    fn ok(&self) -> bool {
        self.inner.is_ok()
    }
    #[getter]
    fn wrote_offset(&self) -> i64 {
        self.inner.wrote_offset
    }
    /// The transaction id of a half message (`prepare_message`), None for ordinary puts.
    #[getter]
    fn transaction_id(&self) -> Option<&str> {
        self.transaction_id.as_deref()
    }
    #[getter]
    fn wrote_bytes(&self) -> i64 {
        self.inner.wrote_bytes
    }
    #[getter]
    fn queue_offset(&self) -> i64 {
        self.inner.queue_offset
    }
    #[getter]
    fn store_timestamp(&self) -> i64 {
        self.inner.store_timestamp
    }
    #[getter]
    fn msg_num(&self) -> usize {
        self.inner.msg_num()
    }
    /// Offset message ids, comma-joined for a batch (None when nothing was written).
    #[getter]
    fn msg_id(&self) -> Option<String> {
        if !self.inner.is_ok() {
            return None;
        }
        let ids: Vec<String> = self
            .inner
            .record_offsets()
            .map(|o| codec::message_id(&self.store_host, o))
            .collect();
        Some(ids.join(","))
    }
    /// Commitlog offset of every record written, in order.
    #[getter]
    fn record_offsets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.inner.record_offsets())
    }

    fn __repr__(&self) -> String {
        format!(
            "PutMessageResult(status={}, wrote_offset={}, wrote_bytes={}, queue_offset={}, msg_num={})",
            self.inner.status.name(),
            self.inner.wrote_offset,
            self.inner.wrote_bytes,
            self.inner.queue_offset,
            self.inner.msg_num()
        )
    }
}
