//! Helpers shared by the integration tests (each test file is its own crate and includes this
//! module; not every file uses every helper).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A fresh, empty folder under the system's temporary folder, removed when dropped. `suite`
/// and `name` make it unique to one test of one test file in this process.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(suite: &str, name: &str) -> TempDir {
        let p =
            std::env::temp_dir().join(format!("rmqstore-{suite}-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies a store's files as they are now (the lock file left out), as a process killed at this
/// moment would leave them: the page cache holds every append.
pub fn copy_store(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_store(&entry.path(), &target);
        } else if entry.file_name() != "lock" {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Puts `bodies` to queue 0 of `topic` as one batch with `properties`, born at `born`, and
/// checks it was stored.
pub fn put_batch(
    store: &rmqstore_core::MessageStore,
    topic: &str,
    bodies: &[Vec<u8>],
    properties: &[(String, String)],
    born: i64,
) {
    let bodies: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    let r = store
        .put_messages(&rmqstore_core::Batch {
            topic,
            queue_id: 0,
            bodies: &bodies,
            properties,
            flag: 0,
            born_timestamp: born,
            born_host: None,
        })
        .unwrap();
    assert!(r.is_ok());
}
