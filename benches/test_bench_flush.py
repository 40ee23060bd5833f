"""Issue 4 figures: SYNC_FLUSH group commit with 32 producers against one producer, next to the
raw fdatasync latency of the same disk, measured in the same run."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import rmqstore


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def test_group_commit(benchmark, open_store, scaled, tmp_path: Path) -> None:
    # Raw force latency of this disk: 4 KiB written then fdatasync, as one put's force.
    raw: list[float] = []
    with open(tmp_path / "fsync-probe", "wb") as f:
        for _ in range(scaled(200, 50)):
            f.write(b"\0" * 4096)
            f.flush()
            t0 = time.perf_counter()
            os.fdatasync(f.fileno())
            raw.append(time.perf_counter() - t0)

    store = open_store(flush_disk_type="SYNC_FLUSH", mapped_file_size_commit_log=64 << 20)
    body = os.urandom(128)
    msg = rmqstore.Message("Sync", body)
    assert store.put_message(msg).status is rmqstore.PutMessageStatus.PUT_OK

    n_single = scaled(400, 100)
    t0 = time.perf_counter()
    for _ in range(n_single):
        store.put_message(msg)
    single_rate = n_single / (time.perf_counter() - t0)

    threads, per_thread = 32, scaled(400, 60)
    latencies: list[float] = []
    lock = threading.Lock()
    # Timing starts once every producer thread exists and ends when the last one is done:
    # the figure is what 32 waiting producers achieve, not what starting threads costs.
    ready = threading.Barrier(threads + 1)
    finished: list[float] = []

    def producer() -> None:
        mine = []
        ready.wait()
        for _ in range(per_thread):
            s = time.perf_counter()
            r = store.put_message(msg)
            mine.append(time.perf_counter() - s)
            assert r.status is rmqstore.PutMessageStatus.PUT_OK
        with lock:
            latencies.extend(mine)
            finished.append(time.perf_counter())

    started: list[float] = []
    forces_at_start: list[float] = []

    def run() -> None:
        ts = [threading.Thread(target=producer) for _ in range(threads)]
        for t in ts:
            t.start()
        forces_at_start.append(store.service_stats()["GroupCommitService"]["forces"])
        started.append(time.perf_counter())
        ready.wait()
        for t in ts:
            t.join()

    benchmark.pedantic(run, rounds=1, iterations=1)
    elapsed = max(finished) - started[0]
    forces = store.service_stats()["GroupCommitService"]["forces"] - forces_at_start[0]
    total = threads * per_thread
    benchmark.extra_info.update(
        metric="group_commit",
        messages=total,
        multi_rate=total / elapsed,
        single_rate=single_rate,
        msgs_per_force=total / max(forces, 1),
        put_p50_s=_pct(latencies, 0.5),
        put_p99_s=_pct(latencies, 0.99),
        fsync_p50_s=_pct(raw, 0.5),
        fsync_p99_s=_pct(raw, 0.99),
    )
