//! SYSFLAG bits of a commitlog record (RocketMQ's `MessageSysFlag`).

pub const COMPRESSED: i32 = 0x1;
pub const MULTI_TAGS: i32 = 0x2;
pub const TRANSACTION_NOT_TYPE: i32 = 0x0;
pub const TRANSACTION_PREPARED_TYPE: i32 = 0x4;
pub const TRANSACTION_COMMIT_TYPE: i32 = 0x8;
pub const TRANSACTION_ROLLBACK_TYPE: i32 = 0xC;
pub const BORNHOST_V6: i32 = 0x10;
pub const STOREHOSTADDRESS_V6: i32 = 0x20;
pub const NEED_UNWRAP: i32 = 0x40;
pub const INNER_BATCH: i32 = 0x80;

/// `getTransactionValue`.
pub fn transaction_value(flag: i32) -> i32 {
    flag & TRANSACTION_ROLLBACK_TYPE
}
