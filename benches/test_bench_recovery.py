"""Issue 4 figure: how fast an abnormal shutdown is recovered, next to a plain read of the same
commitlog files measured in the same run."""

from __future__ import annotations

import os
import time
from pathlib import Path

import rmqstore


def test_abnormal_recovery(benchmark, scaled, tmp_path: Path) -> None:
    path = tmp_path / "store"
    seg = 64 << 20
    total = scaled(1024, 128) << 20
    bodies = [os.urandom(1024)] * 1024
    with rmqstore.MessageStore(path, mapped_file_size_commit_log=seg) as store:
        while store.get_max_phy_offset() < total:
            store.put_messages("Recover", 0, bodies, tags="TagA")
        store.flush()
        written = store.get_max_phy_offset()

    def crash_marks() -> None:
        # What a crash before the first checkpoint leaves: the abort marker and checkpoint times of
        # 0, so recovery checks every segment from the first (docs/architecture.md#recovery).
        (path / "abort").write_text("0")
        with open(path / "checkpoint", "r+b") as cp:
            cp.write(bytes(16))

    crash_marks()

    # Baseline: read every commitlog byte once, from the page cache as recovery will.
    buf = bytearray(1 << 20)
    t0 = time.perf_counter()
    for f in sorted((path / "commitlog").iterdir()):
        with open(f, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass
    read_s = time.perf_counter() - t0

    report: dict = {}
    opens: list[float] = []

    def reopen() -> None:
        # Only the open is timed: it is the recovery; close() then writes a clean checkpoint.
        t0 = time.perf_counter()
        s = rmqstore.MessageStore(path, mapped_file_size_commit_log=seg)
        opens.append(time.perf_counter() - t0)
        report.update(s.recovery_report())
        s.close()
        crash_marks()

    # Three rounds in quick mode too: one open of a small store is at the mercy of a single
    # scheduling hiccup of this shared machine.
    benchmark.pedantic(reopen, rounds=3, iterations=1)
    assert report["abnormal"] is True
    assert report["process_offset"] == written
    assert report["start_offset"] == 0
    recover_s = sorted(opens)[len(opens) // 2]
    benchmark.extra_info.update(
        metric="recovery",
        bytes=written,
        recover_rate=written / recover_s,
        read_rate=(len(list((path / "commitlog").iterdir())) * seg) / read_s,
    )
