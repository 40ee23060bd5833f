"""Helpers of the schedule tests (imported as ``schedule.schedhelp``): a short level table,
reading a queue whole, waiting for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rmqstore import GetMessageStatus, MessageExt, MessageStore

#: A level table of two short delays: level 1 is 1 s, level 2 is 2 s (RocketMQ's units are
#: s, m, h and d only, so 1 s is the shortest level there is).
LEVELS = "1s 2s"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

#: What the schedule tests open stores with.
SCHEDULE_STORE: dict[str, Any] = {
    "message_delay_level": LEVELS,
    "flush_delay_offset_interval": 200,
}


def read_queue(
    store: MessageStore, topic: str, queue_id: int, subscription: str = "*"
) -> list[MessageExt]:
    """Every message of a queue from its min offset, in order."""
    out: list[MessageExt] = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    end = store.get_max_offset_in_queue(topic, queue_id)
    while offset < end:
        r = store.get_message("g", topic, queue_id, offset, 64, subscription)
        if r.status is GetMessageStatus.FOUND:
            out.extend(r.messages)
        elif r.status is not GetMessageStatus.NO_MATCHED_MESSAGE:
            raise AssertionError(f"{topic}/{queue_id}@{offset}: {r.status}")
        assert r.next_begin_offset > offset
        offset = r.next_begin_offset
    return out


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> float:
    """Polls ``cond`` every 5 ms; returns the seconds it took, fails after ``timeout``."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.005)
    return time.monotonic() - start


def pending(store: MessageStore) -> int:
    return sum(s.pending for s in store.schedule_stats())


class VisibilityWatch:
    """A thread that polls a queue's max offset every millisecond and records, for each queue
    offset, the wall-clock time (epoch ms) it was first seen readable."""

    def __init__(self, store: MessageStore, topic: str, queue_id: int) -> None:
        import threading

        self.seen_ms: list[float] = []
        self._store, self._topic, self._queue_id = store, topic, queue_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.001):
            end = self._store.get_max_offset_in_queue(self._topic, self._queue_id)
            now = time.time() * 1000
            while len(self.seen_ms) < end:
                self.seen_ms.append(now)

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join(5)
        return self.seen_ms


def wait_delivered(store: MessageStore, timeout: float) -> float:
    """Waits until every delayed message put so far is delivered and readable: puts dispatched
    into the schedule queues (``pending`` counts only what is there), none pending, the copies
    dispatched into their real queues."""
    start = time.monotonic()
    assert store.wait_dispatched(timeout)
    wait_until(lambda: pending(store) == 0, timeout, "every delayed message delivered")
    assert store.wait_dispatched(timeout)
    return time.monotonic() - start
