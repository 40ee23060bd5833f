//! `read_batch` with `binary_view` bodies (`BodyLayout::View`), on real files: the views equal the
//! copied bodies, and a returned batch's bytes never change, whatever the store does to its files
//! afterwards (truncation, the recovery of a store opened again, close, deletion).

mod common;

use std::time::Duration;

use common::TempDir;
use rmqstore_core::read::{
    set_parallel_reads, BatchColumns, BodyLayout, ParallelReads, PARALLEL_READ_UNITS,
};
use rmqstore_core::{Batch, MessageStore, StoreConfig};

const SEG: i64 = 64 * 1024;

fn small() -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: SEG,
        mapped_file_size_consume_queue: 20 * 50,
        max_hash_slot_num: 64,
        max_index_num: 50,
        ..StoreConfig::default()
    }
}

fn body(i: usize, size: usize) -> Vec<u8> {
    format!("{i:08}|").repeat(size / 9 + 1).into_bytes()[..size].to_vec()
}

/// Puts bodies of `sizes` to queue 0 of `topic` (runs of a few, so batches and single
/// records mix) and dispatches them.
fn fill(store: &MessageStore, topic: &str, sizes: &[usize]) -> Vec<Vec<u8>> {
    let bodies: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &s)| body(i, s)).collect();
    let props = vec![("TAGS".to_owned(), "t".to_owned())];
    let mut i = 0;
    while i < bodies.len() {
        let mut run = 1 + i % 5;
        run = run.min(bodies.len() - i);
        while run > 1 && bodies[i..i + run].iter().map(Vec::len).sum::<usize>() > 16 * 1024 {
            run -= 1;
        }
        let slices: Vec<&[u8]> = bodies[i..i + run].iter().map(Vec::as_slice).collect();
        let r = store
            .put_messages(&Batch {
                topic,
                queue_id: 0,
                bodies: &slices,
                properties: &props,
                flag: 0,
                born_timestamp: 1,
                born_host: None,
            })
            .unwrap();
        assert!(r.is_ok(), "{:?}", r.status);
        i += run;
    }
    while store
        .dispatch_step(64 << 20, Duration::ZERO)
        .unwrap()
        .behind
        > 0
    {}
    bodies
}

/// The bodies of a `binary_view` batch, decoded as Arrow would: inline when at most 12 bytes,
/// else from the data buffer the view names (segment ranges, then `body_data`).
fn view_bodies(c: &BatchColumns) -> Vec<Vec<u8>> {
    assert_eq!(c.body_views.len(), c.rows * 16);
    c.body_views
        .chunks_exact(16)
        .map(|v| {
            let len = u32::from_le_bytes(v[..4].try_into().unwrap()) as usize;
            if len <= 12 {
                assert!(v[4 + len..].iter().all(|&b| b == 0), "inline padding");
                return v[4..4 + len].to_vec();
            }
            let index = u32::from_le_bytes(v[8..12].try_into().unwrap()) as usize;
            let offset = u32::from_le_bytes(v[12..16].try_into().unwrap()) as usize;
            let data = if index == c.body_buffers.len() {
                &c.body_data[..]
            } else {
                c.body_buffers[index].bytes()
            };
            let b = data[offset..offset + len].to_vec();
            assert_eq!(&v[4..8], &b[..4], "prefix");
            b
        })
        .collect()
}

fn binary_bodies(c: &BatchColumns) -> Vec<Vec<u8>> {
    c.body_offsets
        .windows(2)
        .map(|w| c.body_data[w[0] as usize..w[1] as usize].to_vec())
        .collect()
}

fn views(store: &MessageStore, topic: &str, offset: i64, n: usize) -> BatchColumns {
    store
        .read_batch_as(topic, 0, offset, n, true, None, BodyLayout::View)
        .unwrap()
}

#[test]
fn views_equal_the_copied_bodies_across_segments_and_threads() {
    set_parallel_reads(ParallelReads::Always);
    let d = TempDir::new("views", "equal");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let sizes: Vec<usize> = (0..PARALLEL_READ_UNITS + 3001)
        .map(|i| [0, 1, 12, 13, 14, 700, 1024, 3000][i % 8])
        .collect();
    let bodies = fill(&store, "V", &sizes);
    for (start, n) in [(0usize, sizes.len()), (7, 1), (100, 900), (3, 40)] {
        let v = views(&store, "V", start as i64, n);
        let b = store
            .read_batch("V", 0, start as i64, n, true, None)
            .unwrap();
        assert_eq!((v.rows, v.next_offset), (b.rows, b.next_offset));
        assert_eq!(view_bodies(&v), binary_bodies(&b));
        assert_eq!(view_bodies(&v), bodies[start..start + n]);
        assert!(v.body_offsets.len() <= 1 && v.body_data.is_empty());
        // One buffer a segment touched.
        let mut segs: Vec<_> = v.body_buffers.iter().map(|b| b.view.as_ptr()).collect();
        segs.dedup();
        assert_eq!(segs.len(), v.body_buffers.len());
        // Every other column as the copying read has it.
        assert_eq!(v.queue_offset, b.queue_offset);
        assert_eq!(v.tags_data, b.tags_data);
    }
}

#[test]
fn truncate_files_leaves_a_live_batch_unchanged() {
    let d = TempDir::new("views", "truncate");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let bodies = fill(&store, "T", &[1024; 300]);
    let batch = views(&store, "T", 0, 300);
    let before = view_bodies(&batch);
    // A message read by offset keeps its body in the mapping too.
    let at = store.commit_log_offset_in_queue("T", 0, 200).unwrap();
    let looked = store.look_message_by_offset(at).unwrap().unwrap();
    assert_eq!(looked.body(), &bodies[200][..]);
    assert_eq!(before, bodies);
    let cut = store.commit_log_offset_in_queue("T", 0, 30).unwrap();
    assert!(store.truncate_files(cut).unwrap());
    // The cut segment's tail is zeroed and the later ones deleted; the batch still has its bytes.
    assert_eq!(view_bodies(&batch), before);
    assert_eq!(looked.body(), &bodies[200][..]);
    // New messages where the old ones were: a new batch sees them, the old one does not.
    let new = fill(&store, "T", &[2000; 20]);
    let again = views(&store, "T", 30, 20);
    assert_eq!(view_bodies(&again), new);
    assert_eq!(view_bodies(&batch), before);
    store.close().unwrap();
    drop(store);
    assert_eq!(view_bodies(&batch), before);
    assert_eq!(view_bodies(&again), new);
}

#[test]
fn recovery_of_a_reopened_store_leaves_a_live_batch_unchanged() {
    let d = TempDir::new("views", "recovery");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let bodies = fill(&store, "R", &[1024; 40]);
    // The rows after the one damaged below.
    let batch = views(&store, "R", 11, 29);
    let damaged = store.commit_log_offset_in_queue("R", 0, 10).unwrap();
    store.close().unwrap();
    drop(store);
    // A flipped body byte in message 10: recovery stops there and zeroes what follows.
    let seg = d
        .path()
        .join("commitlog")
        .join(format!("{:020}", damaged / SEG * SEG));
    let at = (damaged % SEG) as u64 + 200;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&seg)
        .unwrap();
    use std::os::unix::fs::FileExt;
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0xFF], at).unwrap();
    let reopened = MessageStore::open(d.path(), small()).unwrap();
    assert_eq!(reopened.max_phy_offset().unwrap(), damaged);
    assert_eq!(view_bodies(&batch), bodies[11..]);
    reopened.close().unwrap();
}

#[test]
fn a_batch_outlives_close_and_the_deletion_of_its_files() {
    let d = TempDir::new("views", "close");
    let store = MessageStore::open(d.path(), small()).unwrap();
    let bodies = fill(&store, "C", &[1500; 200]);
    let batch = views(&store, "C", 0, 200);
    store.close().unwrap();
    drop(store);
    for f in std::fs::read_dir(d.path().join("commitlog")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    assert_eq!(view_bodies(&batch), bodies);
}
