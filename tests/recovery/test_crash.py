"""Crash safety with real processes: a child writes, the parent SIGKILLs it at a random moment,
reopens the store and checks what survived."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rmqstore import GetMessageStatus, Message, MessageStore, PutMessageStatus

CHILD = textwrap.dedent(
    """
    import sys
    import rmqstore

    path, mode, start, pool = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    store = rmqstore.MessageStore(
        path,
        flush_disk_type=mode,
        transient_store_pool_enable=pool,
        transient_store_pool_size=2,
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=20 * 500,
        max_hash_slot_num=512,
        max_index_num=2000,
        flush_interval_commit_log=5,
        flush_commit_log_least_pages=0,
    )
    print("READY", flush=True)
    i = start
    while True:
        key = f"key-{i}"
        body = (f"body-{i}-" * (1 + i % 7)).encode()
        if i % 5 == 0:
            r = store.put_messages("Crash", i % 3, [body, body + b"!"], keys=[key])
        else:
            r = store.put_message(rmqstore.Message("Crash", body, keys=[key], queue_id=i % 3))
        if r.status is not rmqstore.PutMessageStatus.PUT_OK:
            print("BAD", r.status.name, flush=True)
            break
        print(f"ACK {r.wrote_offset} {r.queue_offset} {i % 3} {key}", flush=True)
        i += 1
    """
)

STORE = {
    "mapped_file_size_commit_log": 256 * 1024,
    "mapped_file_size_consume_queue": 20 * 500,
    "max_hash_slot_num": 512,
    "max_index_num": 2000,
}


def _run_and_kill(
    path: Path, mode: str, start: int, rng: random.Random, pool: bool = False
) -> list[tuple]:
    """Starts a writer, kills it with SIGKILL after a random number of acknowledgements (or
    a random time), returns the acknowledged (offset, queue_offset, queue_id, key)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), mode, str(start), "1" if pool else "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    acked: list[tuple] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "READY", (line, proc.stderr.read() if proc.stderr else "")
        target = rng.randint(1, 400)
        deadline = time.monotonic() + rng.uniform(0.01, 0.4)
        while len(acked) < target and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.05)
            if not ready:
                continue
            line = proc.stdout.readline()
            if not line:
                break
            parts = line.split()
            assert parts[0] == "ACK", line
            acked.append((int(parts[1]), int(parts[2]), int(parts[3]), parts[4]))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # Acknowledgements printed before the kill count too.
        if proc.stdout is not None:
            for line in proc.stdout.read().splitlines():
                parts = line.split()
                if parts and parts[0] == "ACK":
                    acked.append((int(parts[1]), int(parts[2]), int(parts[3]), parts[4]))
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return acked


def _check(store: MessageStore, acked: list[tuple]) -> None:
    assert store.wait_dispatched()
    max_phy = store.get_max_phy_offset()
    for offset, queue_offset, queue_id, key in acked:
        m = store.look_message_by_offset(offset)
        assert m is not None, f"acknowledged message at {offset} lost"
        assert m.keys == [key]
        assert m.queue_offset == queue_offset
        r = store.get_message("g", "Crash", queue_id, queue_offset, 1)
        assert r.status is GetMessageStatus.FOUND
        assert r.messages[0].commit_log_offset == offset
        assert any(x.commit_log_offset == offset for x in store.query_message("Crash", key))
        assert offset < max_phy
    # Nothing beyond the valid tail: every queue is dense, in order, and each unit points at a
    # record of its own queue.
    for q in store.queue_ids("Crash"):
        lo = store.get_min_offset_in_queue("Crash", q)
        hi = store.get_max_offset_in_queue("Crash", q)
        expected = lo
        while expected < hi:
            r = store.get_message("g", "Crash", q, expected, 32)
            assert r.status is GetMessageStatus.FOUND, r.status
            for m in r.messages:
                assert (m.queue_id, m.queue_offset) == (q, expected)
                expected += 1
        assert expected == hi


def _survivors(store: MessageStore, acked: list[tuple]) -> list[tuple]:
    """The acknowledged messages still readable, checked to be a prefix of ``acked``."""
    readable = []
    for entry in acked:
        m = store.look_message_by_offset(entry[0])
        if m is None or m.keys != [entry[3]]:
            break
        readable.append(entry)
    for entry in acked[len(readable) :]:
        m = store.look_message_by_offset(entry[0])
        assert m is None or m.keys != [entry[3]], f"{entry} readable after a lost message"
    return readable


def _rounds(tmp_path: Path, mode: str, rounds: int, seed: int, pool: bool = False) -> None:
    rng = random.Random(seed)
    path = tmp_path / "store"
    all_acked: list[tuple] = []
    start = 0
    for _ in range(rounds):
        acked = _run_and_kill(path, mode, start, rng, pool)
        start += len(acked) + 1000
        with MessageStore(path, flush_disk_type=mode, **STORE) as store:
            assert store.recovery_report()["abnormal"] is True  # the abort marker was left
            # SYNC_FLUSH: acknowledged means forced (with the transient store pool: committed
            # and forced). ASYNC_FLUSH: a killed process leaves its written pages in the page
            # cache, so what was acknowledged survives too, except, with the pool, what was
            # still in a write buffer: then what survives is a prefix. Either way what is
            # readable is a prefix of what was written, with no corrupt record.
            if pool and mode == "ASYNC_FLUSH":
                acked = _survivors(store, acked)
            all_acked += acked
            _check(store, all_acked)
            # Writing goes on after recovery.
            r = store.put_message(Message("Crash", b"after", keys=[f"after-{start}"]))
            assert r.status is PutMessageStatus.PUT_OK
            all_acked.append((r.wrote_offset, r.queue_offset, 0, f"after-{start}"))


def test_sigkill_sync_flush(tmp_path: Path) -> None:
    _rounds(tmp_path, "SYNC_FLUSH", rounds=20, seed=1)


def test_sigkill_async_flush(tmp_path: Path) -> None:
    _rounds(tmp_path, "ASYNC_FLUSH", rounds=8, seed=2)


def test_sigkill_sync_flush_transient_pool(tmp_path: Path) -> None:
    _rounds(tmp_path, "SYNC_FLUSH", rounds=8, seed=5, pool=True)


def test_sigkill_async_flush_transient_pool(tmp_path: Path) -> None:
    _rounds(tmp_path, "ASYNC_FLUSH", rounds=8, seed=6, pool=True)


@pytest.mark.slow
def test_sigkill_many_rounds(tmp_path: Path) -> None:
    _rounds(tmp_path / "sync", "SYNC_FLUSH", rounds=100, seed=3)
    _rounds(tmp_path / "async", "ASYNC_FLUSH", rounds=100, seed=4)
    _rounds(tmp_path / "pool", "ASYNC_FLUSH", rounds=50, seed=7, pool=True)
