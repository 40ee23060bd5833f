//! The read path: `getMessage` with tag filtering and batch limits, offsets by time
//! (STORE_SPEC §8).

pub mod vec_pool;

use crate::commitlog::CommitLog;
use crate::config::StoreConfig;
use crate::error::{Result, StoreError};
use crate::format::compression::{decompress_into, DecompressError};
use crate::format::{
    body_crc_matches, for_each_property, keep_last_of_each, sysflag, view_record, MessageExt,
    RecordView, CQ_STORE_UNIT_SIZE,
};
use crate::queue::consume_queue::ConsumeQueue;
use crate::util::java_hash;

/// `GetMessageStatus`, in RocketMQ's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum GetMessageStatus {
    Found = 0,
    NoMatchedMessage,
    MessageWasRemoving,
    OffsetFoundNull,
    OffsetOverflowBadly,
    OffsetOverflowOne,
    OffsetTooSmall,
    NoMatchedLogicQueue,
    NoMessageInQueue,
    OffsetReset,
}

impl GetMessageStatus {
    pub const ALL: [GetMessageStatus; 10] = [
        GetMessageStatus::Found,
        GetMessageStatus::NoMatchedMessage,
        GetMessageStatus::MessageWasRemoving,
        GetMessageStatus::OffsetFoundNull,
        GetMessageStatus::OffsetOverflowBadly,
        GetMessageStatus::OffsetOverflowOne,
        GetMessageStatus::OffsetTooSmall,
        GetMessageStatus::NoMatchedLogicQueue,
        GetMessageStatus::NoMessageInQueue,
        GetMessageStatus::OffsetReset,
    ];

    pub fn name(self) -> &'static str {
        match self {
            GetMessageStatus::Found => "FOUND",
            GetMessageStatus::NoMatchedMessage => "NO_MATCHED_MESSAGE",
            GetMessageStatus::MessageWasRemoving => "MESSAGE_WAS_REMOVING",
            GetMessageStatus::OffsetFoundNull => "OFFSET_FOUND_NULL",
            GetMessageStatus::OffsetOverflowBadly => "OFFSET_OVERFLOW_BADLY",
            GetMessageStatus::OffsetOverflowOne => "OFFSET_OVERFLOW_ONE",
            GetMessageStatus::OffsetTooSmall => "OFFSET_TOO_SMALL",
            GetMessageStatus::NoMatchedLogicQueue => "NO_MATCHED_LOGIC_QUEUE",
            GetMessageStatus::NoMessageInQueue => "NO_MESSAGE_IN_QUEUE",
            GetMessageStatus::OffsetReset => "OFFSET_RESET",
        }
    }
}

/// A subscription expression: `"*"` (or empty) for everything, else `"TagA || TagB"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagFilter {
    all: bool,
    tags: Vec<String>,
    codes: Vec<i32>,
}

impl TagFilter {
    /// Everything.
    pub fn all() -> TagFilter {
        TagFilter {
            all: true,
            tags: Vec::new(),
            codes: Vec::new(),
        }
    }

    /// Parses RocketMQ's tag expression (`FilterAPI.buildSubscriptionData`). Tags are trimmed
    /// as Java's `String.trim()` does (only code points up to U+0020), so a tag ending in a
    /// no-break or ideographic space keeps it, as it was stored.
    pub fn parse(expr: &str) -> TagFilter {
        let expr = java_trim(expr);
        if expr.is_empty() || expr == "*" {
            return TagFilter::all();
        }
        let mut tags: Vec<String> = Vec::new();
        for t in expr.split("||") {
            let t = java_trim(t);
            if t == "*" {
                return TagFilter::all();
            }
            if !t.is_empty() && !tags.iter().any(|x| x == t) {
                tags.push(t.to_owned());
            }
        }
        if tags.is_empty() {
            return TagFilter::all();
        }
        let codes = tags.iter().map(|t| java_hash(t)).collect();
        TagFilter {
            all: false,
            tags,
            codes,
        }
    }

    pub fn is_all(&self) -> bool {
        self.all
    }

    /// The consume queue check (`isMatchedByConsumeQueue`): by tag code.
    pub fn matches_code(&self, tags_code: i64) -> bool {
        self.all || self.codes.contains(&(tags_code as i32))
    }

    /// The exact check RocketMQ leaves to clients: the record's real tag string, looked up
    /// (`tag()`) only by a filter that needs it.
    pub fn matches_tag<'a>(&self, tag: impl FnOnce() -> Option<&'a str>) -> bool {
        self.all || tag().is_some_and(|t| self.tags.iter().any(|x| x == t))
    }
}

/// Java's `String.trim()`: strips leading and trailing characters up to U+0020 (spaces and
/// control characters), and nothing else (Rust's `trim` also strips Unicode white space).
pub fn java_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c <= '\u{20}')
}

/// The pull batch limits (`isTheBatchFull`).
#[derive(Clone, Copy, Debug)]
pub struct PullLimits {
    pub max_total_msg_size: i64,
    pub max_filter_message_size: i64,
    pub count_in_memory: i32,
    pub bytes_in_memory: i64,
    pub count_in_disk: i32,
    pub bytes_in_disk: i64,
    /// Bytes behind the commitlog end still taken as "in memory".
    pub memory_window: i64,
}

/// `MAX_PULL_MSG_SIZE`.
pub const MAX_PULL_MSG_SIZE: i64 = 128 * 1024 * 1024;

impl PullLimits {
    pub fn from_config(c: &StoreConfig, total_memory: i64) -> PullLimits {
        PullLimits {
            max_total_msg_size: MAX_PULL_MSG_SIZE,
            max_filter_message_size: c.max_filter_message_size,
            count_in_memory: c.max_transfer_count_on_message_in_memory,
            bytes_in_memory: c.max_transfer_bytes_on_message_in_memory,
            count_in_disk: c.max_transfer_count_on_message_in_disk,
            bytes_in_disk: c.max_transfer_bytes_on_message_in_disk,
            memory_window: total_memory / 100 * i64::from(c.access_message_in_memory_max_ratio),
        }
    }

    fn batch_full(
        &self,
        size: i32,
        max_msg_nums: i32,
        buf_total: i64,
        count: i32,
        in_mem: bool,
    ) -> bool {
        if buf_total == 0 || count == 0 {
            return false;
        }
        let size = i64::from(size);
        if count + 1 > max_msg_nums || buf_total + size > self.max_total_msg_size {
            return true;
        }
        if in_mem {
            buf_total + size > self.bytes_in_memory || count > self.count_in_memory - 1
        } else {
            buf_total + size > self.bytes_in_disk || count > self.count_in_disk - 1
        }
    }
}

/// What `getMessage` answers.
#[derive(Clone, Debug)]
pub struct GetMessageResult {
    pub status: GetMessageStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub messages: Vec<MessageExt>,
    /// Bytes of all messages returned.
    pub buffer_total_size: i64,
}

/// `DefaultMessageStore.getMessage` over one queue (`None`: no such queue, i.e. empty). A
/// damaged record among those read is a [`crate::StoreError::CorruptRecord`] naming it.
pub fn get_message(
    commitlog: &CommitLog,
    cq: Option<&ConsumeQueue>,
    offset: i64,
    max_msg_nums: i32,
    filter: &TagFilter,
    limits: &PullLimits,
) -> Result<GetMessageResult> {
    let (min, max) = cq.map_or((0, 0), |cq| (cq.min_offset(), cq.max_offset()));
    let mut r = GetMessageResult {
        status: GetMessageStatus::NoMatchedMessage,
        next_begin_offset: offset,
        min_offset: min,
        max_offset: max,
        messages: Vec::new(),
        buffer_total_size: 0,
    };
    let cq = match cq {
        Some(cq) if max != 0 => cq,
        _ => {
            r.status = GetMessageStatus::NoMessageInQueue;
            r.next_begin_offset = 0;
            return Ok(r);
        }
    };
    if offset < min {
        r.status = GetMessageStatus::OffsetTooSmall;
        r.next_begin_offset = min;
        return Ok(r);
    }
    if offset == max {
        r.status = GetMessageStatus::OffsetOverflowOne;
        return Ok(r);
    }
    if offset > max {
        r.status = GetMessageStatus::OffsetOverflowBadly;
        r.next_begin_offset = max;
        return Ok(r);
    }
    let max_msg_nums = max_msg_nums.max(1);
    let max_filter_bytes = limits
        .max_filter_message_size
        .max(i64::from(max_msg_nums) * CQ_STORE_UNIT_SIZE);
    let max_phy = commitlog.max_offset();
    let file_size = commitlog.queue().file_size();
    let mut next = offset;
    let mut next_phy_file_start = i64::MIN;
    let mut count = 0i32;
    // travelCqFileNumWhenGetMessage = 1: one consume queue segment per call.
    let want = (max_filter_bytes / CQ_STORE_UNIT_SIZE + 1) as usize;
    let Some(units) = cq.units_from(next, want) else {
        r.status = GetMessageStatus::OffsetFoundNull;
        r.next_begin_offset = cq.roll_next_file(next);
        return Ok(r);
    };
    for u in units {
        if next >= max {
            break;
        }
        if (u.queue_offset - offset) * CQ_STORE_UNIT_SIZE >= max_filter_bytes {
            break;
        }
        let in_mem = max_phy - u.phy_offset <= limits.memory_window;
        if limits.batch_full(u.size, max_msg_nums, r.buffer_total_size, count, in_mem) {
            break;
        }
        next = u.queue_offset + 1;
        if u.phy_offset < next_phy_file_start || u.is_pre_blank() {
            continue;
        }
        if !filter.matches_code(u.tags_code) {
            continue;
        }
        let Some(m) = commitlog.message_at(u.phy_offset, u.size)? else {
            if count == 0 {
                r.status = GetMessageStatus::MessageWasRemoving;
            }
            next_phy_file_start = u.phy_offset + file_size - u.phy_offset.rem_euclid(file_size);
            continue;
        };
        if !filter.matches_tag(|| m.tags()) {
            continue;
        }
        r.buffer_total_size += i64::from(u.size);
        r.messages.push(m);
        count += 1;
        r.status = GetMessageStatus::Found;
    }
    r.next_begin_offset = next;
    Ok(r)
}

/// Which side of an exact or missing timestamp `offset_by_time` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeBoundary {
    Lower,
    Upper,
}

/// `getOffsetInQueueByTime`: LOWER gives the first unit stored at or after `timestamp` (the
/// queue's max offset when none is), UPPER the last unit stored at or before it. Store times
/// grow with commitlog offsets, so a binary search over the queue holds. Units whose records are
/// gone count as older than anything. The answer is clamped to `[min, max]`.
pub fn offset_by_time(
    commitlog: &CommitLog,
    cq: &ConsumeQueue,
    timestamp: i64,
    boundary: TimeBoundary,
) -> i64 {
    let min = cq.min_offset();
    let max = cq.max_offset();
    if min >= max {
        return min.max(0).min(max);
    }
    let ts_at = |i: i64| -> i64 {
        match cq.get(i) {
            Some(u) if !u.is_pre_blank() => commitlog.store_timestamp_at(u.phy_offset, u.size),
            _ => -1,
        }
    };
    // First index whose time is >= timestamp (LOWER), or > timestamp (for UPPER, minus one).
    let first_at_or_after = |strict: bool| -> i64 {
        let (mut lo, mut hi) = (min, max);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let t = ts_at(mid);
            let before = if strict {
                t <= timestamp
            } else {
                t < timestamp
            };
            if before {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    let r = match boundary {
        TimeBoundary::Lower => first_at_or_after(false),
        TimeBoundary::Upper => first_at_or_after(true) - 1,
    };
    r.clamp(min, max)
}

/// Columns of a bulk read, laid out as Arrow buffers (little-endian values and i32 offsets, as
/// the Arrow format requires; these are in-memory buffers handed to pyarrow, not a file format).
#[derive(Debug, Default, Clone)]
pub struct BatchColumns {
    pub rows: usize,
    /// Queue offset after the last unit read (where the next read starts).
    pub next_offset: i64,
    pub topic_offsets: Vec<i32>,
    pub topic_data: Vec<u8>,
    pub queue_id: Vec<i32>,
    pub queue_offset: Vec<i64>,
    pub commit_log_offset: Vec<i64>,
    pub store_timestamp: Vec<i64>,
    pub born_timestamp: Vec<i64>,
    /// Validity bitmap of `tags` (bit set = present).
    pub tags_valid: Vec<u8>,
    pub tags_offsets: Vec<i32>,
    pub tags_data: Vec<u8>,
    /// `keys`: list offsets into the key strings.
    pub keys_list_offsets: Vec<i32>,
    pub keys_offsets: Vec<i32>,
    pub keys_data: Vec<u8>,
    /// `properties`: map offsets into the key/value strings.
    pub props_map_offsets: Vec<i32>,
    pub props_key_offsets: Vec<i32>,
    pub props_key_data: Vec<u8>,
    pub props_value_offsets: Vec<i32>,
    pub props_value_data: Vec<u8>,
    pub body_offsets: Vec<i32>,
    pub body_data: Vec<u8>,
}

/// One column vector of a bulk read, by element type.
#[derive(Debug)]
pub enum ColumnVec {
    U8(Vec<u8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl ColumnVec {
    /// The bytes of the vector, in this host's byte order: an in-memory Arrow buffer (Arrow's
    /// in-memory format is native-endian), never written to disk.
    pub fn bytes(&self) -> &[u8] {
        fn raw<T: Copy>(v: &[T]) -> &[u8] {
            // SAFETY: plain integers without padding; the length covers exactly the elements.
            unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        }
        match self {
            ColumnVec::U8(v) => v,
            ColumnVec::I32(v) => raw(v),
            ColumnVec::I64(v) => raw(v),
        }
    }

    /// Gives the vector to the pool of dropped batches ([`crate::read::vec_pool`]).
    pub fn recycle(self) {
        match self {
            ColumnVec::U8(v) => vec_pool::recycle(v),
            ColumnVec::I32(v) => vec_pool::recycle(v),
            ColumnVec::I64(v) => vec_pool::recycle(v),
        }
    }
}

/// Appends the offsets of a column read right after `dst`'s, rebased onto its end.
fn append_offsets(dst: &mut Vec<i32>, src: &[i32]) {
    let base = dst.last().copied().unwrap_or(0);
    dst.extend(src.iter().skip(1).map(|o| o + base));
}

#[inline(always)]
fn push_str(offsets: &mut Vec<i32>, data: &mut Vec<u8>, s: &[u8]) {
    extend_small(data, s);
    offsets.push(data.len() as i32);
}

/// `data.extend_from_slice(s)`, without a call into `memcpy` for the short strings most
/// columns hold (tags, keys, property names and values): up to 16 bytes are copied as two
/// overlapping loads and stores of 8 (or 4) bytes, both inside `s` and inside the room.
#[inline(always)]
fn extend_small(data: &mut Vec<u8>, s: &[u8]) {
    let n = s.len();
    if n > 16 || data.capacity() - data.len() < n {
        data.extend_from_slice(s);
        return;
    }
    let len = data.len();
    // SAFETY: the destination has room for `n` bytes after `len` (checked above); every read
    // is inside `s` and every write inside `[len, len + n)`; unaligned accesses are used.
    unsafe {
        let src = s.as_ptr();
        let dst = data.as_mut_ptr().add(len);
        if n >= 8 {
            let head = src.cast::<u64>().read_unaligned();
            let tail = src.add(n - 8).cast::<u64>().read_unaligned();
            dst.cast::<u64>().write_unaligned(head);
            dst.add(n - 8).cast::<u64>().write_unaligned(tail);
        } else if n >= 4 {
            let head = src.cast::<u32>().read_unaligned();
            let tail = src.add(n - 4).cast::<u32>().read_unaligned();
            dst.cast::<u32>().write_unaligned(head);
            dst.add(n - 4).cast::<u32>().write_unaligned(tail);
        } else if n > 0 {
            // 1 to 3 bytes: first, middle and last (overlapping when fewer).
            *dst = *src;
            *dst.add(n / 2) = *src.add(n / 2);
            *dst.add(n - 1) = *src.add(n - 1);
        }
        data.set_len(len + n);
    }
}

impl BatchColumns {
    /// No rows.
    pub fn empty() -> BatchColumns {
        BatchColumns::with_capacity(0, 0)
    }

    /// Appends the rows of `other` (read right after these). The bodies, most of the bytes,
    /// are copied by a second thread while this one copies the other columns (on this thread
    /// too when no thread can be started).
    fn append(&mut self, other: &BatchColumns) {
        fn bodies(dst: &mut (Vec<i32>, Vec<u8>), other: &BatchColumns) {
            append_offsets(&mut dst.0, &other.body_offsets);
            dst.1.extend_from_slice(&other.body_data);
        }
        let mut body = (
            std::mem::take(&mut self.body_offsets),
            std::mem::take(&mut self.body_data),
        );
        let copied = std::thread::scope(|s| {
            let job = std::thread::Builder::new().spawn_scoped(s, || bodies(&mut body, other));
            self.append_except_bodies(other);
            match job {
                Ok(j) => j.join().map_err(std::panic::resume_unwind).is_ok(),
                Err(_) => false,
            }
        });
        if !copied {
            bodies(&mut body, other);
        }
        (self.body_offsets, self.body_data) = body;
    }

    /// [`BatchColumns::append`] of every column but the bodies.
    fn append_except_bodies(&mut self, other: &BatchColumns) {
        for r in 0..other.rows {
            let row = self.rows + r;
            if row.is_multiple_of(8) {
                self.tags_valid.push(0);
            }
            if other.tags_valid[r / 8] & (1 << (r % 8)) != 0 {
                self.tags_valid[row / 8] |= 1 << (row % 8);
            }
        }
        append_offsets(&mut self.topic_offsets, &other.topic_offsets);
        append_offsets(&mut self.tags_offsets, &other.tags_offsets);
        append_offsets(&mut self.keys_offsets, &other.keys_offsets);
        append_offsets(&mut self.keys_list_offsets, &other.keys_list_offsets);
        append_offsets(&mut self.props_key_offsets, &other.props_key_offsets);
        append_offsets(&mut self.props_value_offsets, &other.props_value_offsets);
        append_offsets(&mut self.props_map_offsets, &other.props_map_offsets);
        self.topic_data.extend_from_slice(&other.topic_data);
        self.tags_data.extend_from_slice(&other.tags_data);
        self.keys_data.extend_from_slice(&other.keys_data);
        self.props_key_data.extend_from_slice(&other.props_key_data);
        self.props_value_data
            .extend_from_slice(&other.props_value_data);
        self.queue_id.extend_from_slice(&other.queue_id);
        self.queue_offset.extend_from_slice(&other.queue_offset);
        self.commit_log_offset
            .extend_from_slice(&other.commit_log_offset);
        self.store_timestamp
            .extend_from_slice(&other.store_timestamp);
        self.born_timestamp.extend_from_slice(&other.born_timestamp);
        self.rows += other.rows;
        self.next_offset = other.next_offset;
    }

    /// Room for `n` rows and `body_bytes` of bodies, in vectors from the pool of dropped
    /// batches ([`crate::read::vec_pool`]) where it has them.
    fn with_capacity(n: usize, body_bytes: usize) -> BatchColumns {
        let mut c = vec_pool::with_pool(|p| BatchColumns {
            topic_offsets: p.take(n + 1),
            topic_data: p.take(n * 16),
            queue_id: p.take(n),
            queue_offset: p.take(n),
            commit_log_offset: p.take(n),
            store_timestamp: p.take(n),
            born_timestamp: p.take(n),
            tags_valid: p.take(n / 8 + 1),
            tags_offsets: p.take(n + 1),
            tags_data: p.take(n * 8),
            keys_list_offsets: p.take(n + 1),
            keys_offsets: p.take(n * 2 + 1),
            keys_data: p.take(n * 16),
            props_map_offsets: p.take(n + 1),
            // Room for two properties a row (tags and keys, the usual ones) without regrowing.
            props_key_offsets: p.take(n * 2 + 1),
            props_key_data: p.take(n * 8),
            props_value_offsets: p.take(n * 2 + 1),
            props_value_data: p.take(n * 16),
            body_offsets: p.take(n + 1),
            body_data: p.take(body_bytes),
            rows: 0,
            next_offset: 0,
        });
        for v in [
            &mut c.topic_offsets,
            &mut c.tags_offsets,
            &mut c.keys_list_offsets,
            &mut c.keys_offsets,
            &mut c.props_map_offsets,
            &mut c.props_key_offsets,
            &mut c.props_value_offsets,
            &mut c.body_offsets,
        ] {
            v.push(0);
        }
        c
    }

    /// Every column vector with its name, in one list: what the binding hands to Python and
    /// what [`BatchColumns::recycle`] gives back to the pool.
    pub fn into_named(self) -> [(&'static str, ColumnVec); 20] {
        use ColumnVec::{I32, I64, U8};
        let c = self;
        [
            ("topic_offsets", I32(c.topic_offsets)),
            ("topic_data", U8(c.topic_data)),
            ("queue_id", I32(c.queue_id)),
            ("queue_offset", I64(c.queue_offset)),
            ("commit_log_offset", I64(c.commit_log_offset)),
            ("store_timestamp", I64(c.store_timestamp)),
            ("born_timestamp", I64(c.born_timestamp)),
            ("tags_valid", U8(c.tags_valid)),
            ("tags_offsets", I32(c.tags_offsets)),
            ("tags_data", U8(c.tags_data)),
            ("keys_list_offsets", I32(c.keys_list_offsets)),
            ("keys_offsets", I32(c.keys_offsets)),
            ("keys_data", U8(c.keys_data)),
            ("props_map_offsets", I32(c.props_map_offsets)),
            ("props_key_offsets", I32(c.props_key_offsets)),
            ("props_key_data", U8(c.props_key_data)),
            ("props_value_offsets", I32(c.props_value_offsets)),
            ("props_value_data", U8(c.props_value_data)),
            ("body_offsets", I32(c.body_offsets)),
            ("body_data", U8(c.body_data)),
        ]
    }

    /// Gives every vector to the pool of dropped batches, for the next reads.
    pub fn recycle(self) {
        for (_, v) in self.into_named() {
            v.recycle();
        }
    }

    /// Appends the row of record `d`; with `decompress`, a compressed body is appended
    /// decompressed. An undecompressible body leaves every column as it was.
    fn push(
        &mut self,
        d: &RecordView<'_>,
        queue_id: i32,
        phy_offset: i64,
        opts: ReadOptions,
        split: &mut PropsSplit,
    ) -> Result<(), DecompressError> {
        // The body first: it is the only part that can fail.
        if opts.decompress && d.sys_flag & sysflag::COMPRESSED != 0 {
            decompress_into(d.sys_flag, d.body, &mut self.body_data)?;
            self.body_offsets.push(self.body_data.len() as i32);
        } else {
            push_str(&mut self.body_offsets, &mut self.body_data, d.body);
        }
        let include_properties = opts.include_properties;
        let row = self.rows;
        push_str(&mut self.topic_offsets, &mut self.topic_data, d.topic);
        self.queue_id.push(queue_id);
        self.queue_offset.push(d.queue_offset);
        self.commit_log_offset.push(phy_offset);
        self.store_timestamp.push(d.store_timestamp);
        self.born_timestamp.push(d.born_timestamp);
        if row.is_multiple_of(8) {
            self.tags_valid.push(0);
        }
        let props = d.properties;
        let at = |(start, end): Span| &props[start as usize..end as usize];
        let (pk_offsets, pk_data) = (&mut self.props_key_offsets, &mut self.props_key_data);
        let (pv_offsets, pv_data) = (&mut self.props_value_offsets, &mut self.props_value_data);
        let tags: Option<&[u8]>;
        if split.reusable(props) {
            if include_properties {
                for &(k, v) in &split.pairs {
                    push_str(pk_offsets, pk_data, at(k));
                    push_str(pv_offsets, pv_data, at(v));
                }
            }
            tags = split.tags.map(at);
            for &k in &split.keys {
                push_str(&mut self.keys_offsets, &mut self.keys_data, at(k));
            }
        } else {
            let record = split.begin(props);
            let span = |f: &[u8]| -> Span {
                let start = f.as_ptr() as usize - props.as_ptr() as usize;
                (start as u32, (start + f.len()) as u32)
            };
            // The pairs are gathered as spans first (in the split, which holds them for the
            // next record when `record`), so that a name stored twice keeps only its last value.
            split.pairs.clear();
            split.keys.clear();
            let (mut tags_span, mut keys_span) = (None, None);
            let pairs = &mut split.pairs;
            for_each_property(props, |k, v| {
                if k.is_empty() || v.is_empty() {
                    return;
                }
                match k {
                    b"TAGS" => tags_span = Some(span(v)),
                    b"KEYS" => keys_span = Some(span(v)),
                    _ => {}
                }
                pairs.push((span(k), span(v)));
            });
            keep_last_of_each(&mut split.pairs, |p| {
                &props[p.0 .0 as usize..p.0 .1 as usize]
            });
            if include_properties {
                for &(k, v) in &split.pairs {
                    push_str(pk_offsets, pk_data, at(k));
                    push_str(pv_offsets, pv_data, at(v));
                }
            }
            tags = tags_span.map(at);
            if let Some(k) = keys_span.map(at) {
                for key in k.split(|&b| b == b' ').filter(|k| !k.is_empty()) {
                    push_str(&mut self.keys_offsets, &mut self.keys_data, key);
                    split.keys.push(span(key));
                }
            }
            split.tags = tags_span;
            if !record {
                split.held = false;
            }
        }
        if include_properties {
            self.props_map_offsets
                .push((self.props_key_offsets.len() - 1) as i32);
        } else {
            self.props_map_offsets.push(0);
        }
        match tags {
            Some(t) => {
                self.tags_valid[row / 8] |= 1 << (row % 8);
                push_str(&mut self.tags_offsets, &mut self.tags_data, t);
            }
            None => self.tags_offsets.push(self.tags_data.len() as i32),
        }
        let keys_count = self.keys_offsets.len() - 1;
        self.keys_list_offsets.push(keys_count as i32);
        self.rows += 1;
        Ok(())
    }
}

/// A field inside a record's properties: its start and end there.
type Span = (u32, u32);

/// The split of the last record's properties, kept for the next record: what the columns take
/// from them (every (name, value) pair with both parts non-empty, the TAGS value, the KEYS
/// entries) as spans of the properties bytes, with a copy of those bytes. Consecutive records
/// very often carry equal properties (every message of one `put_messages` batch does); the
/// next record's properties are then one comparison instead of a parse. When records keep
/// differing (each has a `UNIQ_KEY` of its own, as messages from RocketMQ clients do), the
/// comparisons and the copies stop for a while and resume later.
#[derive(Debug, Default)]
struct PropsSplit {
    bytes: Vec<u8>,
    /// `bytes` and the spans describe a record's properties.
    held: bool,
    pairs: Vec<(Span, Span)>,
    tags: Option<Span>,
    keys: Vec<Span>,
    /// Comparisons that failed in a row.
    misses: u32,
    /// Records left to parse before comparing and recording again.
    paused: u32,
}

/// Failed comparisons in a row after which [`PropsSplit`] pauses, and for how many records.
const SPLIT_MISSES_BEFORE_PAUSE: u32 = 4;
const SPLIT_PAUSE: u32 = 60;

impl PropsSplit {
    /// Whether `props` equal the properties held (their spans then apply to `props`).
    fn reusable(&mut self, props: &[u8]) -> bool {
        if !self.held {
            return false;
        }
        if self.bytes == props {
            self.misses = 0;
            return true;
        }
        self.misses += 1;
        if self.misses >= SPLIT_MISSES_BEFORE_PAUSE {
            self.misses = 0;
            self.held = false;
            self.paused = SPLIT_PAUSE;
        }
        false
    }

    /// Before `props` are parsed: whether to record their split (the spans are cleared and the
    /// bytes copied when so).
    fn begin(&mut self, props: &[u8]) -> bool {
        if self.paused > 0 {
            self.paused -= 1;
            return false;
        }
        self.bytes.clear();
        self.bytes.extend_from_slice(props);
        self.pairs.clear();
        self.keys.clear();
        self.tags = None;
        self.held = true;
        true
    }
}

/// Most bytes of bodies (and of any other variable column) one bulk read returns, so that the
/// i32 offsets of the Arrow columns cannot overflow.
pub const READ_BATCH_MAX_BYTES: usize = 512 * 1024 * 1024;

/// Units from which a bulk read is split over two threads.
pub const PARALLEL_READ_UNITS: usize = 16 * 1024;

/// What a bulk read builds and checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// Build the `properties` column (the other columns are always built).
    pub include_properties: bool,
    /// Verify each record's body CRC.
    pub check_crc: bool,
    /// Give compressed bodies back decompressed.
    pub decompress: bool,
}

/// Bulk read of a queue from `offset`: up to `max_msgs` messages as Arrow column buffers,
/// across consume queue segments. Units whose records are gone (their segment deleted) are
/// skipped; a unit whose record is there but damaged (not the unit's message, or a body CRC
/// mismatch with `check_crc`), or whose body cannot be decompressed, fails the read with a
/// [`StoreError::CorruptRecord`] naming the segment, the offset and the queue offset. A large
/// read is built by two threads, each over half of the units, and joined.
pub fn read_batch(
    commitlog: &CommitLog,
    cq: &ConsumeQueue,
    offset: i64,
    max_msgs: usize,
    opts: ReadOptions,
) -> Result<BatchColumns> {
    let max = cq.max_offset();
    let start = offset.max(cq.min_offset());
    // Any count, however large, asks for at most the rest of the queue.
    let max_msgs_i64 = i64::try_from(max_msgs).unwrap_or(i64::MAX);
    let n = max.saturating_sub(start).clamp(0, max_msgs_i64) as usize;
    if n < PARALLEL_READ_UNITS {
        return read_range(commitlog, cq, start, max, max_msgs, n, opts);
    }
    let mid = start + (n / 2) as i64;
    let second_half = || {
        read_range(
            commitlog,
            cq,
            mid,
            start + n as i64,
            n - n / 2,
            n - n / 2,
            opts,
        )
    };
    let (first, second) = std::thread::scope(|s| {
        let second = std::thread::Builder::new().spawn_scoped(s, second_half);
        // The first half's vectors have room for both, so the join never regrows them (a
        // regrown vector's new pages would be faulted in afresh).
        let first = read_range(commitlog, cq, start, mid, n / 2, n, opts);
        // No thread could be started: this one reads the second half too.
        let second = match second {
            Ok(j) => j.join().ok(),
            Err(_) => Some(second_half()),
        };
        (first, second)
    });
    let mut first = match first {
        Ok(first) => first,
        Err(e) => {
            if let Some(Ok(second)) = second {
                second.recycle();
            }
            return Err(e);
        }
    };
    match second {
        Some(Ok(second)) => {
            // When the first half stopped early (size cap), the second would leave a gap.
            if first.next_offset >= mid {
                first.append(&second);
            }
            second.recycle();
        }
        Some(Err(e)) => {
            first.recycle();
            return Err(e);
        }
        None => {}
    }
    Ok(first)
}

/// Reads units `[start, limit)`, at most `max_rows` messages, into vectors with room for the
/// `room` units from `start` (at least the rows read).
fn read_range(
    commitlog: &CommitLog,
    cq: &ConsumeQueue,
    start: i64,
    limit: i64,
    max_rows: usize,
    room: usize,
    opts: ReadOptions,
) -> Result<BatchColumns> {
    let n = limit
        .saturating_sub(start)
        .clamp(0, i64::try_from(max_rows).unwrap_or(i64::MAX)) as usize;
    let room = room.max(n);
    // Size the body column from the record sizes in the queue so it never regrows.
    let mut bytes = 0usize;
    if room > 0 {
        cq.scan(start, start + room as i64, |u| {
            bytes += u.size.max(0) as usize;
            true
        });
    }
    let mut cols = BatchColumns::with_capacity(room, bytes.min(READ_BATCH_MAX_BYTES));
    let mut next = start;
    let mut file: Option<std::sync::Arc<crate::file::mapped_file::MappedFile>> = None;
    let mut split = PropsSplit::default();
    let mut failed: Option<StoreError> = None;
    cq.scan(start, limit, |u| {
        if cols.rows >= max_rows {
            return false;
        }
        next = u.queue_offset + 1;
        if u.is_pre_blank() {
            return true;
        }
        let in_file = file.as_ref().is_some_and(|f| {
            u.phy_offset >= f.file_from_offset()
                && u.phy_offset < f.file_from_offset() + f.file_size()
        });
        if !in_file {
            file = commitlog.queue().find_by_offset(u.phy_offset);
        }
        let Some(f) = file.as_ref() else {
            return true;
        };
        let Some(data) = f.read(u.phy_offset - f.file_from_offset(), i64::from(u.size)) else {
            return true;
        };
        let damaged = |reason: String| {
            StoreError::corrupt_record(
                f.path(),
                u.phy_offset,
                format!(
                    "{reason} (queue {}/{} offset {})",
                    cq.topic(),
                    cq.queue_id(),
                    u.queue_offset
                ),
            )
        };
        let Some(d) = view_record(data).filter(|d| d.physical_offset == u.phy_offset) else {
            failed = Some(damaged(format!(
                "the consume queue unit points at {} bytes that are not its message record",
                u.size
            )));
            return false;
        };
        if opts.check_crc && !body_crc_matches(d.body, d.body_crc) {
            failed = Some(damaged(format!(
                "its body CRC is {:#010x} but its {}-byte body has {:#010x}",
                d.body_crc,
                d.body.len(),
                crate::util::masked_crc32(d.body)
            )));
            return false;
        }
        if let Err(e) = cols.push(&d, cq.queue_id(), u.phy_offset, opts, &mut split) {
            failed = Some(damaged(e.0));
            return false;
        }
        // The size cap: stop after this row.
        cols.body_data.len() <= READ_BATCH_MAX_BYTES / 2
            && cols.props_value_data.len() <= READ_BATCH_MAX_BYTES / 2
    });
    if let Some(e) = failed {
        cols.recycle();
        return Err(e);
    }
    cols.next_offset = next;
    Ok(cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_expressions_trim_as_java_does() {
        // Java's String.trim() strips code points <= U+0020 only.
        for tag in ["Paid\u{a0}", "Paid\u{2028}", "\u{3000}Paid", "Paid\u{85}"] {
            let f = TagFilter::parse(&format!(" {tag} || Other\t"));
            assert!(
                f.matches_tag(|| Some(tag)),
                "{tag:?} must stay subscribable"
            );
            assert!(f.matches_code(i64::from(java_hash(tag))));
            assert!(f.matches_tag(|| Some("Other")));
            assert!(!f.matches_tag(|| Some("Paid")));
        }
        let f = TagFilter::parse("\u{1}\u{1f}TagA\u{0} ||\n TagB ");
        assert!(f.matches_tag(|| Some("TagA")) && f.matches_tag(|| Some("TagB")));
        assert!(TagFilter::parse(" \t\r\n ").is_all());
        assert!(
            !TagFilter::parse("\u{a0}").is_all(),
            "a no-break space is a tag in Java"
        );
        assert_eq!(java_trim("\u{3000} x \u{20}"), "\u{3000} x");
    }

    #[test]
    fn short_strings_are_copied_exactly_at_every_length_and_room() {
        let text: Vec<u8> = (1..=40u8).collect();
        for n in 0..=20 {
            for start in [0usize, 3] {
                let s = &text[start..start + n];
                // Exactly enough room, more room, and not enough room (falls back).
                for room in [n, n + 9, n.saturating_sub(1)] {
                    let mut data = Vec::with_capacity(2 + room);
                    data.extend_from_slice(&[0xAA, 0xBB]);
                    let mut offsets = vec![0];
                    push_str(&mut offsets, &mut data, s);
                    assert_eq!(&data[..2], &[0xAA, 0xBB]);
                    assert_eq!(&data[2..], s, "n={n} start={start} room={room}");
                    assert_eq!(offsets, vec![0, (2 + n) as i32]);
                }
            }
        }
    }
}
