"""Timer messages (RocketMQ 5.x ``TimerMessageStore``) through the Python API, with the timer
services running: delivery when due at 100 ms precision, order, cancellation, roll, past
deliver times, statuses, reopen, and the files RocketMQ reads."""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

import pytest
from rmqstore import Message, MessageStore, PutMessageStatus

TIMER_TOPIC = "rmq_sys_wheel_timer"

TIMER = {
    "mapped_file_size_commit_log": 1024 * 1024,
    "mapped_file_size_consume_queue": 20 * 2000,
    "max_hash_slot_num": 512,
    "max_index_num": 4000,
    "timer_precision_ms": 100,
    "timer_flush_interval_ms": 100,
    "flush_interval_commit_log": 10,
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def timer_msg(topic: str, key: str, queue_id: int = 1, **props: str) -> Message:
    return Message(topic, key.encode(), queue_id=queue_id, properties={"UNIQ_KEY": key, **props})


def slot(deliver_ms: int, precision_ms: int = 100) -> int:
    if deliver_ms % precision_ms == 0:
        return deliver_ms - precision_ms
    return deliver_ms // precision_ms * precision_ms


def read_all(store: MessageStore, topic: str, queue_id: int) -> list[Any]:
    store.wait_dispatched()
    out: list[Any] = []
    offset = 0
    while True:
        r = store.get_message("g", topic, queue_id, offset, 32)
        if not r.messages:
            return out
        out.extend(r.messages)
        offset = r.next_begin_offset


def wait_for(store: MessageStore, topic: str, queue_id: int, n: int, timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        got = read_all(store, topic, queue_id)
        if len(got) >= n or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


def test_due_messages_arrive_on_time_in_order(tmp_path: Path) -> None:
    with MessageStore(tmp_path / "s", **TIMER) as store:
        base = now_ms() + 300
        deliver = {}
        for i in range(40):
            d = base + (i % 8) * 70
            deliver[f"k{i}"] = d
            r = store.put_message(timer_msg("T", f"k{i}", TIMER_DELIVER_MS=str(d)))
            assert r.status is PutMessageStatus.PUT_OK
        store.wait_dispatched()
        assert store.get_max_offset_in_queue(TIMER_TOPIC, 0) == 40
        got = wait_for(store, "T", 1, 40, 10)
        keys = [m.body.decode() for m in got]
        assert sorted(keys) == sorted(deliver)
        # Never early; late by at most the precision and the services' pacing.
        late = sorted(m.store_timestamp - deliver[m.body.decode()] for m in got)
        assert late[0] >= 0, late
        assert late[int(len(late) * 0.99) - 1] <= 100 + 100, late
        # In slot order (deliver times rounded down to the 100 ms precision, an exact multiple
        # one step earlier); within a slot, in put order.
        order = [(slot(deliver[k]), int(k[1:])) for k in keys]
        assert order == sorted(order)
        m = got[0]
        # As RocketMQ's convertMessage writes it: REAL_TOPIC/REAL_QID kept, no WAIT.
        assert (m.properties.get("REAL_TOPIC"), m.properties.get("REAL_QID")) == ("T", "1")
        assert "WAIT" not in m.properties
        assert "TIMER_OUT_MS" in m.properties
        assert "TIMER_DEQUEUE_MS" in m.properties
        stats = store.timer_stats()
        assert stats["delivered"] == 40
        assert stats["pending"] == 0


def test_cancel_drops_a_pending_message(tmp_path: Path) -> None:
    with MessageStore(tmp_path / "s", **TIMER) as store:
        for k in ("keep", "gone"):
            store.put_message(timer_msg("T", k, TIMER_DELAY_MS="600"))
        store.wait_dispatched()
        r = store.cancel_timer("T", "gone")
        assert r.status is PutMessageStatus.PUT_OK
        got = wait_for(store, "T", 1, 1, 5)
        time.sleep(0.5)
        assert [m.body.decode() for m in read_all(store, "T", 1)] == ["keep"]
        assert read_all(store, "T", 0) == []
        assert store.timer_stats()["deleted"] == 1
        assert [m.body for m in got] == [b"keep"]
        # Too late to cancel: the deliver time has passed.
        late = store.cancel_timer("T", "keep")
        assert late.status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL


def test_long_delays_roll_back_through_the_timer_topic(tmp_path: Path) -> None:
    # A 500 ms roll window: a 1.5 s delay rolls at least once.
    with MessageStore(tmp_path / "s", **{**TIMER, "timer_roll_window_slot": 5}) as store:
        d = now_ms() + 1500
        store.put_message(timer_msg("T", "far", TIMER_DELIVER_MS=str(d)))
        got = wait_for(store, "T", 1, 1, 10)
        assert len(got) == 1
        assert got[0].store_timestamp >= d
        assert int(got[0].properties["TIMER_ROLL_TIMES"]) >= 1
        assert store.timer_stats()["rolled"] >= 1


def test_past_deliver_times_and_statuses(tmp_path: Path) -> None:
    with MessageStore(tmp_path / "s", **TIMER) as store:
        r = store.put_message(timer_msg("T", "past", TIMER_DELIVER_MS=str(now_ms() - 10)))
        assert r.status is PutMessageStatus.PUT_OK
        assert [m.body for m in read_all(store, "T", 1)] == [b"past"]
        assert store.get_max_offset_in_queue(TIMER_TOPIC, 0) == 0
        too_long = str(3 * 24 * 3600 + 1)
        r = store.put_message(timer_msg("T", "x", TIMER_DELAY_SEC=too_long))
        assert r.status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
        r = store.put_message(timer_msg("T", "x", TIMER_DELAY_MS="later"))
        assert r.status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
    with MessageStore(tmp_path / "off", **TIMER, timer_wheel_enable=False) as store:
        r = store.put_message(timer_msg("T", "x", TIMER_DELAY_MS="1000"))
        assert r.status is PutMessageStatus.WHEEL_TIMER_NOT_ENABLE
        assert store.cancel_timer("T", "x", 5).status is PutMessageStatus.WHEEL_TIMER_NOT_ENABLE
        assert not (tmp_path / "off" / "timerwheel").exists()


def test_a_bad_precision_is_a_config_error() -> None:
    from rmqstore import StoreConfig
    from rmqstore.errors import StoreConfigError

    with pytest.raises(StoreConfigError, match="timer_precision_ms: must be 100, 200, 500"):
        StoreConfig(timer_precision_ms=300)


def test_reopen_delivers_what_was_pending_once(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with MessageStore(path, **TIMER) as store:
        d = now_ms() + 800
        for i in range(10):
            store.put_message(timer_msg("T", f"r{i}", TIMER_DELIVER_MS=str(d)))
        deadline = time.monotonic() + 5
        while store.timer_stats()["enqueued"] < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert read_all(store, "T", 1) == []
    # RocketMQ's files: the wheel at its exact length, the checkpoint page.
    assert (path / "timerwheel").stat().st_size == 38_707_200
    ck = (path / "config" / "timercheck").read_bytes()
    assert len(ck) == 4096
    _read_ms, _flush_pos, queue_offset, master = struct.unpack(">qqqq", ck[:32])
    assert queue_offset == master == 10
    with MessageStore(path, **TIMER) as store:
        got = wait_for(store, "T", 1, 10, 5)
        time.sleep(0.3)
        got = read_all(store, "T", 1)
        assert sorted(m.body.decode() for m in got) == [f"r{i}" for i in range(10)]
        assert all(m.store_timestamp >= d for m in got)


def test_timer_calls_on_a_disabled_or_read_only_store(tmp_path: Path) -> None:
    from rmqstore.errors import InvalidArgumentError, StoreReadOnlyError

    path = tmp_path / "s"
    with (
        MessageStore(path, **TIMER, timer_wheel_enable=False) as store,
        pytest.raises(InvalidArgumentError, match="timer_wheel_enable"),
    ):
        store.timer_stats()
    with MessageStore(path, **TIMER) as store:
        store.put_message(timer_msg("T", "k", TIMER_DELAY_MS="60000"))
        store.wait_dispatched()
        with MessageStore(path, **TIMER, read_only=True) as reader:
            with pytest.raises(StoreReadOnlyError):
                reader.cancel_timer("T", "k")
            with pytest.raises(StoreReadOnlyError):
                reader.timer_stats()
            # The reader sees the timer topic as any other.
            assert reader.get_max_offset_in_queue(TIMER_TOPIC, 0) == 1
