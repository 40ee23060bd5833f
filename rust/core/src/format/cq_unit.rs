//! The consume queue unit (RocketMQ's `ConsumeQueue`, docs/format.md#consume-queues): 20 bytes,
//! big-endian, commitlog offset (i64), record size (i32), tags code (i64). A queue's segments are
//! arrays of these; the unit for queue offset `n` is at logical byte `n * 20`.

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A unit of the kinds a segment holds: whole, pre-blank, zeros (not yet written), torn or
    /// any bytes.
    fn unit() -> impl Strategy<Value = [u8; 20]> {
        let encoded = |(o, s, t): (i64, i32, i64)| {
            let mut b = [0u8; 20];
            encode_unit(&mut b, o, s, t);
            b
        };
        prop_oneof![
            (0i64..1 << 40, 1i32..1 << 20, any::<i64>()).prop_map(encoded),
            Just((0, i32::MAX, 0)).prop_map(encoded),
            Just([0u8; 20]),
            (
                any::<i64>(),
                prop_oneof![Just(0i32), Just(-1), any::<i32>()],
                any::<i64>()
            )
                .prop_map(encoded),
            any::<[u8; 20]>(),
        ]
    }

    /// Segment bytes: units, then 0..19 bytes that cannot hold one.
    fn segment() -> impl Strategy<Value = Vec<u8>> {
        (
            proptest::collection::vec(unit(), 0..12),
            proptest::collection::vec(any::<u8>(), 0..20),
        )
            .prop_map(|(units, tail)| {
                let mut v = units.concat();
                v.extend_from_slice(&tail);
                v
            })
    }

    fn whole(b: &[u8]) -> bool {
        let u = CqUnit::decode(0, b);
        u.phy_offset >= 0 && u.size > 0
    }

    proptest! {
        /// Decoding at any offset reads exactly the 20 bytes there, and encoding the unit
        /// gives them back.
        #[test]
        fn decode_at_any_offset_reads_the_bytes_there(
            buf in proptest::collection::vec(any::<u8>(), 20..120),
            at in any::<prop::sample::Index>(),
            queue_offset in any::<i64>(),
        ) {
            let at = at.index(buf.len() - 19);
            let b = &buf[at..];
            let u = CqUnit::decode(queue_offset, b);
            prop_assert_eq!(u.queue_offset, queue_offset);
            prop_assert_eq!(&u.phy_offset.to_be_bytes()[..], &b[..8]);
            prop_assert_eq!(&u.size.to_be_bytes()[..], &b[8..12]);
            prop_assert_eq!(&u.tags_code.to_be_bytes()[..], &b[12..20]);
            let mut again = [0u8; 20];
            encode_unit(&mut again, u.phy_offset, u.size, u.tags_code);
            prop_assert_eq!(&again[..], &b[..20]);
            prop_assert_eq!(
                u.is_pre_blank(),
                b[..20] == [0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0]
            );
        }

        /// Values written come back.
        #[test]
        fn encode_then_decode_is_identity(o in any::<i64>(), s in any::<i32>(), t in any::<i64>()) {
            let mut b = [0u8; 20];
            encode_unit(&mut b, o, s, t);
            let u = CqUnit::decode(9, &b);
            prop_assert_eq!((u.queue_offset, u.phy_offset, u.size, u.tags_code), (9, o, s, t));
        }

        /// The end of the whole units from any start, on segments of any content (bytes then
        /// overwritten anywhere): inside the segment, a whole number of units past the start,
        /// every unit before it whole, and no whole unit at it.
        #[test]
        fn whole_units_end_stays_inside_and_stops_at_the_first_gap(
            data in segment(),
            writes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            from in any::<prop::sample::Index>(),
            aligned in any::<bool>(),
        ) {
            let mut data = data;
            if !data.is_empty() {
                for (at, b) in &writes {
                    let i = at.index(data.len());
                    data[i] = *b;
                }
            }
            let mut pos = from.index(data.len() + 25);
            if aligned {
                pos -= pos % 20;
            }
            let end = whole_units_end(&data, pos);
            if pos > data.len() {
                prop_assert_eq!(end, pos);
                return Ok(());
            }
            prop_assert!(end >= pos && end <= data.len());
            prop_assert_eq!((end - pos) % 20, 0);
            for at in (pos..end).step_by(20) {
                prop_assert!(whole(&data[at..at + 20]));
            }
            prop_assert!(end + 20 > data.len() || !whole(&data[end..end + 20]));
        }
    }
}
