//! The layout of the `checkpoint` file (RocketMQ's `StoreCheckpoint`, STORE_SPEC §5.1): 4 KiB,
//! of which the first 40 bytes are five big-endian longs: physicMsgTimestamp,
//! logicsMsgTimestamp, indexMsgTimestamp, masterFlushedOffset and confirmPhyOffset. The rest of
//! the page is unused. Opening and writing the file is `crate::file::checkpoint`'s.

use super::bytes::be_i64;

/// Size of the checkpoint file (`OS_PAGE_SIZE`).
pub(crate) const CHECKPOINT_FILE_SIZE: u64 = 4096;

/// Bytes of the five fields at the start of the file.
pub(crate) const CHECKPOINT_FIELDS_LEN: usize = 40;

/// The five fields of a checkpoint, in file order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CheckpointFields {
    pub physic_msg_timestamp: i64,
    pub logics_msg_timestamp: i64,
    pub index_msg_timestamp: i64,
    pub master_flushed_offset: i64,
    pub confirm_phy_offset: i64,
}

impl CheckpointFields {
    /// Reads the fields from the first 40 bytes of the file.
    pub(crate) fn decode(buf: &[u8; CHECKPOINT_FIELDS_LEN]) -> CheckpointFields {
        let field = |i: usize| be_i64(buf, i * 8);
        CheckpointFields {
            physic_msg_timestamp: field(0),
            logics_msg_timestamp: field(1),
            index_msg_timestamp: field(2),
            master_flushed_offset: field(3),
            confirm_phy_offset: field(4),
        }
    }

    /// The first 40 bytes of the file holding these fields.
    pub(crate) fn encode(&self) -> [u8; CHECKPOINT_FIELDS_LEN] {
        let mut buf = [0u8; CHECKPOINT_FIELDS_LEN];
        for (i, v) in [
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        ]
        .into_iter()
        .enumerate()
        {
            buf[i * 8..i * 8 + 8].copy_from_slice(&v.to_be_bytes());
        }
        buf
    }
}
