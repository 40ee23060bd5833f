"""Disk protection and cleaning by disk usage on a real small file system: a tmpfs the test
mounts (root only; otherwise skipped, as ``tests/recovery/test_disk_full.py``). Segments are
created with their blocks reserved, so each one takes its size on the tmpfs."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from recovery.test_disk_full import _mount, _used
from rmqstore import Message, MessageStore, PutMessageStatus, RunningFlags
from rmqstore._clean import CleanCommitLogService, CleanConsumeQueueService

KiB = 1024
SEG = 256 * KiB
FILES = {
    "mapped_file_size_commit_log": SEG,
    "mapped_file_size_consume_queue": 20 * 50,
    "max_hash_slot_num": 64,
    "max_index_num": 50,
}
BOTH = RunningFlags.DISK_FULL | RunningFlags.LOGIC_DISK_FULL


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mounts tmpfs file systems of a given size (``"4m"``); all unmounted at teardown."""
    mounted: list[Path] = []

    def _make(size: str) -> Path:
        fs = tmp_path / f"fs{len(mounted)}"
        if os.geteuid() != 0 or not _mount(fs, size):
            pytest.skip(f"needs root to mount a {size} tmpfs (a real small disk)")
        mounted.append(fs)
        return fs

    yield _make
    for fs in mounted:
        subprocess.run(["umount", "-l", str(fs)], check=False)


@pytest.fixture
def open_on(tmpfs: Callable[[str], Path]) -> Iterator[Callable[..., MessageStore]]:
    """Opens a store on a new tmpfs of ``size``; all closed at teardown."""
    opened: list[MessageStore] = []

    def _open(size: str, **overrides: Any) -> MessageStore:
        store = MessageStore(tmpfs(size) / "store", **{**FILES, **overrides})
        opened.append(store)
        return store

    yield _open
    for store in reversed(opened):
        store.close()


def _hours_not_now() -> str:
    return str((time.localtime().tm_hour + 12) % 24)


def _put(store: MessageStore, i: int) -> PutMessageStatus:
    return store.put_message(Message("D", b"%06d" % i + b"d" * 4090, keys=f"k{i}")).status


def _fill_until(store: MessageStore, used: float) -> int:
    """Puts 4 KiB messages until the store's disk is more than ``used`` full (or a put is
    refused); returns how many were put."""
    fs = store.store_path
    for i in range(100_000):
        if _used(fs) > used or _put(store, i) is not PutMessageStatus.PUT_OK:
            # Everything dispatched and forced: no service holds an old segment any more.
            assert store.wait_dispatched()
            store.flush()
            return i
    raise AssertionError("the disk never filled")


def _wait(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _segments(store: MessageStore) -> list[str]:
    """The commitlog's segment paths as str, oldest first."""
    return [str(p) for p in store.commitlog_segments()]


def _age(paths: list[str], hours: float) -> None:
    t = time.time() - hours * 3600
    for p in paths:
        os.utime(p, (t, t))


def test_disk_full_is_set_and_cleared_with_the_disk(open_on: Callable[..., MessageStore]) -> None:
    store = open_on("8m")
    assert _put(store, 0) is PutMessageStatus.PUT_OK
    assert store.running_flags == RunningFlags(0)
    fs = store.store_path.parent
    ballast = fs / "ballast"
    with open(ballast, "wb") as f:
        while _used(fs) < 0.93:
            f.write(b"\0" * 65536)
            f.flush()
    physic, logics = store._core.disk_ratios()
    assert physic > 0.9
    assert logics > 0.9
    # Commitlog and consume queues share this file system: both flags are set.
    assert store.running_flags == BOTH
    assert not store.running_flags.writeable
    assert _put(store, 1) is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert store.put_messages("D", 0, [b"a"]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    ballast.unlink()
    # The store's own check (every second) clears them once space returned.
    _wait(lambda: store.running_flags == RunningFlags(0), "DISK_FULL was not cleared")
    assert _put(store, 2) is PutMessageStatus.PUT_OK


def test_over_the_warning_level_the_cleaner_deletes_at_once_and_puts_resume(
    open_on: Callable[..., MessageStore],
) -> None:
    store = open_on(
        "4m",
        disk_space_warning_level_ratio=50,
        delete_when=_hours_not_now(),
        delete_commit_log_files_interval=0,
    )
    _fill_until(store, 0.55)
    # The check of a new segment or the store's own check marks the disk full.
    _wait(lambda: RunningFlags.DISK_FULL in store.running_flags, "DISK_FULL was not set")
    assert _put(store, -1) is PutMessageStatus.SERVICE_NOT_AVAILABLE
    segs = _segments(store)
    assert len(segs) >= 4
    before = _used(store.store_path)
    # Nothing has expired (72 h), it is not the hour: the disk alone makes the round delete,
    # the oldest segments first, all but the one being written.
    report = store.clean_expired_files()
    assert report.clean_immediately is True
    deleted = list(report.commit_log_files)
    # A segment a service holds for a moment (a force, a read) waits for the next round.
    for _ in range(20):
        if len(deleted) == len(segs) - 1:
            break
        time.sleep(0.05)
        deleted += store.clean_expired_files().commit_log_files
    assert deleted == segs[:-1]
    assert _used(store.store_path) < before - 0.15
    # The round re-read the disks after deleting: puts are accepted at once.
    assert store.running_flags == RunningFlags(0)
    assert _put(store, 10_000) is PutMessageStatus.PUT_OK


def test_the_service_frees_a_full_disk_on_its_own(
    open_on: Callable[..., MessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CleanCommitLogService, "first_delay", 0.5)
    monkeypatch.setattr(CleanConsumeQueueService, "first_delay", 0.5)
    store = open_on(
        "4m",
        disk_space_warning_level_ratio=50,
        delete_when=_hours_not_now(),
        clean_resource_interval=100,
        delete_commit_log_files_interval=0,
    )
    # Keep putting: the cleaner frees the disk whenever it fills, and puts refused while it is
    # full are accepted again after.
    refused = accepted_after = 0
    deadline = time.monotonic() + 20
    i = 0
    while time.monotonic() < deadline and accepted_after < 50:
        status = _put(store, i)
        i += 1
        if status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
            refused += 1
            time.sleep(0.005)
        elif refused:
            assert status is PutMessageStatus.PUT_OK
            accepted_after += 1
    assert refused, "the disk never filled"
    assert accepted_after == 50, store.service_stats()
    stats = store.service_stats()["CleanCommitLogService"]
    assert stats["deleted_files"] >= 1
    assert stats["failures"] == 0
    assert store.get_min_phy_offset() > 0


def test_max_used_ratio_deletes_expired_segments_at_any_hour_only(
    open_on: Callable[..., MessageStore],
) -> None:
    store = open_on("8m", delete_when=_hours_not_now(), delete_commit_log_files_interval=0)
    _fill_until(store, 0.45)
    segs = _segments(store)
    assert len(segs) >= 4
    _age(segs[:2], 100)
    # Below diskMaxUsedSpaceRatio (75 %): not the hour, nothing goes.
    quiet = CleanCommitLogService(store._core, store.config)
    assert quiet.run_round() == ([], False)
    # Above it (10 %): the expired segments go, the others stay (no force below 85 %).
    busy = CleanCommitLogService(store._core, store.config.replace(disk_max_used_space_ratio=10))
    assert busy.run_round() == (segs[:2], False)
    assert _segments(store) == segs[2:]
    assert busy.run_round() == ([], False)


def test_clean_forcibly_ratio_needs_clean_file_forcibly_enable(
    open_on: Callable[..., MessageStore],
) -> None:
    store = open_on("8m", delete_when=_hours_not_now(), delete_commit_log_files_interval=0)
    _fill_until(store, 0.40)
    segs = _segments(store)
    _age(segs[:1], 100)
    over = {"disk_space_clean_forcibly_ratio": 30}
    # Off: above the clean-forcibly level only expired segments go.
    off = CleanCommitLogService(
        store._core, store.config.replace(clean_file_forcibly_enable=False, **over)
    )
    assert off.run_round() == (segs[:1], True)
    assert off.run_round() == ([], True)
    # On: the oldest segments go whatever their age, up to delete_file_batch_max.
    on = CleanCommitLogService(store._core, store.config.replace(delete_file_batch_max=2, **over))
    assert on.run_round() == (segs[1:3], True)
    assert _segments(store) == segs[3:]


def test_each_disk_has_its_flag(tmpfs: Callable[[str], Path]) -> None:
    # The commitlog on one file system (store_path_commit_log), the consume queues on another.
    logs, root = tmpfs("8m"), tmpfs("8m")
    store = MessageStore(root / "store", store_path_commit_log=str(logs / "commitlog"), **FILES)
    try:
        assert _put(store, 0) is PutMessageStatus.PUT_OK
        for fs, flag in ((root, RunningFlags.LOGIC_DISK_FULL), (logs, RunningFlags.DISK_FULL)):
            ballast = fs / "ballast"
            with open(ballast, "wb") as f:
                while _used(fs) < 0.93:
                    f.write(b"\0" * 65536)
                    f.flush()
            physic, logics = store._core.disk_ratios()
            assert (physic > 0.9, logics > 0.9) == (fs is logs, fs is root)
            assert store.running_flags == flag
            assert _put(store, 1) is PutMessageStatus.SERVICE_NOT_AVAILABLE
            ballast.unlink()
            store._core.disk_ratios()
            assert store.running_flags == RunningFlags(0)
            assert _put(store, 2) is PutMessageStatus.PUT_OK
    finally:
        store.close()
