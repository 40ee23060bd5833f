//! Index files: RocketMQ's hash index from message keys (`topic#KEYS` item, `topic#UNIQ_KEY`) to
//! commitlog physical offsets (docs/format.md#index-files; `IndexFile`, `IndexService`). The byte
//! layout (header, slots, entries, key hashes, file names) is [`crate::format::index`].
//!
//! - `file`: one mapped index file, putting keys and walking bucket chains, lock-free readers.
//! - `batch`: the keys of dispatched messages, hashed in one pass before they are put.
//! - `service`: the files of a store: load, build and roll, query, flush, delete.
//! - `gaps`: stretches of the commitlog no file covers, and re-indexing them.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

mod batch;
mod file;
mod gaps;
mod service;

pub(crate) use batch::IndexBatch;
pub(crate) use file::IndexFile;
pub(crate) use service::IndexService;

const LOG_TARGET: &str = "rmqstore.index";

// Locks of the index, taken through a poisoned state: a panicking holder leaves nothing half
// written that a later holder could not cope with (entries are published by their slot).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read_lock<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write_lock<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}
