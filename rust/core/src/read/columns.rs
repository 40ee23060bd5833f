//! The Arrow columns of a bulk read: the column vectors, how one record becomes a row (with
//! the split of the last record's properties kept for the next), and how two halves read on
//! two threads are joined.

use crate::format::compression::{decompress_into, DecompressError};
use crate::format::{for_each_property, keep_last_of_each, sysflag, RecordView};

use std::sync::Arc;

use crate::file::segment_view::SegmentView;

use super::batch::ReadOptions;
use super::mask::{Column, ColumnMask};
use super::row_filter::Scanned;
use super::vec_pool;

/// Columns of a bulk read, laid out as Arrow buffers (little-endian values and i32 offsets, as
/// the Arrow format requires; these are in-memory buffers handed to pyarrow, not a file format).
#[derive(Debug, Default, Clone)]
pub struct BatchColumns {
    pub rows: usize,
    /// The columns built; the vectors of the others are empty.
    pub columns: ColumnMask,
    /// Queue offset after the last unit read (where the next read starts).
    pub next_offset: i64,
    /// The units gone over whose record was there (see [`Scanned`]).
    pub scanned: Scanned,
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
    /// Bodies of the `binary` layout; with `binary_view`, the bodies that were decompressed
    /// (the last data buffer).
    pub body_data: Vec<u8>,
    /// `binary_view` bodies: one 16-byte view a row (Arrow's layout: length, then the body when
    /// at most 12 bytes, else its first 4 bytes, buffer index and offset), empty otherwise.
    pub body_views: Vec<u8>,
    /// `binary_view` data buffers, in order: ranges of the mapped segments; `body_data` comes
    /// after them.
    pub body_buffers: Vec<BodyBuffer>,
    /// Views that point into `body_data` but still carry [`OWNED_BUFFER`] as buffer index
    /// (none in a returned batch).
    pub(crate) owned_views: usize,
}

/// A dropped batch gives its vectors to the pool ([`crate::read::vec_pool`]) for the next reads,
/// so that a read loop in Rust does not fault fresh pages in for every batch either.
impl Drop for BatchColumns {
    fn drop(&mut self) {
        for (_, v) in self.take_named() {
            v.recycle();
        }
    }
}

/// A range of a segment's read-only mapping that `binary_view` bodies point into; holding it
/// keeps the mapping (and the bytes, see [`SegmentView`]) alive.
#[derive(Debug, Clone)]
pub struct BodyBuffer {
    pub view: Arc<SegmentView>,
    pub start: i64,
    pub end: i64,
}

impl BodyBuffer {
    /// The bytes of the range.
    pub fn bytes(&self) -> &[u8] {
        self.view
            .bytes(self.start, self.end)
            .expect("body buffers lie inside their segment")
    }
}

/// Buffer index of a view into `body_data` until the number of segment buffers is known.
const OWNED_BUFFER: u32 = u32::MAX;

/// Most bytes a `binary_view` data buffer spans (its offsets are i32).
pub(crate) const VIEW_BUFFER_MAX: i64 = i32::MAX as i64;

/// Bodies up to this length live in their view (Arrow's inline limit).
const VIEW_INLINE_MAX: usize = 12;

#[inline(always)]
fn push_inline_view(views: &mut Vec<u8>, body: &[u8]) {
    let mut v = [0u8; 16];
    v[..4].copy_from_slice(&(body.len() as u32).to_le_bytes());
    v[4..4 + body.len()].copy_from_slice(body);
    views.extend_from_slice(&v);
}

#[inline(always)]
fn push_ref_view(views: &mut Vec<u8>, body: &[u8], buffer: u32, offset: u32) {
    let mut v = [0u8; 16];
    v[..4].copy_from_slice(&(body.len() as u32).to_le_bytes());
    v[4..8].copy_from_slice(&body[..4]);
    v[8..12].copy_from_slice(&buffer.to_le_bytes());
    v[12..16].copy_from_slice(&offset.to_le_bytes());
    views.extend_from_slice(&v);
}

/// Where the body of the record being pushed lies, for a `binary_view` row: its segment's view
/// and its offset there.
pub(super) struct BodyAt<'a> {
    pub view: &'a Arc<SegmentView>,
    pub offset: i64,
}

/// One column vector of a bulk read, by element type.
#[derive(Debug)]
pub enum ColumnVec {
    U8(Vec<u8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl ColumnVec {
    fn capacity_bytes(&self) -> usize {
        match self {
            ColumnVec::U8(v) => v.capacity(),
            ColumnVec::I32(v) => v.capacity() * 4,
            ColumnVec::I64(v) => v.capacity() * 8,
        }
    }

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

    /// Gives the vector to the pool of dropped batches (`read::vec_pool`); one too small to
    /// be kept is freed without taking the pool's lock.
    pub fn recycle(self) {
        if self.capacity_bytes() < vec_pool::POOL_MIN_BYTES {
            return;
        }
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
    /// No rows, of the columns of `mask` (a `binary` body column when asked).
    pub(crate) fn empty_of(mask: ColumnMask) -> BatchColumns {
        BatchColumns::with_mask(0, 0, false, mask)
    }

    /// Appends the rows of `other` (read right after these). The bodies, most of the bytes,
    /// are copied by a second thread while this one copies the other columns (on this thread
    /// too when no thread can be started).
    pub(super) fn append(&mut self, other: &BatchColumns) {
        if !self.columns.contains(Column::Body) {
            self.append_except_bodies(other);
            return;
        }
        if !other.body_views.is_empty() || !other.body_buffers.is_empty() {
            self.append_views(other);
            self.append_except_bodies(other);
            return;
        }
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

    /// [`BatchColumns::append`] of `binary_view` bodies: the views of `other` rebased onto
    /// this batch's buffers, its buffers after this one's.
    fn append_views(&mut self, other: &BatchColumns) {
        // The halves usually meet inside one segment: its two buffers become one.
        let merged = match (self.body_buffers.last(), other.body_buffers.first()) {
            (Some(a), Some(b))
                if Arc::ptr_eq(&a.view, &b.view)
                    && b.start >= a.start
                    && a.end.max(b.end) - a.start <= VIEW_BUFFER_MAX =>
            {
                Some((b.start - a.start) as u32)
            }
            _ => None,
        };
        let first = self.body_buffers.len() as u32 - u32::from(merged.is_some());
        let owned = self.body_data.len() as u32;
        for v in other.body_views.chunks_exact(16) {
            let mut v: [u8; 16] = v.try_into().expect("16-byte chunk");
            let len = u32::from_le_bytes(v[..4].try_into().expect("4 bytes"));
            if len as usize > VIEW_INLINE_MAX {
                let index = u32::from_le_bytes(v[8..12].try_into().expect("4 bytes"));
                let offset = u32::from_le_bytes(v[12..16].try_into().expect("4 bytes"));
                let (index, offset) = match (index, merged) {
                    (OWNED_BUFFER, _) => (OWNED_BUFFER, offset + owned),
                    (0, Some(shift)) => (first, offset + shift),
                    _ => (index + first, offset),
                };
                v[8..12].copy_from_slice(&index.to_le_bytes());
                v[12..16].copy_from_slice(&offset.to_le_bytes());
            }
            self.body_views.extend_from_slice(&v);
        }
        let mut rest = other.body_buffers.iter();
        if merged.is_some() {
            if let (Some(a), Some(b)) = (self.body_buffers.last_mut(), rest.next()) {
                a.end = a.end.max(b.end);
            }
        }
        self.body_buffers.extend(rest.cloned());
        self.body_data.extend_from_slice(&other.body_data);
        self.owned_views += other.owned_views;
    }

    /// Once every row is in: the views into `body_data` get its buffer index (after the
    /// segment buffers), and the segments' views learn which bytes were handed out.
    pub(super) fn finish_views(&mut self) {
        if self.owned_views > 0 {
            let index = (self.body_buffers.len() as u32).to_le_bytes();
            for v in self.body_views.chunks_exact_mut(16) {
                let len = u32::from_le_bytes(v[..4].try_into().expect("4 bytes"));
                if len as usize > VIEW_INLINE_MAX && v[8..12] == OWNED_BUFFER.to_le_bytes() {
                    v[8..12].copy_from_slice(&index);
                }
            }
            self.owned_views = 0;
        }
        for b in &self.body_buffers {
            b.view.pin(b.end);
        }
    }

    /// Appends a `binary_view` row for `body`, which lies at `at` in its segment's view: in
    /// the view when short, else as a reference into the last buffer when it is of the same
    /// segment and stays within [`VIEW_BUFFER_MAX`] (`span_max`) bytes, else into a new one.
    #[inline]
    fn push_body_view(&mut self, body: &[u8], at: &BodyAt<'_>, span_max: i64) {
        if body.len() <= VIEW_INLINE_MAX {
            push_inline_view(&mut self.body_views, body);
            return;
        }
        let end = at.offset + body.len() as i64;
        let last = self.body_buffers.len().wrapping_sub(1);
        let fits = self.body_buffers.last_mut().filter(|b| {
            Arc::ptr_eq(&b.view, at.view) && at.offset >= b.start && end - b.start <= span_max
        });
        let (index, start) = match fits {
            Some(b) => {
                b.end = b.end.max(end);
                (last, b.start)
            }
            None => {
                self.body_buffers.push(BodyBuffer {
                    view: at.view.clone(),
                    start: at.offset,
                    end,
                });
                (self.body_buffers.len() - 1, at.offset)
            }
        };
        push_ref_view(
            &mut self.body_views,
            body,
            index as u32,
            (at.offset - start) as u32,
        );
    }

    /// The `tags` validity bits of `other` after this batch's.
    fn append_tags_valid(&mut self, other: &BatchColumns) {
        if self.rows.is_multiple_of(8) {
            // The bits of `other` start a byte here: its bytes as they are (the bits past its
            // last row are 0, as `push_properties` leaves them).
            self.tags_valid.extend_from_slice(&other.tags_valid);
            return;
        }
        for r in 0..other.rows {
            let row = self.rows + r;
            if row.is_multiple_of(8) {
                self.tags_valid.push(0);
            }
            if other.tags_valid[r / 8] & (1 << (r % 8)) != 0 {
                self.tags_valid[row / 8] |= 1 << (row % 8);
            }
        }
    }

    /// [`BatchColumns::append`] of every column but the bodies.
    fn append_except_bodies(&mut self, other: &BatchColumns) {
        if self.columns.contains(Column::Tags) {
            self.append_tags_valid(other);
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
        self.scanned = self.scanned.then(other.scanned);
    }

    /// Room for `n` rows and `body_bytes` of bodies, in vectors from the pool of dropped
    /// batches ([`crate::read::vec_pool`]) where it has them, for the columns of `mask` only
    /// (the others get no vector); with `views`, the bodies are `binary_view` rows
    /// (`body_bytes` is then the room for decompressed bodies).
    pub(super) fn with_mask(
        n: usize,
        body_bytes: usize,
        views: bool,
        mask: ColumnMask,
    ) -> BatchColumns {
        use Column::*;
        let mut c = vec_pool::with_pool(|p| {
            // A vector of `len` elements when `column` is built, else none.
            let mut take_u8 = |column: Column, len: usize| -> Vec<u8> {
                if mask.contains(column) {
                    p.take(len)
                } else {
                    Vec::new()
                }
            };
            let (topic_data, tags_valid, tags_data, keys_data) = (
                take_u8(Topic, n * 16),
                take_u8(Tags, n / 8 + 1),
                take_u8(Tags, n * 8),
                take_u8(Keys, n * 16),
            );
            let (props_key_data, props_value_data) =
                (take_u8(Properties, n * 8), take_u8(Properties, n * 16));
            let body_data = take_u8(Body, body_bytes);
            let body_views = take_u8(Body, if views { n * 16 } else { 0 });
            let mut take_i32 = |column: Column, len: usize| -> Vec<i32> {
                if mask.contains(column) {
                    p.take(len)
                } else {
                    Vec::new()
                }
            };
            let (topic_offsets, queue_id) = (take_i32(Topic, n + 1), take_i32(QueueId, n));
            let tags_offsets = take_i32(Tags, n + 1);
            let (keys_list_offsets, keys_offsets) =
                (take_i32(Keys, n + 1), take_i32(Keys, n * 2 + 1));
            // Room for two properties a row (tags and keys, the usual ones) without regrowing.
            let (props_map_offsets, props_key_offsets, props_value_offsets) = (
                take_i32(Properties, n + 1),
                take_i32(Properties, n * 2 + 1),
                take_i32(Properties, n * 2 + 1),
            );
            let body_offsets = take_i32(Body, if views { 1 } else { n + 1 });
            let mut take_i64 = |column: Column| -> Vec<i64> {
                if mask.contains(column) {
                    p.take(n)
                } else {
                    Vec::new()
                }
            };
            BatchColumns {
                topic_offsets,
                topic_data,
                queue_id,
                queue_offset: take_i64(QueueOffset),
                commit_log_offset: take_i64(CommitLogOffset),
                store_timestamp: take_i64(StoreTimestamp),
                born_timestamp: take_i64(BornTimestamp),
                tags_valid,
                tags_offsets,
                tags_data,
                keys_list_offsets,
                keys_offsets,
                keys_data,
                props_map_offsets,
                props_key_offsets,
                props_key_data,
                props_value_offsets,
                props_value_data,
                body_offsets,
                body_data,
                body_views,
                body_buffers: Vec::new(),
                owned_views: 0,
                rows: 0,
                columns: mask,
                next_offset: 0,
                scanned: Scanned::default(),
            }
        });
        let offsets = [
            (Topic, &mut c.topic_offsets),
            (Tags, &mut c.tags_offsets),
            (Keys, &mut c.keys_list_offsets),
            (Keys, &mut c.keys_offsets),
            (Properties, &mut c.props_map_offsets),
            (Properties, &mut c.props_key_offsets),
            (Properties, &mut c.props_value_offsets),
            (Body, &mut c.body_offsets),
        ];
        for (column, v) in offsets {
            if mask.contains(column) {
                v.push(0);
            }
        }
        c
    }

    /// Every column vector with its name, in one list: what the binding hands to Python and
    /// what `BatchColumns::recycle` gives back to the pool.
    pub fn into_named(mut self) -> [(&'static str, ColumnVec); 21] {
        self.take_named()
    }

    /// [`BatchColumns::into_named`], leaving empty vectors behind.
    fn take_named(&mut self) -> [(&'static str, ColumnVec); 21] {
        use std::mem::take;
        use ColumnVec::{I32, I64, U8};
        let c = self;
        [
            ("topic_offsets", I32(take(&mut c.topic_offsets))),
            ("topic_data", U8(take(&mut c.topic_data))),
            ("queue_id", I32(take(&mut c.queue_id))),
            ("queue_offset", I64(take(&mut c.queue_offset))),
            ("commit_log_offset", I64(take(&mut c.commit_log_offset))),
            ("store_timestamp", I64(take(&mut c.store_timestamp))),
            ("born_timestamp", I64(take(&mut c.born_timestamp))),
            ("tags_valid", U8(take(&mut c.tags_valid))),
            ("tags_offsets", I32(take(&mut c.tags_offsets))),
            ("tags_data", U8(take(&mut c.tags_data))),
            ("keys_list_offsets", I32(take(&mut c.keys_list_offsets))),
            ("keys_offsets", I32(take(&mut c.keys_offsets))),
            ("keys_data", U8(take(&mut c.keys_data))),
            ("props_map_offsets", I32(take(&mut c.props_map_offsets))),
            ("props_key_offsets", I32(take(&mut c.props_key_offsets))),
            ("props_key_data", U8(take(&mut c.props_key_data))),
            ("props_value_offsets", I32(take(&mut c.props_value_offsets))),
            ("props_value_data", U8(take(&mut c.props_value_data))),
            ("body_offsets", I32(take(&mut c.body_offsets))),
            ("body_data", U8(take(&mut c.body_data))),
            ("body_views", U8(take(&mut c.body_views))),
        ]
    }

    /// Gives every vector to the pool of dropped batches, for the next reads (as dropping the
    /// batch does).
    pub(crate) fn recycle(self) {
        drop(self);
    }

    /// Appends the row of record `d`; with `decompress`, a compressed body is appended
    /// decompressed. An undecompressible body leaves every column as it was.
    pub(super) fn push(
        &mut self,
        d: &RecordView<'_>,
        queue_id: i32,
        phy_offset: i64,
        opts: ReadOptions,
        split: &mut PropsSplit,
        body_at: Option<BodyAt<'_>>,
    ) -> Result<(), DecompressError> {
        let m = opts.columns;
        // The body first: it is the only part that can fail.
        if m.contains(Column::Body) {
            self.push_body(d, opts, body_at)?;
        }
        let row = self.rows;
        if m.contains(Column::Topic) {
            push_str(&mut self.topic_offsets, &mut self.topic_data, d.topic);
        }
        if m.contains(Column::QueueId) {
            self.queue_id.push(queue_id);
        }
        if m.contains(Column::QueueOffset) {
            self.queue_offset.push(d.queue_offset);
        }
        if m.contains(Column::CommitLogOffset) {
            self.commit_log_offset.push(phy_offset);
        }
        if m.contains(Column::StoreTimestamp) {
            self.store_timestamp.push(d.store_timestamp);
        }
        if m.contains(Column::BornTimestamp) {
            self.born_timestamp.push(d.born_timestamp);
        }
        if m.needs_properties() {
            self.push_properties(d.properties, m, split, row);
        }
        self.rows += 1;
        Ok(())
    }

    /// The body of `d` (see [`BatchColumns::push`]).
    #[inline(always)]
    fn push_body(
        &mut self,
        d: &RecordView<'_>,
        opts: ReadOptions,
        body_at: Option<BodyAt<'_>>,
    ) -> Result<(), DecompressError> {
        let compressed = opts.decompress && d.sys_flag & sysflag::COMPRESSED != 0;
        match body_at {
            Some(at) if !compressed => self.push_body_view(d.body, &at, opts.view_buffer_max),
            Some(_) => {
                let start = self.body_data.len();
                decompress_into(d.sys_flag, d.body, &mut self.body_data)?;
                let body = &self.body_data[start..];
                if body.len() <= VIEW_INLINE_MAX {
                    push_inline_view(&mut self.body_views, body);
                    self.body_data.truncate(start);
                } else {
                    push_ref_view(&mut self.body_views, body, OWNED_BUFFER, start as u32);
                    self.owned_views += 1;
                }
            }
            None if compressed => {
                decompress_into(d.sys_flag, d.body, &mut self.body_data)?;
                self.body_offsets.push(self.body_data.len() as i32);
            }
            None => push_str(&mut self.body_offsets, &mut self.body_data, d.body),
        }
        Ok(())
    }

    /// The `tags`, `keys` and `properties` of row `row` (those of `m`) from the record's
    /// properties `props`, parsed once or taken from the split of the last record's.
    #[inline(always)]
    fn push_properties(&mut self, props: &[u8], m: ColumnMask, split: &mut PropsSplit, row: usize) {
        let (want_tags, want_keys) = (m.contains(Column::Tags), m.contains(Column::Keys));
        let include_properties = m.contains(Column::Properties);
        if want_tags && row.is_multiple_of(8) {
            self.tags_valid.push(0);
        }
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
            if want_keys {
                for &k in &split.keys {
                    push_str(&mut self.keys_offsets, &mut self.keys_data, at(k));
                }
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
                    if want_keys {
                        push_str(&mut self.keys_offsets, &mut self.keys_data, key);
                    }
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
        }
        if want_tags {
            match tags {
                Some(t) => {
                    self.tags_valid[row / 8] |= 1 << (row % 8);
                    push_str(&mut self.tags_offsets, &mut self.tags_data, t);
                }
                None => self.tags_offsets.push(self.tags_data.len() as i32),
            }
        }
        if want_keys {
            let keys_count = self.keys_offsets.len() - 1;
            self.keys_list_offsets.push(keys_count as i32);
        }
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
pub(super) struct PropsSplit {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_buffers_split_at_the_span_limit() {
        use std::io::Write;
        let path = std::env::temp_dir().join(format!("rmq-viewsplit-{}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let content: Vec<u8> = (0..8192u32).map(|i| (i % 253) as u8).collect();
        f.write_all(&content).unwrap();
        let view = SegmentView::open(&f, &path, 8192).unwrap();
        let mut c = BatchColumns::with_mask(8, 0, true, ColumnMask::ALL);
        // (offset, length): with a 100-byte limit, buffers [0, 90), [100, 190), [300, 340),
        // then a body before the last buffer's start opens another, and a short one is inline.
        let rows = [
            (0, 40),
            (50, 40),
            (100, 40),
            (150, 40),
            (300, 40),
            (200, 13),
            (9, 12),
        ];
        for &(at, len) in &rows {
            let body = &content[at..at + len];
            let at = BodyAt {
                view: &view,
                offset: at as i64,
            };
            c.push_body_view(body, &at, 100);
        }
        let spans: Vec<(i64, i64)> = c.body_buffers.iter().map(|b| (b.start, b.end)).collect();
        assert_eq!(spans, [(0, 90), (100, 190), (300, 340), (200, 213)]);
        for (v, &(at, len)) in c.body_views.chunks_exact(16).zip(&rows) {
            assert_eq!(u32::from_le_bytes(v[..4].try_into().unwrap()) as usize, len);
            if len <= VIEW_INLINE_MAX {
                assert_eq!(&v[4..4 + len], &content[at..at + len]);
                continue;
            }
            let index = u32::from_le_bytes(v[8..12].try_into().unwrap()) as usize;
            let offset = u32::from_le_bytes(v[12..16].try_into().unwrap()) as usize;
            assert!(offset + len <= 100);
            let b = &c.body_buffers[index].bytes()[offset..offset + len];
            assert_eq!(b, &content[at..at + len]);
        }
        c.finish_views();
        drop(c);
        drop(view);
        std::fs::remove_file(&path).unwrap();
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
