"""MessageStore's transaction API against the contract: prepare, end by offset or id, the
typed errors, pending transactions, stats, read-only stores."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
import rmqstore
from rmqstore import (
    EndTransactionResult,
    Message,
    MessageStore,
    PendingTransaction,
    PutMessageStatus,
    TransactionCheckReport,
    TransactionEndedError,
    TransactionNotFoundError,
    TransactionState,
)
from rmqstore.errors import (
    ArgumentOverflowError,
    ArgumentTypeError,
    InvalidArgumentError,
    RmqStoreError,
    StoreClosedError,
    StoreReadOnlyError,
)
from transaction.txhelp import HALF_TOPIC, OP_TOPIC, TX_STORE, prepare, read_queue, settle

pytestmark = pytest.mark.timeout(60)

TRANSACTION_TYPE_MASK = 0x3 << 2
COMMIT_TYPE = 0x2 << 2


def test_exported_names() -> None:
    for name in (
        "TransactionState",
        "TransactionNotFoundError",
        "TransactionEndedError",
        "EndTransactionResult",
        "TransactionCheckReport",
        "PendingTransaction",
    ):
        assert name in rmqstore.__all__
        assert hasattr(rmqstore, name)
    assert {s.name for s in TransactionState} == {"COMMIT", "ROLLBACK", "UNKNOWN"}
    assert issubclass(TransactionNotFoundError, RmqStoreError)
    assert issubclass(TransactionNotFoundError, LookupError)
    assert issubclass(TransactionEndedError, RmqStoreError)
    assert issubclass(TransactionEndedError, ValueError)
    for cls in (EndTransactionResult, TransactionCheckReport, PendingTransaction):
        assert dataclasses.is_dataclass(cls)
        params = cls.__dataclass_params__  # type: ignore[attr-defined]
        assert params.frozen, cls


def test_prepare_stores_a_half_message_invisible_in_its_topic(tx_store: MessageStore) -> None:
    msg = Message("TopicTx", b"hello", tags="TagA", keys=["k1"], queue_id=3)
    r = tx_store.prepare_message(msg, producer_group="PG1")
    assert r.status is PutMessageStatus.PUT_OK
    assert r.transaction_id
    settle(tx_store)
    half = tx_store.look_message_by_offset(r.wrote_offset)
    assert half is not None
    assert (half.topic, half.queue_id, half.queue_offset) == (HALF_TOPIC, 0, 0)
    assert half.body == b"hello"
    props = half.properties
    assert props["REAL_TOPIC"] == "TopicTx"
    assert props["REAL_QID"] == "3"
    assert props["__transactionId__"] == props["UNIQ_KEY"] == r.transaction_id
    assert props["TRAN_MSG"] == "true"
    assert props["PGROUP"] == "PG1"
    assert half.sys_flag & TRANSACTION_TYPE_MASK == 0
    assert tx_store.get_max_offset_in_queue("TopicTx", 3) == 0
    assert read_queue(tx_store, "TopicTx", 3) == []
    # An ordinary put has no transaction id.
    assert tx_store.put_message(Message("TopicTx", b"x")).transaction_id is None


def test_prepare_keeps_a_given_uniq_key_and_defaults_the_group(tx_store: MessageStore) -> None:
    r = tx_store.prepare_message(
        Message("TopicTx", b"x", properties={"UNIQ_KEY": "0A0B0C0D00002A9F0000000000000001"})
    )
    assert r.transaction_id == "0A0B0C0D00002A9F0000000000000001"
    settle(tx_store)
    half = tx_store.look_message_by_offset(r.wrote_offset)
    assert half is not None
    assert half.properties["PGROUP"] == "DEFAULT_PRODUCER"


def test_prepare_refuses_a_timer_message_by_status(tx_store: MessageStore) -> None:
    r = tx_store.prepare_message(Message("TopicTx", b"x", delay_ms=1000))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert tx_store.get_max_phy_offset() == 0
    # Nothing was stored: the id the message was given names no transaction.
    if r.transaction_id is not None:
        with pytest.raises(TransactionNotFoundError):
            tx_store.end_transaction(r.transaction_id, True)


def test_commit_by_offset_puts_the_real_message(tx_store: MessageStore) -> None:
    r = tx_store.prepare_message(Message("TopicTx", b"body-1", tags="T", queue_id=1))
    end = tx_store.end_transaction(r.wrote_offset, True)
    assert isinstance(end, EndTransactionResult)
    assert end.transaction_id == r.transaction_id
    assert end.half_offset == r.wrote_offset
    assert end.half_queue_offset == 0
    assert end.state is TransactionState.COMMIT
    assert end.ended is True
    assert end.put_result is not None
    assert end.put_result.ok
    settle(tx_store)
    (real,) = read_queue(tx_store, "TopicTx", 1)
    assert real.body == b"body-1"
    assert real.tags == "T"
    assert real.commit_log_offset == end.put_result.wrote_offset
    assert real.prepared_transaction_offset == r.wrote_offset
    assert real.sys_flag & TRANSACTION_TYPE_MASK == COMMIT_TYPE
    assert "REAL_TOPIC" not in real.properties
    assert "REAL_QID" not in real.properties
    assert real.properties["UNIQ_KEY"] == r.transaction_id
    with pytest.raises(dataclasses.FrozenInstanceError):
        end.ended = False  # type: ignore[misc]


def test_rollback_by_id_writes_no_real_message(tx_store: MessageStore) -> None:
    r = tx_store.prepare_message(Message("TopicTx", b"x"))
    assert r.transaction_id is not None
    end = tx_store.end_transaction(r.transaction_id, False)
    assert end.state is TransactionState.ROLLBACK
    assert end.ended is True
    assert end.put_result is None
    assert end.half_offset == r.wrote_offset
    settle(tx_store)
    assert read_queue(tx_store, "TopicTx") == []


@pytest.mark.parametrize(("first", "second"), [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("by_id", [False, True])
def test_ending_twice_raises_and_writes_nothing(
    tx_store: MessageStore, first: bool, second: bool, by_id: bool
) -> None:
    r = tx_store.prepare_message(Message("TopicTx", b"x"))
    assert r.transaction_id is not None
    target: int | str = r.transaction_id if by_id else r.wrote_offset
    tx_store.end_transaction(target, first)
    end_of_log = tx_store.get_max_phy_offset()
    with pytest.raises(TransactionEndedError):
        tx_store.end_transaction(target, second)
    assert tx_store.get_max_phy_offset() == end_of_log
    settle(tx_store)
    assert len(read_queue(tx_store, "TopicTx")) == (1 if first else 0)


def test_unknown_transactions_raise_not_found(tx_store: MessageStore) -> None:
    with pytest.raises(TransactionNotFoundError):
        tx_store.end_transaction("0A0B0C0D00002A9F00000000000000FF", True)
    with pytest.raises(LookupError):
        tx_store.end_transaction(0, True)  # an empty log
    plain = tx_store.put_message(Message("TopicTx", b"not a half"))
    r = tx_store.prepare_message(Message("TopicTx", b"x"))
    with pytest.raises(TransactionNotFoundError):
        tx_store.end_transaction(plain.wrote_offset, True)  # a record that is not a half
    with pytest.raises(TransactionNotFoundError):
        tx_store.end_transaction(tx_store.get_max_phy_offset() + 1000, True)  # past the end
    with pytest.raises((TransactionNotFoundError, InvalidArgumentError)):
        tx_store.end_transaction(r.wrote_offset + 1, True)  # inside a record
    settle(tx_store)
    assert len(read_queue(tx_store, "TopicTx")) == 1  # only the plain put


@pytest.mark.parametrize(
    ("target", "error"),
    [
        (True, ArgumentTypeError),
        (False, ArgumentTypeError),
        (1.0, ArgumentTypeError),
        (None, ArgumentTypeError),
        (b"id", ArgumentTypeError),
        (-1, InvalidArgumentError),
        (2**63, ArgumentOverflowError),
        ("", InvalidArgumentError),
    ],
)
def test_bad_targets_raise_typed_errors(
    tx_store: MessageStore, target: object, error: type[Exception]
) -> None:
    tx_store.prepare_message(Message("TopicTx", b"x"))
    with pytest.raises(error, match="half_offset_or_transaction_id"):
        tx_store.end_transaction(target, True)  # type: ignore[arg-type]


@pytest.mark.parametrize("commit", [1, 0, None, "yes"])
def test_commit_must_be_a_bool(tx_store: MessageStore, commit: object) -> None:
    r = tx_store.prepare_message(Message("TopicTx", b"x"))
    with pytest.raises(ArgumentTypeError, match="commit"):
        tx_store.end_transaction(r.wrote_offset, commit)  # type: ignore[arg-type]
    # Nothing was ended.
    assert tx_store.end_transaction(r.wrote_offset, True).ended


def test_prepare_argument_errors(tx_store: MessageStore) -> None:
    with pytest.raises(ArgumentTypeError, match="msg"):
        tx_store.prepare_message(b"x")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="producer_group"):
        tx_store.prepare_message(Message("T", b"x"), producer_group=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="producer_group"):
        tx_store.prepare_message(Message("T", b"x"), producer_group="")
    with pytest.raises(TypeError):
        tx_store.prepare_message(Message("T", b"x"), "PG")  # type: ignore[misc]
    assert tx_store.get_max_phy_offset() == 0


def test_prepare_and_end_are_the_bindings_own_methods(
    open_tx: Callable[..., MessageStore], store_path: Path
) -> None:
    """A writable store answers prepare_message and end_transaction with the binding's
    methods (no Python frame in between, as put_message); a subclass overriding one keeps its
    own, and a read-only store keeps the Python method (which refuses)."""
    store = open_tx()
    assert store.prepare_message.__self__ is store._core  # type: ignore[attr-defined]
    assert store.end_transaction.__self__ is store._core  # type: ignore[attr-defined]
    r = store.prepare_message(Message("TopicTx", b"x"), producer_group="PG")
    end = store.end_transaction(half_offset_or_transaction_id=r.wrote_offset, commit=True)
    assert isinstance(end, EndTransactionResult)
    assert end.ended
    assert end.state is TransactionState.COMMIT
    assert end.half_offset == r.wrote_offset
    assert end.transaction_id == r.transaction_id
    store.close()

    seen: list[object] = []

    class Audited(MessageStore):
        def end_transaction(
            self, half_offset_or_transaction_id: int | str, commit: bool
        ) -> EndTransactionResult:
            seen.append(half_offset_or_transaction_id)
            return super().end_transaction(half_offset_or_transaction_id, commit)

    with Audited(store_path, **{**TX_STORE, "mapped_file_size_commit_log": 64 * 1024}) as audited:
        assert audited.prepare_message.__self__ is audited._core  # type: ignore[attr-defined]
        r = audited.prepare_message(Message("TopicTx", b"y"))
        assert audited.end_transaction(r.wrote_offset, False).ended
        assert seen == [r.wrote_offset]


def test_pending_transactions_lists_what_is_not_ended(tx_store: MessageStore) -> None:
    ids = prepare(tx_store, 3, producer_group="PG")
    tx_store.end_transaction(ids[1], True)
    settle(tx_store)
    pending = tx_store.pending_transactions()
    assert [p.transaction_id for p in pending] == [ids[0], ids[2]]
    first = pending[0]
    assert isinstance(first, PendingTransaction)
    assert (first.topic, first.queue_id, first.producer_group) == ("TopicTx", 0, "PG")
    assert first.half_queue_offset == 0
    assert first.check_times == 0
    assert first.store_timestamp >= first.born_timestamp > 0
    half = tx_store.look_message_by_offset(first.half_offset)
    assert half is not None
    assert half.properties["__transactionId__"] == ids[0]
    assert len(tx_store.pending_transactions(limit=1)) == 1
    assert tx_store.pending_transactions(limit=0) == []
    # The offset a listing gives is what end_transaction takes.
    assert tx_store.end_transaction(pending[1].half_offset, False).transaction_id == ids[2]
    settle(tx_store)
    assert [p.transaction_id for p in tx_store.pending_transactions()] == [ids[0]]


@pytest.mark.parametrize(
    ("limit", "error"),
    [(-1, InvalidArgumentError), (True, ArgumentTypeError), ("5", ArgumentTypeError)],
)
def test_pending_limit_errors(tx_store: MessageStore, limit: object, error: type) -> None:
    with pytest.raises(error, match="limit"):
        tx_store.pending_transactions(limit)  # type: ignore[arg-type]


def test_stats_count_what_was_done(tx_store: MessageStore) -> None:
    before = tx_store.transaction_stats()
    for key in (
        "prepared",
        "committed",
        "rolled_back",
        "ops_written",
        "op_entries_queued",
        "checked",
        "discarded",
        "already_committed",
        "pending_in_memory",
    ):
        assert before[key] == 0, key
    ids = prepare(tx_store, 3)
    tx_store.end_transaction(ids[0], True)
    tx_store.end_transaction(ids[1], False)
    stats = tx_store.transaction_stats()
    assert stats["prepared"] == 3
    assert stats["committed"] == 1
    assert stats["rolled_back"] == 1
    assert stats["op_entries_queued"] == 2
    assert stats["pending_in_memory"] == 1


def test_read_only_store_refuses_transactions(open_tx: Callable[..., MessageStore]) -> None:
    store = open_tx()
    r = store.prepare_message(Message("TopicTx", b"x"))
    store.close()
    ro = MessageStore(store.store_path, read_only=True, mapped_file_size_commit_log=64 * 1024)
    try:
        calls: list[Callable[[], object]] = [
            lambda: ro.prepare_message(Message("TopicTx", b"x")),
            lambda: ro.end_transaction(r.wrote_offset, True),
            lambda: ro.set_transaction_checker(lambda m: TransactionState.COMMIT),
            ro.check_transactions,
            ro.pending_transactions,
            ro.transaction_stats,
        ]
        for call in calls:
            with pytest.raises(StoreReadOnlyError, match="read-only"):
                call()
    finally:
        ro.close()


def test_closed_store_refuses_transactions(open_tx: Callable[..., MessageStore]) -> None:
    store = open_tx()
    r = store.prepare_message(Message("TopicTx", b"x"))
    store.close()
    with pytest.raises(StoreClosedError):
        store.prepare_message(Message("TopicTx", b"x"))
    with pytest.raises(StoreClosedError):
        store.end_transaction(r.wrote_offset, True)
    with pytest.raises(StoreClosedError):
        store.set_transaction_checker(lambda m: TransactionState.COMMIT)
    with pytest.raises(StoreClosedError):
        store.check_transactions()


def test_a_half_survives_reopen_and_is_ended_by_id(
    open_tx: Callable[..., MessageStore], store_path: Path
) -> None:
    store = open_tx()
    (tx_id,) = prepare(store, 1)
    store.close()
    store = open_tx()
    assert [p.transaction_id for p in store.pending_transactions()] == [tx_id]
    assert store.end_transaction(tx_id, True).ended
    with pytest.raises(TransactionEndedError):
        store.end_transaction(tx_id, True)
    store.close()
    store = open_tx()
    # Ended before the restart: still ended, still one real message.
    with pytest.raises(TransactionEndedError):
        store.end_transaction(tx_id, True)
    settle(store)
    assert len(read_queue(store, "TopicTx")) == 1
    assert store.pending_transactions() == []
    assert store.get_max_offset_in_queue(OP_TOPIC, 0) == 1
    assert store_path.is_dir()
