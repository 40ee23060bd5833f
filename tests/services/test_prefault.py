"""The commitlog prefault service: pages of the segment being appended to are faulted in ahead
of the write position by a service thread (``prefault_window_commit_log``), never changing a
byte; off with a window of 0, with the transient store pool, and in read-only stores."""

from __future__ import annotations

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


def mapped_pages(path: Path, start: int, end: int) -> int:
    """Pages of ``[start, end)`` of the segment file present in this process's writable shared
    mapping of it (the store's: ``/proc/self/maps``), by the present bit of their
    ``/proc/self/pagemap`` entries. A write fault maps only the page written, and the kernel's
    readahead fills the page cache without mapping anything, so only the appender's writes
    and the prefault service make pages present there."""
    real = os.path.realpath(path)
    base = None
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5] == real and fields[1] == "rw-s" and fields[2] == "0" * 8:
            base = int(fields[0].split("-")[0], 16)
    assert base is not None, f"no writable mapping of {real}"
    first, last = (base + start) // PAGE, (base + end) // PAGE
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        entries = f.read((last - first) * 8)
    return sum(
        int.from_bytes(entries[i : i + 8], "little") >> 63 for i in range(0, len(entries), 8)
    )


def first_segment(store_dir: Path) -> Path:
    return store_dir / "commitlog" / "00000000000000000000"


def burst(store: MessageStore, until: int) -> list[tuple[int, bytes]]:
    """Puts 64 KiB bodies as fast as one thread can until the commitlog's end passes ``until``
    (hundreds of MB a second, so the service's measured rate asks for its whole window);
    returns each message's offset and body."""
    bodies = [os.urandom(64 * 1024) for _ in range(8)]
    out = []
    while store.get_max_phy_offset() < until:
        body = bodies[len(out) % len(bodies)]
        r = store.put_message(Message("Prefault", body))
        assert r.ok
        out.append((r.wrote_offset, body))
    return out


def settled(store: MessageStore) -> None:
    """Waits until the prefault service has faulted nothing in for 200 ms."""
    deadline = time.monotonic() + 10
    last, since = -1.0, time.monotonic()
    while time.monotonic() - since < 0.2:
        assert time.monotonic() < deadline, store.service_stats()
        now = store.service_stats()["CommitLogPrefaultService"]["prefaulted"]
        if now != last:
            last, since = now, time.monotonic()
        time.sleep(0.01)


def test_pages_ahead_of_the_appender_are_faulted_in(tmp_path: Path) -> None:
    store = MessageStore(
        tmp_path / "s", mapped_file_size_commit_log=SEGMENT, prefault_window_commit_log=16 * MiB
    )
    written = burst(store, 16 * MiB)
    settled(store)
    end = store.get_max_phy_offset()
    segment = first_segment(tmp_path / "s")
    # The page after the last record's, and the next 4 MiB: more than the 2 MiB kept ahead of an
    # idle store, so the service followed the burst's rate.
    after = (end // PAGE + 1) * PAGE
    assert mapped_pages(segment, after, after + 4 * MiB) == 4 * MiB // PAGE, store.service_stats()
    # Nothing was written ahead: the messages read back, and the bytes after the last are zero.
    for off, body in written:
        msg = store.look_message_by_offset(off)
        assert msg is not None
        assert msg.body == body
    store.close()
    with segment.open("rb") as f:
        f.seek(end)
        assert f.read(SEGMENT - end) == bytes(SEGMENT - end)
    # A second open recovers exactly the messages written.
    with MessageStore(tmp_path / "s", mapped_file_size_commit_log=SEGMENT) as again:
        assert again.get_max_phy_offset() == end


def test_an_idle_store_keeps_little_ahead(tmp_path: Path) -> None:
    store = MessageStore(
        tmp_path / "s", mapped_file_size_commit_log=SEGMENT, prefault_window_commit_log=32 * MiB
    )
    assert store.put_message(Message("Prefault", b"x" * 1000)).ok
    time.sleep(0.1)
    settled(store)
    # 2 MiB ahead of a store that takes a message now and then, not the whole window.
    assert 0 < store.service_stats()["CommitLogPrefaultService"]["prefaulted"] <= 2 * MiB
    segment = first_segment(tmp_path / "s")
    assert mapped_pages(segment, PAGE, 2 * MiB) == 2 * MiB // PAGE - 1
    # Past it (leaving room for a large folio the kernel maps whole).
    assert mapped_pages(segment, 3 * MiB, 4 * MiB) == 0
    store.close()


def test_a_window_of_zero_turns_the_service_off(tmp_path: Path) -> None:
    store = MessageStore(
        tmp_path / "s", mapped_file_size_commit_log=SEGMENT, prefault_window_commit_log=0
    )
    assert "CommitLogPrefaultService" not in store.service_stats()
    burst(store, 16 * MiB)
    time.sleep(0.3)
    # A write fault maps the pages written (and the rest of their large folio, some KiB):
    # nothing a megabyte and more past the last record.
    after = (store.get_max_phy_offset() // PAGE + 1) * PAGE
    assert mapped_pages(first_segment(tmp_path / "s"), after + MiB, after + 4 * MiB) == 0
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
