"""The Spark part of ``make demo`` timed through each format in one process and one session
(issue 21: the JVM connector ``rmqstore-jvm`` against the Python source ``rmqstore`` the demo
used before): per round, a fresh store of the demo's messages for each format (the same seed),
``run_pipeline`` over it (batch analytics, Parquet outputs, the two streaming runs with a
burst between them); formats alternate, after an untimed warm-up round of each.

    .venv/bin/python benches/demo_spark.py [--messages 300000] [--burst 30000] [--rounds 3]

Prints each round's seconds, each section's medians, the medians and their ratio (Python
source / JVM connector); the reports of both formats must agree, or it fails.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rmqstore import MessageStore
from rmqstore.demo import produce
from rmqstore.demo_spark import JVM_FORMAT, run_pipeline
from rmqstore.spark import local_session

FORMATS = ("rmqstore", JVM_FORMAT)


def one_run(
    spark: Any, root: Path, fmt: str, messages: int, burst_n: int
) -> tuple[float, dict[str, Any], dict[str, float]]:
    """The pipeline over a fresh store: its seconds (the burst's writing left out), its report
    and the seconds of each section."""
    path = root / f"store-{fmt}"
    shutil.rmtree(path, ignore_errors=True)
    with MessageStore(path) as store:
        produce(store, messages, random.Random(7), quiet=True)
        assert store.wait_dispatched(120)
        spent = [0.0]

        def burst() -> int:
            t = time.perf_counter()
            more = produce(store, burst_n, random.Random(8), first_seq=messages, quiet=True)
            assert store.wait_dispatched(120)
            spent[0] += time.perf_counter() - t
            return len(more)

        t0 = time.perf_counter()
        report = run_pipeline(spark, path, root / f"report-{fmt}", burst, fmt)
        seconds = time.perf_counter() - t0 - spent[0]
    shutil.rmtree(path, ignore_errors=True)
    sections = dict(report.seconds)
    sections["streaming run 2"] -= spent[0]
    figures = asdict(report)
    for varying in ("fmt", "seconds", "outputs", "per_minute", "latency_ms", "per_second"):
        figures.pop(varying)  # store times differ between the two fresh stores
    return seconds, figures, sections


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--burst", type=int, default=30_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    spark = local_session("rmqstore-demo-bench")
    times: dict[str, list[float]] = {f: [] for f in FORMATS}
    parts: dict[str, dict[str, list[float]]] = {f: {} for f in FORMATS}
    with tempfile.TemporaryDirectory(prefix="rmq-demo-bench-") as tmp:
        root = Path(tmp)
        reports = {}
        for fmt in FORMATS:  # warm-up: JIT, Python workers, class loading
            _, reports[fmt], _ = one_run(spark, root, fmt, args.messages, args.burst)
        if reports["rmqstore"] != reports[JVM_FORMAT]:
            raise AssertionError(f"the formats disagree: {reports}")
        for r in range(args.rounds):
            order = FORMATS if r % 2 == 0 else FORMATS[::-1]
            for fmt in order:
                seconds, _, sections = one_run(spark, root, fmt, args.messages, args.burst)
                times[fmt].append(seconds)
                for name, secs in sections.items():
                    parts[fmt].setdefault(name, []).append(secs)
                print(f"round {r + 1} {fmt:<13} {seconds:6.2f} s", flush=True)
    spark.stop()
    for name in parts["rmqstore"]:
        a, b = (statistics.median(parts[f][name]) for f in FORMATS)
        print(f"  {name}: rmqstore {a:.2f} s, rmqstore-jvm {b:.2f} s")
    py, jvm = (statistics.median(times[f]) for f in FORMATS)
    print(
        f"demo Spark part, {args.messages:,} messages + a burst of {args.burst:,}, medians of "
        f"{args.rounds}: rmqstore {py:.2f} s, rmqstore-jvm {jvm:.2f} s: {py / jvm:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
