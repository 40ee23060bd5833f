//! The timer message files of RocketMQ 5.x (`S/timer/*`, docs/format.md#timer-files), as bytes:
//!
//! - `timerwheel`: a ring of `2 x 604800` slots of 32 bytes (`Slot`, `TimerWheel`): `long` slot
//!   time divided by the precision, `long` first and `long` last timer log position of the
//!   slot's chain, `int` number of messages, `int` magic (unused, kept). The file is exactly
//!   38,707,200 bytes whatever the precision (`TIMER_WHEEL_TTL_DAY x DAY_SECS` slots, twice).
//! - `timerlog/`: segments of 52-byte units (`TimerLog.UNIT_SIZE`): `int` size (52), `long`
//!   previous unit of the same slot (-1: none), `int` magic (`MAGIC_*` bits), `long` write time
//!   of the enqueue, `int` delay relative to it (ms), `long` commitlog offset and `int` size of the
//!   message, `int` Java hash of the real topic, `long` reserved (0). A unit that would leave less
//!   than 16 bytes at the end of a segment is preceded by a 16-byte filler: `int` bytes left,
//!   `long` 0, `int` `BLANK_MAGIC_CODE`.
//! - `config/timercheck` (`TimerCheckpoint`): a 4 KiB page whose first 56 bytes are seven
//!   longs: lastReadTimeMs, lastTimerLogFlushPos, lastTimerQueueOffset, masterTimerQueueOffset
//!   and the data version (stateVersion, timestamp, counter). Files of RocketMQ before the data
//!   version hold only the first four.
//!
//! Everything is big-endian. Nothing here does I/O.

use super::bytes::{be_i32, be_i64};

/// `TimerMessageStore.TIMER_WHEEL_TTL_DAY`.
pub const TIMER_WHEEL_TTL_DAY: i64 = 7;
/// `TimerMessageStore.DAY_SECS`.
pub const DAY_SECS: i64 = 24 * 3600;
/// Slots of the wheel, whatever the precision (`slotsTotal`); the ring holds twice as many.
pub const SLOTS_TOTAL: i64 = TIMER_WHEEL_TTL_DAY * DAY_SECS;
/// `Slot.SIZE`.
pub const SLOT_SIZE: i64 = 32;
/// Length of the `timerwheel` file (`slotsTotal * 2 * Slot.SIZE`), checked exactly at load.
pub const WHEEL_FILE_LEN: i64 = SLOTS_TOTAL * 2 * SLOT_SIZE;
/// `TimerMessageStore.TIMER_BLANK_SLOTS`: the roll window is at most `slotsTotal` minus these.
pub const TIMER_BLANK_SLOTS: i64 = 60;

/// Magic bit of every unit (`MAGIC_DEFAULT`).
pub const MAGIC_DEFAULT: i32 = 1;
/// The unit's slot only brings the message back to the timer topic (`MAGIC_ROLL`).
pub const MAGIC_ROLL: i32 = 1 << 1;
/// The unit is a delete marker (`MAGIC_DELETE`).
pub const MAGIC_DELETE: i32 = 1 << 2;

/// `TimerLog.UNIT_SIZE`.
pub const UNIT_SIZE: i64 = 52;
/// `TimerLog.MIN_BLANK_LEN`: the end-of-segment filler.
pub const MIN_BLANK_LEN: i64 = 16;
/// `TimerLog.UNIT_PRE_SIZE_FOR_MSG`: where the commitlog offset starts in a unit.
pub const UNIT_PRE_SIZE_FOR_MSG: i64 = 28;
/// `TimerLog.BLANK_MAGIC_CODE` (`0xBBCCDDEE ^ 1880681586 + 8`, Java's precedence: the sum
/// first).
pub const TIMER_LOG_BLANK_MAGIC: i32 = (0xBBCC_DDEE_u32 ^ (1_880_681_586_u32 + 8)) as i32;

/// Size of `config/timercheck` (the page `TimerCheckpoint` maps).
pub const TIMER_CHECK_FILE_SIZE: u64 = 4096;
/// Bytes of the seven fields at the start of `timercheck`.
pub const TIMER_CHECK_FIELDS_LEN: usize = 56;

/// `TimerMessageStore.isMagicOK`: no bit above the low four.
pub fn is_magic_ok(magic: i32) -> bool {
    (magic | 0xF) == 0xF
}

/// `needRoll`.
pub fn is_roll(magic: i32) -> bool {
    magic & MAGIC_ROLL != 0
}

/// `needDelete`.
pub fn is_delete(magic: i32) -> bool {
    magic & MAGIC_DELETE != 0
}

/// The ring index of the slot for `time_ms` (`TimerWheel.getSlotIndex`: `timeMs / precisionMs %
/// (slotsTotal * 2)`); `None` for a negative time or a precision that is not positive.
pub fn slot_index(time_ms: i64, precision_ms: i64) -> Option<i64> {
    if time_ms < 0 || precision_ms <= 0 {
        return None;
    }
    Some(time_ms / precision_ms % (SLOTS_TOTAL * 2))
}

/// One slot of the wheel as stored, with its time in ms (the file holds `time_ms /
/// precision_ms`; `TimerWheel.getRawSlot` multiplies it back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub time_ms: i64,
    pub first_pos: i64,
    pub last_pos: i64,
    pub num: i32,
    pub magic: i32,
}

impl Slot {
    /// The slot `getSlot` gives for a time no message was put at: `(-1, -1, -1)`.
    pub const BLANK: Slot = Slot {
        time_ms: -1,
        first_pos: -1,
        last_pos: -1,
        num: 0,
        magic: 0,
    };

    /// Whether this is [`Slot::BLANK`]'s "no slot" (`slot.timeMs == -1`).
    pub fn is_blank(&self) -> bool {
        self.time_ms == -1
    }

    /// Reads the 32 bytes of a slot (`getRawSlot`): the stored time times `precision_ms`
    /// (wrapping as Java's `long` does).
    pub fn decode(b: &[u8; 32], precision_ms: i64) -> Slot {
        Slot {
            time_ms: be_i64(b, 0).wrapping_mul(precision_ms),
            first_pos: be_i64(b, 8),
            last_pos: be_i64(b, 16),
            num: be_i32(b, 24),
            magic: be_i32(b, 28),
        }
    }

    /// The 32 bytes `putSlot(timeMs, firstPos, lastPos, num, magic)` writes (`precision_ms`
    /// must be positive).
    pub fn encode(&self, precision_ms: i64) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&(self.time_ms / precision_ms).to_be_bytes());
        b[8..16].copy_from_slice(&self.first_pos.to_be_bytes());
        b[16..24].copy_from_slice(&self.last_pos.to_be_bytes());
        b[24..28].copy_from_slice(&self.num.to_be_bytes());
        b[28..32].copy_from_slice(&self.magic.to_be_bytes());
        b
    }
}

/// One 52-byte unit of the timer log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerLogUnit {
    pub size: i32,
    pub prev_pos: i64,
    pub magic: i32,
    /// The enqueue's write time (`currWriteTimeMs`).
    pub curr_write_time_ms: i64,
    /// The slot time minus `curr_write_time_ms`.
    pub delay_time: i32,
    pub offset_py: i64,
    pub size_py: i32,
    /// Java `String.hashCode` of the real topic (0 without one).
    pub real_topic_hash: i32,
    pub reserved: i64,
}

impl TimerLogUnit {
    /// The slot time of the unit: `currWriteTimeMs + delayTime` (wrapping, as Java's `long`).
    pub fn delayed_time_ms(&self) -> i64 {
        self.curr_write_time_ms
            .wrapping_add(i64::from(self.delay_time))
    }

    /// Whether recovery takes the unit as one (`UNIT_SIZE == size && isMagicOK(magic)`).
    pub fn is_valid(&self) -> bool {
        i64::from(self.size) == UNIT_SIZE && is_magic_ok(self.magic)
    }

    /// Reads a unit from the first 52 bytes of `b`; `None` when `b` is shorter.
    pub fn decode(b: &[u8]) -> Option<TimerLogUnit> {
        if (b.len() as u64) < UNIT_SIZE as u64 {
            return None;
        }
        Some(TimerLogUnit {
            size: be_i32(b, 0),
            prev_pos: be_i64(b, 4),
            magic: be_i32(b, 12),
            curr_write_time_ms: be_i64(b, 16),
            delay_time: be_i32(b, 24),
            offset_py: be_i64(b, 28),
            size_py: be_i32(b, 36),
            real_topic_hash: be_i32(b, 40),
            reserved: be_i64(b, 44),
        })
    }

    /// The 52 bytes of the unit.
    pub fn encode(&self) -> [u8; UNIT_SIZE as usize] {
        let mut b = [0u8; UNIT_SIZE as usize];
        b[0..4].copy_from_slice(&self.size.to_be_bytes());
        b[4..12].copy_from_slice(&self.prev_pos.to_be_bytes());
        b[12..16].copy_from_slice(&self.magic.to_be_bytes());
        b[16..24].copy_from_slice(&self.curr_write_time_ms.to_be_bytes());
        b[24..28].copy_from_slice(&self.delay_time.to_be_bytes());
        b[28..36].copy_from_slice(&self.offset_py.to_be_bytes());
        b[36..40].copy_from_slice(&self.size_py.to_be_bytes());
        b[40..44].copy_from_slice(&self.real_topic_hash.to_be_bytes());
        b[44..52].copy_from_slice(&self.reserved.to_be_bytes());
        b
    }
}

/// The 16-byte end-of-segment filler: bytes left in the segment, a zero long, the blank magic.
pub fn encode_filler(bytes_left: i32) -> [u8; MIN_BLANK_LEN as usize] {
    let mut b = [0u8; MIN_BLANK_LEN as usize];
    b[0..4].copy_from_slice(&bytes_left.to_be_bytes());
    b[12..16].copy_from_slice(&TIMER_LOG_BLANK_MAGIC.to_be_bytes());
    b
}

/// Whether bytes at a unit position hold the filler (its magic at byte 12, as recovery and
/// dequeue look for it); `false` when fewer than 16 bytes.
pub fn is_filler(b: &[u8]) -> bool {
    (b.len() as u64) >= MIN_BLANK_LEN as u64 && be_i32(b, 12) == TIMER_LOG_BLANK_MAGIC
}

/// Whether a unit of `len` bytes fits in a segment of `file_size` bytes written up to `wrote`
/// without a filler first (`TimerLog.append`: `len + MIN_BLANK_LEN <= fileSize - wrote`).
pub fn unit_fits(len: i64, wrote: i64, file_size: i64) -> bool {
    len.checked_add(MIN_BLANK_LEN)
        .zip(file_size.checked_sub(wrote))
        .is_some_and(|(need, room)| need <= room)
}

/// `TimerLog.getOffsetForLastUnit`: the in-segment position of the last unit a full segment of
/// `file_size` bytes can hold (`None` for a segment too small for one unit and the filler).
pub fn offset_for_last_unit(file_size: i64) -> Option<i64> {
    if file_size < UNIT_SIZE + MIN_BLANK_LEN {
        return None;
    }
    Some(file_size - (file_size - MIN_BLANK_LEN) % UNIT_SIZE - MIN_BLANK_LEN - UNIT_SIZE)
}

/// The fields of `config/timercheck`, in file order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerCheckFields {
    pub last_read_time_ms: i64,
    pub last_timer_log_flush_pos: i64,
    pub last_timer_queue_offset: i64,
    pub master_timer_queue_offset: i64,
    /// `dataVersion.stateVersion`.
    pub state_version: i64,
    /// `dataVersion.timestamp`.
    pub timestamp: i64,
    /// `dataVersion.counter`.
    pub counter: i64,
}

impl TimerCheckFields {
    /// Reads the fields (`TimerCheckpoint.decode`): four longs, then the data version when the
    /// bytes hold it (56 bytes); `None` for fewer than 32 bytes.
    pub fn decode(b: &[u8]) -> Option<TimerCheckFields> {
        if b.len() < 32 {
            return None;
        }
        let mut f = TimerCheckFields {
            last_read_time_ms: be_i64(b, 0),
            last_timer_log_flush_pos: be_i64(b, 8),
            last_timer_queue_offset: be_i64(b, 16),
            master_timer_queue_offset: be_i64(b, 24),
            ..TimerCheckFields::default()
        };
        if b.len() >= TIMER_CHECK_FIELDS_LEN {
            f.state_version = be_i64(b, 32);
            f.timestamp = be_i64(b, 40);
            f.counter = be_i64(b, 48);
        }
        Some(f)
    }

    /// The 56 bytes `TimerCheckpoint.encode` (and `flush`) writes.
    pub fn encode(&self) -> [u8; TIMER_CHECK_FIELDS_LEN] {
        let mut b = [0u8; TIMER_CHECK_FIELDS_LEN];
        for (i, v) in [
            self.last_read_time_ms,
            self.last_timer_log_flush_pos,
            self.last_timer_queue_offset,
            self.master_timer_queue_offset,
            self.state_version,
            self.timestamp,
            self.counter,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_be_bytes());
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn constants_are_rocketmqs() {
        assert_eq!(SLOTS_TOTAL, 604_800);
        assert_eq!(WHEEL_FILE_LEN, 38_707_200);
        assert_eq!(UNIT_SIZE, 4 + 8 + 4 + 8 + 4 + 8 + 4 + 4 + 8);
        assert_eq!(TIMER_LOG_BLANK_MAGIC as u32, 0xCBD4_3194);
        assert_eq!((MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE), (1, 2, 4));
        // TimerLogTest: 1 KiB segments hold 19 units (988 bytes) before the filler.
        assert_eq!(offset_for_last_unit(1024), Some(936));
        assert_eq!(offset_for_last_unit(100 * 1024 * 1024), Some(104_857_532));
        assert_eq!(offset_for_last_unit(67), None);
        assert_eq!(offset_for_last_unit(68), Some(0));
    }

    #[test]
    fn slot_layout_and_index() {
        let s = Slot {
            time_ms: 1_700_000_000_100,
            first_pos: 52,
            last_pos: 104,
            num: 2,
            magic: 0,
        };
        let b = s.encode(100);
        assert_eq!(&b[0..8], &17_000_000_001i64.to_be_bytes());
        assert_eq!(&b[8..16], &52i64.to_be_bytes());
        assert_eq!(&b[24..28], &2i32.to_be_bytes());
        assert_eq!(Slot::decode(&b, 100), s);
        // At 1000 ms the stored value is the time in seconds (compatible with the first
        // timer versions).
        let b = Slot { time_ms: 5000, ..s }.encode(1000);
        assert_eq!(&b[0..8], &5i64.to_be_bytes());
        assert_eq!(slot_index(1_209_600_000, 1000), Some(0));
        assert_eq!(slot_index(1_209_601_999, 1000), Some(1));
        assert_eq!(slot_index(250, 100), Some(2));
        assert_eq!(slot_index(-1, 100), None);
        assert_eq!(slot_index(1, 0), None);
        assert!(Slot::BLANK.is_blank());
    }

    #[test]
    fn unit_and_filler_layout() {
        let u = TimerLogUnit {
            size: 52,
            prev_pos: -1,
            magic: MAGIC_DEFAULT | MAGIC_ROLL,
            curr_write_time_ms: 1000,
            delay_time: 500,
            offset_py: 0x0102_0304_0506_0708,
            size_py: 200,
            real_topic_hash: crate::util::java_hash("TopicA"),
            reserved: 0,
        };
        let b = u.encode();
        assert_eq!(&b[0..4], &52i32.to_be_bytes());
        assert_eq!(&b[4..12], &[0xFF; 8]);
        assert_eq!(&b[12..16], &3i32.to_be_bytes());
        assert_eq!(
            &b[UNIT_PRE_SIZE_FOR_MSG as usize..36],
            &0x0102_0304_0506_0708i64.to_be_bytes()
        );
        assert_eq!(TimerLogUnit::decode(&b), Some(u));
        assert_eq!(u.delayed_time_ms(), 1500);
        assert!(u.is_valid());
        assert!(TimerLogUnit::decode(&b[..51]).is_none());
        let f = encode_filler(40);
        assert_eq!(&f[0..4], &40i32.to_be_bytes());
        assert_eq!(&f[4..12], &[0; 8]);
        assert!(is_filler(&f));
        assert!(!is_filler(&b));
        assert!(!is_filler(&f[..15]));
        assert!(unit_fits(52, 1024 - 68, 1024));
        assert!(!unit_fits(52, 1024 - 67, 1024));
        assert!(!unit_fits(i64::MAX, 0, 1024));
        assert!(!unit_fits(52, i64::MIN, i64::MAX));
    }

    #[test]
    fn magic_checks() {
        assert!(is_magic_ok(0) && is_magic_ok(7) && is_magic_ok(15));
        assert!(!is_magic_ok(16) && !is_magic_ok(-1) && !is_magic_ok(TIMER_LOG_BLANK_MAGIC));
        assert!(is_roll(3) && !is_roll(5) && is_delete(5) && !is_delete(3));
    }

    #[test]
    fn checkpoint_old_and_new_formats() {
        let f = TimerCheckFields {
            last_read_time_ms: 1,
            last_timer_log_flush_pos: 2,
            last_timer_queue_offset: 3,
            master_timer_queue_offset: 4,
            state_version: 5,
            timestamp: 6,
            counter: 7,
        };
        let b = f.encode();
        assert_eq!(&b[48..56], &7i64.to_be_bytes());
        assert_eq!(TimerCheckFields::decode(&b), Some(f));
        // The 32-byte format of RocketMQ before the data version.
        let old = TimerCheckFields::decode(&b[..32]).unwrap();
        assert_eq!(
            old,
            TimerCheckFields {
                state_version: 0,
                timestamp: 0,
                counter: 0,
                ..f
            }
        );
        assert_eq!(TimerCheckFields::decode(&b[..31]), None);
    }

    fn unit() -> impl Strategy<Value = TimerLogUnit> {
        (
            any::<(i32, i64, i32, i64, i32)>(),
            any::<(i64, i32, i32, i64)>(),
        )
            .prop_map(|((size, prev, magic, cw, delay), (off, sz, hash, res))| {
                TimerLogUnit {
                    size,
                    prev_pos: prev,
                    magic,
                    curr_write_time_ms: cw,
                    delay_time: delay,
                    offset_py: off,
                    size_py: sz,
                    real_topic_hash: hash,
                    reserved: res,
                }
            })
    }

    proptest! {
        /// Units written come back, field by field.
        #[test]
        fn unit_round_trip(u in unit()) {
            prop_assert_eq!(TimerLogUnit::decode(&u.encode()), Some(u));
        }

        /// Any bytes decode without panicking; 52 or more give a unit that encodes back to
        /// its first 52 bytes, fewer give none; `delayed_time_ms` never overflows.
        #[test]
        fn hostile_unit_bytes(b in proptest::collection::vec(any::<u8>(), 0..120)) {
            match TimerLogUnit::decode(&b) {
                Some(u) => {
                    prop_assert!(b.len() >= 52);
                    prop_assert_eq!(&u.encode()[..], &b[..52]);
                    let _ = u.delayed_time_ms();
                    let _ = u.is_valid();
                }
                None => prop_assert!(b.len() < 52),
            }
            let _ = is_filler(&b);
        }

        /// Slots round trip for times that are multiples of the precision; any 32 bytes
        /// decode without panicking and re-encode to the same position fields.
        #[test]
        fn slot_round_trip(
            slot_no in 0i64..i64::MAX / 1000,
            p in prop_oneof![Just(100i64), Just(200), Just(500), Just(1000)],
            first in any::<i64>(), last in any::<i64>(), num in any::<i32>(), magic in any::<i32>(),
            raw in any::<[u8; 32]>(),
        ) {
            let s = Slot { time_ms: slot_no * p, first_pos: first, last_pos: last, num, magic };
            prop_assert_eq!(Slot::decode(&s.encode(p), p), s);
            let d = Slot::decode(&raw, p);
            prop_assert_eq!(&d.encode(p)[8..], &raw[8..]);
            let idx = slot_index(s.time_ms, p).unwrap();
            prop_assert!((0..SLOTS_TOTAL * 2).contains(&idx));
        }

        /// Checkpoint fields round trip, and any page decodes as its first 56 bytes.
        #[test]
        fn checkpoint_round_trip(v in any::<[i64; 7]>(), page in proptest::collection::vec(any::<u8>(), 0..200)) {
            let f = TimerCheckFields {
                last_read_time_ms: v[0],
                last_timer_log_flush_pos: v[1],
                last_timer_queue_offset: v[2],
                master_timer_queue_offset: v[3],
                state_version: v[4],
                timestamp: v[5],
                counter: v[6],
            };
            prop_assert_eq!(TimerCheckFields::decode(&f.encode()), Some(f));
            match TimerCheckFields::decode(&page) {
                Some(d) if page.len() >= 56 => prop_assert_eq!(&d.encode()[..], &page[..56]),
                Some(d) => prop_assert_eq!(&d.encode()[..32], &page[..32]),
                None => prop_assert!(page.len() < 32),
            }
        }

        /// A unit always fits right after the last unit position's start, never after it.
        #[test]
        fn last_unit_offset_is_the_last_fit(size in 68i64..1 << 20) {
            let last = offset_for_last_unit(size).unwrap();
            prop_assert!(unit_fits(UNIT_SIZE, last, size));
            prop_assert!(!unit_fits(UNIT_SIZE, last + UNIT_SIZE, size));
            prop_assert_eq!((last) % UNIT_SIZE, 0);
        }
    }
}
