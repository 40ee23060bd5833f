"""Appends through the Spark sources, the Python one (``rmqstore``) and the JVM connector
(``rmqstore-jvm``): every row once, even with failing, retried or cancelled tasks, nothing
from a failed job, staged files inside the store folder only."""

from __future__ import annotations

import os
import re
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import rmqstore
from rmqspark import put, store_options, stored_rows
from rmqwire import SMALL_STORE

pytestmark = pytest.mark.spark

#: The two sources, and the class each names in its errors.
FORMATS = ["rmqstore", "rmqstore-jvm"]
ERRORS = {
    "rmqstore": {
        "InvalidArgumentError": "rmqstore.errors.InvalidArgumentError",
        "ArgumentOverflowError": "rmqstore.errors.ArgumentOverflowError",
    },
    "rmqstore-jvm": {
        "InvalidArgumentError": "rmqstore.jni.InvalidArgumentException",
        "ArgumentOverflowError": "rmqstore.jni.ArgumentOverflowException",
    },
}


@pytest.fixture(params=FORMATS)
def fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)


WRITE_SCHEMA = (
    "topic STRING, body BINARY, queue_id INT, tags STRING, keys ARRAY<STRING>, "
    "properties MAP<STRING,STRING>"
)


def _write(df: Any, path: Path, fmt: str) -> None:
    df.write.format(fmt).mode("append").options(**store_options(path)).save()


def _bodies(path: Path) -> list[bytes]:
    return sorted(r[-1] for r in stored_rows(path))


def test_round_trip_with_four_tasks(spark: Any, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "store"
    rows = []
    for i in range(300):
        rows.append(
            (
                "W" if i % 3 else "V",
                f"body-{i}".encode(),
                i % 4 if i % 5 else None,
                ["TagA", "TagB", None][i % 3],
                [f"key-{i % 7}"] if i % 2 else [],
                {"i": str(i)} if i % 4 == 0 else None,
            )
        )
    _write(spark.createDataFrame(rows, WRITE_SCHEMA).repartition(4), path, fmt)
    assert not (path / "spark-staging").exists()
    stored = {r[-1]: r for r in stored_rows(path, include_properties=True)}
    assert sorted(stored) == sorted(r[1] for r in rows)  # every row once
    for topic, body, qid, tags, keys, props in rows:
        got = stored[body]
        assert (got[0], got[6], got[7]) == (topic, tags, tuple(keys))
        if qid is not None:
            assert got[1] == qid
        elif keys:
            assert got[1] == zlib.crc32("\0".join(keys).encode()) % 8
        else:
            assert 0 <= got[1] < 8
        if props:
            assert set(props.items()) <= set(got[8])
    # Appending again adds the rows a second time, after the first ones and in DataFrame
    # order (two tasks, committed in partition order).
    again = [("Z", f"again-{i}".encode(), i % 2, None, [], None) for i in range(10)]
    df = spark.createDataFrame(again, WRITE_SCHEMA)
    assert df.rdd.getNumPartitions() == 2
    _write(df, path, fmt)
    after = stored_rows(path)
    assert len(after) == 310
    z = sorted((r for r in after if r[0] == "Z"), key=lambda r: r[3])  # commitlog order
    assert [r[-1] for r in z] == [b for _, b, *_ in again]
    assert min(r[3] for r in z) > max(r[3] for r in after if r[0] != "Z")


def _failing_body(marker: Path | None, fail_at: int) -> Any:
    """A UDF giving each id's body that raises at ``fail_at``: once (the first attempt) when
    ``marker`` is given, else every time."""
    from pyspark.sql import functions as F  # noqa: N812

    def body(i: int) -> bytes:
        if i == fail_at:
            if marker is None:
                raise RuntimeError("this row always fails")
            if not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError("first attempt fails")
        return f"row-{i}".encode()

    return F.udf(body, "binary", useArrow=False)


def _rows_with_udf(spark: Any, udf: Any, n: int) -> Any:
    from pyspark.sql import functions as F  # noqa: N812

    # Two partitions made by range, so the UDF runs in the writing tasks.
    return spark.range(0, n, 1, 2).select(
        F.lit("R").alias("topic"),
        udf("id").alias("body"),
        (F.col("id") % 3).cast("int").alias("queue_id"),
    )


def test_task_retried_midway_appends_each_row_once(spark: Any, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "store"
    marker = tmp_path / "failed-once"
    # Small Arrow batches: the failing task has staged rows before it fails.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    try:
        _write(_rows_with_udf(spark, _failing_body(marker, 170), 200), path, fmt)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert marker.exists()  # the first attempt did fail
    assert _bodies(path) == sorted(f"row-{i}".encode() for i in range(200))
    assert not (path / "spark-staging").exists()


def test_failed_job_appends_nothing(spark: Any, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "store"
    put(path, [rmqstore.Message("R", b"before")])
    with pytest.raises(Exception, match="this row always fails"):
        _write(_rows_with_udf(spark, _failing_body(None, 170), 200), path, fmt)
    assert _bodies(path) == [b"before"]
    # abort() returns once its grace period for the job's last running tasks is over.
    assert not (path / "spark-staging").exists()


def test_write_to_a_store_open_elsewhere_fails_clearly(
    spark: Any, tmp_path: Path, fmt: str
) -> None:
    path = tmp_path / "store"
    df = spark.createDataFrame([("R", b"x", 0, None, [], None)], WRITE_SCHEMA)
    with rmqstore.MessageStore(path, **SMALL_STORE) as store:
        with pytest.raises(Exception, match="another process holds the store open") as info:
            _write(df, path, fmt)
        assert "Nothing was appended" in str(info.value)
        assert store.get_max_offset_in_queue("R", 0) == 0
    assert _bodies(path) == []
    assert not (path / "spark-staging").exists()


@pytest.mark.parametrize(
    ("bad_row", "error", "message"),
    [
        (("R", b"bad", -1), "InvalidArgumentError", "column 'queue_id' holds -1"),
        (("R", b"bad", 2**31), "ArgumentOverflowError", f"column 'queue_id' holds {2**31}"),
        ((None, b"bad", 0), "InvalidArgumentError", "column 'topic' is null in 1 row(s)"),
        (("R", None, 0), "InvalidArgumentError", "column 'body' is null in 1 row(s)"),
    ],
)
def test_a_row_the_store_refuses_fails_the_job_before_any_append(
    spark: Any, tmp_path: Path, fmt: str, *, bad_row: tuple[Any, ...], error: str, message: str
) -> None:
    """The write tasks check every row, so a bad one fails the job before the driver appends
    the good ones (it used to append the rows before it, then fail on a plain OverflowError or
    a MESSAGE_ILLEGAL put)."""
    path = tmp_path / "store"
    put(path, [rmqstore.Message("R", b"before")])
    rows = [("R", f"good-{i}".encode(), i % 3) for i in range(50)] + [bad_row]
    df = spark.createDataFrame(rows, "topic STRING, body BINARY, queue_id BIGINT").coalesce(1)
    with pytest.raises(Exception, match=re.escape(message)) as info:
        _write(df, path, fmt)
    assert ERRORS[fmt][error] in str(info.value)
    assert _bodies(path) == [b"before"]
    assert not (path / "spark-staging").exists()


def test_a_staging_folder_that_is_a_link_is_refused(spark: Any, tmp_path: Path, fmt: str) -> None:
    """Staged rows stay inside the store folder: a ``spark-staging`` link to elsewhere fails
    the write, and nothing is written, staged or removed through it."""
    path = tmp_path / "store"
    put(path, [rmqstore.Message("R", b"before")])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"mine")
    (path / "spark-staging").symlink_to(outside, target_is_directory=True)
    df = spark.createDataFrame(
        [("R", f"x-{i}".encode(), 0, None, [], None) for i in range(20)], WRITE_SCHEMA
    )
    with pytest.raises(Exception, match="is a symbolic link or not a folder"):
        _write(df.repartition(2), path, fmt)
    assert sorted(os.listdir(outside)) == ["keep"]
    assert (outside / "keep").read_bytes() == b"mine"
    assert (path / "spark-staging").is_symlink()
    assert _bodies(path) == [b"before"]


def test_a_cancelled_job_appends_nothing_and_leaves_no_staged_files(
    spark: Any, tmp_path: Path, fmt: str
) -> None:
    """A job cancelled while a task is staging (its file open, with batches written): the
    killed task's file and the finished task's file are removed, nothing is appended."""
    from pyspark.sql import functions as F  # noqa: N812

    path = tmp_path / "store"
    put(path, [rmqstore.Message("R", b"before")])
    started = tmp_path / "started"
    n = 20_000

    def body(i: int) -> bytes:
        if i == n - 1000:  # the second task, once it has staged several batches
            open(started, "w").close()
            time.sleep(60)
        return f"row-{i}".encode()

    udf = F.udf(body, "binary", useArrow=False)
    df = spark.range(0, n, 1, 2).select(F.lit("R").alias("topic"), udf("id").alias("body"))
    sc = spark.sparkContext
    seen_files: list[str] = []

    def cancel() -> None:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        for _, _, files in os.walk(path / "spark-staging"):
            seen_files.extend(files)
        sc.cancelJobGroup("rmq-write-cancel")

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    canceller = threading.Thread(target=cancel)
    canceller.start()
    sc.setJobGroup("rmq-write-cancel", "a write cancelled midway", interruptOnCancel=True)
    try:
        with pytest.raises(Exception, match="cancel"):
            _write(df, path, fmt)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        canceller.join()
    assert started.exists()
    if fmt == "rmqstore-jvm":
        # (The Python source's tasks get their rows later in Spark's pipeline; its test checks
        # the clean-up alone.)
        assert seen_files, "the tasks had staged files when the job was cancelled"
    assert _bodies(path) == [b"before"]
    # abort() returns once its grace period for the job's last running tasks is over.
    assert not (path / "spark-staging").exists()


def test_jvm_writes_give_back_every_native_resource(spark: Any, tmp_path: Path) -> None:
    """After appends that succeed, fail in a task, and fail at commit, the native library holds
    no writer, no store and no exported buffer more than before."""
    native = spark._jvm.rmqstore.jni.NativeStore
    writers = spark._jvm.rmqstore.jni.NativeWriter
    start = (list(native.allocations()), writers.openWriters())
    path = tmp_path / "store"
    rows = [
        ("W", f"b-{i}".encode() * (i % 50), i % 3, "T", [f"k{i}"], {"p": "v"}) for i in range(5000)
    ]
    _write(spark.createDataFrame(rows, WRITE_SCHEMA).repartition(3), path, "rmqstore-jvm")
    with pytest.raises(Exception, match="this row always fails"):
        _write(_rows_with_udf(spark, _failing_body(None, 170), 200), path, "rmqstore-jvm")
    with (
        rmqstore.MessageStore(path, **SMALL_STORE),
        pytest.raises(Exception, match="another process holds the store open"),
    ):
        _write(spark.createDataFrame(rows[:10], WRITE_SCHEMA), path, "rmqstore-jvm")
    assert (list(native.allocations()), writers.openWriters()) == start
    assert len(stored_rows(path)) == 5000


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (("R", b"x", None, None, ["a b"], None), "column 'keys' holds the key 'a b'"),
        (("R", b"x", None, None, [""], None), "which is empty or contains white space"),
        (("R", b"x", None, "T", [], {"TAGS": "U"}), "column 'properties' holds TAGS"),
        (("R", b"x", None, None, [], {"p": "a\x01b"}), "column 'properties' holds 'p'"),
    ],
)
def test_jvm_rows_with_bad_keys_or_properties_fail_in_the_task(
    spark: Any, tmp_path: Path, row: tuple[Any, ...], message: str
) -> None:
    """Keys and properties the store would refuse fail the write task, before any append (the
    Python source finds them at commit, after appending the rows before)."""
    path = tmp_path / "store"
    put(path, [rmqstore.Message("R", b"before")])
    rows = [("R", f"good-{i}".encode(), 0, None, [], None) for i in range(20)] + [row]
    df = spark.createDataFrame(rows, WRITE_SCHEMA).coalesce(1)
    with pytest.raises(Exception, match=re.escape(message)) as info:
        _write(df, path, "rmqstore-jvm")
    assert "rmqstore.jni.InvalidArgumentException" in str(info.value)
    assert _bodies(path) == [b"before"]
    assert not (path / "spark-staging").exists()
