//! All consume queues of a store: `consumequeue/<topic>/<queueId>/` (docs/format.md#consume-queues,
//! docs/architecture.md#opening).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::error::{Result, StoreError};
use crate::format::{topic_is_legal, CQ_STORE_UNIT_SIZE};
use crate::queue::consume_queue::ConsumeQueue;
use crate::queue::tombstones::Tombstones;

pub(crate) struct ConsumeQueueStore {
    dir: PathBuf,
    file_size: i64,
    queues: RwLock<HashMap<String, BTreeMap<i32, Arc<ConsumeQueue>>>>,
    /// Another process writes these queues (a read-only store).
    read_only: bool,
    /// Deleted topics whose old records dispatch passes over (see [`Tombstones`]).
    tombstones: Tombstones,
}

impl std::fmt::Debug for ConsumeQueueStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumeQueueStore")
            .field("dir", &self.dir)
            .finish()
    }
}

fn parse_queue_id(name: &str) -> Option<i32> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) || name.len() > 10 {
        return None;
    }
    name.parse::<i32>().ok()
}

/// The queue folders under `dir` as (topic, queue id, folder). Folder names must be legal
/// topics and queue ids; anything else is an error naming it.
fn list_queues(dir: &Path) -> Result<Vec<(String, i32, PathBuf)>> {
    let mut found: Vec<(String, i32, PathBuf)> = Vec::new();
    let topics = std::fs::read_dir(dir).map_err(|e| StoreError::io("cannot list", dir, e))?;
    for t in topics {
        let t = t.map_err(|e| StoreError::io("cannot list", dir, e))?;
        let tpath = t.path();
        let Some(topic) = t.file_name().to_str().map(str::to_owned) else {
            return Err(StoreError::corrupted(
                &tpath,
                "topic folder name is not UTF-8",
            ));
        };
        // The entry's own type (a link to a folder is not a topic folder: queues written
        // through it would land outside the store).
        let is_dir = t.file_type().is_ok_and(|ft| ft.is_dir());
        if !topic_is_legal(&topic) || !is_dir {
            return Err(StoreError::corrupted(
                &tpath,
                "unexpected entry in consumequeue/ (expected topic folders, not links or files)",
            ));
        }
        let queues = match std::fs::read_dir(&tpath) {
            Ok(q) => q,
            // Deleted meanwhile (a writer deleting the topic while a read-only store looks).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(StoreError::io("cannot list", &tpath, e)),
        };
        for q in queues {
            let q = q.map_err(|e| StoreError::io("cannot list", &tpath, e))?;
            let qpath = q.path();
            let qid = q.file_name().to_str().and_then(parse_queue_id);
            match qid {
                Some(qid) if q.file_type().is_ok_and(|ft| ft.is_dir()) => {
                    found.push((topic.clone(), qid, qpath))
                }
                _ => {
                    return Err(StoreError::corrupted(
                        &qpath,
                        "unexpected entry in a topic folder (expected queue id folders, not \
                         links or files)",
                    ))
                }
            }
        }
    }
    Ok(found)
}

impl ConsumeQueueStore {
    /// Loads every queue under `dir` (created if missing). Folder names must be legal topics and
    /// queue ids; anything else is an error naming it, found before anything changes.
    pub(crate) fn load(dir: &Path, units_per_file: i64) -> Result<ConsumeQueueStore> {
        let file_size = units_per_file * CQ_STORE_UNIT_SIZE;
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io("cannot create", dir, e))?;
        let mut queues: HashMap<String, BTreeMap<i32, Arc<ConsumeQueue>>> = HashMap::new();
        for (topic, qid, qpath) in list_queues(dir)? {
            let cq = ConsumeQueue::load(&topic, qid, &qpath, file_size)?;
            queues.entry(topic).or_default().insert(qid, Arc::new(cq));
        }
        Ok(ConsumeQueueStore {
            dir: dir.to_path_buf(),
            file_size,
            queues: RwLock::new(queues),
            read_only: false,
            tombstones: Tombstones::default(),
        })
    }

    /// Opens the queues another process writes, for reading only: nothing is created or
    /// changed, and queues that appear later are found by [`ConsumeQueueStore::discover`].
    pub(crate) fn load_read_only(dir: &Path, units_per_file: i64) -> Result<ConsumeQueueStore> {
        let store = ConsumeQueueStore {
            dir: dir.to_path_buf(),
            file_size: units_per_file * CQ_STORE_UNIT_SIZE,
            queues: RwLock::new(HashMap::new()),
            read_only: true,
            tombstones: Tombstones::default(),
        };
        store.discover()?;
        Ok(store)
    }

    /// The store with these tombstones of deleted topics (set while opening).
    pub(crate) fn with_tombstones(mut self, tombstones: Tombstones) -> Self {
        self.tombstones = tombstones;
        self
    }

    /// Tombstones of deleted topics (see [`Tombstones`]).
    pub(crate) fn tombstones(&self) -> &Tombstones {
        &self.tombstones
    }

    /// The folder of `topic`'s queues.
    pub(crate) fn topic_dir(&self, topic: &str) -> PathBuf {
        self.dir.join(topic)
    }

    /// Takes every queue of `topic` out of the table (the files stay: see
    /// [`ConsumeQueue::destroy`]); the queues, by queue id.
    pub(crate) fn remove_topic(&self, topic: &str) -> Vec<Arc<ConsumeQueue>> {
        let mut all = self.queues.write().unwrap_or_else(|p| p.into_inner());
        all.remove(topic)
            .map(|q| q.into_values().collect())
            .unwrap_or_default()
    }

    /// Takes queue `topic`/`queue_id` out of the table, and the topic once it has no queue
    /// left; returns the queue and whether the topic went with it.
    pub(crate) fn remove_queue(
        &self,
        topic: &str,
        queue_id: i32,
    ) -> Option<(Arc<ConsumeQueue>, bool)> {
        let mut all = self.queues.write().unwrap_or_else(|p| p.into_inner());
        let queues = all.get_mut(topic)?;
        let cq = queues.remove(&queue_id)?;
        let topic_gone = queues.is_empty();
        if topic_gone {
            all.remove(topic);
        }
        Some((cq, topic_gone))
    }

    /// Read-only stores: adds the queues whose folders appeared since the last look.
    pub(crate) fn discover(&self) -> Result<()> {
        if !self.read_only || !self.dir.exists() {
            return Ok(());
        }
        let found = list_queues(&self.dir)?;
        let mut all = self.queues.write().unwrap_or_else(|p| p.into_inner());
        // Queues the writer deleted (`delete_topics`, `clean_expired_consumer_queues`) are
        // forgotten; a folder made again is a new queue.
        for queues in all.values_mut() {
            queues.retain(|_, cq| cq.folder_is_current());
        }
        all.retain(|_, queues| !queues.is_empty());
        for (topic, qid, qpath) in found {
            if all.get(&topic).is_some_and(|q| q.contains_key(&qid)) {
                continue;
            }
            let cq = ConsumeQueue::load_read_only(&topic, qid, &qpath, self.file_size)?;
            all.entry(topic).or_default().insert(qid, Arc::new(cq));
        }
        Ok(())
    }

    fn read(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, HashMap<String, BTreeMap<i32, Arc<ConsumeQueue>>>> {
        self.queues.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn find(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        self.read()
            .get(topic)
            .and_then(|q| q.get(&queue_id))
            .cloned()
    }

    /// `findOrCreateConsumeQueue` (the folder appears with the first unit). The topic and queue
    /// id become a path, so they must be what a put accepts (a legal topic, a queue id >= 0):
    /// anything else is refused, and never reaches the file system.
    pub(crate) fn find_or_create(&self, topic: &str, queue_id: i32) -> Result<Arc<ConsumeQueue>> {
        if let Some(cq) = self.find(topic, queue_id) {
            return Ok(cq);
        }
        if !topic_is_legal(topic) || queue_id < 0 {
            return Err(StoreError::corrupted(
                &self.dir,
                format!(
                    "no consume queue can be made for topic {topic:?} queue {queue_id} (not a \
                     legal topic and queue id)"
                ),
            ));
        }
        let mut all = self.queues.write().unwrap_or_else(|p| p.into_inner());
        if let Some(cq) = all.get(topic).and_then(|q| q.get(&queue_id)) {
            return Ok(cq.clone());
        }
        let qdir = self.dir.join(topic).join(queue_id.to_string());
        let cq = Arc::new(ConsumeQueue::load(topic, queue_id, &qdir, self.file_size)?);
        all.entry(topic.to_owned())
            .or_default()
            .insert(queue_id, cq.clone());
        Ok(cq)
    }

    /// Every queue, by topic then queue id.
    pub(crate) fn all(&self) -> Vec<Arc<ConsumeQueue>> {
        let all = self.read();
        let mut topics: Vec<&String> = all.keys().collect();
        topics.sort();
        topics
            .into_iter()
            .flat_map(|t| all[t].values().cloned())
            .collect()
    }

    pub(crate) fn topics(&self) -> Vec<String> {
        let mut t: Vec<String> = self.read().keys().cloned().collect();
        t.sort();
        t
    }

    pub(crate) fn queue_ids(&self, topic: &str) -> Vec<i32> {
        self.read()
            .get(topic)
            .map(|q| q.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Removes the empty last segments the queues' loads set aside; returns how many.
    pub(crate) fn remove_empty_leftovers(&self) -> Result<usize> {
        let mut n = 0;
        for cq in self.all() {
            n += usize::from(cq.remove_empty_leftover()?);
        }
        Ok(n)
    }

    /// Recovers every queue (docs/architecture.md#recovery).
    ///
    /// # Safety
    /// As [`ConsumeQueue::recover`], for every queue.
    pub(crate) unsafe fn recover(&self) -> Result<()> {
        for cq in self.all() {
            // SAFETY: this function's own contract.
            unsafe { cq.recover() }?;
        }
        Ok(())
    }

    /// The largest indexed record end over all queues (`dispatchFromPhyOffset`), -1 if none.
    pub(crate) fn max_physic_offset(&self) -> i64 {
        self.all()
            .iter()
            .map(|cq| cq.max_physic_offset())
            .max()
            .unwrap_or(-1)
    }

    /// Drops units whose records start at or after `phy_offset` in every queue.
    ///
    /// # Safety
    /// As [`ConsumeQueue::truncate_dirty`], for every queue.
    pub(crate) unsafe fn truncate_dirty(&self, phy_offset: i64) -> Result<()> {
        for cq in self.all() {
            if cq.max_physic_offset() > phy_offset {
                // SAFETY: this function's own contract.
                unsafe { cq.truncate_dirty(phy_offset) }?;
            }
        }
        Ok(())
    }

    /// `correctMinOffset` on every queue.
    pub(crate) fn correct_min_offsets(&self, min_commit_log_offset: i64) {
        for cq in self.all() {
            cq.correct_min_offset(min_commit_log_offset);
        }
    }

    /// Flushes every queue; true iff nothing moved anywhere.
    pub(crate) fn flush(&self, least_pages: i64) -> Result<bool> {
        let mut unchanged = true;
        for cq in self.all() {
            unchanged &= cq.flush(least_pages)?;
        }
        Ok(unchanged)
    }

    /// topic -> queue id -> next queue offset, from the queues (`recoverTopicQueueTable`).
    pub(crate) fn offset_table(&self) -> HashMap<String, HashMap<i32, i64>> {
        let all = self.read();
        all.iter()
            .map(|(t, qs)| {
                (
                    t.clone(),
                    qs.iter().map(|(q, cq)| (*q, cq.max_offset())).collect(),
                )
            })
            .collect()
    }
}
