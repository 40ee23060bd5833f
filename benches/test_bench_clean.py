"""Issue 19 figure: a producer's put latency while the cleaner deletes expired commitlog
segments, against its latency without a cleanup, measured in the same run (phases back to
back).

The store holds 8 GiB of expired segments (full mode; 256 MiB in quick mode) written as 1 KiB
messages, flushed (clean pages, still in the page cache: the costlier case for a delete, whose
unlink evicts them) and their modification times set back past ``file_reserved_time``. One
Python thread puts 1 KiB messages at a steady rate (bursts every 10 ms) and times each put;
phases: warm-up (dropped), baseline, cleanup (``clean_expired_files``, the cleaners' round, in
another thread with RocketMQ's defaults: ``deleteCommitLogFilesInterval`` 100 ms,
``deleteFileBatchMax`` 10, ``deleteConsumeQueueFilesInterval`` 100 ms; until it returns),
then the same producer again for as long as the cleanup took. The figure is p99 during the
cleanup over p99 without it (the phases before and after, pooled).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import rmqstore

BODY = 1024


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def _produce(
    store: rmqstore.MessageStore, msg: rmqstore.Message, seconds: float, rate: int
) -> list[float]:
    """Puts ``rate`` messages a second for ``seconds`` (a burst every 10 ms); each put's
    latency."""
    lat: list[float] = []
    clock = time.perf_counter
    burst = max(1, rate // 100)
    due = clock()
    end = due + seconds
    while clock() < end:
        for _ in range(burst):
            t0 = clock()
            r = store.put_message(msg)
            lat.append(clock() - t0)
            if not r.ok:
                raise AssertionError(r.status)
        due += 0.01
        pause = due - clock()
        if pause > 0:
            time.sleep(pause)
    return lat


def _summary(lat: list[float]) -> dict[str, float]:
    return {"p50_s": _pct(lat, 0.5), "p99_s": _pct(lat, 0.99), "max_s": max(lat), "n": len(lat)}


def test_clean_while_appending(benchmark: Any, open_store: Any, scaled: Callable) -> None:
    seg = scaled(1 << 30, 64 << 20)
    total = scaled(8 << 30, 256 << 20)
    rate = scaled(50_000, 20_000)
    store = open_store(mapped_file_size_commit_log=seg)
    bodies = [os.urandom(BODY)] * 1024
    while store.get_max_phy_offset() < total:
        store.put_messages("Old", 0, bodies)
    assert store.wait_dispatched(timeout=300)
    store.flush()
    # The segments wholly below the end (the allocation service may have made the next one).
    end = store.get_max_phy_offset()
    expired = [p for p in store.commitlog_segments() if int(os.path.basename(p)) + seg <= end]
    assert len(expired) == total // seg

    msg = rmqstore.Message("Live", os.urandom(BODY))
    phases: dict[str, dict[str, float]] = {}
    report: dict[str, Any] = {}

    def run() -> None:
        _produce(store, msg, 1.0, rate)  # warm-up: the live topic's first pages and queue
        baseline = _produce(store, msg, scaled(5, 2), rate)
        old = time.time() - 100 * 3600
        for path in expired:
            os.utime(path, (old, old))
        result: list[Any] = []
        cleaner = threading.Thread(target=lambda: result.append(store.clean_expired_files()))
        during: list[float] = []
        t0 = time.perf_counter()
        cleaner.start()
        while cleaner.is_alive():
            during += _produce(store, msg, 0.05, rate)
        clean_s = time.perf_counter() - t0
        cleaner.join()
        after = _produce(store, msg, max(1.0, clean_s), rate)
        phases.update(
            before=_summary(baseline),
            cleanup=_summary(during),
            after=_summary(after),
            # Without cleanup: both sides of it, so that a drift of the machine's speed during
            # the run weighs on neither side of the ratio.
            baseline=_summary(baseline + after),
        )
        report.update(clean_s=clean_s, report=result[0] if result else None)

    benchmark.pedantic(run, rounds=1, iterations=1)
    done = report["report"]
    assert done is not None
    names = sorted(os.path.basename(p) for p in done.commit_log_files)
    assert names == sorted(os.path.basename(p) for p in expired)
    assert store.get_min_phy_offset() == done.min_commit_log_offset == len(expired) * seg
    for path in expired:
        assert not os.path.exists(path)
    base, clean = phases["baseline"], phases["cleanup"]
    benchmark.extra_info.update(
        metric="clean_while_appending",
        bytes_deleted=len(expired) * seg,
        files=len(expired),
        consume_queue_files=done.consume_queue_files,
        segment_bytes=seg,
        rate=rate,
        clean_s=report["clean_s"],
        ratio=clean["p99_s"] / base["p99_s"],
        **{f"{phase}_{k}": v for phase, s in phases.items() for k, v in s.items()},
    )
