//! Retention: removing expired commitlog segments (`CommitLog.deleteExpiredFile`, i.e.
//! `MappedFileQueue.deleteExpiredFileByTime`), retrying a segment whose deletion waited for a
//! reader (`reDeleteHangedFile`), and the consume queue and index files wholly below the
//! commitlog's new minimum (`CleanConsumeQueueService`). Python's service threads decide when
//! and with which settings (`file_reserved_time`, `delete_when`, disk ratios); these are the
//! rounds themselves.
//!
//! A segment is only ever taken out of its queue and unlinked: whoever still holds it keeps a
//! valid mapping of the same bytes (on Linux an unlinked file lives while it is mapped), so no
//! reader can fault. A held segment is first taken out of the queue (no new reader finds it)
//! and its file removed once nothing holds it, or once `destroy_forcibly_ms` have passed since
//! the first attempt, as RocketMQ's `ReferenceResource.shutdown(intervalForcibly)` does.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Result, StoreError};
use crate::file::mapped_file_queue::{now_ms, FrontDeletion};

use super::MessageStore;

fn non_negative(name: &str, value: i64) -> Result<()> {
    if value < 0 {
        return Err(StoreError::InvalidArgument(format!(
            "{name} must be >= 0, got {value}"
        )));
    }
    Ok(())
}

impl MessageStore {
    /// `deleteExpiredFileByTime` on the commitlog: removes, oldest first, the segments whose
    /// file was last modified at least `expired_ms` ago (any of them with `clean_at_once`),
    /// never the last one (being written), stopping at the first that does not qualify
    /// (nothing is removed from the middle) and after `batch_max` removals, sleeping
    /// `interval_ms` between two. A segment still held by a reader is taken out of the readable
    /// set and ends the round; its file goes once nothing holds it or `destroy_forcibly_ms`
    /// after the first attempt, retried first by the next round (or by
    /// [`MessageStore::redelete_hanged_file`]). Returns the paths removed, oldest first.
    pub fn delete_expired_commit_log_files(
        &self,
        expired_ms: i64,
        interval_ms: i64,
        destroy_forcibly_ms: i64,
        clean_at_once: bool,
        batch_max: i32,
    ) -> Result<Vec<PathBuf>> {
        self.writable("delete_expired_commit_log_files")?;
        non_negative("expired_ms", expired_ms)?;
        non_negative("interval_ms", interval_ms)?;
        non_negative("destroy_forcibly_ms", destroy_forcibly_ms)?;
        if batch_max < 1 {
            return Err(StoreError::InvalidArgument(format!(
                "batch_max must be >= 1, got {batch_max}"
            )));
        }
        let batch_max = batch_max as usize;
        // A segment that waited for a reader comes first, as it stays first in RocketMQ's
        // queue: while it is still held, nothing after it goes.
        let (mut removed, held) = self.with_open(|o| {
            o.commitlog
                .queue()
                .retry_hanged(destroy_forcibly_ms, now_ms())
        })??;
        if held {
            return Ok(removed);
        }
        while removed.len() < batch_max {
            // Each step takes the store's read side on its own, so a close never waits for
            // the sleeps between them.
            let step = self.with_open(|o| {
                let now = now_ms();
                o.commitlog.queue().delete_first_if(
                    |f| clean_at_once || now >= f.last_modified_ms().saturating_add(expired_ms),
                    destroy_forcibly_ms,
                    now,
                )
            })??;
            match step {
                FrontDeletion::Deleted(path) => removed.push(path),
                FrontDeletion::Held(_) | FrontDeletion::Kept => break,
            }
            if removed.len() >= batch_max || interval_ms == 0 {
                continue;
            }
            let more = self.with_open(|o| o.commitlog.queue().files().len() > 1)?;
            if !more || self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(interval_ms as u64));
        }
        if !removed.is_empty() {
            log::info!(
                target: "rmqstore.clean",
                "{}: removed {} expired commitlog segment(s), the minimum offset is now {}",
                self.root.display(),
                removed.len(),
                self.with_open(|o| o.commitlog.min_offset())?
            );
        }
        Ok(removed)
    }

    /// `reDeleteHangedFile` (`retryDeleteFirstFile`): retries the commitlog segments whose
    /// deletion waited for a reader, removing each once nothing holds it or
    /// `destroy_forcibly_ms` after its first attempt. True when one was removed.
    pub fn redelete_hanged_file(&self, destroy_forcibly_ms: i64) -> Result<bool> {
        self.writable("redelete_hanged_file")?;
        non_negative("destroy_forcibly_ms", destroy_forcibly_ms)?;
        let (removed, _) = self.with_open(|o| {
            o.commitlog
                .queue()
                .retry_hanged(destroy_forcibly_ms, now_ms())
        })??;
        Ok(!removed.is_empty())
    }

    /// Commitlog segments taken out by a deletion whose files still wait for a reader.
    pub fn hanged_commit_log_files(&self) -> Result<Vec<PathBuf>> {
        self.with_open(|o| o.commitlog.queue().hanged_paths())
    }

    /// `CleanConsumeQueueService.deleteExpiredFiles` for the commitlog's current minimum: every
    /// consume queue removes its leading segments whose units all point below it and moves its
    /// minimum (`deleteExpiredFile` + `correctMinOffset`), sleeping `interval_ms` after a
    /// queue that removed files; then the index files wholly below it are removed. Returns
    /// (consume queue files removed, index files removed).
    pub fn clean_consume_queues(&self, interval_ms: i64) -> Result<(usize, usize)> {
        self.writable("clean_consume_queues")?;
        non_negative("interval_ms", interval_ms)?;
        let (min, queues) = self.with_open(|o| (o.commitlog.min_offset(), o.cqs.all()))?;
        if min < 0 {
            return Ok((0, 0));
        }
        let mut cq_files = 0;
        for cq in queues {
            let n = self.with_open(|_| cq.delete_expired(min))??;
            if n > 0 {
                log::info!(
                    target: "rmqstore.clean",
                    "consume queue {}-{}: removed {n} segment(s) below commitlog offset {min}",
                    cq.topic(),
                    cq.queue_id()
                );
                cq_files += n;
                if interval_ms > 0 && !self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(interval_ms as u64));
                }
            }
        }
        let index_files = self.with_open(|o| match &o.index {
            Some(index) => index.delete_expired(min),
            None => Ok(0),
        })??;
        Ok((cq_files, index_files))
    }
}
