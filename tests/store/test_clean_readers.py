"""Issue 19: what each reader answers once expired files are gone (one deletion, no race).

A store writes three queues over a dozen small segments (``Gone``'s messages all in the first
ones), the older segments' modification times are set back two hours and ``clean_expired_files``
(``file_reserved_time`` 1 hour) deletes them. Then every reader is asked about every message:
``get_message`` answers a read below a queue's new min offset with ``OFFSET_TOO_SMALL`` and
``next_begin_offset`` at the min, ``look_message_by_offset`` returns ``None`` for a deleted record
and the message for every other one, ``query_message`` finds exactly the remaining messages, a
``read_batch`` batch taken before the deletion keeps its bytes, and a read-only store opened
before the deletion (another process) sees the same as the writer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rmqstore import GetMessageStatus, Message, MessageStore
from store.clean_workload import GROUP, body_for, check_batch, check_message, key_for

SIZES: dict[str, Any] = {
    "mapped_file_size_commit_log": 64 * 1024,
    "mapped_file_size_consume_queue": 20 * 10,
    "max_hash_slot_num": 64,
    "max_index_num": 50,
    # Only expiry deletes: a full disk of the machine running the tests must not make a round
    # delete at once (cleanFileForciblyEnable && cleanImmediately).
    "clean_file_forcibly_enable": False,
    "file_reserved_time": 1,
}
QUEUES = [("Kept", 0), ("Kept", 1), ("Gone", 0)]
KEPT = 3  # newest segments left unexpired


class Written:
    """The writer's record: (commitlog offset, topic, queue, queue offset) of every put."""

    def __init__(self) -> None:
        self.puts: list[tuple[int, str, int, int]] = []

    def put(self, store: MessageStore, topic: str, q: int) -> None:
        o = sum(1 for _, t, qq, _ in self.puts if (t, qq) == (topic, q))
        r = store.put_message(
            Message(topic, body_for(topic, q, o), keys=[key_for(topic, q, o), "shared"], queue_id=q)
        )
        assert r.ok
        assert r.queue_offset == o
        self.puts.append((r.wrote_offset, topic, q, o))


@pytest.fixture
def cleaned(tmp_path: Path) -> Iterator[tuple[MessageStore, Written, int, Path]]:
    """The store after the deletion, the writer's record, the commitlog's new min offset, and
    the store's folder."""
    path = tmp_path / "store"
    written = Written()
    with MessageStore(path, **SIZES) as store:
        for _ in range(15):
            written.put(store, "Gone", 0)
        for i in range(1200):
            written.put(store, "Kept", i % 2)
        assert store.wait_dispatched(30)
        segments = store.commitlog_segments()
        assert len(segments) >= 10
        old = time.time() - 2 * 3600
        for p in segments[:-KEPT]:
            os.utime(p, (old, old))
        report = store.clean_expired_files()
        low = store.get_min_phy_offset()
        assert low == int(Path(segments[-KEPT]).name)
        assert [Path(p).name for p in report.commit_log_files] == [
            Path(p).name for p in segments[:-KEPT]
        ]
        assert report.min_commit_log_offset == low
        assert max(off for off, t, *_ in written.puts if t == "Gone") < low
        yield store, written, low, path


def _expected_min(written: Written, low: int, topic: str, q: int) -> int:
    """The queue's first offset whose record is at or after ``low`` (its end when none is)."""
    offsets = [o for off, t, qq, o in written.puts if (t, qq) == (topic, q) and off >= low]
    total = sum(1 for _, t, qq, _ in written.puts if (t, qq) == (topic, q))
    return min(offsets) if offsets else total


def test_get_message_below_the_min_is_offset_too_small(
    cleaned: tuple[MessageStore, Written, int, Path],
) -> None:
    store, written, low, _ = cleaned
    for topic, q in QUEUES:
        want_min = _expected_min(written, low, topic, q)
        assert want_min > 0
        assert store.get_min_offset_in_queue(topic, q) == want_min, (topic, q)
        for offset in (0, want_min // 2, want_min - 1):
            r = store.get_message(GROUP, topic, q, offset, 32)
            assert r.status is GetMessageStatus.OFFSET_TOO_SMALL, (topic, q, offset, r.status)
            assert r.messages == []
            assert r.next_begin_offset == want_min
            assert r.min_offset == want_min
        r = store.get_message(GROUP, topic, q, want_min, 32)
        if topic == "Gone":  # nothing left: the min is the end
            assert r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
            assert store.get_max_offset_in_queue(topic, q) == want_min
            continue
        assert r.status is GetMessageStatus.FOUND
        assert r.messages[0].queue_offset == want_min
        for m in r.messages:
            check_message(m, topic, q, m.queue_offset)
            assert m.commit_log_offset >= low


def test_lookups_answer_none_or_the_right_message(
    cleaned: tuple[MessageStore, Written, int, Path],
) -> None:
    store, written, low, _ = cleaned
    for offset, topic, q, o in written.puts:
        m = store.look_message_by_offset(offset)
        if offset < low:
            assert m is None, offset
        else:
            assert m is not None, offset
            check_message(m, topic, q, o)
    for offset, topic, q, o in written.puts[::7]:
        found = store.query_message(topic, key_for(topic, q, o), 4)
        if offset < low:
            assert found == [], (topic, q, o)
        else:
            assert [m.commit_log_offset for m in found] == [offset]
            check_message(found[0], topic, q, o)
    # A key of many messages: only the remaining ones, newest first.
    shared = store.query_message("Kept", "shared", 64)
    assert [m.commit_log_offset for m in shared] == sorted(
        (off for off, t, *_ in written.puts if t == "Kept" and off >= low), reverse=True
    )[:64]


def test_read_batch_from_the_min_and_batches_kept_across_deletion(tmp_path: Path) -> None:
    path = tmp_path / "store"
    written = Written()
    with MessageStore(path, **SIZES) as store:
        for i in range(1200):
            written.put(store, "Kept", i % 2)
        assert store.wait_dispatched(30)
        before = [store.read_batch("Kept", q, 0, 1000) for q in (0, 1)]
        for batch in before:
            check_batch(batch)
        segments = store.commitlog_segments()
        old = time.time() - 2 * 3600
        for p in segments[:-KEPT]:
            os.utime(p, (old, old))
        removed = store.clean_expired_files().commit_log_files
        low = store.get_min_phy_offset()
        assert low == int(Path(segments[-KEPT]).name)
        assert removed
        assert not [p for p in removed if Path(p).exists()]
        # A segment a service thread held at that moment (a flush) goes once it is let go.
        deadline = time.monotonic() + 10
        while [p for p in segments[:-KEPT] if Path(p).exists()]:
            assert time.monotonic() < deadline, [p for p in segments if Path(p).exists()]
            store._core.redelete_hanged_file(120_000)
            time.sleep(0.05)
        # The batches read before hold every byte of the deleted segments' messages.
        for batch in before:
            assert min(batch.column("commit_log_offset").to_pylist()) < low
            check_batch(batch)
        for q in (0, 1):
            want_min = _expected_min(written, low, "Kept", q)
            batch = store.read_batch("Kept", q, want_min, 1000)
            offsets = batch.column("queue_offset").to_pylist()
            assert offsets[0] == want_min
            assert offsets == list(range(want_min, want_min + len(offsets)))
            check_batch(batch)


READ_ONLY = textwrap.dedent(
    """
    import json, sys
    from rmqstore import MessageStore
    path, sizes = sys.argv[1], json.loads(sys.argv[2])
    with MessageStore(path, read_only=True, **sizes) as store:
        def state():
            out = {"min_phy": store.get_min_phy_offset(), "queues": {}}
            for topic, q in (("Kept", 0), ("Kept", 1), ("Gone", 0)):
                r = store.get_message("g", topic, q, 0, 4)
                out["queues"][f"{topic}/{q}"] = [
                    store.get_min_offset_in_queue(topic, q), r.status.name, r.next_begin_offset,
                    [m.queue_offset for m in r.messages],
                ]
            return out
        print(json.dumps(state()), flush=True)
        sys.stdin.readline()  # the writer deletes now
        print(json.dumps(state()), flush=True)
        probe = json.loads(sys.argv[3])
        print(json.dumps([store.look_message_by_offset(off) is None for off in probe]), flush=True)
    """
)


def test_read_only_process_sees_the_deletion(tmp_path: Path) -> None:
    """A read-only store opened (and reading) before the writer deletes files: afterwards it
    answers as the writer does, without a crash."""
    path = tmp_path / "store"
    written = Written()
    with MessageStore(path, **SIZES) as store:
        for _ in range(15):
            written.put(store, "Gone", 0)
        for i in range(1200):
            written.put(store, "Kept", i % 2)
        assert store.wait_dispatched(30)
        probe = [off for off, *_ in written.puts[::50]]
        proc = subprocess.Popen(
            [sys.executable, "-c", READ_ONLY, str(path), json.dumps(SIZES), json.dumps(probe)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdin is not None
            first = json.loads(proc.stdout.readline())
            assert first["min_phy"] == 0
            assert all(v[:2] == [0, "FOUND"] for v in first["queues"].values()), first
            segments = store.commitlog_segments()
            old = time.time() - 2 * 3600
            for p in segments[:-KEPT]:
                os.utime(p, (old, old))
            assert store.clean_expired_files().commit_log_files
            low = store.get_min_phy_offset()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            after = json.loads(proc.stdout.readline())
            gone = json.loads(proc.stdout.readline())
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, (proc.returncode, stderr)
        assert after["min_phy"] == low
        for topic, q in QUEUES:
            want_min = _expected_min(written, low, topic, q)
            assert after["queues"][f"{topic}/{q}"] == [want_min, "OFFSET_TOO_SMALL", want_min, []]
        assert gone == [off < low for off in probe]


def test_deleted_segments_before_the_queue_round(tmp_path: Path) -> None:
    """Between the commitlog round (segments deleted) and the consume queue round (queue files
    deleted, min offsets corrected) the queues still hold units of deleted records. A consumer
    there still meets the gap only as ``OFFSET_TOO_SMALL`` at the queue's min offset, which
    already counts from the commitlog's new minimum; ``read_batch`` starts at that min."""
    path = tmp_path / "store"
    written = Written()
    with MessageStore(path, **SIZES) as store:
        for i in range(1200):
            written.put(store, "Kept", i % 2)
        assert store.wait_dispatched(30)
        segments = store.commitlog_segments()
        old = time.time() - 2 * 3600
        for p in segments[:-KEPT]:
            os.utime(p, (old, old))
        # The commitlog round alone (what clean_expired_files runs first).
        removed = store._core.delete_expired_commit_log_files(3_600_000, 0, 120_000, False, 100)
        assert len(removed) == len(segments) - KEPT
        low = store.get_min_phy_offset()
        for q in (0, 1):
            want_min = _expected_min(written, low, "Kept", q)
            r = store.get_message(GROUP, "Kept", q, 0, 32)
            assert (r.status, [m.queue_offset for m in r.messages], r.next_begin_offset) == (
                GetMessageStatus.OFFSET_TOO_SMALL,
                [],
                want_min,
            ), q
            assert store.get_min_offset_in_queue("Kept", q) == want_min
            r = store.get_message(GROUP, "Kept", q, want_min, 32)
            assert r.status is GetMessageStatus.FOUND
            assert r.messages[0].queue_offset == want_min
            batch = store.read_batch("Kept", q, 0, 50)
            assert batch.column("queue_offset").to_pylist() == list(range(want_min, want_min + 50))
            check_batch(batch)
