//! Delivery of a due timer message (`TimerMessageStore.convert`, `convertMessage`, `doPut`):
//! the message read from the timer topic, put to its real topic and queue (or back to the
//! timer topic when it rolls) with the timer's bookkeeping properties.

use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::format::{property, Message, MessageExt, PutMessageStatus};
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
        // One pass over the stored properties (parsed with Java map semantics: one value a
        // name): what the put changes is taken out, then set again at the end.
        let (mut real_topic, mut real_qid, mut roll_times, mut delete) = (None, None, None, false);
        let mut properties: Vec<(String, String)> = Vec::new();
        for (k, v) in msg.properties() {
            match k.as_str() {
                props::REAL_TOPIC if !roll => real_topic = Some(v),
                props::REAL_QID if !roll => real_qid = Some(v),
                props::TIMER_ROLL_TIMES if roll => roll_times = Some(v),
                props::TIMER_ENQUEUE_MS | props::TIMER_DEQUEUE_MS | property::WAIT => {}
                _ => {
                    delete |= k == props::TIMER_DEL_UNIQKEY;
                    properties.push((k, v));
                }
            }
        }
        if !roll && delete {
            // A delete marker is never delivered.
            return Ok(Put::Dropped);
        }
        if enqueue_time != -1 {
            properties.push((props::TIMER_ENQUEUE_MS.to_owned(), enqueue_time.to_string()));
        }
        if roll {
            let times = roll_times.and_then(|v| v.parse::<i32>().ok()).unwrap_or(0);
            properties.push((
                props::TIMER_ROLL_TIMES.to_owned(),
                times.wrapping_add(1).to_string(),
            ));
        }
        properties.push((props::TIMER_DEQUEUE_MS.to_owned(), dequeue_time.to_string()));
        properties.push((property::WAIT.to_owned(), "false".to_owned()));
        let (topic, queue_id) = if roll {
            (msg.topic().into_owned(), msg.queue_id)
        } else {
            match (real_topic, real_qid.and_then(|q| q.parse::<i32>().ok())) {
                (Some(t), Some(q)) => (t, q),
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
        let out = Message {
            topic,
            body: msg.stored_body().to_vec(),
            queue_id,
            flag: msg.flag,
            sys_flag: msg.stored_sys_flag(),
            born_timestamp: msg.born_timestamp,
            born_host: Some(msg.born_host),
            properties,
            reconsume_times: msg.reconsume_times,
            prepared_transaction_offset: msg.prepared_transaction_offset,
        };
        if let Some(copies) = copies.filter(|c| !c.is_empty()) {
            let key = CopyKey::of_put(&out, msg.body_crc);
            if key.is_some_and(|k| dedup::take(copies, &k)) {
                self.counters.recovered.fetch_add(1, Ordering::Relaxed);
                return Ok(Put::AlreadyDone);
            }
        }
        let r = store.put_message(&out)?;
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
