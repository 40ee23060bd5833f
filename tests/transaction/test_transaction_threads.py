"""end_transaction from many threads at once: one of them ends the transaction, the others
find it ended, and there is exactly one real message."""

from __future__ import annotations

import threading

import pytest
from rmqstore import MessageStore, TransactionEndedError, TransactionState
from transaction.txhelp import Recorder, prepare, read_queue, settle

pytestmark = pytest.mark.timeout(120)

THREADS = 16


def race(store: MessageStore, targets: list[int | str], commits: list[bool]) -> list[object]:
    """Calls end_transaction(targets[i], commits[i]) from one thread each, all released at
    once; returns each call's result or exception."""
    barrier = threading.Barrier(len(targets))
    out: list[object] = [None] * len(targets)

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = store.end_transaction(targets[i], commits[i])
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(targets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


@pytest.mark.parametrize("rounds", [20])
def test_many_threads_commit_one_transaction_once(tx_store: MessageStore, rounds: int) -> None:
    ids = prepare(tx_store, rounds)
    settle(tx_store)
    offsets = [p.half_offset for p in tx_store.pending_transactions()]
    assert len(offsets) == rounds
    for i, tx_id in enumerate(ids):
        # Half the threads name it by id, half by offset.
        targets: list[int | str] = [tx_id if k % 2 else offsets[i] for k in range(THREADS)]
        out = race(tx_store, targets, [True] * THREADS)
        won = [o for o in out if not isinstance(o, BaseException)]
        lost = [o for o in out if isinstance(o, BaseException)]
        assert len(won) == 1, out
        assert all(isinstance(e, TransactionEndedError) for e in lost), lost
    settle(tx_store)
    real = read_queue(tx_store, "TopicTx")
    assert sorted(m.properties["UNIQ_KEY"] for m in real) == sorted(ids)
    assert tx_store.transaction_stats()["committed"] == rounds


def test_commit_and_rollback_race(tx_store: MessageStore) -> None:
    ids = prepare(tx_store, 10)
    committed = 0
    for tx_id in ids:
        commits = [k % 2 == 0 for k in range(THREADS)]
        out = race(tx_store, [tx_id] * THREADS, commits)
        won = [o for o in out if not isinstance(o, BaseException)]
        assert len(won) == 1, out
        committed += won[0].state is TransactionState.COMMIT  # type: ignore[attr-defined]
    settle(tx_store)
    assert len(read_queue(tx_store, "TopicTx")) == committed


def test_users_and_the_check_race(tx_store: MessageStore) -> None:
    """Threads ending transactions while check rounds answer COMMIT for the same ones."""
    ids = prepare(tx_store, 40)
    settle(tx_store)
    tx_store.set_transaction_checker(Recorder(TransactionState.COMMIT))
    stop = threading.Event()

    def checks() -> None:
        while not stop.is_set():
            tx_store.check_transactions()

    checker_thread = threading.Thread(target=checks)
    checker_thread.start()
    try:
        targets: list[int | str] = list(ids)
        out = race(tx_store, targets, [True] * len(ids))
    finally:
        stop.set()
        checker_thread.join(60)
    for o in out:
        assert not isinstance(o, BaseException) or isinstance(o, TransactionEndedError), o
    settle(tx_store)
    real = read_queue(tx_store, "TopicTx")
    assert sorted(m.properties["UNIQ_KEY"] for m in real) == sorted(ids)
