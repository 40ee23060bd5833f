//! Index gaps ([`IndexGap`]): stretches of the commitlog between neighbouring index files that
//! no file covers, found by [`IndexService::gaps`] and re-indexed into files named between the
//! neighbours by [`IndexService::fill_gap`].
//!
//! A file's header range is trusted only when its entries agree with it
//! ([`IndexFile::entries_match_header`]): RocketMQ 4.9.8 can leave a file whose header claims
//! messages whose entries were lost (see [`IndexGap`]), and such a file bounds no gap.

use std::sync::Arc;

use super::service::flush_file;
use super::{lock, write_lock, IndexBatch, IndexFile, IndexService, LOG_TARGET};
use crate::error::{Result, StoreError};
use crate::format::index::gap_file_names;

/// A stretch of the commitlog between two neighbouring index files that hold entries (or
/// before the first of them, or after the last) that no file is known to cover: the messages
/// from `from` to `to`, both included, may have keys that no file holds. The two boundary
/// messages may be partly indexed (a message whose keys do not all fit in a file continues in
/// the next one).
///
/// Such a stretch is normal when it holds only messages without keys. It is a loss when
/// RocketMQ made two index files in the same millisecond: it names a new file after the
/// current time (`yyyyMMddHHmmssSSS`) and opens an existing file of that name, so the second
/// file overwrites the first, whose entries are gone (seen with RocketMQ 5.5.1 under load).
///
/// The same loss can hide behind a header that claims it. `IndexService.getAndCreateLastIndexFile`
/// (RocketMQ 4.9.8 and 5.5.1) makes the new file, then starts a `FlushIndexFileThread` that runs
/// `flush` on the full one, and `IndexFile.flush` copies that file's in-memory header into the
/// mapping (`IndexHeader.updateByteBuffer`: begin and end times and offsets, slot count,
/// count). When both `IndexFile` objects map one file (same name), the full file's header lands
/// on the new file's, usually after the new file's first put (the thread starts after that put
/// is already under way). `IndexFile.putKey` writes the begin offset and time only for entry 1
/// (`indexCount <= 1`) and the end offset, end time, count and slot count with every entry, so
/// the file keeps the full file's begin (and, when the flush lands after the last put, its whole
/// header): it claims the full file's messages while its entries hold only the new file's, and no
/// range is left uncovered between it and the file before. RocketMQ 4.9.8 never writes the
/// header again (its `IndexService.shutdown` is empty); 5.5.1 flushes every file at shutdown in
/// list order, so after a clean shutdown the newer object's header wins and the file agrees with
/// its entries again (the plain loss above), but not after a crash.
///
/// Such a file does not match its header ([`IndexFile::entries_match_header`]) and is `held`:
/// it bounds no gap. The gap runs from the end of the last trusted file before it to the begin
/// of the first trusted file after it (or to the largest offset a held file names, when none
/// follows), and every message of the gap is checked against the held files, so the entries they
/// do hold (whichever writer put them) are not written twice.
#[derive(Clone, Debug)]
pub(crate) struct IndexGap {
    /// The trusted file before the gap (`None`: the gap lies before the first of them).
    pub prev: Option<Arc<IndexFile>>,
    /// Files with entries between `prev` and `next` whose header does not describe their
    /// entries, in name order.
    pub held: Vec<Arc<IndexFile>>,
    /// The trusted file after the gap (`None`: only held files follow `prev`).
    pub next: Option<Arc<IndexFile>>,
    /// Commitlog offset of the first message that may lack entries: the previous file's last
    /// message, or the commitlog's first before the first file.
    pub from: i64,
    /// Commitlog offset of the last message that may lack entries: the next file's first, or
    /// the largest offset a held file names.
    pub to: i64,
}

impl IndexGap {
    /// The file after `prev` by name, before which the gap's files are named (every gap
    /// [`IndexService::gaps`] makes has one).
    fn bound(&self) -> Option<&Arc<IndexFile>> {
        self.held.first().or(self.next.as_ref())
    }
}

/// Removes from `hashes` as many occurrences of each hash as `file` holds entries of it for
/// the message at `phy_offset`.
pub(super) fn remove_indexed(hashes: &mut Vec<i32>, file: &IndexFile, phy_offset: i64) {
    let mut distinct = hashes.clone();
    distinct.sort_unstable();
    distinct.dedup();
    for h in distinct {
        let mut present = file.count_entries(h, phy_offset);
        hashes.retain(|&x| {
            if x == h && present > 0 {
                present -= 1;
                false
            } else {
                true
            }
        });
    }
}

/// Removes from `hashes` what the files of `files` (oldest first) whose range holds
/// `phy_offset` (from their header's begin to the largest offset they name: in their header,
/// their last entry, or the end adopted at open) hold for that message, less the files of
/// `skip` (checked by the caller). Entries are counted, not assumed from a header, so a file
/// whose header does not describe its entries takes away only what it really holds.
///
/// A message at the end of one file can continue in several: a file that filled during its
/// keys, then a gap file (or a file made at resume) holding only the rest, whose range is that
/// one message. Checking only the file next to a gap counted the keys the others hold as
/// missing at every open, and wrote them again into a new gap file each time.
pub(super) fn remove_held_by_files_at(
    hashes: &mut Vec<i32>,
    files: &[Arc<IndexFile>],
    skip: &[Arc<IndexFile>],
    phy_offset: i64,
) {
    for f in files {
        if hashes.is_empty() {
            return;
        }
        if f.index_count() <= 1
            || f.begin_phy_offset() > phy_offset
            || f.max_named_offset().max(f.resume_end().0) < phy_offset
            || skip.iter().any(|s| Arc::ptr_eq(s, f))
        {
            continue;
        }
        remove_indexed(hashes, f, phy_offset);
    }
}

impl IndexService {
    /// The stretches of the commitlog from `min_offset` on that no index file is known to cover
    /// (see [`IndexGap`]), oldest first. Files without entries cover nothing and are passed
    /// over; files whose header does not describe their entries are held inside a gap.
    pub(crate) fn gaps(&self, min_offset: i64) -> Vec<IndexGap> {
        let mut out = Vec::new();
        let mut prev: Option<Arc<IndexFile>> = None;
        let mut held: Vec<Arc<IndexFile>> = Vec::new();
        let from_after =
            |p: &Option<Arc<IndexFile>>| p.as_ref().map_or(min_offset, |p| p.end_phy_offset());
        for f in self.files() {
            if f.index_count() <= 1 {
                continue;
            }
            if !f.entries_match_header() {
                let h = f.header();
                // At every open (the file is RocketMQ's and stays as it is): info, not a warning.
                log::info!(
                    target: LOG_TARGET,
                    "index file {} claims commitlog offsets {} to {} but its entries run from {:?} \
                     to {:?} (two writers' headers): its range is checked for keys it lacks",
                    f.path().display(),
                    h.begin_phy_offset,
                    h.end_phy_offset,
                    f.entry_phy_offset(1),
                    f.entry_phy_offset(h.index_count - 1),
                );
                held.push(f);
                continue;
            }
            let from = from_after(&prev).max(min_offset);
            let to = f.begin_phy_offset();
            if to > from || !held.is_empty() {
                out.push(IndexGap {
                    prev: prev.clone(),
                    held: std::mem::take(&mut held),
                    next: Some(Arc::clone(&f)),
                    from,
                    to: to.max(from),
                });
            }
            prev = Some(f);
        }
        if !held.is_empty() {
            let from = from_after(&prev).max(min_offset);
            let to = held
                .iter()
                .map(|f| f.max_named_offset())
                .max()
                .unwrap_or(from);
            out.push(IndexGap {
                prev,
                held,
                next: None,
                from,
                to: to.max(from),
            });
        }
        out
    }

    /// Puts the entries that the messages of `batch` (the messages of `gap`, in commitlog order)
    /// lack into new files between the gap's neighbours: every key of a message inside the gap,
    /// and the keys of the boundary messages that their file does not hold, less what the
    /// gap's held files hold for any of its messages. A gap file is named after the file before
    /// it with one more digit (see [`crate::format::index::GAP_FILE_NAME_LEN`]), before the
    /// first held or next file, so that name order stays offset and time order for RocketMQ
    /// and rmqstore (the held files' own entries come after what they lost), and is seeded
    /// like a file made by a roll. Returns how
    /// many entries were written. When the nine names between the neighbours are used up, the
    /// rest stays unindexed (logged).
    pub(crate) fn fill_gap(&self, gap: &IndexGap, batch: &mut IndexBatch) -> Result<usize> {
        let Some(bound) = gap.bound() else {
            return Ok(0);
        };
        batch.hash_pending();
        let files = self.files();
        let mut missing: Vec<(i64, i64, Vec<i32>)> = Vec::new();
        let mut start = 0;
        for &(phy, ts, end) in &batch.messages {
            let mut hashes = batch.hashes[start..end].to_vec();
            start = end;
            // The boundary messages: every file whose range holds them (the file before the
            // gap, the gap files made at earlier opens, the file after it); the gap's held
            // files are checked below, for every message.
            if phy == gap.from || phy == gap.to {
                remove_held_by_files_at(&mut hashes, &files, &gap.held, phy);
            }
            for h in &gap.held {
                if hashes.is_empty() {
                    break;
                }
                remove_indexed(&mut hashes, h, phy);
            }
            if !hashes.is_empty() {
                missing.push((phy, ts, hashes));
            }
        }
        batch.hashes.clear();
        batch.messages.clear();
        if missing.is_empty() {
            return Ok(0);
        }
        let mut w = lock(&self.writer);
        *w = None;
        self.join_pending_flushes();
        let mut names =
            gap_file_names(gap.prev.as_ref().map(|p| p.file_name()), bound.file_name()).into_iter();
        let (mut seed_phy, mut seed_ts) = gap
            .prev
            .as_ref()
            .map_or((0, 0), |p| (p.end_phy_offset(), p.end_timestamp()));
        let mut made: Vec<Arc<IndexFile>> = Vec::new();
        let mut written = 0;
        let mut result = Ok(());
        'messages: for (phy, ts, hashes) in &missing {
            let mut rest = &hashes[..];
            while !rest.is_empty() {
                let file = match made.last() {
                    Some(f) if !f.is_write_full() => Arc::clone(f),
                    last => {
                        if let Some(f) = last {
                            (seed_phy, seed_ts) = (f.end_phy_offset(), f.end_timestamp());
                        }
                        let created = loop {
                            let Some(name) = names.next() else {
                                break None;
                            };
                            let path = self.dir.join(&name);
                            match IndexFile::create(
                                &path,
                                self.hash_slot_num,
                                self.index_num,
                                seed_phy,
                                seed_ts,
                            ) {
                                Ok(f) => break Some(Ok(f)),
                                Err(e) if e.os_errno() == Some(libc::EEXIST) => {}
                                Err(e) => break Some(Err(e)),
                            }
                        };
                        match created {
                            Some(Ok(f)) => {
                                log::info!(
                                    target: LOG_TARGET,
                                    "created index file {} for keys missing between {} and {}",
                                    f.path().display(),
                                    gap.prev.as_ref().map_or("the start", |p| p.file_name()),
                                    bound.file_name()
                                );
                                let f = Arc::new(f);
                                made.push(Arc::clone(&f));
                                f
                            }
                            Some(Err(e)) => {
                                result = Err(e);
                                break 'messages;
                            }
                            None => {
                                log::error!(
                                    target: LOG_TARGET,
                                    "no file name left between index files {} and {}: keys of \
                                     messages from commitlog offset {phy} on stay unindexed",
                                    gap.prev.as_ref().map_or("(none)", |p| p.file_name()),
                                    bound.file_name()
                                );
                                break 'messages;
                            }
                        }
                    }
                };
                let put = file.writer().put(rest, *phy, *ts);
                if put == 0 && !file.is_write_full() {
                    result = Err(StoreError::corrupted(
                        file.path(),
                        "a new index file refused a key",
                    ));
                    break 'messages;
                }
                written += put;
                rest = &rest[put..];
            }
        }
        if !made.is_empty() {
            let mut files = write_lock(&self.files);
            let at = files.partition_point(|f| f.file_name() < made[0].file_name());
            files.splice(at..at, made.iter().cloned());
        }
        drop(w);
        for f in &made {
            let flushed = flush_file(f, &self.index_msg_timestamp);
            if result.is_ok() {
                result = flushed;
            }
        }
        result.map(|()| written)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::format::index::{index_key_hash, W_BEGIN_PHY_OFFSET};

    const SLOTS: i32 = 16;
    const ENTRIES: i32 = 8;
    const T0: i64 = 1_700_000_000_000;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rmqstore-gaps-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A file at `dir/name` seeded with `seed` holding key `T#k<phy>` for each of `phys`.
    fn file(dir: &Path, name: &str, seed: i64, phys: &[i64]) {
        let f = IndexFile::create(&dir.join(name), SLOTS, ENTRIES, seed, T0).unwrap();
        for &phy in phys {
            assert!(f.put_key(&format!("T#k{phy}"), phy, T0 + phy));
        }
        f.flush().unwrap();
    }

    fn batch(from: i64, to: i64) -> IndexBatch {
        let mut b = IndexBatch::default();
        for phy in (from..=to).step_by(10) {
            b.add("T", Some(&format!("k{phy}")), None, None, phy, T0 + phy, 0);
        }
        b
    }

    /// Every message from 100 to 180 (one key each, `T#k<phy>`) is found exactly once.
    fn assert_every_key_once(s: &IndexService) {
        s.set_max_msgs_num_batch(usize::MAX);
        for phy in (100..=180).step_by(10) {
            let r = s.query_offset("T", &format!("k{phy}"), 64, 0, i64::MAX);
            assert_eq!(r.phy_offsets, [phy], "key k{phy}");
        }
    }

    /// RocketMQ 4.9.8's header race (see [`IndexGap`]): file B (messages 120 to 140) filled and
    /// C was made in the same millisecond, so C's puts (150, 160) overwrote B's entries, and
    /// B's flush thread then wrote B's header, whose begin offset C's later puts never wrote
    /// again. The file claims 120 to 160: no range is left uncovered between it and the file
    /// before (100, 110) or after (170, 180), yet 120 to 140 have no entries.
    #[test]
    fn header_that_claims_lost_entries_is_not_trusted() {
        let d = tmp("race");
        file(&d, "20240101120000100", 0, &[100, 110]);
        file(&d, "20240101120000200", 110, &[150, 160]);
        file(&d, "20240101120000300", 160, &[170, 180]);
        // B's begin offset, as its flush left it.
        let raced = std::fs::OpenOptions::new()
            .write(true)
            .open(d.join("20240101120000200"))
            .unwrap();
        raced
            .write_all_at(&120i64.to_be_bytes(), (W_BEGIN_PHY_OFFSET * 4) as u64)
            .unwrap();
        drop(raced);
        let s = IndexService::load(&d, SLOTS, ENTRIES).unwrap();
        let files = s.files();
        assert!(files[0].entries_match_header() && files[2].entries_match_header());
        assert!(!files[1].entries_match_header());
        assert_eq!(files[1].entry_phy_offset(1), Some(150));
        assert_eq!(files[1].max_named_offset(), 160);

        let gaps = s.gaps(100);
        assert_eq!(gaps.len(), 1, "{gaps:?}");
        let g = &gaps[0];
        assert_eq!((g.from, g.to), (110, 170));
        assert_eq!(g.prev.as_ref().unwrap().file_name(), "20240101120000100");
        assert_eq!(g.held.len(), 1);
        assert_eq!(g.next.as_ref().unwrap().file_name(), "20240101120000300");
        // 120, 130 and 140 are written; 110 (in the file before), 150 and 160 (in the held
        // file) and 170 (in the file after) are not written twice.
        assert_eq!(s.fill_gap(g, &mut batch(g.from, g.to)).unwrap(), 3);
        assert_eq!(s.file_names()[1], "202401011200001001");
        assert_every_key_once(&s);
        // The held file stays held, and a second open writes nothing.
        drop(s);
        let s = IndexService::load(&d, SLOTS, ENTRIES).unwrap();
        let gaps = s.gaps(100);
        assert_eq!(gaps.last().unwrap().held.len(), 1);
        for g in &gaps {
            assert_eq!(s.fill_gap(g, &mut batch(g.from, g.to)).unwrap(), 0, "{g:?}");
        }
        assert_every_key_once(&s);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The flush landed after C's last put: the whole header is B's (120 to 140, full count),
    /// the entries C's; nothing follows. The held file's range ends at its last entry.
    #[test]
    fn whole_header_of_the_lost_file_is_not_trusted() {
        let d = tmp("whole");
        file(&d, "20240101120000100", 0, &[100, 110]);
        // C's entries, then B's header (begin 120, end 140).
        let c = d.join("20240101120000200");
        file(&d, "20240101120000200", 110, &[150, 160, 170, 180]);
        let raw = std::fs::OpenOptions::new().write(true).open(&c).unwrap();
        raw.write_all_at(&120i64.to_be_bytes(), (W_BEGIN_PHY_OFFSET * 4) as u64)
            .unwrap();
        raw.write_all_at(&140i64.to_be_bytes(), (W_BEGIN_PHY_OFFSET * 4 + 8) as u64)
            .unwrap();
        drop(raw);
        let s = IndexService::load(&d, SLOTS, ENTRIES).unwrap();
        let gaps = s.gaps(100);
        assert_eq!(gaps.len(), 1, "{gaps:?}");
        let g = &gaps[0];
        assert!(g.next.is_none());
        assert_eq!((g.from, g.to), (110, 180));
        assert_eq!(s.fill_gap(g, &mut batch(g.from, g.to)).unwrap(), 3);
        assert_every_key_once(&s);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The flush of full file B landed after the last put of C, made in B's millisecond and
    /// so mapping B's file, at the end of the index, as RocketMQ 4.9.8 really leaves it: the
    /// whole header is B's (its full count, its end 180), C's puts (190, 200) overwrote B's
    /// first two entries and their slots, B's other entries are left behind them. The file
    /// covers up to 200: dispatch resumes there and a new file is seeded from there, so C's
    /// messages are not indexed a second time (one CI run indexed them twice, into a new last
    /// file, when the index's progress was read from the header).
    #[test]
    fn whole_header_of_a_full_file_over_the_last_file() {
        use crate::format::index::{HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE};
        let d = tmp("whole-last");
        file(&d, "20240101120000100", 0, &[100, 110]);
        let b = d.join("20240101120000200");
        file(
            &d,
            "20240101120000200",
            110,
            &[120, 130, 140, 150, 160, 170, 180],
        );
        let c_alone = tmp("whole-last-c");
        file(&c_alone, "c", 180, &[190, 200]);
        let mut bytes = std::fs::read(&b).unwrap();
        let c = std::fs::read(c_alone.join("c")).unwrap();
        let slots = INDEX_HEADER_SIZE as usize;
        let entries = slots + (SLOTS as usize) * HASH_SLOT_SIZE as usize;
        for at in (slots..entries).step_by(4) {
            if c[at..at + 4] != [0; 4] {
                bytes[at..at + 4].copy_from_slice(&c[at..at + 4]);
            }
        }
        let (e1, e3) = (
            entries + INDEX_ENTRY_SIZE as usize,
            entries + 3 * INDEX_ENTRY_SIZE as usize,
        );
        bytes[e1..e3].copy_from_slice(&c[e1..e3]);
        std::fs::write(&b, &bytes).unwrap();
        let _ = std::fs::remove_dir_all(&c_alone);

        let s = IndexService::load(&d, SLOTS, ENTRIES).unwrap();
        let raced = &s.files()[1];
        assert!(raced.is_write_full());
        assert_eq!(raced.end_phy_offset(), 180);
        assert_eq!(raced.covered_end().0, 200);
        // Unconfirmed entries are not trusted; confirmed ones are.
        assert_eq!(s.adopt_covered_end(|_, _| false), None);
        assert_eq!(s.progress(), Some(180));
        assert_eq!(
            s.adopt_covered_end(|f, phy| f.count_entries(index_key_hash("T#k200"), phy) > 0),
            Some(200)
        );
        assert_eq!(s.progress(), Some(200));
        // Dispatch resuming at 200 (with 190 again) writes nothing twice.
        s.build_batch(&mut batch(190, 200)).unwrap();
        for phy in [190, 200] {
            let r = s.query_offset("T", &format!("k{phy}"), 64, 0, i64::MAX);
            assert_eq!(r.phy_offsets, [phy], "key k{phy}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Message 160 has two keys; the full file before the gap holds its first, so the gap
    /// (160 to 170) lacks only the second. It is written once, into a gap file whose range is
    /// message 160 alone, and never again however often the store opens: the boundary message
    /// is checked against every file that holds part of it. (Checking only the file next to the
    /// gap, the gap file made at the last open, wrote the first key into a new gap file at
    /// every open until the nine names ran out.)
    #[test]
    fn a_message_cut_by_a_full_file_is_refilled_once_over_many_opens() {
        let d = tmp("cut");
        // 100 to 150, then the first key of 160: seven entries, full.
        let full = IndexFile::create(&d.join("20240101120000100"), SLOTS, ENTRIES, 0, T0).unwrap();
        for phy in (100..=150).step_by(10) {
            assert!(full.put_key(&format!("T#k{phy}"), phy, T0 + phy));
        }
        assert!(full.put_key("T#k160", 160, T0 + 160));
        assert!(full.is_write_full());
        full.flush().unwrap();
        drop(full);
        file(&d, "20240101120000200", 160, &[170, 180]);
        let keyed = || {
            let mut b = IndexBatch::default();
            b.add("T", Some("k160 x160"), None, None, 160, T0 + 160, 0);
            b.add("T", Some("k170"), None, None, 170, T0 + 170, 0);
            b
        };
        for open in 0..12 {
            let s = IndexService::load(&d, SLOTS, ENTRIES).unwrap();
            let gaps = s.gaps(100);
            let written: usize = gaps
                .iter()
                .map(|g| {
                    assert_eq!((g.from, g.to), (160, 170), "open {open}: {g:?}");
                    s.fill_gap(g, &mut keyed()).unwrap()
                })
                .sum();
            assert_eq!(written, usize::from(open == 0), "open {open}");
            assert_eq!(
                s.file_names(),
                [
                    "20240101120000100",
                    "202401011200001001",
                    "20240101120000200"
                ],
                "open {open}"
            );
            for key in ["k160", "x160"] {
                let r = s.query_offset("T", key, 64, 0, i64::MAX);
                assert_eq!(r.phy_offsets, [160], "open {open}: {key}");
            }
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Files RocketMQ and rmqstore write alone agree with their headers, whatever their size,
    /// and a same-millisecond overwrite without the race (the second file's header) too: that
    /// loss is an ordinary gap.
    #[test]
    fn consistent_files_match_their_headers() {
        let d = tmp("consistent");
        let f = IndexFile::create(&d.join("20240101120000100"), SLOTS, ENTRIES, 90, T0).unwrap();
        assert!(f.entries_match_header());
        assert_eq!(f.entry_phy_offset(1), None);
        for (i, phy) in [100, 100, 110, 120, 120, 120, 130].into_iter().enumerate() {
            assert!(f.put_key_hash(index_key_hash(&format!("T#k{i}")), phy, T0));
            assert!(f.entries_match_header());
        }
        assert!(f.is_write_full());
        assert_eq!(f.entry_phy_offset(ENTRIES), None);
        let _ = std::fs::remove_dir_all(&d);
    }
}
