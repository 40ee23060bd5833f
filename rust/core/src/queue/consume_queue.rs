//! Consume queues: per topic/queue logical indexes into the commitlog (RocketMQ's `ConsumeQueue`,
//! docs/format.md#consume-queues), in `consumequeue/<topic>/<queueId>/<20-digit>` segments of
//! 20-byte units: commitlog offset (i64), record size (i32), tags code (i64), big-endian (the unit
//! layout is `crate::format`'s [`CqUnit`]).
//!
//! Written only by dispatch (one writer); read by any thread.

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::file::mapped_file::MappedFile;
use crate::file::mapped_file_queue::{FrontDeletion, MappedFileQueue};
use crate::format::{encode_unit, whole_units_end, CqUnit, CQ_STORE_UNIT_SIZE};

pub(crate) struct ConsumeQueue {
    topic: String,
    queue_id: i32,
    queue: MappedFileQueue,
    /// End (`offset + size`) of the last commitlog record indexed; -1 when empty.
    max_physic_offset: AtomicI64,
    /// First valid logical byte (`minLogicOffset`).
    min_logic_offset: AtomicI64,
    /// Read-only queues (another process dispatches): the logical end checked so far; -1 for
    /// a queue this process writes.
    read_only_end: AtomicI64,
    /// Read-only queues: the folder's (device, inode) when loaded, to notice the writer
    /// deleting the queue (and perhaps making it again).
    folder_id: Option<(u64, u64)>,
    /// When the folder was last found current (ms), so that busy readers look at most every
    /// [`FOLDER_CHECK_MS`].
    folder_checked_ms: AtomicI64,
    /// Read-only queues: the commitlog minimum the last refresh corrected the minimum for.
    read_only_min_commit_log: AtomicI64,
}

/// How long a read-only queue trusts its last look at its folder: a queue the writer deleted
/// is noticed by reads within this time.
const FOLDER_CHECK_MS: i64 = 10;

/// How long a consume queue segment a reader still holds may wait before its deletion goes
/// ahead anyway (`deleteExpiredFileByOffset` destroys with `1000 * 60`).
pub(crate) const CQ_DESTROY_FORCIBLY_MS: i64 = 60_000;

/// Trailing units checked against their commitlog records by each read-only refresh: a unit
/// another process is writing right now may be torn, and on weakly ordered CPUs more than the
/// very last one could be.
const READ_ONLY_VERIFY_UNITS: usize = 64;

impl std::fmt::Debug for ConsumeQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumeQueue")
            .field("topic", &self.topic)
            .field("queue_id", &self.queue_id)
            .finish()
    }
}

impl ConsumeQueue {
    /// Loads (or starts) the queue in `dir` with segments of `file_size` bytes (a multiple of
    /// 20). Positions are those of the files; call [`ConsumeQueue::recover`] before use.
    pub(crate) fn load(
        topic: &str,
        queue_id: i32,
        dir: &Path,
        file_size: i64,
    ) -> Result<ConsumeQueue> {
        let queue = MappedFileQueue::load(dir, file_size)?;
        Ok(Self::over(topic, queue_id, queue, -1))
    }

    fn over(topic: &str, queue_id: i32, queue: MappedFileQueue, read_only_end: i64) -> Self {
        ConsumeQueue {
            topic: topic.to_owned(),
            queue_id,
            queue,
            max_physic_offset: AtomicI64::new(-1),
            min_logic_offset: AtomicI64::new(0),
            read_only_end: AtomicI64::new(read_only_end),
            folder_id: None,
            folder_checked_ms: AtomicI64::new(i64::MIN),
            read_only_min_commit_log: AtomicI64::new(-1),
        }
    }

    fn folder_id_of(dir: &Path) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
    }

    /// Read-only queues: false once the writer deleted the queue's folder (and perhaps made
    /// a new one, a new queue): this one is then gone (noticed within [`FOLDER_CHECK_MS`]).
    /// Always true for a queue this process writes.
    pub(crate) fn folder_is_current(&self) -> bool {
        let Some(id) = self.folder_id else {
            return self.read_only_end.load(Ordering::Relaxed) < 0;
        };
        let now = crate::util::now_millis();
        let checked = self.folder_checked_ms.load(Ordering::Relaxed);
        if now
            .checked_sub(checked)
            .is_some_and(|d| (0..FOLDER_CHECK_MS).contains(&d))
        {
            return true;
        }
        let current = Self::folder_id_of(self.queue.dir()) == Some(id);
        if current {
            self.folder_checked_ms.store(now, Ordering::Relaxed);
        }
        current
    }

    /// Opens a queue another process writes, for reading only (nothing is created or changed).
    /// Nothing is readable until [`ConsumeQueue::refresh_read_only`].
    pub(crate) fn load_read_only(
        topic: &str,
        queue_id: i32,
        dir: &Path,
        file_size: i64,
    ) -> Result<ConsumeQueue> {
        let folder_id = Self::folder_id_of(dir);
        let queue = MappedFileQueue::load_read_only(dir, file_size)?;
        let mut cq = Self::over(topic, queue_id, queue, 0);
        cq.folder_id = folder_id;
        Ok(cq)
    }

    /// Read-only queues: extends the readable end over the units dispatched since the last
    /// refresh. A unit counts once it is whole (`offset >= 0 && size > 0`) and, for the last
    /// [`READ_ONLY_VERIFY_UNITS`] found, once `verify` confirms its commitlog record (a unit
    /// being written may be torn). Looks for new segments once the known ones are read to
    /// their end, and moves the minimum past records the commitlog no longer holds
    /// (`min_commit_log_offset`).
    pub(crate) fn refresh_read_only(
        &self,
        min_commit_log_offset: i64,
        verify: impl Fn(&CqUnit) -> bool,
    ) -> Result<()> {
        let size = self.queue.file_size();
        let mut end = self.read_only_end.load(Ordering::Acquire);
        if end < 0 {
            // The unchecked reads below rely on this process never writing the queue's files.
            return Err(StoreError::Internal(format!(
                "refresh_read_only on queue {}/{}, which this process writes",
                self.topic, self.queue_id
            )));
        }
        // The writer removed expired segments from the front: forget them (their mappings
        // stay valid for whoever still reads them).
        let front_removed = self.queue.front_removed();
        if front_removed {
            self.queue.reload_read_only()?;
        }
        // Fast path (every read calls this): no unit after the end inside the last segment,
        // and the commitlog's minimum did not move.
        let min_moved =
            self.read_only_min_commit_log.load(Ordering::Acquire) != min_commit_log_offset;
        if let Some(last) = self.queue.last().filter(|_| !front_removed && !min_moved) {
            let from = last.file_from_offset();
            if (from..from + size).contains(&end) {
                // SAFETY: a read-only queue (the store refreshes only those): this process
                // never writes its files; the unit is checked before it counts.
                let next = unsafe { last.read_unchecked(end - from, CQ_STORE_UNIT_SIZE) };
                if next.is_some_and(|b| {
                    let u = CqUnit::decode(0, b);
                    u.phy_offset < 0 || u.size <= 0
                }) {
                    return Ok(());
                }
            }
        }
        // New segments matter only once the known ones are read to their end.
        if self
            .queue
            .last()
            .is_none_or(|l| end >= l.file_from_offset() + size)
        {
            self.queue.reload_read_only()?;
        }
        let files = self.queue.files();
        if let Some(first) = files.first() {
            end = end.max(first.file_from_offset());
        }
        let start = end;
        // Whole units from the current end on, across segments.
        let mut found: Vec<(Arc<MappedFile>, i64)> = Vec::new();
        for f in &files {
            let from = f.file_from_offset();
            if end >= from + size {
                continue;
            }
            if end < from {
                break; // a gap: nothing after it is reachable
            }
            // SAFETY: a read-only queue: this process never writes its files; each unit is
            // checked before it counts.
            let Some(data) = (unsafe { f.read_unchecked(0, size) }) else {
                break;
            };
            let pos = whole_units_end(data, (end - from) as usize);
            end = from + pos as i64;
            found.push((f.clone(), pos as i64));
            if (pos as i64) < size {
                break;
            }
        }
        // Check the trailing units against their records; stop before the first that fails.
        let first_checked = (end - READ_ONLY_VERIFY_UNITS as i64 * CQ_STORE_UNIT_SIZE).max(start);
        let mut at = first_checked;
        // End of the record of the unit before, when known: units follow commitlog order.
        let mut prev_end = first_checked
            .checked_sub(CQ_STORE_UNIT_SIZE)
            .filter(|l| *l >= 0)
            .and_then(|l| self.unit_unchecked(&files, l))
            .filter(|u| !u.is_pre_blank())
            .and_then(|u| u.phy_offset.checked_add(i64::from(u.size)));
        while at < end {
            let Some((f, _)) = found
                .iter()
                .find(|(f, _)| at >= f.file_from_offset() && at < f.file_from_offset() + size)
            else {
                break;
            };
            // SAFETY: a read-only queue: this process never writes its files; the unit is
            // verified against its record.
            let bytes = unsafe { f.read_unchecked(at - f.file_from_offset(), CQ_STORE_UNIT_SIZE) }
                .unwrap_or(&[0; 20]);
            let u = CqUnit::decode(at / CQ_STORE_UNIT_SIZE, bytes);
            // A unit whose record lies wholly below the commitlog's minimum points at a
            // record the writer already deleted (an idle queue whose messages expired): there
            // is nothing left to check it against, and readers find its record gone
            // (MESSAGE_WAS_REMOVING, then OFFSET_TOO_SMALL once the minimum moves past it).
            // It must still follow the unit before it in commitlog order: a unit being
            // written, seen torn, is refused until it is whole and checked.
            let record_end = u.phy_offset.checked_add(i64::from(u.size));
            let expired = u.phy_offset >= 0
                && u.size > 0
                && record_end.is_some_and(|e| e <= min_commit_log_offset)
                && prev_end.is_none_or(|p| u.phy_offset >= p);
            if !u.is_pre_blank() && !expired && !verify(&u) {
                end = at;
                break;
            }
            if !u.is_pre_blank() {
                prev_end = record_end;
            }
            at += CQ_STORE_UNIT_SIZE;
        }
        for (f, _) in &found {
            // SAFETY: a read-only queue: this process never appends to its files.
            unsafe { f.set_read_only_position((end - f.file_from_offset()).clamp(0, size)) };
        }
        for f in &files {
            if f.file_from_offset() + size <= start {
                // SAFETY: as above.
                unsafe { f.set_read_only_position(size) };
            }
        }
        if end > start || self.max_physic_offset() < 0 {
            if let Some(last) = end
                .checked_sub(CQ_STORE_UNIT_SIZE)
                .filter(|l| *l >= 0)
                .and_then(|l| self.unit_unchecked(&files, l))
            {
                if !last.is_pre_blank() {
                    self.max_physic_offset
                        .store(last.phy_offset + i64::from(last.size), Ordering::Release);
                }
            }
        }
        self.read_only_end.store(end, Ordering::Release);
        // Only ever forward: threads reading meanwhile never see the minimum go back.
        self.min_logic_offset
            .fetch_max(self.min_past_pre_blanks(), Ordering::AcqRel);
        self.correct_min_offset(min_commit_log_offset);
        self.read_only_min_commit_log
            .store(min_commit_log_offset, Ordering::Release);
        Ok(())
    }

    fn unit_unchecked(&self, files: &[Arc<MappedFile>], logic: i64) -> Option<CqUnit> {
        if self.read_only_end.load(Ordering::Relaxed) < 0 {
            return None; // a queue this process writes: see `refresh_read_only`
        }
        let size = self.queue.file_size();
        let f = files
            .iter()
            .find(|f| logic >= f.file_from_offset() && logic < f.file_from_offset() + size)?;
        // SAFETY: a read-only queue (checked above), whose files this process never writes.
        let b = unsafe { f.read_unchecked(logic - f.file_from_offset(), CQ_STORE_UNIT_SIZE) }?;
        Some(CqUnit::decode(logic / CQ_STORE_UNIT_SIZE, b))
    }

    /// The minimum is the first unit of the first segment that is not a pre-blank.
    fn set_min_past_pre_blanks(&self) {
        self.min_logic_offset
            .store(self.min_past_pre_blanks(), Ordering::Release);
    }

    /// The first unit of the first segment that is not a pre-blank (logical bytes).
    fn min_past_pre_blanks(&self) -> i64 {
        let mut min = self.queue.min_offset().max(0);
        if let Some(first) = self.queue.first() {
            let data = first.read_from(0).unwrap_or(&[]);
            let mut pos = 0;
            while pos + 20 <= data.len() && CqUnit::decode(0, &data[pos..pos + 20]).is_pre_blank() {
                pos += 20;
            }
            min = first.file_from_offset() + pos as i64;
        }
        min
    }

    /// Removes an empty last segment the load set aside (see
    /// [`MappedFileQueue::remove_empty_leftover`]).
    pub(crate) fn remove_empty_leftover(&self) -> Result<bool> {
        self.queue.remove_empty_leftover()
    }

    pub(crate) fn topic(&self) -> &str {
        &self.topic
    }

    pub(crate) fn queue_id(&self) -> i32 {
        self.queue_id
    }

    fn units_per_file(&self) -> i64 {
        self.queue.file_size() / CQ_STORE_UNIT_SIZE
    }

    /// `getMaxOffsetInQueue`: the next queue offset to be written.
    pub(crate) fn max_offset(&self) -> i64 {
        match self.read_only_end.load(Ordering::Acquire) {
            -1 => self.queue.max_offset() / CQ_STORE_UNIT_SIZE,
            end => end / CQ_STORE_UNIT_SIZE,
        }
    }

    /// `getMinOffsetInQueue`.
    pub(crate) fn min_offset(&self) -> i64 {
        self.min_logic_offset.load(Ordering::Acquire) / CQ_STORE_UNIT_SIZE
    }

    /// End of the last commitlog record indexed, -1 when empty.
    pub(crate) fn max_physic_offset(&self) -> i64 {
        self.max_physic_offset.load(Ordering::Acquire)
    }

    /// `rollNextFile`: the first queue offset of the segment after the one holding `index`.
    pub(crate) fn roll_next_file(&self, index: i64) -> i64 {
        let per = self.units_per_file();
        index + per - index.rem_euclid(per)
    }

    fn file_for_append(&self, expect_logic: i64) -> Result<(Arc<MappedFile>, bool)> {
        if let Some(last) = self.queue.last() {
            if !last.is_full() {
                return Ok((last, false));
            }
        }
        let first_in_queue = self.queue.is_empty();
        let offset = self.queue.next_file_offset(expect_logic);
        let file = Arc::new(MappedFile::create(
            &self.queue.path_for(offset),
            offset,
            self.queue.file_size(),
        )?);
        self.queue.push(file.clone())?;
        Ok((file, first_in_queue))
    }

    /// `putMessagePositionInfo`: appends the unit for queue offset `cq_offset`. Idempotent: a
    /// record already indexed (or a queue offset already written) is skipped. Returns whether a
    /// unit was written. (Dispatch calls [`ConsumeQueue::put_cached`].)
    #[cfg(test)]
    pub(crate) fn put(
        &self,
        phy_offset: i64,
        size: i32,
        tags_code: i64,
        cq_offset: i64,
    ) -> Result<bool> {
        self.put_cached(&mut None, phy_offset, size, tags_code, cq_offset)
    }

    /// [`ConsumeQueue::put`] keeping the segment being written in `tail` between calls (the
    /// caller is the only writer of this queue while it holds `tail`).
    pub(crate) fn put_cached(
        &self,
        tail: &mut Option<Arc<MappedFile>>,
        phy_offset: i64,
        size: i32,
        tags_code: i64,
        cq_offset: i64,
    ) -> Result<bool> {
        if phy_offset + i64::from(size) <= self.max_physic_offset() {
            return Ok(false);
        }
        let expect_logic = cq_offset * CQ_STORE_UNIT_SIZE;
        let (file, first_in_queue) = match tail.take() {
            Some(f) if !f.is_full() => (f, false),
            _ => self.file_for_append(expect_logic)?,
        };
        let result = self.put_in(
            &file,
            first_in_queue,
            phy_offset,
            size,
            tags_code,
            cq_offset,
        );
        *tail = Some(file);
        result
    }

    fn put_in(
        &self,
        file: &Arc<MappedFile>,
        first_in_queue: bool,
        phy_offset: i64,
        size: i32,
        tags_code: i64,
        cq_offset: i64,
    ) -> Result<bool> {
        let expect_logic = cq_offset * CQ_STORE_UNIT_SIZE;
        if first_in_queue && cq_offset != 0 && file.wrote_position() == 0 {
            // The queue starts above 0: pad the first segment with pre-blank units.
            self.min_logic_offset.store(expect_logic, Ordering::Release);
            self.queue.set_flushed_where(expect_logic);
            let blank_to = expect_logic - file.file_from_offset();
            let mut at = 0;
            while at < blank_to {
                // SAFETY: dispatch is the only writer of a consume queue.
                unsafe { file.append_with(CQ_STORE_UNIT_SIZE, |b| encode_unit(b, 0, i32::MAX, 0)) };
                at += CQ_STORE_UNIT_SIZE;
            }
        }
        if cq_offset != 0 {
            let current = file.file_from_offset() + file.wrote_position();
            if expect_logic < current {
                return Ok(false);
            }
            if expect_logic != current {
                log::warn!(
                    target: "rmqstore.consume_queue",
                    "[BUG] logic queue order maybe wrong: {}-{} expects queue offset {cq_offset} \
                     at byte {expect_logic} but the queue ends at byte {current}",
                    self.topic,
                    self.queue_id
                );
            }
        }
        self.max_physic_offset
            .store(phy_offset + i64::from(size), Ordering::Release);
        // SAFETY: dispatch is the only writer of a consume queue.
        let placed = unsafe {
            file.append_with(CQ_STORE_UNIT_SIZE, |b| {
                encode_unit(b, phy_offset, size, tags_code)
            })
        };
        if placed.is_none() {
            return Err(StoreError::corrupted(
                file.path(),
                "consume queue segment has no room for a unit",
            ));
        }
        Ok(true)
    }

    /// The unit at queue offset `index`, if it is in `[min, max)`.
    pub(crate) fn get(&self, index: i64) -> Option<CqUnit> {
        let logic = index.checked_mul(CQ_STORE_UNIT_SIZE)?;
        if index < 0 || logic < self.min_logic_offset.load(Ordering::Acquire) {
            return None;
        }
        let file = self.queue.find_by_offset(logic)?;
        let b = file.read(logic - file.file_from_offset(), CQ_STORE_UNIT_SIZE)?;
        Some(CqUnit::decode(index, b))
    }

    /// `iterateFrom`: units from `index` to the end of the readable region of the segment that
    /// holds it, at most `max` of them. `None` when `index` is below the minimum or past the end.
    pub(crate) fn units_from(&self, index: i64, max: usize) -> Option<Vec<CqUnit>> {
        let logic = index.checked_mul(CQ_STORE_UNIT_SIZE)?;
        if index < 0 || logic < self.min_logic_offset.load(Ordering::Acquire) {
            return None;
        }
        let file = self.queue.find_by_offset(logic)?;
        let data = file.read_from(logic - file.file_from_offset())?;
        let n = (data.len() / CQ_STORE_UNIT_SIZE as usize).min(max);
        Some(
            (0..n)
                .map(|i| CqUnit::decode(index + i as i64, &data[i * 20..i * 20 + 20]))
                .collect(),
        )
    }

    /// Calls `f` for units `[from, to)` across segments; stops early when `f` returns false.
    /// Units are decoded in place from each segment's mapping, one at a time.
    pub(crate) fn scan(&self, from: i64, to: i64, mut f: impl FnMut(CqUnit) -> bool) {
        let mut index = from.max(self.min_offset());
        let to = to.min(self.max_offset());
        while index < to {
            let Some(logic) = index.checked_mul(CQ_STORE_UNIT_SIZE) else {
                return;
            };
            if logic < self.min_logic_offset.load(Ordering::Acquire) {
                return;
            }
            let Some(file) = self.queue.find_by_offset(logic) else {
                return;
            };
            let Some(data) = file.read_from(logic - file.file_from_offset()) else {
                return;
            };
            let n = (data.len() / CQ_STORE_UNIT_SIZE as usize).min((to - index) as usize);
            if n == 0 {
                return;
            }
            for unit in data.chunks_exact(CQ_STORE_UNIT_SIZE as usize).take(n) {
                let u = CqUnit::decode(index, unit);
                index += 1;
                if !f(u) {
                    return;
                }
            }
        }
    }

    /// `deleteExpiredFile(offset)`: removes the leading segments (never the last) whose last
    /// unit points below `min_commit_log_offset` (`deleteExpiredFileByOffset`, each held one
    /// waiting at most [`CQ_DESTROY_FORCIBLY_MS`]), then moves the minimum
    /// (`correctMinOffset`). Returns how many segment files were removed.
    pub(crate) fn delete_expired(&self, min_commit_log_offset: i64) -> Result<usize> {
        let size = self.queue.file_size();
        let now = crate::file::mapped_file_queue::now_ms();
        let (retried, held) = self.queue.retry_hanged(CQ_DESTROY_FORCIBLY_MS, now)?;
        let mut removed = retried.len();
        if !held {
            loop {
                let step = self.queue.delete_first_if(
                    |f| {
                        f.read(size - CQ_STORE_UNIT_SIZE, CQ_STORE_UNIT_SIZE)
                            // A segment of pre-blank units (phy offset 0) holds nothing either.
                            .is_some_and(|b| {
                                CqUnit::decode(0, b).phy_offset < min_commit_log_offset
                            })
                    },
                    CQ_DESTROY_FORCIBLY_MS,
                    now,
                )?;
                match step {
                    FrontDeletion::Deleted(_) => removed += 1,
                    FrontDeletion::Held(_) | FrontDeletion::Kept => break,
                }
            }
        }
        // Units in segments gone from the queue are no longer readable.
        let first = self.queue.min_offset();
        if first > 0 {
            self.min_logic_offset.fetch_max(first, Ordering::AcqRel);
        }
        self.correct_min_offset(min_commit_log_offset);
        Ok(removed)
    }

    /// Removes the files of segments whose deletion waited for a reader (at close).
    pub(crate) fn remove_hanged(&self) {
        self.queue.remove_hanged();
    }

    /// `correctMinOffset`: moves the minimum to the first unit whose record is at or after the
    /// commitlog's minimum offset.
    pub(crate) fn correct_min_offset(&self, min_commit_log_offset: i64) {
        let min = self.min_offset();
        let max = self.max_offset();
        if min >= max {
            return;
        }
        // Still right (units are in commitlog order): nothing to search.
        if self
            .get(min)
            .is_some_and(|u| !u.is_pre_blank() && u.phy_offset >= min_commit_log_offset)
        {
            return;
        }
        match self.get(max - 1) {
            Some(last) if last.phy_offset >= min_commit_log_offset => {}
            _ => {
                // fetch_max: readers correct too (`follow_commit_log_min`); one that computed
                // from an older commitlog minimum must not move the minimum back.
                self.min_logic_offset
                    .fetch_max(max * CQ_STORE_UNIT_SIZE, Ordering::AcqRel);
                return;
            }
        }
        // Binary search for the first unit with phy_offset >= min_commit_log_offset.
        let (mut lo, mut hi) = (min, max - 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid) {
                Some(u) if u.phy_offset >= min_commit_log_offset && !u.is_pre_blank() => hi = mid,
                _ => lo = mid + 1,
            }
        }
        self.min_logic_offset
            .fetch_max(lo * CQ_STORE_UNIT_SIZE, Ordering::AcqRel);
    }

    /// Readers' side of `correctMinOffset`: when the unit at the minimum points below the
    /// commitlog's minimum (its segment was deleted and the consume queue round has not run
    /// yet), corrects the minimum now, so that a read below it is OFFSET_TOO_SMALL at the
    /// first remaining message instead of a silent skip. One unit read when nothing expired.
    pub(crate) fn follow_commit_log_min(&self, min_commit_log_offset: i64) {
        let min = self.min_offset();
        if min >= self.max_offset() {
            return;
        }
        if self
            .get(min)
            .is_some_and(|u| !u.is_pre_blank() && u.phy_offset < min_commit_log_offset)
        {
            self.correct_min_offset(min_commit_log_offset);
        }
    }

    /// `recover`: from the third-from-last segment, finds the end of the valid units
    /// (`offset >= 0 && size > 0`) and truncates there.
    ///
    /// # Safety
    /// As [`MappedFileQueue::truncate_dirty`]: nothing may read or append to the queue until
    /// this returns, and no slice of its bytes may be alive (the store recovers while it opens,
    /// before the queue is shared).
    pub(crate) unsafe fn recover(&self) -> Result<()> {
        let files = self.queue.files();
        if files.is_empty() {
            return Ok(());
        }
        let start = files.len().saturating_sub(3);
        let mut end = files[start].file_from_offset();
        let mut max_phy = -1;
        for f in &files[start..] {
            let data = f.read_from(0).unwrap_or(&[]);
            let mut pos = 0usize;
            let mut whole = true;
            while pos + 20 <= data.len() {
                let u = CqUnit::decode(0, &data[pos..pos + 20]);
                if u.phy_offset >= 0 && u.size > 0 {
                    pos += 20;
                    if !u.is_pre_blank() {
                        max_phy = u.phy_offset + i64::from(u.size);
                    }
                } else {
                    whole = false;
                    break;
                }
            }
            end = f.file_from_offset() + pos as i64;
            if !whole {
                break;
            }
        }
        // SAFETY: this function's own contract (nothing reads or appends to the queue); the
        // scan's slices are gone.
        unsafe { self.queue.truncate_dirty(end) }?;
        self.queue.set_flushed_where(end);
        self.max_physic_offset.store(max_phy, Ordering::Release);
        // The first unit that is not a pre-blank is the minimum.
        self.set_min_past_pre_blanks();
        Ok(())
    }

    /// `truncateDirtyLogicFiles`: drops every unit whose record starts at or after
    /// `phy_offset` (the commitlog was truncated there).
    ///
    /// # Safety
    /// As [`ConsumeQueue::recover`]: called while the store opens or under its exclusive state
    /// lock (`truncate_files`), so that nothing reads or appends to the queue meanwhile.
    pub(crate) unsafe fn truncate_dirty(&self, phy_offset: i64) -> Result<()> {
        let files = self.queue.files();
        let mut cut = None;
        'files: for f in files.iter().rev() {
            let data = f.read_from(0).unwrap_or(&[]);
            let n = data.len() / 20;
            for i in 0..n {
                let u = CqUnit::decode(0, &data[i * 20..i * 20 + 20]);
                if u.is_pre_blank() {
                    continue;
                }
                if u.phy_offset >= phy_offset {
                    cut = Some(f.file_from_offset() + i as i64 * 20);
                    if i > 0 {
                        break 'files;
                    }
                    continue 'files;
                }
            }
            break;
        }
        if let Some(cut) = cut {
            // SAFETY: this function's own contract: nothing else reads or appends to the queue;
            // the scan's slices are gone.
            unsafe { self.queue.truncate_dirty(cut) }?;
            if self.queue.max_offset() <= self.min_logic_offset.load(Ordering::Acquire) {
                self.min_logic_offset
                    .store(self.queue.max_offset(), Ordering::Release);
            }
        }
        // Recompute the last indexed record end.
        let max = self.max_offset();
        let max_phy = if max > self.min_offset() {
            self.get(max - 1)
                .filter(|u| !u.is_pre_blank())
                .map_or(-1, |u| u.phy_offset + i64::from(u.size))
        } else {
            -1
        };
        self.max_physic_offset.store(max_phy, Ordering::Release);
        Ok(())
    }

    /// `ConsumeQueue.destroy`: deletes the queue's segments (those waiting for a reader too)
    /// and its folder, leaving the queue empty. Mappings stay valid for whoever still holds one
    /// of its segments (nothing is unmapped under it); the store takes the queue out of its
    /// table first, so no new reader or writer finds it.
    /// (The store moves the folder aside and unlinks it later instead: see
    /// `store::topics_clean`.)
    #[cfg(test)]
    pub(crate) fn destroy(&self) -> Result<()> {
        // Emptied first: a holder (a cleaning round with a list of the queues taken before)
        // then finds no segment to delete, not even one of a queue made again at this path.
        for f in self.queue.take_all() {
            f.destroy()?;
        }
        let dir = self.queue.dir();
        match std::fs::remove_dir_all(dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io("cannot delete", dir, e)),
        }
    }

    /// Empties the queue (as [`ConsumeQueue::destroy`] does first) and returns its segments,
    /// for a caller that moves the folder away and removes it later.
    pub(crate) fn take_segments(&self) -> Vec<Arc<MappedFile>> {
        self.queue.take_all()
    }

    /// The queue's folder.
    pub(crate) fn dir(&self) -> &Path {
        self.queue.dir()
    }

    /// Forces written units to disk; true iff nothing moved.
    pub(crate) fn flush(&self, least_pages: i64) -> Result<bool> {
        self.queue.flush(least_pages)
    }

    /// Segment files, oldest first.
    #[cfg(test)]
    pub(crate) fn segment_paths(&self) -> Vec<std::path::PathBuf> {
        self.queue
            .files()
            .iter()
            .map(|f| f.path().to_path_buf())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rmqstore-cq-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn put_is_idempotent_and_rolls() {
        let d = tmp("put");
        // 10 units per file.
        let cq = ConsumeQueue::load("T", 0, &d, 200).unwrap();
        unsafe { cq.recover() }.unwrap();
        assert_eq!(
            (cq.min_offset(), cq.max_offset(), cq.max_physic_offset()),
            (0, 0, -1)
        );
        for i in 0..25 {
            assert!(cq.put(i * 100, 100, i, i).unwrap());
        }
        assert_eq!(cq.max_offset(), 25);
        assert_eq!(cq.segment_paths().len(), 3);
        // Replaying an already-built unit is skipped.
        assert!(!cq.put(2400, 100, 24, 24).unwrap());
        assert!(!cq.put(500, 100, 5, 5).unwrap());
        assert_eq!(cq.max_offset(), 25);
        let u = cq.get(13).unwrap();
        assert_eq!((u.phy_offset, u.size, u.tags_code), (1300, 100, 13));
        assert!(cq.get(25).is_none());
        let units = cq.units_from(7, 100).unwrap();
        assert_eq!(units.len(), 3, "iteration stops at the end of the segment");
        assert_eq!(cq.roll_next_file(7), 10);
        let mut seen = Vec::new();
        cq.scan(3, 22, |u| {
            seen.push(u.queue_offset);
            true
        });
        assert_eq!(seen, (3..22).collect::<Vec<_>>());
        let bytes = std::fs::read(&cq.segment_paths()[1]).unwrap();
        assert_eq!(&bytes[0..8], &1000i64.to_be_bytes());
        assert_eq!(&bytes[8..12], &100i32.to_be_bytes());
        assert_eq!(&bytes[12..20], &10i64.to_be_bytes());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// MappedFileQueueTest.testDeleteExpiredFileByOffset, on a consume queue: 2048 units
    /// (phy offsets 0..2047, 256 a segment); while a reader holds the first segment nothing is
    /// removed (it leaves the readable set, and the minimum moves past it); once released,
    /// every segment but the last goes, since all point below 20480.
    #[test]
    fn delete_expired_by_offset_like_mapped_file_queue_test() {
        let d = tmp("by-offset");
        let cq = ConsumeQueue::load("T", 0, &d, 5120).unwrap();
        unsafe { cq.recover() }.unwrap();
        for i in 0..2048 {
            assert!(cq.put(i, 1, 0, i).unwrap());
        }
        assert_eq!(cq.segment_paths().len(), 8);
        let paths = cq.segment_paths();
        let held = cq.queue.first().unwrap();
        assert_eq!(cq.delete_expired(20480).unwrap(), 0);
        assert!(paths[0].exists(), "held: its file stays");
        assert_eq!(cq.queue.hanged_paths(), vec![paths[0].clone()]);
        // No unit points at or above 20480: the minimum is the queue's end.
        assert_eq!((cq.min_offset(), cq.max_offset()), (2048, 2048));
        drop(held);
        assert_eq!(cq.delete_expired(20480).unwrap(), 7);
        assert!(cq.queue.first().unwrap().file_from_offset() > 0);
        assert_eq!(cq.segment_paths(), vec![paths[7].clone()]);
        assert!(paths[..7].iter().all(|p| !p.exists()));
        // Some units still valid: the minimum is the first of them.
        let d2 = tmp("by-offset-2");
        let cq = ConsumeQueue::load("T", 0, &d2, 5120).unwrap();
        unsafe { cq.recover() }.unwrap();
        for i in 0..2048 {
            cq.put(i * 10, 10, 0, i).unwrap();
        }
        // Units 0..=599 point below 6000: segments 0 and 1 (units 0..511) go.
        assert_eq!(cq.delete_expired(6000).unwrap(), 2);
        assert_eq!((cq.min_offset(), cq.max_offset()), (600, 2048));
        assert!(cq.get(599).is_none());
        assert_eq!(cq.get(600).unwrap().phy_offset, 6000);
        assert_eq!(cq.delete_expired(6000).unwrap(), 0);
        // Reloaded: the same minimum once corrected again (as the store does at open).
        drop(cq);
        let cq = ConsumeQueue::load("T", 0, &d2, 5120).unwrap();
        unsafe { cq.recover() }.unwrap();
        assert_eq!(cq.min_offset(), 512);
        cq.correct_min_offset(6000);
        assert_eq!(cq.min_offset(), 600);
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&d2);
    }

    /// A read-only queue serves units whose records the writer already deleted (an idle,
    /// expired queue: nothing left to check them against) as long as they follow commitlog
    /// order; a torn unit below the minimum (out of order) is not served.
    #[test]
    fn read_only_units_of_expired_records_follow_commitlog_order() {
        let d = tmp("ro-expired");
        let cq = ConsumeQueue::load("T", 0, &d, 200).unwrap();
        unsafe { cq.recover() }.unwrap();
        for i in 0..5 {
            cq.put(1000 + i * 100, 100, 0, i).unwrap();
        }
        let ro = ConsumeQueue::load_read_only("T", 0, &d, 200).unwrap();
        // Every record is below the commitlog's minimum (10_000); nothing can be checked.
        ro.refresh_read_only(10_000, |_| false).unwrap();
        assert_eq!((ro.min_offset(), ro.max_offset()), (5, 5));
        // A sixth unit seen torn: its phy offset (high bytes not there yet) goes back.
        let mut torn = [0u8; 20];
        encode_unit(&mut torn, 1500 & 0xff, 100, 0);
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(d.join("00000000000000000000"))
                .unwrap();
            f.write_all_at(&torn, 100).unwrap();
        }
        ro.refresh_read_only(10_000, |_| false).unwrap();
        assert_eq!(
            ro.max_offset(),
            5,
            "a unit out of commitlog order is not served"
        );
        // The same unit once whole.
        cq.put(1500, 100, 0, 5).unwrap();
        ro.refresh_read_only(10_000, |_| false).unwrap();
        assert_eq!(ro.max_offset(), 6);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn correct_min_offset_like_consume_queue_test() {
        let d = tmp("min");
        let cq = ConsumeQueue::load("T", 0, &d, 20 * 30_000).unwrap();
        unsafe { cq.recover() }.unwrap();
        for i in 0..10_000 {
            cq.put(i * 100, 100, 0, i).unwrap();
        }
        cq.correct_min_offset(2000);
        assert_eq!(cq.min_offset(), 20);
        cq.correct_min_offset(10_000 * 100);
        assert_eq!(cq.min_offset(), cq.max_offset());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_queue_starting_above_zero_is_pre_blanked_and_survives_reload() {
        let d = tmp("blank");
        let cq = ConsumeQueue::load("T", 0, &d, 20 * 1000).unwrap();
        unsafe { cq.recover() }.unwrap();
        cq.put(5000, 100, 7, 100).unwrap();
        assert_eq!((cq.min_offset(), cq.max_offset()), (100, 101));
        assert!(cq.get(99).is_none());
        assert_eq!(cq.get(100).unwrap().phy_offset, 5000);
        drop(cq);
        let cq = ConsumeQueue::load("T", 0, &d, 20 * 1000).unwrap();
        unsafe { cq.recover() }.unwrap();
        assert_eq!((cq.min_offset(), cq.max_offset()), (100, 101));
        assert_eq!(cq.max_physic_offset(), 5100);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_queue_this_process_writes_is_never_refreshed_as_read_only() {
        // refresh_read_only reads units without the writer's synchronisation; on a queue this
        // process appends to, that would race the appender, so it is refused.
        let d = tmp("refresh-writable");
        let cq = ConsumeQueue::load("T", 2, &d, 200).unwrap();
        unsafe { cq.recover() }.unwrap();
        cq.put(0, 100, 0, 0).unwrap();
        let err = cq.refresh_read_only(0, |_| true).unwrap_err();
        assert!(
            err.to_string().contains("which this process writes"),
            "{err}"
        );
        assert_eq!(cq.max_offset(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_destroyed_queue_held_by_a_cleaning_round_never_deletes_the_new_queue_files() {
        let d = tmp("destroyed-held");
        let old = ConsumeQueue::load("T", 0, &d, 200).unwrap();
        unsafe { old.recover() }.unwrap();
        for i in 0..25 {
            old.put(i * 100, 100, 0, i).unwrap();
        }
        old.destroy().unwrap();
        assert!(!d.exists());
        // The topic is put to again: a new queue at the same folder, same file names.
        let new = ConsumeQueue::load("T", 0, &d, 200).unwrap();
        unsafe { new.recover() }.unwrap();
        for i in 0..25 {
            new.put(10_000 + i * 100, 100, 0, i).unwrap();
        }
        let paths = new.segment_paths();
        // A round that listed the queues before the deletion cleans the old one now.
        assert_eq!(old.delete_expired(1_000_000).unwrap(), 0);
        old.remove_hanged();
        assert!(
            paths.iter().all(|p| p.exists()),
            "a new queue's file was deleted"
        );
        assert_eq!(new.get(3).unwrap().phy_offset, 10_300);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn recover_and_truncate() {
        let d = tmp("recover");
        let cq = ConsumeQueue::load("T", 1, &d, 200).unwrap();
        unsafe { cq.recover() }.unwrap();
        for i in 0..25 {
            cq.put(i * 100, 100, 0, i).unwrap();
        }
        drop(cq);
        let cq = ConsumeQueue::load("T", 1, &d, 200).unwrap();
        unsafe { cq.recover() }.unwrap();
        assert_eq!((cq.max_offset(), cq.max_physic_offset()), (25, 2500));
        unsafe { cq.truncate_dirty(1500) }.unwrap();
        assert_eq!((cq.max_offset(), cq.max_physic_offset()), (15, 1500));
        assert_eq!(cq.segment_paths().len(), 2);
        unsafe { cq.truncate_dirty(1000) }.unwrap();
        assert_eq!((cq.max_offset(), cq.max_physic_offset()), (10, 1000));
        assert!(cq.put(1000, 100, 0, 10).unwrap());
        assert_eq!(cq.max_offset(), 11);
        let _ = std::fs::remove_dir_all(&d);
    }
}
