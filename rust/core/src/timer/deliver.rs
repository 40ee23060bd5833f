//! Delivery of a due timer message (`TimerMessageStore.convert`, `convertMessage`, `doPut`):
//! the message read from the timer topic, put to its real topic and queue (or back to the
//! timer topic when it rolls) with the timer's bookkeeping properties.

use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::format::{property, Message, MessageExt, PutMessageStatus};
use crate::store::MessageStore;

use super::{props, Put, TimerEngine};

impl TimerEngine {
    /// `convert`, `convertMessage` and `doPut`: puts `msg` (read from the timer topic) to its
    /// real topic and queue, or back to the timer topic when `roll`; `dequeue_time` is the
    /// TIMER_DEQUEUE_MS it gets (the clock read once per slot).
    pub(super) fn deliver(
        &self,
        store: &MessageStore,
        msg: &MessageExt,
        enqueue_time: i64,
        roll: bool,
        dequeue_time: i64,
    ) -> Result<Put> {
        let mut properties = msg.properties();
        if enqueue_time != -1 {
            props::set(
                &mut properties,
                props::TIMER_ENQUEUE_MS,
                enqueue_time.to_string(),
            );
        }
        if roll {
            let times = props::get(&properties, props::TIMER_ROLL_TIMES)
                .and_then(|v| v.parse::<i32>().ok())
                .unwrap_or(0);
            props::set(
                &mut properties,
                props::TIMER_ROLL_TIMES,
                times.wrapping_add(1).to_string(),
            );
        }
        props::set(
            &mut properties,
            props::TIMER_DEQUEUE_MS,
            dequeue_time.to_string(),
        );
        if !roll && props::get(&properties, props::TIMER_DEL_UNIQKEY).is_some() {
            // A delete marker is never delivered.
            return Ok(Put::Dropped);
        }
        props::set(&mut properties, property::WAIT, "false".to_owned());
        let (topic, queue_id) = if roll {
            (msg.topic().into_owned(), msg.queue_id)
        } else {
            let topic = props::get(&properties, props::REAL_TOPIC).map(str::to_owned);
            let qid = props::get(&properties, props::REAL_QID).and_then(|q| q.parse::<i32>().ok());
            match (topic, qid) {
                (Some(t), Some(q)) => {
                    props::remove(&mut properties, props::REAL_TOPIC);
                    props::remove(&mut properties, props::REAL_QID);
                    (t, q)
                }
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
