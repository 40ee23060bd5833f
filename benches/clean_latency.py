"""Put latency while expired segments are deleted (issue 19's figure).

A producer thread puts 1 KiB messages one by one and records each put's latency. In the same
run, alternately, it runs for a while with nothing else happening (the baseline) and while
``clean_expired_files()`` rounds delete the expired commitlog segments (their modification
times set back), with RocketMQ's pacing (``delete_commit_log_files_interval`` 100 ms between
deletions). The figure is p99 during cleanup over p99 of the baseline (target: at most 2x).

    .venv/bin/python benches/clean_latency.py [--gib 8] [--segment-mib 1024] [--dir DIR]

The expired data is written first with ``put_messages`` batches; the folder needs that much
free disk (and is removed at the end).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from rmqstore import Message, MessageStore

MiB = 1024 * 1024


def _percentile(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000.0


class Producer(threading.Thread):
    """Puts 1 KiB messages one by one; each put's latency (ns) goes to the current phase."""

    def __init__(self, store: MessageStore) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.phase = "warmup"
        self.latencies: dict[str, list[int]] = {}
        self.stop = threading.Event()
        self.failed = 0

    def run(self) -> None:
        msg = Message("Live", b"p" * 1024)
        put = self.store.put_message
        clock = time.perf_counter_ns
        while not self.stop.is_set():
            bucket = self.latencies.setdefault(self.phase, [])
            for _ in range(256):
                t0 = clock()
                r = put(msg)
                bucket.append(clock() - t0)
                if not r.ok:
                    self.failed += 1
            # Bounded rate (about 256 puts per ms at most, then a pause): a steady producer,
            # not one that saturates the machine's two cores on its own.
            time.sleep(0.001)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=8.0, help="GiB of expired segments")
    ap.add_argument("--segment-mib", type=int, default=1024, help="commitlog segment size")
    ap.add_argument("--dir", type=Path, default=None, help="parent folder of the store")
    ap.add_argument("--baseline-seconds", type=float, default=3.0)
    args = ap.parse_args()

    parent = Path(tempfile.mkdtemp(prefix="rmq-clean-bench-", dir=args.dir))
    seg = args.segment_mib * MiB
    segments = max(2, round(args.gib * 1024 / args.segment_mib))
    store = MessageStore(
        parent / "store",
        mapped_file_size_commit_log=seg,
        delete_file_batch_max=segments + 1,
        # Only the expired segments go, even on a disk above the clean-forcibly level.
        clean_file_forcibly_enable=False,
    )
    try:
        body = b"x" * 1024
        batch = [body] * 1024  # 1 MiB of bodies a batch
        t0 = time.perf_counter()
        while len(store.commitlog_segments()) <= segments:
            r = store.put_messages("Old", 0, batch)
            assert r.ok, r
        store.flush()
        assert store.wait_dispatched(timeout=600)
        written = time.perf_counter() - t0
        old = [str(p) for p in store.commitlog_segments()][:segments]
        past = time.time() - 1000 * 3600
        for p in old:
            os.utime(p, (past, past))
        print(f"wrote {segments} segments of {args.segment_mib} MiB in {written:.1f} s")

        producer = Producer(store)
        producer.start()
        time.sleep(1.0)
        producer.phase = "baseline-before"
        time.sleep(args.baseline_seconds)
        producer.phase = "cleanup"
        t0 = time.perf_counter()
        deleted: list[str] = []
        deadline = time.monotonic() + 600
        while len(deleted) < len(old) and time.monotonic() < deadline:
            report = store.clean_expired_files()
            deleted += report.commit_log_files
            assert set(deleted) <= set(old), "a segment that had not expired was deleted"
            if not report.commit_log_files:
                time.sleep(0.1)
        cleanup = time.perf_counter() - t0
        producer.phase = "baseline-after"
        time.sleep(args.baseline_seconds)
        producer.stop.set()
        producer.join()

        lat = producer.latencies
        base = lat.get("baseline-before", []) + lat.get("baseline-after", [])
        during = lat.get("cleanup", [])
        print(
            f"deleted {len(deleted)} segments ({len(deleted) * args.segment_mib / 1024:.1f} GiB) "
            f"in {cleanup:.1f} s; failed puts: {producer.failed}"
        )
        for name, values in (("baseline", base), ("cleanup", during)):
            print(
                f"{name:>9}: {len(values):>9} puts  p50 {_percentile(values, 0.50):7.2f} us  "
                f"p99 {_percentile(values, 0.99):7.2f} us  "
                f"p99.9 {_percentile(values, 0.999):8.2f} us"
                f"  max {max(values) / 1000.0 if values else float('nan'):9.1f} us"
                f"  mean {statistics.fmean(values) / 1000.0 if values else float('nan'):6.2f} us"
            )
        ratio = _percentile(during, 0.99) / _percentile(base, 0.99)
        print(f"p99 during cleanup / p99 baseline: {ratio:.2f}x (target <= 2x)")
    finally:
        store.close()
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
