"""The exceptions rmqstore raises: one tree rooted at :class:`RmqStoreError`.

Each class also derives from the standard exception that fits, so code that already catches
``OSError`` or ``ValueError`` keeps working. Bad *message content* is never an exception: puts
answer it with a :class:`rmqstore.PutMessageStatus`, as RocketMQ does.
"""

from __future__ import annotations

__all__ = [
    "ArgumentOverflowError",
    "ArgumentTypeError",
    "CorruptRecordError",
    "InvalidArgumentError",
    "RmqStoreError",
    "StoreClosedError",
    "StoreConfigError",
    "StoreCorruptedError",
    "StoreIOError",
    "StoreLockedError",
    "StoreReadOnlyError",
    "StoreResourceError",
    "TransactionEndedError",
    "TransactionNotFoundError",
    "UnknownSettingError",
]


class RmqStoreError(Exception):
    """Base class of every rmqstore error."""


class StoreIOError(RmqStoreError, OSError):
    """An operating-system I/O failure on a store file (``errno`` and ``filename`` are set)."""


class StoreLockedError(RmqStoreError, OSError):
    """The store folder is already open, in this process or another one (a RocketMQ broker too).

    ``path`` is the store folder.
    """

    path: str


class StoreCorruptedError(RmqStoreError, ValueError):
    """The store folder holds files that the store does not expect or cannot trust.

    ``path`` names the file. Nothing was changed.
    """

    path: str


class CorruptRecordError(StoreCorruptedError):
    """A message record read from a commitlog segment is damaged: its body CRC does not match
    (reads check it unless ``check_crc_on_read=False``), it is not the message a consume queue
    or index entry points at, or its compressed body cannot be decompressed.

    ``path`` names the segment file and ``offset`` the record's commitlog offset; the message
    also names the queue and queue offset where the read came through a queue. Nothing was
    changed.
    """

    offset: int


class StoreConfigError(RmqStoreError, ValueError):
    """A configuration value is out of range; ``setting`` names it."""

    def __init__(self, message: str, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class UnknownSettingError(StoreConfigError, TypeError):
    """A setting name the store does not have (a ``TypeError``, as for an unknown keyword);
    ``setting`` names the first one."""


class InvalidArgumentError(RmqStoreError, ValueError):
    """A call argument is not acceptable (for example an offset that is not a record start)."""


class ArgumentOverflowError(InvalidArgumentError, OverflowError):
    """An integer argument is outside the range the call takes (an ``OverflowError`` too); the
    message names the argument."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument has a type the call does not take (a ``TypeError`` too); the message names
    the argument."""


class StoreClosedError(RmqStoreError, ValueError):
    """The store has been closed, or this process forked from the one that opened it (a forked
    child never uses its parent's store)."""


class StoreResourceError(RmqStoreError, RuntimeError):
    """The process ran out of something the store needs (a thread that cannot start, memory).
    Raised by an open that failed for it; everything the store held was released, the folder
    included."""


class StoreReadOnlyError(RmqStoreError, PermissionError):
    """The store was opened with ``read_only=True`` and the call would change it (a put, a
    flush, a truncation, a consumer offset commit)."""


class TransactionNotFoundError(RmqStoreError, LookupError):
    """:meth:`rmqstore.MessageStore.end_transaction` was given a commitlog offset where no half
    message (a prepared transaction, in ``RMQ_SYS_TRANS_HALF_TOPIC``) starts, or a transaction
    id the store does not know. Nothing was written."""


class TransactionEndedError(RmqStoreError, ValueError):
    """The transaction was committed or rolled back already (by an earlier
    :meth:`~rmqstore.MessageStore.end_transaction`, by the check service, before a restart, or
    by a RocketMQ broker on the same files). Nothing was written: a committed transaction
    never gets a second real message."""


def unwritable_error(
    what: str, *, forked: bool, read_only: bool, why: str = ""
) -> RmqStoreError | None:
    """The error for ``what`` on a store this process cannot write, or None when it can: a
    store opened by the process this one forked from (:class:`StoreClosedError`), or one open
    read-only (:class:`StoreReadOnlyError`, ``why`` saying what the call would write)."""
    if forked:
        return StoreClosedError(
            f"{what}: the store was opened by the process this one forked from; a forked child "
            "cannot use it"
        )
    if read_only:
        return StoreReadOnlyError(
            f"the store is open read-only: {what} needs a store opened for writing"
            + (f" ({why})" if why else "")
        )
    return None
