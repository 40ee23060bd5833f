//! Delay levels (RocketMQ's `ScheduleMessageService`, docs/architecture.md#delay-levels): a
//! message put with property `DELAY` = n is stored in `SCHEDULE_TOPIC_XXXX` queue n - 1 and
//! delivered to its own topic and queue once level n's delay has passed.
//!
//! - `levels`: the `messageDelayLevel` table (`parseDelayLevel`), the tags code of the
//!   schedule topic's consume queue units (`checkMessageAndReturnSize`, used by dispatch).
//! - `hook`: the put hook that moves a message into the schedule topic
//!   (`transformDelayLevelMessage`) and refuses batches with a delay level.
//! - `deliver`: one delivery round of a level (`executeOnTimeUp`, `messageTimeUp`).
//! - `recover`: exact progress after a crash (below).
//! - `order`: the order RocketMQ's properties map renders its items in.
//!
//! The store keeps each level's progress (the next queue offset to deliver, RocketMQ's
//! `offsetTable`); the Python service persists it in `config/delayOffset.json` and paces the
//! rounds.
//!
//! # Delivery after a crash: nothing lost, duplicates only for a put in flight
//!
//! A level's progress moves past a unit only after its copy's put returned PUT_OK, and the
//! saved table is a snapshot of the progress taken at some time P (the caller reads the clock,
//! then the offsets). After a SIGKILL the table can lag: every copy delivered after the
//! snapshot is in the commitlog (the page cache survives the process) but the table does not
//! say so. [`MessageStore::schedule_load`](crate::MessageStore::schedule_load) therefore:
//!
//! 1. clamps each level's saved offset to its queue's `[min, max]` (`correctDelayOffset`; a
//!    level missing from the table starts at the queue's minimum, as RocketMQ starts it at 0
//!    and resets it to the minimum);
//! 2. takes, for each level, its *expected* original: the first unit from the offset that
//!    delivery would put (units delivery would drop are passed over);
//! 3. walks the commitlog from the later of (the first record stored at or after
//!    P - [`recover::SCAN_SLACK_MS`]) and (the oldest expected original) to the end. A record
//!    outside the schedule topic whose properties hold DELAY, REAL_TOPIC and REAL_QID is a
//!    candidate copy (a copy keeps the original's properties string, as RocketMQ's does); its
//!    DELAY names the level. If it equals that level's expected original in real topic, real
//!    queue, born time and host, body CRC and length, flag and UNIQ_KEY, and lies after it, the
//!    level moves past that original and the next one becomes expected.
//!
//! Why this is exact: copies of one level are put one at a time in queue order, so the copies
//! the table misses are, in commitlog order, the copies of the expected originals in turn; the
//! scan meets them in that order. None was appended before P - slack unless its progress update
//! was recorded before the snapshot (a put returns and its progress moves within microseconds;
//! the slack is seconds), so the scan start misses none. A copy of an original the table
//! already counts lies before the expected original's copy and does not match it (it differs in
//! born time, body or UNIQ_KEY unless two messages were put with identical content and no
//! UNIQ_KEY, the one case where a copy could be taken for another's). What is left is a put
//! torn by the kill: commitlog recovery drops it, so its original is delivered again. That is
//! the only duplicate; a put that was whole when the process died is found and not repeated.

pub mod deliver;
pub mod hook;
pub mod levels;
pub(crate) mod order;
pub mod recover;

pub use hook::DelayLevelHook;
pub use levels::{DelayLevels, DEFAULT_DELAY_LEVELS};

use crate::format::{for_each_property, property, PutMessageStatus, RecordView};

/// `TopicValidator.RMQ_SYS_SCHEDULE_TOPIC`.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// `TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC`: delivery drops messages whose real topic it is.
pub use crate::transaction::HALF_TOPIC;
/// `MessageConst.PROPERTY_REAL_TOPIC`.
pub const REAL_TOPIC: &str = "REAL_TOPIC";
/// `MessageConst.PROPERTY_REAL_QUEUE_ID`.
pub const REAL_QID: &str = "REAL_QID";

/// What one delivery round of a level did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduleStep {
    /// Messages put into their real queues.
    pub delivered: u64,
    /// Units passed over without a delivery (record unreadable, unusable REAL_TOPIC/REAL_QID,
    /// real topic the transaction half topic), each logged.
    pub dropped: u64,
    /// The level's progress after the round: the next queue offset to deliver.
    pub offset: i64,
    /// The (corrected) deliver time of the unit at `offset`; `None` when the level's queue
    /// holds nothing more.
    pub next_due_ms: Option<i64>,
    /// The status of a put that failed (the round stopped there; that unit is retried).
    pub status: Option<PutMessageStatus>,
}

/// One level's figures ([`MessageStore::schedule_stats`](crate::MessageStore::schedule_stats)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelStats {
    pub level: i32,
    pub delay_ms: i64,
    /// The next queue offset to deliver.
    pub offset: i64,
    /// The level queue's maximum offset.
    pub max_offset: i64,
    /// `max_offset - offset`.
    pub pending: i64,
    /// Deliver time (the tags code) of the unit at `offset`, if any.
    pub oldest_due_ms: Option<i64>,
}

/// The deliver time a schedule-topic record's consume queue unit holds
/// (`checkMessageAndReturnSize`): from its DELAY, level clamped; `None` when its DELAY is
/// absent or not above 0 (the unit keeps the TAGS hash). A DELAY that is not a number makes
/// RocketMQ's check fail (its dispatch stops there); rmqstore never writes one (the put hook
/// refuses it) and keeps the TAGS hash, logging the record.
#[cold]
pub(crate) fn record_deliver_time(levels: &DelayLevels, d: &RecordView<'_>) -> Option<i64> {
    let mut delay = None;
    for_each_property(d.properties, |k, v| {
        if k == property::DELAY.as_bytes() && !v.is_empty() {
            delay = Some(v);
        }
    });
    let delay = std::str::from_utf8(delay?).unwrap_or("\u{fffd}");
    match levels.schedule_tags_code(delay, d.store_timestamp) {
        Ok(code) => code,
        Err(_) => {
            log::error!(
                target: "rmqstore.reput",
                "the schedule-topic record at commitlog offset {} has DELAY {delay:?}, not a \
                 number: its consume queue unit keeps the TAGS hash",
                d.physical_offset
            );
            None
        }
    }
}
