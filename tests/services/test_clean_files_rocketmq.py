"""RocketMQ 5.5.1's ``DefaultMessageStoreCleanFilesTest``, ported: 55 commitlog segments holding
one message each, consume queue files of 7 units and index files of 7 entries; each case runs
the commitlog cleaner's round and then the consume-queue cleaner's round, as the Java test calls
``cleanCommitLogService.run()`` and ``cleanConsumeQueueService.run()``, and counts the files
left. Where the Java test sets a disk ratio below RocketMQ's clamps to make its disk look full,
these run on a tmpfs (root only) filled to the ratio wanted."""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from recovery.test_disk_full import _mount, _used
from rmqstore import Message, MessageStore, PutMessageStatus, RunningFlags

FILE_COUNT_COMMIT_LOG = 55
MSG_COUNT = FILE_COUNT_COMMIT_LOG
SEGMENT = 4096
# One message per segment: two of these never fit in 4096 bytes.
BODY = 2200
PER_CQ_FILE = 7
EXPIRE_FILE_COUNT = 15
BATCH = 10  # delete_file_batch_max's default, the Java test's "magic code 10"
TOPIC = "test"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Callable[[str, int], Path]]:
    """A tmpfs of ``size`` with ``ballast`` KiB of someone else's data on it."""
    mounted: list[Path] = []

    def _make(size: str, ballast_kib: int = 0) -> Path:
        fs = tmp_path / f"fs{len(mounted)}"
        if os.geteuid() != 0 or not _mount(fs, size):
            pytest.skip(f"needs root to mount a {size} tmpfs (a real small disk)")
        mounted.append(fs)
        if ballast_kib:
            (fs / "ballast").write_bytes(b"\1" * ballast_kib * 1024)
        return fs

    yield _make
    for fs in mounted:
        subprocess.run(["umount", "-l", str(fs)], check=False)


def _hours_now() -> str:
    h = time.localtime().tm_hour
    return f"{h};{(h + 1) % 24}"


def _hours_not_now() -> str:
    return str((time.localtime().tm_hour + 12) % 24)


class _Case:
    """A store as ``initMessageStore`` makes it, with ``buildAndPutMessagesToMessageStore``'s
    55 messages put and dispatched."""

    def __init__(self, root: Path, **settings: Any) -> None:
        entries_per_msg = 1
        self.store = MessageStore(
            root / "store",
            mapped_file_size_commit_log=SEGMENT,
            mapped_file_size_consume_queue=PER_CQ_FILE * 20,
            max_hash_slot_num=100,
            max_index_num=PER_CQ_FILE * entries_per_msg + 1,
            delete_commit_log_files_interval=0,
            delete_consume_queue_files_interval=0,
            **settings,
        )
        for i in range(MSG_COUNT):
            r = self.store.put_message(Message(TOPIC, bytes([i]) * BODY, keys="hello"))
            assert r.status is PutMessageStatus.PUT_OK
        assert self.store.wait_dispatched()
        self.store.flush()
        # One index entry per message (KEYS only): 7 messages per index file.
        self.per_index_file = PER_CQ_FILE // entries_per_msg

    def close(self) -> None:
        self.store.close()

    def segments(self) -> list[str]:
        return [str(p) for p in self.store.commitlog_segments()]

    def cq_files(self) -> int:
        return len(os.listdir(self.store.store_path / "consumequeue" / TOPIC / "0"))

    def index_files(self) -> int:
        return len(os.listdir(self.store.store_path / "index"))

    def expire(self, count: int) -> None:
        """``expireFiles``: the first ``count`` segments last modified long ago."""
        t = time.time() - 100 * 3600
        for p in self.segments()[:count]:
            os.utime(p, (t, t))

    def run(self) -> None:
        """``cleanCommitLogService.run(); cleanConsumeQueueService.run();``"""
        commit_log, consume_queue = self.store._clean_commit_log, self.store._clean_consume_queue
        assert commit_log is not None
        assert consume_queue is not None
        commit_log.run_round()
        consume_queue.run_round()

    def check_initial(self) -> None:
        assert len(self.segments()) == FILE_COUNT_COMMIT_LOG
        assert self.cq_files() == math.ceil(MSG_COUNT / PER_CQ_FILE)
        assert self.index_files() == math.ceil(MSG_COUNT / self.per_index_file)

    def check_after(self, deleted: int) -> None:
        assert len(self.segments()) == FILE_COUNT_COMMIT_LOG - deleted
        assert self.cq_files() == math.ceil(MSG_COUNT / PER_CQ_FILE) - deleted // PER_CQ_FILE
        expect_index = math.ceil(MSG_COUNT / self.per_index_file) - deleted // self.per_index_file
        assert self.index_files() == expect_index
        assert self.store.get_min_phy_offset() == deleted * SEGMENT
        assert self.store.get_min_offset_in_queue(TOPIC, 0) == deleted


@pytest.fixture
def case(disk: Callable[..., Path]) -> Iterator[Callable[..., _Case]]:
    made: list[_Case] = []

    def _make(size: str, ballast_kib: int = 0, **settings: Any) -> _Case:
        c = _Case(disk(size, ballast_kib), **settings)
        made.append(c)
        return c

    yield _make
    for c in made:
        c.close()


def _expired_rounds(c: _Case) -> None:
    """The loop of the Java cases that expire 15 files: 10, then 5 deleted."""
    for a in range(1, math.ceil(EXPIRE_FILE_COUNT / BATCH) + 1):
        file_count = EXPIRE_FILE_COUNT - (a - 1) * BATCH
        c.run()
        expect = a * BATCH if file_count >= BATCH else (a - 1) * BATCH + file_count
        c.check_after(expect)


def test_is_space_full_function_empty_to_full(case: Callable[..., _Case]) -> None:
    # The disk goes above the warning level (35 % here) after the 55 messages: DISK_FULL.
    c = case("2m", disk_space_warning_level_ratio=35)
    c.check_initial()
    assert c.store.running_flags == RunningFlags(0)
    fs = c.store.store_path.parent
    with open(fs / "ballast", "wb") as f:
        while _used(fs) <= 0.40:
            f.write(b"\1" * 65536)
            f.flush()
    c.store._core.disk_ratios()
    assert RunningFlags.DISK_FULL in c.store.running_flags
    assert (
        c.store.put_message(Message(TOPIC, b"x")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    )


def test_is_space_full_function_full_to_empty(case: Callable[..., _Case]) -> None:
    c = case("64m")
    c.store._core.set_running_flags(RunningFlags.DISK_FULL, True)
    c.store._core.disk_ratios()
    assert RunningFlags.DISK_FULL not in c.store.running_flags


def test_delete_expired_files_by_time_up(case: Callable[..., _Case]) -> None:
    # The hour is delete_when's; the disk is quiet (far below 75 %).
    c = case("64m", delete_when=_hours_now())
    c.check_initial()
    c.expire(EXPIRE_FILE_COUNT)
    _expired_rounds(c)


def test_delete_expired_files_by_space_full(case: Callable[..., _Case]) -> None:
    # Not the hour; the disk above disk_max_used_space_ratio (10 %) and below the clean-forcibly
    # level (30 %): expired files only.
    c = case(
        "2m",
        delete_when=_hours_not_now(),
        disk_max_used_space_ratio=10,
        disk_space_clean_forcibly_ratio=30,
    )
    c.check_initial()
    assert 0.10 < _used(c.store.store_path) < 0.30
    c.expire(EXPIRE_FILE_COUNT)
    _expired_rounds(c)
    # Nothing else has expired.
    c.run()
    c.check_after(EXPIRE_FILE_COUNT)


def test_delete_files_immediately_by_space_full(case: Callable[..., _Case]) -> None:
    # Not the hour, nothing expired; the disk above the clean-forcibly level (30 %), below the
    # warning level (90 %): 10 files a round whatever their age.
    c = case("1m", 400, delete_when=_hours_not_now(), disk_space_clean_forcibly_ratio=30)
    c.check_initial()
    assert 0.30 < _used(c.store.store_path) < 0.90
    a = 1
    file_count = FILE_COUNT_COMMIT_LOG
    while a <= math.ceil(FILE_COUNT_COMMIT_LOG / BATCH) and file_count >= BATCH:
        c.run()
        c.check_after(BATCH * a)
        a += 1
        file_count -= BATCH


def test_delete_expired_files_manually(case: Callable[..., _Case]) -> None:
    c = case("64m", delete_when=_hours_not_now())
    c.store.execute_delete_files_manually()
    c.check_initial()
    c.expire(EXPIRE_FILE_COUNT)
    _expired_rounds(c)
