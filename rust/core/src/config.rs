//! Store settings (RocketMQ's `MessageStoreConfig`, STORE_SPEC §16), named in snake_case. The
//! Python `StoreConfig` mirrors these names; both validate, and errors name the setting.

use std::path::PathBuf;

use crate::error::{Result, StoreError};
use crate::message::HostAddr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushDiskType {
    AsyncFlush,
    SyncFlush,
}

impl FlushDiskType {
    pub fn parse(s: &str) -> Option<FlushDiskType> {
        match s {
            "ASYNC_FLUSH" => Some(FlushDiskType::AsyncFlush),
            "SYNC_FLUSH" => Some(FlushDiskType::SyncFlush),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FlushDiskType::AsyncFlush => "ASYNC_FLUSH",
            FlushDiskType::SyncFlush => "SYNC_FLUSH",
        }
    }
}

#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// `storePathCommitLog`; `None` means `<root>/commitlog`.
    pub store_path_commit_log: Option<PathBuf>,
    /// `mappedFileSizeCommitLog` (1 GiB).
    pub mapped_file_size_commit_log: i64,
    /// `maxMessageSize` (4 MiB), the largest body.
    pub max_message_size: i32,
    /// `flushDiskType`.
    pub flush_disk_type: FlushDiskType,
    /// `warmMapedFileEnable`.
    pub warm_mapped_file_enable: bool,
    /// `flushLeastPagesWhenWarmMapedFile` (4096 pages = 16 MiB).
    pub flush_least_pages_when_warm_mapped_file: i64,
    /// `checkCRCOnRecover`.
    pub check_crc_on_recover: bool,
    /// The broker address written as STOREHOST and used in message ids.
    pub store_host: HostAddr,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            store_path_commit_log: None,
            mapped_file_size_commit_log: 1024 * 1024 * 1024,
            max_message_size: 4 * 1024 * 1024,
            flush_disk_type: FlushDiskType::AsyncFlush,
            warm_mapped_file_enable: false,
            flush_least_pages_when_warm_mapped_file: 1024 / 4 * 16,
            check_crc_on_recover: true,
            store_host: HostAddr::V4 {
                ip: [127, 0, 0, 1],
                port: 10911,
            },
        }
    }
}

/// Smallest commitlog segment accepted (room for a few records and the blank record).
pub const MIN_COMMIT_LOG_FILE_SIZE: i64 = 4096;

impl StoreConfig {
    pub fn validate(&self) -> Result<()> {
        let size = self.mapped_file_size_commit_log;
        if !(MIN_COMMIT_LOG_FILE_SIZE..=i64::from(i32::MAX)).contains(&size) {
            return Err(StoreError::config(
                "mapped_file_size_commit_log",
                format!(
                    "must be between {MIN_COMMIT_LOG_FILE_SIZE} and {} bytes, got {size}",
                    i32::MAX
                ),
            ));
        }
        if self.max_message_size < 1 {
            return Err(StoreError::config(
                "max_message_size",
                format!("must be at least 1 byte, got {}", self.max_message_size),
            ));
        }
        if self.flush_least_pages_when_warm_mapped_file < 1 {
            return Err(StoreError::config(
                "flush_least_pages_when_warm_mapped_file",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}
