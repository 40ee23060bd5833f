//! The topic-queue offset table (`topicQueueTable`: topic -> queue id -> next queue offset)
//! with a small cache of the queues puts numbered last.
//!
//! Every put looks its queue up here under the append lock. A queue in the cache is found by
//! one cheap hash of the topic's bytes and the queue id (it picks the cache entry) and a
//! comparison of the queue id and the topic's bytes, without the table's two keyed SipHash
//! lookups: a producer that keeps to one queue, a run of puts over a few dozen queues, or a
//! transaction's puts (its half to the half topic, its commit to the real queue) all hit it.
//! A miss (a queue not in the cache, or another queue in its entry) costs the table's lookups
//! as before, then takes the entry, so keys chosen to collide cost no more than without the
//! cache. The cache holds the table's own cell for each queue (a shared counter), so a value
//! set or raised through the table is the value the cache reads; only removing entries (topic
//! or queue deletion) or replacing the table (recovery, truncation) could leave it pointing
//! at a cell the table no longer has, and those empty it. The table's field is private to this
//! module: nothing can change the table except through these methods.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// One queue's next offset. Only read and written under the append lock (the counter is
/// atomic only so that the cache can share it with the table and the state stay `Send`;
/// relaxed loads and stores are plain moves).
type Cell = Arc<AtomicI64>;

/// Entries of the cache (a power of two). The queues of one topic take consecutive entries,
/// so up to this many queues of a topic never push each other out.
const WAYS: usize = 64;

pub(super) struct QueueOffsets {
    table: HashMap<String, HashMap<i32, Cell>>,
    /// Queues puts looked up, each in the entry `way` picks. Invariant: every entry that is
    /// set holds `table[topic][queue_id]`'s very cell.
    cache: Box<[Option<CachedQueue>; WAYS]>,
}

impl Default for QueueOffsets {
    fn default() -> Self {
        QueueOffsets {
            table: HashMap::new(),
            cache: empty_cache(),
        }
    }
}

fn empty_cache() -> Box<[Option<CachedQueue>; WAYS]> {
    Box::new(std::array::from_fn(|_| None))
}

struct CachedQueue {
    topic: String,
    queue_id: i32,
    cell: Cell,
}

/// The cache entry of `topic`/`queue_id`: a multiplicative hash of the topic's bytes, plus
/// the queue id (consecutive queues of a topic, consecutive entries). Not a keyed hash: a
/// collision only makes a miss, which costs what a put cost without the cache.
fn way(topic: &str, queue_id: i32) -> usize {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let b = topic.as_bytes();
    let mut h = b.len() as u64;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    ((h >> 32) as usize).wrapping_add(queue_id as u32 as usize) & (WAYS - 1)
}

impl QueueOffsets {
    /// The table as recovery or a truncation computed it; the cache starts empty.
    pub(super) fn from_map(map: HashMap<String, HashMap<i32, i64>>) -> Self {
        let table = map
            .into_iter()
            .map(|(topic, queues)| {
                let queues = queues
                    .into_iter()
                    .map(|(q, next)| (q, Arc::new(AtomicI64::new(next))))
                    .collect();
                (topic, queues)
            })
            .collect();
        QueueOffsets {
            table,
            cache: empty_cache(),
        }
    }

    /// Replaces the whole table (recovery, truncation); the cached queues' cells are not in
    /// the new table, so the cache is emptied.
    pub(super) fn replace(&mut self, other: QueueOffsets) {
        self.table = other.table;
        self.clear_cache();
    }

    fn clear_cache(&mut self) {
        for e in self.cache.iter_mut() {
            *e = None;
        }
    }

    /// The next queue offset of `topic`/`queue_id` (0 for a queue never put to).
    pub(super) fn get(&self, topic: &str, queue_id: i32) -> i64 {
        self.table
            .get(topic)
            .and_then(|q| q.get(&queue_id))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// The queues of `topic`, allocating its name only the first time.
    fn queues_mut(&mut self, topic: &str) -> &mut HashMap<i32, Cell> {
        if !self.table.contains_key(topic) {
            self.table.insert(topic.to_owned(), HashMap::new());
        }
        self.table.get_mut(topic).expect("inserted above")
    }

    /// The put path's lookup: the queue's cell, from the cache when its entry holds that
    /// queue, else from the table (inserted at 0 for a queue's first put) and cached.
    pub(super) fn slot_for_put(&mut self, topic: &str, queue_id: i32) -> &AtomicI64 {
        let w = way(topic, queue_id);
        let hit = matches!(&self.cache[w], Some(l) if l.queue_id == queue_id && l.topic == topic);
        if !hit {
            let cell = self
                .queues_mut(topic)
                .entry(queue_id)
                .or_insert_with(|| Arc::new(AtomicI64::new(0)))
                .clone();
            match &mut self.cache[w] {
                Some(l) => {
                    // Reuses the cached name's buffer: no allocation when it fits.
                    l.topic.clear();
                    l.topic.push_str(topic);
                    l.queue_id = queue_id;
                    l.cell = cell;
                }
                e @ None => {
                    *e = Some(CachedQueue {
                        topic: topic.to_owned(),
                        queue_id,
                        cell,
                    })
                }
            }
        }
        &self.cache[w].as_ref().expect("set above").cell
    }

    pub(super) fn set(&mut self, topic: &str, queue_id: i32, next: i64) {
        self.queues_mut(topic)
            .entry(queue_id)
            .or_insert_with(|| Arc::new(AtomicI64::new(next)))
            .store(next, Ordering::Relaxed);
    }

    /// Raises the next queue offset to `next` if it is lower (recovery and its merges).
    pub(super) fn raise(&mut self, topic: &str, queue_id: i32, next: i64) {
        let c = self
            .queues_mut(topic)
            .entry(queue_id)
            .or_insert_with(|| Arc::new(AtomicI64::new(next)));
        c.fetch_max(next, Ordering::Relaxed);
    }

    /// `removeQueueFromTopicQueueTable`: the queue's next put gets queue offset 0. The cache is
    /// emptied with it (it could hold the removed cell).
    pub(super) fn remove(&mut self, topic: &str, queue_id: i32) {
        self.clear_cache();
        if let Some(queues) = self.table.get_mut(topic) {
            queues.remove(&queue_id);
            if queues.is_empty() {
                self.table.remove(topic);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bump(t: &mut QueueOffsets, topic: &str, q: i32) -> i64 {
        let c = t.slot_for_put(topic, q);
        let v = c.load(Ordering::Relaxed);
        c.store(v + 1, Ordering::Relaxed);
        v
    }

    #[test]
    fn puts_number_each_queue_through_the_cache() {
        let mut t = QueueOffsets::default();
        assert_eq!(bump(&mut t, "A", 0), 0);
        assert_eq!(bump(&mut t, "A", 0), 1);
        assert_eq!(bump(&mut t, "A", 1), 0);
        assert_eq!(bump(&mut t, "B", 0), 0);
        assert_eq!(bump(&mut t, "A", 0), 2);
        // A topic that is a prefix of the cached one is another queue.
        assert_eq!(bump(&mut t, "AB", 0), 0);
        assert_eq!(bump(&mut t, "A", 0), 3);
        assert_eq!((t.get("A", 0), t.get("A", 1), t.get("B", 0)), (4, 1, 1));
    }

    #[test]
    fn many_queues_stay_cached_and_colliding_ones_stay_correct() {
        let mut t = QueueOffsets::default();
        // More queues than entries, in rounds: every queue numbered 0, 1, 2 whatever the
        // cache held.
        for round in 0..3 {
            for q in 0..(WAYS as i32 * 2) {
                for topic in ["A", "TopicWithALongerName", "RMQ_SYS_TRANS_HALF_TOPIC"] {
                    assert_eq!(bump(&mut t, topic, q), round, "{topic} {q}");
                }
            }
        }
        // The queues of one topic take consecutive entries.
        let w0 = way("Real", 0);
        for q in 1..WAYS as i32 {
            assert_ne!(way("Real", q), w0);
        }
    }

    #[test]
    fn set_and_raise_are_seen_by_the_cached_queue() {
        let mut t = QueueOffsets::default();
        bump(&mut t, "A", 0);
        t.set("A", 0, 10);
        assert_eq!(bump(&mut t, "A", 0), 10);
        t.raise("A", 0, 20);
        assert_eq!(bump(&mut t, "A", 0), 20);
        t.raise("A", 0, 5);
        assert_eq!(bump(&mut t, "A", 0), 21);
    }

    #[test]
    fn removing_the_cached_queue_restarts_it_at_zero() {
        let mut t = QueueOffsets::default();
        bump(&mut t, "A", 0);
        bump(&mut t, "A", 0);
        t.remove("A", 0);
        assert_eq!(t.get("A", 0), 0);
        assert_eq!(bump(&mut t, "A", 0), 0);
        assert_eq!(t.get("A", 0), 1);
    }

    #[test]
    fn removing_a_queue_cached_before_the_last_one_restarts_it_at_zero() {
        let mut t = QueueOffsets::default();
        bump(&mut t, "A", 0);
        bump(&mut t, "A", 0);
        bump(&mut t, "B", 5);
        t.remove("A", 0);
        assert_eq!(bump(&mut t, "A", 0), 0);
        assert_eq!(bump(&mut t, "B", 5), 1);
        bump(&mut t, "C", 1);
        let mut m = HashMap::new();
        m.insert("B".to_owned(), HashMap::from([(5, 40)]));
        t.replace(QueueOffsets::from_map(m));
        assert_eq!(bump(&mut t, "B", 5), 40);
        assert_eq!(bump(&mut t, "A", 0), 0);
    }

    #[test]
    fn replacing_the_table_drops_the_cached_queue() {
        let mut t = QueueOffsets::default();
        bump(&mut t, "A", 0);
        bump(&mut t, "A", 0);
        let mut m = HashMap::new();
        m.insert("A".to_owned(), HashMap::from([(0, 7)]));
        t.replace(QueueOffsets::from_map(m));
        assert_eq!(bump(&mut t, "A", 0), 7);
        assert_eq!(t.get("A", 0), 8);
        // A queue absent from the new table starts at 0.
        bump(&mut t, "B", 3);
        t.replace(QueueOffsets::default());
        assert_eq!(bump(&mut t, "B", 3), 0);
    }
}
