"""The commitlog and consume-queue cleaners (RocketMQ 5.5.1's ``CleanCommitLogService`` and
``CleanConsumeQueueService``): settings, ``delete_when``, each rule that decides a round, manual
deletion, ``clean_expired_files`` and a read-only store. Small segments; segments are made old
by setting their modification time back with ``os.utime``, never by sleeping.

The disks these tests run on must be below every threshold (they would otherwise make rounds
delete at once): each store lives on a tmpfs the test mounts (root), else in the temporary
folder when its disk is quiet enough, else the test is skipped.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import rmqstore
from recovery.test_disk_full import _mount, _used
from rmqstore import (
    GetMessageStatus,
    Message,
    MessageStore,
    PutMessageStatus,
    RunningFlags,
    StoreConfig,
    StoreConfigError,
    StoreReadOnlyError,
)
from rmqstore._clean import (
    CleanCommitLogService,
    CleanConsumeQueueService,
    CleanReport,
    parse_delete_when,
)
from rmqwire import SMALL_STORE

HOUR = 3600.0


@pytest.fixture
def quiet_disk(tmp_path: Path) -> Iterator[Path]:
    """A folder on a file system far below every cleaning threshold."""
    fs = tmp_path / "fs"
    if os.geteuid() == 0 and _mount(fs, "256m"):
        try:
            yield fs
        finally:
            subprocess.run(["umount", "-l", str(fs)], check=False)
        return
    if _used(tmp_path) > 0.6:
        pytest.skip(
            "the temporary folder's disk is more than 60 % used and no tmpfs can be mounted"
        )
    yield tmp_path


@pytest.fixture
def open_quiet(quiet_disk: Path) -> Iterator[Callable[..., MessageStore]]:
    """Opens small-file stores on the quiet disk (all closed at teardown); the cleaners' own
    rounds are far away (60 s), so each test drives them."""
    opened: list[MessageStore] = []

    def _open(name: str = "store", **overrides: Any) -> MessageStore:
        store = MessageStore(quiet_disk / name, **{**SMALL_STORE, **overrides})
        opened.append(store)
        return store

    yield _open
    for store in reversed(opened):
        store.close()


def _hours_now() -> str:
    """``delete_when`` matching the local hour now and the next one (a test may cross an hour)."""
    h = time.localtime().tm_hour
    return f"{h};{(h + 1) % 24}"


def _hours_not_now() -> str:
    """``delete_when`` matching neither the local hour now nor the next one."""
    return str((time.localtime().tm_hour + 12) % 24)


def _fill(store: MessageStore, segments: int, topic: str = "T") -> list[int]:
    """Puts 1 KiB messages until the commitlog has ``segments`` segments; returns their offsets
    (the last segment is the one being written)."""
    offsets = []
    i = 0
    while len(_segments(store)) < segments:
        r = store.put_message(Message(topic, b"%06d" % i + b"x" * 1018, keys=f"k{i}"))
        assert r.status is PutMessageStatus.PUT_OK
        offsets.append(r.wrote_offset)
        i += 1
    assert store.wait_dispatched()
    store.flush()
    return offsets


def _segments(store: MessageStore) -> list[str]:
    """The commitlog's segment paths as str, oldest first."""
    return [str(p) for p in store.commitlog_segments()]


def _age(paths: list[str], hours: float) -> None:
    """Sets the modification time of ``paths`` ``hours`` back."""
    t = time.time() - hours * HOUR
    for p in paths:
        os.utime(p, (t, t))


def _service(store: MessageStore, **overrides: Any) -> CleanCommitLogService:
    """A commitlog cleaner on ``store``'s core with the store's settings and ``overrides``
    (its thread not started: the test runs its rounds)."""
    return CleanCommitLogService(store._core, store.config.replace(**overrides))


# -- settings --------------------------------------------------------------------------------


def test_retention_settings_have_rocketmqs_defaults() -> None:
    c = StoreConfig()
    assert (c.file_reserved_time, c.delete_when, c.clean_resource_interval) == (72, "04", 10000)
    assert (c.delete_commit_log_files_interval, c.delete_consume_queue_files_interval) == (100, 100)
    assert c.destroy_mapped_file_interval_forcibly == 120000
    assert c.redelete_hanged_file_interval == 120000
    assert c.delete_file_batch_max == 10
    assert c.clean_file_forcibly_enable is True
    assert (c.disk_max_used_space_ratio, c.disk_space_clean_forcibly_ratio) == (75, 85)
    assert c.disk_space_warning_level_ratio == 90


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("file_reserved_time", -1, "must be between 0 and 2147483647, got -1"),
        ("disk_max_used_space_ratio", 96, "must be between 10 and 95, got 96"),
        ("disk_max_used_space_ratio", 9, "must be between 10 and 95, got 9"),
        ("disk_space_clean_forcibly_ratio", 86, "must be between 30 and 85, got 86"),
        ("disk_space_clean_forcibly_ratio", 29, "must be between 30 and 85, got 29"),
        ("disk_space_warning_level_ratio", 34, "must be between 35 and 90, got 34"),
        ("clean_resource_interval", 0, "must be between 1 and 2147483647, got 0"),
        ("delete_file_batch_max", 0, "must be between 1 and 2147483647, got 0"),
        ("delete_commit_log_files_interval", -1, "must be between 0 and 2147483647, got -1"),
        ("destroy_mapped_file_interval_forcibly", -5, "must be between 0 and 2147483647, got -5"),
        ("clean_file_forcibly_enable", 1, "must be a bool, got int"),
        ("delete_when", "4;", "must be hours 0 to 23 separated by ';'"),
        ("delete_when", "25", "must be hours 0 to 23 separated by ';'"),
        ("delete_when", 4, "must be a str of hours such as '04' or '02;14', got 4"),
    ],
)
def test_bad_retention_settings_are_refused(
    setting: str, value: object, message: str, store_path: Path
) -> None:
    with pytest.raises(StoreConfigError) as info:
        MessageStore(store_path, **{setting: value})
    assert info.value.setting == setting
    assert str(info.value).startswith(f"{setting}: {message}")
    assert not store_path.exists()


def test_delete_when_parsing() -> None:
    assert parse_delete_when("04") == {4}
    assert parse_delete_when("4") == {4}
    assert parse_delete_when("02;14;2") == {2, 14}
    assert parse_delete_when("0;23") == {0, 23}
    for bad in ("", "4;", ";4", "24", "-1", " 4", "4.5", "x", "٤"):
        with pytest.raises(StoreConfigError):
            parse_delete_when(bad)


def test_is_time_to_delete_reads_the_local_hour(open_quiet: Callable[..., MessageStore]) -> None:
    store = open_quiet(delete_when="04;17")
    day = datetime.date.today()

    def at(hour: int, minute: int) -> float:
        return time.mktime((day.year, day.month, day.day, hour, minute, 0, 0, 0, -1))

    for hour, minute, due in [
        (4, 0, True),
        (4, 59, True),
        (5, 0, False),
        (3, 59, False),
        (17, 30, True),
        (16, 0, False),
    ]:
        svc = CleanCommitLogService(
            store._core, store.config, clock=lambda h=hour, m=minute: at(h, m)
        )
        assert svc.is_time_to_delete() is due, (hour, minute)


# -- the commitlog round's rules ---------------------------------------------------------------


def test_nothing_is_deleted_outside_delete_when(open_quiet: Callable[..., MessageStore]) -> None:
    store = open_quiet()
    _fill(store, 5)
    before = _segments(store)
    _age(before[:-1], 1000)
    svc = _service(store, delete_when=_hours_not_now())
    deleted, immediately = svc.run_round()
    assert (deleted, immediately) == ([], False)
    assert _segments(store) == before
    assert store.running_flags == RunningFlags(0)


def test_at_delete_when_expired_segments_go_oldest_first(
    open_quiet: Callable[..., MessageStore],
) -> None:
    store = open_quiet(delete_commit_log_files_interval=0)
    offsets = _fill(store, 6)
    segs = _segments(store)
    # Segments 0 and 1 expired (73 h > 72 h), 2 not: 3 is older again, but deletion stops at
    # the first segment that has not expired (deleteExpiredFileByTime).
    _age(segs[:2], 73)
    _age(segs[3:4], 1000)
    svc = _service(store, delete_when=_hours_now())
    deleted, immediately = svc.run_round()
    assert deleted == segs[:2]
    assert immediately is False
    assert _segments(store) == segs[2:]
    assert not any(os.path.exists(p) for p in segs[:2])
    seg = store.config.mapped_file_size_commit_log
    assert store.get_min_phy_offset() == 2 * seg
    # A message in a deleted segment is gone; the first kept one reads.
    assert store.look_message_by_offset(offsets[0]) is None
    first_kept = next(o for o in offsets if o >= 2 * seg)
    kept = store.look_message_by_offset(first_kept)
    assert kept is not None
    assert kept.commit_log_offset == first_kept
    # Nothing more has expired.
    assert svc.run_round() == ([], False)


def test_file_reserved_time_zero_deletes_all_but_the_segment_being_written(
    open_quiet: Callable[..., MessageStore],
) -> None:
    store = open_quiet(file_reserved_time=0, delete_commit_log_files_interval=0)
    _fill(store, 4)
    segs = _segments(store)
    svc = _service(store, delete_when=_hours_now())
    deleted, _ = svc.run_round()
    assert deleted == segs[:-1]
    assert _segments(store) == segs[-1:]
    assert svc.run_round()[0] == []
    assert store.put_message(Message("T", b"after")).status is PutMessageStatus.PUT_OK


def test_delete_file_batch_max_bounds_a_round(open_quiet: Callable[..., MessageStore]) -> None:
    store = open_quiet(delete_commit_log_files_interval=0)
    _fill(store, 7)
    segs = _segments(store)
    _age(segs[:-1], 100)
    svc = _service(store, delete_when=_hours_now(), delete_file_batch_max=2)
    assert svc.run_round()[0] == segs[0:2]
    assert svc.run_round()[0] == segs[2:4]
    assert svc.run_round()[0] == segs[4:6]
    assert svc.run_round()[0] == []
    assert _segments(store) == segs[6:]


def test_delete_commit_log_files_interval_spaces_deletions(
    open_quiet: Callable[..., MessageStore],
) -> None:
    store = open_quiet()
    _fill(store, 5)
    segs = _segments(store)
    _age(segs[:-1], 100)
    svc = _service(store, delete_when=_hours_now(), delete_commit_log_files_interval=150)
    start = time.monotonic()
    assert svc.run_round()[0] == segs[:-1]
    # Three pauses between four deletions (none after the last).
    assert time.monotonic() - start >= 0.45


def test_manual_deletion_runs_twenty_rounds_whatever_the_hour(
    open_quiet: Callable[..., MessageStore],
) -> None:
    store = open_quiet(delete_when=_hours_not_now(), delete_commit_log_files_interval=0)
    _fill(store, 4)
    segs = _segments(store)
    _age(segs[:1], 100)
    svc = store._clean_commit_log
    assert svc is not None
    assert svc.run_round()[0] == []
    store.execute_delete_files_manually()
    assert svc.manual_rounds_left == 20
    assert svc.run_round()[0] == segs[:1]
    assert svc.manual_rounds_left == 19
    # Unexpired segments stay: manual deletion is about the hour, not about age.
    assert svc.run_round()[0] == []
    for _ in range(17):
        svc.run_round()
    assert svc.manual_rounds_left == 1
    _age(segs[1:2], 100)
    assert svc.run_round()[0] == segs[1:2]
    assert svc.manual_rounds_left == 0
    # The 20 rounds are spent: an expired segment waits for delete_when again.
    _age(segs[2:3], 100)
    assert svc.run_round()[0] == []
    assert _segments(store) == segs[2:]
    assert svc.stats()["manual_rounds_left"] == 0


def test_clean_expired_files_reports_what_went(open_quiet: Callable[..., MessageStore]) -> None:
    store = open_quiet(delete_when=_hours_not_now(), delete_commit_log_files_interval=0)
    offsets = _fill(store, 5, topic="Q")
    segs = _segments(store)
    _age(segs[:3], 100)
    seg = store.config.mapped_file_size_commit_log
    min_queue_offset_before = store.get_min_offset_in_queue("Q", 0)
    assert min_queue_offset_before == 0
    report = store.clean_expired_files()
    assert isinstance(report, CleanReport)
    assert report.commit_log_files == tuple(segs[:3])
    assert report.min_commit_log_offset == 3 * seg == store.get_min_phy_offset()
    assert report.clean_immediately is False
    # 50-unit consume queue files: those wholly below the new minimum went, and the queue's
    # minimum moved to the first message kept.
    first_kept = next(i for i, o in enumerate(offsets) if o >= 3 * seg)
    assert report.consume_queue_files == first_kept // 50
    assert store.get_min_offset_in_queue("Q", 0) == first_kept
    assert report.index_files >= 1
    r = store.get_message("G", "Q", 0, 0)
    assert r.status is GetMessageStatus.OFFSET_TOO_SMALL
    assert r.next_begin_offset == first_kept
    r = store.get_message("G", "Q", 0, first_kept, 1)
    assert r.status is GetMessageStatus.FOUND
    assert r.messages[0].body.startswith(b"%06d" % first_kept)
    # A second call finds nothing more.
    again = store.clean_expired_files()
    assert (again.commit_log_files, again.consume_queue_files, again.index_files) == ((), 0, 0)
    with pytest.raises(AttributeError):
        report.index_files = 0  # type: ignore[misc]


def test_consume_queue_cleaner_runs_when_the_minimum_grew(
    open_quiet: Callable[..., MessageStore],
) -> None:
    store = open_quiet(delete_commit_log_files_interval=0, delete_consume_queue_files_interval=0)
    _fill(store, 5, topic="Q")
    cq = CleanConsumeQueueService(store._core, store.config)
    # The first round of a store whose commitlog starts at 0 has nothing to do.
    assert cq.run_round() == (0, 0)
    segs = _segments(store)
    _age(segs[:2], 100)
    assert _service(store, delete_when=_hours_now()).run_round()[0] == segs[:2]
    removed = cq.run_round()
    assert removed[0] >= 1
    assert cq.last_physical_min_offset == store.get_min_phy_offset()
    assert cq.run_round() == (0, 0)
    assert cq.stats()["consume_queue_files"] == removed[0]


def test_a_read_only_store_refuses_cleaning(open_quiet: Callable[..., MessageStore]) -> None:
    writer = open_quiet()
    _fill(writer, 3)
    reader = MessageStore(writer.store_path, read_only=True, **SMALL_STORE)
    try:
        with pytest.raises(StoreReadOnlyError, match="clean_expired_files"):
            reader.clean_expired_files()
        with pytest.raises(StoreReadOnlyError, match="execute_delete_files_manually"):
            reader.execute_delete_files_manually()
        assert reader.running_flags == RunningFlags.NOT_WRITEABLE
        assert not reader.running_flags.writeable
        with pytest.raises(StoreReadOnlyError):
            reader._core.set_running_flags(RunningFlags.DISK_FULL, True)
    finally:
        reader.close()
    assert writer.running_flags.writeable


def test_a_closed_store_refuses_cleaning(open_quiet: Callable[..., MessageStore]) -> None:
    store = open_quiet()
    store.close()
    with pytest.raises(rmqstore.StoreClosedError):
        store.clean_expired_files()
    with pytest.raises(rmqstore.StoreClosedError):
        store.execute_delete_files_manually()


# -- running flags -------------------------------------------------------------------------------


def test_running_flags_refuse_puts(open_quiet: Callable[..., MessageStore]) -> None:
    store = open_quiet()
    assert store.running_flags == RunningFlags(0)
    assert [f.value for f in RunningFlags] == [1, 2, 4, 8, 16, 32, 64]
    for flag in (
        RunningFlags.NOT_WRITEABLE,
        RunningFlags.WRITE_LOGICS_QUEUE_ERROR,
        RunningFlags.WRITE_INDEX_FILE_ERROR,
        RunningFlags.FENCED,
        RunningFlags.DISK_FULL,
        RunningFlags.LOGIC_DISK_FULL,
    ):
        assert store._core.set_running_flags(flag, True) == flag
        assert store.running_flags == flag
        assert not store.running_flags.writeable
        r = store.put_message(Message("T", b"refused"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert store.put_messages("T", 0, [b"a"]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert store._core.set_running_flags(flag, False) == 0
        assert store.put_message(Message("T", b"ok")).status is PutMessageStatus.PUT_OK
    for bad in (RunningFlags.NOT_READABLE, 128, -1, 2**40):
        with pytest.raises(rmqstore.InvalidArgumentError):
            store._core.set_running_flags(bad, True)
    # DISK_FULL follows the disk: the next check clears a flag the disk does not justify.
    store._core.set_running_flags(RunningFlags.DISK_FULL, True)
    physic, logics = store._core.disk_ratios()
    assert 0.0 <= physic < 0.9
    assert 0.0 <= logics < 0.9
    assert store.running_flags == RunningFlags(0)


# -- the service threads ---------------------------------------------------------------------


def test_the_services_run_on_their_own(
    open_quiet: Callable[..., MessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    filled = open_quiet()
    _fill(filled, 5, topic="Q")
    filled.close()
    monkeypatch.setattr(CleanCommitLogService, "first_delay", 0.2)
    monkeypatch.setattr(CleanConsumeQueueService, "first_delay", 0.2)
    store = open_quiet(
        file_reserved_time=0,
        delete_when=_hours_now(),
        clean_resource_interval=50,
        delete_commit_log_files_interval=0,
        delete_consume_queue_files_interval=0,
    )
    deadline = time.monotonic() + 20
    # A read corrects a queue's minimum as soon as the commitlog segments go: wait for the
    # consume queue service's own round, not for the minimum.
    while (
        len(_segments(store)) > 1
        or store.service_stats()["CleanConsumeQueueService"]["consume_queue_files"] < 1
    ):
        assert time.monotonic() < deadline, store.service_stats()
        time.sleep(0.05)
    stats = store.service_stats()
    assert stats["CleanCommitLogService"]["deleted_files"] == 4
    assert stats["CleanCommitLogService"]["rounds"] >= 1
    assert stats["CleanConsumeQueueService"]["consume_queue_files"] >= 1
    assert stats["CleanCommitLogService"]["failures"] == 0
    r = store.get_message("G", "Q", 0, 0)
    assert r.status is GetMessageStatus.OFFSET_TOO_SMALL
    # Puts go on, and the store reopens with what is left.
    assert store.put_message(Message("Q", b"after", keys="after")).ok
    path = store.store_path
    store.close()
    with MessageStore(path, **SMALL_STORE) as again:
        assert again.wait_dispatched()
        assert [m.body for m in again.query_message("Q", "after")] == [b"after"]


class _FakeCore:
    """Records the cleaner's core calls; disks at the given ratios."""

    def __init__(self, ratios: tuple[float, float] = (0.1, 0.1)) -> None:
        self.ratios = ratios
        self.calls: list[tuple[Any, ...]] = []

    def disk_ratios(self) -> tuple[float, float]:
        return self.ratios

    def delete_expired_commit_log_files(self, *args: Any) -> list[str]:
        self.calls.append(("delete", *args))
        return []

    def redelete_hanged_file(self, destroy_forcibly_ms: int) -> bool:
        self.calls.append(("redelete", destroy_forcibly_ms))
        return False


def test_redelete_hanged_file_runs_every_redelete_hanged_file_interval() -> None:
    now = [1_000_000.0]
    core = _FakeCore()
    cfg = StoreConfig(
        delete_when=_hours_not_now(),
        redelete_hanged_file_interval=5000,
        destroy_mapped_file_interval_forcibly=7000,
    )
    svc = CleanCommitLogService(core, cfg, clock=lambda: now[0])  # type: ignore[arg-type]
    svc.delete_hours = frozenset()  # never the hour, whatever the fake clock says
    svc.run_round()
    assert core.calls == [("redelete", 7000)]
    now[0] += 4.9
    svc.run_round()
    now[0] += 0.2
    svc.run_round()
    assert core.calls == [("redelete", 7000)] * 2
    # Not the hour, disks quiet, no manual deletion: no deletion call at all.
    assert not [c for c in core.calls if c[0] == "delete"]


@pytest.mark.parametrize(
    ("ratios", "forcibly_enable", "expected"),
    [
        # (commitlog, consume queue) used fractions -> (deletes, at once)
        ((0.10, 0.10), True, None),
        ((0.76, 0.10), True, False),
        ((0.10, 0.76), True, False),
        ((0.86, 0.10), True, True),
        ((0.10, 0.86), True, True),
        ((0.91, 0.10), True, True),
        ((0.86, 0.10), False, False),
    ],
)
def test_is_space_to_delete_thresholds(
    ratios: tuple[float, float], forcibly_enable: bool, expected: bool | None
) -> None:
    core = _FakeCore(ratios)
    cfg = StoreConfig(clean_file_forcibly_enable=forcibly_enable)
    svc = CleanCommitLogService(core, cfg)  # type: ignore[arg-type]
    svc.delete_hours = frozenset()
    svc.run_round()
    deletes = [c for c in core.calls if c[0] == "delete"]
    if expected is None:
        assert deletes == []
        return
    # (expired_ms, interval_ms, destroy_forcibly_ms, clean_at_once, batch_max)
    assert deletes == [("delete", 72 * 3600 * 1000, 100, 120000, expected, 10)]
