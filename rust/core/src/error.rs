//! Errors of the store engine. Message content problems are never errors: they are answered with
//! a [`crate::PutMessageStatus`], as RocketMQ does. Errors are for the store itself (I/O, locks,
//! damaged or unexpected files, bad configuration, bad API arguments).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Everything the store can fail with. The binding maps each variant onto one Python exception.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// An operating-system I/O failure on a store file.
    Io {
        /// What the store was doing.
        action: String,
        /// The file or folder involved.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The store folder is already open (in this process or another one).
    Locked { path: PathBuf, holder: String },
    /// The folder holds files the store does not expect or cannot trust.
    Corrupted { path: PathBuf, reason: String },
    /// A record read from a commitlog segment is damaged (its body CRC does not match, or it
    /// is not the message a consume queue or index entry points at), or its body cannot be
    /// given back (compressed with an unknown type, or not decompressible).
    CorruptRecord {
        /// The segment file.
        path: PathBuf,
        /// The record's commitlog offset.
        offset: i64,
        reason: String,
    },
    /// A configuration value is out of range.
    Config { setting: String, reason: String },
    /// A call argument is not acceptable (e.g. an offset that is not a record boundary).
    InvalidArgument(String),
    /// The store has been closed.
    Closed,
    /// The store was opened by the process this one forked from: unusable here.
    ForkedCopy(String),
    /// The store was opened read-only and the call would change it.
    ReadOnly(String),
    /// A failure inside the engine that is not the caller's or the files' (a worker thread
    /// died); the operation can be retried.
    Internal(String),
    /// `end_transaction` named no half message (no half at that offset, or an unknown id).
    TransactionNotFound(String),
    /// `end_transaction` named a transaction already committed or rolled back.
    TransactionEnded(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    pub fn io(action: impl Into<String>, path: impl AsRef<Path>, source: io::Error) -> Self {
        StoreError::Io {
            action: action.into(),
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    pub fn corrupted(path: impl AsRef<Path>, reason: impl Into<String>) -> Self {
        StoreError::Corrupted {
            path: path.as_ref().to_path_buf(),
            reason: reason.into(),
        }
    }

    pub fn corrupt_record(path: impl AsRef<Path>, offset: i64, reason: impl Into<String>) -> Self {
        StoreError::CorruptRecord {
            path: path.as_ref().to_path_buf(),
            offset,
            reason: reason.into(),
        }
    }

    pub fn config(setting: impl Into<String>, reason: impl Into<String>) -> Self {
        StoreError::Config {
            setting: setting.into(),
            reason: reason.into(),
        }
    }

    /// The raw OS error number for I/O failures.
    pub fn os_errno(&self) -> Option<i32> {
        match self {
            StoreError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io {
                action,
                path,
                source,
            } => write!(f, "{action} {}: {source}", path.display()),
            StoreError::Locked { path, holder } => write!(
                f,
                "store folder {} is already open ({holder}); close the other store first",
                path.display()
            ),
            StoreError::Corrupted { path, reason } => {
                write!(f, "{}: {reason}", path.display())
            }
            StoreError::CorruptRecord {
                path,
                offset,
                reason,
            } => write!(
                f,
                "{}: the record at commitlog offset {offset} is damaged: {reason}",
                path.display()
            ),
            StoreError::Config { setting, reason } => write!(f, "{setting}: {reason}"),
            StoreError::InvalidArgument(msg) => f.write_str(msg),
            StoreError::Closed => f.write_str("the store is closed"),
            StoreError::ForkedCopy(msg) => f.write_str(msg),
            StoreError::Internal(msg) => write!(f, "internal error: {msg}"),
            StoreError::TransactionNotFound(msg) => f.write_str(msg),
            StoreError::TransactionEnded(msg) => f.write_str(msg),
            StoreError::ReadOnly(what) => write!(
                f,
                "the store is open read-only: {what} needs a store opened for writing"
            ),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
