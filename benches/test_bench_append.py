"""Issue 2 figures: batch append vs memcpy, single put rate, segment roll cost.

Each benchmark records in ``extra_info`` how many messages and body bytes one call moves, so the
report can turn times into rates and ratios against the baseline measured in the same run.
"""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

import pytest
import rmqstore

MiB = 1024 * 1024
BATCH_BYTES = 1 * MiB  # one batch call moves about this many body bytes


def _wait_preallocated(store: rmqstore.MessageStore, timeout: float = 60.0) -> None:
    """Waits until the allocation service has made (and warmed) the next segment, so it does not
    compete with the measurement."""
    deadline = time.monotonic() + timeout
    while not store._core.preallocated_offsets():
        if time.monotonic() > deadline:
            raise TimeoutError("allocation service did not pre-allocate the next segment")
        time.sleep(0.01)


def _segment_bytes(scaled) -> int:
    return scaled(1024, 256) * MiB


@pytest.mark.parametrize("size", [128, 1024])
def test_memcpy_baseline(benchmark, tmp_path: Path, scaled, size: int) -> None:
    """The ceiling: a plain copy of one batch's body bytes into an already-faulted mapping.

    The mapping is what a commitlog segment is: a file of the segment size with its blocks
    reserved, mapped shared and faulted in by a write to every page (as warming does). Batches
    go to fresh, increasing positions, as appends do, so both sides write equally cold memory.
    """
    n = BATCH_BYTES // size
    data = os.urandom(size) * n
    length = _segment_bytes(scaled)
    rounds = scaled(200, 30)
    assert (rounds + 5) * len(data) <= length
    path = tmp_path / "memcpy"
    with open(path, "w+b") as f:
        os.posix_fallocate(f.fileno(), 0, length)
        mm = mmap.mmap(f.fileno(), length)
    for off in range(0, length, mmap.PAGESIZE):  # fault every page in, as warming does
        mm[off] = 0
    pos = 0

    def copy() -> None:
        nonlocal pos
        mm[pos : pos + len(data)] = data
        pos += len(data)

    benchmark.extra_info.update(metric=f"memcpy_{size}", messages=n, bytes=len(data))
    benchmark.pedantic(copy, rounds=rounds, iterations=1, warmup_rounds=3)
    mm.close()


@pytest.mark.parametrize("size", [128, 1024])
def test_batch_append(benchmark, open_store, scaled, size: int) -> None:
    """``put_messages`` of 1 MiB of bodies into a warmed segment, async flush."""
    n = BATCH_BYTES // size
    bodies = [os.urandom(size) for _ in range(n)]
    rounds = scaled(200, 30)
    store = open_store(
        mapped_file_size_commit_log=_segment_bytes(scaled),
        warm_mapped_file_enable=True,
        flush_disk_type="ASYNC_FLUSH",
    )
    assert store.put_message(rmqstore.Message("BenchTopic", b"x")).ok
    _wait_preallocated(store)

    def append() -> None:
        r = store.put_messages("BenchTopic", 0, bodies, tags="TagA")
        assert r.ok

    benchmark.extra_info.update(metric=f"batch_append_{size}", messages=n, bytes=n * size)
    benchmark.pedantic(append, rounds=rounds, iterations=1, warmup_rounds=2)
    # Every measured batch stayed in the first, warmed segment.
    assert len(store.commitlog_segments()) == 1


@pytest.mark.parametrize("pool", [False, True], ids=["direct", "pool"])
def test_batch_append_transient_pool(benchmark, open_store, scaled, pool: bool) -> None:
    """``put_messages`` of 1 MiB of 1 KiB bodies into segments that are not warmed, with and
    without the transient store pool (its commit service copying into the files meanwhile).
    Each round ends with everything committed, so both sides pay for getting the bytes into
    the files."""
    size = 1024
    n = BATCH_BYTES // size
    bodies = [os.urandom(size) for _ in range(n)]
    rounds = scaled(200, 30)
    store = open_store(
        mapped_file_size_commit_log=_segment_bytes(scaled),
        transient_store_pool_enable=pool,
        transient_store_pool_size=3,
    )
    assert store.put_message(rmqstore.Message("BenchTopic", b"x")).ok
    _wait_preallocated(store)

    def append() -> None:
        r = store.put_messages("BenchTopic", 0, bodies, tags="TagA")
        assert r.ok
        end = r.wrote_offset + r.wrote_bytes
        while store.get_committed_where() < end:
            store._core.commit_step(0, 0)

    benchmark.extra_info.update(
        metric=f"batch_append_{'pool' if pool else 'direct'}", messages=n, bytes=n * size
    )
    benchmark.pedantic(append, rounds=rounds, iterations=1, warmup_rounds=2)


@pytest.mark.parametrize("size", [128, 1024])
def test_put_message_single(benchmark, open_store, scaled, size: int) -> None:
    """One ``put_message`` per call from one Python thread (message built beforehand)."""
    store = open_store(mapped_file_size_commit_log=scaled(1024, 256) * MiB)
    msg = rmqstore.Message("BenchTopic", os.urandom(size), tags="TagA", keys=["k1"])
    assert store.put_message(msg).ok
    n = scaled(50_000, 10_000)
    put = store.put_message

    def loop() -> None:
        for _ in range(n):
            put(msg)

    benchmark.extra_info.update(metric=f"put_message_{size}", messages=n, bytes=n * size)
    benchmark.pedantic(loop, rounds=scaled(10, 3), iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("size", [128])
def test_build_and_put_message(benchmark, open_store, scaled, size: int) -> None:
    """``Message(...)`` plus ``put_message`` per call: what a producer loop pays."""
    store = open_store(mapped_file_size_commit_log=scaled(1024, 256) * MiB)
    body = os.urandom(size)
    n = scaled(50_000, 10_000)
    put = store.put_message
    message = rmqstore.Message

    def loop() -> None:
        for i in range(n):
            put(message("BenchTopic", body, tags="TagA", queue_id=i & 7))

    benchmark.extra_info.update(metric=f"build_put_message_{size}", messages=n, bytes=n * size)
    benchmark.pedantic(loop, rounds=scaled(10, 3), iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_segment_roll(benchmark, open_store, scaled, quick, warm: bool) -> None:
    """Appends that cross several segment boundaries, with and without warming.

    The report divides by the number of rolls to give the cost of one roll next to the cost of
    the same bytes without a roll (the batch-append rate)."""
    segment = scaled(64, 16) * MiB
    rolls = scaled(8, 4)
    size = 1024
    n = BATCH_BYTES // size
    bodies = [os.urandom(size) for _ in range(n)]
    store = open_store(mapped_file_size_commit_log=segment, warm_mapped_file_enable=warm)
    assert store.put_message(rmqstore.Message("BenchTopic", b"x")).ok
    latencies: list[float] = []

    def fill() -> None:
        start_segments = len(store.commitlog_segments())
        while len(store.commitlog_segments()) < start_segments + rolls:
            t0 = time.perf_counter()
            r = store.put_messages("BenchTopic", 0, bodies)
            latencies.append(time.perf_counter() - t0)
            assert r.ok
        _wait_preallocated(store)

    benchmark.extra_info.update(
        metric=f"segment_roll_{'warm' if warm else 'cold'}",
        rolls=rolls,
        segment_bytes=segment,
        bytes=rolls * segment,
        messages=rolls * segment // (size + 120),
    )
    benchmark.pedantic(fill, rounds=scaled(3, 1), iterations=1)
    alloc = store.service_stats()["AllocateMappedFileService"]
    benchmark.extra_info["alloc_seconds_per_segment"] = alloc["alloc_seconds"] / max(
        alloc["allocated"], 1
    )
    latencies.sort()
    benchmark.extra_info["batch_p50_s"] = latencies[len(latencies) // 2]
    benchmark.extra_info["batch_max_s"] = latencies[-1]
    benchmark.extra_info["quick"] = quick
