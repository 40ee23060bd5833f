"""Op messages: batched by the op batch service (size and interval), written at close."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rmqstore import MessageStore
from rmqstore._transaction import TransactionalOpBatchService
from transaction.txhelp import OP_TOPIC, prepare, read_queue, settle, wait_until

pytestmark = pytest.mark.timeout(60)


def op_bodies(store: MessageStore) -> list[bytes]:
    assert store.wait_dispatched(10)
    return [m.body for m in read_queue(store, OP_TOPIC)]


def test_close_writes_the_queued_ops(open_tx: Callable[..., MessageStore]) -> None:
    store = open_tx()  # ops batched for 10 minutes
    ids = prepare(store, 3)
    store.end_transaction(ids[0], True)
    store.end_transaction(ids[1], False)
    store.end_transaction(ids[2], True)
    settle(store)
    assert op_bodies(store) == []
    assert store.transaction_stats()["op_entries_queued"] == 3
    store.close()
    store = open_tx()
    ops = read_queue(store, OP_TOPIC)
    assert [m.body for m in ops] == [b"0,1,2,"]
    assert ops[0].tags == "d"
    assert store.pending_transactions() == []


def test_a_full_batch_is_written_without_waiting_for_the_interval(
    open_tx: Callable[..., MessageStore],
) -> None:
    store = open_tx(transaction_op_msg_max_size=8)
    ids = prepare(store, 5)
    for tx_id in ids:
        store.end_transaction(tx_id, False)
    # "0,1,2,3," reached the size: the service is woken and writes it at once.
    assert wait_until(lambda: bool(op_bodies(store)), 10)
    bodies = op_bodies(store)
    assert bodies[0] == b"0,1,2,3,"
    assert b"".join(bodies) in (b"0,1,2,3,", b"0,1,2,3,4,")


def test_the_interval_writes_a_small_batch(open_tx: Callable[..., MessageStore]) -> None:
    store = open_tx(transaction_op_batch_interval=100)
    (tx_id,) = prepare(store, 1)
    store.end_transaction(tx_id, True)
    assert wait_until(lambda: op_bodies(store) == [b"0,"], 10)


def test_unbatched_ops_are_written_at_once(open_tx: Callable[..., MessageStore]) -> None:
    store = open_tx(transaction_op_batch_interval=0)
    ids = prepare(store, 2)
    store.end_transaction(ids[0], True)
    assert wait_until(lambda: op_bodies(store) == [b"0,"], 5)
    store.end_transaction(ids[1], True)
    assert wait_until(lambda: op_bodies(store) == [b"0,", b"1,"], 5)


def test_an_end_wakes_the_idle_op_service_from_the_core(
    open_tx: Callable[..., MessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``transaction_op_batch_interval`` = 0 the core ends the op service's wait when an
    entry is queued (no call into Python per transaction): the op is written long before the
    idle service would look again by itself, each time."""
    monkeypatch.setattr(TransactionalOpBatchService, "idle_seconds", 120.0)
    store = open_tx(transaction_op_batch_interval=0)
    ids = prepare(store, 3)
    settle(store)  # the service ran its first round and waits (120 s) for an end
    expected: list[bytes] = []
    for i, tx_id in enumerate(ids):
        t0 = time.monotonic()
        store.end_transaction(tx_id, i != 1)
        expected.append(f"{i},".encode())
        assert wait_until(lambda: op_bodies(store) == expected, 20), op_bodies(store)
        assert time.monotonic() - t0 < 20


def test_close_ends_the_op_service_wait_at_once(
    open_tx: Callable[..., MessageStore], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The op service waits in the core; stopping the store ends that wait at once."""
    monkeypatch.setattr(TransactionalOpBatchService, "idle_seconds", 120.0)
    for interval in (0, 3_600_000):
        path = tmp_path / f"interval-{interval}"
        store = open_tx(path, transaction_op_batch_interval=interval)
        ids = prepare(store, 1)
        store.end_transaction(ids[0], True)
        settle(store)
        t0 = time.monotonic()
        store.close()
        assert time.monotonic() - t0 < 20
        store = open_tx(path)
        assert op_bodies(store) == [b"0,"]
        store.close()


def test_the_op_size_is_capped_by_the_message_size(open_tx: Callable[..., MessageStore]) -> None:
    store = open_tx(max_message_size=1000, transaction_op_msg_max_size=1_000_000)
    service = next(s for s in store._services if isinstance(s, TransactionalOpBatchService))
    assert service.max_size == 980
    store = open_tx(store.store_path.parent / "other", transaction_op_msg_max_size=100)
    service = next(s for s in store._services if isinstance(s, TransactionalOpBatchService))
    assert service.max_size == 100


def test_no_ops_and_no_op_topic_without_transactions(open_tx: Callable[..., MessageStore]) -> None:
    store = open_tx(transaction_op_batch_interval=0)
    prepare(store, 1)
    settle(store)
    store.close()
    store = open_tx()
    assert OP_TOPIC not in store.topics()


def test_the_core_knows_the_op_size_before_the_service_runs(
    open_tx: Callable[..., MessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The op size is handed to the core at open: a batch filled before the op service's
    first round (here it never runs) is still written by the transaction that filled it."""
    monkeypatch.setattr(TransactionalOpBatchService, "start", lambda self: None)
    store = open_tx(transaction_op_msg_max_size=4)
    ids = prepare(store, 3)
    for tx_id in ids:
        store.end_transaction(tx_id, True)
    assert op_bodies(store) == [b"0,1,"]
