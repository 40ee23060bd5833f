//! Put hooks (RocketMQ's `PutMessageHook`): checks and rewrites run on every put before the
//! message is appended, in the order they were added. `DefaultMessageStore` runs its
//! `putMessageHookList` before `CommitLog.asyncPutMessage`; RocketMQ 5.x uses it to turn a
//! delay-level or timer message into one for the schedule or timer topic and to check
//! transaction half messages. A store has no hooks unless one is added, and then a put costs
//! nothing more than a check that the list is empty.

use crate::commitlog::Batch;
use crate::format::message::{HostAddr, Message, PutMessageStatus};

/// A check or rewrite run before each put is appended (`PutMessageHook`).
pub trait PutMessageHook: Send + Sync {
    /// The hook's name (`hookName`), for logs.
    fn name(&self) -> &str;

    /// Runs before `msg` is appended and may change any of it (topic, queue id, properties,
    /// flags). `Err(status)` refuses the put: nothing is appended, the later hooks do not run
    /// and the put returns that status (`executeBeforePutMessage` returning a result).
    fn before_put(&self, msg: &mut Message) -> Result<(), PutMessageStatus>;

    /// The same for a batch put ([`MessageStore::put_messages`](super::MessageStore::put_messages)),
    /// which sees the fields all messages of the batch share. By default a batch passes
    /// unchanged (RocketMQ's schedule and timer hooks handle single messages only).
    fn before_put_batch(&self, batch: &mut PutBatch<'_>) -> Result<(), PutMessageStatus> {
        let _ = batch;
        Ok(())
    }
}

/// A batch put as a hook sees it: the shared fields, owned so that a hook can change them, and
/// the bodies, which it can only read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutBatch<'a> {
    pub topic: String,
    pub queue_id: i32,
    pub properties: Vec<(String, String)>,
    pub flag: i32,
    pub born_timestamp: i64,
    pub born_host: Option<HostAddr>,
    pub bodies: &'a [&'a [u8]],
}

impl<'a> PutBatch<'a> {
    pub(super) fn from_batch(batch: &Batch<'a>) -> PutBatch<'a> {
        PutBatch {
            topic: batch.topic.to_owned(),
            queue_id: batch.queue_id,
            properties: batch.properties.to_vec(),
            flag: batch.flag,
            born_timestamp: batch.born_timestamp,
            born_host: batch.born_host,
            bodies: batch.bodies,
        }
    }

    /// The batch to append, borrowing this one's fields.
    pub(super) fn as_batch(&self) -> Batch<'_> {
        Batch {
            topic: &self.topic,
            queue_id: self.queue_id,
            bodies: self.bodies,
            properties: &self.properties,
            flag: self.flag,
            born_timestamp: self.born_timestamp,
            born_host: self.born_host,
        }
    }
}

/// Runs `hooks` in order on a message or batch; the first refusal's status, if any.
pub(super) fn run<T: ?Sized>(
    hooks: &[Box<dyn PutMessageHook>],
    target: &mut T,
    each: impl Fn(&dyn PutMessageHook, &mut T) -> Result<(), PutMessageStatus>,
) -> Option<PutMessageStatus> {
    for hook in hooks {
        if let Err(status) = each(hook.as_ref(), target) {
            log::debug!(
                target: "rmqstore.store",
                "put hook {} refused a put: {}",
                hook.name(),
                status.name()
            );
            return Some(status);
        }
    }
    None
}
