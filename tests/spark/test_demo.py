"""The main job (``make demo``) end to end, small: produce, verify, consume with a tag filter,
look keys up, the Spark pipeline (Parquet outputs, a PNG chart) and the streaming job that picks
up a second burst from its checkpoint. Run in its own process, as ``make demo`` runs it (it
starts and stops its own Spark session), through the JVM connector (``rmqstore-jvm``) whose
jar the installed wheel carries; and the pipeline's report is the same through the Python
source (``rmqstore``, what the demo used before)."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (java on PATH or JAVA_HOME) for the demo's Spark part")
    store, report = tmp_path / "store", tmp_path / "report"
    args = ["--messages", "3000", "--burst", "700", "--report", str(report), "--seed", "7"]
    proc = subprocess.run(
        [sys.executable, "-m", "rmqstore.demo", str(store), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "read back and checked every message by offset" in out
    assert re.search(r"consumed Orders with tag filter 'Paid \|\| Shipped': [\d,]+ messages", out)
    assert re.search(r"Spark over the store \(format 'rmqstore-jvm'\): 3,000 messages", out), out
    assert "first run 3,000 messages" in out
    assert "second run from the checkpoint read 700" in out
    for name in ("by_topic_tag.parquet", "per_minute.parquet", "stream-counts.parquet"):
        assert any((report / name).glob("*.parquet")), name
    assert (report / "volume.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A second run appends to the same store, and its streaming job starts afresh.
    again = subprocess.run(
        [sys.executable, "-m", "rmqstore.demo", str(store), *args[:2], "--no-spark"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "clean; recovery checked" in again.stdout


def test_the_pipeline_reports_the_same_through_both_formats(spark: Any, tmp_path: Path) -> None:
    """The demo's Spark part over two byte-identical copies of one store (and the same burst
    written into each): the JVM connector's report equals the Python source's, every figure
    but the timings."""
    from rmqstore import MessageStore
    from rmqstore.demo import produce
    from rmqstore.demo_spark import run_pipeline

    base = tmp_path / "base"
    with MessageStore(base) as store:
        produce(store, 2500, random.Random(11), quiet=True)
        assert store.wait_dispatched(60)
    reports = {}
    for fmt in ("rmqstore", "rmqstore-jvm"):
        path = tmp_path / fmt
        # The segments are reserved at their full size: copy them sparse.
        subprocess.run(["cp", "-a", "--sparse=always", str(base), str(path)], check=True)
        with MessageStore(path) as store:

            def burst(store: Any = store) -> int:
                more = produce(store, 600, random.Random(12), first_seq=2500, quiet=True)
                assert store.wait_dispatched(60)
                return len(more)

            report = run_pipeline(spark, path, tmp_path / f"{fmt}-report", burst, fmt)
        figures = asdict(report)
        assert figures.pop("fmt") == fmt
        for varying in ("seconds", "outputs"):
            figures.pop(varying)
        reports[fmt] = figures
    python, jvm = reports["rmqstore"], reports["rmqstore-jvm"]
    assert python["total_messages"] == 2500
    assert [sum(b) for b in python["stream_batches"]] == [2500, 600]
    assert jvm == python
