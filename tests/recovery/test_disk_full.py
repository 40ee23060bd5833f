"""A full disk gives clear statuses, no crash, a readable store and a clean restart. The disk is
a small tmpfs the test mounts (root only; otherwise the test is skipped and says why)."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rmqstore import Message, MessageStore, PutMessageStatus, StoreIOError
from rmqstore._services import ReputMessageService

SMALL = {
    "mapped_file_size_commit_log": 1024 * 1024,
    "mapped_file_size_consume_queue": 20 * 200,
    "max_hash_slot_num": 64,
    "max_index_num": 200,
}


def _mount(where: Path, size: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    return r.returncode == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    fs = tmp_path / "fs"
    if os.geteuid() != 0 or not _mount(fs, "4m"):
        pytest.skip("needs root to mount a 4 MiB tmpfs (a real full disk)")
    try:
        yield fs
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)


def _used(path: Path) -> float:
    st = os.statvfs(path)
    used = st.f_blocks - st.f_bfree
    return used / (used + st.f_bavail)


def test_full_disk_refuses_puts_and_recovers(small_disk: Path) -> None:
    store_path = small_disk / "store"
    store = MessageStore(store_path, **SMALL)
    ok = [store.put_message(Message("D", b"x" * 500, keys=f"k{i}")) for i in range(20)]
    assert all(r.status is PutMessageStatus.PUT_OK for r in ok)
    # Fill the disk to above 90 % with someone else's file.
    ballast = small_disk / "ballast"
    with open(ballast, "wb") as f:
        while _used(small_disk) < 0.93:
            try:
                f.write(b"\0" * 65536)
                f.flush()
            except OSError:
                break
    assert store._core.check_disk_space() > 0.9
    r = store.put_message(Message("D", b"refused"))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert not r.ok
    assert store.put_messages("D", 0, [b"a", b"b"]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    # Still readable.
    assert store.wait_dispatched()
    assert store.look_message_by_offset(ok[5].wrote_offset).keys == ["k5"]
    assert [m.keys for m in store.query_message("D", "k7")] == [["k7"]]
    # Space returns: puts are accepted again.
    ballast.unlink()
    store._core.check_disk_space()
    assert store.put_message(Message("D", b"back", keys="back")).status is PutMessageStatus.PUT_OK
    store.close()
    with MessageStore(store_path, **SMALL) as again:
        assert again.recovery_report()["abnormal"] is False
        assert again.wait_dispatched()
        assert [m.body for m in again.query_message("D", "back")] == [b"back"]


def test_segment_allocation_fails_cleanly_when_the_disk_is_full(small_disk: Path) -> None:
    store_path = small_disk / "store"
    store = MessageStore(store_path, **SMALL)
    statuses: list[PutMessageStatus] = []
    last_ok = None
    for i in range(20_000):
        r = store.put_message(Message("D", b"y" * 900, keys=f"k{i}"))
        statuses.append(r.status)
        if r.status is PutMessageStatus.PUT_OK:
            last_ok = r
        elif len(statuses) > 5 and all(s is not PutMessageStatus.PUT_OK for s in statuses[-5:]):
            break
    failures = {s for s in statuses if s is not PutMessageStatus.PUT_OK}
    assert failures, "the disk never filled up"
    assert failures <= {
        PutMessageStatus.CREATE_MAPPED_FILE_FAILED,
        PutMessageStatus.SERVICE_NOT_AVAILABLE,
    }
    assert last_ok is not None
    end = last_ok.wrote_offset + last_ok.wrote_bytes
    # The segment that could not be followed ends with its blank record (written before the
    # next segment is asked for, as RocketMQ does).
    seg = SMALL["mapped_file_size_commit_log"]
    assert store.get_max_phy_offset() in (end, (end // seg + 1) * seg)
    assert store.look_message_by_offset(last_ok.wrote_offset) is not None
    store.close()
    # Nothing partial after a restart, and every accepted message is there.
    with MessageStore(store_path, **SMALL) as again:
        assert again.get_max_phy_offset() == end
        assert again.recovery_report()["stop_reason"] is None
        assert again.look_message_by_offset(last_ok.wrote_offset).body == b"y" * 900


def test_os_page_cache_busy_when_the_append_lock_is_held_too_long(open_small) -> None:
    store = open_small(mapped_file_size_commit_log=64 * 1024, os_page_cache_busy_timeout_mills=100)
    # With the allocation service paused, the put that rolls to a new segment waits for it
    # (up to 5 s) while holding the append lock.
    store._pause_service("AllocateMappedFileService")
    rolling: list = []

    def fill() -> None:
        while True:
            r = store.put_message(Message("B", b"z" * 1000))
            if store.get_max_phy_offset() < 64 * 1024 and r.ok:
                continue
            rolling.append(r)
            return

    writer = threading.Thread(target=fill)
    writer.start()
    time.sleep(0.5)
    busy = store.put_message(Message("B", b"other"))
    writer.join()
    assert busy.status is PutMessageStatus.OS_PAGE_CACHE_BUSY
    assert not busy.ok
    assert rolling[0].status is PutMessageStatus.PUT_OK
    assert store.put_message(Message("B", b"later")).status is PutMessageStatus.PUT_OK


def test_close_with_dispatch_behind_keeps_the_abort_marker(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A consume queue file bigger than the disk: the message is stored, dispatch cannot
    build its queue, so close reports it and keeps ``abort``; the next open (with a queue
    size that fits) recovers as after a crash and dispatches the message."""
    monkeypatch.setattr(ReputMessageService, "retry_seconds", 0.005)
    path = small_disk / "store"
    too_big = {**SMALL, "mapped_file_size_consume_queue": 20 * 250_000}
    store = MessageStore(path, **too_big)
    with caplog.at_level(logging.ERROR, logger="rmqstore.services"):
        assert store.put_message(Message("T", b"x", keys="k")).status is PutMessageStatus.PUT_OK
        assert not store.wait_dispatched(timeout=1.0)
        failures = store.service_stats()["ReputMessageService"]["failures"]
    assert failures >= 20
    # One traceback for the run of failures, then a line per 60 failures: no log flood.
    records = [r for r in caplog.records if r.name == "rmqstore.services"]
    assert sum(1 for r in records if r.exc_info) == 1
    assert len(records) <= 2 + failures // ReputMessageService.repeat_log_every
    with pytest.raises(StoreIOError) as info:
        store.close()
    assert info.value.errno == errno.ENOSPC
    assert (path / "abort").exists()
    # No partial queue file was left behind.
    assert not list((path / "consumequeue").rglob("0000*"))
    with MessageStore(path, **SMALL) as again:
        assert again.recovery_report()["abnormal"] is True
        assert again.wait_dispatched()
        got = again.get_message("g", "T", 0, 0)
        assert [m.body for m in got.messages] == [b"x"]
        assert [m.body for m in again.query_message("T", "k")] == [b"x"]
    assert not (path / "abort").exists()
