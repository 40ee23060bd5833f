//! Appends of the JVM connector's writes (the native methods of `rmqstore.jni.NativeWriter`):
//! the driver opens the store writable, with its lock, for one job's commit (`open`), hands it
//! the batches its tasks staged, in partition order (`append`: one call a batch, the rows
//! crossing through the Arrow C Data Interface, see `staged.rs`), and closes it (`close`: the
//! core's clean close forces the files, dispatches every appended message and releases the
//! lock).
//!
//! Rows are put as python/rmqstore/spark/write.py puts them: runs of consecutive rows with the
//! same topic, queue, tags, keys and properties go in one `put_messages` (at most
//! [`RUN_ROWS`] rows and an eighth of a commitlog segment of bodies), and a row without queue
//! id goes to `crc32(keys joined by NUL) % 8` when it has keys, else to `n % 8`, n its position
//! in the job.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use jni::objects::{JClass, JObjectArray, JString};
use jni::sys::{jint, jlong};
use jni::JNIEnv;
use rmqstore_core::format::property;
use rmqstore_core::{now_millis, Batch, MessageStore};

use crate::staged::{Rows, Staged};
use crate::{guard, registry, settings, string, Failure, Outcome};

/// Queues a row without queue id is spread over (write.py's `DEFAULT_QUEUES`).
pub const DEFAULT_QUEUES: u64 = 8;
/// Rows of one put at most.
pub const RUN_ROWS: usize = 1024;

/// Commitlog bytes a dispatch round takes at most.
const DISPATCH_CHUNK: i64 = 16 << 20;

struct Writer {
    store: Arc<MessageStore>,
    /// The dispatch thread (consume queues and index built while the puts go on, as the
    /// Python store's dispatch service does; the close dispatches what it left) and its stop.
    dispatcher: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    /// Rows of the job seen so far (the round robin of rows without queue id and keys).
    rows: u64,
    /// Rows appended so far.
    appended: u64,
    /// Body bytes of one put at most.
    budget: usize,
}

static WRITERS: Mutex<BTreeMap<i64, Arc<Mutex<Writer>>>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicI64 = AtomicI64::new(1);

fn writers() -> MutexGuard<'static, BTreeMap<i64, Arc<Mutex<Writer>>>> {
    WRITERS.lock().unwrap_or_else(|e| e.into_inner())
}

fn writer(handle: i64) -> Outcome<Arc<Mutex<Writer>>> {
    writers()
        .get(&handle)
        .cloned()
        .ok_or_else(|| Failure::Argument(format!("writer {handle} is closed or unknown")))
}

fn malformed(m: String) -> Failure {
    Failure::Argument(format!("rmqstore data source: bad staged batch: {m}"))
}

/// The run of rows being gathered for one put.
#[derive(Default, PartialEq)]
struct RunKey<'a> {
    topic: &'a str,
    queue_id: i32,
    tags: Option<&'a str>,
    keys: Vec<&'a str>,
    properties: Vec<(&'a str, &'a str)>,
}

impl Writer {
    fn put(&mut self, key: &RunKey<'_>, bodies: &[&[u8]]) -> Outcome<()> {
        if bodies.is_empty() {
            return Ok(());
        }
        // As the Python binding's put_messages builds them: the row's properties, then TAGS
        // and KEYS.
        let mut props: Vec<(String, String)> = key
            .properties
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if let Some(t) = key.tags.filter(|t| !t.is_empty()) {
            props.push((property::TAGS.to_owned(), t.to_owned()));
        }
        if !key.keys.is_empty() {
            let sep = property::KEY_SEPARATOR.to_string();
            props.push((property::KEYS.to_owned(), key.keys.join(&sep)));
        }
        let r = self.store.put_messages(&Batch {
            topic: key.topic,
            queue_id: key.queue_id,
            bodies,
            properties: &props,
            flag: 0,
            born_timestamp: now_millis(),
            born_host: None,
        })?;
        if !r.is_ok() {
            return Err(Failure::Other(format!(
                "rmqstore data source: put to {}/{} failed with {}; {} rows of this job were \
                 appended before it",
                key.topic,
                key.queue_id,
                r.status.name(),
                self.appended
            )));
        }
        self.appended += bodies.len() as u64;
        Ok(())
    }

    /// Puts a staged batch's rows; returns how many.
    fn append(&mut self, rows: &Rows<'_>) -> Outcome<usize> {
        let bad = |row: u64, what: &str| {
            Failure::Argument(format!(
                "rmqstore data source: row {row} of the job {what}; filter those rows out \
                 before writing"
            ))
        };
        let mut run = RunKey::default();
        let mut bodies: Vec<&[u8]> = Vec::new();
        let mut run_bytes = 0usize;
        let mut row = RunKey::default();
        for i in 0..rows.len {
            let n = self.rows;
            let (Some(topic), Some(body)) = (
                rows.topic.text(i, "topic").map_err(malformed)?,
                rows.body.get(i),
            ) else {
                return Err(bad(n, "has a null topic or body"));
            };
            rows.keys(i, &mut row.keys).map_err(malformed)?;
            rows.properties(i, &mut row.properties).map_err(malformed)?;
            row.topic = topic;
            row.tags = rows.tags.text(i, "tags").map_err(malformed)?;
            row.queue_id = match rows.queue_id(i) {
                Some(q) if q < 0 => return Err(bad(n, &format!("has the queue id {q}"))),
                Some(q) => q,
                None if !row.keys.is_empty() => {
                    let crc = crc32fast::hash(row.keys.join("\0").as_bytes());
                    (u64::from(crc) % DEFAULT_QUEUES) as i32
                }
                None => (n % DEFAULT_QUEUES) as i32,
            };
            self.rows += 1;
            let full =
                bodies.len() >= RUN_ROWS || run_bytes.saturating_add(body.len()) > self.budget;
            if row != run || full {
                self.put(&run, &bodies)?;
                bodies.clear();
                run_bytes = 0;
                std::mem::swap(&mut run, &mut row);
            }
            bodies.push(body);
            run_bytes += body.len();
        }
        self.put(&run, &bodies)?;
        Ok(rows.len)
    }
}

/// `void checkSettings(String[] names, String[] values)`: fails as opening a store with
/// these settings would (an unknown setting, a bad value), without opening one.
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeWriter_checkSettings<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    names: JObjectArray<'l>,
    values: JObjectArray<'l>,
) {
    guard(&mut env, |env| {
        registry::config_of(&settings(env, &names, &values)?)?;
        Ok(())
    })
}

/// `long open(String path, String[] settingNames, String[] settingValues)`: opens (creating
/// it if needed) the store at `path` writable, holding its lock until `close`.
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeWriter_open<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    path: JString<'l>,
    names: JObjectArray<'l>,
    values: JObjectArray<'l>,
) -> jlong {
    guard(&mut env, |env| {
        let path = string(env, &path, "path")?;
        let config = registry::config_of(&settings(env, &names, &values)?)?;
        let budget =
            usize::try_from((config.mapped_file_size_commit_log / 8).max(1)).unwrap_or(usize::MAX);
        let store = Arc::new(MessageStore::open(Path::new(&path), config)?);
        let stop = Arc::new(AtomicBool::new(false));
        let dispatcher = {
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("rmqstore-jni-dispatch".to_owned())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let step = store.dispatch_step(DISPATCH_CHUNK, Duration::from_millis(5));
                        if step.is_err() {
                            break;
                        }
                    }
                })
                // Without the thread, the close dispatches everything.
                .ok()
        };
        let handle = NEXT.fetch_add(1, Ordering::Relaxed);
        writers().insert(
            handle,
            Arc::new(Mutex::new(Writer {
                store,
                dispatcher,
                stop,
                rows: 0,
                appended: 0,
                budget,
            })),
        );
        Ok(handle)
    })
}

/// `int append(long writer, long arrowArray, long arrowSchema)`: takes the staged batch
/// exported at the two addresses (moved: the structs there are released, also when this
/// fails) and puts its rows. Returns how many.
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeWriter_append<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    array: jlong,
    schema: jlong,
) -> jint {
    guard(&mut env, |_| {
        if array == 0 || schema == 0 {
            return Err(Failure::Argument(
                "null ArrowArray or ArrowSchema address".to_owned(),
            ));
        }
        // SAFETY: the Java side passes the addresses of an ArrowArray and an ArrowSchema it
        // exported a batch into (NativeWriter.append's contract); from here they are ours,
        // released when `staged` drops.
        let staged =
            unsafe { Staged::import(array as *mut FFI_ArrowArray, schema as *mut FFI_ArrowSchema) };
        let writer = writer(handle)?;
        let rows = staged.rows().map_err(malformed)?;
        let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
        let n = w.append(&rows)?;
        i32::try_from(n).map_err(|_| Failure::Argument(format!("{n} rows in one batch")))
    })
}

/// `long close(long writer)`: closes the store (forced, dispatched, unlocked); returns the
/// rows appended. Closing a closed writer fails.
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeWriter_close<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
) -> jlong {
    guard(&mut env, |_| {
        let writer = writers()
            .remove(&handle)
            .ok_or_else(|| Failure::Argument(format!("writer {handle} is closed or unknown")))?;
        let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
        w.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = w.dispatcher.take() {
            let _ = thread.join();
        }
        w.store.close()?;
        Ok(w.appended as jlong)
    })
}

/// `int openWriters()`: writers not closed yet.
#[no_mangle]
pub extern "system" fn Java_rmqstore_jni_NativeWriter_openWriters<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
) -> jint {
    guard(&mut env, |_| Ok(writers().len() as jint))
}
