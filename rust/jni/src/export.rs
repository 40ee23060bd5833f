//! A bulk read's columns as one Arrow struct array (the columns of a record batch), exported
//! through the Arrow C Data Interface into an `ArrowArray` / `ArrowSchema` pair that the JVM
//! allocated. The column vectors are not copied: each Arrow buffer owns its vector, and when the
//! consumer calls the array's release callback (Arrow Java does once the last vector over it is
//! closed) the vectors go back to the core's pool of read vectors and the segment ranges that
//! `binary_view` bodies point into are let go.
//!
//! Every live buffer is counted ([`allocations`]) so that the JVM side can check that a read,
//! a `limit` or a failed task gave every buffer back.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use arrow_buffer::Buffer;
use arrow_data::ffi::FFI_ArrowArray;
use arrow_data::ArrayData;
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{DataType, Field, Fields, TimeUnit};
use rmqstore_core::read::{BatchColumns, BodyBuffer, Column, ColumnMask, ColumnVec};

/// Columns a read can export, as bits of the column mask the JVM passes (the Java class
/// `rmqstore.jni.Columns` has the same values). `topic` and `queue_id` are constants of a
/// queue's read and are never exported.
pub const QUEUE_OFFSET: i32 = 1;
pub const COMMIT_LOG_OFFSET: i32 = 1 << 1;
pub const STORE_TIMESTAMP: i32 = 1 << 2;
pub const BORN_TIMESTAMP: i32 = 1 << 3;
pub const TAGS: i32 = 1 << 4;
pub const KEYS: i32 = 1 << 5;
pub const PROPERTIES: i32 = 1 << 6;
pub const BODY: i32 = 1 << 7;
pub const ALL: i32 = (1 << 8) - 1;

/// The core's column of each bit, in bit order.
const COLUMNS: [(i32, Column); 8] = [
    (QUEUE_OFFSET, Column::QueueOffset),
    (COMMIT_LOG_OFFSET, Column::CommitLogOffset),
    (STORE_TIMESTAMP, Column::StoreTimestamp),
    (BORN_TIMESTAMP, Column::BornTimestamp),
    (TAGS, Column::Tags),
    (KEYS, Column::Keys),
    (PROPERTIES, Column::Properties),
    (BODY, Column::Body),
];

/// The columns the core builds for an export of `mask`: those, and the queue offsets (the
/// reader checks the offsets a read returned against the ones it asked for).
pub fn core_mask(mask: i32) -> ColumnMask {
    COLUMNS
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .fold(ColumnMask::NONE.with(Column::QueueOffset), |m, (_, c)| {
            m.with(*c)
        })
}

static LIVE_BUFFERS: AtomicI64 = AtomicI64::new(0);
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

/// Exported buffers not yet released, and the bytes of the column vectors they hold (segment
/// ranges are mapped file pages, counted as buffers but not as bytes).
pub fn allocations() -> [i64; 2] {
    [
        LIVE_BUFFERS.load(Ordering::SeqCst),
        LIVE_BYTES.load(Ordering::SeqCst),
    ]
}

/// What one exported Arrow buffer owns.
enum Owned {
    Vector(ColumnVec),
    Segment(BodyBuffer),
}

/// The owner of an exported buffer's memory; dropped when the last Arrow buffer over it is.
struct Counted {
    owned: Owned,
    bytes: i64,
}

impl Drop for Counted {
    fn drop(&mut self) {
        LIVE_BUFFERS.fetch_sub(1, Ordering::SeqCst);
        LIVE_BYTES.fetch_sub(self.bytes, Ordering::SeqCst);
        if let Owned::Vector(v) =
            std::mem::replace(&mut self.owned, Owned::Vector(ColumnVec::U8(Vec::new())))
        {
            v.recycle();
        }
    }
}

fn counted(owned: Owned) -> Buffer {
    let bytes = match &owned {
        Owned::Vector(v) => v.bytes().len() as i64,
        Owned::Segment(_) => 0,
    };
    let slice: &[u8] = match &owned {
        Owned::Vector(v) => v.bytes(),
        Owned::Segment(s) => s.bytes(),
    };
    let (ptr, len) = (slice.as_ptr(), slice.len());
    LIVE_BUFFERS.fetch_add(1, Ordering::SeqCst);
    LIVE_BYTES.fetch_add(bytes, Ordering::SeqCst);
    let owner = Arc::new(Counted { owned, bytes });
    // A vector's pointer is never null (an empty one's is dangling and well aligned).
    let ptr = NonNull::new(ptr.cast_mut()).expect("vector pointers are not null");
    // SAFETY: `ptr..ptr + len` lies in memory `owner` owns and never changes: a column vector
    // is not touched again once taken out of its batch, and a segment range's bytes stay mapped
    // and unchanged while its `Arc<SegmentView>` lives (see the core's `SegmentView`).
    unsafe { Buffer::from_custom_allocation(ptr, len, owner) }
}

/// Takes the named vector out of the batch's list.
fn take(named: &mut [(&'static str, ColumnVec)], name: &str) -> ColumnVec {
    let slot = named
        .iter_mut()
        .find(|(n, _)| *n == name)
        .expect("the core names every column vector");
    std::mem::replace(&mut slot.1, ColumnVec::U8(Vec::new()))
}

fn vector(named: &mut [(&'static str, ColumnVec)], name: &str) -> Buffer {
    counted(Owned::Vector(take(named, name)))
}

fn utf8_field(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

/// The Arrow type of each exported column, as the JVM imports it: timestamps in microseconds
/// (Spark's `TimestampType`), keys a list of strings, properties a map of strings.
fn column_type(bit: i32, body_view: bool) -> Field {
    match bit {
        QUEUE_OFFSET => Field::new("queue_offset", DataType::Int64, false),
        COMMIT_LOG_OFFSET => Field::new("commit_log_offset", DataType::Int64, false),
        STORE_TIMESTAMP => Field::new(
            "store_timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        BORN_TIMESTAMP => Field::new(
            "born_timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        TAGS => utf8_field("tags", true),
        KEYS => Field::new(
            "keys",
            DataType::List(Arc::new(utf8_field("element", false))),
            false,
        ),
        PROPERTIES => Field::new("properties", map_type(), false),
        BODY => Field::new(
            "body",
            if body_view {
                DataType::BinaryView
            } else {
                DataType::Binary
            },
            false,
        ),
        _ => unreachable!("column bits are checked before export"),
    }
}

fn map_type() -> DataType {
    let entries = Field::new(
        "entries",
        DataType::Struct(Fields::from(vec![
            utf8_field("key", false),
            utf8_field("value", true),
        ])),
        false,
    );
    DataType::Map(Arc::new(entries), false)
}

/// A string array over offsets and data vectors (validity optional).
///
/// # Safety
/// The offsets are `rows + 1` ascending i32 values within the data, as the core builds them.
unsafe fn strings(
    rows: usize,
    offsets: Buffer,
    data: Buffer,
    validity: Option<Buffer>,
    nullable: bool,
) -> ArrayData {
    let b = ArrayData::builder(DataType::Utf8)
        .len(rows)
        .add_buffer(offsets)
        .add_buffer(data)
        .null_bit_buffer(if nullable { validity } else { None });
    // SAFETY: the caller's contract; string bytes are not checked for UTF-8 here (nothing in
    // this library reads them as `str`; the JVM takes them as bytes).
    unsafe { b.build_unchecked() }
}

/// Converts a vector of milliseconds since the epoch into microseconds, in place.
fn millis_to_micros(v: &mut ColumnVec, column: &str) -> Result<(), String> {
    if let ColumnVec::I64(values) = v {
        for t in values.iter_mut() {
            *t = t.checked_mul(1000).ok_or_else(|| {
                format!("{column} {t} ms is out of the range of a microsecond timestamp")
            })?;
        }
    }
    Ok(())
}

/// The columns of `columns` that `mask` selects, as one Arrow struct array and its type.
/// The vectors not selected go back to the pool at once.
fn build(
    mut batch: BatchColumns,
    mask: i32,
    body_view: bool,
) -> Result<(ArrayData, DataType), String> {
    let rows = batch.rows;
    let segments = std::mem::take(&mut batch.body_buffers);
    let mut named = batch.into_named();
    let mut fields = Vec::new();
    let mut children = Vec::new();
    for bit in (0..8).map(|i| 1 << i) {
        if mask & bit == 0 {
            continue;
        }
        let field = column_type(bit, body_view);
        let data = match bit {
            QUEUE_OFFSET | COMMIT_LOG_OFFSET => {
                let buf = vector(&mut named, field.name());
                // SAFETY: one i64 a row.
                unsafe {
                    ArrayData::builder(DataType::Int64)
                        .len(rows)
                        .add_buffer(buf)
                        .build_unchecked()
                }
            }
            STORE_TIMESTAMP | BORN_TIMESTAMP => {
                let mut v = take(&mut named, field.name());
                let converted = millis_to_micros(&mut v, field.name());
                let buf = counted(Owned::Vector(v));
                converted?;
                // SAFETY: one i64 a row.
                unsafe {
                    ArrayData::builder(field.data_type().clone())
                        .len(rows)
                        .add_buffer(buf)
                        .build_unchecked()
                }
            }
            TAGS => {
                let validity = vector(&mut named, "tags_valid");
                let (o, d) = (
                    vector(&mut named, "tags_offsets"),
                    vector(&mut named, "tags_data"),
                );
                // SAFETY: the core's offsets; the validity bitmap has a bit a row.
                unsafe { strings(rows, o, d, Some(validity).filter(|_| rows > 0), true) }
            }
            KEYS => {
                let list = vector(&mut named, "keys_list_offsets");
                let (o, d) = (
                    vector(&mut named, "keys_offsets"),
                    vector(&mut named, "keys_data"),
                );
                let n = o.len() / 4 - 1;
                // SAFETY: the core's offsets: `rows + 1` list offsets into `n` strings.
                unsafe {
                    let items = strings(n, o, d, None, false);
                    ArrayData::builder(field.data_type().clone())
                        .len(rows)
                        .add_buffer(list)
                        .add_child_data(items)
                        .build_unchecked()
                }
            }
            PROPERTIES => {
                let map = vector(&mut named, "props_map_offsets");
                let (ko, kd) = (
                    vector(&mut named, "props_key_offsets"),
                    vector(&mut named, "props_key_data"),
                );
                let (vo, vd) = (
                    vector(&mut named, "props_value_offsets"),
                    vector(&mut named, "props_value_data"),
                );
                let n = ko.len() / 4 - 1;
                let DataType::Map(entries, _) = field.data_type() else {
                    unreachable!("properties is a map")
                };
                // SAFETY: the core's offsets: `rows + 1` map offsets into `n` pairs.
                unsafe {
                    let entries = ArrayData::builder(entries.data_type().clone())
                        .len(n)
                        .add_child_data(strings(n, ko, kd, None, false))
                        .add_child_data(strings(n, vo, vd, None, false))
                        .build_unchecked();
                    ArrayData::builder(field.data_type().clone())
                        .len(rows)
                        .add_buffer(map)
                        .add_child_data(entries)
                        .build_unchecked()
                }
            }
            BODY if body_view => {
                let views = vector(&mut named, "body_views");
                let mut b = ArrayData::builder(DataType::BinaryView)
                    .len(rows)
                    .add_buffer(views);
                for s in &segments {
                    b = b.add_buffer(counted(Owned::Segment(s.clone())));
                }
                b = b.add_buffer(vector(&mut named, "body_data"));
                // SAFETY: the core's views index these data buffers, in this order (the
                // segment ranges, then the decompressed bodies), as Arrow's layout says.
                unsafe { b.build_unchecked() }
            }
            BODY => {
                let (o, d) = (
                    vector(&mut named, "body_offsets"),
                    vector(&mut named, "body_data"),
                );
                // SAFETY: the core's offsets.
                unsafe {
                    ArrayData::builder(DataType::Binary)
                        .len(rows)
                        .add_buffer(o)
                        .add_buffer(d)
                        .build_unchecked()
                }
            }
            _ => unreachable!("eight column bits"),
        };
        fields.push(field);
        children.push(data);
    }
    // What is not exported goes back to the pool now.
    for (_, v) in named {
        v.recycle();
    }
    drop(segments);
    let struct_type = DataType::Struct(Fields::from(fields));
    let mut builder = ArrayData::builder(struct_type.clone()).len(rows);
    for child in children {
        builder = builder.add_child_data(child);
    }
    // SAFETY: every child has `rows` rows.
    let data = unsafe { builder.build_unchecked() };
    Ok((data, struct_type))
}

/// Exports the selected columns of `batch` into the C structs at `array` and `schema`.
///
/// # Safety
/// `array` and `schema` point at writable `ArrowArray` and `ArrowSchema` structs that hold no
/// live data (released or never filled); the caller takes over both.
pub unsafe fn export(
    batch: BatchColumns,
    mask: i32,
    body_view: bool,
    array: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
) -> Result<(), String> {
    let (data, data_type) = build(batch, mask, body_view)?;
    let ffi_schema = FFI_ArrowSchema::try_from(&data_type).map_err(|e| e.to_string())?;
    let ffi_array = FFI_ArrowArray::new(&data);
    // SAFETY: the caller's contract; the structs may be unaligned in the JVM's memory.
    unsafe {
        std::ptr::write_unaligned(array, ffi_array);
        std::ptr::write_unaligned(schema, ffi_schema);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> BatchColumns {
        let mut b = BatchColumns::default();
        b.rows = 2;
        b.next_offset = 7;
        b.queue_offset = vec![5, 6];
        b.store_timestamp = vec![1_700_000_000_123, 1_700_000_000_124];
        b.tags_valid = vec![0b01];
        b.tags_offsets = vec![0, 4, 4];
        b.tags_data = b"TagA".to_vec();
        b
    }

    #[test]
    fn exported_buffers_are_counted_until_the_consumer_releases_them() {
        let mut array = FFI_ArrowArray::empty();
        let mut schema = FFI_ArrowSchema::empty();
        // SAFETY: both structs are empty and ours.
        unsafe {
            export(
                batch(),
                QUEUE_OFFSET | STORE_TIMESTAMP | TAGS,
                false,
                &mut array,
                &mut schema,
            )
        }
        .unwrap();
        // queue_offset, store_timestamp, tags validity + offsets + data.
        assert_eq!(allocations()[0], 5);
        assert_eq!(allocations()[1], 16 + 16 + 1 + 12 + 4);
        assert_eq!(array.len(), 2);
        assert_eq!(schema.format(), "+s");
        let children: Vec<(String, String)> = (0..schema.n_children)
            .map(|i| {
                let c = schema.child(i as usize);
                (c.name().unwrap().to_owned(), c.format().to_owned())
            })
            .collect();
        assert_eq!(
            children,
            [
                ("queue_offset".to_owned(), "l".to_owned()),
                ("store_timestamp".to_owned(), "tsu:UTC".to_owned()),
                ("tags".to_owned(), "u".to_owned()),
            ]
        );
        // The consumer's release (here: dropping the structs) gives every buffer back.
        drop(array);
        drop(schema);
        assert_eq!(allocations(), [0, 0]);
    }

    #[test]
    fn timestamps_past_the_microsecond_range_are_an_error() {
        let mut v = ColumnVec::I64(vec![1, i64::MAX / 1000 + 1]);
        let err = millis_to_micros(&mut v, "store_timestamp").unwrap_err();
        assert!(err.contains("out of the range"), "{err}");
        let mut v = ColumnVec::I64(vec![-2, 3]);
        millis_to_micros(&mut v, "store_timestamp").unwrap();
        assert_eq!(v.bytes(), ColumnVec::I64(vec![-2000, 3000]).bytes());
    }
}
