//! The store's lifecycle states and the forward-only machine that holds the current one.

use std::sync::atomic::Ordering;

use crate::error::{Result, StoreError};

/// The store's lifecycle (`MessageStoreStateMachine`, docs/architecture.md#lifecycle-states):
/// states only move forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum StoreState {
    Init = 0,
    LoadBegin = 10,
    LoadCommitlogOk = 11,
    LoadConsumeQueueOk = 12,
    LoadCompactionOk = 13,
    LoadIndexOk = 14,
    RecoverBegin = 20,
    RecoverConsumeQueueOk = 21,
    RecoverCommitlogOk = 22,
    RecoverTopicQueueTableOk = 23,
    Running = 30,
    ShutdownBegin = 40,
    ShutdownOk = 41,
}

impl StoreState {
    pub(crate) const ALL: [StoreState; 13] = [
        StoreState::Init,
        StoreState::LoadBegin,
        StoreState::LoadCommitlogOk,
        StoreState::LoadConsumeQueueOk,
        StoreState::LoadCompactionOk,
        StoreState::LoadIndexOk,
        StoreState::RecoverBegin,
        StoreState::RecoverConsumeQueueOk,
        StoreState::RecoverCommitlogOk,
        StoreState::RecoverTopicQueueTableOk,
        StoreState::Running,
        StoreState::ShutdownBegin,
        StoreState::ShutdownOk,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StoreState::Init => "INIT",
            StoreState::LoadBegin => "LOAD_BEGIN",
            StoreState::LoadCommitlogOk => "LOAD_COMMITLOG_OK",
            StoreState::LoadConsumeQueueOk => "LOAD_CONSUME_QUEUE_OK",
            StoreState::LoadCompactionOk => "LOAD_COMPACTION_OK",
            StoreState::LoadIndexOk => "LOAD_INDEX_OK",
            StoreState::RecoverBegin => "RECOVER_BEGIN",
            StoreState::RecoverConsumeQueueOk => "RECOVER_CONSUME_QUEUE_OK",
            StoreState::RecoverCommitlogOk => "RECOVER_COMMITLOG_OK",
            StoreState::RecoverTopicQueueTableOk => "RECOVER_TOPIC_QUEUE_TABLE_OK",
            StoreState::Running => "RUNNING",
            StoreState::ShutdownBegin => "SHUTDOWN_BEGIN",
            StoreState::ShutdownOk => "SHUTDOWN_OK",
        }
    }

    /// RocketMQ's numeric state value.
    pub fn value(self) -> u8 {
        self as u8
    }
}

/// Forward-only state holder.
#[derive(Debug)]
pub(crate) struct StateMachine {
    state: std::sync::atomic::AtomicU8,
}

impl Default for StateMachine {
    fn default() -> Self {
        StateMachine {
            state: std::sync::atomic::AtomicU8::new(StoreState::Init as u8),
        }
    }
}

impl StateMachine {
    pub(crate) fn get(&self) -> StoreState {
        let v = self.state.load(Ordering::Acquire);
        StoreState::ALL
            .iter()
            .copied()
            .find(|s| *s as u8 == v)
            .unwrap_or(StoreState::Init)
    }

    /// Moves to `to`; a transition backwards (or to the same state) is refused and leaves the
    /// state as it was.
    pub(crate) fn transit(&self, to: StoreState) -> Result<()> {
        let from = self.get();
        if to <= from {
            return Err(StoreError::InvalidArgument(format!(
                "store state cannot go from {} back to {}",
                from.name(),
                to.name()
            )));
        }
        self.state.store(to as u8, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod state_tests {
    use super::*;

    #[test]
    fn forward_only() {
        let m = StateMachine::default();
        assert_eq!(m.get(), StoreState::Init);
        m.transit(StoreState::LoadBegin).unwrap();
        m.transit(StoreState::Running).unwrap();
        assert!(m.transit(StoreState::LoadBegin).is_err());
        assert_eq!(
            m.get(),
            StoreState::Running,
            "a failed transition keeps the state"
        );
        assert!(m.transit(StoreState::Running).is_err());
        m.transit(StoreState::ShutdownOk).unwrap();
        assert_eq!(m.get().name(), "SHUTDOWN_OK");
        assert_eq!(m.get().value(), 41);
    }
}
