"""Issue 19: no reader breaks while expired files are deleted under it.

A writer appends to small segments while a cleaner expires all but the newest few every second
(modification times set back two hours with ``os.utime``, ``file_reserved_time`` 1 hour) and
deletes them with ``clean_expired_files``; at the same time, in this process, consumers read
every queue with ``get_message`` (one of them pausing long enough to fall behind the deletions),
a reader takes ``read_batch`` batches and keeps them, and others look messages up by commitlog
offset and by key; in another process a read-only store reads every queue too. The run lasts a
minute, as the issue asks (four with ``-m slow``). Every message any reader is handed is checked
byte for byte against what was written (``clean_workload``), a gap in a queue is only ever an
``OFFSET_TOO_SMALL`` answer that moves the consumer to the queue's min offset, the kept batches
still hold their bytes after their segments are gone, and the read-only process ends by itself
with exit code 0 (a SIGBUS would show as -7).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from rmqstore import Message, MessageStore
from store.clean_workload import (
    GROUP,
    batch_step,
    body_for,
    check_batch,
    check_message,
    get_step,
    key_for,
)

SIZES: dict[str, Any] = {
    "mapped_file_size_commit_log": 128 * 1024,
    "mapped_file_size_consume_queue": 20 * 50,
    "max_hash_slot_num": 64,
    "max_index_num": 200,
}
QUEUES = [(topic, q) for topic in ("CleanA", "CleanB") for q in range(4)]
#: Newest segments the cleaner leaves unexpired (about 2 s of the writer's messages).
KEPT = 8
WRITE_RATE = 800  # messages per second
CLEAN_EVERY = 1.0  # seconds


@dataclass
class Shared:
    """What the threads share: the writer's record of every put, the stop flag, failures."""

    stop: threading.Event = field(default_factory=threading.Event)
    writer_done: threading.Event = field(default_factory=threading.Event)
    #: (commitlog offset, topic, queue, queue offset) of every put, in put order
    written: list[tuple[int, str, int, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self, name: str, body: Callable[[], None]) -> threading.Thread:
        def wrapped() -> None:
            try:
                body()
            except BaseException:
                self.errors.append(f"{name}:\n{traceback.format_exc()}")
                self.stop.set()

        t = threading.Thread(target=wrapped, name=name, daemon=True)
        t.start()
        return t


def _writer(store: MessageStore, shared: Shared) -> None:
    rng = random.Random(19)
    next_offset = dict.fromkeys(QUEUES, 0)
    start = time.monotonic()
    n = 0
    while not shared.stop.is_set():
        topic, q = rng.choice(QUEUES)
        o = next_offset[(topic, q)]
        msg = Message(topic, body_for(topic, q, o), keys=[key_for(topic, q, o)], queue_id=q)
        r = store.put_message(msg)
        assert r.ok, r.status
        assert r.queue_offset == o, (topic, q, r.queue_offset, o)
        shared.written.append((r.wrote_offset, topic, q, o))
        next_offset[(topic, q)] = o + 1
        n += 1
        if n % 40 == 0:
            ahead = n / WRITE_RATE - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
    shared.writer_done.set()


@dataclass
class Cleaned:
    commit_log_files: list[str] = field(default_factory=list)
    consume_queue_files: int = 0
    index_files: int = 0
    rounds: int = 0


def _cleaner(store: MessageStore, shared: Shared, cleaned: Cleaned) -> None:
    old = time.time() - 2 * 3600
    while not shared.stop.wait(CLEAN_EVERY):
        for path in store.commitlog_segments()[:-KEPT]:
            with contextlib.suppress(FileNotFoundError):
                os.utime(path, (old, old))
        report = store.clean_expired_files()
        cleaned.rounds += 1
        cleaned.commit_log_files += report.commit_log_files
        cleaned.consume_queue_files += report.consume_queue_files
        cleaned.index_files += report.index_files
        for path in report.commit_log_files:
            assert int(Path(path).name) < report.min_commit_log_offset, (path, report)
        assert report.min_commit_log_offset <= store.get_min_phy_offset()


@dataclass
class Consumer:
    """A consumer of every queue through ``get_message``: what it read and the gaps it met."""

    pause: float
    offsets: dict[tuple[str, int], int] = field(default_factory=lambda: dict.fromkeys(QUEUES, 0))
    read: dict[tuple[str, int], list[int]] = field(default_factory=lambda: {q: [] for q in QUEUES})
    gaps: dict[tuple[str, int], list[tuple[int, int]]] = field(
        default_factory=lambda: {q: [] for q in QUEUES}
    )

    def step(self, store: MessageStore, topic: str, q: int) -> int:
        offset = self.offsets[(topic, q)]
        nxt, msgs, gap = get_step(store, topic, q, offset)
        self.read[(topic, q)] += [m.queue_offset for m in msgs]
        if gap:
            self.gaps[(topic, q)].append((offset, nxt))
        self.offsets[(topic, q)] = nxt
        return len(msgs) + gap

    def run(self, store: MessageStore, shared: Shared) -> None:
        while not shared.stop.is_set():
            moved = sum(self.step(store, topic, q) for topic, q in QUEUES)
            time.sleep(self.pause if self.pause else (0.0 if moved else 0.005))

    def drain(self, store: MessageStore, deadline: float) -> None:
        """Reads every queue to its end (the writer has stopped)."""
        for topic, q in QUEUES:
            end = store.get_max_offset_in_queue(topic, q)
            while self.offsets[(topic, q)] < end:
                assert time.monotonic() < deadline, (topic, q, self.offsets[(topic, q)], end)
                if not self.step(store, topic, q):
                    time.sleep(0.01)

    def check_complete(self, store: MessageStore) -> None:
        """Every offset of every queue was read once or skipped in a gap, and every skipped one
        is below the queue's min offset (it had expired)."""
        for topic, q in QUEUES:
            end = store.get_max_offset_in_queue(topic, q)
            low = store.get_min_offset_in_queue(topic, q)
            skipped = [o for a, b in self.gaps[(topic, q)] for o in range(a, b)]
            assert all(o < low for o in skipped), (topic, q, low, self.gaps[(topic, q)])
            seen = sorted(self.read[(topic, q)] + skipped)
            assert seen == list(range(end)), (topic, q, len(seen), end)


def _batch_reader(store: MessageStore, shared: Shared, kept: list[pa.RecordBatch]) -> None:
    offsets = dict.fromkeys(QUEUES, 0)
    rng = random.Random(7)
    while not shared.stop.is_set():
        topic, q = rng.choice(QUEUES)
        nxt, batch, _gap = batch_step(store, topic, q, offsets[(topic, q)])
        offsets[(topic, q)] = nxt
        if batch is not None and len(kept) < 400:
            kept.append(batch)
        # A slower reader: its batches come from segments the cleaner deletes soon after.
        time.sleep(0.02)


@dataclass
class Lookups:
    found: int = 0
    gone: int = 0


def _looker(store: MessageStore, shared: Shared, counts: Lookups) -> None:
    rng = random.Random(11)
    while not shared.stop.is_set():
        if not shared.written:
            time.sleep(0.01)
            continue
        offset, topic, q, qoff = shared.written[rng.randrange(len(shared.written))]
        m = store.look_message_by_offset(offset)
        if m is None:
            assert offset < store.get_min_phy_offset(), (offset, topic, q, qoff)
            counts.gone += 1
        else:
            check_message(m, topic, q, qoff)
            assert m.commit_log_offset == offset
            counts.found += 1
        time.sleep(0.001)


def _querier(store: MessageStore, shared: Shared, counts: Lookups) -> None:
    rng = random.Random(13)
    while not shared.stop.is_set():
        if len(shared.written) < 100:
            time.sleep(0.01)
            continue
        # Half of the lookups among the newest messages, half among all of them.
        n = len(shared.written)
        i = rng.randrange(n - 100, n) if rng.random() < 0.5 else rng.randrange(n)
        offset, topic, q, qoff = shared.written[i]
        key = key_for(topic, q, qoff)
        for attempt in range(200):
            found = store.query_message(topic, key, 4)
            if found or offset < store.get_min_phy_offset():
                break
            # Not indexed yet (dispatch runs behind the put): ask again.
            assert attempt < 199, f"key {key} (commitlog {offset}) not found and not expired"
            time.sleep(0.01)
        for m in found:
            check_message(m, topic, q, qoff)
            assert m.commit_log_offset == offset
        assert len(found) <= 1, (key, [m.commit_log_offset for m in found])
        if found:
            counts.found += 1
        else:
            counts.gone += 1
        time.sleep(0.002)


def _read_only_process(store_path: Path, seconds: float) -> subprocess.Popen[str]:
    script = Path(__file__).with_name("clean_workload.py")
    return subprocess.Popen(
        [
            sys.executable,
            str(script),
            str(store_path),
            str(seconds),
            json.dumps(SIZES),
            json.dumps(QUEUES),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    "seconds",
    [pytest.param(60.0, id="1min"), pytest.param(240.0, id="4min", marks=pytest.mark.slow)],
)
def test_readers_across_deletion(store_path: Path, seconds: float) -> None:
    shared = Shared()
    cleaned = Cleaned()
    fast, laggard = Consumer(pause=0.0), Consumer(pause=3.0)
    kept: list[pa.RecordBatch] = []
    looked, queried = Lookups(), Lookups()
    with MessageStore(
        store_path,
        **SIZES,
        file_reserved_time=1,
        # Only expiry deletes (a full disk of the machine must not make rounds delete at once).
        clean_file_forcibly_enable=False,
        delete_commit_log_files_interval=5,
        delete_consume_queue_files_interval=0,
    ) as store:
        threads = [shared.run("writer", lambda: _writer(store, shared))]
        # The read-only store needs the writer's first files.
        started = time.monotonic()
        while len(shared.written) < 200 and not shared.stop.is_set():
            assert time.monotonic() - started < 30, "the writer does not write"
            time.sleep(0.01)
        assert store.wait_dispatched(10)
        proc = _read_only_process(store_path, seconds)
        try:
            threads += [
                shared.run("cleaner", lambda: _cleaner(store, shared, cleaned)),
                shared.run("consumer", lambda: fast.run(store, shared)),
                shared.run("laggard", lambda: laggard.run(store, shared)),
                shared.run("batches", lambda: _batch_reader(store, shared, kept)),
                shared.run("looker", lambda: _looker(store, shared, looked)),
                shared.run("querier", lambda: _querier(store, shared, queried)),
            ]
            shared.stop.wait(seconds)
            shared.stop.set()
            for t in threads:
                t.join(30)
                assert not t.is_alive(), f"{t.name} did not stop"
            stdout, stderr = proc.communicate(timeout=seconds + 60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert not shared.errors, "\n".join(shared.errors)
        assert proc.returncode == 0, (
            f"the read-only reader process ended with {proc.returncode}"
            + (f" ({signal.Signals(-proc.returncode).name})" if proc.returncode < 0 else "")
            + f"\nstdout: {stdout[-3000:]}\nstderr: {stderr[-5000:]}"
        )
        remote = json.loads(stdout.strip().splitlines()[-1])

        # The consumers read every queue to its end: each offset read once or expired.
        assert store.wait_dispatched(30)
        deadline = time.monotonic() + 60
        for consumer in (fast, laggard):
            consumer.drain(store, deadline)
            consumer.check_complete(store)
        min_phy = store.get_min_phy_offset()

        # The kept batches hold their bytes, those whose segments are gone included.
        for batch in kept:
            check_batch(batch)
        from_deleted = [b for b in kept if min(b.column("commit_log_offset").to_pylist()) < min_phy]

        # The run did what it is meant to: segments, queue and index files were deleted while
        # every kind of reader was at work, and readers met deleted messages.
        assert len(cleaned.commit_log_files) >= 3 * seconds / 15, cleaned
        assert cleaned.consume_queue_files > 0
        assert cleaned.index_files > 0
        assert min_phy > 0
        assert sum(len(g) for g in laggard.gaps.values()) >= len(QUEUES), laggard.gaps
        assert from_deleted, (len(kept), min_phy)
        assert looked.found > 0, looked
        assert looked.gone > 0, looked
        assert queried.found > 0, queried
        assert queried.gone > 0, queried
        assert remote["messages"] > 0, remote
        assert remote["batches"] > 0, remote
        assert remote["gaps"] > 0, remote  # the read-only reader fell behind the deletions too
        # The newest messages are all still there.
        for offset, topic, q, qoff in shared.written[-50:]:
            m = store.look_message_by_offset(offset)
            assert m is not None
            check_message(m, topic, q, qoff)
        r = store.get_message(GROUP, "CleanA", 0, store.get_min_offset_in_queue("CleanA", 0), 1)
        assert r.messages
        # What the run did (shown with -s).
        print(
            f"\n{seconds:.0f} s: {len(shared.written)} puts, {cleaned.rounds} rounds deleted "
            f"{len(cleaned.commit_log_files)} segments, {cleaned.consume_queue_files} queue and "
            f"{cleaned.index_files} index files; consumer read "
            f"{sum(map(len, fast.read.values()))}, laggard read "
            f"{sum(map(len, laggard.read.values()))} and met "
            f"{sum(map(len, laggard.gaps.values()))} gaps; {len(kept)} batches kept "
            f"({len(from_deleted)} from deleted segments); lookups {looked}, queries {queried}; "
            f"read-only process {remote}"
        )
