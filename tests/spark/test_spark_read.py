"""Batch reads through the ``rmqstore`` Spark source equal what ``get_message`` returns."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import rmqstore
from rmqspark import put, spark_rows, store_options, stored_rows

pytestmark = pytest.mark.spark


def _messages(phase: int) -> list[rmqstore.Message]:
    tags = ["TagA", "TagB", None]
    out = []
    for qid, count in ((0, 30 if phase == 1 else 10), (1, 12 if phase == 1 else 0), (2, 5)):
        for i in range(count):
            out.append(
                rmqstore.Message(
                    "TopicA",
                    f"a{phase}-{qid}-{i}".encode() * (i % 4 + 1),
                    tags=tags[i % 3],
                    keys=[f"k{i}", f"p{phase}"] if i % 2 else [],
                    queue_id=qid,
                    properties={"n": str(i)} if i % 5 == 0 else None,
                )
            )
    for i in range(8 if phase == 1 else 4):
        out.append(
            rmqstore.Message("TopicB", bytes([i, phase]), tags="TagB", properties={"x": "y"})
        )
    return out


@pytest.fixture(scope="module")
def read_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """Two topics over four queues, written in two phases 50 ms apart; returns the store path
    and the first store timestamp of phase 2."""
    path = tmp_path_factory.mktemp("read") / "store"
    put(path, _messages(1))
    time.sleep(0.05)
    second = put(path, _messages(2))
    return path, min(r.store_timestamp for r in second)


def _load(spark: Any, path: Path, **options: str) -> Any:
    return spark.read.format("rmqstore").options(**store_options(path, **options)).load()


def test_batch_read_equals_get_message(spark: Any, read_store: tuple[Path, int]) -> None:
    path, _ = read_store
    expected = stored_rows(path, include_properties=True)
    assert len(expected) == 30 + 12 + 5 + 8 + 10 + 5 + 4
    df = _load(spark, path, includeProperties="true")
    assert df.columns == [
        "topic",
        "queue_id",
        "queue_offset",
        "commit_log_offset",
        "store_timestamp",
        "born_timestamp",
        "tags",
        "keys",
        "properties",
        "body",
    ]
    assert spark_rows(df, include_properties=True) == expected
    # Without includeProperties the column is absent and the rest is the same.
    plain = _load(spark, path)
    assert "properties" not in plain.columns
    assert spark_rows(plain) == stored_rows(path)


def test_offset_ranges(spark: Any, read_store: tuple[Path, int]) -> None:
    path, _ = read_store
    everything = stored_rows(path)
    df = _load(
        spark,
        path,
        topics="TopicA",
        startingOffsets='{"TopicA":{"0":7,"2":-2}}',
        endingOffsets='{"TopicA":{"0":33,"1":4,"2":-1}}',
    )
    ends = {0: 33, 1: 4, 2: 10}
    expected = [
        r for r in everything if r[0] == "TopicA" and (7 if r[1] == 0 else 0) <= r[2] < ends[r[1]]
    ]
    assert len(expected) == 26 + 4 + 10
    assert spark_rows(df) == expected
    # assign picks queues; minPartitions splits them into more tasks with the same rows.
    assigned = _load(spark, path, assign='{"TopicA":[0,2]}', minPartitions="6")
    assert assigned.rdd.getNumPartitions() >= 6
    assert spark_rows(assigned) == [r for r in everything if r[0] == "TopicA" and r[1] != 1]


def test_time_ranges(spark: Any, read_store: tuple[Path, int]) -> None:
    path, phase2 = read_store
    everything = stored_rows(path)
    later = _load(spark, path, startingTimestamp=str(phase2))
    assert spark_rows(later) == [r for r in everything if r[4] >= phase2]
    assert len(spark_rows(later)) == 10 + 5 + 4
    earlier = _load(spark, path, topicPattern="Topic[AB]", endingTimestamp=str(phase2))
    assert spark_rows(earlier) == [r for r in everything if r[4] < phase2]


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().optimizedPlan())


def test_filters_stay_with_spark(spark: Any, read_store: tuple[Path, int]) -> None:
    """The source takes no filter (see test_spark_reuse for why): with pushdown on, the plan
    keeps every condition and reads every queue, and the rows are those of the conditions."""
    from pyspark.sql import functions as F  # noqa: N812

    path, phase2 = read_store
    everything = stored_rows(path)
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"
    # One task per queue (no packing), to see which queues the scan reads.
    df = _load(spark, path, rowsPerPartition="1").where(
        (F.col("topic") == "TopicA")
        & F.col("queue_id").isin(0, 2)
        & (F.col("tags") == "TagA")
        & (F.col("store_timestamp") >= F.timestamp_millis(F.lit(phase2)))
    )
    expected = [
        r
        for r in everything
        if r[0] == "TopicA" and r[1] in (0, 2) and r[6] == "TagA" and r[4] >= phase2
    ]
    assert expected
    assert spark_rows(df) == expected
    plan = _plan(df)
    for condition in ("TopicA", "TagA", "queue_id", "store_timestamp"):
        assert condition in plan
    assert df.rdd.getNumPartitions() == 4
    later = _load(spark, path).where(F.col("store_timestamp") > F.timestamp_millis(F.lit(phase2)))
    assert spark_rows(later) == [r for r in everything if r[4] > phase2]


def test_small_queues_share_read_tasks(spark: Any, read_store: tuple[Path, int]) -> None:
    """Queues smaller than rowsPerPartition are packed into shared tasks (the default packs
    this small store into one); the rows are the same however they are packed."""
    path, _ = read_store
    everything = stored_rows(path)
    packed = _load(spark, path)
    assert packed.rdd.getNumPartitions() == 1
    assert spark_rows(packed) == everything
    from pyspark.sql import functions as F  # noqa: N812

    sizes: dict[tuple[str, int], int] = {}
    for r in everything:
        sizes[(r[0], r[1])] = sizes.get((r[0], r[1]), 0) + 1
    one_each = _load(spark, path, rowsPerPartition="1")
    assert one_each.rdd.getNumPartitions() == len(sizes)
    assert spark_rows(one_each) == everything
    # At most 25 rows per task, unless one queue alone holds more; fewer tasks than queues.
    df = _load(spark, path, rowsPerPartition="25")
    per_task = [r["count"] for r in df.groupBy(F.spark_partition_id()).count().collect()]
    assert 1 < len(per_task) < len(sizes)
    assert max(per_task) <= max(25, *sizes.values())
    assert sum(per_task) == len(everything)
    assert spark_rows(df) == everything
    with pytest.raises(Exception, match="rowsPerPartition"):
        _load(spark, path, rowsPerPartition="0").count()


def test_nothing_selected_reads_no_rows(spark: Any, read_store: tuple[Path, int]) -> None:
    path, _ = read_store
    assert _load(spark, path, topicPattern="Nope.*").count() == 0
