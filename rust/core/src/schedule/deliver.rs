//! One delivery round of a delay level (`DeliverDelayedMessageTimerTask.executeOnTimeUp` with
//! `syncDeliver`), and the message `messageTimeUp` builds from a schedule-topic record.

use std::borrow::Cow;

use super::levels::{parse_java_int, DelayLevels};
use super::order::{is_java_map_order, java_map_order};
use super::{ScheduleStep, HALF_TOPIC, REAL_QID, REAL_TOPIC, SCHEDULE_TOPIC};
use crate::commitlog::{AppendResult, CommitLog};
use crate::format::{
    for_each_property, property, topic_is_legal, DecodedRecord, Message, PutMessageStatus,
};
use crate::queue::consume_queue::ConsumeQueue;

/// Properties `messageTimeUp` clears from the map the re-put's hooks see (the stored string
/// keeps them: RocketMQ renders it before clearing).
pub(crate) const CLEARED: [&str; 3] = [property::DELAY, "TIMER_DELIVER_MS", "TIMER_DELAY_SEC"];

/// A due message rebuilt for its real queue, borrowing its record.
pub(crate) struct TimeUp<'a> {
    /// What the put hooks see: RocketMQ's `MessageExtBrokerInner` after `messageTimeUp`
    /// (properties map without DELAY, TIMER_DELIVER_MS and TIMER_DELAY_SEC, WAIT=false), with
    /// an empty body (the body is `body`; a hook that needs it gets it copied in).
    pub(crate) msg: Message,
    /// The body as stored.
    pub(crate) body: &'a [u8],
    /// The properties string written when no hook changes the message: the record's
    /// properties as RocketMQ's map renders them, before the clearing (the record's own bytes
    /// when they already are that rendering).
    pub(crate) stored_props: Cow<'a, str>,
}

/// Why a due unit is passed over without a delivery.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Drop {
    /// The record is gone or not a whole message (`lookMessageByOffset` gives null).
    Unreadable,
    /// REAL_TOPIC or REAL_QID missing or not usable (RocketMQ's `messageTimeUp` throws and the
    /// round moves past the unit).
    BadReal,
    /// The real topic is the transaction half topic (RocketMQ discards these).
    HalfTopic,
}

/// The properties of a stored string as `string2messageProperties` reads them, in order:
/// items with a non-empty name and value (name up to the item's first `\x01`).
fn stored_items(props: &[u8]) -> Vec<(&str, &str)> {
    let mut out = Vec::with_capacity(8);
    for_each_property(props, |k, v| {
        if k.is_empty() || v.is_empty() {
            return;
        }
        if let (Ok(k), Ok(v)) = (std::str::from_utf8(k), std::str::from_utf8(v)) {
            out.push((k, v));
        }
    });
    out
}

/// `messageTimeUp` for the record `d`: `Err` when the unit is dropped instead.
pub(crate) fn time_up<'a>(d: &DecodedRecord<'a>) -> Result<TimeUp<'a>, Drop> {
    let Ok(raw) = std::str::from_utf8(d.properties) else {
        return Err(Drop::BadReal);
    };
    let items = stored_items(d.properties);
    let last = |name: &str| items.iter().rev().find(|(k, _)| *k == name).map(|p| p.1);
    let topic = last(REAL_TOPIC).ok_or(Drop::BadReal)?;
    let queue_id = last(REAL_QID)
        .and_then(parse_java_int)
        .ok_or(Drop::BadReal)?;
    if topic == HALF_TOPIC {
        return Err(Drop::HalfTopic);
    }
    // A copy put back into the schedule topic would be scheduled and delivered again, forever
    // (RocketMQ loops so on a message sent to SCHEDULE_TOPIC_XXXX with a DELAY).
    if topic == SCHEDULE_TOPIC {
        return Err(Drop::BadReal);
    }
    // RocketMQ would try to put these and fail on every retry (an illegal topic) or write a
    // record no queue can hold (a negative queue id): neither can be delivered.
    if !topic_is_legal(topic) || queue_id < 0 {
        return Err(Drop::BadReal);
    }
    // The stored string: RocketMQ's map rendered; the record's own bytes when they already
    // are that rendering (always so for records rmqstore or RocketMQ wrote).
    let distinct = items
        .iter()
        .enumerate()
        .all(|(i, (k, _))| items[i + 1..].iter().all(|(k2, _)| k2 != k));
    let whole = raw.is_empty() || raw.ends_with('\u{2}');
    let rendered_len: usize = items.iter().map(|p| p.0.len() + p.1.len() + 2).sum();
    let (stored_props, ordered) = if distinct
        && whole
        && rendered_len == raw.len()
        && is_java_map_order(items.iter().map(|p| p.0))
    {
        (Cow::Borrowed(raw), items)
    } else {
        let ordered = java_map_order(items, |p| p.0);
        let mut s = String::with_capacity(rendered_len);
        for (k, v) in &ordered {
            s.push_str(k);
            s.push('\u{1}');
            s.push_str(v);
            s.push('\u{2}');
        }
        (Cow::Owned(s), ordered)
    };
    let mut view: Vec<(String, String)> = Vec::with_capacity(ordered.len() + 1);
    view.extend(
        ordered
            .into_iter()
            .filter(|(k, _)| !CLEARED.contains(k))
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    match view.iter_mut().find(|(k, _)| k == property::WAIT) {
        Some(w) => w.1 = "false".to_owned(),
        None => view.push((property::WAIT.to_owned(), "false".to_owned())),
    }
    Ok(TimeUp {
        msg: Message {
            topic: topic.to_owned(),
            body: Vec::new(),
            queue_id,
            flag: d.flag,
            sys_flag: d.sys_flag,
            born_timestamp: d.born_timestamp,
            born_host: Some(d.born_host),
            properties: view,
            reconsume_times: d.reconsume_times,
            prepared_transaction_offset: 0,
        },
        body: d.body,
        stored_props,
    })
}

/// `correctDeliverTimestamp`: a deliver time further ahead than the level's delay (a clock that
/// went back, or a record from another table) is now.
pub(crate) fn correct_deliver_timestamp(now: i64, deliver: i64, delay_ms: i64) -> i64 {
    if deliver > now.saturating_add(delay_ms) {
        now
    } else {
        deliver
    }
}

/// Ext-address tags codes (`ConsumeQueue.isExtAddr`): at or below `Integer.MIN_VALUE - 1`.
fn is_ext_addr(tags_code: i64) -> bool {
    tags_code < i64::from(i32::MIN)
}

/// One round of `level` from `*offset` (advanced past each delivered or dropped unit): due
/// units are rebuilt and handed to `put` in queue order, at most `max_msgs` deliveries; stops
/// at the first unit not yet due, at the queue's end, or at a failed put (whose unit stays for
/// the next round).
#[allow(clippy::too_many_arguments)]
pub(crate) fn deliver_round(
    levels: &DelayLevels,
    commitlog: &CommitLog,
    cq: Option<&ConsumeQueue>,
    level: i32,
    offset: &mut i64,
    max_msgs: usize,
    now: impl Fn() -> i64,
    mut put: impl FnMut(TimeUp<'_>) -> AppendResult,
) -> ScheduleStep {
    let mut step = ScheduleStep {
        offset: *offset,
        ..ScheduleStep::default()
    };
    let Some(cq) = cq else {
        return step;
    };
    let delay_ms = levels.delay_ms(level).unwrap_or(0);
    // `iterateFrom` gives nothing outside [min, max): RocketMQ resets to the bound.
    let (min, max) = (cq.min_offset(), cq.max_offset());
    if *offset < min {
        log::error!(target: "rmqstore.schedule", "level {level}: offset {} below the queue's minimum {min}; moved there", *offset);
        *offset = min;
    } else if *offset > max {
        log::error!(target: "rmqstore.schedule", "level {level}: offset {} above the queue's maximum {max}; moved there", *offset);
        *offset = max;
    }
    let mut stop = false;
    let mut clock = now();
    while !stop && step.delivered < max_msgs as u64 && *offset < max {
        let from = *offset;
        let mut visited = false;
        cq.scan(from, max, |u| {
            visited = true;
            let mut tags = u.tags_code;
            if is_ext_addr(tags) {
                let stored = commitlog.store_timestamp_at(u.phy_offset, u.size);
                tags = levels.deliver_timestamp(level, stored);
            }
            // The clock is read again only when an earlier reading could decide otherwise than
            // the time now: a unit that looks not yet due, or one whose deliver time an earlier
            // clock corrects (the correction depends on the clock).
            let mut deliver = correct_deliver_timestamp(clock, tags, delay_ms);
            if deliver > clock || deliver != tags {
                clock = now();
                deliver = correct_deliver_timestamp(clock, tags, delay_ms);
            }
            if deliver > clock || step.delivered >= max_msgs as u64 {
                step.next_due_ms = Some(deliver);
                stop = true;
                return false;
            }
            // The put runs while the record is borrowed: its body and properties string are
            // copied straight from the segment into the new record.
            let outcome = commitlog
                .with_unit_record(u.phy_offset, u.size, |d| time_up(d).map(&mut put))
                .unwrap_or(Err(Drop::Unreadable));
            match outcome {
                Err(why) => {
                    log::error!(
                        target: "rmqstore.schedule",
                        "level {level}: the message at queue offset {} (commitlog offset {}) is \
                         dropped: {}",
                        u.queue_offset,
                        u.phy_offset,
                        match why {
                            Drop::Unreadable => "its record cannot be read",
                            Drop::BadReal => "its REAL_TOPIC or REAL_QID is missing or unusable",
                            Drop::HalfTopic => "its real topic is the transaction half topic",
                        }
                    );
                    step.dropped += 1;
                    *offset = u.queue_offset + 1;
                    true
                }
                Ok(r) if r.status == PutMessageStatus::PutOk => {
                    step.delivered += 1;
                    *offset = u.queue_offset + 1;
                    true
                }
                Ok(r) => {
                    step.status = Some(r.status);
                    step.next_due_ms = Some(deliver);
                    stop = true;
                    false
                }
            }
        });
        if !visited {
            break;
        }
    }
    if step.next_due_ms.is_none() && *offset < max {
        // Stopped before looking at the next unit (max_msgs 0) or on a unit not readable yet:
        // its deliver time, when it is there.
        step.next_due_ms = cq.get(*offset).map(|u| {
            let t = now();
            correct_deliver_timestamp(t, u.tags_code, delay_ms)
        });
    }
    step.offset = *offset;
    step
}
