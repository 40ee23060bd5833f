"""Status enums, named exactly as Apache RocketMQ's."""

from __future__ import annotations

import enum

__all__ = [
    "FlushDiskType",
    "GetMessageStatus",
    "PutMessageStatus",
    "RunningFlags",
    "StoreState",
    "TransactionState",
]


class PutMessageStatus(enum.Enum):
    """What a put answered (``org.apache.rocketmq.store.PutMessageStatus``, 5.x)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    PUT_TO_REMOTE_BROKER_FAIL = "PUT_TO_REMOTE_BROKER_FAIL"
    LMQ_CONSUME_QUEUE_NUM_EXCEEDED = "LMQ_CONSUME_QUEUE_NUM_EXCEEDED"
    WHEEL_TIMER_FLOW_CONTROL = "WHEEL_TIMER_FLOW_CONTROL"
    WHEEL_TIMER_MSG_ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"
    WHEEL_TIMER_NOT_ENABLE = "WHEEL_TIMER_NOT_ENABLE"


class GetMessageStatus(enum.Enum):
    """What a read answered (``org.apache.rocketmq.store.GetMessageStatus``)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_RESET = "OFFSET_RESET"


class FlushDiskType(enum.Enum):
    """``flushDiskType``: when an append counts as durable."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class StoreState(enum.Enum):
    """The store's lifecycle (``MessageStoreStateMachine``); states only move forward. The value
    is RocketMQ's number."""

    INIT = 0
    LOAD_BEGIN = 10
    LOAD_COMMITLOG_OK = 11
    LOAD_CONSUME_QUEUE_OK = 12
    LOAD_COMPACTION_OK = 13
    LOAD_INDEX_OK = 14
    RECOVER_BEGIN = 20
    RECOVER_CONSUME_QUEUE_OK = 21
    RECOVER_COMMITLOG_OK = 22
    RECOVER_TOPIC_QUEUE_TABLE_OK = 23
    RUNNING = 30
    SHUTDOWN_BEGIN = 40
    SHUTDOWN_OK = 41


class TransactionState(enum.Enum):
    """The state of a local transaction, as a transaction checker answers it (RocketMQ's
    ``LocalTransactionState``: ``COMMIT_MESSAGE``, ``ROLLBACK_MESSAGE``, ``UNKNOW``)."""

    #: Deliver the message: it is put into its real topic and queue.
    COMMIT = "COMMIT"
    #: Drop the message: only the op message marking the half resolved is written.
    ROLLBACK = "ROLLBACK"
    #: Not decided yet: the half stays pending and is checked again in a later round.
    UNKNOWN = "UNKNOWN"


class RunningFlags(enum.IntFlag):
    """The store's running flags (``org.apache.rocketmq.store.RunningFlags``), as
    :attr:`rmqstore.MessageStore.running_flags` gives them: a put answers SERVICE_NOT_AVAILABLE
    while any flag but NOT_READABLE is set. DISK_FULL follows the commitlog's disk and
    LOGIC_DISK_FULL the consume queues' disk (above ``disk_space_warning_level_ratio``); a
    read-only store has NOT_WRITEABLE."""

    NOT_READABLE = 1
    NOT_WRITEABLE = 1 << 1
    WRITE_LOGICS_QUEUE_ERROR = 1 << 2
    WRITE_INDEX_FILE_ERROR = 1 << 3
    DISK_FULL = 1 << 4
    FENCED = 1 << 5
    LOGIC_DISK_FULL = 1 << 6

    @property
    def writeable(self) -> bool:
        """No flag that stops puts is set (RocketMQ's ``isWriteable``)."""
        return not self & ~RunningFlags.NOT_READABLE
