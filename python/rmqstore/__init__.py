"""rmqstore: a durable, fast local message log in Apache RocketMQ's on-disk format.

Produce by topic and queue, read back by offset; the files are the ones a RocketMQ broker writes
and reads. The engine is Rust (``rmqstore._rmqstore``); this package orchestrates it.
"""

from __future__ import annotations

from ._clean import CleanReport
from ._rmqstore import GetMessageResult, Message, MessageExt, PutMessageResult, __version__
from ._schedule import ScheduleLevelStats
from ._transaction import EndTransactionResult, PendingTransaction, TransactionCheckReport
from .config import StoreConfig
from .enums import (
    FlushDiskType,
    GetMessageStatus,
    PutMessageStatus,
    RunningFlags,
    StoreState,
    TransactionState,
)
from .errors import (
    ArgumentOverflowError,
    ArgumentTypeError,
    CorruptRecordError,
    InvalidArgumentError,
    RmqStoreError,
    StoreClosedError,
    StoreConfigError,
    StoreCorruptedError,
    StoreIOError,
    StoreLockedError,
    StoreReadOnlyError,
    StoreResourceError,
    TransactionEndedError,
    TransactionNotFoundError,
    UnknownSettingError,
)
from .store import MessageStore

__all__ = [
    "ArgumentOverflowError",
    "ArgumentTypeError",
    "CleanReport",
    "CorruptRecordError",
    "EndTransactionResult",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "InvalidArgumentError",
    "Message",
    "MessageExt",
    "MessageStore",
    "PendingTransaction",
    "PutMessageResult",
    "PutMessageStatus",
    "RmqStoreError",
    "RunningFlags",
    "ScheduleLevelStats",
    "StoreClosedError",
    "StoreConfig",
    "StoreConfigError",
    "StoreCorruptedError",
    "StoreIOError",
    "StoreLockedError",
    "StoreReadOnlyError",
    "StoreResourceError",
    "StoreState",
    "TransactionCheckReport",
    "TransactionEndedError",
    "TransactionNotFoundError",
    "TransactionState",
    "UnknownSettingError",
    "__version__",
]
