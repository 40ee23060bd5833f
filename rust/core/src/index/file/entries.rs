//! What an index file's entries say beside its header: whether they agree, where they really
//! end, and how many entries hold a key for a message (what the open's gap and header-race
//! checks ask; see `crate::index::gaps`).

use std::sync::atomic::Ordering;

use super::IndexFile;
use crate::format::index::{E_KEY_HASH, E_PHY_OFFSET, E_PREV_INDEX, E_TIME_DIFF};

impl IndexFile {
    /// Whether the header's offset range is the one the entries hold: `putKey` sets the begin
    /// offset with entry 1 and the end offset with every entry, so a file written by one
    /// writer has entry 1 at the begin offset and entry `indexCount - 1` at the end offset.
    /// A file without entries matches. Reads two entries, whatever the file's size.
    ///
    /// A file that does not match was written through two headers: see
    /// [`crate::index::gaps::IndexGap`] for how RocketMQ leaves one, and why its range is not trusted.
    pub(crate) fn entries_match_header(&self) -> bool {
        let count = self.index_count();
        if count <= 1 {
            return true;
        }
        self.entry_phy_offset(1) == Some(self.begin_phy_offset())
            && self.entry_phy_offset(count - 1) == Some(self.end_phy_offset())
    }

    /// The commitlog offset and store time of the last message whose keys the file holds: the
    /// header's end, unless the entries run past it. RocketMQ 4.9.8's background flush of a
    /// full file can land on a newer file of the same name after the newer's last put (see
    /// [`crate::index::gaps::IndexGap`]): the header is then wholly the full file's (its count, its
    /// end), while entries from 1 on are the newer file's, whose messages all lie at or after
    /// that end, followed by what is left of the full file's entries, all at or before it.
    /// Seen from the header alone, the file ends where the full file ended and the newer's
    /// messages look unindexed: dispatch resuming there would index them a second time.
    ///
    /// The newer's entries are found without reading the file through: after the run of
    /// entries of their first message (a message whose keys the full file began holds them at
    /// its end too), an entry lies past the header's end exactly while it is the newer's, so a
    /// binary search finds the last of them. The store time is the entry's (seconds after the
    /// header's begin time), never below the header's end time.
    pub(crate) fn covered_end(&self) -> (i64, i64) {
        let h = self.header();
        let header_end = (h.end_phy_offset, h.end_timestamp);
        let count = h.index_count.min(self.index_num);
        let Some(first) = self.entry_phy_offset(1) else {
            return header_end;
        };
        if first < h.end_phy_offset || self.entries_match_header() {
            return header_end;
        }
        // Entries 1.. of the first message (bounded by what one message's keys can be).
        let mut lo = 1;
        while lo + 1 < count && self.entry_phy_offset(lo + 1) == Some(first) {
            lo += 1;
        }
        // Invariant: entry `lo` is the newer's; find the last entry past the header's end.
        let past = |n: i32| {
            self.entry_phy_offset(n)
                .is_some_and(|p| p > h.end_phy_offset)
        };
        let (mut good, mut bad) = (lo, count);
        if lo + 1 < count && past(lo + 1) {
            good = lo + 1;
            while bad - good > 1 {
                let mid = good + (bad - good) / 2;
                if past(mid) {
                    good = mid;
                } else {
                    bad = mid;
                }
            }
        }
        let Some(phy) = self.entry_phy_offset(good) else {
            return header_end;
        };
        let diff = self
            .get_i32(self.entry_word(good) + E_TIME_DIFF, Ordering::Relaxed)
            .unwrap_or(0)
            .max(0);
        let ts = h
            .begin_timestamp
            .saturating_add(i64::from(diff).saturating_mul(1000))
            .max(h.end_timestamp);
        (phy.max(h.end_phy_offset), ts)
    }

    /// The commitlog offset and store time of the last message indexed here: the header's end,
    /// or the [`IndexFile::covered_end`] the open confirmed ([`IndexFile::adopt_end`]).
    pub(crate) fn resume_end(&self) -> (i64, i64) {
        self.adopted_end
            .get()
            .copied()
            .unwrap_or_else(|| (self.end_phy_offset(), self.end_timestamp()))
    }

    /// Takes `end` (a [`IndexFile::covered_end`] the commitlog confirmed) as the file's
    /// [`IndexFile::resume_end`]; the header on disk stays as it is (RocketMQ's file).
    pub(crate) fn adopt_end(&self, end: (i64, i64)) {
        let _ = self.adopted_end.set(end);
    }

    /// The largest commitlog offset the file names, in its header or its last entry.
    pub(crate) fn max_named_offset(&self) -> i64 {
        let last = self.entry_phy_offset(self.index_count() - 1);
        self.end_phy_offset().max(last.unwrap_or(i64::MIN))
    }

    /// How many entries of this file hold `key_hash` for the message at `phy_offset` (walking
    /// the hash's bucket chain as a query does, with the same bounds).
    pub(crate) fn count_entries(&self, key_hash: i32, phy_offset: i64) -> usize {
        let count = self.index_count.load(Ordering::Acquire);
        let Some(slot_value) = self.get_i32(self.slot_word(key_hash), Ordering::Acquire) else {
            return 0;
        };
        if slot_value <= 0 || slot_value > count || count <= 1 {
            return 0;
        }
        let mut found = 0;
        let mut next = slot_value;
        let mut steps = 0;
        while next < self.index_num && steps < self.index_num {
            steps += 1;
            let w = self.entry_word(next);
            let (Some(hash_read), Some(phy_read), Some(prev)) = (
                self.get_i32(w + E_KEY_HASH, Ordering::Relaxed),
                self.get_i64(w + E_PHY_OFFSET, Ordering::Relaxed),
                self.get_i32(w + E_PREV_INDEX, Ordering::Relaxed),
            ) else {
                break;
            };
            if hash_read == key_hash && phy_read == phy_offset {
                found += 1;
            }
            if prev <= 0 || prev > count || prev == next {
                break;
            }
            next = prev;
        }
        found
    }
}
