//! `read_columns` with a column mask, on real files: every column built equals that column of
//! the full read (in both body layouts, with compressed bodies, on one thread and on two), the
//! columns left out get no vector, and the checks (a damaged body's CRC) do not depend on the
//! mask.

mod common;

use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

use common::TempDir;
use rmqstore_core::format::sysflag;
use rmqstore_core::read::{
    BatchColumns, BodyLayout, Column, ColumnMask, ReadRequest, PARALLEL_READ_UNITS,
};
use rmqstore_core::{Message, MessageStore, StoreConfig, StoreError};

fn config(seg: i64) -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: seg,
        mapped_file_size_consume_queue: 20 * 997,
        max_hash_slot_num: 64,
        max_index_num: 50,
        ..StoreConfig::default()
    }
}

fn dispatch(store: &MessageStore) {
    while store
        .dispatch_step(64 << 20, Duration::ZERO)
        .unwrap()
        .behind
        > 0
    {}
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// `n` messages to queue 0 of `topic` in runs of 1 to 6: tags present or not, keys, other
/// properties now and then, short (inline-view) and long bodies, every 9th record compressed.
fn fill(store: &MessageStore, topic: &str, n: usize) {
    let mut i = 0;
    while i < n {
        let mut properties: Vec<(String, String)> = Vec::new();
        if i % 5 != 0 {
            properties.push(("TAGS".into(), format!("T{}", i % 3)));
        }
        if i % 2 == 1 {
            properties.push(("KEYS".into(), format!("k{i} shared")));
        }
        if i % 7 == 0 {
            properties.push(("note".into(), "zürich".repeat(1 + i % 3)));
        }
        let body = |j: usize| format!("b{j}|").repeat(1 + (j % 4) * 5).into_bytes();
        if i % 9 == 0 {
            let r = store
                .put_message(&Message {
                    topic: topic.into(),
                    body: zlib(&body(i)),
                    queue_id: 0,
                    flag: 0,
                    sys_flag: sysflag::COMPRESSED,
                    born_timestamp: 1_700_000_000_000 + i as i64,
                    born_host: None,
                    properties,
                    reconsume_times: 0,
                    prepared_transaction_offset: 0,
                })
                .unwrap();
            assert!(r.is_ok());
            i += 1;
            continue;
        }
        let run = (1 + i % 6).min(n - i);
        let bodies: Vec<Vec<u8>> = (i..i + run).map(body).collect();
        common::put_batch(
            store,
            topic,
            &bodies,
            &properties,
            1_700_000_000_000 + i as i64,
        );
        i += run;
    }
    dispatch(store);
}

/// The column a vector of [`BatchColumns::into_named`] belongs to.
fn column_of(vector: &str) -> Column {
    Column::of_vector(vector).unwrap_or_else(|| panic!("no column for vector {vector}"))
}

/// A batch's vectors (bytes) by name.
type Named = Vec<(&'static str, Vec<u8>)>;

/// The batch's vectors by name, and its body buffers' ranges.
fn vectors(c: BatchColumns) -> (Named, Vec<(i64, i64)>) {
    let ranges = c.body_buffers.iter().map(|b| (b.start, b.end)).collect();
    let named = c
        .into_named()
        .into_iter()
        .map(|(name, v)| (name, v.bytes().to_vec()))
        .collect();
    (named, ranges)
}

/// Every mask of `masks` over `[start, start + count)`: the rows and next offset of the full
/// read, each built column's vectors equal to the full read's, the others empty.
fn check_masks(store: &MessageStore, topic: &str, start: i64, count: usize, masks: &[ColumnMask]) {
    for body in [BodyLayout::View, BodyLayout::Binary] {
        for decompress in [Some(true), Some(false)] {
            let request = |columns| ReadRequest {
                columns,
                decompress,
                body,
            };
            let full = store
                .read_columns(topic, 0, start, count, &request(ColumnMask::ALL))
                .unwrap();
            let (rows, next) = (full.rows, full.next_offset);
            assert_eq!(full.columns, ColumnMask::ALL);
            let (full, full_ranges) = vectors(full);
            for &mask in masks {
                let what = format!("{mask:?} {body:?} decompress={decompress:?}");
                let got = store
                    .read_columns(topic, 0, start, count, &request(mask))
                    .unwrap();
                assert_eq!((got.rows, got.next_offset), (rows, next), "{what}");
                assert_eq!(got.columns, mask);
                let (got, ranges) = vectors(got);
                for ((name, v), (_, want)) in got.iter().zip(&full) {
                    if mask.contains(column_of(name)) {
                        assert_eq!(v, want, "{name} of {what}");
                    } else {
                        assert!(v.is_empty(), "{name} of {what} was built");
                    }
                }
                let want_ranges: &[(i64, i64)] = if mask.contains(Column::Body) {
                    &full_ranges
                } else {
                    &[]
                };
                assert_eq!(ranges, want_ranges, "body buffers of {what}");
            }
        }
    }
}

/// Masks: none, each column alone, each column left out, every column, and a few mixes.
fn masks() -> Vec<ColumnMask> {
    let mut out = vec![ColumnMask::NONE, ColumnMask::ALL];
    for c in Column::ALL {
        out.push(ColumnMask::NONE.with(c));
        out.push(ColumnMask::ALL.without(c));
    }
    for names in [
        &["body", "queue_offset"][..],
        &["tags", "keys"],
        &["properties", "body", "commit_log_offset"],
        &["keys", "store_timestamp", "topic"],
    ] {
        out.push(ColumnMask::from_names(names).unwrap());
    }
    out
}

#[test]
fn every_masked_read_equals_the_full_reads_columns() {
    let d = TempDir::new("read_mask", "subsets");
    let store = MessageStore::open(d.path(), config(64 * 1024)).unwrap();
    let n = 600;
    fill(&store, "Mask", n);
    for (start, count) in [(0, n), (7, 101), (n as i64 - 2, 5)] {
        check_masks(&store, "Mask", start, count, &masks());
    }
    // An unknown queue: no rows, the masked columns only.
    let none = store
        .read_columns("Nobody", 0, 3, 10, &ReadRequest::default())
        .unwrap();
    assert_eq!((none.rows, none.next_offset), (0, 3));
    let keys_only = ReadRequest {
        columns: ColumnMask::NONE.with(Column::Keys),
        ..ReadRequest::default()
    };
    let none = store.read_columns("Nobody", 0, 3, 10, &keys_only).unwrap();
    assert_eq!(none.keys_list_offsets, [0]);
    assert!(none.body_offsets.is_empty() && none.topic_offsets.is_empty());
    store.close().unwrap();
}

/// From [`PARALLEL_READ_UNITS`] units a read is built by two threads whose halves are joined:
/// the join of masked halves equals the full read's columns too.
#[test]
fn masked_reads_on_two_threads_equal_the_full_reads_columns() {
    let d = TempDir::new("read_mask", "halves");
    let store = MessageStore::open(d.path(), config(4 << 20)).unwrap();
    let count = 2 * PARALLEL_READ_UNITS + 13;
    fill(&store, "Big", count + 20);
    let masks = [
        ColumnMask::NONE,
        ColumnMask::NONE.with(Column::Tags),
        ColumnMask::from_names(&["body", "queue_offset"]).unwrap(),
        ColumnMask::ALL.without(Column::Body),
        ColumnMask::ALL.without(Column::Properties),
    ];
    check_masks(&store, "Big", 5, count, &masks);
    store.close().unwrap();
}

/// A body whose CRC does not match fails every read that passes over it, whether or not it
/// asks for the body (or for any column).
#[test]
fn a_damaged_body_fails_the_read_whatever_the_mask() {
    let d = TempDir::new("read_mask", "crc");
    let store = MessageStore::open(d.path(), config(64 * 1024)).unwrap();
    fill(&store, "Crc", 40);
    let victim = store
        .read_columns(
            "Crc",
            0,
            22,
            1,
            &ReadRequest {
                columns: ColumnMask::NONE.with(Column::CommitLogOffset),
                ..ReadRequest::default()
            },
        )
        .unwrap()
        .commit_log_offset[0];
    // Flip a byte of message 22's body ("b22|" 11 times) through the file, under the open
    // store (its mapping is shared, so the read sees the byte; no recovery repairs it).
    let segment = d.path().join("commitlog").join(format!("{:020}", 0));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&segment)
        .unwrap();
    let mut record = vec![0u8; 512];
    f.seek(SeekFrom::Start(victim as u64)).unwrap();
    f.read_exact(&mut record).unwrap();
    let size = u32::from_be_bytes(record[..4].try_into().unwrap()) as usize;
    let body = b"b22|".repeat(11);
    let at = record[..size]
        .windows(body.len())
        .position(|w| w == body.as_slice())
        .expect("the body is in its record");
    f.seek(SeekFrom::Start(victim as u64 + at as u64 + 5))
        .unwrap();
    f.write_all(&[record[at + 5] ^ 0x55]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    for mask in [
        ColumnMask::NONE,
        ColumnMask::ALL.without(Column::Body),
        ColumnMask::ALL,
    ] {
        for body in [BodyLayout::View, BodyLayout::Binary] {
            let request = ReadRequest {
                columns: mask,
                decompress: None,
                body,
            };
            let e = store.read_columns("Crc", 0, 0, 40, &request).unwrap_err();
            assert!(
                matches!(e, StoreError::CorruptRecord { .. }) && e.to_string().contains("CRC"),
                "{mask:?}: {e}"
            );
            // Up to the damaged record, the read is fine.
            let ok = store.read_columns("Crc", 0, 0, 22, &request).unwrap();
            assert_eq!(ok.rows, 22);
        }
    }
    store.close().unwrap();
}
