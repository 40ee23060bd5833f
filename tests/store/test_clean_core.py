"""Retention's calls of the core ``Store`` (``MessageStore._core``), on real files: expired
commitlog segments removed by time in batches, consume queue and index files below the new
minimum, readers of removed ranges, a restart after deletion, and a read-only store in another
process reading while the writer deletes. What the Python cleaning services build on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import rmqstore
from conftest import OpenStore
from rmqstore import GetMessageStatus, Message, MessageStore
from rmqwire import SEGMENT, SMALL_STORE

HOUR_MS = 3600 * 1000
#: 7 messages per 64 KiB commitlog segment; 50 units per consume queue segment (SMALL_STORE).
BODY = 9000


def _body(i: int) -> bytes:
    return f"m-{i}-".encode().ljust(BODY, b"x")


def _fill_segments(store: MessageStore, segments: int) -> list[int]:
    """Puts messages to T/0 until the commitlog has ``segments`` segments, the last one partly
    written; returns each message's commitlog offset (its queue offset is its index)."""
    offsets: list[int] = []
    while len(store.commitlog_segments()) < segments or store.get_max_phy_offset() % SEGMENT == 0:
        r = store.put_message(Message("T", _body(len(offsets)), keys=[f"k{len(offsets)}"]))
        assert r.ok
        offsets.append(r.wrote_offset)
    assert store.wait_dispatched()
    return offsets


def _age(paths: list[str], hours: float) -> None:
    then = time.time() - hours * 3600
    for p in paths:
        os.utime(p, (then, then))


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_expired_segments_go_by_time_in_batches(open_small: OpenStore) -> None:
    store = open_small()
    _fill_segments(store, 16)
    segs = [str(p) for p in store.commitlog_segments()]
    assert len(segs) == 16
    core = store._core
    # Nothing has expired yet.
    assert core.delete_expired_commit_log_files(72 * HOUR_MS, 0, 120_000, False, 10) == []
    _age(segs, 100)
    # The fifth is younger than the reserved time: deletion stops there.
    _age([segs[4]], 1)
    assert core.delete_expired_commit_log_files(72 * HOUR_MS, 0, 120_000, False, 10) == segs[:4]
    assert all(not Path(p).exists() for p in segs[:4])
    assert store.get_min_phy_offset() == 4 * SEGMENT
    _age([segs[4]], 100)
    # 11 expired, batch of 10: 10 then 1; the last (being written) never goes.
    assert core.delete_expired_commit_log_files(72 * HOUR_MS, 0, 120_000, False, 10) == segs[4:14]
    assert core.delete_expired_commit_log_files(72 * HOUR_MS, 0, 120_000, False, 10) == segs[14:15]
    assert core.delete_expired_commit_log_files(0, 0, 0, True, 10) == []
    assert [str(p) for p in store.commitlog_segments()] == segs[15:]
    assert core.redelete_hanged_file(0) is False


def test_consume_queue_and_index_files_below_the_minimum_and_readers(
    open_small: OpenStore, store_path: Path
) -> None:
    store = open_small()
    offsets = _fill_segments(store, 10)
    n = len(offsets)
    cq_dir = store_path / "consumequeue" / "T" / "0"
    cq_before, index_before = _files(cq_dir), _files(store_path / "index")
    core = store._core
    assert core.clean_consume_queues(0) == (0, 0)
    removed = core.delete_expired_commit_log_files(0, 0, 120_000, True, 8)
    assert len(removed) == 8
    min_phy = store.get_min_phy_offset()
    assert min_phy == 8 * SEGMENT
    cq_removed, index_removed = core.clean_consume_queues(0)
    first_kept = next(i for i, o in enumerate(offsets) if o >= min_phy)
    assert cq_removed == first_kept // 50 >= 1
    assert _files(cq_dir) == cq_before[cq_removed:]
    assert index_removed >= 1
    assert _files(store_path / "index") == index_before[index_removed:]
    assert core.clean_consume_queues(0) == (0, 0)
    # Every minimum agrees.
    assert store.get_min_offset_in_queue("T", 0) == first_kept
    assert store.get_max_offset_in_queue("T", 0) == n
    assert store.get_message_total_in_queue("T", 0) == n - first_kept
    # Below the minimum: OFFSET_TOO_SMALL, next begin = the minimum.
    for offset in (0, first_kept - 1):
        r = store.get_message("g", "T", 0, offset, 32)
        assert r.status is GetMessageStatus.OFFSET_TOO_SMALL
        assert r.next_begin_offset == first_kept
        assert r.min_offset == first_kept
    r = store.get_message("g", "T", 0, first_kept, 32)
    assert r.status is GetMessageStatus.FOUND
    assert r.messages[0].body == _body(first_kept)
    # Removed offsets answer None / -1 / nothing, never an exception.
    assert store.look_message_by_offset(offsets[0]) is None
    assert store.look_message_by_offset(0) is None
    kept = store.look_message_by_offset(offsets[first_kept])
    assert kept is not None
    assert kept.queue_offset == first_kept
    assert store.get_message_store_timestamp("T", 0, 0) == -1
    assert store.get_message_store_timestamp("T", 0, first_kept) > 0
    assert store.get_earliest_message_time("T", 0) > 0
    batch = store.read_batch("T", 0, 0, 1000)
    assert batch.column("queue_offset").to_pylist() == list(range(first_kept, n))
    assert store.query_message("T", "k0", 10, 0, int(time.time() * 1000) + 1000) == []
    found = store.query_message("T", f"k{first_kept}", 10, 0, int(time.time() * 1000) + 1000)
    assert [m.queue_offset for m in found] == [first_kept]


def test_restart_after_deletion(open_small: OpenStore, store_path: Path) -> None:
    store = open_small()
    offsets = _fill_segments(store, 6)
    n = len(offsets)
    store._core.delete_expired_commit_log_files(0, 0, 0, True, 4)
    store._core.clean_consume_queues(0)
    min_q = store.get_min_offset_in_queue("T", 0)
    store.close()
    assert sorted(os.listdir(store_path / "commitlog"))[0] == f"{4 * SEGMENT:020d}"
    store = open_small()
    assert store.get_min_phy_offset() == 4 * SEGMENT
    assert store.get_min_offset_in_queue("T", 0) == min_q
    assert store.get_max_offset_in_queue("T", 0) == n
    r = store.get_message("g", "T", 0, 0, 32)
    assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, min_q)
    r = store.get_message("g", "T", 0, min_q, 32)
    assert r.messages[0].commit_log_offset == offsets[min_q]
    put = store.put_message(Message("T", _body(n)))
    assert put.ok
    assert put.queue_offset == n
    assert store.wait_dispatched()
    assert store.get_message("g", "T", 0, n, 1).messages[0].body == _body(n)


def test_arguments_are_checked(open_small: OpenStore, store_path: Path) -> None:
    store = open_small()
    _fill_segments(store, 2)
    core = store._core
    with pytest.raises(rmqstore.InvalidArgumentError, match="batch_max"):
        core.delete_expired_commit_log_files(0, 0, 0, True, 0)
    with pytest.raises(rmqstore.InvalidArgumentError, match="expired_ms"):
        core.delete_expired_commit_log_files(-1, 0, 0, True, 1)
    with pytest.raises(rmqstore.ArgumentTypeError, match="clean_at_once"):
        core.delete_expired_commit_log_files(0, 0, 0, 1, 1)
    with pytest.raises(rmqstore.ArgumentOverflowError, match="interval_ms"):
        core.clean_consume_queues(1 << 70)
    with pytest.raises(rmqstore.InvalidArgumentError, match="destroy_forcibly_ms"):
        core.redelete_hanged_file(-1)
    assert len(store.commitlog_segments()) == 2
    store.close()
    with pytest.raises(rmqstore.StoreClosedError):
        core.clean_consume_queues(0)
    reader = MessageStore(store_path, read_only=True, **SMALL_STORE)
    try:
        with pytest.raises(rmqstore.StoreReadOnlyError):
            reader._core.delete_expired_commit_log_files(0, 0, 0, True, 10)
        with pytest.raises(rmqstore.StoreReadOnlyError):
            reader._core.clean_consume_queues(0)
    finally:
        reader.close()


#: A read-only store in its own process: reads T/0 from its minimum on, in rounds, checking
#: every message it gets, until the writer says it is done and it has caught up with the
#: final minimum; prints what it saw as JSON.
READER = r"""
import json, sys, time
from pathlib import Path
from rmqstore import GetMessageStatus, MessageStore
from rmqwire import SMALL_STORE

store_path, done = Path(sys.argv[1]), Path(sys.argv[2])
body_len = int(sys.argv[3])
reader = MessageStore(store_path, read_only=True, **SMALL_STORE)
print("READY", flush=True)
mins, messages, too_small, rounds = [], 0, 0, 0
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    rounds += 1
    finished = done.exists()
    low = reader.get_min_offset_in_queue("T", 0)
    if not mins or mins[-1] != low:
        mins.append(low)
    offset = max(0, low - 3)
    while True:
        r = reader.get_message("g", "T", 0, offset, 16)
        if r.status is GetMessageStatus.OFFSET_TOO_SMALL:
            too_small += 1
            assert r.next_begin_offset > offset, r
        for m in r.messages:
            assert m.body == f"m-{m.queue_offset}-".encode().ljust(body_len, b"x"), m.queue_offset
            messages += 1
        batch = reader.read_batch("T", 0, offset, 64)
        for q, b in zip(batch.column("queue_offset").to_pylist(), batch.column("body").to_pylist()):
            assert b == f"m-{q}-".encode().ljust(body_len, b"x"), q
        reader.look_message_by_offset(0)
        reader.get_message_store_timestamp("T", 0, offset)
        if r.next_begin_offset <= offset or r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE:
            break
        offset = r.next_begin_offset
    if finished and reader.get_min_phy_offset() == int(done.read_text()):
        break
low = reader.get_min_offset_in_queue("T", 0)
if mins[-1] != low:
    mins.append(low)
print(json.dumps({
    "mins": mins, "messages": messages, "too_small": too_small, "rounds": rounds,
    "min_phy": reader.get_min_phy_offset(), "min_q": reader.get_min_offset_in_queue("T", 0),
}))
reader.close()
"""


def test_read_only_store_in_another_process_reads_while_the_writer_deletes(
    open_small: OpenStore, store_path: Path, tmp_path: Path
) -> None:
    store = open_small()
    offsets = _fill_segments(store, 14)
    store.flush()
    done = tmp_path / "done"
    proc = subprocess.Popen(
        [sys.executable, "-c", READER, str(store_path), str(done), str(BODY)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        core = store._core
        # One segment a round (forcibly at once: the reader's mappings outlive the files),
        # with the reader going on in between.
        for _ in range(12):
            time.sleep(0.05)
            assert len(core.delete_expired_commit_log_files(0, 0, 0, True, 1)) == 1
            core.clean_consume_queues(0)
        min_phy = store.get_min_phy_offset()
        assert min_phy == 12 * SEGMENT
        done.write_text(str(min_phy))
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    seen = json.loads(out.strip().splitlines()[-1])
    min_q = store.get_min_offset_in_queue("T", 0)
    assert seen["min_phy"] == min_phy
    assert seen["min_q"] == min_q
    assert seen["mins"][0] == 0
    assert seen["mins"][-1] == min_q
    assert seen["mins"] == sorted(seen["mins"]), "the minimum only moves forward"
    assert len(seen["mins"]) >= 3, seen
    assert seen["messages"] > 0
    assert seen["too_small"] > 0
    assert min_q == next(i for i, o in enumerate(offsets) if o >= min_phy)
