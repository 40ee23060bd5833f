//! Store settings (RocketMQ's `MessageStoreConfig`, docs/architecture.md#settings), named in
//! snake_case, and the one table that describes them: for every setting its name, RocketMQ's
//! camelCase name where RocketMQ has it, type, default, valid range or choices and a one-line doc.
//!
//! The `settings!` invocation below is that table. It generates the [`StoreConfig`] struct,
//! its `Default`, the static descriptor list [`SETTINGS`] and the by-name accessors
//! ([`StoreConfig::get`], [`StoreConfig::set`]); [`StoreConfig::validate`] checks every value
//! against its descriptor. The Python binding builds a `StoreConfig` from a dict through `set`
//! and exposes the descriptors to Python, whose `StoreConfig` takes its ranges from them and is
//! tested field by field against them: a setting exists, and is checked, in one place.

use std::path::PathBuf;

use crate::error::{Result, StoreError};
use crate::format::HostAddr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushDiskType {
    AsyncFlush,
    SyncFlush,
}

impl FlushDiskType {
    /// The names [`FlushDiskType::parse`] takes, as RocketMQ spells them.
    pub const NAMES: &'static [&'static str] = &["ASYNC_FLUSH", "SYNC_FLUSH"];

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

/// Smallest commitlog segment accepted (room for a few records and the blank record).
pub const MIN_COMMIT_LOG_FILE_SIZE: i64 = 4096;

/// Largest value of the settings that RocketMQ holds in an `int` (and most of the others: file
/// sizes and counts that must fit RocketMQ's `int`).
const I32_MAX: i64 = i32::MAX as i64;

/// What a setting holds and which values it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettingKind {
    /// An integer in `min..=max` (both within the field's Rust type).
    Int { min: i64, max: i64 },
    /// `true` or `false`.
    Bool,
    /// One of these names.
    Choice(&'static [&'static str]),
    /// A broker address, `ip:port` with an IPv6 address in brackets (`[::1]:10911`).
    Host,
    /// A folder, or none for the default place.
    OptionalPath,
    /// RocketMQ's delay-level string (`"1s 5s 10s ..."`), checked by
    /// [`crate::schedule::DelayLevels::parse`].
    DelayLevels,
    /// Hours of the day, ';'-separated (`"04"`, `"02;14"`), checked by [`parse_hours`].
    Hours,
}

/// The hours of a `delete_when` string: ';'-separated parts, each an int from 0 to 23 in
/// decimal digits (blanks and signs refused). Empty parts and parts that are no hour are
/// refused, where RocketMQ's `UtilAll.isItTimeToDo` would throw (or never match) at every round.
pub fn parse_hours(s: &str) -> std::result::Result<Vec<u8>, String> {
    let mut hours = Vec::new();
    for part in s.split(';') {
        if part.is_empty() {
            return Err(format!(
                "must be hours 0 to 23 separated by ';' (such as '04' or '02;14'), got '{s}' \
                 (an empty part)"
            ));
        }
        let ok = part.bytes().all(|b| b.is_ascii_digit());
        match part.parse::<u8>() {
            Ok(h) if ok && h <= 23 => {
                if !hours.contains(&h) {
                    hours.push(h);
                }
            }
            _ => {
                return Err(format!(
                    "must be hours 0 to 23 separated by ';' (such as '04' or '02;14'), got \
                     '{s}' ('{part}' is not an hour)"
                ))
            }
        }
    }
    Ok(hours)
}

const fn int(min: i64, max: i64) -> SettingKind {
    SettingKind::Int { min, max }
}

use SettingKind::{Bool, Choice, Host, OptionalPath};

/// One setting of [`StoreConfig`], as the table below describes it.
#[derive(Debug)]
pub struct Setting {
    /// The snake_case name: the field of [`StoreConfig`] and of Python's `StoreConfig`.
    pub name: &'static str,
    /// RocketMQ's `MessageStoreConfig` name (`BrokerConfig` for the `transaction_*` settings),
    /// `None` for rmqstore's own settings.
    pub rocketmq_name: Option<&'static str>,
    pub kind: SettingKind,
    /// One line saying what the setting does.
    pub doc: &'static str,
}

/// A setting's value, whatever its field type: what [`StoreConfig::get`] gives and
/// [`StoreConfig::set`] takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettingValue {
    Int(i64),
    Bool(bool),
    /// A [`SettingKind::Choice`] name or a [`SettingKind::Host`] address.
    Str(String),
    Path(Option<PathBuf>),
}

impl Setting {
    /// Checks `value` against this setting's kind and range; the error names the setting.
    pub fn check(&self, value: &SettingValue) -> Result<()> {
        let bad = |reason: String| Err(StoreError::config(self.name, reason));
        match (self.kind, value) {
            (SettingKind::Int { min, max }, SettingValue::Int(v)) => {
                if !(min..=max).contains(v) {
                    return bad(format!("must be between {min} and {max}, got {v}"));
                }
            }
            (Bool, SettingValue::Bool(_)) | (OptionalPath, SettingValue::Path(_)) => {}
            (Choice(names), SettingValue::Str(s)) => {
                if !names.contains(&s.as_str()) {
                    return bad(format!("must be {}, got '{s}'", choices_text(names)));
                }
            }
            (Host, SettingValue::Str(s)) => {
                if HostAddr::parse(s).is_none() {
                    return bad(format!("must be {}, got '{s}'", Host.expected()));
                }
            }
            (SettingKind::DelayLevels, SettingValue::Str(s)) => {
                crate::schedule::DelayLevels::parse(s)?;
            }
            (SettingKind::Hours, SettingValue::Str(s)) => {
                parse_hours(s).map_err(|reason| StoreError::config(self.name, reason))?;
            }
            (kind, _) => return bad(format!("must be {}", kind.expected())),
        }
        Ok(())
    }
}

/// `'A' or 'B'`, `'A', 'B' or 'C'`.
fn choices_text(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.concat(),
    }
}

impl SettingKind {
    /// What a value must be, for messages: "an int", "'ASYNC_FLUSH' or 'SYNC_FLUSH'", ...
    pub fn expected(self) -> String {
        match self {
            SettingKind::Int { .. } => "an int".to_owned(),
            Bool => "a bool".to_owned(),
            Choice(names) => choices_text(names),
            Host => "'ip:port' (IPv6 as '[::1]:10911')".to_owned(),
            OptionalPath => "a path or None".to_owned(),
            SettingKind::DelayLevels => {
                "a str of delays such as '1s 5s 10s 30s 1m 2h 1d'".to_owned()
            }
            SettingKind::Hours => "a str of hours such as '04' or '02;14'".to_owned(),
        }
    }
}

/// A field type of [`StoreConfig`] and its [`SettingValue`] form.
trait SettingField: Sized {
    fn to_value(&self) -> SettingValue;
    /// `None` when `value` is not of this type or does not fit it.
    fn from_value(value: SettingValue) -> Option<Self>;
}

impl SettingField for i64 {
    fn to_value(&self) -> SettingValue {
        SettingValue::Int(*self)
    }
    fn from_value(value: SettingValue) -> Option<Self> {
        match value {
            SettingValue::Int(v) => Some(v),
            _ => None,
        }
    }
}

impl SettingField for i32 {
    fn to_value(&self) -> SettingValue {
        SettingValue::Int(i64::from(*self))
    }
    fn from_value(value: SettingValue) -> Option<Self> {
        match value {
            SettingValue::Int(v) => i32::try_from(v).ok(),
            _ => None,
        }
    }
}

impl SettingField for bool {
    fn to_value(&self) -> SettingValue {
        SettingValue::Bool(*self)
    }
    fn from_value(value: SettingValue) -> Option<Self> {
        match value {
            SettingValue::Bool(v) => Some(v),
            _ => None,
        }
    }
}

impl SettingField for FlushDiskType {
    fn to_value(&self) -> SettingValue {
        SettingValue::Str(self.name().to_owned())
    }
    fn from_value(value: SettingValue) -> Option<Self> {
        match value {
            SettingValue::Str(s) => FlushDiskType::parse(&s),
            _ => None,
        }
    }
}

impl SettingField for String {
    fn to_value(&self) -> SettingValue {
        SettingValue::Str(self.clone())
    }
    fn from_value(value: SettingValue) -> Option<Self> {
        match value {
            SettingValue::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl SettingField for HostAddr {
    fn to_value(&self) -> SettingValue {
        SettingValue::Str(self.to_string())
    }
    fn from_value(value: SettingValue) -> Option<Self> {
        match value {
            SettingValue::Str(s) => HostAddr::parse(&s),
            _ => None,
        }
    }
}

impl SettingField for Option<PathBuf> {
    fn to_value(&self) -> SettingValue {
        SettingValue::Path(self.clone())
    }
    fn from_value(value: SettingValue) -> Option<Self> {
        match value {
            SettingValue::Path(p) => Some(p),
            _ => None,
        }
    }
}

/// RocketMQ's name of a setting (`-`: none) as an `Option`.
macro_rules! rocketmq_name {
    (-) => {
        None
    };
    ($name:literal) => {
        Some($name)
    };
}

/// The doc line naming where a setting comes from.
macro_rules! origin_doc {
    (-) => {
        "rmqstore's own setting (RocketMQ has none)."
    };
    ($name:literal) => {
        concat!("RocketMQ's `", $name, "`.")
    };
}

/// The settings table. Each row: a one-line doc (the descriptor's `doc`), optional further doc
/// lines (rustdoc only), `name: type = default`, RocketMQ's name (`-` for none) and the kind
/// with its range or choices.
macro_rules! settings {
    ($(
        #[doc = $doc:literal]
        $(#[doc = $more:literal])*
        $name:ident: $ty:ty = $default:expr, $rocketmq:tt, $kind:expr;
    )*) => {
        /// Store settings; see the module doc and [`SETTINGS`].
        #[derive(Clone, Debug)]
        pub struct StoreConfig {
            $(
                #[doc = $doc]
                $(#[doc = $more])*
                #[doc = ""]
                #[doc = origin_doc!($rocketmq)]
                pub $name: $ty,
            )*
        }

        impl Default for StoreConfig {
            fn default() -> Self {
                StoreConfig {
                    $($name: $default,)*
                }
            }
        }

        /// Every setting of [`StoreConfig`], in field order.
        pub static SETTINGS: &[Setting] = &[
            $(Setting {
                name: stringify!($name),
                rocketmq_name: rocketmq_name!($rocketmq),
                kind: $kind,
                doc: $doc.trim_ascii(),
            },)*
        ];

        impl StoreConfig {
            /// The value of setting `name`; `None` when there is no such setting.
            pub fn get(&self, name: &str) -> Option<SettingValue> {
                match name {
                    $(stringify!($name) => Some(SettingField::to_value(&self.$name)),)*
                    _ => None,
                }
            }

            /// Stores `value`, already checked against its descriptor, in field `name`:
            /// `false` when the value does not fit the field's type.
            fn store(&mut self, name: &str, value: SettingValue) -> bool {
                match name {
                    $(stringify!($name) => match SettingField::from_value(value) {
                        Some(v) => self.$name = v,
                        None => return false,
                    },)*
                    _ => return false,
                }
                true
            }
        }
    };
}

settings! {
    /// Bytes per commitlog segment (1 GiB).
    ///
    /// A store must be reopened, and read by RocketMQ, with the size it was written with.
    mapped_file_size_commit_log: i64 = 1024 * 1024 * 1024,
        "mappedFileSizeCommitLog", int(MIN_COMMIT_LOG_FILE_SIZE, I32_MAX);
    /// Largest body in bytes (4 MiB); a record may exceed it by 64 KiB.
    max_message_size: i32 = 4 * 1024 * 1024, "maxMessageSize", int(1, I32_MAX);
    /// ASYNC_FLUSH (a service forces pages) or SYNC_FLUSH (a put waits for its force).
    flush_disk_type: FlushDiskType = FlushDiskType::AsyncFlush,
        "flushDiskType", Choice(FlushDiskType::NAMES);
    /// Pre-fault and `mlock` each new commitlog segment.
    warm_mapped_file_enable: bool = false, "warmMapedFileEnable", Bool;
    /// Pages between forces while warming a segment in SYNC_FLUSH (4096 pages = 16 MiB).
    flush_least_pages_when_warm_mapped_file: i64 = 1024 / 4 * 16,
        "flushLeastPagesWhenWarmMapedFile", int(1, I32_MAX);
    /// Most bytes of the commitlog segment being appended to that a service thread faults in
    /// ahead of the write position (32 MiB; 0: none); 200 ms of appends at the measured rate,
    /// at least 2 MiB.
    ///
    /// rmqstore's own setting: puts then find their pages mapped instead of having the kernel
    /// zero each new page on the producer's thread. Nothing is written ahead (RocketMQ's
    /// `warmMapedFileEnable` writes and locks whole segments instead).
    prefault_window_commit_log: i64 = 32 * 1024 * 1024, -, int(0, I32_MAX);
    /// Verify body CRCs when recovering at open.
    check_crc_on_recover: bool = true, "checkCRCOnRecover", Bool;
    /// Verify each record's body CRC whenever a message is read.
    ///
    /// Reads are `get_message`, `look_message_by_offset`, `query_message` and `read_batch`; a
    /// mismatch is a [`crate::StoreError::CorruptRecord`]. RocketMQ checks CRCs only when
    /// recovering.
    check_crc_on_read: bool = true, -, Bool;
    /// Give compressed bodies back decompressed, as RocketMQ's consumers receive them.
    ///
    /// Bodies with the COMPRESSED sysflag; off, reads give the bytes as stored.
    decompress_body_on_read: bool = true, -, Bool;
    /// The broker address written as STOREHOST into every record and used in message ids.
    store_host: HostAddr = HostAddr::V4 {
        ip: [127, 0, 0, 1],
        port: 10911,
    }, -, Host;
    /// Commitlog folder; none means `<store>/commitlog`.
    store_path_commit_log: Option<PathBuf> = None, "storePathCommitLog", OptionalPath;
    /// Bytes per consume queue segment (300,000 units of 20 bytes), rounded up to whole units.
    ///
    /// Rounded as RocketMQ's getter does ([`StoreConfig::consume_queue_units_per_file`]).
    mapped_file_size_consume_queue: i64 = 300_000 * 20,
        "mappedFileSizeConsumeQueue", int(20, I32_MAX);
    /// Build index files (lookup by key).
    message_index_enable: bool = true, "messageIndexEnable", Bool;
    /// Also index each message's TAGS value (`topic#T#tags`), as RocketMQ 5.4 and later do.
    ///
    /// Written after the UNIQ_KEY and KEYS entries: what RocketMQ 5.4 and later (5.5.1) write,
    /// and what their tag queries (`queryMessage` with index type `T`) look up. Off by default
    /// (the index of docs/format.md#index-files and of RocketMQ 4.x/5.3).
    index_tags: bool = false, -, Bool;
    /// Hash slots per index file.
    max_hash_slot_num: i32 = 5_000_000, "maxHashSlotNum", int(1, I32_MAX);
    /// Entries per index file (entry 0 is never used).
    max_index_num: i32 = 20_000_000, "maxIndexNum", int(2, I32_MAX);
    /// Most offsets one index lookup returns.
    max_msgs_num_batch: i32 = 64, "maxMsgsNumBatch", int(1, I32_MAX);
    /// Most messages per read while in page cache.
    max_transfer_count_on_message_in_memory: i32 = 32,
        "maxTransferCountOnMessageInMemory", int(1, I32_MAX);
    /// Most bytes per read while in page cache.
    max_transfer_bytes_on_message_in_memory: i64 = 256 * 1024,
        "maxTransferBytesOnMessageInMemory", int(1, I32_MAX);
    /// Most messages per read from cold data.
    max_transfer_count_on_message_in_disk: i32 = 8,
        "maxTransferCountOnMessageInDisk", int(1, I32_MAX);
    /// Most bytes per read from cold data.
    max_transfer_bytes_on_message_in_disk: i64 = 64 * 1024,
        "maxTransferBytesOnMessageInDisk", int(1, I32_MAX);
    /// Percent of physical memory behind the log end taken as in memory.
    access_message_in_memory_max_ratio: i32 = 40,
        "accessMessageInMemoryMaxRatio", int(0, 100);
    /// Consume queue bytes one filtered read may scan.
    max_filter_message_size: i64 = 16000, "maxFilterMessageSize", int(1, I32_MAX);
    /// Ms a SYNC_FLUSH put waits for its force before answering FLUSH_DISK_TIMEOUT.
    sync_flush_timeout: i64 = 5000, "syncFlushTimeout", int(1, I32_MAX);
    /// Percent of the commitlog's disk in use above which puts are refused.
    ///
    /// Puts answer SERVICE_NOT_AVAILABLE until space returns; 35 to 90 are RocketMQ's bounds.
    disk_space_warning_level_ratio: i32 = 90, "diskSpaceWarningLevelRatio", int(35, 90);
    /// Hours a commitlog segment is kept after its last write before it may be deleted (72).
    ///
    /// Measured from the segment file's modification time; 0 makes every full segment expired.
    file_reserved_time: i32 = 72, "fileReservedTime", int(0, I32_MAX);
    /// Local hours at which expired segments are deleted, ';'-separated ("04").
    ///
    /// Each part an hour 0 to 23 (RocketMQ's `UtilAll.isItTimeToDo`); a full disk or a manual
    /// deletion deletes whatever the hour.
    delete_when: String = "04".to_owned(), "deleteWhen", SettingKind::Hours;
    /// Ms between rounds of the commitlog and consume queue cleaners (the Python services).
    clean_resource_interval: i32 = 10_000, "cleanResourceInterval", int(1, I32_MAX);
    /// Ms the commitlog cleaner waits between two segment deletions.
    delete_commit_log_files_interval: i32 = 100,
        "deleteCommitLogFilesInterval", int(0, I32_MAX);
    /// Ms the consume queue cleaner waits after a queue that lost files.
    delete_consume_queue_files_interval: i32 = 100,
        "deleteConsumeQueueFilesInterval", int(0, I32_MAX);
    /// Ms after a first deletion attempt when a segment still in use is destroyed anyway.
    ///
    /// Its mapping stays valid for whoever holds it; only the file goes.
    destroy_mapped_file_interval_forcibly: i32 = 120_000,
        "destroyMapedFileIntervalForcibly", int(0, I32_MAX);
    /// Ms between retries to destroy a first segment whose deletion hung (`reDeleteHangedFile`).
    redelete_hanged_file_interval: i32 = 120_000,
        "redeleteHangedFileInterval", int(0, I32_MAX);
    /// Most commitlog segments one cleaner round deletes.
    delete_file_batch_max: i32 = 10, "deleteFileBatchMax", int(1, I32_MAX);
    /// A disk above disk_space_clean_forcibly_ratio deletes segments whatever their age.
    ///
    /// Off, a full disk only deletes expired segments, at any hour.
    clean_file_forcibly_enable: bool = true, "cleanFileForciblyEnable", Bool;
    /// Percent of a disk in use above which expired segments are deleted at any hour.
    disk_max_used_space_ratio: i32 = 75, "diskMaxUsedSpaceRatio", int(10, 95);
    /// Percent of a disk in use above which segments are deleted at once, expired or not.
    ///
    /// Only with clean_file_forcibly_enable; 30 to 85 are RocketMQ's bounds.
    disk_space_clean_forcibly_ratio: i32 = 85, "diskSpaceCleanForciblyRatio", int(30, 85);
    /// Ms the append lock may be held before a put answers OS_PAGE_CACHE_BUSY.
    os_page_cache_busy_timeout_mills: i64 = 1000,
        "osPageCacheBusyTimeOutMills", int(1, I32_MAX);
    /// Ms between ASYNC_FLUSH forces (the Python flush service reads it).
    flush_interval_commit_log: i32 = 500, "flushIntervalCommitLog", int(1, I32_MAX);
    /// Pages that must be waiting for an ASYNC_FLUSH force (the Python flush service).
    flush_commit_log_least_pages: i32 = 4, "flushCommitLogLeastPages", int(0, I32_MAX);
    /// Ms after which any written byte is forced (the Python flush service).
    flush_commit_log_thorough_interval: i32 = 10000,
        "flushCommitLogThoroughInterval", int(1, I32_MAX);
    /// Appends go to `mlock`ed write buffers that the commit service copies into the segments.
    ///
    /// Readers see only committed bytes.
    transient_store_pool_enable: bool = false, "transientStorePoolEnable", Bool;
    /// Write buffers in the transient store pool, each one commitlog segment long.
    transient_store_pool_size: i32 = 5, "transientStorePoolSize", int(1, 1024);
    /// Ms between commit rounds of the transient store pool (the Python commit service).
    commit_interval_commit_log: i32 = 200, "commitIntervalCommitLog", int(1, I32_MAX);
    /// Pages that must be waiting for a commit (the Python commit service).
    commit_commit_log_least_pages: i32 = 4, "commitCommitLogLeastPages", int(0, I32_MAX);
    /// Ms after which any appended byte is committed (the Python commit service).
    commit_commit_log_thorough_interval: i32 = 200,
        "commitCommitLogThoroughInterval", int(1, I32_MAX);
    /// A put wakes the commit service at once (transient store pool).
    wake_commit_when_put_message: bool = true, "wakeCommitWhenPutMessage", Bool;
    /// Ms between consume queue forces (the Python flush service).
    flush_interval_consume_queue: i32 = 1000, "flushIntervalConsumeQueue", int(1, I32_MAX);
    /// Pages that must be waiting for a consume queue force (the Python flush service).
    flush_consume_queue_least_pages: i32 = 2, "flushConsumeQueueLeastPages", int(0, I32_MAX);
    /// Ms after which any consume queue byte is forced (the Python flush service).
    flush_consume_queue_thorough_interval: i32 = 60000,
        "flushConsumeQueueThoroughInterval", int(1, I32_MAX);
    /// Delay of each delay level, level 1 first (units s, m, h, d; 18 levels by default).
    ///
    /// A message put with `DELAY` = n is stored in `SCHEDULE_TOPIC_XXXX` queue n - 1 and
    /// delivered to its own topic n's delay after it was stored; n above the number of levels
    /// is the last level. Parsed as RocketMQ parses it; a malformed string is refused.
    message_delay_level: String = crate::schedule::DEFAULT_DELAY_LEVELS.to_owned(),
        "messageDelayLevel", SettingKind::DelayLevels;
    /// Ms between saves of the delay levels' progress (`config/delayOffset.json`).
    flush_delay_offset_interval: i64 = 10_000, "flushDelayOffsetInterval", int(1, I32_MAX);
    /// Timer messages (TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS) are accepted.
    ///
    /// Off, such a put answers WHEEL_TIMER_NOT_ENABLE and no timer file is opened.
    timer_wheel_enable: bool = true, "timerWheelEnable", Bool;
    /// Ms per timer wheel slot: 100, 200, 500 or 1000.
    ///
    /// Deliver times are rounded down to it; a store must be reopened (and read by RocketMQ)
    /// with the precision its wheel was written with.
    timer_precision_ms: i32 = 1000, "timerPrecisionMs", int(100, 1000);
    /// Longest timer delay in seconds (3 days); longer ones answer WHEEL_TIMER_MSG_ILLEGAL.
    timer_max_delay_sec: i32 = 3600 * 24 * 3, "timerMaxDelaySec", int(1, I32_MAX);
    /// Slots ahead beyond which a timer message is rolled (2 days at 1000 ms precision).
    ///
    /// Such a message waits in a slot at most this far ahead and is then put back to the timer
    /// topic (TIMER_ROLL_TIMES), up to 604,740 slots.
    timer_roll_window_slot: i32 = 3600 * 24 * 2, "timerRollWindowSlot",
        int(2, TIMER_MAX_ROLL_WINDOW_SLOT);
    /// Bytes per timer log segment (100 MiB).
    mapped_file_size_timer_log: i32 = 100 * 1024 * 1024, "mappedFileSizeTimerLog",
        int(TIMER_MIN_LOG_FILE_SIZE, I32_MAX);
    /// Ms between timer checkpoint flushes (the Python timer flush service).
    timer_flush_interval_ms: i32 = 1000, "timerFlushIntervalMs", int(1, I32_MAX);
    /// Messages per wheel slot above which timer puts are refused at random, all at twice this.
    ///
    /// Refused puts answer WHEEL_TIMER_FLOW_CONTROL.
    timer_congest_num_each_slot: i32 = i32::MAX, "timerCongestNumEachSlot", int(1, I32_MAX);
    /// Timer delete markers name their message as `topic+uniqKey` instead of `uniqKey`.
    append_topic_for_timer_delete_key: bool = false, "appendTopicForTimerDeleteKey", Bool;
    /// Ms after its birth before a half message may be checked (RocketMQ's BrokerConfig).
    ///
    /// A half carrying CHECK_IMMUNITY_TIME_IN_SECONDS uses that instead, as RocketMQ does.
    transaction_timeout: i64 = 6_000, "transactionTimeOut", int(0, I32_MAX);
    /// Checks of one transaction before its half moves to TRANS_CHECK_MAX_TIME_TOPIC.
    transaction_check_max: i32 = 15, "transactionCheckMax", int(0, I32_MAX);
    /// Ms between rounds of the transaction check service (the Python check service).
    transaction_check_interval: i64 = 30_000, "transactionCheckInterval", int(1, I32_MAX);
    /// Characters of queued op text (half offsets and commas) that make one op message.
    ///
    /// Capped at max_message_size - 20 when used, so that an op message (which takes entries
    /// until its text reaches the size, one entry of up to 20 characters past it) always fits.
    transaction_op_msg_max_size: i32 = 4096, "transactionOpMsgMaxSize", int(1, I32_MAX);
    /// Ms after the last op message before queued ops are written in any case.
    transaction_op_batch_interval: i64 = 3_000, "transactionOpBatchInterval", int(0, I32_MAX);
}

/// Largest `timer_roll_window_slot` (`slotsTotal - TIMER_BLANK_SLOTS`).
const TIMER_MAX_ROLL_WINDOW_SLOT: i64 =
    crate::format::timer::SLOTS_TOTAL - crate::format::timer::TIMER_BLANK_SLOTS;

/// Smallest timer log segment: one unit and the filler.
const TIMER_MIN_LOG_FILE_SIZE: i64 =
    crate::format::timer::UNIT_SIZE + crate::format::timer::MIN_BLANK_LEN;

/// The timer precisions RocketMQ knows (`setTimerPrecisionMs` snaps any other value down to one).
pub const TIMER_PRECISIONS_MS: [i32; 4] = [100, 200, 500, 1000];

/// The descriptor of setting `name`.
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// The setting `name` most likely meant: the one RocketMQ calls `name` (`maxMessageSize`), else
/// the one whose name is nearest (a misspelling), if one is near enough.
pub fn closest_setting(name: &str) -> Option<&'static str> {
    if let Some(s) = SETTINGS.iter().find(|s| s.rocketmq_name == Some(name)) {
        return Some(s.name);
    }
    SETTINGS
        .iter()
        .map(|s| (edit_distance(name, s.name), s.name))
        .filter(|(d, known)| *d * 3 <= name.len().max(known.len()))
        .min_by_key(|(d, _)| *d)
        .map(|(_, known)| known)
}

/// Levenshtein distance over bytes.
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// `"; did you mean <setting>?"` for a name that is not a setting, or `""` when none is near.
pub fn did_you_mean(name: &str) -> String {
    closest_setting(name)
        .map(|known| format!("; did you mean {known}?"))
        .unwrap_or_default()
}

/// The error for a name that is not a setting, naming the nearest one.
fn unknown_setting(name: &str) -> StoreError {
    StoreError::config(name, format!("unknown setting{}", did_you_mean(name)))
}

impl StoreConfig {
    /// Sets setting `name` (as the table names it) to `value` after checking it against the
    /// setting's kind and range; the error names the setting (for an unknown name, also the
    /// nearest known one).
    pub fn set(&mut self, name: &str, value: SettingValue) -> Result<()> {
        let setting = setting(name).ok_or_else(|| unknown_setting(name))?;
        setting.check(&value)?;
        if !self.store(name, value) {
            return Err(StoreError::config(
                name,
                format!("must be {}", setting.kind.expected()),
            ));
        }
        Ok(())
    }

    /// Checks every setting against its descriptor, then the rules that tie settings together.
    pub fn validate(&self) -> Result<()> {
        for setting in SETTINGS {
            if let Some(value) = self.get(setting.name) {
                setting.check(&value)?;
            }
        }
        if !TIMER_PRECISIONS_MS.contains(&self.timer_precision_ms) {
            return Err(StoreError::config(
                "timer_precision_ms",
                format!(
                    "must be 100, 200, 500 or 1000, got {}",
                    self.timer_precision_ms
                ),
            ));
        }
        let index_bytes =
            40 + i64::from(self.max_hash_slot_num) * 4 + i64::from(self.max_index_num) * 20;
        if index_bytes > I32_MAX {
            return Err(StoreError::config(
                "max_index_num",
                format!(
                    "an index file of {index_bytes} bytes (40 + 4 x max_hash_slot_num + 20 x \
                     max_index_num) exceeds {I32_MAX} bytes"
                ),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_names_unique() {
        StoreConfig::default().validate().unwrap();
        let mut names: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SETTINGS.len());
        for s in SETTINGS {
            assert!(!s.doc.is_empty() && !s.doc.contains('\n'), "{}", s.name);
            assert!(StoreConfig::default().get(s.name).is_some(), "{}", s.name);
        }
    }

    #[test]
    fn every_int_range_fits_its_field() {
        for s in SETTINGS {
            if let SettingKind::Int { min, max } = s.kind {
                assert!(min <= max, "{}", s.name);
                for v in [min, max] {
                    let mut c = StoreConfig::default();
                    c.set(s.name, SettingValue::Int(v)).unwrap();
                    assert_eq!(c.get(s.name), Some(SettingValue::Int(v)));
                }
                for v in [min - 1, max + 1] {
                    let err = StoreConfig::default()
                        .set(s.name, SettingValue::Int(v))
                        .unwrap_err();
                    assert_eq!(
                        err.to_string(),
                        format!("{}: must be between {min} and {max}, got {v}", s.name)
                    );
                }
            }
        }
    }

    #[test]
    fn set_checks_kind_and_value() {
        let mut c = StoreConfig::default();
        c.set("flush_disk_type", SettingValue::Str("SYNC_FLUSH".into()))
            .unwrap();
        assert_eq!(c.flush_disk_type, FlushDiskType::SyncFlush);
        let err = c
            .set("flush_disk_type", SettingValue::Str("async".into()))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "flush_disk_type: must be 'ASYNC_FLUSH' or 'SYNC_FLUSH', got 'async'"
        );
        c.set("store_host", SettingValue::Str("[::1]:9".into()))
            .unwrap();
        assert_eq!(c.store_host.to_string(), "[::1]:9");
        assert!(c
            .set("store_host", SettingValue::Str("localhost:1".into()))
            .is_err());
        let err = c.set("index_tags", SettingValue::Int(1)).unwrap_err();
        assert_eq!(err.to_string(), "index_tags: must be a bool");
        c.set(
            "store_path_commit_log",
            SettingValue::Path(Some("/x".into())),
        )
        .unwrap();
        assert_eq!(c.store_path_commit_log, Some(PathBuf::from("/x")));
    }

    #[test]
    fn unknown_setting_names_the_closest() {
        let err = StoreConfig::default()
            .set("flush_disk_typ", SettingValue::Str("SYNC_FLUSH".into()))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "flush_disk_typ: unknown setting; did you mean flush_disk_type?"
        );
        assert_eq!(closest_setting("maxMessageSize"), Some("max_message_size"));
        assert_eq!(
            closest_setting("warmMapedFileEnable"),
            Some("warm_mapped_file_enable")
        );
        assert_eq!(closest_setting("max_mesage_size"), Some("max_message_size"));
        assert_eq!(closest_setting("zzz"), None);
    }

    #[test]
    fn validate_checks_ranges_and_the_index_file_size() {
        let c = StoreConfig {
            disk_space_warning_level_ratio: 91,
            ..StoreConfig::default()
        };
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "disk_space_warning_level_ratio: must be between 35 and 90, got 91"
        );
        let c = StoreConfig {
            max_index_num: i32::MAX / 10,
            ..StoreConfig::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("max_index_num: an index file of "));
    }

    #[test]
    fn delete_when_hours() {
        assert_eq!(parse_hours("04"), Ok(vec![4]));
        assert_eq!(parse_hours("02;14;2;0;23"), Ok(vec![2, 14, 0, 23]));
        assert_eq!(parse_hours("004"), Ok(vec![4]));
        for bad in ["", ";", "4;", "24", "-1", "+4", " 4", "4.0", "x", "300"] {
            let err = parse_hours(bad).unwrap_err();
            assert!(err.starts_with("must be hours 0 to 23"), "{bad}: {err}");
        }
        let err = StoreConfig::default()
            .set("delete_when", SettingValue::Str("04;".into()))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "delete_when: must be hours 0 to 23 separated by ';' (such as '04' or '02;14'), \
             got '04;' (an empty part)"
        );
        let err = StoreConfig::default()
            .set("delete_when", SettingValue::Int(4))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "delete_when: must be a str of hours such as '04' or '02;14'"
        );
    }

    #[test]
    fn retention_settings_defaults_and_rocketmq_names() {
        let c = StoreConfig::default();
        assert_eq!(c.file_reserved_time, 72);
        assert_eq!(c.delete_when, "04");
        assert_eq!(c.clean_resource_interval, 10_000);
        assert_eq!(c.delete_commit_log_files_interval, 100);
        assert_eq!(c.delete_consume_queue_files_interval, 100);
        assert_eq!(c.destroy_mapped_file_interval_forcibly, 120_000);
        assert_eq!(c.redelete_hanged_file_interval, 120_000);
        assert_eq!(c.delete_file_batch_max, 10);
        assert!(c.clean_file_forcibly_enable);
        assert_eq!(c.disk_max_used_space_ratio, 75);
        assert_eq!(c.disk_space_clean_forcibly_ratio, 85);
        assert_eq!(
            setting("destroy_mapped_file_interval_forcibly")
                .unwrap()
                .rocketmq_name,
            Some("destroyMapedFileIntervalForcibly")
        );
        for (name, lo, hi) in [
            ("disk_max_used_space_ratio", 10, 95),
            ("disk_space_clean_forcibly_ratio", 30, 85),
            ("disk_space_warning_level_ratio", 35, 90),
        ] {
            assert_eq!(setting(name).unwrap().kind, int(lo, hi), "{name}");
        }
    }

    #[test]
    fn transaction_settings_defaults_and_rocketmq_names() {
        let c = StoreConfig::default();
        assert_eq!(
            (
                c.transaction_timeout,
                c.transaction_check_max,
                c.transaction_check_interval,
                c.transaction_op_msg_max_size,
                c.transaction_op_batch_interval
            ),
            (6000, 15, 30000, 4096, 3000)
        );
        assert_eq!(
            setting("transaction_timeout").unwrap().rocketmq_name,
            Some("transactionTimeOut")
        );
    }
}
