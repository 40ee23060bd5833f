//! The consume queue unit (RocketMQ's `ConsumeQueue`, STORE_SPEC §3): 20 bytes, big-endian,
//! commitlog offset (i64), record size (i32), tags code (i64). A queue's segments are arrays of
//! these; the unit for queue offset `n` is at logical byte `n * 20`.

use super::bytes::{be_i32, be_i64};

/// `CQ_STORE_UNIT_SIZE`.
pub(crate) const CQ_STORE_UNIT_SIZE: i64 = 20;

/// The largest queue offset a message can have: the consume queue segment holding its unit
/// (segments are at most `i32::MAX` bytes) must end at a byte position an `i64` holds. About
/// 4.6e17 messages a queue.
pub(crate) const MAX_QUEUE_OFFSET: i64 = (i64::MAX - 2 * i32::MAX as i64) / CQ_STORE_UNIT_SIZE;

/// One consume queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqUnit {
    /// Queue offset (index of the unit).
    pub queue_offset: i64,
    pub phy_offset: i64,
    pub size: i32,
    pub tags_code: i64,
}

impl CqUnit {
    /// Decodes the unit in the first 20 bytes of `b` (which holds at least 20 bytes).
    pub(crate) fn decode(queue_offset: i64, b: &[u8]) -> CqUnit {
        CqUnit {
            queue_offset,
            phy_offset: be_i64(b, 0),
            size: be_i32(b, 8),
            tags_code: be_i64(b, 12),
        }
    }

    /// A pre-blank unit `(0, i32::MAX, 0)`, padding a queue that starts above offset 0.
    pub fn is_pre_blank(&self) -> bool {
        self.phy_offset == 0 && self.size == i32::MAX && self.tags_code == 0
    }
}

/// Writes a unit into the first 20 bytes of `dst`.
pub(crate) fn encode_unit(dst: &mut [u8], phy_offset: i64, size: i32, tags_code: i64) {
    dst[0..8].copy_from_slice(&phy_offset.to_be_bytes());
    dst[8..12].copy_from_slice(&size.to_be_bytes());
    dst[12..20].copy_from_slice(&tags_code.to_be_bytes());
}

/// The end of the run of whole units (`offset >= 0 && size > 0`) in `data` starting at byte
/// `pos`: the position of the first unit that is not whole, or of the last 0..19 bytes that
/// cannot hold a unit. `pos` itself when there is none (also for `pos` past the end).
pub(crate) fn whole_units_end(data: &[u8], mut pos: usize) -> usize {
    while pos + 20 <= data.len() {
        let u = CqUnit::decode(0, &data[pos..pos + 20]);
        if u.phy_offset >= 0 && u.size > 0 {
            pos += 20;
        } else {
            break;
        }
    }
    pos
}
