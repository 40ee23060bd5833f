//! Topic deletion (RocketMQ 5.5.1 `DefaultMessageStore.deleteTopics`, `cleanUnusedTopic`,
//! `cleanExpiredConsumerQueue` and `ConsumeQueueStore.deleteTopic` / `cleanExpired`).
//!
//! What goes: the topic's consume queues (out of the table, then their files and folders) and
//! its entries of the commitlog's topic-queue table (`removeQueueFromTopicQueueTable`), so the
//! next put to the topic starts a fresh queue at queue offset 0. What stays, as in RocketMQ:
//! its records in the commitlog (until they expire) and its keys in the index files
//! (`query_message` still finds them, as RocketMQ's does). The broker's files (`topics.json`,
//! `consumerOffset.json`) are the Python side's.
//!
//! Each call runs alone: it takes the store's state lock exclusively (calls in flight finish
//! first, puts and dispatch wait), makes the commitlog durable and dispatches it to its end
//! before it looks at the queues (most of that forcing and dispatching is done just before,
//! while puts still go on). The queues' folders are moved aside ([`DELETING_DIR`]) while the
//! lock is held and unlinked once it is released. So no record of a deleted topic is left undispatched to
//! come back later with its old queue offsets, no dispatch round writes into a queue being
//! destroyed, and no reader is inside a queue while it goes (a reader holding a queue or a
//! segment keeps its mapping: files are unlinked, never unmapped under it). A deleted topic's
//! records are remembered in a tombstone (`queue::tombstones`) so that neither a later open nor
//! a re-dispatch brings them back.
//!
//! System topics (`TopicValidator.isSystemTopic`): `delete_topics` refuses the whole call when
//! one is named (as the broker's `AdminBrokerProcessor.deleteTopic` / `deleteTopicList` do with
//! `validateSystemTopicWhenUpdateTopic`, its default; the store-level `deleteTopics` itself does
//! not look); `clean_unused_topics` keeps them and LMQ topics (`cleanUnusedTopic`);
//! `clean_expired_consumer_queues` never touches a system topic's queues (`cleanExpired`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::file::mapped_file::MappedFile;
use crate::queue::consume_queue::ConsumeQueue;

use super::{MessageStore, Open, OPEN_DISPATCH_CHUNK};

/// Folder beside `consumequeue/` where the folders of deleted queues wait: moved there while
/// the store is held (one rename a topic or queue), removed once it is released, so that puts
/// do not wait for the files to be unlinked. A leftover (a crash meanwhile) goes at the next
/// open.
pub(crate) const DELETING_DIR: &str = "consumequeue.deleting";

/// What a deletion leaves to remove once the store is released.
#[derive(Default)]
struct Leftovers {
    dirs: Vec<PathBuf>,
    /// The deleted queues' segments (their mappings go with them).
    segments: Vec<Arc<MappedFile>>,
}

impl Leftovers {
    fn remove(self, root: &Path) {
        for d in &self.dirs {
            if let Err(e) = std::fs::remove_dir_all(d) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    log::warn!(
                        target: "rmqstore.topics",
                        "cannot delete {} (the next open retries): {e}",
                        d.display()
                    );
                }
            }
        }
        drop(self.segments);
        if !self.dirs.is_empty() {
            delete_empty_dir(&root.join(DELETING_DIR));
        }
    }
}

/// Removes what a deletion left behind when the process stopped before it could (at open).
pub(crate) fn remove_deleting_leftovers(root: &Path) {
    let dir = root.join(DELETING_DIR);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => log::info!(
            target: "rmqstore.topics",
            "removed {} (queues deleted before the last stop)",
            dir.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => log::warn!(
            target: "rmqstore.topics",
            "cannot delete {}: {e}",
            dir.display()
        ),
    }
}

/// `TopicValidator.SYSTEM_TOPIC_SET` (RocketMQ 5.5.1); the Python package takes its list from
/// here.
pub const SYSTEM_TOPICS: [&str; 12] = [
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "BenchmarkTest",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
    "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC",
    "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC",
];

/// `TopicValidator.SYSTEM_TOPIC_PREFIX`.
pub const SYSTEM_TOPIC_PREFIX: &str = "rmq_sys_";

/// `MixAll.LMQ_PREFIX`.
const LMQ_PREFIX: &str = "%LMQ%";

/// `TopicValidator.isSystemTopic`.
pub fn is_system_topic(topic: &str) -> bool {
    SYSTEM_TOPICS.contains(&topic) || topic.starts_with(SYSTEM_TOPIC_PREFIX)
}

/// `MixAll.isLmq`.
pub fn is_lmq_topic(topic: &str) -> bool {
    topic.starts_with(LMQ_PREFIX)
}

/// `UtilAll.deleteEmptyDirectory`: removes `dir` if it exists and is empty.
fn delete_empty_dir(dir: &Path) {
    if let Err(e) = std::fs::remove_dir(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            log::warn!(
                target: "rmqstore.topics",
                "cannot delete the folder {}: {e}",
                dir.display()
            );
        }
    }
}

impl MessageStore {
    /// Runs `f` with the store to itself (see the module documentation): the state lock held
    /// exclusively, the commitlog durable and dispatched to its end.
    fn with_store_to_itself<T>(
        &self,
        what: &str,
        f: impl FnOnce(&Open, &mut Leftovers) -> Result<T>,
    ) -> Result<T> {
        self.writable(what)?;
        // Most of the forcing and dispatching first, while puts still go on: under the lock
        // only what came meanwhile is left.
        self.with_open(|o| -> Result<()> {
            o.commitlog.flush_all()?;
            while o.behind() > 0 {
                if o.dispatch(OPEN_DISPATCH_CHUNK)?.bytes == 0 {
                    break;
                }
            }
            Ok(())
        })??;
        let guard = self.state.write().unwrap_or_else(|p| p.into_inner());
        let Some(o) = guard.as_ref() else {
            return Err(StoreError::Closed);
        };
        // Write buffers and (SYNC_FLUSH) unforced bytes are not dispatchable yet.
        o.commitlog.flush_all()?;
        while o.behind() > 0 {
            if o.dispatch(OPEN_DISPATCH_CHUNK)?.bytes == 0 {
                break;
            }
        }
        let mut left = Leftovers::default();
        let out = f(o, &mut left);
        drop(guard);
        left.remove(&self.root);
        out
    }

    /// Moves the folder `dir` of the (already emptied from the table) `queues` into
    /// [`DELETING_DIR`], for [`Leftovers::remove`]; where it cannot be moved, deletes it here.
    fn move_away(
        &self,
        dir: &Path,
        queues: &[Arc<ConsumeQueue>],
        left: &mut Leftovers,
    ) -> Result<()> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let segments: Vec<Arc<MappedFile>> =
            queues.iter().flat_map(|cq| cq.take_segments()).collect();
        let trash = self.root.join(DELETING_DIR);
        let name = format!(
            "{}.{}.{}",
            dir.strip_prefix(self.root.join("consumequeue"))
                .unwrap_or(dir)
                .to_string_lossy()
                .replace('/', "."),
            crate::util::now_millis(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let target = trash.join(name);
        let moved = std::fs::create_dir_all(&trash).and_then(|()| std::fs::rename(dir, &target));
        match moved {
            Ok(()) => {
                left.dirs.push(target);
                left.segments.extend(segments);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !dir.exists() => Ok(()),
            Err(e) => {
                log::warn!(
                    target: "rmqstore.topics",
                    "cannot move {} aside ({e}): deleting it now",
                    dir.display()
                );
                for f in &segments {
                    f.destroy()?;
                }
                match std::fs::remove_dir_all(dir) {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(StoreError::io("cannot delete", dir, e)),
                }
            }
        }
    }

    /// `DefaultMessageStore.deleteTopics`: removes every consume queue of each topic named
    /// (files, folders, the in-memory table) and its entries of the commitlog's topic-queue
    /// table; a later put to the topic starts again at queue offset 0. Returns how many topics
    /// had queues to remove (a topic without any is passed over). A blank or system topic
    /// refuses the whole call ([`StoreError::InvalidArgument`]) before anything changes.
    pub fn delete_topics<S: AsRef<str>>(&self, topics: &[S]) -> Result<usize> {
        let mut wanted: Vec<String> = Vec::new();
        for t in topics {
            let t = t.as_ref();
            if t.trim().is_empty() {
                return Err(StoreError::InvalidArgument(
                    "the specified topic is blank; nothing was deleted".to_owned(),
                ));
            }
            if is_system_topic(t) {
                return Err(StoreError::InvalidArgument(format!(
                    "the topic {:?} is a system topic, which cannot be deleted; nothing was \
                     deleted",
                    truncated(t)
                )));
            }
            if !wanted.iter().any(|w| w == t) {
                wanted.push(t.to_owned());
            }
        }
        if wanted.is_empty() {
            return Ok(0);
        }
        self.with_store_to_itself("delete_topics", |o, left| {
            Ok(self.delete_topics_in(o, &wanted, left)?.len())
        })
    }

    /// `DefaultMessageStore.cleanUnusedTopic`: deletes (as [`MessageStore::delete_topics`])
    /// every topic with consume queues that `keep` does not name, except system and LMQ
    /// topics. Returns the topics deleted, sorted.
    pub fn clean_unused_topics(&self, keep: &HashSet<String>) -> Result<Vec<String>> {
        self.with_store_to_itself("clean_unused_topics", |o, left| {
            let unused: Vec<String> = o
                .cqs
                .topics()
                .into_iter()
                .filter(|t| !keep.contains(t) && !is_system_topic(t) && !is_lmq_topic(t))
                .collect();
            self.delete_topics_in(o, &unused, left)
        })
    }

    /// `DefaultMessageStore.cleanExpiredConsumerQueue` (`ConsumeQueueStore.cleanExpired`): with
    /// the commitlog's minimum offset, destroys every consume queue of a non-system topic whose
    /// last indexed record ends before it (every message of the queue has expired), with its
    /// entry of the topic-queue table (the queue starts again at queue offset 0), and the
    /// topic's folder once it has no queue left. Queues that index nothing yet are kept.
    /// Returns the queues destroyed, as (topic, queue id), sorted.
    pub fn clean_expired_consumer_queues(&self) -> Result<Vec<(String, i32)>> {
        self.with_store_to_itself("clean_expired_consumer_queues", |o, left| {
            let min = o.commitlog.min_offset();
            let mut destroyed = Vec::new();
            let mut first_error = None;
            for cq in o.cqs.all() {
                let (topic, queue_id) = (cq.topic(), cq.queue_id());
                if is_system_topic(topic) {
                    continue;
                }
                let last = cq.max_physic_offset();
                if last == -1 || last >= min {
                    continue;
                }
                log::info!(
                    target: "rmqstore.topics",
                    "cleanExpiredConsumerQueue: {topic} {queue_id} consume queue destroyed, \
                     minCommitLogOffset: {min} maxCLOffsetInConsumeQueue: {last}"
                );
                o.commitlog.remove_queue_offset(topic, queue_id);
                let topic_gone = o
                    .cqs
                    .remove_queue(topic, queue_id)
                    .is_some_and(|(_, gone)| gone);
                if let Err(e) = self.move_away(cq.dir(), std::slice::from_ref(&cq), left) {
                    first_error.get_or_insert(e);
                }
                if topic_gone {
                    delete_empty_dir(&o.cqs.topic_dir(topic));
                }
                destroyed.push((topic.to_owned(), queue_id));
            }
            o.cqs.tombstones().update(&[], 0, min)?;
            match first_error {
                Some(e) => Err(e),
                None => Ok(destroyed),
            }
        })
    }

    /// Deletes the topics of `topics` that have consume queues; returns those.
    fn delete_topics_in(
        &self,
        o: &Open,
        topics: &[String],
        left: &mut Leftovers,
    ) -> Result<Vec<String>> {
        let present: Vec<String> = topics
            .iter()
            .filter(|t| !o.cqs.queue_ids(t).is_empty())
            .cloned()
            .collect();
        if present.is_empty() {
            return Ok(present);
        }
        // Every record of these topics lies below the end (puts wait, and everything was
        // dispatched): the tombstone goes first, so that a failure to write it deletes nothing.
        let end = o.commitlog.max_offset();
        o.cqs
            .tombstones()
            .update(&present, end, o.commitlog.min_offset())?;
        let mut first_error = None;
        for topic in &present {
            let queues = o.cqs.remove_topic(topic);
            for cq in &queues {
                o.commitlog.remove_queue_offset(topic, cq.queue_id());
                log::info!(
                    target: "rmqstore.topics",
                    "DeleteTopic: ConsumeQueue has been cleaned, topic={topic}, queueId={}",
                    cq.queue_id()
                );
            }
            if let Err(e) = self.move_away(&o.cqs.topic_dir(topic), &queues, left) {
                first_error.get_or_insert(e);
            }
            log::info!(
                target: "rmqstore.topics",
                "DeleteTopic: Topic has been destroyed, topic={topic}"
            );
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(present),
        }
    }
}

fn truncated(s: &str) -> &str {
    match s.char_indices().nth(200) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
