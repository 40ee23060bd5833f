"""Read-only opens: no lock, no change to any file, only dispatched messages, never a torn
record, and working on a store another process is writing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import rmqstore
from conftest import OpenStore
from rmqstore import GetMessageStatus, Message, MessageStore
from rmqwire import SMALL_STORE, snapshot


def _fill(store: MessageStore, n: int, topic: str = "T", queues: int = 3, pad: int = 0) -> None:
    for i in range(n):
        r = store.put_message(
            Message(
                topic,
                f"body-{i}-".encode() * (1 + i % 9) + bytes(pad),
                tags=f"Tag{i % 2}",
                keys=[f"k{i}"],
                queue_id=i % queues,
            )
        )
        assert r.ok
    assert store.wait_dispatched()


def _all_messages(store: MessageStore, topic: str, q: int, **kw: str) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        r = store.get_message("g", topic, q, offset, 32, **kw)
        out += [(m.queue_offset, m.body) for m in r.messages]
        if r.next_begin_offset == offset or r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE:
            return out
        offset = r.next_begin_offset


def test_read_only_changes_nothing_and_reads_what_was_written(
    open_small: OpenStore, store_path: Path
) -> None:
    with open_small() as writer:
        _fill(writer, 300)
        expected = {q: _all_messages(writer, "T", q) for q in writer.queue_ids("T")}
        tag1 = {q: _all_messages(writer, "T", q, subscription="Tag1") for q in expected}
    assert sum(len(v) for v in expected.values()) == 300
    before = snapshot(store_path)
    reader = MessageStore(store_path, read_only=True, **SMALL_STORE)
    assert reader.read_only
    assert reader.topics() == ["T"]
    assert reader.queue_ids("T") == [0, 1, 2]
    assert reader.dispatch_behind_bytes() == 0
    for q, want in expected.items():
        assert reader.get_min_offset_in_queue("T", q) == 0
        assert reader.get_max_offset_in_queue("T", q) == len(want)
        assert _all_messages(reader, "T", q) == want
        batch = reader.read_batch("T", q, 0, 1000)
        assert batch.column("body").to_pylist() == [b for _, b in want]
        assert _all_messages(reader, "T", q, subscription="Tag1") == tag1[q]
    # Reading changed nothing, not even a timestamp, and took no lock: a writer opens now.
    reader.close()
    assert snapshot(store_path) == before
    with open_small() as again:
        assert again.get_max_offset_in_queue("T", 0) == len(expected[0])


def test_read_only_refuses_writes_with_a_clear_error(
    open_small: OpenStore, store_path: Path
) -> None:
    with open_small() as writer:
        _fill(writer, 5)
    reader = MessageStore(store_path, read_only=True, **SMALL_STORE)
    try:
        calls = [
            lambda: reader.put_message(Message("T", b"x")),
            lambda: reader.put_messages("T", 0, [b"x"]),
            reader.flush,
            lambda: reader.truncate_files(0),
            lambda: reader.commit_offset("g", "T", 0, 1),
            lambda: reader.query_offset("g", "T", 0),
            lambda: reader.query_message("T", "k1"),
        ]
        for call in calls:
            with pytest.raises(rmqstore.StoreReadOnlyError, match="read-only"):
                call()
        assert reader.service_stats() == {}
    finally:
        reader.close()


def test_read_only_of_a_folder_that_is_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(rmqstore.InvalidArgumentError, match="not a message store"):
        MessageStore(tmp_path / "nothing", read_only=True)
    assert not (tmp_path / "nothing").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(rmqstore.InvalidArgumentError, match="commitlog"):
        MessageStore(tmp_path / "empty", read_only=True)
    assert list((tmp_path / "empty").iterdir()) == []


def test_read_only_while_the_writer_holds_the_store(
    open_small: OpenStore, store_path: Path
) -> None:
    writer = open_small()
    _fill(writer, 50)
    reader = MessageStore(store_path, read_only=True, **SMALL_STORE)
    try:
        assert reader.get_max_offset_in_queue("T", 0) == writer.get_max_offset_in_queue("T", 0)
        # New messages, a new queue and a new topic appear in the reader once dispatched.
        _fill(writer, 200, topic="Later", queues=4, pad=1000)
        assert reader.queue_ids("Later") == [0, 1, 2, 3]
        for q in range(4):
            assert reader.get_max_offset_in_queue("Later", q) == 50
            got = reader.read_batch("Later", q, 0, 1000)
            assert got.column("queue_offset").to_pylist() == list(range(50))
        assert len(writer.commitlog_segments()) > 2
    finally:
        reader.close()


LIVE_WRITER = textwrap.dedent(
    """
    import sys, time, rmqstore
    from rmqwire import SMALL_STORE
    store = rmqstore.MessageStore(sys.argv[1], **SMALL_STORE)
    print("READY", flush=True)
    i = 0
    while True:
        # At most about 20,000 messages a second: with SMALL_STORE's 1,000-byte consume queue
        # files, an unthrottled writer made over 20,000 files (each open store holds a
        # descriptor per file) within the test's seconds, and the final open ran out of file
        # descriptors (EMFILE).
        if i % 20 == 19:
            time.sleep(0.001)
        body = (f"live-{i}-" * (1 + i % 13)).encode()
        if i % 4 == 0:
            r = store.put_messages("Live", i % 2, [body, body + b"+"], tags="TagB")
        else:
            r = store.put_message(rmqstore.Message("Live", body, tags="TagA", queue_id=i % 2))
        assert r.ok, r.status
        i += 1
    """
)


def test_read_only_never_sees_a_torn_record_of_a_live_writer(store_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", LIVE_WRITER, str(store_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        appeared_by = time.monotonic() + 10.0
        while not (store_path / "consumequeue" / "Live").exists():
            assert time.monotonic() < appeared_by
            time.sleep(0.01)
        reader = MessageStore(store_path, read_only=True, **SMALL_STORE)
        seen = {0: 0, 1: 0}
        rounds = 0
        # The reading runs at least 2 s and 11 rounds from when the reader is open, while the
        # writer goes on: the clock starts after the open, which takes longer on a loaded
        # machine, and a writer that stops is reported as such instead of as a timeout.
        deadline = time.monotonic() + 2.0
        limit = deadline + 30
        while time.monotonic() < deadline or min(seen.values()) < 200 or rounds <= 10:
            assert time.monotonic() < limit, (seen, rounds)
            assert proc.poll() is None, f"the writer stopped (exit code {proc.returncode})"
            rounds += 1
            for q in (0, 1):
                batch = reader.read_batch("Live", q, seen[q], 500)
                offsets = batch.column("queue_offset").to_pylist()
                # Dense, in order, and every record whole and of this queue.
                assert offsets == list(range(seen[q], seen[q] + len(offsets)))
                for body, tags in zip(
                    batch.column("body").to_pylist(), batch.column("tags").to_pylist(), strict=True
                ):
                    assert body.startswith(b"live-")
                    assert tags in ("TagA", "TagB")
                assert set(batch.column("queue_id").to_pylist()) <= {q}
                seen[q] += len(offsets)
                got = reader.get_message("g", "Live", q, max(0, seen[q] - 5), 32)
                assert got.status in (GetMessageStatus.FOUND, GetMessageStatus.OFFSET_OVERFLOW_ONE)
        assert seen[0] > 200
        reader.close()
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    # The writer was killed; a writable open recovers and holds at least what was read.
    with MessageStore(store_path, **SMALL_STORE) as store:
        for q in (0, 1):
            assert store.get_max_offset_in_queue("Live", q) >= seen[q]


@pytest.mark.parametrize("torn", ["copy_of_first", "size_only", "past_the_log", "tags_code"])
def test_read_only_stops_before_a_unit_its_record_does_not_confirm(
    open_small: OpenStore, store_path: Path, torn: str
) -> None:
    """A unit the writer is still writing (simulated: bytes that look whole but do not match
    the record they point at) is not readable until it matches."""
    with open_small() as writer:
        _fill(writer, 10, queues=1)
    cq = store_path / "consumequeue" / "T" / "0" / f"{0:020d}"
    data = bytearray(cq.read_bytes())
    last = bytes(data[9 * 20 : 10 * 20])
    phy, size, tags = (
        int.from_bytes(last[:8], "big"),
        int.from_bytes(last[8:12], "big"),
        int.from_bytes(last[12:], "big", signed=True),
    )
    unit = {
        "copy_of_first": bytes(data[:20]),
        "size_only": phy.to_bytes(8, "big") + (size - 1).to_bytes(4, "big") + bytes(8),
        "past_the_log": (1 << 40).to_bytes(8, "big") + size.to_bytes(4, "big") + bytes(8),
        "tags_code": last[:12] + (tags + 1).to_bytes(8, "big", signed=True),
    }[torn]
    # Replace the last unit: it points at a real record but does not describe it.
    data[9 * 20 : 10 * 20] = unit
    cq.write_bytes(bytes(data))
    with MessageStore(store_path, read_only=True, **SMALL_STORE) as reader:
        assert reader.get_max_offset_in_queue("T", 0) == 9
        assert len(reader.read_batch("T", 0, 0, 100)) == 9
        # The writer finishes the unit: now it is readable.
        data[9 * 20 : 10 * 20] = last
        cq.write_bytes(bytes(data))
        assert reader.get_max_offset_in_queue("T", 0) == 10
        assert reader.read_batch("T", 0, 9, 1).column("queue_offset").to_pylist() == [9]
