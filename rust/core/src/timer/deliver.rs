//! Delivery of a due timer message (`TimerMessageStore.convert`, `convertMessage`, `doPut`):
//! the message read from the timer topic, put to its real topic and queue (or back to the
//! timer topic when it rolls) with the timer's bookkeeping properties.

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::format::{encode_properties, property, Message, MessageExt, PutMessageStatus};
use crate::schedule::deliver::TimeUp;
use crate::schedule::order::java_map_order;
use crate::store::MessageStore;

use super::dedup::{self, CopyKey};
use super::{props, Put, TimerEngine};

impl TimerEngine {
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
        copies: Option<&mut std::collections::HashMap<CopyKey, u32>>,
    ) -> Result<Put> {
        // `convert` adds its bookkeeping properties to the stored map (TIMER_ENQUEUE_MS,
        // TIMER_ROLL_TIMES when rolling, TIMER_DEQUEUE_MS) and `convertMessage` renders that map
        // as the record's properties string *before* it sets WAIT=false and (delivering)
        // clears REAL_TOPIC/REAL_QID: the record RocketMQ writes keeps REAL_TOPIC and REAL_QID
        // and has no WAIT of its own; only the map the put hooks see is cleaned. Both are
        // built here: `stored` in Java's map order, `view` for the hooks.
        let mut stored = msg.properties();
        if !roll && stored.iter().any(|(k, _)| k == props::TIMER_DEL_UNIQKEY) {
            // A delete marker is never delivered.
            return Ok(Put::Dropped);
        }
        let set = |list: &mut Vec<(String, String)>, name: &str, value: String| match list
            .iter_mut()
            .find(|(k, _)| k == name)
        {
            Some(entry) => entry.1 = value,
            None => list.push((name.to_owned(), value)),
        };
        if enqueue_time != -1 {
            set(
                &mut stored,
                props::TIMER_ENQUEUE_MS,
                enqueue_time.to_string(),
            );
        }
        if roll {
            let times = stored
                .iter()
                .find(|(k, _)| k == props::TIMER_ROLL_TIMES)
                .and_then(|(_, v)| v.parse::<i32>().ok())
                .unwrap_or(0);
            set(
                &mut stored,
                props::TIMER_ROLL_TIMES,
                times.wrapping_add(1).to_string(),
            );
        }
        set(
            &mut stored,
            props::TIMER_DEQUEUE_MS,
            dequeue_time.to_string(),
        );
        let stored = java_map_order(stored, |p| p.0.as_str());
        let find = |name: &str| {
            stored
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let (topic, queue_id) = if roll {
            (msg.topic().into_owned(), msg.queue_id)
        } else {
            match (
                find(props::REAL_TOPIC),
                find(props::REAL_QID).and_then(|q| q.parse::<i32>().ok()),
            ) {
                (Some(t), Some(q)) => (t.to_owned(), q),
                _ => {
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                    ::log::warn!(
                        target: "rmqstore.timer",
                        "timer message at commitlog offset {} has no REAL_TOPIC/REAL_QID; dropped",
                        msg.commit_log_offset
                    );
                    return Ok(Put::Dropped);
                }
            }
        };
        let stored_props = encode_properties(stored.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let mut view: Vec<(String, String)> = stored
            .into_iter()
            .filter(|(k, _)| roll || (k != props::REAL_TOPIC && k != props::REAL_QID))
            .collect();
        set(&mut view, property::WAIT, "false".to_owned());
        let out = Message {
            topic,
            body: Vec::new(),
            queue_id,
            flag: msg.flag,
            sys_flag: msg.stored_sys_flag(),
            born_timestamp: msg.born_timestamp,
            born_host: Some(msg.born_host),
            properties: view,
            reconsume_times: msg.reconsume_times,
            prepared_transaction_offset: msg.prepared_transaction_offset,
        };
        if let Some(copies) = copies.filter(|c| !c.is_empty()) {
            let key = CopyKey::of_put(&out, msg.body_crc, msg.stored_body().len());
            if key.is_some_and(|k| dedup::take(copies, &k)) {
                self.counters.recovered.fetch_add(1, Ordering::Relaxed);
                return Ok(Put::AlreadyDone);
            }
        }
        let r = store.put_delivered(TimeUp {
            msg: out,
            body: msg.stored_body(),
            stored_props: Cow::Owned(stored_props),
        })?;
        Ok(match r.status {
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
                    "timer message at commitlog offset {} refused for good: {}",
                    msg.commit_log_offset,
                    r.status.name()
                );
                Put::Dropped
            }
            _ => Put::Retry,
        })
    }
}
