"""Streaming reads: rate limit, restarts from the checkpoint, new queues, consumer offsets.

Every test runs against both sources: the Python data source (format ``rmqstore``) and the JVM
connector (format ``rmqstore-jvm``, the jar `make jar` builds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import rmqstore
from rmqspark import Row, put, spark_rows, store_options, stored_rows
from rmqwire import SMALL_STORE

pytestmark = pytest.mark.spark

PY = "rmqstore"
JVM = "rmqstore-jvm"


@pytest.fixture(params=[PY, JVM])
def fmt(request: pytest.FixtureRequest, spark: Any) -> str:
    """The source under test; for the JVM connector, the session must have its jar."""
    if request.param == JVM:
        from rmqstore.spark import jar_path

        assert jar_path() in spark.sparkContext.getConf().get("spark.jars", "")
    return str(request.param)


def _allocations(spark: Any) -> list[int]:
    """The JVM connector's native counters: [exported buffers alive, their bytes, stores open,
    handles open]."""
    return list(spark._jvm.rmqstore.jni.NativeStore.allocations())


def _settled(spark: Any, start: list[int], timeout: float = 20.0) -> list[int]:
    """The counters once back at ``start``, or as they are after ``timeout``."""
    import time

    deadline = time.monotonic() + timeout
    now = _allocations(spark)
    while now != start and time.monotonic() < deadline:
        time.sleep(0.1)
        now = _allocations(spark)
    return now


def _run(
    spark: Any, path: Path, checkpoint: Path, fmt: str = PY, **options: str
) -> list[list[Row]]:
    """Runs the stream with Trigger.AvailableNow to its end; returns each micro-batch's rows.
    For the JVM connector, every native buffer, store and handle is given back once it ends."""
    batches: list[list[Row]] = []
    start = _allocations(spark) if fmt == JVM else []

    props = options.get("includeProperties") == "true"

    def collect(df: Any, _batch_id: int) -> None:
        batches.append(spark_rows(df, include_properties=props))

    query = (
        spark.readStream.format(fmt)
        .options(**store_options(path, **options))
        .load()
        .writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(collect)
        .start()
    )
    try:
        assert query.awaitTermination(180)
        assert query.exception() is None
    finally:
        if fmt == JVM:
            assert _settled(spark, start) == start
    return batches


def _messages(topic: str, queue_id: int, count: int, tag: str) -> list[rmqstore.Message]:
    return [
        rmqstore.Message(topic, f"{tag}-{queue_id}-{i}".encode(), tags=tag, queue_id=queue_id)
        for i in range(count)
    ]


def _last_offsets_text(checkpoint: Path) -> str:
    """The end offsets of the last micro-batch, as Spark wrote them in the checkpoint."""
    offsets = checkpoint / "offsets"
    last = max(offsets.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    return last.read_text().splitlines()[-1]


def _last_offsets(checkpoint: Path) -> Any:
    return json.loads(_last_offsets_text(checkpoint))


def _group_offsets(path: Path, topic: str, queues: int) -> list[int]:
    with rmqstore.MessageStore(path, **SMALL_STORE) as store:
        return [store.query_offset("spark-group", topic, q) for q in range(queues)]


def test_rate_limit_restart_new_queue_and_group(spark: Any, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "store"
    checkpoint = tmp_path / "checkpoint"
    put(path, _messages("S", 0, 10, "one") + _messages("S", 1, 5, "one"))
    options = {
        "topics": "S",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "6",
        "consumerGroup": "spark-group",
    }
    first = _run(spark, path, checkpoint, fmt, **options)
    # Kafka's proration over backlogs 10 and 5: 4+2, then 4+2 of 6 and 3, then the 2+1 left.
    assert [len(b) for b in first] == [6, 6, 3]
    assert sorted(r for b in first for r in b) == stored_rows(path)
    assert _last_offsets(checkpoint) == {"S": {"0": 10, "1": 5}}
    # Spark commits a batch to the source when it plans the next one: the group's offsets are
    # the second batch's end; the last batch is committed by the next run.
    assert _group_offsets(path, "S", 3) == [8, 4, -1]

    # Between two runs: 4 more messages on queue 0 and a new queue 2 with 3.
    put(path, _messages("S", 0, 4, "two") + _messages("S", 2, 3, "two"))
    second = _run(spark, path, checkpoint, fmt, **options)
    # Backlogs 4 and 3 (the new queue from its first offset): 3+2, then 1+1.
    assert [len(b) for b in second] == [5, 2]
    new_rows = [r for b in second for r in b]
    assert {r[-1].decode().split("-")[0] for r in new_rows} == {"two"}
    # Neither run lost or repeated a message.
    assert sorted(r for b in first + second for r in b) == stored_rows(path)
    assert _last_offsets(checkpoint) == {"S": {"0": 14, "1": 5, "2": 3}}
    assert _group_offsets(path, "S", 3) == [13, 5, 2]


def test_a_damaged_offset_table_fails_the_commit(spark: Any, tmp_path: Path, fmt: str) -> None:
    """A consumer group commit never guesses: an undecodable consumerOffset.json with no
    .bak fails the query with the store's message and is left as it was."""
    path = tmp_path / "store"
    put(path, _messages("G", 0, 4, "x"))
    table = path / "config" / "consumerOffset.json"
    table.parent.mkdir(exist_ok=True)
    table.write_text('{"offsetTable": {"G@spark-group": {"0": 1, "0": 2}}}')
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "2"}
    unusable = r"consumerOffset.json is unusable \(key '0' appears twice in one object\) and there"
    with pytest.raises(Exception, match=unusable):
        _run(spark, path, tmp_path / "checkpoint", fmt, consumerGroup="spark-group", **options)
    assert table.read_text() == '{"offsetTable": {"G@spark-group": {"0": 1, "0": 2}}}'
    assert not (path / "config" / "consumerOffset.json.bak").exists()


def test_stream_starts_at_latest_by_default(spark: Any, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "store"
    checkpoint = tmp_path / "checkpoint"
    put(path, _messages("L", 0, 5, "old"))
    # Spark runs one empty batch, which records the starting offsets in the checkpoint.
    assert [len(b) for b in _run(spark, path, checkpoint, fmt)] == [0]
    assert _last_offsets(checkpoint) == {"L": {"0": 5}}
    put(path, _messages("L", 0, 3, "new"))
    batches = _run(spark, path, checkpoint, fmt)
    rows = [r for b in batches for r in b]
    assert [r[-1] for r in rows] == [f"new-0-{i}".encode() for i in range(3)]


def test_pattern_properties_and_starting_timestamp(spark: Any, tmp_path: Path, fmt: str) -> None:
    """A topicPattern stream picks up a matching topic created between runs (and nothing
    else), with the properties column; startingTimestamp starts each queue at the first
    message stored at or after it."""
    import time

    path = tmp_path / "store"
    checkpoint = tmp_path / "checkpoint"

    def msgs(topic: str, count: int, tag: str) -> list[rmqstore.Message]:
        return [
            rmqstore.Message(topic, f"{tag}-{i}".encode(), properties={"n": str(i), "t": tag})
            for i in range(count)
        ]

    put(path, msgs("P1", 4, "one") + msgs("Other", 2, "one"))
    options = {
        "topicPattern": "P[0-9]+",
        "startingOffsets": "earliest",
        "includeProperties": "true",
    }
    first = _run(spark, path, checkpoint, fmt, **options)
    everything = stored_rows(path, include_properties=True)
    assert sorted(r for b in first for r in b) == [r for r in everything if r[0] == "P1"]
    put(path, msgs("P2", 3, "two") + msgs("P1", 1, "two") + msgs("Other2", 2, "two"))
    second = _run(spark, path, checkpoint, fmt, **options)
    new = sorted(set(stored_rows(path, include_properties=True)) - set(everything))
    assert sorted(r for b in second for r in b) == [r for r in new if r[0].startswith("P")]
    assert _last_offsets(checkpoint) == {"P1": {"0": 5}, "P2": {"0": 3}}

    time.sleep(0.05)
    since = int(time.time() * 1000)
    time.sleep(0.05)
    put(path, msgs("P1", 2, "three") + msgs("P3", 2, "three"))
    third = _run(
        spark,
        path,
        tmp_path / "checkpoint-ts",
        fmt,
        topicPattern="P[0-9]+",
        startingTimestamp=str(since),
    )
    got = sorted(r for b in third for r in b)
    assert got == [r for r in stored_rows(path) if r[0].startswith("P") and r[4] >= since]
    assert {r[-1] for r in got} == {b"three-0", b"three-1"}
    assert len(got) == 4


def _drop_first_consume_queue_file(path: Path, topic: str, queue_id: int) -> None:
    """Removes a queue's oldest consume queue file (as expiry would), the store closed."""
    folder = path / "consumequeue" / topic / str(queue_id)
    min(folder.iterdir()).unlink()


def test_fail_on_data_loss(spark: Any, tmp_path: Path, fmt: str) -> None:
    from pyspark.errors import AnalysisException

    path = tmp_path / "store"
    checkpoint = tmp_path / "checkpoint"
    put(path, _messages("D", 0, 10, "a"))
    options = {"startingOffsets": "earliest"}
    assert [len(b) for b in _run(spark, path, checkpoint, fmt, **options)] == [10]
    # 110 more messages, then offsets 0-49 go (the small store has 50 per file).
    put(path, _messages("D", 0, 110, "b"))
    _drop_first_consume_queue_file(path, "D", 0)
    with rmqstore.MessageStore(path, **SMALL_STORE) as store:
        assert store.get_min_offset_in_queue("D", 0) == 50

    # A batch read from below the first readable offset fails when planned, or skips.
    batch = spark.read.format(fmt).options(**store_options(path, startingOffsets='{"D":{"0":10}}'))
    # The Python source plans at analysis; the JVM connector when Spark plans the scan.
    with pytest.raises(
        AnalysisException if fmt == PY else Exception,
        match=r"data loss, D/0: offsets \[10, 50\) of topic 'D' queue 0 were removed",
    ):
        batch.load().collect()
    skipped = batch.option("failOnDataLoss", "false").load()
    assert [r.queue_offset for r in skipped.collect()] == list(range(50, 120))

    # The stream's checkpoint says 10: the restarted query fails, and goes on from 50 with
    # failOnDataLoss=false.
    with pytest.raises(Exception, match="set failOnDataLoss=false to read from the first"):
        _run(spark, path, checkpoint, fmt, **options)
    batches = _run(spark, path, checkpoint, fmt, failOnDataLoss="false", **options)
    assert sorted(r[2] for b in batches for r in b) == list(range(50, 120))


WRITER = """
import sys, time
import rmqstore
from rmqwire import SMALL_STORE

with rmqstore.MessageStore(sys.argv[1], **SMALL_STORE) as store:
    print("open", flush=True)
    sys.stdin.readline()  # "go"
    for round_ in range(10):
        for i in range(20):
            store.put_message(rmqstore.Message("C", f"live-{round_}-{i}".encode(), queue_id=i % 2))
        store.wait_dispatched()
        time.sleep(0.3)
    print("written", flush=True)
    sys.stdin.read()  # hold the store (and its lock) until the test says so
"""


def test_stream_reads_while_another_process_writes(spark: Any, tmp_path: Path, fmt: str) -> None:
    import subprocess
    import sys
    import threading
    import time

    path = tmp_path / "store"
    put(path, _messages("C", 0, 20, "before"))
    tests_dir = Path(__file__).resolve().parent.parent
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(tests_dir)},
    )
    lock = threading.Lock()
    batches: list[list[Row]] = []
    start = _allocations(spark) if fmt == JVM else []

    def collect(df: Any, _batch_id: int) -> None:
        rows = spark_rows(df)
        with lock:
            batches.append(rows)

    query = None
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "open"
        query = (
            spark.readStream.format(fmt)
            .options(**store_options(path, startingOffsets="earliest", consumerGroup="spark-group"))
            .load()
            .writeStream.trigger(processingTime="200 milliseconds")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .foreachBatch(collect)
            .start()
        )

        def wait_for(rows: int) -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                with lock:
                    if sum(len(b) for b in batches) >= rows:
                        return
                assert query.exception() is None
                time.sleep(0.1)

        wait_for(20)  # the messages from before, read while the writer holds the store
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "written"
        wait_for(220)
        assert query.exception() is None
        count = spark.read.format(fmt).options(**store_options(path)).load().count()
        assert count == 220
    finally:
        if query is not None:
            query.stop()
        writer.communicate("", timeout=60)
    assert writer.returncode == 0
    if fmt == JVM:
        assert _settled(spark, start) == start
    rows = sorted(r for b in batches for r in b)
    assert rows == stored_rows(path)  # every message once, none lost or repeated
    # Picked up as it was written (10 rounds over 3 s, a trigger every 200 ms): the rows came
    # in several batches after the first.
    assert len([b for b in batches[1:] if b]) >= 3
    # Every consumer group commit met the writer's lock: skipped, the query went on.
    assert _group_offsets(path, "C", 2) == [-1, -1]


PAUSING_WRITER = """
import sys
import rmqstore
from rmqwire import SMALL_STORE

with rmqstore.MessageStore(sys.argv[1], **SMALL_STORE) as store:
    store.put_messages("F", 0, [f"f-{i}".encode() for i in range(300)])
    store.wait_dispatched()
    print("300", flush=True)
    sys.stdin.readline()  # "go"
    store.put_messages("F", 0, [f"f-{i}".encode() for i in range(300, 800)])
    store.wait_dispatched()
    print("800", flush=True)
    sys.stdin.read()
"""


def test_available_now_stops_at_what_was_there_when_it_started(
    spark: Any, tmp_path: Path, fmt: str
) -> None:
    import os
    import subprocess
    import sys

    path = tmp_path / "store"
    put(path, _messages("F", 0, 1, "seed"))
    writer = subprocess.Popen(
        [sys.executable, "-c", PAUSING_WRITER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    batches: list[list[Row]] = []
    try:
        assert writer.stdin is not None
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "300"

        def collect(df: Any, _batch_id: int) -> None:
            batches.append(spark_rows(df))
            if len(batches) == 1:  # the query has started: 500 more arrive now
                writer.stdin.write("go\n")
                writer.stdin.flush()
                assert writer.stdout.readline().strip() == "800"

        query = (
            spark.readStream.format(fmt)
            .options(**store_options(path, startingOffsets="earliest", maxOffsetsPerTrigger="100"))
            .load()
            .writeStream.trigger(availableNow=True)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .foreachBatch(collect)
            .start()
        )
        assert query.awaitTermination(180)
    finally:
        writer.communicate("", timeout=60)
    assert writer.returncode == 0
    # The target was fixed at the start (301 messages): the 500 that came during the run wait
    # for the next one.
    assert [len(b) for b in batches] == [100, 100, 100, 1]
    assert sorted(r[2] for b in batches for r in b) == list(range(301))


def test_rate_limit_gives_small_queues_one_and_caps_at_the_end() -> None:
    from rmqstore.spark.stream import _rate_limit

    start = {("T", 0): 0, ("T", 1): 5, ("T", 2): 7}
    until = {("T", 0): 100, ("T", 1): 6, ("T", 2): 7}
    # 10 over backlogs 100, 1, 0: floor(9.9) = 9, ceil(0.099) = 1 (not starved), 0 stays.
    assert _rate_limit(start, until, 10) == {("T", 0): 9, ("T", 1): 6, ("T", 2): 7}
    # A limit above the backlog stops at each queue's end.
    assert _rate_limit(start, until, 1000) == until


@pytest.mark.parametrize(("first", "second"), [(PY, JVM), (JVM, PY)])
def test_a_checkpoint_is_read_by_both_sources(
    spark: Any, tmp_path: Path, first: str, second: str
) -> None:
    """Both sources write the same offsets to the checkpoint, byte for byte, so a query goes on
    from another's checkpoint (and Spark, comparing offsets by their text, sees no change)."""
    from rmqstore.spark import jar_path

    assert jar_path() in spark.sparkContext.getConf().get("spark.jars", "")
    path = tmp_path / "store"
    checkpoint = tmp_path / "checkpoint"
    put(
        path,
        _messages("X", 0, 7, "one") + _messages("X", 1, 2, "one") + _messages("Y", 0, 3, "one"),
    )
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "5"}
    before = _run(spark, path, checkpoint, first, **options)
    assert _last_offsets_text(checkpoint) == '{"X": {"0": 7, "1": 2}, "Y": {"0": 3}}'
    put(path, _messages("X", 1, 4, "two") + _messages("Z", 0, 2, "two"))
    after = _run(spark, path, checkpoint, second, **options)
    # Backlogs 4 (X/1) and 2 (the new topic Z): floor(3.3) + floor(1.7), then 1 + 1.
    assert [len(b) for b in after] == [4, 2]
    assert {r[-1].decode().split("-")[0] for b in after for r in b} == {"two"}
    assert sorted(r for b in before + after for r in b) == stored_rows(path)
    assert _last_offsets(checkpoint) == {"X": {"0": 7, "1": 6}, "Y": {"0": 3}, "Z": {"0": 2}}


def _start_jvm_stream(spark: Any, path: Path, tmp_path: Path, **options: str) -> None:
    query = (
        spark.readStream.format(JVM)
        .options(**store_options(path, **options))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    query.awaitTermination(60)


def test_jvm_stream_options_are_checked_as_the_python_sources(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "store"
    put(path, _messages("O", 0, 3, "x"))
    start = _allocations(spark)
    with pytest.raises(Exception, match="'endingOffsets' does not apply to streaming reads"):
        _start_jvm_stream(spark, path, tmp_path, endingOffsets="latest")
    with pytest.raises(Exception, match="maxOffsetsPerTrigger must be >= 1, got 0"):
        _start_jvm_stream(spark, path, tmp_path, maxOffsetsPerTrigger="0")
    with pytest.raises(Exception, match="consumerGroup 'g@t' contains '@'"):
        _start_jvm_stream(spark, path, tmp_path, consumerGroup="g@t")
    with pytest.raises(Exception, match="option 'consumerGroup' does not apply to batch reads"):
        spark.read.format(JVM).options(**store_options(path, consumerGroup="g")).load().collect()
    assert _settled(spark, start) == start
