//! The store's running flags and disk ratios (RocketMQ's `RunningFlags` and the disk checks of
//! `DefaultMessageStore.CleanCommitLogService`): what the cleaner and operators read and set.

use crate::error::{Result, StoreError};
use crate::running_flags::{self, ALL, NOT_READABLE};

use super::MessageStore;

impl MessageStore {
    /// The running flags' bits now (`getRunningFlags().getFlagBits()`); see
    /// [`crate::running_flags`].
    pub fn running_flags(&self) -> Result<i32> {
        self.with_open(|o| o.commitlog.flags().bits())
    }

    /// Re-reads how full the commitlog's file system and the consume queues' file system are,
    /// sets or clears DISK_FULL and LOGIC_DISK_FULL (above `disk_space_warning_level_ratio`),
    /// and returns both used fractions (commitlog, consume queues), 0.0 to 1.0.
    pub fn disk_ratios(&self) -> Result<(f64, f64)> {
        let cq_dir = self.root.join("consumequeue");
        self.with_open(|o| {
            let physic = o.commitlog.refresh_disk_full()?;
            let logics = o.commitlog.refresh_logic_disk_full(&cq_dir)?;
            Ok((physic, logics))
        })?
    }

    /// Sets (`on`) or clears the running flag `bits`; returns the bits after. Any bit but
    /// NOT_READABLE (reads do not consult the flags) may be given; DISK_FULL and LOGIC_DISK_FULL
    /// follow the disks again at the next check (every second). A read-only store refuses.
    pub fn set_running_flags(&self, bits: i32, on: bool) -> Result<i32> {
        self.writable("set_running_flags")?;
        if bits & !ALL != 0 {
            return Err(StoreError::InvalidArgument(format!(
                "running flag bits {bits:#x} are not RocketMQ's: the bits are 1 (NOT_READABLE) to \
                 64 (LOGIC_DISK_FULL), {ALL:#x} in all"
            )));
        }
        if bits & NOT_READABLE != 0 {
            return Err(StoreError::InvalidArgument(
                "NOT_READABLE cannot be set or cleared: reads do not consult the running flags \
                 (only puts do)"
                    .to_owned(),
            ));
        }
        self.with_open(|o| {
            let flags = o.commitlog.flags();
            let before = flags.set(bits, on);
            let after = flags.bits();
            if before != after {
                log::warn!(
                    target: "rmqstore.disk",
                    "running flags {} by request: {} -> {}",
                    if on { "set" } else { "cleared" },
                    running_flags::describe(before),
                    running_flags::describe(after)
                );
            }
            after
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::running_flags::{DISK_FULL, FENCED, LOGIC_DISK_FULL, NOT_WRITEABLE};
    use crate::{Message, MessageStore, PutMessageStatus, StoreConfig, StoreError};

    fn put(store: &MessageStore) -> PutMessageStatus {
        let msg = Message {
            topic: "TopicA".into(),
            body: b"body".to_vec(),
            ..Message::default()
        };
        store.put_message(&msg).unwrap().status
    }

    #[test]
    fn puts_refused_while_a_write_flag_is_set() {
        let d = std::env::temp_dir().join(format!("rmqstore-flags-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let config = StoreConfig {
            mapped_file_size_commit_log: 4096,
            ..StoreConfig::default()
        };
        let store = MessageStore::open(&d, config).unwrap();
        let (physic, logics) = store.disk_ratios().unwrap();
        if physic > 0.9 || logics > 0.9 {
            // The machine's own disk is above the warning level: puts cannot succeed here.
            eprintln!("skipped: the temporary folder's disk is more than 90 % used");
            store.close().unwrap();
            let _ = std::fs::remove_dir_all(&d);
            return;
        }
        assert_eq!(store.running_flags().unwrap(), 0);
        assert_eq!(put(&store), PutMessageStatus::PutOk);
        for bit in [NOT_WRITEABLE, DISK_FULL, FENCED, LOGIC_DISK_FULL] {
            assert_eq!(store.set_running_flags(bit, true).unwrap(), bit);
            assert_eq!(put(&store), PutMessageStatus::ServiceNotAvailable);
            assert_eq!(store.set_running_flags(bit, false).unwrap(), 0);
            assert_eq!(put(&store), PutMessageStatus::PutOk);
        }
        for bad in [1, 128, -1] {
            assert!(matches!(
                store.set_running_flags(bad, true),
                Err(StoreError::InvalidArgument(_))
            ));
        }
        assert_eq!(store.running_flags().unwrap(), 0);
        // The disk is below 90 % (checked above): the check clears a DISK_FULL set by hand.
        store.set_running_flags(DISK_FULL, true).unwrap();
        let (physic, logics) = store.disk_ratios().unwrap();
        assert!((0.0..=1.0).contains(&physic) && (0.0..=1.0).contains(&logics));
        if physic <= 0.9 && logics <= 0.9 {
            assert_eq!(store.running_flags().unwrap(), 0);
        }
        store.close().unwrap();
        assert!(matches!(store.running_flags(), Err(StoreError::Closed)));
        let ro = MessageStore::open_read_only(
            &d,
            StoreConfig {
                mapped_file_size_commit_log: 4096,
                ..StoreConfig::default()
            },
        )
        .unwrap();
        assert_eq!(ro.running_flags().unwrap(), NOT_WRITEABLE);
        assert!(matches!(
            ro.set_running_flags(NOT_WRITEABLE, false),
            Err(StoreError::ReadOnly(_))
        ));
        drop(ro);
        let _ = std::fs::remove_dir_all(&d);
    }
}
