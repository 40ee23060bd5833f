//! Consumer group offsets in the store's `config/consumerOffset.json` (RocketMQ's broker
//! `ConsumerOffsetManager`), committed from outside the Python API: the JVM Spark connector's
//! streams record each batch's end as a group's offsets through [`commit_offsets`].
//!
//! The file's protocol and checks are those of the Python side (`rmqstore/offsets.py` and
//! `rmqstore/_configfile.py`, docs/format.md#consumeroffsetjson), so the two read and write the
//! same file: `{"offsetTable": {"topic@group": {"0": 12}}, ...}`, other top-level keys kept; a
//! missing, empty or undecodable file falls back to `consumerOffset.json.bak` (the bad file is
//! deleted once the `.bak` loaded); neither usable is [`StoreError::Corrupted`] and nothing
//! changes; a symbolic link, a file that is not regular or one over
//! [`MAX_CONFIG_FILE_BYTES`] is refused. A commit writes `.tmp`, forces it, moves the file to
//! `.bak`, renames the temp file into place and forces the folder.
//!
//! Only the process holding the store's `lock` writes the file: a commit takes the lock for
//! its write, and fails with [`StoreError::Locked`] while a writer holds the store open.

mod json;

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};
use crate::file::lockfile::StoreLock;
use json::Value;

/// File name under the store's `config/` folder.
pub const FILE_NAME: &str = "consumerOffset.json";
/// Largest config file read (as the Python side's `MAX_CONFIG_FILE_BYTES`).
pub const MAX_CONFIG_FILE_BYTES: u64 = 64 * 1024 * 1024;

const WHAT: &str = "consumer offsets";

/// "topic@group" -> (queue id, offset), as the file holds them.
type Table = Vec<(String, Vec<(i32, i64)>)>;

/// Records `offsets` (queue id, next offset to consume) as `group`'s on `topic` in the store
/// at `root`, durably, in one write; the other entries of the file stay as they are. Takes the
/// store's lock for the write: [`StoreError::Locked`] while another process (a writer) or
/// this one holds the store open for writing.
pub fn commit_offsets(root: &Path, group: &str, topic: &str, offsets: &[(i32, i64)]) -> Result<()> {
    let key = format!(
        "{}@{}",
        check_name("topic", topic)?,
        check_name("group", group)?
    );
    for &(qid, offset) in offsets {
        if qid < 0 || offset < 0 {
            return Err(StoreError::InvalidArgument(format!(
                "queue id {qid} / offset {offset}: both must be >= 0"
            )));
        }
    }
    if offsets.is_empty() {
        return Ok(());
    }
    let _lock = StoreLock::acquire(root)?;
    let file = ConfigFile::new(&root.join("config"));
    file.make_dir()?;
    let (mut extra, mut table) = file.load()?.unwrap_or_default();
    let at = match table.iter().position(|(k, _)| *k == key) {
        Some(at) => at,
        None => {
            table.push((key, Vec::new()));
            table.len() - 1
        }
    };
    let queues = &mut table[at].1;
    for &(qid, offset) in offsets {
        match queues.iter_mut().find(|(q, _)| *q == qid) {
            Some(entry) => entry.1 = offset,
            None => queues.push((qid, offset)),
        }
    }
    let encoded = encode(&mut extra, table);
    file.replace(&encoded)?;
    file.sync_dir()
}

/// The committed offset of `group` on `topic`/`queue_id` (-1 when none, or when the file holds
/// a negative one), read without the store's lock.
pub fn query_offset(root: &Path, group: &str, topic: &str, queue_id: i32) -> Result<i64> {
    let key = format!(
        "{}@{}",
        check_name("topic", topic)?,
        check_name("group", group)?
    );
    let file = ConfigFile::new(&root.join("config"));
    let Some((_, table)) = file.load_read_only()? else {
        return Ok(-1);
    };
    let found = table
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, queues)| queues.iter().find(|(q, _)| *q == queue_id))
        .map(|&(_, o)| o);
    Ok(found.filter(|&o| o >= 0).unwrap_or(-1))
}

fn check_name<'a>(what: &str, name: &'a str) -> Result<&'a str> {
    if name.is_empty() {
        return Err(StoreError::InvalidArgument(format!(
            "{what} must not be empty"
        )));
    }
    if name.contains('@') {
        let shown: String = name.chars().take(200).collect();
        return Err(StoreError::InvalidArgument(format!(
            "{what} {shown:?} contains '@', which separates topic and group in the offset table"
        )));
    }
    Ok(name)
}

/// The top-level keys but `offsetTable`, and the table; the error says why the document is
/// not a consumer offset table.
fn decode(doc: Value) -> std::result::Result<(Vec<(String, Value)>, Table), String> {
    let Value::Object(items) = doc else {
        return Err(format!("top level is a {}, not an object", doc.type_name()));
    };
    let mut extra = Vec::new();
    let mut raw_table = None;
    for (k, v) in items {
        if k == "offsetTable" {
            raw_table = Some(v);
        } else {
            extra.push((k, v));
        }
    }
    let entries = match raw_table {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(entries)) => entries,
        Some(other) => {
            return Err(format!(
                "offsetTable is a {}, not an object",
                other.type_name()
            ));
        }
    };
    let mut table = Table::new();
    for (key, queues) in entries {
        let short: String = key.chars().take(200).collect();
        let Value::Object(queues) = queues else {
            return Err(format!(
                "offsetTable[{short:?}] is a {}, not an object",
                queues.type_name()
            ));
        };
        let mut out = Vec::new();
        for (qid, offset) in queues {
            let digits = qid.strip_prefix('-').unwrap_or(&qid);
            let plain = qid == "0"
                || (!digits.is_empty()
                    && digits.len() <= 10
                    && !digits.starts_with('0')
                    && digits.bytes().all(|b| b.is_ascii_digit()));
            let id = if plain { qid.parse::<i32>().ok() } else { None };
            let Some(id) = id else {
                let q: String = qid.chars().take(40).collect();
                return Err(format!(
                    "offsetTable[{short:?}]: queue id {q:?} is not a Java int"
                ));
            };
            let Value::Int(o) = offset else {
                return Err(format!(
                    "offsetTable[{short:?}][{qid:?}]: offset is not a Java long"
                ));
            };
            out.push((id, o));
        }
        table.push((key, out));
    }
    Ok((extra, table))
}

fn encode(extra: &mut Vec<(String, Value)>, table: Table) -> Vec<u8> {
    let mut doc = std::mem::take(extra);
    let entries = table
        .into_iter()
        .map(|(k, mut queues)| {
            queues.sort_by_key(|&(q, _)| q);
            let obj = queues
                .into_iter()
                .map(|(q, o)| (q.to_string(), Value::Int(o)))
                .collect();
            (k, Value::Object(obj))
        })
        .collect();
    doc.push(("offsetTable".to_string(), Value::Object(entries)));
    json::dump(&Value::Object(doc))
}

struct ConfigFile {
    dir: PathBuf,
    path: PathBuf,
    bak: PathBuf,
    tmp: PathBuf,
}

type Loaded = (Vec<(String, Value)>, Table);

impl ConfigFile {
    fn new(dir: &Path) -> ConfigFile {
        ConfigFile {
            dir: dir.to_path_buf(),
            path: dir.join(FILE_NAME),
            bak: dir.join(format!("{FILE_NAME}.bak")),
            tmp: dir.join(format!("{FILE_NAME}.tmp")),
        }
    }

    fn make_dir(&self) -> Result<()> {
        match std::fs::symlink_metadata(&self.dir) {
            Ok(m) if m.file_type().is_symlink() => Err(StoreError::corrupted(
                &self.dir,
                format!("{WHAT}: the config folder is a symbolic link; the store does not follow links for the files it writes"),
            )),
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) | Err(_) => {
                std::fs::create_dir_all(&self.dir)
                    .map_err(|e| StoreError::io("cannot create config folder", &self.dir, e))?;
                sync_dir(self.dir.parent().unwrap_or(Path::new(".")))
            }
        }
    }

    /// The bytes of `path`; None when it does not exist.
    fn read(&self, path: &Path) -> Result<Option<Vec<u8>>> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path);
        let file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(StoreError::corrupted(path, format!("{WHAT}: a symbolic link; the store does not follow links for the files it writes")));
            }
            Err(e) => return Err(StoreError::io("cannot read", path, e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| StoreError::io("cannot stat", path, e))?;
        if !meta.is_file() {
            return Err(StoreError::corrupted(
                path,
                format!("{WHAT}: not a regular file"),
            ));
        }
        if meta.len() > MAX_CONFIG_FILE_BYTES {
            return Err(StoreError::corrupted(
                path,
                format!(
                    "{WHAT}: {} bytes, more than the {MAX_CONFIG_FILE_BYTES} this store reads",
                    meta.len()
                ),
            ));
        }
        let mut data = Vec::new();
        (&file)
            .take(MAX_CONFIG_FILE_BYTES + 1)
            .read_to_end(&mut data)
            .map_err(|e| StoreError::io("cannot read", path, e))?;
        if data.len() as u64 > MAX_CONFIG_FILE_BYTES {
            return Err(StoreError::corrupted(
                path,
                format!("{WHAT}: grew past the {MAX_CONFIG_FILE_BYTES} bytes this store reads"),
            ));
        }
        Ok(Some(data))
    }

    fn decoded(raw: &[u8]) -> std::result::Result<Loaded, String> {
        let text = std::str::from_utf8(raw).map_err(|e| format!("not UTF-8 ({e})"))?;
        if text.trim().is_empty() {
            return Err("empty".into());
        }
        decode(json::parse(text).map_err(|e| e.to_string())?)
    }

    /// ConfigManager.load: the file, or its `.bak` when the file is missing or undecodable
    /// (the bad file is then deleted); None when neither exists.
    fn load(&self) -> Result<Option<Loaded>> {
        self.load_inner(true)
    }

    /// As [`ConfigFile::load`], changing nothing.
    fn load_read_only(&self) -> Result<Option<Loaded>> {
        self.load_inner(false)
    }

    fn load_inner(&self, repair: bool) -> Result<Option<Loaded>> {
        let raw = self.read(&self.path)?;
        let problem = match &raw {
            None => "missing".to_string(),
            Some(bytes) => match Self::decoded(bytes) {
                Ok(v) => {
                    if repair {
                        let _ = std::fs::remove_file(&self.tmp);
                    }
                    return Ok(Some(v));
                }
                Err(e) => e,
            },
        };
        let Some(raw_bak) = self.read(&self.bak)? else {
            if raw.is_none() {
                return Ok(None);
            }
            return Err(StoreError::corrupted(
                &self.path,
                format!(
                    "{WHAT}: {} is unusable ({problem}) and there is no {}",
                    self.path.display(),
                    self.bak.display()
                ),
            ));
        };
        let value = Self::decoded(&raw_bak).map_err(|e| {
            StoreError::corrupted(
                &self.path,
                if raw.is_some() {
                    format!(
                        "{WHAT}: {} is unusable ({problem}) and so is {} ({e})",
                        self.path.display(),
                        self.bak.display()
                    )
                } else {
                    format!(
                        "{WHAT}: {} is missing and {} is unusable ({e})",
                        self.path.display(),
                        self.bak.display()
                    )
                },
            )
        })?;
        if repair {
            log::warn!(
                "{WHAT}: {} is {problem}; loaded the previous version from {}",
                self.path.display(),
                self.bak.display()
            );
            if raw.is_some() {
                match std::fs::remove_file(&self.path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StoreError::io("cannot delete unusable", &self.path, e)),
                }
            }
            let _ = std::fs::remove_file(&self.tmp);
        }
        Ok(Some(value))
    }

    /// Temp file + fsync, current -> .bak, temp -> current (the caller then syncs the folder).
    /// On a failure the temp file goes and the current file is as it was.
    fn replace(&self, data: &[u8]) -> Result<()> {
        let mut moved_to_bak = false;
        let result = (|| -> std::result::Result<(), (String, PathBuf, std::io::Error)> {
            let tmp = self.tmp.clone();
            let fail = |step: &str, p: &Path| {
                let (s, p) = (step.to_string(), p.to_path_buf());
                move |e| (s, p, e)
            };
            match std::fs::remove_file(&tmp) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(("write".into(), tmp, e));
                }
                _ => {}
            }
            let mut f: File = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)
                .map_err(fail("write", &tmp))?;
            f.write_all(data).map_err(fail("write", &tmp))?;
            f.sync_all().map_err(fail("sync", &tmp))?;
            drop(f);
            match std::fs::rename(&self.path, &self.bak) {
                Ok(()) => moved_to_bak = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(("back up".into(), self.path.clone(), e)),
            }
            std::fs::rename(&tmp, &self.path).map_err(fail("replace", &self.path))
        })();
        result.map_err(|(step, path, e)| {
            let _ = std::fs::remove_file(&self.tmp);
            if moved_to_bak {
                let _ = std::fs::hard_link(&self.bak, &self.path);
            }
            StoreError::io(format!("{WHAT}: {step}"), path, e)
        })
    }

    fn sync_dir(&self) -> Result<()> {
        sync_dir(&self.dir)
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(format!("{WHAT}: cannot force folder"), dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_store(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("rmqstore-offsets-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn commits_keep_other_entries_and_fall_back_to_the_backup() {
        let root = temp_store("commit");
        let config = root.join("config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join(FILE_NAME),
            br#"{"dataVersion": {"counter": 3}, "offsetTable": {"T@other": {0: 9, "-1": -5}}}"#,
        )
        .unwrap();
        commit_offsets(&root, "g", "T", &[(1, 7), (0, 4)]).unwrap();
        commit_offsets(&root, "g", "T", &[(1, 8)]).unwrap();
        let text = std::fs::read_to_string(config.join(FILE_NAME)).unwrap();
        let want = "{\n    \"dataVersion\": {\n        \"counter\": 3\n    },\n    \"offsetTable\": {\n        \"T@other\": {\n            \"-1\": -5,\n            \"0\": 9\n        },\n        \"T@g\": {\n            \"0\": 4,\n            \"1\": 8\n        }\n    }\n}\n";
        assert_eq!(text, want);
        assert_eq!(query_offset(&root, "g", "T", 1).unwrap(), 8);
        assert_eq!(query_offset(&root, "other", "T", -1).unwrap(), -1);
        assert_eq!(query_offset(&root, "g", "U", 0).unwrap(), -1);
        // A torn file: the .bak (the previous commit) is loaded, and the next commit goes on.
        std::fs::write(config.join(FILE_NAME), b"{\"offsetTable\": {").unwrap();
        commit_offsets(&root, "g", "T", &[(2, 1)]).unwrap();
        assert_eq!(query_offset(&root, "g", "T", 1).unwrap(), 7);
        assert_eq!(query_offset(&root, "g", "T", 2).unwrap(), 1);
        // Both unusable: refused, nothing changed.
        std::fs::write(config.join(FILE_NAME), b"[]").unwrap();
        std::fs::write(
            config.join(format!("{FILE_NAME}.bak")),
            b"{\"a\": 1, \"a\": 2}",
        )
        .unwrap();
        let err = commit_offsets(&root, "g", "T", &[(2, 2)]).unwrap_err();
        assert!(matches!(err, StoreError::Corrupted { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("consumerOffset.json is unusable (top level is a array, not an object)")
                && text.contains("(key 'a' appears twice in one object)"),
            "{text}"
        );
        assert_eq!(std::fs::read(config.join(FILE_NAME)).unwrap(), b"[]");
        assert!(commit_offsets(&root, "g@x", "T", &[(0, 1)]).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_held_lock_refuses_the_commit() {
        let root = temp_store("locked");
        let held = StoreLock::acquire(&root).unwrap();
        let err = commit_offsets(&root, "g", "T", &[(0, 1)]).unwrap_err();
        assert!(matches!(err, StoreError::Locked { .. }), "{err}");
        drop(held);
        commit_offsets(&root, "g", "T", &[(0, 1)]).unwrap();
        assert_eq!(query_offset(&root, "g", "T", 0).unwrap(), 1);
        let _ = std::fs::remove_dir_all(&root);
    }
}
