//! Delivery of a due timer message (`TimerMessageStore.convert`, `convertMessage`, `doPut`):
//! the message read from the timer topic, put to its real topic and queue (or back to the
//! timer topic when it rolls) with the timer's bookkeeping properties.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use crate::commitlog::AppendResult;
use crate::error::{Result, StoreError};
use crate::format::timer::{is_roll, TimerLogUnit};
use crate::format::{
    encode_properties, for_each_property, property, DecodedRecord, HostAddr, Message, MessageExt,
    PutMessageStatus,
};
use crate::schedule::deliver::TimeUp;
use crate::schedule::order::java_map_order_distinct;
use crate::store::MessageStore;

use super::dedup::{self, CopyKey};
use super::{props, Put, TimerEngine};

/// What became of one unit of a slot the dequeue delivers.
pub(super) enum Unit {
    /// Its record cannot be read (`getMessageByCommitOffset` gives null).
    Unreadable,
    /// Cancelled by a delete marker of its slot.
    Deleted,
    /// Read and handed to the put (or dropped before it).
    Put(Put),
}

/// A put of a delivered message made while its record is borrowed.
type PutFn<'p> = dyn FnMut(TimeUp<'_>) -> Result<AppendResult> + 'p;

/// The fields of a stored timer message its copy takes (body and SYSFLAG as stored).
struct Stored<'a> {
    topic: &'a str,
    queue_id: i32,
    flag: i32,
    sys_flag: i32,
    born_timestamp: i64,
    born_host: HostAddr,
    reconsume_times: i32,
    prepared_transaction_offset: i64,
    commit_log_offset: i64,
    body_crc: i32,
    body: &'a [u8],
}

/// The value of `name` in a list with one item per name.
fn find<'a>(list: &[(&'a str, &'a str)], name: &str) -> Option<&'a str> {
    list.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
}

impl TimerEngine {
    /// One unit of a slot the dequeue delivers (`dequeue`'s get and put services): its message
    /// read, passed over when a delete marker of the slot (`deleted_keys`) cancels it, else
    /// [`TimerEngine::deliver`]ed. The record's bytes are used where they lie (no copy of the
    /// message, its properties scanned once) when they are exactly what the read would give;
    /// anything else (a compressed body the read decompresses, properties that are not UTF-8
    /// or name a property twice) takes the read and the general rebuild, with the same result.
    pub(super) fn deliver_unit(
        &self,
        store: &MessageStore,
        u: &TimerLogUnit,
        deleted_keys: &HashSet<String>,
        dequeue_time: i64,
        mut copies: Option<&mut HashMap<CopyKey, u32>>,
    ) -> Result<Unit> {
        let roll = is_roll(u.magic);
        let fast = store.with_timer_record(u.offset_py, u.size_py, |d, put| {
            self.deliver_record(
                d,
                put,
                deleted_keys,
                u.curr_write_time_ms,
                roll,
                dequeue_time,
                copies.as_deref_mut(),
            )
        })?;
        if let Some(Some(done)) = fast {
            return done;
        }
        let msg = match store.timer_message_at(u.offset_py, u.size_py) {
            Ok(Some(m)) => m,
            Ok(None) | Err(StoreError::CorruptRecord { .. }) => return Ok(Unit::Unreadable),
            Err(e) => return Err(e),
        };
        if !deleted_keys.is_empty() {
            if let Some(uniq) = msg.property(property::UNIQ_KEY) {
                let key = self.delete_key(msg.property(props::REAL_TOPIC), uniq);
                if deleted_keys.contains(&key) {
                    return Ok(Unit::Deleted);
                }
            }
        }
        self.deliver(
            store,
            &msg,
            u.curr_write_time_ms,
            roll,
            dequeue_time,
            copies,
        )
        .map(Unit::Put)
    }

    /// [`TimerEngine::deliver_unit`] on the record `d` as it lies in its segment: `None` when
    /// its properties are not UTF-8 or name a property twice (the general path handles those).
    #[allow(clippy::too_many_arguments)]
    fn deliver_record(
        &self,
        d: &DecodedRecord<'_>,
        put: &mut PutFn<'_>,
        deleted_keys: &HashSet<String>,
        enqueue_time: i64,
        roll: bool,
        dequeue_time: i64,
        copies: Option<&mut HashMap<CopyKey, u32>>,
    ) -> Option<Result<Unit>> {
        let topic = std::str::from_utf8(d.topic).ok()?;
        // `string2messageProperties`: items with a non-empty name and value (UTF-8: the
        // separators are ASCII, so each part of a valid string is valid).
        let mut list: Vec<(&str, &str)> = Vec::with_capacity(16);
        let mut utf8 = true;
        for_each_property(d.properties, |k, v| {
            if k.is_empty() || v.is_empty() {
                return;
            }
            match (std::str::from_utf8(k), std::str::from_utf8(v)) {
                (Ok(k), Ok(v)) => list.push((k, v)),
                _ => utf8 = false,
            }
        });
        let distinct = list
            .iter()
            .enumerate()
            .all(|(i, (k, _))| list[i + 1..].iter().all(|(k2, _)| k2 != k));
        if !utf8 || !distinct {
            return None;
        }
        if !deleted_keys.is_empty() {
            if let Some(uniq) = find(&list, property::UNIQ_KEY) {
                let key = self.delete_key(find(&list, props::REAL_TOPIC), uniq);
                if deleted_keys.contains(&key) {
                    return Some(Ok(Unit::Deleted));
                }
            }
        }
        let record = Stored {
            topic,
            queue_id: d.queue_id,
            flag: d.flag,
            sys_flag: d.sys_flag,
            born_timestamp: d.born_timestamp,
            born_host: d.born_host,
            reconsume_times: d.reconsume_times,
            prepared_transaction_offset: d.prepared_transaction_offset,
            commit_log_offset: d.physical_offset,
            body_crc: d.body_crc,
            body: d.body,
        };
        Some(
            self.convert(&record, list, enqueue_time, roll, dequeue_time, copies, put)
                .map(Unit::Put),
        )
    }

    /// `convert`, `convertMessage` and `doPut`: puts `msg` (read from the timer topic) to its
    /// real topic and queue, or back to the timer topic when `roll`; `dequeue_time` is the
    /// TIMER_DEQUEUE_MS it gets (the clock read once per slot). With `copies` (after a crash,
    /// see [`dedup`]), a message whose copy is among them is not put again
    /// ([`Put::AlreadyDone`]) and that copy is taken out.
    pub(super) fn deliver(
        &self,
        store: &MessageStore,
        msg: &MessageExt,
        enqueue_time: i64,
        roll: bool,
        dequeue_time: i64,
        copies: Option<&mut HashMap<CopyKey, u32>>,
    ) -> Result<Put> {
        let props = msg.properties();
        let topic = msg.topic();
        let record = Stored {
            topic: &topic,
            queue_id: msg.queue_id,
            flag: msg.flag,
            sys_flag: msg.stored_sys_flag(),
            born_timestamp: msg.born_timestamp,
            born_host: msg.born_host,
            reconsume_times: msg.reconsume_times,
            prepared_transaction_offset: msg.prepared_transaction_offset,
            commit_log_offset: msg.commit_log_offset,
            body_crc: msg.body_crc,
            body: msg.stored_body(),
        };
        // The map `string2messageProperties` reads: one value per name.
        let list = props
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.convert(
            &record,
            list,
            enqueue_time,
            roll,
            dequeue_time,
            copies,
            &mut |t| store.put_delivered(t),
        )
    }

    /// The copy of `record` with its stored properties `list` (distinct names, in the record's
    /// order), put with `put`: see [`TimerEngine::deliver`].
    #[allow(clippy::too_many_arguments)]
    fn convert(
        &self,
        record: &Stored<'_>,
        items: Vec<(&str, &str)>,
        enqueue_time: i64,
        roll: bool,
        dequeue_time: i64,
        copies: Option<&mut HashMap<CopyKey, u32>>,
        put: &mut PutFn<'_>,
    ) -> Result<Put> {
        if !roll && find(&items, props::TIMER_DEL_UNIQKEY).is_some() {
            // A delete marker is never delivered.
            return Ok(Put::Dropped);
        }
        // `convert` adds its bookkeeping properties to the stored map (TIMER_ENQUEUE_MS,
        // TIMER_ROLL_TIMES when rolling, TIMER_DEQUEUE_MS) and `convertMessage` renders that map
        // as the record's properties string *before* it sets WAIT=false and (delivering)
        // clears REAL_TOPIC/REAL_QID: the record RocketMQ writes keeps REAL_TOPIC and REAL_QID
        // and has no WAIT of its own; only the map the put hooks see is cleaned. Both are
        // built here: `stored` in Java's map order, `view` for the hooks.
        fn set<'a>(list: &mut Vec<(&'a str, &'a str)>, name: &'a str, value: &'a str) {
            match list.iter_mut().find(|(k, _)| *k == name) {
                Some(entry) => entry.1 = value,
                None => list.push((name, value)),
            }
        }
        let enqueue_ms = enqueue_time.to_string();
        let roll_times = if roll {
            find(&items, props::TIMER_ROLL_TIMES)
                .and_then(|v| v.parse::<i32>().ok())
                .unwrap_or(0)
                .wrapping_add(1)
                .to_string()
        } else {
            String::new()
        };
        let dequeue_ms = dequeue_time.to_string();
        // The items borrow the record (or its parsed map) and the three values above.
        let mut list: Vec<(&str, &str)> = items;
        if enqueue_time != -1 {
            set(&mut list, props::TIMER_ENQUEUE_MS, &enqueue_ms);
        }
        if roll {
            set(&mut list, props::TIMER_ROLL_TIMES, &roll_times);
        }
        set(&mut list, props::TIMER_DEQUEUE_MS, &dequeue_ms);
        // The names are distinct (one per name of the map, the three added by `set`).
        let mut stored = list;
        java_map_order_distinct(&mut stored, |p| p.0);
        let (topic, queue_id) = if roll {
            (record.topic, record.queue_id)
        } else {
            match (
                find(&stored, props::REAL_TOPIC),
                find(&stored, props::REAL_QID).and_then(|q| q.parse::<i32>().ok()),
            ) {
                (Some(t), Some(q)) => (t, q),
                _ => {
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                    ::log::warn!(
                        target: "rmqstore.timer",
                        "timer message at commitlog offset {} has no REAL_TOPIC/REAL_QID; dropped",
                        record.commit_log_offset
                    );
                    return Ok(Put::Dropped);
                }
            }
        };
        let stored_props = encode_properties(stored.iter().copied());
        let mut view: Vec<(String, String)> = Vec::with_capacity(stored.len() + 1);
        view.extend(
            stored
                .iter()
                .filter(|(k, _)| roll || (*k != props::REAL_TOPIC && *k != props::REAL_QID))
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        match view.iter_mut().find(|(k, _)| k == property::WAIT) {
            Some(w) => w.1 = "false".to_owned(),
            None => view.push((property::WAIT.to_owned(), "false".to_owned())),
        }
        let out = Message {
            topic: topic.to_owned(),
            body: Vec::new(),
            queue_id,
            flag: record.flag,
            sys_flag: record.sys_flag,
            born_timestamp: record.born_timestamp,
            born_host: Some(record.born_host),
            properties: view,
            reconsume_times: record.reconsume_times,
            prepared_transaction_offset: record.prepared_transaction_offset,
        };
        if let Some(copies) = copies.filter(|c| !c.is_empty()) {
            let key = CopyKey::of_put(&out, record.body_crc, record.body.len());
            if key.is_some_and(|k| dedup::take(copies, &k)) {
                self.counters.recovered.fetch_add(1, Ordering::Relaxed);
                return Ok(Put::AlreadyDone);
            }
        }
        let r = put(TimeUp {
            msg: out,
            body: record.body,
            stored_props: Cow::Owned(stored_props),
        })?;
        Ok(self.put_outcome(&r, roll, record.commit_log_offset))
    }

    /// What a put of a delivered (or rolled) message did, counted.
    fn put_outcome(&self, r: &AppendResult, roll: bool, commit_log_offset: i64) -> Put {
        match r.status {
            // Stored, whatever the replica or force said: putting it again would duplicate it.
            PutMessageStatus::PutOk
            | PutMessageStatus::FlushDiskTimeout
            | PutMessageStatus::FlushSlaveTimeout
            | PutMessageStatus::SlaveNotAvailable => {
                if roll {
                    self.counters.rolled.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.counters.delivered.fetch_add(1, Ordering::Relaxed);
                }
                Put::Done
            }
            PutMessageStatus::MessageIllegal
            | PutMessageStatus::PropertiesSizeExceeded
            | PutMessageStatus::WheelTimerNotEnable
            | PutMessageStatus::WheelTimerMsgIllegal => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                ::log::warn!(
                    target: "rmqstore.timer",
                    "timer message at commitlog offset {commit_log_offset} refused for good: {}",
                    r.status.name()
                );
                Put::Dropped
            }
            _ => Put::Retry,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::format::{Message, MessageExt};
    use crate::read::TagFilter;
    use crate::{MessageStore, StoreConfig};

    fn all(store: &MessageStore, topic: &str, q: i32) -> Vec<MessageExt> {
        while store.dispatch_step(1 << 20, Duration::ZERO).unwrap().behind > 0 {}
        store
            .get_message(topic, q, 0, 32, &TagFilter::all())
            .unwrap()
            .messages
    }

    /// A record naming a property twice takes the read and the general rebuild; its copy is
    /// the one the record without the repeat gets from the copy-free path.
    #[test]
    fn both_paths_write_the_same_copy() {
        let d = std::env::temp_dir().join(format!("rmqstore-timer-paths-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let cfg = StoreConfig {
            mapped_file_size_commit_log: 1 << 20,
            timer_precision_ms: 100,
            ..StoreConfig::default()
        };
        let store = MessageStore::open(&d, cfg).unwrap();
        let due = crate::util::now_millis() + 60_000;
        let put = |key: &str, extra: &[(&str, &str)]| {
            let mut properties = vec![
                ("UNIQ_KEY".to_owned(), key.to_owned()),
                ("TIMER_DELIVER_MS".to_owned(), due.to_string()),
            ];
            properties.extend(
                extra
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
            );
            let m = Message {
                topic: "Real".into(),
                body: b"body".to_vec(),
                queue_id: 1,
                properties,
                ..Message::default()
            };
            store.put_message(&m).unwrap();
        };
        put("key-a", &[("KEYS", "k"), ("X", "2")]);
        put("key-b", &[("KEYS", "k"), ("X", "1"), ("X", "2")]);
        let timer = all(&store, crate::timer::TIMER_TOPIC, 0);
        assert_eq!(timer.len(), 2);
        // The repeat reached the timer topic's record (so its delivery takes the general path).
        assert_eq!(timer[1].properties_str().matches("X\u{1}").count(), 2);
        assert_eq!(timer[0].properties_str().matches("X\u{1}").count(), 1);
        assert_eq!(
            store
                .timer_enqueue(crate::util::now_millis(), 10)
                .unwrap()
                .logged,
            2
        );
        assert_eq!(store.timer_dequeue(due + 200, 10).unwrap().delivered, 2);
        let copies = all(&store, "Real", 1);
        assert_eq!(copies.len(), 2);
        let a = copies[0].properties_str().into_owned();
        let b = copies[1].properties_str().into_owned();
        assert!(
            a.contains("UNIQ_KEY\u{1}key-a\u{2}") && a.contains("X\u{1}2\u{2}"),
            "{a:?}"
        );
        assert_eq!(a.replace("key-a", "key-b"), b);
        store.close().unwrap();
        let _ = std::fs::remove_dir_all(&d);
    }
}
