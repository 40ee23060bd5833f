"""Issue 17, delay levels end to end: a message put with ``delay_level`` waits in
``SCHEDULE_TOPIC_XXXX`` and reaches its real topic and queue once due (RocketMQ's
``ScheduleMessageService`` and ``messageTimeUp``), in order per level, with its tags filterable;
the progress is kept in ``config/delayOffset.json`` across close, reopen and a damaged file."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import rmqstore
from rmqstore import GetMessageStatus, Message, MessageStore, PutMessageStatus, ScheduleLevelStats
from schedule.schedhelp import SCHEDULE_TOPIC, pending, read_queue, wait_delivered, wait_until

Open = Callable[..., MessageStore]


def _put(store: MessageStore, msg: Message) -> rmqstore.PutMessageResult:
    r = store.put_message(msg)
    assert r.status is PutMessageStatus.PUT_OK, r.status
    return r


def test_delivered_to_real_queue_after_the_delay(open_sched: Open) -> None:
    store = open_sched()
    t0 = time.time() * 1000
    r1 = _put(store, Message("Real", b"one", tags="TagA", keys=["k1"], queue_id=2, delay_level=1))
    r2 = _put(store, Message("Real", b"two", tags="TagB", queue_id=3, delay_level=2))
    assert store.wait_dispatched()
    # Stored in the schedule topic, queue level - 1; nothing in the real topic yet.
    assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 1
    assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 1) == 1
    assert store.get_max_offset_in_queue("Real", 2) == 0
    stats = store.schedule_stats()
    assert [s.level for s in stats] == [1, 2]
    assert [s.delay_ms for s in stats] == [1000, 2000]
    assert [(s.offset, s.max_offset, s.pending) for s in stats] == [(0, 1, 1), (0, 1, 1)]
    assert stats[0].oldest_due_ms == r1.store_timestamp + 1000
    assert stats[1].oldest_due_ms == r2.store_timestamp + 2000
    assert all(isinstance(s, ScheduleLevelStats) for s in stats)

    wait_until(lambda: store.get_max_offset_in_queue("Real", 2) == 1, 3, "level 1 delivered")
    assert time.time() * 1000 - t0 >= 1000
    assert store.get_max_offset_in_queue("Real", 3) == 0  # level 2 is not due yet
    wait_until(lambda: store.get_max_offset_in_queue("Real", 3) == 1, 3, "level 2 delivered")
    (one,) = read_queue(store, "Real", 2)
    (two,) = read_queue(store, "Real", 3)
    assert (one.body, one.tags, one.keys, one.queue_offset) == (b"one", "TagA", ["k1"], 0)
    assert (two.body, two.tags) == (b"two", "TagB")
    assert one.store_timestamp >= r1.store_timestamp + 1000
    assert two.store_timestamp >= r2.store_timestamp + 2000
    assert store.schedule_offsets() == {1: 1, 2: 1}
    assert pending(store) == 0
    assert [s.oldest_due_ms for s in store.schedule_stats()] == [None, None]


def test_tag_filter_and_real_queues(open_sched: Open) -> None:
    store = open_sched()
    for i in range(12):
        _put(
            store,
            Message("Filt", f"m{i}".encode(), tags=f"T{i % 3}", queue_id=i % 2, delay_level=1),
        )
    wait_delivered(store, 4)
    assert store.wait_dispatched()
    # The consume queue tag code was recomputed from TAGS (the schedule queue held the deliver
    # time there), so a tag subscription filters the delivered messages.
    for q in (0, 1):
        got = read_queue(store, "Filt", q, "T1")
        assert [m.body for m in got] == [
            f"m{i}".encode() for i in range(12) if i % 2 == q and i % 3 == 1
        ]
        assert all(m.tags == "T1" for m in got)
    assert store.get_message("g", "Filt", 0, 0, 32, "NoSuchTag").status in (
        GetMessageStatus.NO_MATCHED_MESSAGE,
        GetMessageStatus.OFFSET_FOUND_NULL,
    )
    assert store.query_message_by_tag  # the store stays usable for every read


def test_order_per_level(open_sched: Open) -> None:
    store = open_sched()
    n = 300
    for i in range(n):
        _put(store, Message("Ord", str(i).encode(), queue_id=0, delay_level=1 + i % 2))
    wait_delivered(store, 5)
    assert store.wait_dispatched()
    got = [int(m.body) for m in read_queue(store, "Ord", 0)]
    assert sorted(got) == list(range(n))
    # Within one level, the put order; level 1's messages all come before level 2's due ones
    # only as far as their deliver times say, so check each level alone.
    assert [i for i in got if i % 2 == 0] == list(range(0, n, 2))
    assert [i for i in got if i % 2 == 1] == list(range(1, n, 2))


def test_properties_as_message_time_up_writes_them(open_sched: Open) -> None:
    """RocketMQ's ``messageTimeUp`` (4.9.8 store, 5.5.1 broker) builds the properties string
    from the stored message's properties before it clears ``DELAY`` (and, in 5.x,
    ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC``) and sets ``WAIT=false`` on the map; the
    commitlog encoder writes that string, so the delivered record carries the schedule
    record's properties unchanged: ``REAL_TOPIC``, ``REAL_QID`` and ``DELAY`` included."""
    store = open_sched()
    r = _put(
        store,
        Message(
            "Props",
            b"p",
            tags="TagP",
            keys=["a", "b"],
            queue_id=1,
            properties={"user": "v", "UNIQ_KEY": "U1"},
            delay_level=1,
        ),
    )
    assert store.wait_dispatched()
    scheduled = store.look_message_by_offset(r.wrote_offset)
    assert scheduled is not None
    assert scheduled.topic == SCHEDULE_TOPIC
    assert scheduled.properties["REAL_TOPIC"] == "Props"
    assert scheduled.properties["REAL_QID"] == "1"
    assert scheduled.properties["DELAY"] == "1"
    wait_until(lambda: store.get_max_offset_in_queue("Props", 1) == 1, 3, "delivered")
    (m,) = read_queue(store, "Props", 1)
    assert m.topic == "Props"
    assert m.queue_id == 1
    assert m.properties == scheduled.properties
    assert (m.tags, m.keys, m.body, m.flag) == ("TagP", ["a", "b"], b"p", scheduled.flag)
    assert m.born_timestamp == scheduled.born_timestamp
    assert m.sys_flag == scheduled.sys_flag
    assert m.commit_log_offset > scheduled.commit_log_offset


def test_level_past_the_table_is_clamped(open_sched: Open) -> None:
    store = open_sched()
    _put(store, Message("Clamp", b"x", delay_level=18))
    assert store.wait_dispatched()
    assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 1) == 1  # level 2, the last one
    assert [s.pending for s in store.schedule_stats()] == [0, 1]


def test_delay_offset_file_written_and_reloaded(open_sched: Open, store_path: Path) -> None:
    store = open_sched()
    for i in range(5):
        _put(store, Message("File", bytes([i]), delay_level=1))
    _put(store, Message("File", b"later", delay_level=2))
    wait_until(lambda: store.schedule_offsets()[1] == 5, 3, "level 1 delivered")
    path = store_path / "config" / "delayOffset.json"
    # Written during the run (every flush_delay_offset_interval, here 200 ms), not only at
    # close.
    wait_until(
        lambda: path.exists() and json.loads(path.read_text())["offsetTable"].get("1") == 5,
        2,
        "delayOffset.json written by the service",
    )
    store.close()
    doc = json.loads(path.read_text())
    assert doc["offsetTable"]["1"] == 5
    assert doc["offsetTable"]["2"] in (0, 1)
    version = doc["dataVersion"]
    assert set(version) == {"counter", "stateVersion", "timestamp"}
    # The offsets were read before the file was written (the file system's clock is coarse:
    # its mtime may lag the wall clock by a tick).
    assert version["timestamp"] <= os.stat(path).st_mtime_ns // 10**6 + 20
    assert (store_path / "config" / "delayOffset.json.bak").exists()
    store = open_sched()
    assert store.schedule_offsets()[1] == 5
    wait_delivered(store, 3)
    assert len(read_queue(store, "File", 0)) == 6


@pytest.mark.parametrize(("stored", "expected"), [(999, 3), (-5, 0), (2, 2)])
def test_offsets_clamped_at_load(
    open_sched: Open, store_path: Path, stored: int, expected: int
) -> None:
    # Level 2's queue holds 3 messages that are not due for a while (the level is 1 h here).
    store = open_sched(message_delay_level="1s 1h")
    for i in range(3):
        _put(store, Message("Clamp", bytes([i]), delay_level=2))
    store.close()
    path = store_path / "config" / "delayOffset.json"
    path.write_text(json.dumps({"offsetTable": {"1": 0, "2": stored, "7": 4}}))
    store = open_sched(message_delay_level="1s 1h")
    assert store.schedule_offsets()[2] == expected
    stats = store.schedule_stats()[1]
    assert (stats.offset, stats.max_offset, stats.pending) == (expected, 3, 3 - expected)
    store.close()
    # Entries of levels the table does not have are kept.
    assert json.loads(path.read_text())["offsetTable"]["7"] == 4


def test_close_and_reopen_continue(open_sched: Open) -> None:
    store = open_sched()
    for i in range(10):
        _put(store, Message("Cont", str(i).encode(), delay_level=1 + i % 2))
    store.close()  # before anything is due
    store = open_sched()
    assert pending(store) == 10
    wait_delivered(store, 4)
    store.close()
    store = open_sched()
    time.sleep(0.3)
    assert store.wait_dispatched()
    got = [int(m.body) for m in read_queue(store, "Cont", 0)]
    assert sorted(got) == list(range(10))  # each exactly once


def test_due_at_open_is_delivered_at_once(open_sched: Open) -> None:
    """RocketMQ's tasks first run 1 s after start (``FIRST_DELAY_TIME``); an opened store has
    recovered already, so messages that fell due while it was closed go out at once."""
    store = open_sched()
    for i in range(20):
        _put(store, Message("Open", bytes([i]), delay_level=1))
    store.close()
    time.sleep(1.1)
    start = time.monotonic()
    store = open_sched()
    took = wait_until(lambda: store.get_max_offset_in_queue("Open", 0) == 20, 3, "delivered")
    assert time.monotonic() - start < 0.9, took


def test_damaged_delay_offset_file(open_sched: Open, store_path: Path) -> None:
    store = open_sched()
    _put(store, Message("Dmg", b"x", delay_level=1))
    wait_delivered(store, 3)
    store.close()
    config = store_path / "config"
    # A torn file with a good .bak: the .bak is loaded (the previous version), the open goes
    # on, and what the .bak does not count is not delivered twice.
    (config / "delayOffset.json").write_bytes(b'{"offsetTable": {"1": ')
    store = open_sched()
    assert store.schedule_offsets()[1] == 1
    time.sleep(0.3)
    assert store.get_max_offset_in_queue("Dmg", 0) == 1
    store.close()
    # Neither file usable: the open is refused with the file named, and nothing changes.
    (config / "delayOffset.json").write_bytes(b"garbage")
    (config / "delayOffset.json.bak").write_bytes(b"garbage too")
    before = sorted((p.name, p.stat().st_size) for p in config.iterdir())
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        open_sched()
    assert info.value.path == str(config / "delayOffset.json")
    assert sorted((p.name, p.stat().st_size) for p in config.iterdir()) == before
    # Removing the bad files opens the store again (the lock was released).
    (config / "delayOffset.json").unlink()
    (config / "delayOffset.json.bak").unlink()
    store = open_sched()
    store.close()


def test_read_only_store_runs_no_schedule(open_sched: Open, store_path: Path) -> None:
    store = open_sched()
    _put(store, Message("RO", b"x", delay_level=2))
    store.close()
    with MessageStore(store_path, read_only=True, message_delay_level="1s 2s") as ro:
        assert "ScheduleMessageService" not in ro.service_stats()
        with pytest.raises(rmqstore.StoreReadOnlyError, match=r"delayOffset\.json"):
            ro.schedule_stats()
        with pytest.raises(rmqstore.StoreReadOnlyError):
            ro.schedule_offsets()
        time.sleep(0.1)
    assert not (store_path / "config" / "delayOffset.json").exists()


def test_service_stats(open_sched: Open) -> None:
    store = open_sched()
    _put(store, Message("St", b"x", delay_level=1))
    wait_delivered(store, 3)
    stats = store.service_stats()["ScheduleMessageService"]
    assert stats["alive"] == 1.0
    assert stats["delivered"] == 1.0
    assert stats["failures"] == 0.0
