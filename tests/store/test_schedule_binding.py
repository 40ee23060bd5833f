"""The delay levels' calls of the core ``Store`` (``MessageStore._core``): what the Python
schedule service builds on. One delivery round per call, the progress table, the figures."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import rmqstore
from conftest import OpenStore
from rmqstore import Message

LEVELS = "1s 2s"


def _delayed(i: int, level: str = "1") -> Message:
    return Message("Real", b"body-%d" % i, queue_id=i % 2, tags="TagA", properties={"DELAY": level})


def test_a_round_delivers_due_messages_into_their_real_queues(open_store: OpenStore) -> None:
    store = open_store(message_delay_level=LEVELS)
    core = store._core
    assert core.schedule_levels() == [1000, 2000]
    puts = [store.put_message(_delayed(i)) for i in range(5)]
    assert store.wait_dispatched()
    stats = core.schedule_stats()
    level, delay_ms, offset, max_offset, pending, oldest_due = stats[0]
    assert (level, delay_ms, offset, max_offset, pending) == (1, 1000, 0, 5, 5)
    assert oldest_due == puts[0].store_timestamp + 1000
    assert stats[1] == (2, 2000, 0, 0, 0, None)
    step = core.schedule_deliver(1, 100)
    assert (step.delivered, step.dropped, step.offset, step.status) == (0, 0, 0, None)
    assert step.next_due_ms == oldest_due
    time.sleep(max(0.0, (oldest_due - time.time() * 1000) / 1000) + 0.05)
    while True:
        step = core.schedule_deliver(1, 2)
        assert step.status is None
        if step.next_due_ms is None or step.next_due_ms > time.time() * 1000:
            if step.offset == 5:
                break
            time.sleep(0.05)
    assert step.next_due_ms is None
    assert core.schedule_offsets() == {1: 5, 2: 0}
    assert store.wait_dispatched()
    assert store.get_max_offset_in_queue("Real", 0) + store.get_max_offset_in_queue("Real", 1) == 5
    got = store.get_message("g", "Real", 0, 0, 32)
    assert [m.body for m in got.messages] == [b"body-0", b"body-2", b"body-4"]
    # The copy keeps the original's properties (RocketMQ's messageTimeUp stores them as read).
    assert got.messages[0].properties["REAL_TOPIC"] == "Real"
    assert got.messages[0].properties["DELAY"] == "1"
    assert repr(step).startswith("ScheduleStep(delivered=")


def test_load_clamps_and_counts_copies_made_after_the_save(open_store: OpenStore) -> None:
    store = open_store(message_delay_level=LEVELS)
    core = store._core
    for i in range(4):
        store.put_message(_delayed(i))
    assert store.wait_dispatched()
    saved_at = int(time.time() * 1000)
    assert core.schedule_load({1: 99, 2: -5, 9: 3}, saved_at) == {1: 4, 2: 0, 9: 3}
    assert core.schedule_load({}, 0) == {1: 0, 2: 0}
    with pytest.raises(rmqstore.RmqStoreError, match="delay level 3"):
        core.schedule_deliver(3, 1)


def test_a_read_only_store_refuses_delivery_and_load(
    open_store: OpenStore, store_path: Path
) -> None:
    writer = open_store(message_delay_level=LEVELS)
    writer.put_message(_delayed(0))
    assert writer.wait_dispatched()
    reader = open_store(store_path, read_only=True, message_delay_level=LEVELS)
    with pytest.raises(rmqstore.StoreReadOnlyError):
        reader._core.schedule_deliver(1, 1)
    with pytest.raises(rmqstore.StoreReadOnlyError):
        reader._core.schedule_load({}, 0)
    assert reader._core.schedule_stats()[0][3] == 1
