"""Transactional messages: RocketMQ 5.x's half and op topics, the check-back and its progress.

A transaction starts with :meth:`rmqstore.MessageStore.prepare_message`, which stores the
message as a *half* message in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (its real topic and queue
kept as ``REAL_TOPIC`` / ``REAL_QID``, its id, the message's ``UNIQ_KEY``, as
``__transactionId__``): no consumer of the real topic sees it. ``end_transaction`` then commits
(the message is put into its real queue with the COMMIT type and ``preparedTransactionOffset``
= the half's commitlog offset) or rolls back; either way the half is marked resolved by an
*op* message in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (tag ``d``, body the half queue offsets, each
followed by a comma). The core does all of it, holding a per-transaction lock across the
state lookup, the real put and the op, so a transaction is committed at most once whatever
the callers and whatever crashed before.

Two service threads live here, as RocketMQ's broker has them:

* :class:`TransactionalOpBatchService` (``TransactionalOpBatchService``) writes the queued op
  entries as op messages: when their text reaches ``transaction_op_msg_max_size`` or
  ``transaction_op_batch_interval`` ms after the last op message. The core decides what is
  due and says when to come back; a full batch is written at once by the transaction that
  filled it. At close the queue is written whatever its size.
* :class:`TransactionCheckService` (``TransactionalMessageCheckService``) runs a check round
  every ``transaction_check_interval`` ms: the core walks the half queue from the saved
  progress (``TransactionalMessageServiceImpl.check``), passes what ops resolved, re-appends
  each half old enough (``transaction_timeout``) with its check count, and moves halves
  checked ``transaction_check_max`` times to ``TRANS_CHECK_MAX_TIME_TOPIC``. The service asks
  the user's checker about each re-appended half (RocketMQ asks the producer) and applies the
  answer, and saves the progress in ``config/consumerOffset.json`` as RocketMQ does: group
  ``CID_RMQ_SYS_TRANS``, queue 0 of ``RMQ_SYS_TRANS_HALF_TOPIC`` and
  ``RMQ_SYS_TRANS_OP_HALF_TOPIC``.

Without a checker the check service leaves every half alone (no copy, no count, no discard)
and logs how many are pending: a RocketMQ broker checking halves with no producer to ask would
move them towards discard for nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._services import ServiceThread
from .enums import TransactionState
from .errors import (
    InvalidArgumentError,
    StoreClosedError,
    TransactionEndedError,
    TransactionNotFoundError,
)

if TYPE_CHECKING:
    from ._rmqstore import MessageExt, PutMessageResult, Store
    from .config import StoreConfig
    from .offsets import ConsumerOffsetManager

__all__ = [
    "EndTransactionResult",
    "PendingTransaction",
    "TransactionCheckReport",
    "TransactionCheckService",
    "TransactionalOpBatchService",
]

log = logging.getLogger("rmqstore.transaction")

#: ``TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC``: where half messages are stored (queue 0).
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
#: ``TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC``: the op messages marking halves resolved.
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: ``TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC``: halves checked too many times.
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: ``MixAll.CID_RMQ_SYS_PREFIX + "TRANS"``: the consumer group of the check's progress.
TRANS_GROUP = "CID_RMQ_SYS_TRANS"
#: The only half (and op) queue rmqstore writes.
QUEUE_ID = 0
#: ``fileReservedTime`` (72 h) in ms: a half born longer ago than that is discarded by the
#: check (``needSkip``); not a setting yet.
FILE_RESERVED_MS = 72 * 3600 * 1000
#: Longest entry of an op message body: a queue offset (up to 19 digits) and its comma.
OP_ENTRY_MAX = 20
#: The property holding a half's transaction id (``TransactionalMessageUtil.TRANSACTION_ID``).
TRANSACTION_ID_PROPERTY = "__transactionId__"

#: A transaction checker: told a pending half message (topic and queue are its real ones),
#: says what became of the local transaction.
Checker = Callable[["MessageExt"], TransactionState]
#: Told a half message moved to ``TRANS_CHECK_MAX_TIME_TOPIC``; what it returns is ignored.
DiscardCallback = Callable[["MessageExt"], object]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def transaction_id_of(msg: MessageExt) -> str:
    """The transaction id of a half message (``__transactionId__``, else ``UNIQ_KEY``)."""
    props = msg.properties
    return props.get(TRANSACTION_ID_PROPERTY) or props.get("UNIQ_KEY") or "?"


@dataclass(frozen=True, slots=True)
class EndTransactionResult:
    """What :meth:`rmqstore.MessageStore.end_transaction` did."""

    #: The transaction (the half message's ``UNIQ_KEY``, stored as ``__transactionId__``).
    transaction_id: str
    #: Commitlog offset of the half message ended (the latest copy when the check service
    #: re-appended it).
    half_offset: int
    #: Its offset in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0: the entry of the op message.
    half_queue_offset: int
    #: :attr:`TransactionState.COMMIT` or :attr:`TransactionState.ROLLBACK`, as asked.
    state: TransactionState
    #: True once the transaction is ended: committed (the real message stored) or rolled back,
    #: its op entry queued. False only when the real put of a commit failed (``put_result``
    #: says why): the transaction is still pending, and may be committed again or checked.
    ended: bool
    #: The real message's put of a commit; None for a rollback.
    put_result: PutMessageResult | None


@dataclass(frozen=True, slots=True)
class PendingTransaction:
    """A transaction neither committed nor rolled back (``pending_transactions``)."""

    transaction_id: str
    #: Commitlog offset of its latest half message (a copy once it was checked): the offset
    #: :meth:`~rmqstore.MessageStore.end_transaction` takes.
    half_offset: int
    #: That half's offset in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0.
    half_queue_offset: int
    #: The real topic and queue the message goes to when committed.
    topic: str
    queue_id: int
    #: The producer group of the half (``PGROUP``).
    producer_group: str
    #: When the producer made the message and when the latest half was stored (epoch ms).
    born_timestamp: int
    store_timestamp: int
    #: How many times the check asked about it (``TRANSACTION_CHECK_TIMES``; 0 never).
    check_times: int


@dataclass(frozen=True, slots=True)
class TransactionCheckReport:
    """What one check round (:meth:`~rmqstore.MessageStore.check_transactions`) did."""

    #: Calls into the core's check walk the round took (each examines up to a batch).
    steps: int
    #: Half messages and copies the walk looked at.
    examined: int
    #: Halves asked about: copies re-appended and passed to the checker.
    checked: int
    #: Answers applied: committed (the real message stored) and rolled back.
    committed: int
    rolled_back: int
    #: Halves left pending: the checker said UNKNOWN, raised, or returned something that is
    #: not a :class:`TransactionState`; they are checked again in a later round.
    unknown: int
    #: Of ``unknown``: the checker raised or returned something else (each is logged).
    checker_errors: int
    #: Answers that found the transaction ended meanwhile (by ``end_transaction``): nothing
    #: written.
    already_ended: int
    #: Answers that could not be applied (a commit whose real put failed, a half that could
    #: not be read): still pending, logged.
    failed: int
    #: Halves the walk found committed already (a commit whose op was lost in a crash): only
    #: the missing op was written, the checker was not asked.
    already_committed: int
    #: Halves moved to ``TRANS_CHECK_MAX_TIME_TOPIC`` (checked ``transaction_check_max``
    #: times, or born before the file reserved time).
    discarded: int
    #: The progress after the round: the next queue offsets of the half and op queues the
    #: walk starts from (saved in ``consumerOffset.json``).
    half_progress: int
    op_progress: int
    #: Wall-clock time the round took.
    seconds: float


class _Counts:
    """Counters of one round, added up step by step."""

    __slots__ = (
        "already_committed",
        "already_ended",
        "checked",
        "checker_errors",
        "committed",
        "discarded",
        "examined",
        "failed",
        "rolled_back",
        "steps",
        "unknown",
    )

    def __init__(self) -> None:
        self.steps = self.examined = self.checked = self.committed = self.rolled_back = 0
        self.unknown = self.checker_errors = self.already_ended = self.failed = 0
        self.already_committed = self.discarded = 0


# -- op batching ----------------------------------------------------------------------------


class TransactionalOpBatchService(ServiceThread):
    """Writes queued op entries as op messages (RocketMQ's ``TransactionalOpBatchService``).

    Each round is one core call, ``transaction_flush_ops``: it writes the op messages that are
    due (the queued text reached ``transaction_op_msg_max_size``, or
    ``transaction_op_batch_interval`` ms passed since the last op message) and answers when to
    come back (0: nothing queued, then the service sleeps an interval). A transaction ended
    when the queued text reaches the size writes the op messages on its own thread (where
    RocketMQ's ``deletePrepareMessage`` wakes this service); with an interval of 0 the core
    ends the service's wait (``transaction_wait_ops``) from the ending thread. :meth:`flush_all`
    writes everything queued; the store calls it at close once the services stopped.
    """

    name = "TransactionalOpBatchService"

    #: How long an idle service sleeps when ops are written at once
    #: (``transaction_op_batch_interval`` = 0) and nothing is queued (s); ending a transaction
    #: wakes it.
    idle_seconds = 1.0

    def __init__(self, core: Store, max_size: int, interval_ms: int) -> None:
        super().__init__()
        self._core = core
        self.max_size = max_size
        self.interval_ms = interval_ms
        self.rounds = 0
        self.forced = 0

    @classmethod
    def for_config(cls, core: Store, cfg: StoreConfig) -> TransactionalOpBatchService:
        """The service with the store's settings; the size capped so that an op message, which
        may pass it by one entry, is never refused as larger than ``max_message_size``."""
        max_size = min(cfg.transaction_op_msg_max_size, max(cfg.max_message_size - OP_ENTRY_MAX, 1))
        return cls(core, max_size, cfg.transaction_op_batch_interval)

    def configure_core(self) -> None:
        """Hands the op size and interval to the core (a round with nothing due): a
        transaction that fills a batch writes it with these, from the first one on."""
        self._core.transaction_flush_ops(_now_ms(), self.max_size, self.interval_ms, False)

    def signal_stop(self) -> None:
        super().signal_stop()
        # Ends the wait in the core at once (close also stops it through stop_services).
        self._core.transaction_wake_ops()

    def run_once(self) -> bool:
        now = _now_ms()
        try:
            next_ms = self._core.transaction_flush_ops(now, self.max_size, self.interval_ms, False)
        except StoreClosedError:
            return False
        except Exception:
            return self._round_failed("writing op messages", self.retry_seconds)
        self._round_ok("writing op messages")
        self.rounds += 1
        if next_ms == 0:
            wait_ms = self.interval_ms if self.interval_ms > 0 else int(self.idle_seconds * 1000)
        else:
            # Due already (the size was reached again while writing): a short pause, so a core
            # that keeps answering a past time cannot make the thread spin.
            wait_ms = max(next_ms - _now_ms(), 1)
        # Waits in the core without the GIL; an end whose entry is due at once (interval 0)
        # ends the wait from the ending thread, with no call into Python.
        try:
            stopped = self._core.transaction_wait_ops(wait_ms)
        except StoreClosedError:
            return False
        return not stopped and not self._stopped.is_set()

    def flush_all(self) -> int:
        """Writes every queued op entry now (``force``); returns the core's next time (0)."""
        self.forced += 1
        return self._core.transaction_flush_ops(_now_ms(), self.max_size, self.interval_ms, True)

    def stats(self) -> dict[str, float]:
        return {
            **super().stats(),
            "rounds": float(self.rounds),
            "forced": float(self.forced),
            "failures": float(self.failures),
        }


# -- progress -------------------------------------------------------------------------------


class TransactionProgress:
    """The check's progress in ``config/consumerOffset.json``: the next offsets of
    ``RMQ_SYS_TRANS_HALF_TOPIC`` and ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0 of group
    ``CID_RMQ_SYS_TRANS``, as RocketMQ's ``TransactionalMessageBridge.updateConsumeOffset``
    keeps them, so that a broker given the folder goes on from there (and the other way)."""

    def __init__(self, core: Store, manager: ConsumerOffsetManager) -> None:
        self._core = core
        self.manager = manager
        self._lock = threading.Lock()
        self._saved = (-1, -1)
        self.writes = 0

    def load(self) -> tuple[int, int]:
        """Hands the saved offsets (-1 where none: the queue's first message) to the core,
        which clamps them to the queues; returns what the core took."""
        half = self.manager.query_offset(TRANS_GROUP, HALF_TOPIC, QUEUE_ID)
        op = self.manager.query_offset(TRANS_GROUP, OP_TOPIC, QUEUE_ID)
        taken = self._core.transaction_load(half, op)
        if (half >= 0 and taken[0] != half) or (op >= 0 and taken[1] != op):
            log.warning(
                "transaction progress of consumerOffset.json (half %d, op %d) is outside the "
                "queues; going on from half %d, op %d",
                half,
                op,
                taken[0],
                taken[1],
            )
        # What the core took counts as saved: a store that never used transactions gets no
        # CID_RMQ_SYS_TRANS entries until the check moves on.
        self._saved = (int(taken[0]), int(taken[1]))
        return self._saved

    @property
    def saved(self) -> tuple[int, int]:
        with self._lock:
            return self._saved

    def persist(self) -> bool:
        """Writes the core's progress when it moved; returns whether it wrote.

        The half progress is written before the op progress: a crash between the two leaves
        the op progress behind, which only re-reads ops. The log is forced first, so the
        copies and ops the progress has passed over are on disk before it says so."""
        with self._lock:
            half, op = (int(v) for v in self._core.transaction_offsets())
            saved_half, saved_op = self._saved
            if (half, op) == self._saved:
                return False
            self._core.flush()
            if half != saved_half:
                self.manager.commit_offset(TRANS_GROUP, HALF_TOPIC, QUEUE_ID, half)
                self._saved = (half, saved_op)
            if op != saved_op:
                self.manager.commit_offset(TRANS_GROUP, OP_TOPIC, QUEUE_ID, op)
            self._saved = (half, op)
            self.writes += 1
            return True


# -- the check ------------------------------------------------------------------------------


class TransactionCheckService(ServiceThread):
    """Checks pending transactions every ``transaction_check_interval`` ms
    (``TransactionalMessageCheckService``).

    A round calls the core's walk (``transaction_check``) until it says it is done, every
    step with the time the round started (RocketMQ's ``startTime``: a half stored during the
    round, such as the copies the round appends, stops the walk rather than being checked
    again). For each copy the walk re-appended it reads the half as the producer sees it
    (``transaction_message``) and asks the checker, with no store lock held; COMMIT and
    ROLLBACK are applied with ``end_transaction`` (the per-transaction lock of the core makes
    an answer racing a user's ``end_transaction`` harmless: the later one finds it ended),
    UNKNOWN, an exception or an answer of another type leave it for a later round (logged
    with the transaction id). Each discarded half is logged and passed to ``on_discard``.
    The progress is saved (:class:`TransactionProgress`) at the end of the round and, within
    a long one, every :attr:`persist_seconds`.

    Rounds never overlap: :meth:`check_now` (``MessageStore.check_transactions``) waits for a
    running round. With no checker set, no round runs; the number of pending transactions is
    logged when it changed, at most once per interval.
    """

    name = "TransactionCheckService"

    #: Copies one core call re-appends at most before the checker is asked about them.
    max_to_check = 1000
    #: Within a long round the progress is saved at most this often (s), and at its end: a
    #: crash repeats at most this much of the round's checks.
    persist_seconds = 1.0
    #: How many pending transactions are counted for the log line of a store without checker.
    pending_log_limit = 1000

    def __init__(
        self,
        core: Store,
        progress: TransactionProgress,
        ops: TransactionalOpBatchService,
        cfg: StoreConfig,
    ) -> None:
        super().__init__()
        self._core = core
        self.progress = progress
        self._ops = ops
        self.interval = cfg.transaction_check_interval / 1000
        self.timeout_ms = cfg.transaction_timeout
        self.check_max = cfg.transaction_check_max
        self._checker: tuple[Checker, DiscardCallback | None] | None = None
        self._round_lock = threading.Lock()
        self._round_thread: int | None = None
        self._logged_pending: int | None = None
        self.rounds = 0
        self.checked = 0
        self.committed = 0
        self.rolled_back = 0
        self.unknown = 0
        self.discarded = 0
        self.persist_failures = 0

    # -- the checker ------------------------------------------------------------------------

    def set_checker(self, checker: Checker | None, on_discard: DiscardCallback | None) -> None:
        self._checker = None if checker is None else (checker, on_discard)
        self._logged_pending = None

    @property
    def checker(self) -> Checker | None:
        pair = self._checker
        return None if pair is None else pair[0]

    # -- pacing -----------------------------------------------------------------------------

    def run_once(self) -> bool:
        if self._stopped.wait(self.interval):
            return False
        pair = self._checker
        try:
            if pair is None:
                self._log_pending()
            else:
                self._round(*pair)
        except StoreClosedError:
            return False
        except Exception:
            return self._round_failed("transaction check")
        self._round_ok("transaction check")
        return True

    def _log_pending(self) -> None:
        """No checker: says how many transactions wait, when that changed."""
        half_progress = self.progress.saved[0]
        if self._core.get_max_offset_in_queue(HALF_TOPIC, QUEUE_ID) <= max(half_progress, 0):
            count = 0
        else:
            count = len(self._core.pending_transactions(self.pending_log_limit + 1))
        if count == self._logged_pending:
            return
        self._logged_pending = count
        if count:
            more = "+" if count > self.pending_log_limit else ""
            log.info(
                "%s: %d%s transactions pending and no transaction checker set "
                "(MessageStore.set_transaction_checker): they are left alone",
                self.name,
                min(count, self.pending_log_limit),
                more,
            )

    # -- a round ----------------------------------------------------------------------------

    def check_now(self) -> TransactionCheckReport:
        """One full round now (waiting for a round in progress); raises
        :class:`~rmqstore.errors.InvalidArgumentError` when no checker is set or when called
        from a checker."""
        if self._round_thread == threading.get_ident():
            raise InvalidArgumentError(
                "check_transactions was called from inside a transaction check (a checker or "
                "on_discard callback); a round cannot run within a round"
            )
        pair = self._checker
        if pair is None:
            raise InvalidArgumentError(
                "check_transactions: no transaction checker is set; call "
                "set_transaction_checker(fn) first (without one, halves are left alone)"
            )
        return self._round(*pair)

    def _round(
        self, checker: Checker, on_discard: DiscardCallback | None
    ) -> TransactionCheckReport:
        with self._round_lock:
            self._round_thread = threading.get_ident()
            try:
                return self._walk(checker, on_discard)
            finally:
                self._round_thread = None

    def _walk(self, checker: Checker, on_discard: DiscardCallback | None) -> TransactionCheckReport:
        began = time.monotonic()
        start_ms = _now_ms()
        counts = _Counts()
        persisted = began
        while True:
            step = self._core.transaction_check(
                start_ms, self.timeout_ms, self.check_max, FILE_RESERVED_MS, self.max_to_check
            )
            counts.steps += 1
            counts.examined += int(step["examined"])
            counts.already_committed += int(step["already_committed"])
            to_check: list[int] = step["to_check"]
            discarded: list[int] = step["discarded"]
            for offset in discarded:
                self._discarded(offset, on_discard, counts)
            for offset in to_check:
                if self._stopped.is_set():
                    break
                self._ask(offset, checker, counts)
            last = step["done"] or self._stopped.is_set()
            stuck = not (last or step["examined"] or to_check or discarded)
            if last or stuck or time.monotonic() - persisted >= self.persist_seconds:
                self._persist()
                persisted = time.monotonic()
            if last:
                break
            if stuck:
                # Not done, yet nothing moved: a core that cannot go on now; next round.
                log.warning("%s: the check walk made no progress; stopping the round", self.name)
                break
        self.rounds += 1
        self.checked += counts.checked
        self.committed += counts.committed
        self.rolled_back += counts.rolled_back
        self.unknown += counts.unknown
        self.discarded += counts.discarded
        half, op = self.progress.saved
        report = TransactionCheckReport(
            steps=counts.steps,
            examined=counts.examined,
            checked=counts.checked,
            committed=counts.committed,
            rolled_back=counts.rolled_back,
            unknown=counts.unknown,
            checker_errors=counts.checker_errors,
            already_ended=counts.already_ended,
            failed=counts.failed,
            already_committed=counts.already_committed,
            discarded=counts.discarded,
            half_progress=half,
            op_progress=op,
            seconds=time.monotonic() - began,
        )
        if counts.checked or counts.discarded or counts.already_committed:
            log.info(
                "%s: checked %d (committed %d, rolled back %d, unknown %d), discarded %d, "
                "found committed %d; progress half %d, op %d",
                self.name,
                counts.checked,
                counts.committed,
                counts.rolled_back,
                counts.unknown,
                counts.discarded,
                counts.already_committed,
                half,
                op,
            )
        return report

    def _persist(self) -> None:
        try:
            self.progress.persist()
        except StoreClosedError:
            raise
        except Exception:
            # The next step or round writes it again; meanwhile a restart re-walks from the
            # older progress, which only repeats checks.
            self.persist_failures += 1
            log.exception("%s: cannot save the transaction progress; retrying", self.name)

    def _ask(self, offset: int, checker: Checker, counts: _Counts) -> None:
        """Asks the checker about the half copy at ``offset`` and applies its answer."""
        counts.checked += 1
        try:
            msg = self._core.transaction_message(offset)
        except StoreClosedError:
            raise
        except Exception:
            counts.failed += 1
            counts.unknown += 1
            log.exception("%s: cannot read the half message at offset %d", self.name, offset)
            return
        if msg is None:
            counts.failed += 1
            counts.unknown += 1
            log.warning("%s: no half message at offset %d any more", self.name, offset)
            return
        state = self._answer(checker, msg, counts)
        if state is TransactionState.UNKNOWN:
            counts.unknown += 1
            return
        self._apply(offset, state, msg, counts)

    def _apply(
        self, offset: int, state: TransactionState, msg: MessageExt, counts: _Counts
    ) -> None:
        """Ends the transaction of the copy at ``offset`` as the checker answered (the
        transaction id, read from the message's properties, only for the log)."""
        commit = state is TransactionState.COMMIT
        try:
            outcome = self._core.end_transaction(offset, commit)
        except TransactionEndedError as exc:
            counts.already_ended += 1
            log.info(
                "%s: transaction %s was ended meanwhile: %s",
                self.name,
                transaction_id_of(msg),
                exc,
            )
            return
        except TransactionNotFoundError as exc:
            counts.failed += 1
            log.warning("%s: transaction %s: %s", self.name, transaction_id_of(msg), exc)
            return
        except StoreClosedError:
            raise
        except Exception:
            counts.failed += 1
            log.exception(
                "%s: applying %s to transaction %s failed",
                self.name,
                state.name,
                transaction_id_of(msg),
            )
            return
        if not outcome["ended"]:
            counts.failed += 1
            result = outcome["result"]
            log.warning(
                "%s: committing transaction %s: the real put answered %s; still pending",
                self.name,
                transaction_id_of(msg),
                None if result is None else result.status.name,
            )
            return
        if commit:
            counts.committed += 1
        else:
            counts.rolled_back += 1

    def _answer(self, checker: Checker, msg: MessageExt, counts: _Counts) -> TransactionState:
        try:
            state = checker(msg)
        except Exception:
            counts.checker_errors += 1
            log.warning(
                "%s: the transaction checker raised for transaction %s (topic %s); counted "
                "as UNKNOWN",
                self.name,
                transaction_id_of(msg),
                msg.topic,
                exc_info=True,
            )
            return TransactionState.UNKNOWN
        if not isinstance(state, TransactionState):
            counts.checker_errors += 1
            log.warning(
                "%s: the transaction checker returned %.100r for transaction %s, not a "
                "rmqstore.TransactionState; counted as UNKNOWN",
                self.name,
                state,
                transaction_id_of(msg),
            )
            return TransactionState.UNKNOWN
        return state

    def _discarded(self, offset: int, on_discard: DiscardCallback | None, counts: _Counts) -> None:
        counts.discarded += 1
        try:
            msg = self._core.transaction_message(offset)
        except StoreClosedError:
            raise
        except Exception:
            log.exception("%s: cannot read the discarded half at offset %d", self.name, offset)
            return
        tx_id = "?" if msg is None else transaction_id_of(msg)
        topic = "?" if msg is None else msg.topic
        log.error(
            "%s: transaction %s (topic %s, half at offset %d) was checked %d times without an "
            "answer (or is older than the file reserved time); discarded: moved to %s",
            self.name,
            tx_id,
            topic,
            offset,
            self.check_max,
            CHECK_MAX_TOPIC,
        )
        if on_discard is None or msg is None:
            return
        try:
            on_discard(msg)
        except Exception:
            log.exception("%s: on_discard raised for transaction %s", self.name, tx_id)

    def stats(self) -> dict[str, float]:
        return {
            **super().stats(),
            "rounds": float(self.rounds),
            "checked": float(self.checked),
            "committed": float(self.committed),
            "rolled_back": float(self.rolled_back),
            "unknown": float(self.unknown),
            "discarded": float(self.discarded),
            "persists": float(self.progress.writes),
            "persist_failures": float(self.persist_failures),
            "failures": float(self.failures),
        }
