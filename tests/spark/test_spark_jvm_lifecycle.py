"""Issue 21: the JVM connector (``rmqstore-jvm``) over a process's life, each case in a Python
process of its own with its own Spark sessions (the suite's shared session is not touched):

- several SparkSessions created, used and stopped one after another in one process, and two
  at once (``newSession``, queried from two threads): every read equals ``get_message``, and
  after each the native counters (exported buffers, their bytes, stores and handles open) are
  back at zero, so every store the reads opened was closed;
- a store removed (``rm -rf``) or its commitlog segments truncated while a task is reading it:
  the task ends with an error carrying the store's message (truncation: rust/jni/src/fault.rs),
  or with rows that are all right (removal: the mappings keep the files), and the JVM lives on
  (a truncated mapping must not kill it with SIGBUS).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

TESTS = Path(__file__).resolve().parents[1]


def _child(script: str, *args: str | Path, timeout: float = 400) -> str:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (java on PATH or JAVA_HOME) for the Spark tests")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(TESTS), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    return proc.stdout


SESSIONS = """
    import sys, threading, time
    from pathlib import Path

    sys.path.insert(0, sys.argv[1])
    import rmqstore
    from rmqspark import put, spark_rows, store_options, stored_rows
    from rmqstore.spark import jar_path, local_session

    store = Path(sys.argv[2])
    put(store, [
        rmqstore.Message(f"Topic{i % 3}", f"body-{i}-".encode() * (i % 9 + 1), tags=f"T{i % 2}",
                         queue_id=i % 4)
        for i in range(600)
    ])
    expected = stored_rows(store)
    ZERO = [0, 0, 0, 0]

    def counters(spark):
        return list(spark._jvm.rmqstore.jni.NativeStore.allocations())

    def settled(spark):
        deadline = time.monotonic() + 20
        while counters(spark) != ZERO and time.monotonic() < deadline:
            time.sleep(0.1)
        return counters(spark)

    def read(spark, **extra):
        return spark.read.format("rmqstore-jvm").options(**store_options(store, **extra)).load()

    for round in range(4):
        spark = local_session(f"round-{round}")  # the jar by default
        assert jar_path() in spark.conf.get("spark.jars"), spark.conf.get("spark.jars")
        assert spark_rows(read(spark)) == expected, round
        assert read(spark, rowsPerPartition="1").where("topic = 'Topic1'").count() == 200
        assert len(read(spark).limit(5).collect()) == 5
        assert settled(spark) == ZERO, (round, counters(spark))
        if round == 2:
            # Two sessions of one context at once, each read from its own thread.
            other = spark.newSession()
            got, errors = {}, []

            def go(name, session):
                try:
                    for _ in range(3):
                        got[name] = spark_rows(read(session, rowsPerPartition="1"))
                except Exception as e:
                    errors.append(e)

            threads = [threading.Thread(target=go, args=(n, s))
                       for n, s in (("a", spark), ("b", other))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            assert not errors, errors
            assert got == {"a": expected, "b": expected}
            assert settled(spark) == ZERO, counters(spark)
        spark.stop()
        print(f"session {round} ok", flush=True)
    """


def test_sessions_one_after_another_and_two_at_once(tmp_path: Path) -> None:
    out = _child(SESSIONS, tmp_path / "store")
    assert [line for line in out.splitlines() if line.endswith(" ok")] == [
        f"session {i} ok" for i in range(4)
    ]


#: One queue of 150,000 messages over about 40 commitlog segments; the task's Python side
#: stops after its first 2,000 rows until the store has been removed or truncated.
UNDER_A_READER = """
    import os, shutil, sys, threading, time
    from pathlib import Path

    import rmqstore
    from rmqstore.spark import local_session

    store, mode, marks = Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    segment = 4 << 20
    n = 150_000
    with rmqstore.MessageStore(store, mapped_file_size_commit_log=segment) as s:
        for start in range(0, n, 1000):
            bodies = [b"%08d" % i * 120 for i in range(start, start + 1000)]
            assert s.put_messages("Big", 0, bodies).ok
        assert s.wait_dispatched(120)
    started, go = marks / "started", marks / "go"

    def check(rows):
        from pathlib import Path
        seen = bad = 0
        for r in rows:
            if seen == 2000:
                Path(started).touch()
                deadline = time.monotonic() + 120
                while not Path(go).exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            seen += 1
            body = bytes(r.body)
            if body != b"%08d" % r.queue_offset * 120:
                bad += 1
        yield (seen, bad)

    spark = local_session("under-a-reader", master="local[1]")
    df = (spark.read.format("rmqstore-jvm").option("store.mapped_file_size_commit_log", segment)
          .load(str(store)).select("queue_offset", "body"))
    outcome = {}

    def run():
        try:
            outcome["rows"] = df.rdd.mapPartitions(check).collect()
        except Exception as e:
            outcome["error"] = str(e)

    reader = threading.Thread(target=run)
    reader.start()
    deadline = time.monotonic() + 180
    while not started.exists() and reader.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), outcome
    if mode == "delete":
        shutil.rmtree(store)
    else:
        for f in sorted((store / "commitlog").iterdir()):
            os.truncate(f, 0)
    go.touch()
    reader.join(300)
    assert not reader.is_alive()
    # The JVM lived through it.
    assert spark.range(10).count() == 10
    if "rows" in outcome:
        [(seen, bad)] = outcome["rows"]
        assert bad == 0 and 2000 < seen <= n, (seen, bad)
        print(f"outcome rows {seen}", flush=True)
    else:
        print("outcome error " + outcome["error"].replace(chr(10), " ")[:4000], flush=True)
    spark.stop()
    """


@pytest.mark.parametrize("mode", ["delete", "truncate"])
def test_a_store_removed_or_truncated_under_a_reader(tmp_path: Path, mode: str) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    out = _child(UNDER_A_READER, tmp_path / "store", mode, marks)
    [outcome] = [line for line in out.splitlines() if line.startswith("outcome ")]
    if mode == "delete":
        # Unlinked files stay mapped: the reader finishes with every row, all right.
        assert outcome == "outcome rows 150000", outcome
    else:
        # The native read that touches a truncated page throws the store's StoreIOException
        # (bodies are copied by the core by default, so Spark's own code never reads a
        # mapping: a fault there would be an InternalError, which Spark takes for fatal).
        assert outcome.startswith("outcome error"), outcome
        assert "StoreIOException" in outcome, outcome
        assert "a file was truncated under the read" in outcome, outcome
