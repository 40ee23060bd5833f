"""The Spark suite's fixture: one local SparkSession for all its tests (helpers: rmqspark)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local SparkSession, 2 cores, each task tried twice (``local[2,2]``), with the
    ``rmqstore`` source registered and the JVM connector's jar that the installed wheel
    carries (``local_session``'s default; tests/spark/test_spark_jvm.py fails without it)."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"pyspark is not installed ({exc}): pip install -r requirements-dev.txt")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (java on PATH or JAVA_HOME) for the Spark tests")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from rmqstore.spark import local_session

    session = local_session("rmqstore-tests", master="local[2,2]")
    gateway = session.sparkContext._gateway
    yield session
    session.stop()
    # The JVM leaves on its own when this process ends (EOF on its stdin), and spends some
    # seconds of CPU shutting down while whatever runs next (the benchmarks, in `make test`)
    # is measured: end it here, and wait for it.
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
