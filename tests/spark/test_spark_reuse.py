"""Queries with filters never change other queries of the same DataFrame (issue 15, item 1).

Spark 4.1 to 4.3 keep what a Python source planned while filters were pushed into it on the
DataFrame's data source and reuse it for every later scan of that DataFrame that pushes no
filter (and for the other scans of the same query). Each case here runs on ONE DataFrame, with
``spark.sql.python.filterPushdown.enabled`` on, a sequence of queries that puts every filter
kind on every column (equality, ranges, IN, null checks, prefixes) before and after unfiltered
queries, ``count()``, ``select(...)`` and other filters, and checks each answer against the
rows ``get_message`` returns.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import rmqstore
from rmqspark import Row, put, spark_rows, store_options, stored_rows

pytestmark = pytest.mark.spark

# Row tuple positions (rmqspark.stored_rows).
TOPIC, QID, QOFF, CLOFF, STORE_TS, BORN_TS, TAGS, KEYS, BODY = range(9)


@dataclass(frozen=True)
class Truth:
    path: Path
    rows: list[Row]
    phase2: int  # first store timestamp (ms) of the second phase


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Truth:
    """Orders (4 queues) and Audit (2 queues) with tags A/B/none, written in two phases 50 ms
    apart; the module's queries all read it."""
    path = tmp_path_factory.mktemp("reuse") / "store"

    def phase(n: int) -> list[rmqstore.Message]:
        out = []
        for i in range(60):
            out.append(
                rmqstore.Message(
                    "Orders",
                    f"o{n}-{i}".encode(),
                    tags=("TagA", "TagB", None)[i % 3],
                    keys=[f"k{i}"] if i % 2 else [],
                    queue_id=i % 4,
                )
            )
        for i in range(20):
            out.append(
                rmqstore.Message(
                    "Audit", f"a{n}-{i}".encode(), tags="TagB" if i % 2 else None, queue_id=i % 2
                )
            )
        return out

    put(path, phase(1))
    time.sleep(0.05)
    second = put(path, phase(2))
    rows = stored_rows(path)
    assert len(rows) == 160
    return Truth(path, rows, min(r.store_timestamp for r in second))


@dataclass(frozen=True)
class Case:
    name: str
    column: Callable[[Truth], Any]  # the Spark condition
    keep: Callable[[Truth, Row], bool]  # the same condition on a ground-truth row


def _cases() -> list[Case]:
    from pyspark.sql import functions as F  # noqa: N812

    def ts(t: Truth, shift: int = 0) -> Any:
        return F.timestamp_millis(F.lit(t.phase2 + shift))

    def nth(t: Truth, k: int) -> Row:
        return t.rows[k]

    return [
        # The query.
        Case(
            "topic&queue_id&queue_offset",
            lambda t: (
                (F.col("topic") == "Orders")
                & (F.col("queue_id") == 1)
                & (F.col("queue_offset") == 7)
            ),
            lambda t, r: r[TOPIC] == "Orders" and r[QID] == 1 and r[QOFF] == 7,
        ),
        Case("topic=", lambda t: F.col("topic") == "Audit", lambda t, r: r[TOPIC] == "Audit"),
        Case(
            "topic in",
            lambda t: F.col("topic").isin("Audit", "Nope"),
            lambda t, r: r[TOPIC] == "Audit",
        ),
        Case("topic>", lambda t: F.col("topic") > "B", lambda t, r: r[TOPIC] > "B"),
        Case(
            "topic prefix",
            lambda t: F.col("topic").startswith("Ord"),
            lambda t, r: r[TOPIC] == "Orders",
        ),
        Case("topic<>", lambda t: F.col("topic") != "Orders", lambda t, r: r[TOPIC] != "Orders"),
        Case("queue_id=", lambda t: F.col("queue_id") == 1, lambda t, r: r[QID] == 1),
        Case("queue_id in", lambda t: F.col("queue_id").isin(0, 3), lambda t, r: r[QID] in (0, 3)),
        Case("queue_id>=", lambda t: F.col("queue_id") >= 2, lambda t, r: r[QID] >= 2),
        Case("queue_offset=", lambda t: F.col("queue_offset") == 7, lambda t, r: r[QOFF] == 7),
        Case(
            "queue_offset range",
            lambda t: (F.col("queue_offset") > 3) & (F.col("queue_offset") <= 9),
            lambda t, r: 3 < r[QOFF] <= 9,
        ),
        Case(
            "queue_offset in",
            lambda t: F.col("queue_offset").isin(0, 29),
            lambda t, r: r[QOFF] in (0, 29),
        ),
        Case(
            "commit_log_offset=",
            lambda t: F.col("commit_log_offset") == nth(t, 50)[CLOFF],
            lambda t, r: r[CLOFF] == nth(t, 50)[CLOFF],
        ),
        Case(
            "commit_log_offset>=",
            lambda t: F.col("commit_log_offset") >= nth(t, 100)[CLOFF],
            lambda t, r: r[CLOFF] >= nth(t, 100)[CLOFF],
        ),
        Case(
            "store_timestamp>=",
            lambda t: F.col("store_timestamp") >= ts(t),
            lambda t, r: r[STORE_TS] >= t.phase2,
        ),
        Case(
            "store_timestamp<",
            lambda t: F.col("store_timestamp") < ts(t),
            lambda t, r: r[STORE_TS] < t.phase2,
        ),
        Case(
            "store_timestamp=",
            lambda t: F.col("store_timestamp") == ts(t),
            lambda t, r: r[STORE_TS] == t.phase2,
        ),
        Case(
            "store_timestamp between",
            lambda t: F.col("store_timestamp").between(ts(t, -10_000), ts(t, -1)),
            lambda t, r: t.phase2 - 10_000 <= r[STORE_TS] <= t.phase2 - 1,
        ),
        Case(
            "born_timestamp>",
            lambda t: F.col("born_timestamp") > ts(t, -1),
            lambda t, r: r[BORN_TS] > t.phase2 - 1,
        ),
        Case("tags=", lambda t: F.col("tags") == "TagA", lambda t, r: r[TAGS] == "TagA"),
        Case(
            "tags in",
            lambda t: F.col("tags").isin("TagA", "TagB"),
            lambda t, r: r[TAGS] in ("TagA", "TagB"),
        ),
        Case("tags null", lambda t: F.col("tags").isNull(), lambda t, r: r[TAGS] is None),
        Case(
            "tags<>",
            lambda t: F.col("tags") != "TagB",
            lambda t, r: r[TAGS] is not None and r[TAGS] != "TagB",
        ),
        Case("body=", lambda t: F.col("body") == F.lit(b"o2-5"), lambda t, r: r[BODY] == b"o2-5"),
        Case(
            "keys contain",
            lambda t: F.array_contains("keys", "k3"),
            lambda t, r: "k3" in r[KEYS],
        ),
        Case(
            "tags&store_timestamp&queue_id in",
            lambda t: (
                (F.col("tags") == "TagA")
                & (F.col("store_timestamp") >= ts(t))
                & F.col("queue_id").isin(0, 2)
            ),
            lambda t, r: r[TAGS] == "TagA" and r[STORE_TS] >= t.phase2 and r[QID] in (0, 2),
        ),
    ]


def _load(spark: Any, t: Truth) -> Any:
    # One task per queue: a query's tasks show which queues its scan reads.
    return (
        spark.read.format("rmqstore").options(**store_options(t.path, rowsPerPartition="1")).load()
    )


def _check_all(df: Any, t: Truth, step: str) -> None:
    assert spark_rows(df) == t.rows, step


def _check_count(df: Any, t: Truth, step: str) -> None:
    assert df.count() == len(t.rows), step


def _check_bodies(df: Any, t: Truth, step: str) -> None:
    bodies = Counter(bytes(r["body"]) for r in df.select("body").collect())
    assert bodies == Counter(r[BODY] for r in t.rows), step


def _check_filtered(df: Any, t: Truth, case: Case, step: str) -> None:
    expected = [r for r in t.rows if case.keep(t, r)]
    got = df.where(case.column(t))
    assert spark_rows(got) == expected, f"{step}: {case.name}"


def _sequence(cases: list[Case]) -> Iterator[tuple[str, Case | None]]:
    """Unfiltered, A, unfiltered, B, unfiltered, C, B again, unfiltered, ...: every case comes
    right after an unfiltered query and is followed by one (whole rows, count() or select
    in turn); every third case is followed by the case before it again."""
    checks = ("all", "count", "select")
    yield "all", None
    for i, case in enumerate(cases):
        yield "filter", case
        if i % 3 == 2:
            yield "filter", cases[i - 1]
        yield checks[i % 3], None
    for check in checks:
        yield check, None


def test_every_filter_leaves_later_queries_of_the_dataframe_alone(spark: Any, store: Truth) -> None:
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"
    cases = _cases()
    df = _load(spark, store)
    for n, (kind, case) in enumerate(_sequence(cases)):
        step = f"step {n} ({kind})"
        if kind == "filter":
            assert case is not None
            _check_filtered(df, store, case, step)
        elif kind == "all":
            _check_all(df, store, step)
        elif kind == "count":
            _check_count(df, store, step)
        else:
            _check_bodies(df, store, step)
    # A fresh DataFrame of the same store still reads it all, in one task per queue.
    fresh = _load(spark, store)
    assert fresh.rdd.getNumPartitions() == 6
    _check_all(fresh, store, "fresh")


def test_filtered_scans_of_one_dataframe_in_one_query(spark: Any, store: Truth) -> None:
    """Two scans of the same DataFrame in one query (union, join, self-join) each read their
    own rows, whatever filters either has."""
    from pyspark.sql import functions as F  # noqa: N812

    t = store
    df = _load(spark, t)
    # Two differently filtered scans.
    union = df.where(F.col("queue_id") == 1).union(df.where(F.col("topic") == "Audit"))
    expected = [r for r in t.rows if r[QID] == 1] + [r for r in t.rows if r[TOPIC] == "Audit"]
    assert spark_rows(union) == sorted(expected)
    # A filtered and an unfiltered scan: per-queue counts of everything, next to the counts of
    # the tagged rows.
    per_queue = Counter((r[TOPIC], r[QID]) for r in t.rows)
    tagged = Counter((r[TOPIC], r[QID]) for r in t.rows if r[TAGS] == "TagA")
    everything = df.groupBy("topic", "queue_id").count()
    only_a = (
        df.where(F.col("tags") == "TagA")
        .groupBy("topic", "queue_id")
        .count()
        .withColumnRenamed("count", "a")
    )
    joined = everything.join(only_a, ["topic", "queue_id"], "left").collect()
    assert {(r["topic"], r["queue_id"]): r["count"] for r in joined} == dict(per_queue)
    assert {(r["topic"], r["queue_id"]): r["a"] or 0 for r in joined} == {
        q: tagged.get(q, 0) for q in per_queue
    }
    # And the DataFrame is still whole afterwards.
    _check_count(df, t, "after the union and join")


def test_without_pushdown_too(spark: Any, store: Truth) -> None:
    """With filter pushdown off Spark plans every scan itself; the same sequence holds."""
    cases = [
        c for c in _cases() if c.name in {"topic&queue_id&queue_offset", "tags=", "queue_id in"}
    ]
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        df = _load(spark, store)
        for n, (_kind, case) in enumerate(_sequence(cases)):
            if case is not None:
                _check_filtered(df, store, case, f"step {n}")
            else:
                _check_count(df, store, f"step {n}")
        _check_all(df, store, "end")
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def test_stream_queries_of_one_dataframe(spark: Any, store: Truth, tmp_path: Path) -> None:
    """Streaming scans plan their own reads: two queries of one streaming DataFrame, one
    filtered, and filtered and unfiltered queries of each micro-batch, each see their rows."""
    from pyspark.sql import functions as F  # noqa: N812

    t = store
    sdf = (
        spark.readStream.format("rmqstore")
        .options(**store_options(t.path, startingOffsets="earliest", maxOffsetsPerTrigger="70"))
        .load()
    )
    seen: dict[str, list[Row]] = {"filtered": [], "all": [], "inner_a": [], "inner_all": []}
    counts: list[int] = []

    def run(df: Any, name: str, per_batch: Callable[[Any], None] | None = None) -> None:
        def collect(batch: Any, _batch_id: int) -> None:
            if per_batch is not None:
                per_batch(batch)
            seen[name].extend(spark_rows(batch))

        query = (
            df.writeStream.trigger(availableNow=True)
            .option("checkpointLocation", str(tmp_path / name))
            .foreachBatch(collect)
            .start()
        )
        assert query.awaitTermination(180)
        assert query.exception() is None

    def inner(batch: Any) -> None:
        seen["inner_a"].extend(spark_rows(batch.where(F.col("tags") == "TagA")))
        counts.append(batch.count())
        seen["inner_all"].extend(spark_rows(batch))

    run(sdf.where(F.col("queue_id") == 1), "filtered")
    run(sdf, "all", inner)
    assert sorted(seen["filtered"]) == [r for r in t.rows if r[QID] == 1]
    assert sorted(seen["all"]) == t.rows
    assert sorted(seen["inner_all"]) == t.rows
    assert sorted(seen["inner_a"]) == [r for r in t.rows if r[TAGS] == "TagA"]
    assert len(counts) > 1
    assert sum(counts) == len(t.rows)
