//! `getMessage`: a pull over one queue, with RocketMQ's statuses, next offsets and batch
//! limits (docs/architecture.md#reading-by-queue).

use crate::commitlog::CommitLog;
use crate::config::StoreConfig;
use crate::error::Result;
use crate::format::MessageExt;
use crate::format::CQ_STORE_UNIT_SIZE;
use crate::queue::consume_queue::ConsumeQueue;

use super::filter::TagFilter;

/// `GetMessageStatus`, in RocketMQ's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum GetMessageStatus {
    Found = 0,
    NoMatchedMessage,
    MessageWasRemoving,
    OffsetFoundNull,
    OffsetOverflowBadly,
    OffsetOverflowOne,
    OffsetTooSmall,
    NoMatchedLogicQueue,
    NoMessageInQueue,
    OffsetReset,
}

impl GetMessageStatus {
    pub const ALL: [GetMessageStatus; 10] = [
        GetMessageStatus::Found,
        GetMessageStatus::NoMatchedMessage,
        GetMessageStatus::MessageWasRemoving,
        GetMessageStatus::OffsetFoundNull,
        GetMessageStatus::OffsetOverflowBadly,
        GetMessageStatus::OffsetOverflowOne,
        GetMessageStatus::OffsetTooSmall,
        GetMessageStatus::NoMatchedLogicQueue,
        GetMessageStatus::NoMessageInQueue,
        GetMessageStatus::OffsetReset,
    ];

    pub fn name(self) -> &'static str {
        match self {
            GetMessageStatus::Found => "FOUND",
            GetMessageStatus::NoMatchedMessage => "NO_MATCHED_MESSAGE",
            GetMessageStatus::MessageWasRemoving => "MESSAGE_WAS_REMOVING",
            GetMessageStatus::OffsetFoundNull => "OFFSET_FOUND_NULL",
            GetMessageStatus::OffsetOverflowBadly => "OFFSET_OVERFLOW_BADLY",
            GetMessageStatus::OffsetOverflowOne => "OFFSET_OVERFLOW_ONE",
            GetMessageStatus::OffsetTooSmall => "OFFSET_TOO_SMALL",
            GetMessageStatus::NoMatchedLogicQueue => "NO_MATCHED_LOGIC_QUEUE",
            GetMessageStatus::NoMessageInQueue => "NO_MESSAGE_IN_QUEUE",
            GetMessageStatus::OffsetReset => "OFFSET_RESET",
        }
    }
}

/// The pull batch limits (`isTheBatchFull`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PullLimits {
    pub max_total_msg_size: i64,
    pub max_filter_message_size: i64,
    pub count_in_memory: i32,
    pub bytes_in_memory: i64,
    pub count_in_disk: i32,
    pub bytes_in_disk: i64,
    /// Bytes behind the commitlog end still taken as "in memory".
    pub memory_window: i64,
}

/// `MAX_PULL_MSG_SIZE`.
pub(crate) const MAX_PULL_MSG_SIZE: i64 = 128 * 1024 * 1024;

impl PullLimits {
    pub(crate) fn from_config(c: &StoreConfig, total_memory: i64) -> PullLimits {
        PullLimits {
            max_total_msg_size: MAX_PULL_MSG_SIZE,
            max_filter_message_size: c.max_filter_message_size,
            count_in_memory: c.max_transfer_count_on_message_in_memory,
            bytes_in_memory: c.max_transfer_bytes_on_message_in_memory,
            count_in_disk: c.max_transfer_count_on_message_in_disk,
            bytes_in_disk: c.max_transfer_bytes_on_message_in_disk,
            memory_window: total_memory / 100 * i64::from(c.access_message_in_memory_max_ratio),
        }
    }

    fn batch_full(
        &self,
        size: i32,
        max_msg_nums: i32,
        buf_total: i64,
        count: i32,
        in_mem: bool,
    ) -> bool {
        if buf_total == 0 || count == 0 {
            return false;
        }
        let size = i64::from(size);
        if count + 1 > max_msg_nums || buf_total + size > self.max_total_msg_size {
            return true;
        }
        if in_mem {
            buf_total + size > self.bytes_in_memory || count > self.count_in_memory - 1
        } else {
            buf_total + size > self.bytes_in_disk || count > self.count_in_disk - 1
        }
    }
}

/// What `getMessage` answers.
#[derive(Clone, Debug)]
pub struct GetMessageResult {
    pub status: GetMessageStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub messages: Vec<MessageExt>,
    /// Bytes of all messages returned.
    pub buffer_total_size: i64,
}

/// `DefaultMessageStore.getMessage` over one queue (`None`: no such queue, i.e. empty). A
/// damaged record among those read is a [`crate::StoreError::CorruptRecord`] naming it.
pub(crate) fn get_message(
    commitlog: &CommitLog,
    cq: Option<&ConsumeQueue>,
    offset: i64,
    max_msg_nums: i32,
    filter: &TagFilter,
    limits: &PullLimits,
) -> Result<GetMessageResult> {
    let (min, max) = cq.map_or((0, 0), |cq| (cq.min_offset(), cq.max_offset()));
    let mut r = GetMessageResult {
        status: GetMessageStatus::NoMatchedMessage,
        next_begin_offset: offset,
        min_offset: min,
        max_offset: max,
        messages: Vec::new(),
        buffer_total_size: 0,
    };
    let cq = match cq {
        Some(cq) if max != 0 => cq,
        _ => {
            r.status = GetMessageStatus::NoMessageInQueue;
            r.next_begin_offset = 0;
            return Ok(r);
        }
    };
    if offset < min {
        r.status = GetMessageStatus::OffsetTooSmall;
        r.next_begin_offset = min;
        return Ok(r);
    }
    if offset == max {
        r.status = GetMessageStatus::OffsetOverflowOne;
        return Ok(r);
    }
    if offset > max {
        r.status = GetMessageStatus::OffsetOverflowBadly;
        r.next_begin_offset = max;
        return Ok(r);
    }
    let max_msg_nums = max_msg_nums.max(1);
    let max_filter_bytes = limits
        .max_filter_message_size
        .max(i64::from(max_msg_nums) * CQ_STORE_UNIT_SIZE);
    let max_phy = commitlog.max_offset();
    let file_size = commitlog.queue().file_size();
    let mut next = offset;
    let mut next_phy_file_start = i64::MIN;
    let mut count = 0i32;
    // travelCqFileNumWhenGetMessage = 1: one consume queue segment per call.
    let want = (max_filter_bytes / CQ_STORE_UNIT_SIZE + 1) as usize;
    let Some(units) = cq.units_from(next, want) else {
        r.status = GetMessageStatus::OffsetFoundNull;
        r.next_begin_offset = cq.roll_next_file(next);
        return Ok(r);
    };
    for u in units {
        if next >= max {
            break;
        }
        if (u.queue_offset - offset) * CQ_STORE_UNIT_SIZE >= max_filter_bytes {
            break;
        }
        let in_mem = max_phy - u.phy_offset <= limits.memory_window;
        if limits.batch_full(u.size, max_msg_nums, r.buffer_total_size, count, in_mem) {
            break;
        }
        next = u.queue_offset + 1;
        if u.phy_offset < next_phy_file_start || u.is_pre_blank() {
            continue;
        }
        if !filter.matches_code(u.tags_code) {
            continue;
        }
        let Some(m) = commitlog.message_at(u.phy_offset, u.size)? else {
            let commit_min = commitlog.min_offset();
            if u.phy_offset < commit_min {
                // Its segment expired and was deleted while this read ran: a gap a consumer
                // must see as OFFSET_TOO_SMALL, never as a skip.
                if count == 0 {
                    cq.correct_min_offset(commit_min);
                    let min = cq.min_offset();
                    if min > u.queue_offset {
                        r.status = GetMessageStatus::OffsetTooSmall;
                        r.next_begin_offset = min;
                        r.min_offset = min;
                        return Ok(r);
                    }
                }
                next = u.queue_offset;
                break;
            }
            if count == 0 {
                r.status = GetMessageStatus::MessageWasRemoving;
            }
            next_phy_file_start = u.phy_offset + file_size - u.phy_offset.rem_euclid(file_size);
            continue;
        };
        if !filter.matches_tag(|| m.tags()) {
            continue;
        }
        r.buffer_total_size += i64::from(u.size);
        r.messages.push(m);
        count += 1;
        r.status = GetMessageStatus::Found;
    }
    r.next_begin_offset = next;
    Ok(r)
}
