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
