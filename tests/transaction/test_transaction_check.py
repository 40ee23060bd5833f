"""The check-back: the checker's answers, discards after transaction_check_max, no checker,
the check service on its own interval."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest
from rmqstore import (
    Message,
    MessageExt,
    MessageStore,
    TransactionCheckReport,
    TransactionState,
)
from rmqstore._transaction import TransactionCheckService
from rmqstore.errors import ArgumentTypeError, InvalidArgumentError
from transaction.txhelp import (
    CHECK_MAX_TOPIC,
    HALF_TOPIC,
    Recorder,
    prepare,
    read_queue,
    settle,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)


def check(store: MessageStore) -> TransactionCheckReport:
    settle(store)
    report = store.check_transactions()
    settle(store)
    return report


def test_commit_answer_puts_the_real_message_once(tx_store: MessageStore) -> None:
    ids = prepare(tx_store, 3)
    checker = Recorder(TransactionState.COMMIT)
    tx_store.set_transaction_checker(checker)
    report = check(tx_store)
    assert sorted(checker.asked_ids) == sorted(ids)
    for msg in checker.asked:
        # The checker sees the message as the producer sent it.
        assert (msg.topic, msg.queue_id) == ("TopicTx", 0)
    assert (report.checked, report.committed, report.rolled_back, report.unknown) == (3, 3, 0, 0)
    real = read_queue(tx_store, "TopicTx")
    assert sorted(m.properties["UNIQ_KEY"] for m in real) == sorted(ids)
    assert tx_store.pending_transactions() == []
    # Resolved: the next round asks nothing and writes no real message.
    again = check(tx_store)
    assert (again.checked, again.committed) == (0, 0)
    assert len(checker.asked) == 3
    assert len(read_queue(tx_store, "TopicTx")) == 3


def test_rollback_answer_writes_no_real_message(tx_store: MessageStore) -> None:
    prepare(tx_store, 2)
    checker = Recorder(TransactionState.ROLLBACK)
    tx_store.set_transaction_checker(checker)
    report = check(tx_store)
    assert (report.checked, report.rolled_back, report.committed) == (2, 2, 0)
    assert read_queue(tx_store, "TopicTx") == []
    assert tx_store.pending_transactions() == []
    assert check(tx_store).checked == 0


@pytest.mark.parametrize(
    "answer",
    [TransactionState.UNKNOWN, RuntimeError("db down"), "COMMIT", None, True],
    ids=["unknown", "exception", "str", "none", "bool"],
)
def test_no_answer_leaves_it_pending_and_checks_again(
    tx_store: MessageStore, answer: object, caplog: pytest.LogCaptureFixture
) -> None:
    (tx_id,) = prepare(tx_store, 1)
    checker = Recorder(answer)
    tx_store.set_transaction_checker(checker)
    with caplog.at_level(logging.WARNING, logger="rmqstore.transaction"):
        report = check(tx_store)
    assert (report.checked, report.unknown, report.committed, report.rolled_back) == (1, 1, 0, 0)
    failed = answer is not TransactionState.UNKNOWN
    assert report.checker_errors == int(failed)
    if failed:
        assert tx_id in caplog.text
    (pending,) = tx_store.pending_transactions()
    assert pending.transaction_id == tx_id
    assert pending.check_times == 1
    # The copy the round appended is asked about in the next round.
    report = check(tx_store)
    assert report.checked == 1
    assert checker.asked_ids == [tx_id, tx_id]
    (pending,) = tx_store.pending_transactions()
    assert pending.check_times == 2
    assert int(checker.asked[1].properties["TRANSACTION_CHECK_TIMES"]) == 2
    assert read_queue(tx_store, "TopicTx") == []
    # And the answer, once given, is applied to the latest copy.
    checker.answer = TransactionState.COMMIT
    assert check(tx_store).committed == 1
    assert len(read_queue(tx_store, "TopicTx")) == 1


def test_discard_after_check_max(
    open_tx: Callable[..., MessageStore], caplog: pytest.LogCaptureFixture
) -> None:
    store = open_tx(transaction_check_max=2)
    (tx_id,) = prepare(store, 1)
    checker = Recorder(TransactionState.UNKNOWN)
    store.set_transaction_checker(checker, on_discard=checker.on_discard)
    assert check(store).checked == 1
    assert check(store).checked == 1
    with caplog.at_level(logging.ERROR, logger="rmqstore.transaction"):
        report = check(store)
    assert (report.checked, report.discarded) == (0, 1)
    assert len(checker.asked) == 2
    assert [m.properties["__transactionId__"] for m in checker.discarded] == [tx_id]
    assert checker.discarded[0].topic == "TopicTx"
    assert tx_id in caplog.text
    assert CHECK_MAX_TOPIC in caplog.text
    (moved,) = read_queue(store, CHECK_MAX_TOPIC)
    assert moved.body == b"m0"
    assert store.pending_transactions() == []
    assert read_queue(store, "TopicTx") == []
    # Gone for good: later rounds neither ask nor discard it again.
    report = check(store)
    assert (report.checked, report.discarded) == (0, 0)
    assert len(read_queue(store, CHECK_MAX_TOPIC)) == 1


def test_an_exception_in_on_discard_is_logged(
    open_tx: Callable[..., MessageStore], caplog: pytest.LogCaptureFixture
) -> None:
    store = open_tx(transaction_check_max=1)
    (tx_id,) = prepare(store, 1)

    def on_discard(msg: MessageExt) -> None:
        raise ValueError("callback broke")

    store.set_transaction_checker(Recorder(), on_discard=on_discard)
    assert check(store).checked == 1
    with caplog.at_level(logging.ERROR, logger="rmqstore.transaction"):
        report = check(store)
    assert report.discarded == 1
    assert "callback broke" in caplog.text
    assert "on_discard" in caplog.text
    assert tx_id in caplog.text
    # The store goes on.
    assert prepare(store, 1)


def test_a_round_of_many_steps_asks_each_transaction_once(tx_store: MessageStore) -> None:
    """Every step of a round runs with the round's start time: the copies the first steps
    append are stored after it and stop the walk, instead of being checked again (and counted
    towards discard) within the same round."""
    ids = prepare(tx_store, 5)
    service = next(s for s in tx_store._services if isinstance(s, TransactionCheckService))
    service.max_to_check = 1
    checker = Recorder(TransactionState.UNKNOWN)
    tx_store.set_transaction_checker(checker)
    report = check(tx_store)
    assert report.steps >= 5
    assert sorted(checker.asked_ids) == sorted(ids)
    assert [p.check_times for p in tx_store.pending_transactions()] == [1] * 5
    report = check(tx_store)
    assert report.checked == 5
    assert [p.check_times for p in tx_store.pending_transactions()] == [2] * 5


def test_check_max_zero_asks_once_as_rocketmq_does(open_tx: Callable[..., MessageStore]) -> None:
    """needDiscard compares only a count the half carries: a half never checked is asked once
    even with transaction_check_max = 0, and its copy is discarded."""
    store = open_tx(transaction_check_max=0)
    prepare(store, 1)
    checker = Recorder()
    store.set_transaction_checker(checker, on_discard=checker.on_discard)
    assert check(store).checked == 1
    report = check(store)
    assert (report.checked, report.discarded) == (0, 1)
    assert len(checker.discarded) == 1


def test_young_halves_wait_for_the_timeout(open_tx: Callable[..., MessageStore]) -> None:
    store = open_tx(transaction_timeout=60_000)
    prepare(store, 2)
    checker = Recorder(TransactionState.COMMIT)
    store.set_transaction_checker(checker)
    report = check(store)
    assert (report.checked, report.committed) == (0, 0)
    assert len(store.pending_transactions()) == 2
    # A half born long ago is old enough.
    prepare(store, 1, born_timestamp=1_600_000_000_000)
    report = check(store)
    # The walk stops at the first young half, as RocketMQ's does: the old one behind it waits.
    assert report.checked == 0


def test_without_checker_no_round_runs(
    open_tx: Callable[..., MessageStore], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rmqstore.transaction")
    store = open_tx(transaction_check_interval=20)
    prepare(store, 2)
    settle(store)
    half_end = store.get_max_offset_in_queue(HALF_TOPIC, 0)
    assert wait_until(lambda: "2 transactions pending" in caplog.text, 10)
    # Let the service go round several more intervals.
    wait_until(lambda: False, 0.3)
    stats = store.service_stats()["TransactionCheckService"]
    settle(store)
    assert store.get_max_offset_in_queue(HALF_TOPIC, 0) == half_end == 2
    assert read_queue(store, CHECK_MAX_TOPIC) == []
    assert [p.check_times for p in store.pending_transactions()] == [0, 0]
    assert caplog.text.count("transactions pending") == 1  # logged when it changed only
    assert stats["rounds"] == 0
    with pytest.raises(InvalidArgumentError, match="no transaction checker"):
        store.check_transactions()


def test_the_service_checks_on_its_interval(open_tx: Callable[..., MessageStore]) -> None:
    store = open_tx(transaction_check_interval=50)
    ids = prepare(store, 2)
    checker = Recorder(TransactionState.COMMIT)
    store.set_transaction_checker(checker)
    assert wait_until(lambda: len(read_queue(store, "TopicTx")) == 2, 20)
    assert sorted(checker.asked_ids) == sorted(ids)
    assert wait_until(lambda: store.service_stats()["TransactionCheckService"]["committed"] == 2)
    # Checked once each, even as rounds go on.
    wait_until(lambda: False, 0.3)
    assert len(checker.asked) == 2
    assert len(read_queue(store, "TopicTx")) == 2


def test_checker_runs_without_store_locks(tx_store: MessageStore) -> None:
    """The checker may use the store: put, prepare, end its own transaction (the answer then
    finds it ended) and read."""
    (tx_id,) = prepare(tx_store, 1)
    seen: list[int] = []

    def checker(msg: MessageExt) -> TransactionState:
        tx_store.put_message(Message("Other", b"from the checker"))
        tx_store.end_transaction(msg.properties["__transactionId__"], True)
        seen.append(len(tx_store.pending_transactions()))
        return TransactionState.COMMIT

    tx_store.set_transaction_checker(checker)
    done = threading.Event()
    result: list[TransactionCheckReport] = []

    def run() -> None:
        result.append(check(tx_store))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(20), "a checker using the store deadlocked the round"
    report = result[0]
    assert (report.checked, report.already_ended, report.committed) == (1, 1, 0)
    assert seen == [0]
    (real,) = read_queue(tx_store, "TopicTx")
    assert real.properties["UNIQ_KEY"] == tx_id


def test_check_transactions_inside_a_checker_is_refused(tx_store: MessageStore) -> None:
    prepare(tx_store, 1)
    errors: list[BaseException] = []

    def checker(msg: MessageExt) -> TransactionState:
        try:
            tx_store.check_transactions()
        except InvalidArgumentError as exc:
            errors.append(exc)
        return TransactionState.ROLLBACK

    tx_store.set_transaction_checker(checker)
    assert check(tx_store).rolled_back == 1
    assert len(errors) == 1
    assert "within a round" in str(errors[0])


def test_set_transaction_checker_arguments(tx_store: MessageStore) -> None:
    with pytest.raises(ArgumentTypeError, match="fn"):
        tx_store.set_transaction_checker(5)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="on_discard"):
        tx_store.set_transaction_checker(Recorder(), on_discard="x")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="on_discard needs a checker"):
        tx_store.set_transaction_checker(None, on_discard=print)
    with pytest.raises(TypeError):
        tx_store.set_transaction_checker(Recorder(), print)  # type: ignore[misc]
    prepare(tx_store, 1)
    tx_store.set_transaction_checker(Recorder(TransactionState.COMMIT))
    tx_store.set_transaction_checker(None)
    with pytest.raises(InvalidArgumentError):
        tx_store.check_transactions()
    settle(tx_store)
    assert len(tx_store.pending_transactions()) == 1
