//! Keys of dispatched messages waiting to be indexed ([`IndexBatch`]): copied as dispatch reads
//! the records, split and hashed in one pass, then put by [`super::IndexService::build_batch`].

use crate::format::index::{
    push_key_hashes, topic_key_hash_bytes, topic_prefix_hash, TAG_KEY_INFIX,
};
use crate::format::sysflag;

/// Index keys of dispatched messages waiting to be put together by
/// [`super::IndexService::build_batch`]. [`IndexBatch::add`] only copies the key text;
/// splitting and hashing happen in [`IndexBatch::hash_pending`] (when dispatch runs on two
/// threads, on the parsing thread as a batch is handed over: the index writer is the busier of
/// the two).
#[derive(Debug, Default)]
pub(crate) struct IndexBatch {
    pub(super) hashes: Vec<i32>,
    /// Per message: phy offset, store timestamp, end of its keys in `hashes` (set when hashed).
    pub(super) messages: Vec<(i64, i64, usize)>,
    /// Key text of the messages not hashed yet: UNIQ_KEY, KEYS and TAGS as ranges of `text`,
    /// and the hash of their `topic#`.
    pending: Vec<PendingKeys>,
    text: Vec<u8>,
    /// The last topic seen and the hash of `topic#`.
    topic: String,
    topic_prefix: i32,
}

#[derive(Debug, Clone, Copy)]
struct PendingKeys {
    prefix: i32,
    uniq: Option<(u32, u32)>,
    keys: (u32, u32),
    tags: Option<(u32, u32)>,
}

impl IndexBatch {
    /// Queues `topic#UNIQ_KEY`, `topic#k` for every non-empty space-separated `k` of `keys`,
    /// and, when given (RocketMQ 5.4+), `topic#T#tags` for a non-empty `tags`, in RocketMQ's
    /// order. ROLLBACK messages are not indexed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &mut self,
        topic: &str,
        keys: Option<&str>,
        uniq_key: Option<&str>,
        tags: Option<&str>,
        phy_offset: i64,
        store_timestamp: i64,
        sys_flag: i32,
    ) {
        if sysflag::transaction_value(sys_flag) == sysflag::TRANSACTION_ROLLBACK_TYPE {
            return;
        }
        if self.topic != topic {
            topic.clone_into(&mut self.topic);
            self.topic_prefix = topic_prefix_hash(topic);
        }
        let mut push = |v: &str| {
            let from = self.text.len() as u32;
            self.text.extend_from_slice(v.as_bytes());
            (from, self.text.len() as u32)
        };
        let uniq = uniq_key.map(&mut push);
        let keys = push(keys.unwrap_or(""));
        let tags = tags.filter(|t| !t.is_empty()).map(&mut push);
        self.pending.push(PendingKeys {
            prefix: self.topic_prefix,
            uniq,
            keys,
            tags,
        });
        self.messages.push((phy_offset, store_timestamp, 0));
    }

    /// The first message's commitlog offset and its key hashes (hashing what is pending).
    pub(crate) fn first_message(&mut self) -> Option<(i64, &[i32])> {
        self.hash_pending();
        let &(phy, _, end) = self.messages.first()?;
        Some((phy, &self.hashes[..end]))
    }

    /// Splits and hashes the keys of the messages added since the last call. Dispatch calls it
    /// on the thread that parses records before handing the batch to the index writer (the
    /// writer is the busier of the two); [`super::IndexService::build_batch`] hashes what is left.
    pub(crate) fn hash_pending(&mut self) {
        let first = self.messages.len() - self.pending.len();
        // The KEYS text and its hashes of the message before: messages put in one batch share
        // their keys, which are then hashed once (as dispatch caches tags codes).
        let mut last_keys: Option<(i32, (u32, u32), std::ops::Range<usize>)> = None;
        let text = |(a, b): (u32, u32)| &self.text[a as usize..b as usize];
        for (i, p) in self.pending.iter().enumerate() {
            if let Some(u) = p.uniq {
                self.hashes.push(topic_key_hash_bytes(p.prefix, text(u)));
            }
            let from = self.hashes.len();
            match &last_keys {
                Some((prefix, keys, hashed))
                    if *prefix == p.prefix && text(*keys) == text(p.keys) =>
                {
                    self.hashes.extend_from_within(hashed.clone());
                }
                _ => push_key_hashes(&mut self.hashes, p.prefix, text(p.keys)),
            }
            last_keys = Some((p.prefix, p.keys, from..self.hashes.len()));
            if let Some(t) = p.tags {
                let typed = crate::util::java_hash_extend(p.prefix, TAG_KEY_INFIX);
                self.hashes.push(topic_key_hash_bytes(typed, text(t)));
            }
            self.messages[first + i].2 = self.hashes.len();
        }
        self.pending.clear();
        self.text.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::index::{build_key, index_key_hash, key_hashes_by_split};

    #[test]
    fn repeated_keys_are_hashed_once_with_the_same_result() {
        // (topic, keys, uniq key, tags) per message; repeats, a change of topic with the same
        // keys, and empty keys in between.
        let msgs = [
            ("T", "a b", None, None),
            ("T", "a b", Some("U1"), None),
            ("T", "a b", None, Some("tag")),
            ("Other", "a b", None, None),
            ("Other", "", None, None),
            ("Other", "a b", None, None),
            ("T", "c", None, None),
            ("T", "c", None, None),
        ];
        let mut batch = IndexBatch::default();
        let mut want = Vec::new();
        for (i, (topic, keys, uniq, tags)) in msgs.iter().enumerate() {
            batch.add(topic, Some(keys), *uniq, *tags, i as i64 * 100, 0, 0);
            let mut mine: Vec<i32> = uniq
                .iter()
                .map(|u| index_key_hash(&build_key(topic, u)))
                .collect();
            mine.extend(key_hashes_by_split(topic, keys));
            if let Some(t) = tags {
                mine.push(index_key_hash(&build_key(topic, &format!("T#{t}"))));
            }
            want.push(mine);
        }
        batch.hash_pending();
        let mut start = 0;
        for (i, (_, _, end)) in batch.messages.iter().enumerate() {
            assert_eq!(
                &batch.hashes[start..*end],
                want[i].as_slice(),
                "message {i}"
            );
            start = *end;
        }
    }
}
