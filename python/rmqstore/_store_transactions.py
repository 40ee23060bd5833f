"""The transaction API of :class:`rmqstore.MessageStore` (a mixin of it): prepare and end
transactions, the checker, the check round, pending transactions, and the store's set-up and
close of the transaction services (``_transaction.py``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from ._rmqstore import Message, PutMessageResult
from ._services import ServiceThread
from ._transaction import (
    Checker,
    DiscardCallback,
    EndTransactionResult,
    PendingTransaction,
    TransactionalOpBatchService,
    TransactionCheckReport,
    TransactionCheckService,
    TransactionProgress,
)
from .errors import (
    ArgumentOverflowError,
    ArgumentTypeError,
    InvalidArgumentError,
    RmqStoreError,
    StoreClosedError,
    unwritable_error,
)

if TYPE_CHECKING:
    from ._rmqstore import Store
    from .config import StoreConfig
    from .offsets import ConsumerOffsetManager

__all__ = ["TransactionsMixin"]

log = logging.getLogger("rmqstore.store")

_MAX_LONG = 2**63 - 1


class TransactionsMixin:
    """Transactional messages on a :class:`rmqstore.MessageStore` (docs/architecture.md,
    "Transactional messages")."""

    # Set by MessageStore.
    _core: Store
    _path: Path
    _forked: bool
    _tx_check: TransactionCheckService | None
    _tx_ops: TransactionalOpBatchService | None

    def _load_transactions(
        self, cfg: StoreConfig, offsets: ConsumerOffsetManager
    ) -> list[ServiceThread]:
        """Hands the check's progress (``CID_RMQ_SYS_TRANS`` in ``consumerOffset.json``) to the
        core and builds the op batch and check services."""
        progress = TransactionProgress(self._core, offsets)
        progress.load()
        self._tx_ops = TransactionalOpBatchService.for_config(self._core, cfg)
        # The core takes the op size and interval an end_transaction writes by from the op
        # service's calls: give them now, before any transaction can end.
        self._tx_ops.configure_core()
        self._tx_check = TransactionCheckService(self._core, progress, self._tx_ops, cfg)
        # prepare_message and end_transaction only forward to the binding (which checks the
        # arguments and wakes the op service itself): calls go to it directly, without a
        # Python frame (as put_message). A subclass that overrides one keeps its own.
        cls = type(self)
        if cls.prepare_message is TransactionsMixin.prepare_message:
            self.__dict__["prepare_message"] = self._core.prepare_message
        if cls.end_transaction is TransactionsMixin.end_transaction:
            self.__dict__["end_transaction"] = self._core.end_transaction_result
        return [self._tx_ops, self._tx_check]

    def _close_transactions(self) -> None:
        """Writes the queued op entries (whatever their size) and saves the check's progress,
        once the services stopped and before the core closes. A failure is logged: closing
        goes on (a commit whose op was not written is found by the core's lookup and never
        written twice; a rollback's half is checked again)."""
        if self._tx_ops is not None:
            try:
                self._tx_ops.flush_all()
            except Exception:
                log.exception("%s: cannot write the queued transaction ops at close", self._path)
        if self._tx_check is not None:
            try:
                self._tx_check.progress.persist()
            except Exception:
                log.exception("%s: cannot save the transaction progress at close", self._path)

    def prepare_message(
        self, msg: Message, *, producer_group: str | None = None
    ) -> PutMessageResult:
        """Stores ``msg`` as the half message of a new transaction (RocketMQ 5.x's
        ``sendMessageInTransaction`` and ``parseHalfMessageInner``): in
        ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, its real topic and queue kept as ``REAL_TOPIC`` /
        ``REAL_QID``, ``TRAN_MSG=true``, ``PGROUP`` = ``producer_group`` (``"DEFAULT_PRODUCER"``
        when None, unless the message has ``PGROUP``), and its ``UNIQ_KEY`` (generated when it
        has none) as ``__transactionId__``. No consumer of the real topic sees it until
        :meth:`end_transaction` commits it.

        ``result.transaction_id`` is the transaction's id and ``result.wrote_offset`` the half's
        commitlog offset; either identifies it to :meth:`end_transaction`. Bad content is
        answered by ``result.status`` (a timer property: MESSAGE_ILLEGAL; ``DELAY`` is dropped,
        as RocketMQ's client drops it): nothing is stored, and the ``transaction_id`` the
        message was given names no transaction. A read-only store raises
        :class:`~rmqstore.errors.StoreReadOnlyError`. ``msg`` not a
        :class:`~rmqstore.Message` or ``producer_group`` not a str or None raise
        :class:`~rmqstore.errors.ArgumentTypeError`; an empty ``producer_group``
        :class:`~rmqstore.errors.InvalidArgumentError`.

        A writable store answers this with the binding's ``Store.prepare_message`` itself
        (bound when the store opens), which does exactly this.
        """
        if self._tx_ops is None:
            raise self._transactions_unavailable("prepare_message")
        return self._core.prepare_message(msg, producer_group=producer_group)

    def end_transaction(
        self, half_offset_or_transaction_id: int | str, commit: bool
    ) -> EndTransactionResult:
        """Commits (``commit=True``) or rolls back a prepared transaction, named by its half's
        commitlog offset (``wrote_offset`` of :meth:`prepare_message`, or ``half_offset`` of
        :meth:`pending_transactions`) or by its transaction id (RocketMQ's
        ``EndTransactionProcessor``).

        A commit puts the message into its real topic and queue (COMMIT type,
        ``preparedTransactionOffset`` = the half's offset) and queues the op entry marking the
        half resolved; a rollback queues only the op entry. Op entries are written in batches
        by the op batch service (``transaction_op_msg_max_size``,
        ``transaction_op_batch_interval``) and at close.

        Safe from any number of threads: a transaction is ended once.
        :class:`~rmqstore.errors.TransactionEndedError` when it was committed or rolled back
        already (here, by the check service, before a restart or by a RocketMQ broker on these
        files): nothing is written, and a committed transaction never gets a second real
        message. :class:`~rmqstore.errors.TransactionNotFoundError` when no half message
        starts at the offset or the id is unknown. A commit whose real put fails (a full disk)
        returns ``ended=False`` with the put's status in ``put_result``: the transaction stays
        pending. A ``bool``, a negative offset or an empty id raise
        :class:`~rmqstore.errors.ArgumentTypeError` /
        :class:`~rmqstore.errors.InvalidArgumentError` (an offset past 2**63 - 1:
        :class:`~rmqstore.errors.ArgumentOverflowError`); a ``commit`` that is not a bool
        :class:`~rmqstore.errors.ArgumentTypeError`.

        A writable store answers this with the binding's ``Store.end_transaction_result``
        itself (bound when the store opens), which does exactly this; with
        ``transaction_op_batch_interval`` = 0 it wakes the op batch service from the core.
        """
        if self._tx_ops is None:
            raise self._transactions_unavailable("end_transaction")
        return self._core.end_transaction_result(half_offset_or_transaction_id, commit)

    def set_transaction_checker(
        self, fn: Checker | None, *, on_discard: DiscardCallback | None = None
    ) -> None:
        """Sets the function the check service asks about pending transactions (RocketMQ's
        ``TransactionListener.checkLocalTransaction``); None removes it.

        ``fn(message) -> TransactionState`` gets the half message as the producer sent it
        (its real ``topic`` and ``queue_id``, ``__transactionId__`` in ``properties``) once it
        is ``transaction_timeout`` ms old, every ``transaction_check_interval`` ms until it
        says COMMIT or ROLLBACK. An exception, or an answer that is not a
        :class:`~rmqstore.TransactionState`, counts as UNKNOWN and is logged with the
        transaction id. After ``transaction_check_max`` checks the half moves to
        ``TRANS_CHECK_MAX_TIME_TOPIC`` (logged) and ``on_discard(message)`` is called (an
        exception in it is logged). Both are called from the check service's thread (or the
        caller of :meth:`check_transactions`) with no store lock held: they may call the
        store, ``end_transaction`` included. :meth:`close` waits for a call in progress.

        Without a checker no check round runs: pending halves are left alone and their number
        is logged. A read-only store raises :class:`~rmqstore.errors.StoreReadOnlyError`.
        """
        service = self._tx_check
        if service is None:
            raise self._transactions_unavailable("set_transaction_checker")
        if fn is not None and not callable(fn):
            raise ArgumentTypeError(f"fn must be callable or None, not {type(fn).__name__}")
        if on_discard is not None:
            if not callable(on_discard):
                raise ArgumentTypeError(
                    f"on_discard must be callable or None, not {type(on_discard).__name__}"
                )
            if fn is None:
                raise InvalidArgumentError(
                    "on_discard needs a checker: without one no half is checked or discarded"
                )
        if self._core.closed:
            raise StoreClosedError("set_transaction_checker: the store is closed")
        service.set_checker(fn, on_discard)

    def check_transactions(self) -> TransactionCheckReport:
        """Runs one full check round now, as the check service does every
        ``transaction_check_interval`` ms (waiting for a round in progress), and reports what
        it did. Halves younger than ``transaction_timeout`` ms, or stored after the round
        began, wait for a later round. Raises
        :class:`~rmqstore.errors.InvalidArgumentError` when no checker is set (see
        :meth:`set_transaction_checker`) and :class:`~rmqstore.errors.StoreReadOnlyError` on a
        read-only store."""
        service = self._tx_check
        if service is None:
            raise self._transactions_unavailable("check_transactions")
        if self._core.closed:
            raise StoreClosedError("check_transactions: the store is closed")
        return service.check_now()

    def pending_transactions(self, limit: int = 1000) -> list[PendingTransaction]:
        """Up to ``limit`` transactions neither committed nor rolled back, oldest half first,
        for operators: each with the offset :meth:`end_transaction` takes, its real topic
        and queue, producer group, times and how often it was checked. A read-only store
        raises :class:`~rmqstore.errors.StoreReadOnlyError`."""
        if self._tx_check is None:
            raise self._transactions_unavailable("pending_transactions")
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ArgumentTypeError(f"limit must be an int, not {type(limit).__name__}")
        if limit < 0:
            raise InvalidArgumentError(f"limit must be >= 0, got {limit}")
        if limit > _MAX_LONG:
            raise ArgumentOverflowError(f"limit must be at most {_MAX_LONG}, got {limit}")
        return [
            PendingTransaction(
                transaction_id=row["transaction_id"],
                half_offset=row["half_offset"],
                half_queue_offset=row["half_queue_offset"],
                topic=row["topic"],
                queue_id=row["queue_id"],
                producer_group=row["producer_group"],
                born_timestamp=row["born_timestamp"],
                store_timestamp=row["store_timestamp"],
                check_times=row["check_times"],
            )
            for row in self._core.pending_transactions(limit)
        ]

    def transaction_stats(self) -> dict[str, int]:
        """Counters of the transaction layer since the store opened: ``prepared``,
        ``committed``, ``rolled_back``, ``ops_written`` (op messages), ``op_entries_queued``
        (ended transactions whose op entry is not written yet), ``checked``, ``discarded``,
        ``already_committed`` (commits the lookup found done before) and
        ``pending_in_memory`` (transactions prepared or checked by this process and not ended).
        A read-only store raises :class:`~rmqstore.errors.StoreReadOnlyError`."""
        if self._tx_check is None:
            raise self._transactions_unavailable("transaction_stats")
        return dict(self._core.transaction_stats())

    def _transactions_unavailable(self, what: str) -> RmqStoreError:
        err = unwritable_error(
            what,
            forked=self._forked,
            read_only=True,
            why="transactions write half and op messages, and their check's progress lives in "
            "config/consumerOffset.json",
        )
        assert err is not None
        return err
