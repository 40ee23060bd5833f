//! The delay-level put hook: RocketMQ 5.x's `HookUtils.transformDelayLevelMessage` (4.9.x does
//! the same inside `CommitLog.asyncPutMessage`), and the batch refusal of
//! `CommitLog.asyncPutMessages`.

use std::sync::Arc;

use super::levels::{parse_java_int, DelayLevels};
use super::order::java_map_order;
use super::{REAL_QID, REAL_TOPIC, SCHEDULE_TOPIC};
use crate::commitlog::Batch;
use crate::format::{property, sysflag, Message, PutMessageStatus};
use crate::store::{PutBatch, PutMessageHook};

/// Moves a message with a delay level into the schedule topic (see the module header of
/// [`crate::schedule`]).
pub struct DelayLevelHook {
    levels: Arc<DelayLevels>,
}

impl DelayLevelHook {
    pub fn new(levels: Arc<DelayLevels>) -> DelayLevelHook {
        DelayLevelHook { levels }
    }
}

/// The last value of `DELAY` (a repeated name keeps its last value, as in RocketMQ's map).
fn delay_of(props: &[(String, String)]) -> Option<&str> {
    props
        .iter()
        .rev()
        .find(|(k, _)| k == property::DELAY)
        .map(|(_, v)| v.as_str())
}

impl PutMessageHook for DelayLevelHook {
    fn name(&self) -> &str {
        "delayLevel"
    }

    /// Messages with a DELAY property.
    fn applies_to(&self, msg: &Message) -> bool {
        msg.properties.iter().any(|(k, _)| k == property::DELAY)
    }

    fn applies_to_batch(&self, batch: &Batch<'_>) -> bool {
        batch.properties.iter().any(|(k, _)| k == property::DELAY)
    }

    fn may_apply_to_raw(&self, _topic: &str, has_delay: bool, _has_timer: bool) -> bool {
        has_delay
    }

    fn before_put(&self, msg: &mut Message) -> Result<(), PutMessageStatus> {
        let Some(delay) = delay_of(&msg.properties) else {
            return Ok(());
        };
        let tx = sysflag::transaction_value(msg.sys_flag);
        let level = parse_java_int(delay);
        if tx != sysflag::TRANSACTION_NOT_TYPE && tx != sysflag::TRANSACTION_COMMIT_TYPE {
            // PREPARED and ROLLBACK records keep their topic and DELAY (RocketMQ transforms
            // only NOT and COMMIT types). One in the schedule topic whose DELAY is not a Java
            // int would make RocketMQ's `checkMessageAndReturnSize` fail on it (its dispatch
            // and recovery stop there): refused, so no store rmqstore writes holds one.
            if level.is_none() && msg.topic == SCHEDULE_TOPIC {
                return Err(PutMessageStatus::MessageIllegal);
            }
            return Ok(());
        }
        // `getDelayTimeLevel` is `Integer.parseInt`: RocketMQ 5.5.1's put throws
        // NumberFormatException out of `asyncPutMessage` on a DELAY that is not a number, and
        // nothing is stored; here that is MESSAGE_ILLEGAL.
        let Some(mut level) = level else {
            log::warn!(
                target: "rmqstore.schedule",
                "put refused: DELAY {delay:?} of a message to {} is not a number",
                msg.topic
            );
            return Err(PutMessageStatus::MessageIllegal);
        };
        if level <= 0 {
            return Ok(());
        }
        let mut props = std::mem::take(&mut msg.properties);
        let max = self.levels.max_level();
        if level > max {
            level = max;
            // `setDelayTimeLevel(max)`: the stored DELAY is the clamped level.
            props.push((property::DELAY.to_owned(), level.to_string()));
        }
        props.push((REAL_TOPIC.to_owned(), std::mem::take(&mut msg.topic)));
        props.push((REAL_QID.to_owned(), msg.queue_id.to_string()));
        // Re-rendered from RocketMQ's properties map, in its order.
        msg.properties = java_map_order(props, |p| p.0.as_str());
        msg.topic = SCHEDULE_TOPIC.to_owned();
        msg.queue_id = level - 1;
        Ok(())
    }

    /// `asyncPutMessages`: a batch whose properties hold a DELAY above 0 is MESSAGE_ILLEGAL
    /// (one that is not a number throws in RocketMQ: refused too).
    fn before_put_batch(&self, batch: &mut PutBatch<'_>) -> Result<(), PutMessageStatus> {
        match delay_of(&batch.properties).map(parse_java_int) {
            None => Ok(()),
            Some(Some(level)) if level <= 0 => Ok(()),
            Some(_) => Err(PutMessageStatus::MessageIllegal),
        }
    }
}
