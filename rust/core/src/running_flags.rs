//! The store's running flags, as RocketMQ's `RunningFlags`: one word of bits saying what the
//! store may not do now. A put is admitted only while none of the bits that stop writes is set
//! (`isWriteable`); it answers SERVICE_NOT_AVAILABLE otherwise.
//!
//! Who sets what here: DISK_FULL follows the commitlog's file system and LOGIC_DISK_FULL the
//! consume queues' (above `disk_space_warning_level_ratio`, re-read every second, at each new
//! segment and by the cleaner); a read-only store holds NOT_WRITEABLE; any bit but NOT_READABLE
//! may be set or cleared by the operator (`MessageStore::set_running_flags`).

use std::sync::atomic::{AtomicI32, Ordering};

/// `NOT_READABLE_BIT`.
pub const NOT_READABLE: i32 = 1;
/// `NOT_WRITEABLE_BIT`.
pub const NOT_WRITEABLE: i32 = 1 << 1;
/// `WRITE_LOGICS_QUEUE_ERROR_BIT`.
pub const WRITE_LOGICS_QUEUE_ERROR: i32 = 1 << 2;
/// `WRITE_INDEX_FILE_ERROR_BIT`.
pub const WRITE_INDEX_FILE_ERROR: i32 = 1 << 3;
/// `DISK_FULL_BIT`: the commitlog's disk is above the warning level.
pub const DISK_FULL: i32 = 1 << 4;
/// `FENCED_BIT`.
pub const FENCED: i32 = 1 << 5;
/// `LOGIC_DISK_FULL_BIT`: the consume queues' disk is above the warning level.
pub const LOGIC_DISK_FULL: i32 = 1 << 6;

/// Every bit RocketMQ defines.
pub const ALL: i32 = NOT_READABLE
    | NOT_WRITEABLE
    | WRITE_LOGICS_QUEUE_ERROR
    | WRITE_INDEX_FILE_ERROR
    | DISK_FULL
    | FENCED
    | LOGIC_DISK_FULL;

/// The bits any of which refuses puts (`RunningFlags.isWriteable`).
pub const NOT_WRITEABLE_MASK: i32 = NOT_WRITEABLE
    | WRITE_LOGICS_QUEUE_ERROR
    | DISK_FULL
    | WRITE_INDEX_FILE_ERROR
    | FENCED
    | LOGIC_DISK_FULL;

/// The names of the bits, lowest first.
pub const NAMES: [(i32, &str); 7] = [
    (NOT_READABLE, "NOT_READABLE"),
    (NOT_WRITEABLE, "NOT_WRITEABLE"),
    (WRITE_LOGICS_QUEUE_ERROR, "WRITE_LOGICS_QUEUE_ERROR"),
    (WRITE_INDEX_FILE_ERROR, "WRITE_INDEX_FILE_ERROR"),
    (DISK_FULL, "DISK_FULL"),
    (FENCED, "FENCED"),
    (LOGIC_DISK_FULL, "LOGIC_DISK_FULL"),
];

/// `a|b` names of `bits` (`"0"` for none), for messages and logs.
pub fn describe(bits: i32) -> String {
    let names: Vec<&str> = NAMES
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| *name)
        .collect();
    if names.is_empty() {
        "0".to_owned()
    } else {
        names.join("|")
    }
}

/// The flag word; every change is one atomic read-modify-write.
#[derive(Debug, Default)]
pub struct RunningFlags {
    bits: AtomicI32,
}

impl RunningFlags {
    pub fn new(bits: i32) -> RunningFlags {
        RunningFlags {
            bits: AtomicI32::new(bits & ALL),
        }
    }

    /// `getFlagBits`.
    pub fn bits(&self) -> i32 {
        self.bits.load(Ordering::Acquire)
    }

    /// `isWriteable`: no bit that stops writes is set.
    pub fn is_writeable(&self) -> bool {
        self.bits() & NOT_WRITEABLE_MASK == 0
    }

    /// Sets (`on`) or clears `bits`; returns the bits before.
    pub fn set(&self, bits: i32, on: bool) -> i32 {
        if on {
            self.bits.fetch_or(bits & ALL, Ordering::AcqRel)
        } else {
            self.bits.fetch_and(!(bits & ALL), Ordering::AcqRel)
        }
    }

    /// Sets or clears one bit; returns whether it changed (`getAndMakeDiskFull` and
    /// `getAndMakeDiskOK` in one).
    pub fn make(&self, bit: i32, on: bool) -> bool {
        let before = self.set(bit, on);
        (before & bit != 0) != on
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_rocketmqs() {
        assert_eq!(
            [
                NOT_READABLE,
                NOT_WRITEABLE,
                WRITE_LOGICS_QUEUE_ERROR,
                WRITE_INDEX_FILE_ERROR,
                DISK_FULL,
                FENCED,
                LOGIC_DISK_FULL
            ],
            [1, 2, 4, 8, 16, 32, 64]
        );
        assert_eq!(ALL, 127);
        assert_eq!(NOT_WRITEABLE_MASK, 126);
    }

    #[test]
    fn writeable_unless_a_write_bit_is_set() {
        let f = RunningFlags::default();
        assert!(f.is_writeable());
        // NOT_READABLE alone does not stop writes (RocketMQ's isWriteable ignores it).
        f.set(NOT_READABLE, true);
        assert!(f.is_writeable());
        for (bit, _) in NAMES.iter().skip(1) {
            assert!(f.make(*bit, true));
            assert!(!f.is_writeable(), "{}", describe(*bit));
            assert!(!f.make(*bit, true));
            assert!(f.make(*bit, false));
            assert!(!f.make(*bit, false));
            assert!(f.is_writeable());
        }
        assert_eq!(f.bits(), NOT_READABLE);
        assert_eq!(f.set(0x1000 | DISK_FULL, true), NOT_READABLE);
        assert_eq!(f.bits(), NOT_READABLE | DISK_FULL);
        assert_eq!(describe(f.bits()), "NOT_READABLE|DISK_FULL");
        assert_eq!(describe(0), "0");
    }
}
