//! The layout of the `checkpoint` file (RocketMQ's `StoreCheckpoint`, docs/format.md#checkpoint):
//! 4 KiB, of which the first 40 bytes are five big-endian longs: physicMsgTimestamp,
//! logicsMsgTimestamp, indexMsgTimestamp, masterFlushedOffset and confirmPhyOffset. The rest of the
//! page is unused. Opening and writing the file is `crate::file::checkpoint`'s.

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fields() -> impl Strategy<Value = CheckpointFields> {
        any::<[i64; 5]>().prop_map(|f| CheckpointFields {
            physic_msg_timestamp: f[0],
            logics_msg_timestamp: f[1],
            index_msg_timestamp: f[2],
            master_flushed_offset: f[3],
            confirm_phy_offset: f[4],
        })
    }

    /// A 4 KiB page: random bytes, or the page a checkpoint writes with bytes overwritten.
    fn page() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), CHECKPOINT_FILE_SIZE as usize),
            (
                fields(),
                proptest::collection::vec(
                    (0usize..CHECKPOINT_FILE_SIZE as usize, any::<u8>()),
                    0..8
                ),
            )
                .prop_map(|(f, writes)| {
                    let mut p = vec![0u8; CHECKPOINT_FILE_SIZE as usize];
                    p[..CHECKPOINT_FIELDS_LEN].copy_from_slice(&f.encode());
                    for (at, b) in writes {
                        p[at] = b;
                    }
                    p
                }),
        ]
    }

    #[test]
    fn fields_in_file_order() {
        let f = CheckpointFields {
            physic_msg_timestamp: 1,
            logics_msg_timestamp: 2,
            index_msg_timestamp: 3,
            master_flushed_offset: 4,
            confirm_phy_offset: -1,
        };
        let b = f.encode();
        assert_eq!(&b[0..8], &1i64.to_be_bytes());
        assert_eq!(&b[16..24], &3i64.to_be_bytes());
        assert_eq!(&b[32..40], &[0xFF; 8]);
        assert_eq!(CheckpointFields::decode(&b), f);
    }

    proptest! {
        /// Any page reads as the five longs at its start, whatever follows them, and writing
        /// those back gives the same 40 bytes.
        #[test]
        fn any_page_reads_as_its_first_forty_bytes(page in page(), tail in any::<u8>()) {
            let head: [u8; CHECKPOINT_FIELDS_LEN] = page[..CHECKPOINT_FIELDS_LEN].try_into().unwrap();
            let f = CheckpointFields::decode(&head);
            let longs: Vec<i64> = head
                .chunks_exact(8)
                .map(|c| i64::from_be_bytes(c.try_into().unwrap()))
                .collect();
            prop_assert_eq!(
                vec![
                    f.physic_msg_timestamp,
                    f.logics_msg_timestamp,
                    f.index_msg_timestamp,
                    f.master_flushed_offset,
                    f.confirm_phy_offset,
                ],
                longs
            );
            prop_assert_eq!(f.encode(), head);
            let mut other = page.clone();
            other[CHECKPOINT_FIELDS_LEN..].fill(tail);
            let other_head: [u8; CHECKPOINT_FIELDS_LEN] = other[..CHECKPOINT_FIELDS_LEN].try_into().unwrap();
            prop_assert_eq!(CheckpointFields::decode(&other_head), f);
        }

        /// Fields written come back.
        #[test]
        fn encode_then_decode_is_identity(f in fields()) {
            prop_assert_eq!(CheckpointFields::decode(&f.encode()), f);
        }
    }
}
