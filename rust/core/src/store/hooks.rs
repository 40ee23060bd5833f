//! Put hooks (RocketMQ's `PutMessageHook`): checks and rewrites run on every put before the
//! message is appended, in the order they were added. `DefaultMessageStore` runs its
//! `putMessageHookList` before `CommitLog.asyncPutMessage`; RocketMQ 5.x uses it to turn a
//! delay-level or timer message into one for the schedule or timer topic and to check
//! transaction half messages. A writable store has the timer hook (`crate::timer::hook`) first
//! and the delay-level hook ([`crate::schedule::DelayLevelHook`]) after it; a hook says which
//! puts it may act on ([`PutMessageHook::applies_to`]), and a put none applies to is appended as
//! given, without a copy.

use crate::commitlog::Batch;
use crate::format::{HostAddr, Message, PutMessageStatus};

/// A check or rewrite run before each put is appended (`PutMessageHook`).
pub trait PutMessageHook: Send + Sync {
    /// The hook's name (`hookName`), for logs.
    fn name(&self) -> &str;

    /// Whether [`PutMessageHook::before_put`] may act on `msg` (change or refuse it). A put
    /// that no hook applies to skips the hooks and the copy of the message they would work on.
    fn applies_to(&self, msg: &Message) -> bool {
        let _ = msg;
        true
    }

    /// A cheaper first answer for a put whose properties are still a raw string: whether the
    /// hook may act on a put to `topic` whose properties hold `DELAY` (`has_delay`) and a timer
    /// property (`has_timer`). `false` must mean [`PutMessageHook::applies_to`] would say false
    /// too; `true` sends the put on to `applies_to` with the decoded properties.
    fn may_apply_to_raw(&self, topic: &str, has_delay: bool, has_timer: bool) -> bool {
        let _ = (topic, has_delay, has_timer);
        true
    }

    /// The same for a batch put.
    fn applies_to_batch(&self, batch: &Batch<'_>) -> bool {
        let _ = batch;
        true
    }

    /// Runs before `msg` is appended and may change any of it (topic, queue id, properties,
    /// flags). `Err(status)` refuses the put: nothing is appended, the later hooks do not run
    /// and the put returns that status (`executeBeforePutMessage` returning a result).
    fn before_put(&self, msg: &mut Message) -> Result<(), PutMessageStatus>;

    /// The same for a batch put ([`MessageStore::put_messages`](super::MessageStore::put_messages)),
    /// which sees the fields all messages of the batch share. By default a batch passes
    /// unchanged (RocketMQ's schedule and timer hooks handle single messages only).
    fn before_put_batch(&self, batch: &mut PutBatch<'_>) -> Result<(), PutMessageStatus> {
        let _ = batch;
        Ok(())
    }
}

/// A batch put as a hook sees it: the shared fields, owned so that a hook can change them, and
/// the bodies, which it can only read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutBatch<'a> {
    pub topic: String,
    pub queue_id: i32,
    pub properties: Vec<(String, String)>,
    pub flag: i32,
    pub born_timestamp: i64,
    pub born_host: Option<HostAddr>,
    pub bodies: &'a [&'a [u8]],
}

impl<'a> PutBatch<'a> {
    pub(super) fn from_batch(batch: &Batch<'a>) -> PutBatch<'a> {
        PutBatch {
            topic: batch.topic.to_owned(),
            queue_id: batch.queue_id,
            properties: batch.properties.to_vec(),
            flag: batch.flag,
            born_timestamp: batch.born_timestamp,
            born_host: batch.born_host,
            bodies: batch.bodies,
        }
    }

    /// The batch to append, borrowing this one's fields.
    pub(super) fn as_batch(&self) -> Batch<'_> {
        Batch {
            topic: &self.topic,
            queue_id: self.queue_id,
            bodies: self.bodies,
            properties: &self.properties,
            flag: self.flag,
            born_timestamp: self.born_timestamp,
            born_host: self.born_host,
        }
    }
}

/// Runs `hooks` in order on a message or batch; the first refusal's status, if any.
pub(super) fn run<T: ?Sized>(
    hooks: &[Box<dyn PutMessageHook>],
    target: &mut T,
    each: impl Fn(&dyn PutMessageHook, &mut T) -> Result<(), PutMessageStatus>,
) -> Option<PutMessageStatus> {
    for hook in hooks {
        if let Err(status) = each(hook.as_ref(), target) {
            log::debug!(
                target: "rmqstore.store",
                "put hook {} refused a put: {}",
                hook.name(),
                status.name()
            );
            return Some(status);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::format::property;
    use crate::{MessageStore, StoreConfig};

    /// Moves messages of topic `Later` to queue 3 of `Rewritten`, keeping the original topic
    /// and queue in properties (as RocketMQ's schedule hook does), and refuses topic `Refused`.
    struct Rewrite;

    impl PutMessageHook for Rewrite {
        fn name(&self) -> &str {
            "rewrite"
        }

        fn before_put(&self, msg: &mut Message) -> Result<(), PutMessageStatus> {
            match msg.topic.as_str() {
                "Refused" => Err(PutMessageStatus::MessageIllegal),
                "Later" => {
                    msg.properties
                        .push(("REAL_TOPIC".into(), std::mem::take(&mut msg.topic)));
                    msg.properties
                        .push(("REAL_QID".into(), msg.queue_id.to_string()));
                    msg.topic = "Rewritten".into();
                    msg.queue_id = 3;
                    Ok(())
                }
                _ => Ok(()),
            }
        }

        fn before_put_batch(&self, batch: &mut PutBatch<'_>) -> Result<(), PutMessageStatus> {
            match batch.topic.as_str() {
                "Refused" => Err(PutMessageStatus::PropertiesSizeExceeded),
                "Later" => {
                    batch.topic = "Rewritten".into();
                    batch.queue_id = 3;
                    batch.properties.push(("REAL_TOPIC".into(), "Later".into()));
                    Ok(())
                }
                _ => Ok(()),
            }
        }
    }

    /// Counts the puts it sees, and what topic they had by then.
    struct Count(Arc<AtomicUsize>, Arc<std::sync::Mutex<Vec<String>>>);

    impl PutMessageHook for Count {
        fn name(&self) -> &str {
            "count"
        }

        fn before_put(&self, msg: &mut Message) -> Result<(), PutMessageStatus> {
            self.0.fetch_add(1, Ordering::Relaxed);
            self.1.lock().unwrap().push(msg.topic.clone());
            Ok(())
        }
    }

    fn store(name: &str) -> (std::path::PathBuf, MessageStore) {
        let d = std::env::temp_dir().join(format!("rmqstore-hooks-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let cfg = StoreConfig {
            mapped_file_size_commit_log: 64 * 1024,
            mapped_file_size_consume_queue: 20 * 100,
            max_hash_slot_num: 64,
            max_index_num: 100,
            ..StoreConfig::default()
        };
        let store = MessageStore::open(&d, cfg).unwrap();
        (d, store)
    }

    fn msg(topic: &str, key: &str) -> Message {
        Message {
            topic: topic.into(),
            body: key.as_bytes().to_vec(),
            properties: vec![(property::KEYS.into(), key.into())],
            ..Message::default()
        }
    }

    fn drain(store: &MessageStore) {
        while store.dispatch_step(1 << 20, Duration::ZERO).unwrap().behind > 0 {}
    }

    #[test]
    fn a_hook_rewrites_topic_queue_and_properties_before_the_append() {
        let (d, mut store) = store("rewrite");
        let seen = (Arc::new(AtomicUsize::new(0)), Arc::default());
        store.add_put_hook(Box::new(Rewrite));
        store.add_put_hook(Box::new(Count(seen.0.clone(), Arc::clone(&seen.1))));
        let r = store.put_message(&msg("Later", "k1")).unwrap();
        assert_eq!(r.status, PutMessageStatus::PutOk);
        let m = store
            .look_message_by_offset(r.wrote_offset)
            .unwrap()
            .unwrap();
        assert_eq!((m.topic().as_ref(), m.queue_id), ("Rewritten", 3));
        assert_eq!(m.property("REAL_TOPIC"), Some("Later"));
        assert_eq!(m.property("REAL_QID"), Some("0"));
        assert_eq!(m.keys(), vec!["k1"]);
        // A message the hooks pass unchanged.
        let plain = store.put_message(&msg("Plain", "k2")).unwrap();
        assert!(plain.is_ok());
        // The later hook saw the rewritten message.
        assert_eq!(*seen.1.lock().unwrap(), vec!["Rewritten", "Plain"]);
        // Batches go through the batch hook.
        let bodies: Vec<&[u8]> = vec![b"a", b"b"];
        let props = vec![(property::KEYS.to_string(), "kb".to_string())];
        let batch = Batch {
            topic: "Later",
            queue_id: 1,
            bodies: &bodies,
            properties: &props,
            flag: 0,
            born_timestamp: 0,
            born_host: None,
        };
        let rb = store.put_messages(&batch).unwrap();
        assert_eq!(rb.status, PutMessageStatus::PutOk);
        assert_eq!(rb.record_sizes.len(), 2);
        let first = store
            .look_message_by_offset(rb.wrote_offset)
            .unwrap()
            .unwrap();
        assert_eq!((first.topic().as_ref(), first.queue_id), ("Rewritten", 3));
        assert_eq!(first.property("REAL_TOPIC"), Some("Later"));
        assert_eq!(first.keys(), vec!["kb"]);
        drain(&store);
        assert_eq!(store.max_offset_in_queue("Rewritten", 3).unwrap(), 3);
        assert_eq!(store.max_offset_in_queue("Later", 0).unwrap(), 0);
        assert_eq!(store.topics().unwrap(), vec!["Plain", "Rewritten"]);
        assert_eq!(
            store
                .query_message("Rewritten", "k1", 4, 0, i64::MAX)
                .unwrap()
                .len(),
            1
        );
        store.close().unwrap();
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_hook_refuses_a_put_with_its_status_and_nothing_is_appended() {
        let (d, mut store) = store("refuse");
        let seen = (Arc::new(AtomicUsize::new(0)), Arc::default());
        store.add_put_hook(Box::new(Rewrite));
        store.add_put_hook(Box::new(Count(seen.0.clone(), seen.1)));
        assert!(store.put_message(&msg("Plain", "k0")).unwrap().is_ok());
        let end = store.max_phy_offset().unwrap();
        let r = store.put_message(&msg("Refused", "k1")).unwrap();
        assert_eq!(r.status, PutMessageStatus::MessageIllegal);
        assert!(!r.is_ok());
        assert_eq!(r.wrote_offset, -1);
        let bodies: Vec<&[u8]> = vec![b"a"];
        let batch = Batch {
            topic: "Refused",
            queue_id: 0,
            bodies: &bodies,
            properties: &[],
            flag: 0,
            born_timestamp: 0,
            born_host: None,
        };
        let rb = store.put_messages(&batch).unwrap();
        assert_eq!(rb.status, PutMessageStatus::PropertiesSizeExceeded);
        assert_eq!(store.max_phy_offset().unwrap(), end, "nothing was appended");
        // The hook after the refusing one did not run for the refused put.
        assert_eq!(seen.0.load(Ordering::Relaxed), 1);
        drain(&store);
        assert_eq!(store.topics().unwrap(), vec!["Plain"]);
        // A closed store is closed before any hook runs.
        store.close().unwrap();
        assert!(matches!(
            store.put_message(&msg("Refused", "k2")),
            Err(crate::StoreError::Closed)
        ));
        let _ = std::fs::remove_dir_all(&d);
    }
}
