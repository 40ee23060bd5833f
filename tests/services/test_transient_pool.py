"""Transient store pool: appends go to locked write buffers, CommitRealTimeService commits them
into the segment files, and readers, dispatch and forces only ever see committed bytes."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import OpenStore
from rmqstore import GetMessageStatus, Message, PutMessageStatus
from rmqwire import SEGMENT, SMALL_STORE
from services.test_warming import can_lock, locked_kib

POOL = {"transient_store_pool_enable": True, "transient_store_pool_size": 2}
# The commit service never runs on its own: commits happen only when a test asks for them.
MANUAL = {
    **POOL,
    "wake_commit_when_put_message": False,
    "commit_interval_commit_log": 600_000,
    "commit_commit_log_thorough_interval": 600_000,
    "commit_commit_log_least_pages": 100_000,
}


def _file_bytes(store_path: Path, start: int, length: int) -> bytes:
    with open(store_path / "commitlog" / f"{0:020d}", "rb") as f:
        f.seek(start)
        return f.read(length)


def test_appends_are_invisible_until_committed(open_store: OpenStore, store_path: Path) -> None:
    store = open_store(**MANUAL)
    assert store.transient_store_pool_buffers() is not None
    r = store.put_message(Message("T", b"in-the-buffer", keys=["k1"]))
    assert r.status is PutMessageStatus.PUT_OK
    end = r.wrote_offset + r.wrote_bytes
    time.sleep(0.05)
    # Appended to the write buffer only: not in the file, not readable, not dispatched.
    assert _file_bytes(store_path, 0, end) == bytes(end)
    assert store.get_committed_where() == 0
    assert store.get_max_phy_offset() == 0
    assert store.dispatch_behind_bytes() == 0
    assert store.look_message_by_offset(0) is None
    assert store.get_message("g", "T", 0, 0).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert store.query_message("T", "k1") == []
    # flush() commits, then forces.
    assert store.flush() == end
    assert store.get_committed_where() == end
    assert store.get_max_phy_offset() == end
    assert b"in-the-buffer" in _file_bytes(store_path, 0, end)
    assert store.wait_dispatched()
    found = store.get_message("g", "T", 0, 0)
    assert found.status is GetMessageStatus.FOUND
    assert found.messages[0].body == b"in-the-buffer"
    assert [m.commit_log_offset for m in store.query_message("T", "k1")] == [0]


def test_the_commit_service_publishes_puts_promptly(open_store: OpenStore) -> None:
    store = open_store(**POOL)
    stats = store.service_stats()
    assert "CommitRealTimeService" in stats
    r = store.put_message(Message("T", b"soon"))
    assert r.ok
    started = time.monotonic()
    while store.get_message("g", "T", 0, 0).status is not GetMessageStatus.FOUND:
        assert time.monotonic() - started < 3, "a put was not committed within 3 s"
        time.sleep(0.005)
    # A put wakes the service; with less than 4 pages waiting it commits at the next thorough
    # round (every 200 ms).
    assert time.monotonic() - started < 1.5
    assert store.service_stats()["CommitRealTimeService"]["commits"] >= 1


def test_least_pages_hold_back_small_commits(open_store: OpenStore) -> None:
    store = open_store(**{**POOL, "commit_commit_log_thorough_interval": 600_000})
    time.sleep(0.3)  # past the first (thorough) round
    r = store.put_message(Message("T", b"x" * 100))
    assert r.ok
    time.sleep(0.5)
    assert store.get_max_phy_offset() == 0, "one small put is below 4 pages: not committed"
    # 4 pages' worth of puts crosses the threshold; the put wakes the service.
    for _ in range(20):
        assert store.put_message(Message("T", b"y" * 1000)).ok
    deadline = time.monotonic() + 3
    while store.get_max_phy_offset() < 4 * 4096 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert store.get_max_phy_offset() >= 4 * 4096


def test_rolling_segments_returns_buffers_and_an_empty_pool_writes_directly(
    open_small: OpenStore, store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # One buffer: the segment in use holds it, so the pre-allocated next one is written
    # directly through its mapping, and the buffer comes back when its segment is committed.
    with caplog.at_level(logging.WARNING, logger="rmqstore.transient_pool"):
        store = open_small(**{**POOL, "transient_store_pool_size": 1})
        sent = []
        for i in range(600):
            body = f"m{i}-".encode() * (4 + i % 160)
            r = store.put_message(Message("Roll", body, keys=[f"k{i}"], queue_id=i % 2))
            assert r.ok, r.status
            sent.append((r.wrote_offset, body))
        flushed = store.flush()
    assert flushed == store.get_max_phy_offset() == sent[-1][0] + r.wrote_bytes
    assert len(store.commitlog_segments()) >= 4
    assert any("transient store pool: 0 of 1 buffers left" in m for m in caplog.messages)
    assert store.wait_dispatched()
    for i, (offset, body) in enumerate(sent):
        m = store.look_message_by_offset(offset)
        assert m is not None
        assert m.body == body
        assert [x.commit_log_offset for x in store.query_message("Roll", f"k{i}")] == [offset]
    store.close()
    # Every buffer is back once the store is closed, and the files hold everything.
    reopened = open_small()
    assert reopened.recovery_report()["abnormal"] is False
    assert reopened.get_max_phy_offset() == flushed
    for offset, body in sent[::37]:
        m = reopened.look_message_by_offset(offset)
        assert m is not None
        assert m.body == body


def test_buffers_return_to_the_pool(open_store: OpenStore) -> None:
    store = open_store(**{**MANUAL, "transient_store_pool_size": 4})
    assert store.transient_store_pool_buffers() == (4, 4)
    assert store.put_message(Message("T", b"first")).ok
    # The segment in use and the pre-allocated next one have borrowed one each.
    deadline = time.monotonic() + 5
    while store.transient_store_pool_buffers() != (2, 4) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.transient_store_pool_buffers() == (2, 4)
    # Fill three segments: full segments give their buffers back once committed.
    for _ in range(3 * SEGMENT // 1000):
        assert store.put_message(Message("T", bytes(900))).ok
    store.flush()
    deadline = time.monotonic() + 5
    while store.transient_store_pool_buffers() != (2, 4) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.transient_store_pool_buffers() == (2, 4)


def test_clean_close_commits_what_the_buffers_hold(open_store: OpenStore) -> None:
    store = open_store(**MANUAL)
    offsets = [store.put_message(Message("T", f"b{i}".encode())).wrote_offset for i in range(50)]
    assert store.get_max_phy_offset() == 0
    store.close()
    # Reopened without the pool: everything was committed and forced at close.
    reopened = open_store()
    assert reopened.recovery_report()["abnormal"] is False
    for i, offset in enumerate(offsets):
        m = reopened.look_message_by_offset(offset)
        assert m is not None
        assert m.body == f"b{i}".encode()
    assert reopened.get_max_offset_in_queue("T", 0) == 50


def test_sync_flush_puts_are_committed_and_forced(open_store: OpenStore) -> None:
    store = open_store(**{**MANUAL, "flush_disk_type": "SYNC_FLUSH"})
    r = store.put_message(Message("T", b"durable"))
    assert r.status is PutMessageStatus.PUT_OK
    end = r.wrote_offset + r.wrote_bytes
    # Acknowledged means committed and forced, though the commit service never ran.
    assert store.get_committed_where() >= end
    assert store.get_flushed_where() >= end
    assert store.wait_dispatched()
    assert store.get_message("g", "T", 0, 0).status is GetMessageStatus.FOUND


def test_truncate_files_with_uncommitted_appends(open_small: OpenStore) -> None:
    store = open_small(**MANUAL)
    results = [store.put_message(Message("T", f"v{i}".encode() * 50)) for i in range(200)]
    cut = results[120].wrote_offset
    assert store.truncate_files(cut) is True
    assert store.get_max_phy_offset() == cut
    assert store.wait_dispatched()
    assert store.get_max_offset_in_queue("T", 0) == 120
    r = store.put_message(Message("T", b"after"))
    assert (r.wrote_offset, r.queue_offset) == (cut, 120)
    store.flush()
    assert store.look_message_by_offset(cut).body == b"after"


@pytest.mark.skipif(not can_lock(), reason="this process may not mlock 1 MiB")
def test_pool_buffers_are_locked_in_memory(tmp_path: Path, open_store: OpenStore) -> None:
    before = locked_kib()
    store = open_store(tmp_path / "locked", mapped_file_size_commit_log=1 << 20, **POOL)
    assert locked_kib() - before >= 2 * 1024
    store.close()
    assert locked_kib() == before


def test_pool_settings_reach_the_store(open_store: OpenStore) -> None:
    store = open_store(**{**SMALL_STORE, **POOL, "transient_store_pool_size": 3})
    buffers = store.transient_store_pool_buffers()
    assert buffers is not None
    assert buffers[1] == 3
    plain = open_store(Path(str(store.store_path) + "-plain"))
    assert plain.transient_store_pool_buffers() is None
    assert "CommitRealTimeService" not in plain.service_stats()
    assert plain.put_message(Message("T", b"x")).ok
    assert plain.get_committed_where() == plain.get_max_phy_offset() > 0


KILLED_WRITER = """
import os, signal, sys
import rmqstore
store = rmqstore.MessageStore(sys.argv[1], mapped_file_size_commit_log=65536,
    transient_store_pool_enable=True, wake_commit_when_put_message=False,
    commit_interval_commit_log=600000, commit_commit_log_thorough_interval=600000,
    commit_commit_log_least_pages=100000)
store.put_message(rmqstore.Message("T", b"committed", keys=["c"]))
store.flush()
for i in range(100):
    assert store.put_message(rmqstore.Message("T", b"buffered-%d" % i, keys=["b"])).ok
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_writer_loses_only_what_was_not_committed(
    open_store: OpenStore, store_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(store_path)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr
    store = open_store(**POOL)
    assert store.recovery_report()["abnormal"] is True
    assert store.wait_dispatched()
    # The committed message survived; the buffered ones never reached the file.
    assert store.get_max_offset_in_queue("T", 0) == 1
    assert [m.body for m in store.query_message("T", "c")] == [b"committed"]
    assert store.query_message("T", "b") == []
    r = store.put_message(Message("T", b"next"))
    assert r.ok
    assert r.queue_offset == 1
