//! The JNI binding of rmqstore-core: the native methods of the Java class
//! `rmqstore.jni.NativeStore` (rust/jni/java), which the JVM Spark connector calls.
//!
//! - `registry.rs`: stores opened read-only, one per folder and settings, shared by handles.
//! - `export.rs`: a bulk read's columns exported through the Arrow C Data Interface.
//! - `fault.rs`: reads that touch a page of a file truncated under them fail with an error
//!   instead of a SIGBUS that would end the JVM.
//! - `write.rs` and `staged.rs`: appends (`rmqstore.jni.NativeWriter`), the staged rows
//!   received through the Arrow C Data Interface.
//!
//! Every entry point runs its work under `catch_unwind`: a store error becomes a Java exception
//! of the `rmqstore.jni` package carrying the store's message (see [`throw`]), a panic an
//! `rmqstore.jni.RmqStoreException` naming it; nothing unwinds into the JVM.

mod export;
mod fault;
mod registry;
mod staged;
mod write;

use std::panic::{catch_unwind, AssertUnwindSafe};

use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use jni::objects::{JClass, JLongArray, JObject, JObjectArray, JString};
use jni::sys::{jboolean, jint, jintArray, jlong, jlongArray, jobject, jobjectArray, JNI_TRUE};
use jni::JNIEnv;
use rmqstore_core::read::{BodyLayout, ReadRequest, RowFilter, TimeBoundary};
use rmqstore_core::StoreError;

/// Why an entry point failed.
enum Failure {
    Store(StoreError),
    /// A bad argument from the Java side.
    Argument(String),
    /// A JNI call failed; its Java exception, if any, is already pending.
    Jni(jni::errors::Error),
    /// Any other failure (`RmqStoreException` with this message).
    Other(String),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        Failure::Store(e)
    }
}

impl From<jni::errors::Error> for Failure {
    fn from(e: jni::errors::Error) -> Failure {
        Failure::Jni(e)
    }
}

type Outcome<T> = Result<T, Failure>;

/// The `rmqstore.jni` exception class of a store error.
fn exception_class(e: &StoreError) -> &'static str {
    match e {
        StoreError::Io { .. } => "rmqstore/jni/StoreIOException",
        StoreError::Locked { .. } => "rmqstore/jni/StoreLockedException",
        StoreError::Corrupted { .. } | StoreError::CorruptRecord { .. } => {
            "rmqstore/jni/StoreCorruptedException"
        }
        StoreError::Config { .. } | StoreError::InvalidArgument(_) => {
            "rmqstore/jni/InvalidArgumentException"
        }
        _ => "rmqstore/jni/RmqStoreException",
    }
}

/// Throws the Java exception of `failure` (unless one is pending already).
fn throw(env: &mut JNIEnv<'_>, failure: Failure) {
    if env.exception_check().unwrap_or(true) {
        return;
    }
    let (class, message) = match failure {
        Failure::Store(e) => (exception_class(&e), e.to_string()),
        Failure::Argument(m) => ("rmqstore/jni/InvalidArgumentException", m),
        Failure::Jni(e) => (
            "rmqstore/jni/RmqStoreException",
            format!("JNI call failed: {e}"),
        ),
        Failure::Other(m) => ("rmqstore/jni/RmqStoreException", m),
    };
    if env.throw_new(class, &message).is_err() && !env.exception_check().unwrap_or(true) {
        let _ = env.throw_new("java/lang/RuntimeException", &message);
    }
}

/// What an entry point returns when it throws (the JVM ignores it).
trait Fallback {
    fn fallback() -> Self;
}

impl Fallback for () {
    fn fallback() {}
}

impl Fallback for jint {
    fn fallback() -> jint {
        0
    }
}

impl Fallback for jlong {
    fn fallback() -> jlong {
        0
    }
}

impl Fallback for jobject {
    fn fallback() -> jobject {
        std::ptr::null_mut()
    }
}

/// Runs an entry point's body: its value, or the fallback value with a Java exception thrown.
fn guard<'l, T: Fallback>(
    env: &mut JNIEnv<'l>,
    body: impl FnOnce(&mut JNIEnv<'l>) -> Outcome<T>,
) -> T {
    match catch_unwind(AssertUnwindSafe(|| body(env))) {
        Ok(Ok(value)) => value,
        Ok(Err(failure)) => {
            throw(env, failure);
            T::fallback()
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown cause".to_owned());
            let _ = env.exception_clear();
            let _ = env.throw_new(
                "rmqstore/jni/RmqStoreException",
                format!("internal error in rmqstore's native library (a bug): {what}"),
            );
            T::fallback()
        }
    }
}

fn string(env: &mut JNIEnv<'_>, s: &JString<'_>, what: &str) -> Outcome<String> {
    if s.is_null() {
        return Err(Failure::Argument(format!("{what} is null")));
    }
    Ok(env.get_string(s)?.into())
}

fn strings(env: &mut JNIEnv<'_>, array: &JObjectArray<'_>, what: &str) -> Outcome<Vec<String>> {
    if array.is_null() {
        return Err(Failure::Argument(format!("{what} is null")));
    }
    let n = env.get_array_length(array)?;
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        let item = JString::from(env.get_object_array_element(array, i)?);
        out.push(string(env, &item, what)?);
        env.delete_local_ref(item)?;
    }
    Ok(out)
}

/// A Java array length for `len` items.
fn java_len(len: usize) -> Outcome<i32> {
    i32::try_from(len)
        .map_err(|_| Failure::Argument(format!("{len} items do not fit a Java array")))
}

fn queue_id(queue_id: jint) -> Outcome<i32> {
    if queue_id < 0 {
        return Err(Failure::Argument(format!(
            "queue id {queue_id} is negative"
        )));
    }
    Ok(queue_id)
}

/// The settings a Java caller passes as two arrays, paired (names and values of equal length).
pub(crate) fn settings(
    env: &mut JNIEnv<'_>,
    names: &JObjectArray<'_>,
    values: &JObjectArray<'_>,
) -> Outcome<Vec<(String, String)>> {
    let names = strings(env, names, "setting names")?;
    let values = strings(env, values, "setting values")?;
    if names.len() != values.len() {
        return Err(Failure::Argument(
            "as many setting values as names are needed".to_owned(),
        ));
    }
    Ok(names.into_iter().zip(values).collect())
}

/// `long open(String path, String[] settingNames, String[] settingValues)`: a handle on the
/// store at `path` opened read-only (shared with the process's other handles on it).
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeStore_open<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    path: JString<'l>,
    names: JObjectArray<'l>,
    values: JObjectArray<'l>,
) -> jlong {
    guard(&mut env, |env| {
        let path = string(env, &path, "path")?;
        Ok(registry::open(&path, settings(env, &names, &values)?)?)
    })
}

/// `void commitOffsets(String path, String group, String topic, int[] queueIds, long[]
/// offsets)`: records a consumer group's offsets of a topic's queues in the store's
/// `config/consumerOffset.json`, taking the store's lock for the write (a held lock throws
/// `StoreLockedException`).
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeStore_commitOffsets<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    path: JString<'l>,
    group: JString<'l>,
    topic: JString<'l>,
    queue_ids: jni::objects::JIntArray<'l>,
    offsets: JLongArray<'l>,
) {
    guard(&mut env, |env| {
        let path = string(env, &path, "path")?;
        let group = string(env, &group, "group")?;
        let topic = string(env, &topic, "topic")?;
        if queue_ids.is_null() || offsets.is_null() {
            return Err(Failure::Argument(
                "queue ids or offsets are null".to_owned(),
            ));
        }
        let n = env.get_array_length(&queue_ids)?;
        if env.get_array_length(&offsets)? != n {
            return Err(Failure::Argument(
                "as many offsets as queue ids are needed".to_owned(),
            ));
        }
        let mut ids = vec![0i32; n as usize];
        let mut values = vec![0i64; n as usize];
        env.get_int_array_region(&queue_ids, 0, &mut ids)?;
        env.get_long_array_region(&offsets, 0, &mut values)?;
        let pairs: Vec<(i32, i64)> = ids.into_iter().zip(values).collect();
        Ok(rmqstore_core::consumer_offsets::commit_offsets(
            std::path::Path::new(&path),
            &group,
            &topic,
            &pairs,
        )?)
    })
}

/// `void close(long handle)`.
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeStore_close<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
) {
    guard(&mut env, |_| Ok(registry::close(handle)?))
}

/// `String[] topics(long handle)`: topics that have a consume queue.
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeStore_topics<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
) -> jobjectArray {
    guard(&mut env, |env| {
        let store = registry::store(handle)?;
        let topics = fault::guarded(store.root(), || store.topics())?;
        let array =
            env.new_object_array(java_len(topics.len())?, "java/lang/String", JObject::null())?;
        for (i, t) in topics.iter().enumerate() {
            let s = env.new_string(t)?;
            env.set_object_array_element(&array, java_len(i)?, &s)?;
            env.delete_local_ref(s)?;
        }
        Ok(array.into_raw())
    })
}

/// `int[] queueIds(long handle, String topic)`, ascending.
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeStore_queueIds<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    topic: JString<'l>,
) -> jintArray {
    guard(&mut env, |env| {
        let topic = string(env, &topic, "topic")?;
        let store = registry::store(handle)?;
        let ids = fault::guarded(store.root(), || store.queue_ids(&topic))?;
        let array = env.new_int_array(java_len(ids.len())?)?;
        env.set_int_array_region(&array, 0, &ids)?;
        Ok(array.into_raw())
    })
}

/// The offsets of a queue in one call: `long[] {min offset, max offset (the next to be
/// dispatched), commitlog minimum offset}`.
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeStore_queueOffsets<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    topic: JString<'l>,
    qid: jint,
) -> jlongArray {
    guard(&mut env, |env| {
        let topic = string(env, &topic, "topic")?;
        let qid = queue_id(qid)?;
        let store = registry::store(handle)?;
        let values = fault::guarded(store.root(), || {
            Ok([
                store.min_offset_in_queue(&topic, qid)?,
                store.max_offset_in_queue(&topic, qid)?,
                store.min_phy_offset()?,
            ])
        })?;
        let array = env.new_long_array(3)?;
        env.set_long_array_region(&array, 0, &values)?;
        Ok(array.into_raw())
    })
}

/// `long commitLogOffset(long handle, String topic, int queueId, long queueOffset)`: the
/// commitlog offset of a queue's unit, 0 when it has none there.
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeStore_commitLogOffset<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    topic: JString<'l>,
    qid: jint,
    queue_offset: jlong,
) -> jlong {
    guard(&mut env, |env| {
        let topic = string(env, &topic, "topic")?;
        let qid = queue_id(qid)?;
        let store = registry::store(handle)?;
        Ok(fault::guarded(store.root(), || {
            store.commit_log_offset_in_queue(&topic, qid, queue_offset)
        })?)
    })
}

/// `long offsetByTime(long handle, String topic, int queueId, long timestampMs, boolean
/// upper)`: `getOffsetInQueueByTime` (lower: the first offset stored at or after the time).
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeStore_offsetByTime<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    topic: JString<'l>,
    qid: jint,
    timestamp: jlong,
    upper: jboolean,
) -> jlong {
    guard(&mut env, |env| {
        let topic = string(env, &topic, "topic")?;
        let qid = queue_id(qid)?;
        let boundary = if upper == JNI_TRUE {
            TimeBoundary::Upper
        } else {
            TimeBoundary::Lower
        };
        let store = registry::store(handle)?;
        Ok(fault::guarded(store.root(), || {
            store.offset_in_queue_by_time(&topic, qid, timestamp, boundary)
        })?)
    })
}

/// `int readBatch(long handle, String topic, int queueId, long offset, int maxRows, int
/// columns, boolean bodyView, long arrowArray, long arrowSchema, long[] out)`: reads up to
/// `maxRows` messages of a queue from `offset` and, when there is at least one, exports the
/// columns the mask `columns` selects (bits of `export.rs`) as one struct array into the
/// C Data Interface structs at the two addresses. Returns the rows read; `out` receives the
/// next offset to read and the first and last queue offsets read.
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeStore_readBatch<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    topic: JString<'l>,
    qid: jint,
    offset: jlong,
    max_rows: jint,
    columns: jint,
    body_view: jboolean,
    array: jlong,
    schema: jlong,
    out: JLongArray<'l>,
) -> jint {
    guard(&mut env, |env| {
        let read = Read {
            handle,
            offset,
            max_rows,
            columns,
            body_view: body_view == JNI_TRUE,
            array,
            schema,
        };
        read_into(env, &topic, qid, read, &RowFilter::none(), &out, 3)
    })
}

/// `int readFiltered(long handle, String topic, int queueId, long offset, int maxRows, int
/// columns, boolean bodyView, boolean byTags, String[] tags, boolean untagged, long minStoreMs,
/// long maxStoreMs, long arrowArray, long arrowSchema, long[] out)`: `readBatch` of the rows
/// that meet the conditions (the core's `RowFilter`): with `byTags`, a tag among `tags` (null:
/// any tag) or, with `untagged`, no tag; a store time within `[minStoreMs, maxStoreMs]`. At most
/// `maxRows` units are gone over; the rows filtered out are never built. `out` (6 longs)
/// receives the next offset, the first and last queue offsets of the rows, and the first and
/// last queue offsets and the count of the units gone over (see `read::Scanned`).
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeStore_readFiltered<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    topic: JString<'l>,
    qid: jint,
    offset: jlong,
    max_rows: jint,
    columns: jint,
    body_view: jboolean,
    by_tags: jboolean,
    tags: JObjectArray<'l>,
    untagged: jboolean,
    min_store_ms: jlong,
    max_store_ms: jlong,
    array: jlong,
    schema: jlong,
    out: JLongArray<'l>,
) -> jint {
    guard(&mut env, |env| {
        let mut filter = RowFilter::none();
        if by_tags == JNI_TRUE {
            let values = if tags.is_null() {
                None
            } else {
                Some(strings(env, &tags, "a tag")?)
            };
            filter = filter.with_tags(values.as_deref(), untagged == JNI_TRUE);
        }
        if min_store_ms != i64::MIN || max_store_ms != i64::MAX {
            filter = filter.with_store_time(min_store_ms, max_store_ms);
        }
        let read = Read {
            handle,
            offset,
            max_rows,
            columns,
            body_view: body_view == JNI_TRUE,
            array,
            schema,
        };
        read_into(env, &topic, qid, read, &filter, &out, 6)
    })
}

/// The arguments of a read that `readBatch` and `readFiltered` share.
struct Read {
    handle: jlong,
    offset: jlong,
    max_rows: jint,
    columns: jint,
    body_view: bool,
    array: jlong,
    schema: jlong,
}

/// `readBatch` / `readFiltered`: `out_len` longs of `out` are filled (3: the next offset and
/// the rows' first and last queue offsets; 6: and the units gone over).
fn read_into(
    env: &mut JNIEnv<'_>,
    topic: &JString<'_>,
    qid: jint,
    read: Read,
    filter: &RowFilter,
    out: &JLongArray<'_>,
    out_len: i32,
) -> Outcome<jint> {
    let topic = string(env, topic, "topic")?;
    let qid = queue_id(qid)?;
    let Read {
        handle,
        offset,
        max_rows,
        columns,
        body_view,
        array,
        schema,
    } = read;
    if max_rows <= 0 {
        return Err(Failure::Argument(format!(
            "maxRows must be positive, got {max_rows}"
        )));
    }
    if columns & !export::ALL != 0 {
        return Err(Failure::Argument(format!(
            "unknown column bits in {columns:#x}"
        )));
    }
    if array == 0 || schema == 0 {
        return Err(Failure::Argument(
            "null ArrowArray or ArrowSchema address".to_owned(),
        ));
    }
    if out.is_null() || env.get_array_length(out)? < out_len {
        return Err(Failure::Argument(format!("out must hold {out_len} longs")));
    }
    let body_view = body_view && columns & export::BODY != 0;
    let layout = if body_view {
        BodyLayout::View
    } else {
        BodyLayout::Binary
    };
    let store = registry::store(handle)?;
    // Only the columns asked for are built (and the queue offsets, for the checks below).
    let request = ReadRequest {
        columns: export::core_mask(columns),
        decompress: None,
        body: layout,
    };
    // A page of a file truncated under the read fails it here, before anything is exported.
    let batch = fault::guarded(store.root(), || {
        store.read_filtered(&topic, qid, offset, max_rows as usize, &request, filter)
    })?;
    let rows = batch.rows;
    let first = batch.queue_offset.first().copied().unwrap_or(-1);
    let last = batch.queue_offset.last().copied().unwrap_or(-1);
    let next = batch.next_offset;
    let scanned = batch.scanned;
    if rows > 0 && columns != 0 {
        // SAFETY: the Java side passes the addresses of an ArrowArray and an ArrowSchema it
        // allocated and has not filled (NativeStore.readBatch's contract).
        unsafe {
            export::export(
                batch,
                columns,
                body_view,
                array as *mut FFI_ArrowArray,
                schema as *mut FFI_ArrowSchema,
            )
        }
        .map_err(Failure::Argument)?;
    }
    let units = scanned.units as i64;
    let values = [next, first, last, scanned.first, scanned.last, units];
    env.set_long_array_region(out, 0, &values[..out_len as usize])?;
    Ok(rows as jint)
}

/// `long[] allocations()`: `{exported buffers not yet released, bytes of column vectors they
/// hold, stores open, handles open}`.
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeStore_allocations<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
) -> jlongArray {
    guard(&mut env, |env| {
        let [buffers, bytes] = export::allocations();
        let [stores, handles] = registry::open_counts();
        let array = env.new_long_array(4)?;
        env.set_long_array_region(&array, 0, &[buffers, bytes, stores, handles])?;
        Ok(array.into_raw())
    })
}
