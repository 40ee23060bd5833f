//! Timer messages on the store (`crate::timer`): the engine's rounds, its flush and stats, the
//! cancellation of a pending timer message, and the two reads the engine needs from the store
//! (the timer queue's units, a message by commitlog offset and size).

use std::path::Path;
use std::sync::Arc;

use crate::commitlog::AppendResult;
use crate::error::{Result, StoreError};
use crate::format::{property, CqUnit, DecodedRecord, Message, MessageExt};
use crate::schedule::deliver::TimeUp;
use crate::timer::hook::TimerHook;
use crate::timer::{
    props, TimerDequeueStep, TimerEngine, TimerEnqueueStep, TimerSettings, TimerStats, TIMER_TOPIC,
};

use super::MessageStore;

/// Tag of the delete markers `cancel_timer` puts (`RecallMessageProcessor.RECALL_MESSAGE_TAG`).
pub const RECALL_MESSAGE_TAG: &str = "_RECALL_TAG_";

impl MessageStore {
    /// Opens the timer engine (when `timer_wheel_enable`) and adds the timer put hook, first
    /// in the list; called once at the end of a writable open.
    pub(super) fn attach_timer(&mut self, root: &Path) -> Result<()> {
        let engine = if self.config.timer_wheel_enable {
            Some(Arc::new(TimerEngine::open(self, root, &self.config)?))
        } else {
            None
        };
        let settings = TimerSettings::from_config(&self.config);
        let wheel = engine.as_ref().map(|e| Arc::clone(e.wheel()));
        // First of all hooks, whatever was added before: `handleScheduleMessage` strips the
        // timer properties of a delay-level message before the delay-level part runs.
        self.put_hooks
            .insert(0, Box::new(TimerHook::new(settings, wheel)));
        self.timer = engine;
        Ok(())
    }

    fn timer_engine(&self) -> Result<&Arc<TimerEngine>> {
        self.check_not_forked()?;
        self.writable("timer messages")?;
        self.timer.as_ref().ok_or_else(|| {
            StoreError::InvalidArgument(
                "timer messages are disabled (timer_wheel_enable is false)".to_owned(),
            )
        })
    }

    /// Whether the timer engine runs (a writable store with `timer_wheel_enable`).
    pub fn timer_enabled(&self) -> bool {
        self.timer.is_some()
    }

    /// Up to `max` units of the timer queue from queue offset `from`.
    pub(crate) fn timer_queue_units(&self, from: i64, max: usize) -> Result<Vec<CqUnit>> {
        self.with_open(|o| {
            let mut units = Vec::new();
            if let Some(cq) = o.cqs.find(TIMER_TOPIC, 0) {
                let to = from.saturating_add(max.min(i64::MAX as usize) as i64);
                cq.scan(from, to, |u| {
                    units.push(u);
                    true
                });
            }
            units
        })
    }

    /// The timer queue's unit at `queue_offset`.
    pub(crate) fn timer_queue_unit(&self, queue_offset: i64) -> Result<Option<CqUnit>> {
        self.with_open(|o| {
            o.cqs
                .find(TIMER_TOPIC, 0)
                .and_then(|cq| cq.get(queue_offset))
        })
    }

    /// The message of the record at `offset` of `size` bytes (`getMessageByCommitOffset`).
    pub(crate) fn timer_message_at(&self, offset: i64, size: i32) -> Result<Option<MessageExt>> {
        self.with_open(|o| o.commitlog.message_at(offset, size))?
    }

    /// Calls `f` with the record of `size` bytes at `offset`, borrowed from its segment, and a
    /// put of a delivered message ([`Self::put_delivered`]) to make while it is borrowed; `None`
    /// (without calling `f`) when [`Self::timer_message_at`] would not give that record as
    /// stored (unreadable, a failed CRC check, a body the read decompresses).
    pub(crate) fn with_timer_record<T>(
        &self,
        offset: i64,
        size: i32,
        f: impl FnOnce(&DecodedRecord<'_>, &mut dyn FnMut(TimeUp<'_>) -> Result<AppendResult>) -> T,
    ) -> Result<Option<T>> {
        self.with_open(|o| {
            o.commitlog
                .with_unit_record(offset, size, |d| {
                    if !o.commitlog.reads_as_stored(d) {
                        return None;
                    }
                    let mut put = |t: TimeUp<'_>| {
                        self.writable("put_delivered")?;
                        Ok(self.put_time_up(o, t))
                    };
                    Some(f(d, &mut put))
                })
                .flatten()
        })
    }

    /// Calls `f` with the commitlog (the timer's recovery scans it for copies).
    pub(crate) fn with_timer_commitlog<T>(
        &self,
        f: impl FnOnce(&crate::commitlog::CommitLog) -> T,
    ) -> Result<T> {
        self.with_open(|o| f(&o.commitlog))
    }

    /// One enqueue round: moves up to `max_msgs` messages of the timer queue into the wheel
    /// (delivering those already due), at time `now_ms`.
    pub fn timer_enqueue(&self, now_ms: i64, max_msgs: usize) -> Result<TimerEnqueueStep> {
        self.timer_engine()?.enqueue(self, now_ms, max_msgs)
    }

    /// One dequeue round: delivers the slots due at `now_ms`, up to `max_msgs` messages.
    pub fn timer_dequeue(&self, now_ms: i64, max_msgs: usize) -> Result<TimerDequeueStep> {
        self.timer_engine()?.dequeue(self, now_ms, max_msgs)
    }

    /// Forces the timer log and wheel and writes `config/timercheck`.
    pub fn timer_flush(&self) -> Result<()> {
        self.timer_engine()?.flush()
    }

    pub fn timer_stats(&self) -> Result<TimerStats> {
        self.timer_engine()?.stats(self)
    }

    /// Cancels the pending timer message of `topic` whose UNIQ_KEY is `uniq_key`, as RocketMQ's
    /// recall does: a delete marker (`TIMER_DEL_UNIQKEY`) put for the same slot. `deliver_ms`
    /// is the recall handle's time (the message's TIMER_OUT_MS + 1); without it the message is
    /// looked up by key in the timer topic (the index must be on). The put's status says how
    /// it went: WHEEL_TIMER_MSG_ILLEGAL when that time has passed.
    pub fn cancel_timer(
        &self,
        topic: &str,
        uniq_key: &str,
        deliver_ms: Option<i64>,
    ) -> Result<AppendResult> {
        self.check_not_forked()?;
        self.writable("cancel_timer")?;
        let Some(engine) = &self.timer else {
            return Ok(AppendResult::failed(
                crate::format::PutMessageStatus::WheelTimerNotEnable,
            ));
        };
        let deliver_ms = match deliver_ms {
            Some(ms) => ms,
            None => {
                let found = self.query_message(TIMER_TOPIC, uniq_key, 64, 0, i64::MAX)?;
                found
                    .iter()
                    .filter(|m| {
                        m.property(property::UNIQ_KEY) == Some(uniq_key)
                            && m.property(props::REAL_TOPIC) == Some(topic)
                    })
                    .find_map(|m| m.property(props::TIMER_OUT_MS)?.parse::<i64>().ok())
                    .map(|out| out.saturating_add(1))
                    .ok_or_else(|| {
                        StoreError::InvalidArgument(format!(
                            "no timer message of topic {topic} with UNIQ_KEY {uniq_key} was \
                             found (give its deliver time to cancel it without the index)"
                        ))
                    })?
            }
        };
        let delete_key = if engine.settings().append_topic_for_delete_key {
            format!("{topic}+{uniq_key}")
        } else {
            uniq_key.to_owned()
        };
        let marker = Message {
            topic: topic.to_owned(),
            body: b"0".to_vec(),
            properties: vec![
                (property::TAGS.to_owned(), RECALL_MESSAGE_TAG.to_owned()),
                (props::TIMER_DEL_UNIQKEY.to_owned(), delete_key),
                (property::UNIQ_KEY.to_owned(), uniq_key.to_owned()),
                (props::TIMER_DELIVER_MS.to_owned(), deliver_ms.to_string()),
            ],
            born_timestamp: crate::util::now_millis(),
            ..Message::default()
        };
        self.put_message(&marker)
    }
}
