//! The topic-queue offset table (`topicQueueTable`: topic -> queue id -> next queue offset)
//! with a one-entry cache of the last queue a put numbered.
//!
//! Every put looks its queue up here under the append lock. A producer that keeps to one queue
//! (or a run of puts to one) finds it in the cache by comparing the queue id and the topic's
//! bytes, without hashing the topic and the queue id again (two keyed SipHash lookups). The
//! cache holds the table's own cell for that queue (a shared counter), so a value set or raised
//! through the table is the value the cache reads; only removing entries (topic or queue
//! deletion) or replacing the table (recovery, truncation) could leave it pointing at a cell
//! the table no longer has, and those drop it. The table's field is private to this module:
//! nothing can change the table except through these methods.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// One queue's next offset. Only read and written under the append lock (the counter is
/// atomic only so that the cache can share it with the table and the state stay `Send`;
/// relaxed loads and stores are plain moves).
type Cell = Arc<AtomicI64>;

#[derive(Default)]
pub(super) struct QueueOffsets {
    table: HashMap<String, HashMap<i32, Cell>>,
    /// The queue of the last put that looked one up, and the table's cell for it. Invariant:
    /// when set, `table[topic][queue_id]` is this very cell.
    last: Option<LastQueue>,
}

struct LastQueue {
    topic: String,
    queue_id: i32,
    cell: Cell,
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
        QueueOffsets { table, last: None }
    }

    /// Replaces the whole table (recovery, truncation); the cached queue's cell is not in the
    /// new table, so the cache is dropped.
    pub(super) fn replace(&mut self, other: QueueOffsets) {
        self.table = other.table;
        self.last = None;
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

    /// The put path's lookup: the queue's cell, from the cache when the last put was to the
    /// same queue, else from the table (inserted at 0 for a queue's first put) and cached.
    pub(super) fn slot_for_put(&mut self, topic: &str, queue_id: i32) -> &AtomicI64 {
        let hit = matches!(&self.last, Some(l) if l.queue_id == queue_id && l.topic == topic);
        if !hit {
            let cell = self
                .queues_mut(topic)
                .entry(queue_id)
                .or_insert_with(|| Arc::new(AtomicI64::new(0)))
                .clone();
            match &mut self.last {
                Some(l) => {
                    // Reuses the cached name's buffer: no allocation when it fits.
                    l.topic.clear();
                    l.topic.push_str(topic);
                    l.queue_id = queue_id;
                    l.cell = cell;
                }
                None => {
                    self.last = Some(LastQueue {
                        topic: topic.to_owned(),
                        queue_id,
                        cell,
                    })
                }
            }
        }
        &self.last.as_ref().expect("set above").cell
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
    /// dropped with it (it could hold the removed cell).
    pub(super) fn remove(&mut self, topic: &str, queue_id: i32) {
        self.last = None;
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
