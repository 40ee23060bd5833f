"""The check's progress in config/consumerOffset.json (group CID_RMQ_SYS_TRANS), saved after
rounds and at close, loaded at open."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from rmqstore import MessageExt, MessageStore, TransactionState
from rmqstore._transaction import TransactionCheckService
from rmqstore.offsets import ConsumerOffsetManager
from transaction.txhelp import (
    HALF_TOPIC,
    OP_TOPIC,
    TRANS_GROUP,
    Recorder,
    prepare,
    read_queue,
    settle,
)

pytestmark = pytest.mark.timeout(60)

HALF_KEY = f"{HALF_TOPIC}@{TRANS_GROUP}"
OP_KEY = f"{OP_TOPIC}@{TRANS_GROUP}"


def offsets_file(store_path: Path) -> dict[str, dict[str, int]]:
    doc = json.loads((store_path / "config" / "consumerOffset.json").read_text())
    table: dict[str, dict[str, int]] = doc["offsetTable"]
    return table


def round_of(store: MessageStore) -> None:
    settle(store)
    store.check_transactions()
    settle(store)


def test_a_store_without_transactions_writes_no_progress(
    open_tx: Callable[..., MessageStore], store_path: Path
) -> None:
    store = open_tx()
    store.commit_offset("g", "t", 0, 1)  # the file exists
    store.set_transaction_checker(Recorder())
    round_of(store)
    store.close()
    table = offsets_file(store_path)
    assert HALF_KEY not in table
    assert OP_KEY not in table


def test_progress_is_saved_and_reloaded(
    open_tx: Callable[..., MessageStore], store_path: Path
) -> None:
    store = open_tx()
    ids = prepare(store, 4)
    checker = Recorder(TransactionState.ROLLBACK)
    store.set_transaction_checker(checker)
    round_of(store)  # asks about the 4 halves (copies appended, answers applied)
    round_of(store)  # passes the resolved copies
    assert sorted(checker.asked_ids) == sorted(ids)
    saved = store.consumer_offsets.query_offset(TRANS_GROUP, HALF_TOPIC, 0)
    # Written during the rounds, not only at close: past the 4 halves and their 4 copies.
    assert saved == store.get_max_offset_in_queue(HALF_TOPIC, 0) == 8
    assert offsets_file(store_path)[HALF_KEY] == {"0": 8}
    store.close()
    table = offsets_file(store_path)
    assert table[HALF_KEY] == {"0": 8}
    # The op progress moves once the walk passed whole op messages (here written at close).
    assert table.get(OP_KEY, {"0": 0})["0"] in (0, 1)

    store = open_tx()
    checker = Recorder(TransactionState.COMMIT)
    store.set_transaction_checker(checker)
    report = store.check_transactions()
    assert report.half_progress == 8
    assert (report.examined, report.checked) == (0, 0)
    assert checker.asked == []
    assert read_queue(store, "TopicTx") == []


def test_progress_loaded_at_open_is_where_the_walk_starts(
    open_tx: Callable[..., MessageStore], store_path: Path
) -> None:
    """A progress written by another (a RocketMQ broker that resolved the first half) is
    taken at open: the halves below it are not checked."""
    store = open_tx()
    ids = prepare(store, 3)
    store.close()
    manager = ConsumerOffsetManager(store_path / "config")
    manager.commit_offset(TRANS_GROUP, HALF_TOPIC, 0, 1)
    manager.close()

    store = open_tx()
    checker = Recorder(TransactionState.UNKNOWN)
    store.set_transaction_checker(checker)
    round_of(store)
    assert checker.asked_ids == ids[1:]


def test_progress_past_the_queue_is_clamped(
    open_tx: Callable[..., MessageStore], store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_tx()
    ids = prepare(store, 2)
    store.close()
    manager = ConsumerOffsetManager(store_path / "config")
    manager.commit_offset(TRANS_GROUP, HALF_TOPIC, 0, 1_000)
    manager.commit_offset(TRANS_GROUP, OP_TOPIC, 0, 1_000)
    manager.close()
    store = open_tx()
    assert "outside the queues" in caplog.text
    checker = Recorder(TransactionState.UNKNOWN)
    store.set_transaction_checker(checker)
    report = store.check_transactions()
    # Clamped to the queue's end: nothing below it is checked, nothing refused.
    assert report.half_progress == 2
    assert checker.asked == []
    assert len(ids) == 2


def test_progress_after_a_commit_answer_survives_reopen(
    open_tx: Callable[..., MessageStore], store_path: Path
) -> None:
    store = open_tx()
    ids = prepare(store, 2)
    store.set_transaction_checker(Recorder(TransactionState.COMMIT))
    round_of(store)
    store.close()
    store = open_tx()
    checker = Recorder(TransactionState.COMMIT)
    store.set_transaction_checker(checker)
    round_of(store)
    round_of(store)
    assert checker.asked == []
    real = read_queue(store, "TopicTx")
    assert sorted(m.properties["UNIQ_KEY"] for m in real) == sorted(ids)


@pytest.mark.parametrize("persist_seconds", [0.0, 3600.0])
def test_a_long_round_saves_its_progress_on_the_way(
    open_tx: Callable[..., MessageStore], persist_seconds: float
) -> None:
    store = open_tx()
    prepare(store, 4)
    service = next(s for s in store._services if isinstance(s, TransactionCheckService))
    service.max_to_check = 1
    service.persist_seconds = persist_seconds
    seen: list[int] = []

    def checker(msg: MessageExt) -> TransactionState:
        seen.append(store.consumer_offsets.query_offset(TRANS_GROUP, HALF_TOPIC, 0))
        return TransactionState.UNKNOWN

    store.set_transaction_checker(checker)
    round_of(store)
    if persist_seconds:
        assert seen == [-1] * 4  # saved at the round's end only
    else:
        assert seen == [-1, 1, 2, 3]  # saved after each step
    assert store.consumer_offsets.query_offset(TRANS_GROUP, HALF_TOPIC, 0) == 4
