//! A batch of rows staged by the JVM connector's write tasks, received through the Arrow C Data
//! Interface and read in place: a struct array whose columns are, in this order, `topic`
//! (utf8), `body` (binary), `queue_id` (int32, null: not given), `tags` (utf8), `keys`
//! (list of utf8) and `properties` (map of utf8 to utf8), as `StagingWriter.java` writes them.
//!
//! The buffers are the JVM's: they are read while the imported array is held and released
//! (the C Data release callback) when it is dropped. Every offset is checked against the
//! buffers' lengths before a slice is made, so a malformed array is an error, never a read
//! out of bounds.

use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;

/// The staged columns and their C Data Interface format strings.
pub const COLUMNS: [(&str, &str); 6] = [
    ("topic", "u"),
    ("body", "z"),
    ("queue_id", "i"),
    ("tags", "u"),
    ("keys", "+l"),
    ("properties", "+m"),
];

type Res<T> = Result<T, String>;

/// A validity bitmap (none: every row is valid).
#[derive(Clone, Copy)]
struct Bits<'a> {
    bytes: Option<&'a [u8]>,
    offset: usize,
}

impl Bits<'_> {
    fn valid(&self, i: usize) -> bool {
        match self.bytes {
            None => true,
            Some(b) => {
                let j = self.offset + i;
                b[j / 8] >> (j % 8) & 1 == 1
            }
        }
    }
}

/// `len` items of `T` at buffer `index` of `array` (an empty slice when `len` is 0).
///
/// # Safety
/// `array` is a live imported array whose buffer `index` holds at least `len` items of `T`
/// (the C Data Interface's contract for the type its schema gives).
unsafe fn buffer<T>(array: &FFI_ArrowArray, index: usize, len: usize) -> Res<&[T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if index >= array.num_buffers() {
        return Err(format!("the array has no buffer {index}"));
    }
    let ptr = array.buffer(index) as *const T;
    if ptr.is_null() {
        return Err(format!("buffer {index} of a non-empty array is null"));
    }
    if !(ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(format!("buffer {index} is not aligned"));
    }
    // SAFETY: non-null, aligned, and (the caller's contract) `len` items long; the array,
    // which owns the buffer, outlives the returned borrow.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// The validity bitmap of `array` (buffer 0).
///
/// # Safety
/// As [`buffer`].
unsafe fn validity(array: &FFI_ArrowArray) -> Res<Bits<'_>> {
    let offset = array.offset();
    let bits = offset
        .checked_add(array.len())
        .ok_or("array length overflows")?;
    let bytes = if array.null_count() == 0 || array.buffer(0).is_null() {
        None
    } else {
        // SAFETY: a validity bitmap holds one bit per slot up to offset + length.
        Some(unsafe { buffer::<u8>(array, 0, bits.div_ceil(8))? })
    };
    Ok(Bits { bytes, offset })
}

/// `len + 1` checked offsets of a variable-size array (from its own offset): non-negative and
/// non-decreasing.
///
/// # Safety
/// As [`buffer`].
unsafe fn offsets(array: &FFI_ArrowArray) -> Res<&[i32]> {
    let len = array.len();
    let start = array.offset();
    let total = start
        .checked_add(len)
        .and_then(|n| n.checked_add(1))
        .ok_or("array length overflows")?;
    if len == 0 {
        return Ok(&[0]);
    }
    // SAFETY: a variable-size array has offset + length + 1 offsets.
    let all = unsafe { buffer::<i32>(array, 1, total)? };
    let own = &all[start..];
    if own[0] < 0 || own.windows(2).any(|w| w[1] < w[0]) {
        return Err("the offsets are negative or decreasing".to_owned());
    }
    Ok(own)
}

/// A utf8 or binary column.
pub struct Var<'a> {
    valid: Bits<'a>,
    offsets: &'a [i32],
    data: &'a [u8],
}

impl<'a> Var<'a> {
    /// # Safety
    /// `array` is a live imported utf8 or binary array.
    unsafe fn new(array: &'a FFI_ArrowArray) -> Res<Var<'a>> {
        // SAFETY: the caller's contract.
        let offsets = unsafe { offsets(array)? };
        let end = *offsets.last().expect("at least one offset") as usize;
        // SAFETY: the data buffer holds the bytes up to the last offset.
        let data = unsafe { buffer::<u8>(array, 2, end)? };
        Ok(Var {
            valid: unsafe { validity(array)? },
            offsets,
            data,
        })
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        if !self.valid.valid(i) {
            return None;
        }
        Some(&self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize])
    }

    /// Row `i` as text (`what` names the column in the error).
    pub fn text(&self, i: usize, what: &str) -> Res<Option<&'a str>> {
        self.get(i)
            .map(|b| std::str::from_utf8(b).map_err(|_| format!("column '{what}' is not UTF-8")))
            .transpose()
    }
}

/// A list (or map) column: `offsets` into its items.
struct Lists<'a> {
    valid: Bits<'a>,
    offsets: &'a [i32],
}

impl Lists<'_> {
    /// Item range of row `i` (empty when null).
    fn range(&self, i: usize) -> std::ops::Range<usize> {
        if !self.valid.valid(i) {
            return 0..0;
        }
        self.offsets[i] as usize..self.offsets[i + 1] as usize
    }
}

/// A staged batch, borrowed from its imported array.
pub struct Rows<'a> {
    pub len: usize,
    pub topic: Var<'a>,
    pub body: Var<'a>,
    queue_valid: Bits<'a>,
    queue_id: &'a [i32],
    pub tags: Var<'a>,
    keys: Lists<'a>,
    key_items: Var<'a>,
    props: Lists<'a>,
    prop_names: Var<'a>,
    prop_values: Var<'a>,
}

/// The imported array and its schema (released when dropped).
pub struct Staged {
    array: FFI_ArrowArray,
    schema: FFI_ArrowSchema,
}

impl Staged {
    /// Takes the array and schema at the two addresses (the C Data Interface's move: the
    /// structs there are left released).
    ///
    /// # Safety
    /// The addresses are those of an exported `ArrowArray` and `ArrowSchema`.
    pub unsafe fn import(array: *mut FFI_ArrowArray, schema: *mut FFI_ArrowSchema) -> Staged {
        // SAFETY: the caller's contract.
        unsafe {
            Staged {
                array: FFI_ArrowArray::from_raw(array),
                schema: FFI_ArrowSchema::from_raw(schema),
            }
        }
    }

    /// The batch's columns, once its schema is the staged one.
    pub fn rows(&self) -> Res<Rows<'_>> {
        let (a, s) = (&self.array, &self.schema);
        if a.is_released() || s.release.is_none() {
            return Err("the staged batch was released already".to_owned());
        }
        if s.format() != "+s" || s.n_children != COLUMNS.len() as i64 {
            return Err(format!(
                "a staged batch is a struct of {} columns, got format {:?} with {} children",
                COLUMNS.len(),
                s.format(),
                s.n_children
            ));
        }
        for (i, (name, format)) in COLUMNS.iter().enumerate() {
            let child = s.child(i);
            if child.name() != Some(name) || child.format() != *format {
                return Err(format!(
                    "staged column {i} is {:?} of format {:?}; expected {name:?} of {format:?}",
                    child.name(),
                    child.format()
                ));
            }
        }
        let nested = [(4, "+l", 1), (5, "+m", 1)];
        for (i, _, n) in nested {
            if s.child(i).n_children != n {
                return Err(format!("staged column {i} has the wrong children"));
            }
        }
        let entries = s.child(5).child(0);
        if s.child(4).child(0).format() != "u"
            || entries.format() != "+s"
            || entries.n_children != 2
            || entries.child(0).format() != "u"
            || entries.child(1).format() != "u"
        {
            return Err("staged keys or properties do not hold utf8 strings".to_owned());
        }
        if a.offset() != 0 || a.num_children() != COLUMNS.len() {
            return Err("a staged batch has no offset and six columns".to_owned());
        }
        let len = a.len();
        for i in 0..COLUMNS.len() {
            if a.child(i).len() < len {
                return Err(format!("staged column {i} is shorter than the batch"));
            }
        }
        let keys = a.child(4);
        let props = a.child(5);
        if keys.num_children() != 1 || props.num_children() != 1 {
            return Err("staged keys or properties have no items".to_owned());
        }
        let entry = props.child(0);
        if entry.offset() != 0 || entry.num_children() != 2 {
            return Err("staged property entries have an offset or no key and value".to_owned());
        }
        // SAFETY: the schema checked above gives every array's layout; each is live while
        // `self` is.
        unsafe {
            let queue = a.child(2);
            let rows = Rows {
                len,
                topic: Var::new(a.child(0))?,
                body: Var::new(a.child(1))?,
                queue_valid: validity(queue)?,
                queue_id: &buffer::<i32>(
                    queue,
                    1,
                    queue.offset().checked_add(len).ok_or("overflow")?,
                )?[queue.offset()..],
                tags: Var::new(a.child(3))?,
                keys: Lists {
                    valid: validity(keys)?,
                    offsets: offsets(keys)?,
                },
                key_items: Var::new(keys.child(0))?,
                props: Lists {
                    valid: validity(props)?,
                    offsets: offsets(props)?,
                },
                prop_names: Var::new(entry.child(0))?,
                prop_values: Var::new(entry.child(1))?,
            };
            let key_end = *rows.keys.offsets.last().expect("one offset") as usize;
            let prop_end = *rows.props.offsets.last().expect("one offset") as usize;
            if key_end > rows.key_items.len()
                || prop_end > rows.prop_names.len()
                || prop_end > rows.prop_values.len()
                || prop_end > entry.len()
            {
                return Err("staged keys or properties point past their items".to_owned());
            }
            Ok(rows)
        }
    }
}

impl<'a> Rows<'a> {
    /// The queue id of row `i`, if given.
    pub fn queue_id(&self, i: usize) -> Option<i32> {
        self.queue_valid.valid(i).then(|| self.queue_id[i])
    }

    /// The keys of row `i` (null items left out).
    pub fn keys(&self, i: usize, out: &mut Vec<&'a str>) -> Res<()> {
        out.clear();
        for k in self.keys.range(i) {
            if let Some(key) = self.key_items.text(k, "keys")? {
                out.push(key);
            }
        }
        Ok(())
    }

    /// The properties of row `i` (a null value is an error).
    pub fn properties(&self, i: usize, out: &mut Vec<(&'a str, &'a str)>) -> Res<()> {
        out.clear();
        for p in self.props.range(i) {
            let name = self.prop_names.text(p, "properties")?;
            let value = self.prop_values.text(p, "properties")?;
            match (name, value) {
                (Some(n), Some(v)) => out.push((n, v)),
                _ => return Err("a staged property has a null name or value".to_owned()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_buffer::{Buffer, NullBuffer};
    use arrow_data::ArrayData;
    use arrow_schema::{DataType, Field, Fields};

    use super::*;

    fn strings(items: &[Option<&str>]) -> ArrayData {
        let mut offsets = vec![0i32];
        let mut data = Vec::new();
        for s in items {
            data.extend_from_slice(s.unwrap_or("").as_bytes());
            offsets.push(data.len() as i32);
        }
        let nulls = NullBuffer::from(items.iter().map(Option::is_some).collect::<Vec<_>>());
        ArrayData::builder(DataType::Utf8)
            .len(items.len())
            .buffers(vec![Buffer::from_vec(offsets), Buffer::from_vec(data)])
            .nulls(Some(nulls))
            .build()
            .unwrap()
    }

    fn item(name: &str) -> Arc<Field> {
        Arc::new(Field::new(name, DataType::Utf8, false))
    }

    fn entries() -> Fields {
        Fields::from(vec![item("key"), item("value")])
    }

    /// Two rows: ("A", "x", 1, no tags, no keys, p=v) and ("B", "yy", no queue, "T", k1 k2,
    /// none); `topic_name` names the first column.
    fn batch(topic_name: &str) -> ArrayData {
        let keys = ArrayData::builder(DataType::List(item("item")))
            .len(2)
            .buffers(vec![Buffer::from_vec(vec![0i32, 0, 2])])
            .child_data(vec![strings(&[Some("k1"), Some("k2")])])
            .build()
            .unwrap();
        let entry = ArrayData::builder(DataType::Struct(entries()))
            .len(1)
            .child_data(vec![strings(&[Some("p")]), strings(&[Some("v")])])
            .build()
            .unwrap();
        let map_field = Arc::new(Field::new("entries", DataType::Struct(entries()), false));
        let props = ArrayData::builder(DataType::Map(map_field, false))
            .len(2)
            .buffers(vec![Buffer::from_vec(vec![0i32, 1, 1])])
            .child_data(vec![entry])
            .build()
            .unwrap();
        let body = ArrayData::builder(DataType::Binary)
            .len(2)
            .buffers(vec![
                Buffer::from_vec(vec![0i32, 1, 3]),
                Buffer::from_vec(b"xyy".to_vec()),
            ])
            .build()
            .unwrap();
        let queue = ArrayData::builder(DataType::Int32)
            .len(2)
            .buffers(vec![Buffer::from_vec(vec![1i32, 0])])
            .nulls(Some(NullBuffer::from(vec![true, false])))
            .build()
            .unwrap();
        let columns = [
            strings(&[Some("A"), Some("B")]),
            body,
            queue,
            strings(&[None, Some("T")]),
            keys,
            props,
        ];
        let fields: Vec<Field> = COLUMNS
            .iter()
            .zip(&columns)
            .map(|((name, _), c)| {
                let name = if *name == "topic" { topic_name } else { name };
                Field::new(name, c.data_type().clone(), true)
            })
            .collect();
        ArrayData::builder(DataType::Struct(Fields::from(fields)))
            .len(2)
            .child_data(columns.to_vec())
            .build()
            .unwrap()
    }

    fn import(data: &ArrayData) -> Staged {
        let mut array = FFI_ArrowArray::new(data);
        let mut schema = FFI_ArrowSchema::try_from(data.data_type()).unwrap();
        // SAFETY: both were exported just above.
        unsafe { Staged::import(&mut array, &mut schema) }
    }

    #[test]
    fn a_staged_batch_reads_back_row_by_row() {
        let staged = import(&batch("topic"));
        let rows = staged.rows().unwrap();
        assert_eq!(rows.len, 2);
        assert_eq!(rows.topic.text(1, "topic").unwrap(), Some("B"));
        assert_eq!(rows.body.get(1), Some(&b"yy"[..]));
        assert_eq!((rows.queue_id(0), rows.queue_id(1)), (Some(1), None));
        assert_eq!(rows.tags.text(0, "tags").unwrap(), None);
        let mut keys = Vec::new();
        rows.keys(1, &mut keys).unwrap();
        assert_eq!(keys, ["k1", "k2"]);
        rows.keys(0, &mut keys).unwrap();
        assert!(keys.is_empty());
        let mut props = Vec::new();
        rows.properties(0, &mut props).unwrap();
        assert_eq!(props, [("p", "v")]);
        rows.properties(1, &mut props).unwrap();
        assert!(props.is_empty());
    }

    #[test]
    fn another_schema_is_refused() {
        let staged = import(&batch("name"));
        let err = staged.rows().err().unwrap();
        assert!(err.contains("expected \"topic\""), "{err}");
    }

    #[test]
    fn decreasing_offsets_are_refused_not_read() {
        let good = batch("topic");
        let mut columns = good.child_data().to_vec();
        // SAFETY (of the test): a malformed array on purpose; only its buffers are read.
        columns[1] = unsafe {
            ArrayData::builder(DataType::Binary)
                .len(2)
                .buffers(vec![
                    Buffer::from_vec(vec![0i32, 3, 1]),
                    Buffer::from_vec(b"xyy".to_vec()),
                ])
                .build_unchecked()
        };
        let bad = unsafe {
            ArrayData::builder(good.data_type().clone())
                .len(2)
                .child_data(columns)
                .build_unchecked()
        };
        let staged = import(&bad);
        let err = staged.rows().err().unwrap();
        assert!(err.contains("decreasing"), "{err}");
    }
}
