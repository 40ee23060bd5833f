"""The main job (``make demo``) end to end, small: produce, verify, consume with a tag filter,
look keys up, the Spark pipeline (Parquet outputs, a PNG chart) and the streaming job that picks
up a second burst from its checkpoint. Run in its own process, as ``make demo`` runs it (it
starts and stops its own Spark session)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

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
    assert re.search(r"Spark over the store \(format 'rmqstore'\): 3,000 messages", out), out
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
