//! Store settings (RocketMQ's `MessageStoreConfig`, STORE_SPEC §16), named in snake_case. The
//! Python `StoreConfig` mirrors these names; both validate, and errors name the setting.

use std::path::PathBuf;

use crate::error::{Result, StoreError};
use crate::format::HostAddr;

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
    /// Verify each record's body CRC whenever a message is read (`get_message`,
    /// `look_message_by_offset`, `query_message`, `read_batch`); a mismatch is a
    /// [`crate::StoreError::CorruptRecord`]. rmqstore's own setting (RocketMQ checks CRCs only
    /// when recovering); on by default.
    pub check_crc_on_read: bool,
    /// Give back compressed bodies (COMPRESSED sysflag) decompressed, as RocketMQ's consumers
    /// receive them; off, reads give the bytes as stored. rmqstore's own setting; on by
    /// default.
    pub decompress_body_on_read: bool,
    /// The broker address written as STOREHOST and used in message ids.
    pub store_host: HostAddr,
    /// `mappedFileSizeConsumeQueue` in bytes (300,000 units of 20 bytes); rounded up to a
    /// multiple of 20 as RocketMQ's getter does.
    pub mapped_file_size_consume_queue: i64,
    /// `messageIndexEnable`.
    pub message_index_enable: bool,
    /// Also index each message's TAGS value, as `topic#T#tags` after its UNIQ_KEY and KEYS
    /// entries: what RocketMQ 5.4 and later (5.5.1) write, and what their tag queries
    /// (`queryMessage` with index type `T`) look up. Off by default (the index of STORE_SPEC
    /// §4 and of RocketMQ 4.x/5.3).
    pub index_tags: bool,
    /// `maxHashSlotNum`.
    pub max_hash_slot_num: i32,
    /// `maxIndexNum`.
    pub max_index_num: i32,
    /// `maxMsgsNumBatch`: most offsets one index query returns.
    pub max_msgs_num_batch: i32,
    /// `maxTransferCountOnMessageInMemory`.
    pub max_transfer_count_on_message_in_memory: i32,
    /// `maxTransferBytesOnMessageInMemory`.
    pub max_transfer_bytes_on_message_in_memory: i64,
    /// `maxTransferCountOnMessageInDisk`.
    pub max_transfer_count_on_message_in_disk: i32,
    /// `maxTransferBytesOnMessageInDisk`.
    pub max_transfer_bytes_on_message_in_disk: i64,
    /// `accessMessageInMemoryMaxRatio` (percent of physical memory).
    pub access_message_in_memory_max_ratio: i32,
    /// `maxFilterMessageSize`.
    pub max_filter_message_size: i64,
    /// `syncFlushTimeout` in ms: how long a SYNC_FLUSH put waits for its force.
    pub sync_flush_timeout: i64,
    /// `diskSpaceWarningLevelRatio` in percent (35 to 90): above it puts are refused with
    /// SERVICE_NOT_AVAILABLE until space returns.
    pub disk_space_warning_level_ratio: i32,
    /// `osPageCacheBusyTimeOutMills`: a put that finds the append lock held longer than this
    /// answers OS_PAGE_CACHE_BUSY.
    pub os_page_cache_busy_timeout_mills: i64,
    /// `transientStorePoolEnable`: appends go to `mlock`ed write buffers that the commit service
    /// copies into the segments; readers see only committed bytes.
    pub transient_store_pool_enable: bool,
    /// `transientStorePoolSize`: write buffers in the pool, each one commitlog segment long.
    pub transient_store_pool_size: i32,
    /// `wakeCommitWhenPutMessage`: a put wakes the commit service (transient store pool).
    pub wake_commit_when_put_message: bool,
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
            check_crc_on_read: true,
            decompress_body_on_read: true,
            store_host: HostAddr::V4 {
                ip: [127, 0, 0, 1],
                port: 10911,
            },
            mapped_file_size_consume_queue: 300_000 * 20,
            message_index_enable: true,
            index_tags: false,
            max_hash_slot_num: 5_000_000,
            max_index_num: 20_000_000,
            max_msgs_num_batch: 64,
            max_transfer_count_on_message_in_memory: 32,
            max_transfer_bytes_on_message_in_memory: 256 * 1024,
            max_transfer_count_on_message_in_disk: 8,
            max_transfer_bytes_on_message_in_disk: 64 * 1024,
            access_message_in_memory_max_ratio: 40,
            max_filter_message_size: 16000,
            sync_flush_timeout: 5000,
            disk_space_warning_level_ratio: 90,
            os_page_cache_busy_timeout_mills: 1000,
            transient_store_pool_enable: false,
            transient_store_pool_size: 5,
            wake_commit_when_put_message: true,
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
        let cq = self.mapped_file_size_consume_queue;
        if !(20..=i64::from(i32::MAX)).contains(&cq) {
            return Err(StoreError::config(
                "mapped_file_size_consume_queue",
                format!("must be between 20 and {} bytes, got {cq}", i32::MAX),
            ));
        }
        let slots = i64::from(self.max_hash_slot_num);
        let entries = i64::from(self.max_index_num);
        if slots < 1 || entries < 2 || 40 + slots * 4 + entries * 20 > i64::from(i32::MAX) {
            return Err(StoreError::config(
                "max_index_num",
                format!(
                    "max_hash_slot_num ({slots}) must be at least 1, max_index_num ({entries}) at \
                     least 2, and an index file ({} bytes) at most {} bytes",
                    40 + slots * 4 + entries * 20,
                    i32::MAX
                ),
            ));
        }
        for (name, v) in [
            ("max_msgs_num_batch", i64::from(self.max_msgs_num_batch)),
            (
                "max_transfer_count_on_message_in_memory",
                i64::from(self.max_transfer_count_on_message_in_memory),
            ),
            (
                "max_transfer_bytes_on_message_in_memory",
                self.max_transfer_bytes_on_message_in_memory,
            ),
            (
                "max_transfer_count_on_message_in_disk",
                i64::from(self.max_transfer_count_on_message_in_disk),
            ),
            (
                "max_transfer_bytes_on_message_in_disk",
                self.max_transfer_bytes_on_message_in_disk,
            ),
            ("max_filter_message_size", self.max_filter_message_size),
            ("sync_flush_timeout", self.sync_flush_timeout),
            (
                "os_page_cache_busy_timeout_mills",
                self.os_page_cache_busy_timeout_mills,
            ),
        ] {
            if v < 1 {
                return Err(StoreError::config(
                    name,
                    format!("must be at least 1, got {v}"),
                ));
            }
        }
        if !(35..=90).contains(&self.disk_space_warning_level_ratio) {
            return Err(StoreError::config(
                "disk_space_warning_level_ratio",
                "must be a percentage between 35 and 90 (RocketMQ's bounds)",
            ));
        }
        if !(0..=100).contains(&self.access_message_in_memory_max_ratio) {
            return Err(StoreError::config(
                "access_message_in_memory_max_ratio",
                "must be a percentage (0 to 100)",
            ));
        }
        if self.transient_store_pool_size < 1 {
            return Err(StoreError::config(
                "transient_store_pool_size",
                format!("must be at least 1, got {}", self.transient_store_pool_size),
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

impl StoreConfig {
    /// `getMappedFileSizeConsumeQueue`: whole units per consume queue segment.
    pub fn consume_queue_units_per_file(&self) -> i64 {
        (self.mapped_file_size_consume_queue + 19) / 20
    }
}
