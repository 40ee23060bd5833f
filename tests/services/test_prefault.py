"""The commitlog prefault service: pages of the segment being appended to are faulted in ahead
of the write position by a service thread (``prefault_window_commit_log``), never changing a
byte; off with a window of 0, with the transient store pool, and in read-only stores."""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from pathlib import Path

import pytest
from rmqstore import Message, MessageStore
from rmqstore.errors import StoreConfigError

MiB = 1 << 20
SEGMENT = 64 * MiB
PAGE = mmap.PAGESIZE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident_pages(path: Path, start: int, end: int) -> int:
    """Pages of ``[start, end)`` of the file that are in the page cache (``mincore`` on a read-only
    mapping of this process, which faults nothing in)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        length = end - start
        addr = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            vec = (ctypes.c_ubyte * (length // PAGE))()
            assert _libc.mincore(addr, length, vec) == 0, ctypes.get_errno()
            return sum(b & 1 for b in vec)
        finally:
            _libc.munmap(addr, length)
    finally:
        os.close(fd)


def first_segment(store_dir: Path) -> Path:
    return store_dir / "commitlog" / "00000000000000000000"


# Far past the write position and past what the kernel reads around the appender's own first
# fault (8 MiB here), but inside the window.
FAR = (32 * MiB, 48 * MiB)


def test_pages_ahead_of_the_appender_are_faulted_in(tmp_path: Path) -> None:
    store = MessageStore(
        tmp_path / "s", mapped_file_size_commit_log=SEGMENT, prefault_window_commit_log=48 * MiB
    )
    bodies = [os.urandom(1000) for _ in range(100)]
    offsets = [store.put_message(Message("Prefault", b)).wrote_offset for b in bodies]
    deadline = time.monotonic() + 10
    while store.service_stats()["CommitLogPrefaultService"]["prefaulted"] < 47 * MiB:
        assert time.monotonic() < deadline, store.service_stats()
        time.sleep(0.01)
    assert resident_pages(first_segment(tmp_path / "s"), *FAR) == (FAR[1] - FAR[0]) // PAGE
    # Nothing was written ahead: the messages read back, and the bytes after the last are zero.
    for off, body in zip(offsets, bodies, strict=True):
        msg = store.look_message_by_offset(off)
        assert msg is not None
        assert msg.body == body
    end = store.get_max_phy_offset()
    store.close()
    with first_segment(tmp_path / "s").open("rb") as f:
        f.seek(end)
        assert f.read(48 * MiB) == bytes(48 * MiB)
    # A second open recovers exactly the messages written.
    with MessageStore(tmp_path / "s", mapped_file_size_commit_log=SEGMENT) as again:
        assert again.get_max_phy_offset() == end


def test_a_window_of_zero_turns_the_service_off(tmp_path: Path) -> None:
    store = MessageStore(
        tmp_path / "s", mapped_file_size_commit_log=SEGMENT, prefault_window_commit_log=0
    )
    assert "CommitLogPrefaultService" not in store.service_stats()
    assert store.put_message(Message("Prefault", b"x" * 1000)).ok
    time.sleep(0.3)
    assert resident_pages(first_segment(tmp_path / "s"), *FAR) == 0
    store.close()


def test_no_service_with_the_transient_store_pool_or_read_only(tmp_path: Path) -> None:
    with MessageStore(
        tmp_path / "pool",
        mapped_file_size_commit_log=1 * MiB,
        transient_store_pool_enable=True,
        transient_store_pool_size=2,
    ) as store:
        assert "CommitLogPrefaultService" not in store.service_stats()
    with MessageStore(tmp_path / "ro", mapped_file_size_commit_log=1 * MiB) as store:
        assert "CommitLogPrefaultService" in store.service_stats()
        assert store.put_message(Message("Prefault", b"x")).ok
    with MessageStore(tmp_path / "ro", mapped_file_size_commit_log=1 * MiB, read_only=True) as ro:
        assert ro.service_stats() == {}


@pytest.mark.parametrize("window", [-1, 2**31])
def test_the_window_is_checked(tmp_path: Path, window: int) -> None:
    with pytest.raises(StoreConfigError, match="prefault_window_commit_log"):
        MessageStore(tmp_path / "s", prefault_window_commit_log=window)
