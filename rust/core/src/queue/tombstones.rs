//! Deleted topics' tombstones: `config/deletedTopics` (rmqstore's own file; RocketMQ has none).
//!
//! Deleting a topic (`DefaultMessageStore.deleteTopics`) removes its consume queues and its
//! entries of the commitlog's topic-queue table, but its records stay in the commitlog until
//! they expire. Whatever dispatches those records again would bring the topic back with its old
//! queue offsets: the next open resumes dispatch after the last record the remaining queues
//! hold (which may be before the deleted topic's last records), the recovery scan counts queue
//! offsets from records, and `truncate_files` re-dispatches from the index's progress. Once new
//! messages are put to the topic (numbered from 0 again) the two numberings would mix in one
//! queue. RocketMQ has the same exposure after a crash (its abnormal recovery dispatches the
//! scanned records again).
//!
//! A tombstone `topic -> offset` says: the topic's records below `offset` (the commitlog end
//! dispatched when it was deleted) belong to the deleted topic, and are neither dispatched nor
//! counted by recovery. Records at or after it are the new topic's. A tombstone is dropped once
//! the commitlog's minimum offset passes it (no record it covers is left).
//!
//! The file is text, one tombstone a line: the topic, a space, the offset in decimal. It is
//! replaced whole (temporary file forced, renamed, folder forced).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use crate::error::{Result, StoreError};
use crate::format::topic_is_legal;

/// File name under the store's `config/` folder.
pub const FILE_NAME: &str = "deletedTopics";

/// The tombstones of a store (see the module documentation).
#[derive(Debug)]
pub(crate) struct Tombstones {
    path: Option<PathBuf>,
    table: RwLock<BTreeMap<String, i64>>,
    /// Fast path of dispatch: a bit per [`bit`] of the topics with a tombstone (none set: no
    /// tombstone at all), so that topics without one rarely take the lock.
    mask: AtomicU64,
}

/// A topic's bit in [`Tombstones::mask`]: cheap (length, first and last byte), not a hash.
#[inline]
fn bit(topic: &str) -> u64 {
    let b = topic.as_bytes();
    let (first, last) = (
        b.first().copied().unwrap_or(0),
        b.last().copied().unwrap_or(0),
    );
    1 << ((b.len() + usize::from(first) + usize::from(last) * 3) & 63)
}

fn mask_of(table: &BTreeMap<String, i64>) -> u64 {
    table.keys().fold(0, |m, t| m | bit(t))
}

impl Default for Tombstones {
    fn default() -> Self {
        Tombstones {
            path: None,
            table: RwLock::new(BTreeMap::new()),
            mask: AtomicU64::new(0),
        }
    }
}

fn parse(path: &Path, text: &str) -> Result<BTreeMap<String, i64>> {
    let mut table = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || {
            StoreError::corrupted(
                path,
                format!("line {} is not \"<topic> <commitlog offset>\"", n + 1),
            )
        };
        let (topic, offset) = line.split_once(' ').ok_or_else(bad)?;
        let offset: i64 = offset.trim().parse().map_err(|_| bad())?;
        if !topic_is_legal(topic) || offset < 0 {
            return Err(bad());
        }
        table.insert(topic.to_owned(), offset);
    }
    Ok(table)
}

impl Tombstones {
    /// Reads `<config_dir>/deletedTopics` (none when missing). Nothing is written.
    pub(crate) fn load(config_dir: &Path) -> Result<Tombstones> {
        let path = config_dir.join(FILE_NAME);
        let table = match std::fs::read(&path) {
            Ok(bytes) => {
                let text = std::str::from_utf8(&bytes)
                    .map_err(|_| StoreError::corrupted(&path, "not UTF-8"))?;
                parse(&path, text)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(StoreError::io("cannot read", &path, e)),
        };
        Ok(Tombstones {
            path: Some(path),
            mask: AtomicU64::new(mask_of(&table)),
            table: RwLock::new(table),
        })
    }

    /// The offset below which `topic`'s records belong to a deleted topic; `i64::MIN` when it
    /// has no tombstone.
    #[inline]
    pub(crate) fn floor(&self, topic: &str) -> i64 {
        if self.mask.load(Ordering::Acquire) & bit(topic) == 0 {
            return i64::MIN;
        }
        self.table
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(topic)
            .copied()
            .unwrap_or(i64::MIN)
    }

    /// True when a record of `topic` at commitlog offset `phy_offset` is a deleted topic's.
    #[inline]
    pub(crate) fn covers(&self, topic: &str, phy_offset: i64) -> bool {
        phy_offset < self.floor(topic)
    }

    /// A copy of every tombstone.
    #[cfg(test)]
    pub(crate) fn snapshot(&self) -> BTreeMap<String, i64> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sets the tombstones of `topics` at `offset`, drops those the commitlog no longer needs
    /// (`min_commit_log_offset` at or past them) and writes the file when anything changed.
    /// On a write error the table is left as it was.
    pub(crate) fn update(
        &self,
        topics: &[String],
        offset: i64,
        min_commit_log_offset: i64,
    ) -> Result<()> {
        let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
        let mut next = table.clone();
        for t in topics {
            let e = next.entry(t.clone()).or_insert(offset);
            *e = (*e).max(offset);
        }
        next.retain(|_, at| *at > min_commit_log_offset);
        if next == *table {
            return Ok(());
        }
        if let Some(path) = &self.path {
            write_file(path, &next)?;
        }
        // Set before the table grows and cleared after it shrinks: a reader that sees the
        // new table never misses its bit (dispatch is excluded meanwhile anyway).
        self.mask.fetch_or(mask_of(&next), Ordering::AcqRel);
        *table = next;
        self.mask.store(mask_of(&table), Ordering::Release);
        Ok(())
    }
}

impl Tombstones {
    /// The commitlog was cut at `offset` (`truncate_files`, or recovery dropping a torn
    /// tail): what is written from there on belongs to the topics as they are now, so no
    /// tombstone may reach past it. Writes the file when one moved.
    pub(crate) fn clamp_to(&self, offset: i64) -> Result<()> {
        let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
        if table.values().all(|at| *at <= offset) {
            return Ok(());
        }
        let next: BTreeMap<String, i64> = table
            .iter()
            .map(|(t, at)| (t.clone(), (*at).min(offset)))
            .collect();
        if let Some(path) = &self.path {
            write_file(path, &next)?;
        }
        *table = next;
        Ok(())
    }
}

fn write_file(path: &Path, table: &BTreeMap<String, i64>) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    if table.is_empty() {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(StoreError::io("cannot delete", path, e)),
        }
        return sync_dir(dir);
    }
    std::fs::create_dir_all(dir).map_err(|e| StoreError::io("cannot create", dir, e))?;
    let mut text = String::new();
    for (topic, at) in table {
        text.push_str(topic);
        text.push(' ');
        text.push_str(&at.to_string());
        text.push('\n');
    }
    let tmp = path.with_file_name(format!("{FILE_NAME}.tmp"));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()
    })();
    written.map_err(|e| StoreError::io("cannot write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| StoreError::io("cannot rename", &tmp, e))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("cannot force", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_prune_and_refuse_damage() {
        let d = std::env::temp_dir().join(format!("rmqstore-tomb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let t = Tombstones::load(&d).unwrap();
        assert_eq!(t.floor("A"), i64::MIN);
        t.update(&["A".into(), "B".into()], 500, 0).unwrap();
        assert!(t.covers("A", 499) && !t.covers("A", 500) && !t.covers("C", 0));
        let again = Tombstones::load(&d).unwrap();
        assert_eq!(again.snapshot(), t.snapshot());
        // A later deletion moves the tombstone on; the minimum passing it drops it.
        t.update(&["A".into()], 900, 500).unwrap();
        assert_eq!(
            t.snapshot().into_iter().collect::<Vec<_>>(),
            [("A".into(), 900)]
        );
        t.clamp_to(700).unwrap();
        assert_eq!(
            Tombstones::load(&d)
                .unwrap()
                .snapshot()
                .into_iter()
                .collect::<Vec<_>>(),
            [("A".into(), 700)]
        );
        t.update(&[], 0, 900).unwrap();
        assert!(t.snapshot().is_empty());
        assert!(!d.join(FILE_NAME).exists());
        std::fs::write(d.join(FILE_NAME), "A 12\nB x\n").unwrap();
        let err = Tombstones::load(&d).unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        std::fs::write(d.join(FILE_NAME), "../x 12\n").unwrap();
        assert!(Tombstones::load(&d).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}
