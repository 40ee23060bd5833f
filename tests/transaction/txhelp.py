"""Helpers of the transaction tests (imported as ``transaction.txhelp``): the system topics,
settling a store before a check round, reading a queue whole, a recording checker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rmqstore import GetMessageStatus, Message, MessageExt, MessageStore, TransactionState

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRANS_GROUP = "CID_RMQ_SYS_TRANS"

#: What the transaction tests open stores with: halves may be checked at once, no round runs
#: on its own (tests call check_transactions), ops are written at close unless a test says so.
TX_STORE: dict[str, Any] = {
    "transaction_timeout": 0,
    "transaction_check_interval": 600_000,
    "transaction_op_batch_interval": 600_000,
}


def settle(store: MessageStore) -> None:
    """Dispatches what was put and lets the clock pass the last store timestamp: a check round
    sees the halves (they are in the half queue) and takes none as stored during the round."""
    assert store.wait_dispatched(10)
    time.sleep(0.005)


def read_queue(store: MessageStore, topic: str, queue_id: int = 0) -> list[MessageExt]:
    """Every message of a queue from its min offset, in order."""
    out: list[MessageExt] = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    end = store.get_max_offset_in_queue(topic, queue_id)
    while offset < end:
        r = store.get_message("g", topic, queue_id, offset, 64)
        if r.status is GetMessageStatus.FOUND:
            out.extend(r.messages)
        elif r.status is not GetMessageStatus.NO_MATCHED_MESSAGE:
            raise AssertionError(f"{topic}/{queue_id}@{offset}: {r.status}")
        assert r.next_begin_offset > offset
        offset = r.next_begin_offset
    return out


def prepare(
    store: MessageStore,
    n: int,
    topic: str = "TopicTx",
    producer_group: str | None = None,
    **kw: Any,
) -> list[str]:
    """Prepares ``n`` transactions of ``topic`` (bodies ``b"m<i>"``, ``kw`` given to each
    ``Message``); returns their ids."""
    ids = []
    for i in range(n):
        msg = Message(topic, f"m{i}".encode(), **kw)
        r = store.prepare_message(msg, producer_group=producer_group)
        assert r.ok, r.status
        assert r.transaction_id
        ids.append(r.transaction_id)
    return ids


def wait_until(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class Recorder:
    """A checker answering ``answer`` (a state, an exception to raise, or anything else to
    return), recording the messages it was asked about (thread-safe)."""

    def __init__(self, answer: object = TransactionState.UNKNOWN) -> None:
        self.answer = answer
        self.asked: list[MessageExt] = []
        self.discarded: list[MessageExt] = []
        self._lock = threading.Lock()

    def __call__(self, msg: MessageExt) -> TransactionState:
        with self._lock:
            self.asked.append(msg)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer  # type: ignore[return-value]

    def on_discard(self, msg: MessageExt) -> None:
        with self._lock:
            self.discarded.append(msg)

    @property
    def asked_ids(self) -> list[str]:
        with self._lock:
            return [m.properties["__transactionId__"] for m in self.asked]
