"""The schedule service's pacing, against a scripted core (the binding's contract:
``schedule_deliver(level, max_msgs)`` -> a step with ``delivered``, ``dropped``, ``offset``,
``next_due_ms`` and ``status``; ``schedule_offsets``; ``schedule_stats``): the first round runs
at once, a level sleeps until exactly its next deliver time, an empty level polls every 100 ms,
a failed put retries after 100 ms, an exception pauses that level alone for 10 s, levels with
a backlog take turns, and the offsets are persisted on the interval, after the first delivery
and at close."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rmqstore._schedule import DelayOffsetManager, ScheduleMessageService


@dataclass
class Step:
    delivered: int
    dropped: int
    offset: int
    next_due_ms: int | None
    status: str | None


class FakeCore:
    """Levels of due times (epoch ms); ``schedule_deliver`` delivers the due ones in order."""

    def __init__(self, delays: dict[int, int]) -> None:
        self.delays = delays
        self.queues: dict[int, list[int]] = {lv: [] for lv in delays}
        self.offsets = dict.fromkeys(delays, 0)
        self.calls: list[tuple[float, int, int]] = []  # (monotonic, level, delivered)
        self.fail_puts: dict[int, int] = {}  # level -> rounds whose put fails
        self.raise_rounds: dict[int, int] = {}  # level -> rounds that raise
        self.lock = threading.Lock()

    def schedule_stats(self) -> list[tuple[Any, ...]]:
        with self.lock:
            return [
                (lv, d, self.offsets[lv], len(self.queues[lv]), 0, None)
                for lv, d in self.delays.items()
            ]

    def schedule_offsets(self) -> dict[int, int]:
        with self.lock:
            return dict(self.offsets)

    def add(self, level: int, due_ms: int) -> None:
        with self.lock:
            self.queues[level].append(due_ms)

    def schedule_deliver(self, level: int, max_msgs: int) -> Step:
        with self.lock:
            if self.raise_rounds.get(level):
                self.raise_rounds[level] -= 1
                self.calls.append((time.monotonic(), level, -1))
                raise OSError("scripted failure")
            q, off = self.queues[level], self.offsets[level]
            now = time.time() * 1000
            done = 0
            status = None
            while off < len(q) and done < max_msgs and q[off] <= now:
                if self.fail_puts.get(level):
                    self.fail_puts[level] -= 1
                    status = "CREATE_MAPPED_FILE_FAILED"
                    break
                off += 1
                done += 1
            self.offsets[level] = off
            self.calls.append((time.monotonic(), level, done))
            nxt = q[off] if off < len(q) else None
            return Step(done, 0, off, nxt, status)


@pytest.fixture
def service(tmp_path: Path):
    made: list[ScheduleMessageService] = []

    def make(core: FakeCore, interval_ms: int = 10_000) -> ScheduleMessageService:
        svc = ScheduleMessageService(core, DelayOffsetManager(tmp_path / "config"), interval_ms)  # type: ignore[arg-type]
        made.append(svc)
        return svc

    yield make
    for svc in made:
        svc.signal_stop()
        svc.join(5)
        svc.manager.close()


def _calls(core: FakeCore, level: int) -> list[tuple[float, int, int]]:
    with core.lock:
        return [c for c in core.calls if c[1] == level]


def test_first_round_at_once_and_due_messages_go_out(service) -> None:
    core = FakeCore({1: 1000})
    now = time.time() * 1000
    for _ in range(5):
        core.add(1, int(now) - 10)
    svc = service(core)
    t0 = time.monotonic()
    svc.start()
    time.sleep(0.05)
    calls = _calls(core, 1)
    assert calls
    assert calls[0][0] - t0 < 0.1  # no FIRST_DELAY_TIME of 1 s
    assert core.offsets[1] == 5
    assert svc.delivered == 5


def test_sleeps_until_the_deliver_time(service) -> None:
    core = FakeCore({1: 1000})
    due = int(time.time() * 1000) + 300
    core.add(1, due)
    svc = service(core)
    svc.start()
    deadline = time.monotonic() + 2
    while core.offsets[1] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    late = time.time() * 1000 - due
    assert 0 <= late < 50, late
    # While waiting, it did not poll every 100 ms: one round at start, one at the due time.
    assert len([c for c in _calls(core, 1) if c[2] == 0]) <= 2


def test_wait_is_capped_at_the_level_delay(service) -> None:
    # A deliver time further away than the level's delay (a clock that went back): the level
    # is looked at again after its delay, when the core treats the message as due.
    core = FakeCore({1: 200})
    core.add(1, int(time.time() * 1000) + 60_000)
    svc = service(core)
    svc.start()
    time.sleep(0.5)
    assert 2 <= len(_calls(core, 1)) <= 4


def test_empty_level_polls_every_100ms(service) -> None:
    core = FakeCore({1: 1000, 2: 2000})
    svc = service(core)
    svc.start()
    time.sleep(0.55)
    n = len(_calls(core, 1))
    assert 4 <= n <= 7, n
    core.add(2, int(time.time() * 1000))
    time.sleep(0.15)
    assert core.offsets[2] == 1


def test_failed_put_retries_after_100ms(service) -> None:
    core = FakeCore({1: 1000})
    core.add(1, int(time.time() * 1000) - 1)
    core.fail_puts[1] = 2
    svc = service(core)
    svc.start()
    time.sleep(0.35)
    assert core.offsets[1] == 1
    assert svc.failed_puts == 2
    times = [c[0] for c in _calls(core, 1)]
    assert times[1] - times[0] >= 0.09
    assert times[2] - times[1] >= 0.09


def test_exception_pauses_only_that_level(service) -> None:
    core = FakeCore({1: 1000, 2: 1000})
    core.raise_rounds[1] = 1
    svc = service(core)
    svc.delay_for_a_period = 0.5  # RocketMQ's 10 s, shortened for the test
    svc.start()
    time.sleep(0.3)
    assert len(_calls(core, 1)) == 1  # paused after its exception
    assert len(_calls(core, 2)) >= 3  # level 2 goes on polling
    assert svc.failures == 1
    core.add(1, int(time.time() * 1000))
    time.sleep(0.4)
    assert core.offsets[1] == 1
    assert svc.alive


def test_backlogs_take_turns(service) -> None:
    core = FakeCore({1: 1000, 2: 1000})
    now = int(time.time() * 1000) - 1
    for _ in range(50):
        core.add(1, now)
        core.add(2, now)
    svc = service(core)
    svc.max_msgs_per_round = 10
    svc.start()
    time.sleep(0.1)
    order = [c[1] for c in core.calls if c[2] > 0]
    assert order[:10] == [1, 2] * 5


def test_persist_on_interval_first_delivery_and_close(service, tmp_path: Path) -> None:
    path = tmp_path / "config" / "delayOffset.json"
    core = FakeCore({1: 1000})
    svc = service(core, interval_ms=100)
    svc.start()
    time.sleep(0.25)
    # Nothing ever delivered and no file: nothing written.
    assert not path.exists()
    core.add(1, int(time.time() * 1000))
    time.sleep(0.15)  # the empty level's next poll, within 100 ms
    # The first delivery writes the file at once (the interval is not waited for).
    assert svc.persists == 1
    assert json.loads(path.read_text())["offsetTable"] == {"1": 1}
    before = svc.persists
    time.sleep(0.35)
    assert svc.persists == before  # unchanged: not written again every interval
    core.add(1, int(time.time() * 1000))
    time.sleep(0.25)
    assert json.loads(path.read_text())["offsetTable"] == {"1": 2}
    svc.signal_stop()
    svc.join()
    with core.lock:
        core.offsets[1] = 2
    t_before = int(time.time() * 1000)
    assert svc.persist()  # what the store calls at close
    doc = json.loads(path.read_text())
    assert doc["dataVersion"]["timestamp"] >= t_before


def test_stop_is_prompt(service) -> None:
    core = FakeCore({1: 3_600_000})
    core.add(1, int(time.time() * 1000) + 3_000_000)
    svc = service(core)
    svc.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    svc.signal_stop()
    svc.join(2)
    assert not svc.alive
    assert time.monotonic() - t0 < 0.2


def test_due_round_without_progress_does_not_spin(service) -> None:
    # The core says the next message is due but its round moved nothing (its clock read just
    # before the deliver time): the level is looked at again after a millisecond, not in a
    # busy loop.
    class Stuck(FakeCore):
        def schedule_deliver(self, level: int, max_msgs: int) -> Step:
            with self.lock:
                self.calls.append((time.monotonic(), level, 0))
            return Step(0, 0, 0, int(time.time() * 1000) - 1, None)

    core = Stuck({1: 1000})
    svc = service(core)
    svc.start()
    time.sleep(0.2)
    n = len(_calls(core, 1))
    assert 20 <= n <= 250, n
