"""Issue 17 figures, delay levels: delivery of a due backlog into the real queues as a ratio to
plain ``put_message`` of the same messages in the same process, and the lateness p99 of
delayed messages under light load."""

from __future__ import annotations

import random
import threading
import time

import rmqstore
from rmqstore import Message, PutMessageStatus
from rmqstore._schedule import ScheduleMessageService

BODY = bytes(range(128))
STORE = {"message_delay_level": "1s 2s", "mapped_file_size_commit_log": 256 * 1024 * 1024}


def _put_all(store: rmqstore.MessageStore, n: int, **kw: int) -> float:
    """Puts ``n`` messages of 128 B (16 real queues, a tag, a key); returns the seconds."""
    msgs = [
        Message("Real", BODY, tags="TagA", keys=[f"k{i}"], queue_id=i % 16, **kw) for i in range(n)
    ]
    t0 = time.perf_counter()
    for m in msgs:
        assert store.put_message(m).status is PutMessageStatus.PUT_OK
    return time.perf_counter() - t0


def _pending(store: rmqstore.MessageStore) -> int:
    return sum(s.pending for s in store.schedule_stats())


def test_delivery_throughput(benchmark, open_store, scaled) -> None:
    """A backlog of due level-1 messages delivered by the service's own core call (rounds of
    ``max_msgs_per_round``), timed until every copy is visible in its real queue (dispatched);
    the baseline is ``put_message`` of the same messages (built beforehand) into a fresh store
    of the same process."""
    n = scaled(1_000_000, 50_000)
    rounds = scaled(3, 2)
    deliver_rates: list[float] = []
    put_rates: list[float] = []

    def one_round() -> None:
        plain = open_store(**STORE)
        put_rates.append(n / _put_all(plain, n))
        plain.close()
        store = open_store(**STORE)
        # The service is paused: the backlog builds up, then is driven by hand with the
        # service's own round size.
        store._pause_service("ScheduleMessageService")
        _put_all(store, n, delay_level=1)
        last_put = time.time()
        assert store.wait_dispatched(60)
        time.sleep(max(0.0, last_put + 1.05 - time.time()))  # every message is due
        core = store._core
        t0 = time.perf_counter()
        delivered = 0
        while delivered < n:
            step = core.schedule_deliver(1, ScheduleMessageService.max_msgs_per_round)
            assert step.status is None, step.status
            delivered += step.delivered
            assert step.delivered, (delivered, step.next_due_ms)
        assert store.wait_dispatched(60)
        deliver_rates.append(n / (time.perf_counter() - t0))
        assert store.get_max_offset_in_queue("Real", 0) == (n + 15) // 16
        assert _pending(store) == 0
        store.close()

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    ratios = sorted(d / p for d, p in zip(deliver_rates, put_rates, strict=True))
    benchmark.extra_info.update(
        metric="schedule_delivery",
        messages=n,
        deliver_rate=sorted(deliver_rates)[len(deliver_rates) // 2],
        put_rate=sorted(put_rates)[len(put_rates) // 2],
        ratio=ratios[len(ratios) // 2],
        ratios=ratios,
    )


def test_lateness(benchmark, open_store, scaled) -> None:
    """Level-1 messages put at random moments over about 4 s while nothing else runs: the time
    each delivered copy is first seen readable in its real queue (a thread polls the queue's
    end every millisecond) minus its deliver time (put store time + 1 s); and the same with
    the copy's store time."""
    n = scaled(400, 200)
    visible: list[float] = []
    stored: list[int] = []

    def one_round() -> None:
        rng = random.Random(7)
        store = open_store(**STORE)
        seen: list[float] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(0.001):
                end = store.get_max_offset_in_queue("Late", 0)
                now = time.time() * 1000
                seen.extend([now] * (end - len(seen)))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        due: dict[str, int] = {}
        for i in range(n):
            r = store.put_message(Message("Late", b"x", keys=[f"l{i}"], delay_level=1))
            due[f"l{i}"] = r.store_timestamp + 1000
            time.sleep(rng.uniform(0, 8.0 / n))
        assert store.wait_dispatched()
        deadline = time.monotonic() + 10
        while _pending(store) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.wait_dispatched()
        time.sleep(0.01)
        stop.set()
        watcher.join()
        offset = 0
        while offset < store.get_max_offset_in_queue("Late", 0):
            r = store.get_message("g", "Late", 0, offset, 64)
            for m in r.messages:
                stored.append(m.store_timestamp - due[m.keys[0]])
                visible.append(seen[m.queue_offset] - due[m.keys[0]])
            offset = r.next_begin_offset
        store.close()

    benchmark.pedantic(one_round, rounds=1, iterations=1)
    visible.sort()
    stored.sort()
    assert len(visible) == n
    assert stored[0] >= 0

    def pct(xs: list, p: float) -> float:
        return float(xs[min(len(xs) - 1, int(len(xs) * p))])

    benchmark.extra_info.update(
        metric="schedule_lateness",
        messages=n,
        p50_ms=pct(visible, 0.5),
        p99_ms=pct(visible, 0.99),
        max_ms=visible[-1],
        stored_p50_ms=pct(stored, 0.5),
        stored_p99_ms=pct(stored, 0.99),
    )
