"""Issue 17 figures for timer messages: the enqueue of a backlog of timer messages with random
delays into the wheel and the timer log (RocketMQ's enqueue threads), as messages/s and as a
ratio to plain ``put_message`` in the same process, and the delivery of a backlog of due timer
messages into their real queues (the dequeue), as messages/s.

The timer services are stopped for the measured phases: each phase is the core's rounds called
back to back (``timer_enqueue`` / ``timer_dequeue``, 65,536 messages a round), which is what the
services do when behind.
"""

from __future__ import annotations

import random
import time
from typing import Any

import rmqstore

ROUND = 65_536


def _stop_timer_services(store: rmqstore.MessageStore) -> None:
    for service in store._services:
        if service.name.startswith("Timer"):
            service.signal_stop()
            service.join()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _config() -> dict[str, Any]:
    return {
        "mapped_file_size_commit_log": 256 << 20,
        "message_index_enable": False,
        "timer_precision_ms": 100,
    }


def test_timer_enqueue(benchmark, open_store, scaled) -> None:
    n = scaled(1_000_000, 100_000)
    rng = random.Random(17)
    plain_store = open_store(**_config())
    store = open_store(**_config())
    _stop_timer_services(store)
    body = b"x" * 64
    plain = [rmqstore.Message("Plain", body, queue_id=i % 8) for i in range(n)]
    # Random delays from one minute (nothing is due before the enqueue) to two days (beyond
    # the roll window of 172,800 slots of 100 ms: the longer ones are logged as roll units).
    timed = [
        rmqstore.Message(
            "Timed",
            body,
            queue_id=i % 8,
            properties={"TIMER_DELAY_MS": str(rng.randint(60_000, 2 * 86_400_000))},
        )
        for i in range(n)
    ]
    figures: dict[str, float] = {}

    def run() -> None:
        t0 = time.perf_counter()
        for m in plain:
            plain_store.put_message(m)
        figures["put_rate"] = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for m in timed:
            store.put_message(m)
        figures["timer_put_rate"] = n / (time.perf_counter() - t0)
        assert store.wait_dispatched(120)
        core = store._core
        logged = 0
        t0 = time.perf_counter()
        while True:
            step = core.timer_enqueue(_now_ms(), ROUND)
            logged += step["logged"]
            if step["messages"] == 0:
                break
        figures["enqueue_rate"] = n / (time.perf_counter() - t0)
        assert logged == n, logged

    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(
        metric="timer_enqueue",
        messages=n,
        enqueue_rate=figures["enqueue_rate"],
        put_rate=figures["put_rate"],
        timer_put_rate=figures["timer_put_rate"],
        ratio=figures["enqueue_rate"] / figures["put_rate"],
    )


def test_timer_delivery(benchmark, open_store, scaled) -> None:
    n = scaled(1_000_000, 100_000)
    store = open_store(**_config())
    _stop_timer_services(store)
    body = b"x" * 64
    # Deliver times an hour ahead, spread over 10 s (100 slots); the dequeue is then called
    # with a time past them all (its `now_ms`), so no message is due before it is enqueued.
    deliver = _now_ms() + 3_600_000
    msgs = [
        rmqstore.Message(
            "Due", body, queue_id=i % 8, properties={"TIMER_DELIVER_MS": str(deliver + i % 10_000)}
        )
        for i in range(n)
    ]
    for m in msgs:
        store.put_message(m)
    assert store.wait_dispatched(120)
    core = store._core
    logged = 0
    while True:
        step = core.timer_enqueue(_now_ms(), ROUND)
        logged += step["logged"]
        if not step["messages"]:
            break
    assert logged == n, logged
    due = deliver + 10_000 + 200
    figures: dict[str, float] = {}

    def run() -> None:
        delivered = 0
        t0 = time.perf_counter()
        while delivered < n:
            step = core.timer_dequeue(due, ROUND)
            delivered += step["delivered"]
            assert step["delivered"] or step["slots"], step
        figures["delivery_rate"] = n / (time.perf_counter() - t0)

    benchmark.pedantic(run, rounds=1, iterations=1)
    assert store.wait_dispatched(120)
    assert sum(store.get_max_offset_in_queue("Due", q) for q in range(8)) == n
    benchmark.extra_info.update(
        metric="timer_delivery", messages=n, delivery_rate=figures["delivery_rate"]
    )
