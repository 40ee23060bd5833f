"""Issue 21: conditions on ``tags`` and ``store_timestamp`` are pushed into the core's bulk read
of the JVM connector (format ``rmqstore-jvm``). Every answer equals the rows of
``MessageStore.get_message`` filtered here, and the same query through the Python source
(which takes no conditions, so Spark evaluates them): tags compared as strings also when two
share a hash code ("Aa", "BB") or when the consume queue's code is a delivery time (the
schedule topic); times compared per row at microsecond bounds, also where store times go back
as offsets grow. The pushed conditions show in the plan, and tasks prefer the driver's host."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import rmqstore
from rmqspark import put, spark_rows, store_options, stored_rows
from rmqwire import SMALL_STORE, append_records, encode_properties, java_hash

pytestmark = pytest.mark.spark

JVM = "rmqstore-jvm"
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
#: Store times of the records written by hand, not in offset order.
SKEW_TIMES = [1_700_000_000_500, 1_700_000_000_100, 1_700_000_000_900, 1_700_000_000_100, 42]


def _messages() -> list[rmqstore.Message]:
    tags = ["Aa", "BB", None, "C", "Aa", "TagA"]
    out = []
    for i in range(120):
        out.append(
            rmqstore.Message(
                "TopicA",
                f"a-{i}-".encode() * (i % 5 + 1),
                tags=tags[i % len(tags)],
                keys=[f"k{i}"],
                queue_id=i % 3,
            )
        )
    for i in range(20):
        out.append(rmqstore.Message("TopicB", b"b%d" % i, tags="BB" if i % 2 else "Aa"))
    # Delayed (2 h): stored in the schedule topic, whose units hold the delivery time.
    for i in range(6):
        out.append(
            rmqstore.Message(
                "TopicA", b"late%d" % i, tags=["Aa", "BB", None][i % 3], delay_level=18
            )
        )
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The messages above, then five records of topic Skew whose store times go back and forth
    (written into the closed store's commitlog, dispatched at the next open)."""
    path = tmp_path_factory.mktemp("jvm-filters") / "store"
    put(path, _messages())
    with rmqstore.MessageStore(path, **SMALL_STORE) as s:
        end = s.get_max_phy_offset()
    records = [
        {
            "topic": "Skew",
            "queue_offset": i,
            "store_timestamp": t,
            "born_timestamp": t,
            "properties": encode_properties([("TAGS", "Aa" if i % 2 else "BB")]),
            "body": b"skew%d" % i,
        }
        for i, t in enumerate(SKEW_TIMES)
    ]
    append_records(path, end, records)
    with rmqstore.MessageStore(path, **SMALL_STORE) as s:
        assert s.wait_dispatched()
        assert s.get_max_offset_in_queue("Skew", 0) == len(SKEW_TIMES)
    return path


def _load(spark: Any, path: Path, fmt: str = JVM, **options: str) -> Any:
    return spark.read.format(fmt).options(**store_options(path, **options)).load()


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def _same(spark: Any, store: Path, where: str, keep: Any, **options: str) -> list[Any]:
    """The rows of ``where`` through the connector: those of get_message that ``keep`` keeps,
    and those of the Python source (no pushdown) for the same query."""
    got = spark_rows(_load(spark, store, **options).where(where))
    plain = spark_rows(_load(spark, store, "rmqstore", **options).where(where))
    assert got == plain, where
    if not options:
        assert got == [r for r in stored_rows(store) if keep(r)], where
    return got


def test_the_fixture_has_what_the_tests_need(store: Path) -> None:
    assert java_hash("Aa") == java_hash("BB")
    rows = stored_rows(store)
    late = [r for r in rows if r[0] == SCHEDULE]
    assert len(late) == 6
    # The schedule topic's units hold delivery times, not the tags' hash codes.
    with rmqstore.MessageStore(store, **SMALL_STORE) as s:
        [qid] = s.queue_ids(SCHEDULE)
        unit = s.get_message("g", SCHEDULE, qid, 0, 1).messages[0]
    assert unit.tags == "Aa"
    skew = [r[4] for r in rows if r[0] == "Skew"]
    assert skew == SKEW_TIMES
    assert skew != sorted(skew)


@pytest.mark.parametrize(
    ("where", "keep"),
    [
        ("tags = 'Aa'", lambda r: r[6] == "Aa"),
        ("tags = 'BB'", lambda r: r[6] == "BB"),
        ("tags IN ('BB', 'C', 'nope')", lambda r: r[6] in ("BB", "C")),
        ("tags IN ('Aa', NULL)", lambda r: r[6] == "Aa"),
        ("tags = ''", lambda r: False),
        ("tags IS NULL", lambda r: r[6] is None),
        ("tags IS NOT NULL", lambda r: r[6] is not None),
        ("tags <=> NULL", lambda r: r[6] is None),
        ("tags <=> 'C'", lambda r: r[6] == "C"),
        ("tags = NULL", lambda r: False),
        ("NOT (tags = 'Aa')", lambda r: r[6] is not None and r[6] != "Aa"),
        ("tags = 'Aa' AND tags IN ('Aa', 'BB')", lambda r: r[6] == "Aa"),
        ("tags = 'Aa' OR tags IS NULL", lambda r: r[6] in ("Aa", None)),
        (
            "tags = 'Aa' AND topic = 'TopicA' AND queue_id IN (0, 2)",
            lambda r: r[6] == "Aa" and r[0] == "TopicA" and r[1] in (0, 2),
        ),
        (f"topic = '{SCHEDULE}' AND tags = 'Aa'", lambda r: r[0] == SCHEDULE and r[6] == "Aa"),
    ],
)
def test_conditions_on_tags(spark: Any, store: Path, where: str, keep: Any) -> None:
    got = _same(spark, store, where, keep)
    if "''" not in where and "= NULL" not in where:
        assert got, where


def test_tag_conditions_are_pushed_and_shown(spark: Any, store: Path) -> None:
    df = _load(spark, store)
    plan = _plan(df.where("tags = 'BB'"))
    assert "PushedFilters: [IsNotNull(tags), EqualTo(tags,BB)]" in plan, plan
    # Taken over exactly: Spark evaluates no Filter over the scan.
    assert "Filter (" not in plan, plan
    plan = _plan(df.where("tags IN ('Aa', 'C') AND topic = 'TopicB'"))
    assert "In(tags, [Aa,C])" in plan, plan
    assert "EqualTo(topic,TopicB)" in plan, plan
    # The same DataFrame with and without conditions: each its own answer.
    everything = stored_rows(store)
    assert spark_rows(df.where("tags = 'BB'")) == [r for r in everything if r[6] == "BB"]
    assert spark_rows(df) == everything
    assert spark_rows(df.where("tags = 'Aa'")) == [r for r in everything if r[6] == "Aa"]


def _micros(ms: int, extra: int = 0) -> str:
    return f"timestamp_micros({ms * 1000 + extra})"


def test_conditions_on_store_timestamp_at_exact_bounds(spark: Any, store: Path) -> None:
    rows = stored_rows(store)
    times = sorted({r[4] for r in rows if r[0] == "TopicA"})
    t = times[len(times) // 2]
    for op, cmp in [
        (">", lambda a, b: a > b),
        (">=", lambda a, b: a >= b),
        ("<", lambda a, b: a < b),
        ("<=", lambda a, b: a <= b),
        ("=", lambda a, b: a == b),
        ("<=>", lambda a, b: a == b),
    ]:
        # On a message's time, and a microsecond either side of it.
        for extra in (-1, 0, 1):
            bound = t * 1000 + extra
            where = f"store_timestamp {op} {_micros(t, extra)}"
            _same(spark, store, where, lambda r, c=cmp, b=bound: c(r[4] * 1000, b))
    # Out-of-order store times: every row in the range, wherever it is in the queue.
    for where, keep in [
        (f"store_timestamp >= {_micros(SKEW_TIMES[1])}", lambda r: r[4] >= SKEW_TIMES[1]),
        (f"store_timestamp < {_micros(SKEW_TIMES[0])}", lambda r: r[4] < SKEW_TIMES[0]),
        (
            f"store_timestamp BETWEEN {_micros(SKEW_TIMES[1])} AND {_micros(SKEW_TIMES[0])}",
            lambda r: SKEW_TIMES[1] <= r[4] <= SKEW_TIMES[0],
        ),
    ]:
        got = _same(
            spark, store, f"topic = 'Skew' AND {where}", lambda r, k=keep: r[0] == "Skew" and k(r)
        )
        assert got
    got = _same(
        spark,
        store,
        f"topic = 'Skew' AND store_timestamp = {_micros(SKEW_TIMES[1])} AND tags = 'Aa'",
        lambda r: r[0] == "Skew" and r[4] == SKEW_TIMES[1] and r[6] == "Aa",
    )
    assert [r[2] for r in got] == [1, 3]


def test_timestamp_literals_of_both_java_types(spark: Any, store: Path) -> None:
    """Spark gives a timestamp literal as java.sql.Timestamp, or as java.time.Instant with the
    Java 8 API: both are pushed, to the microsecond."""
    rows = stored_rows(store)
    t = sorted(r[4] for r in rows if r[0] == "TopicA")[40]
    where = f"store_timestamp > {_micros(t, -1)} AND store_timestamp < {_micros(t, 1)}"
    want = [r for r in rows if r[4] == t]
    assert want
    key = "spark.sql.datetime.java8API.enabled"
    before = spark.conf.get(key)
    try:
        for java8 in ("false", "true"):
            spark.conf.set(key, java8)
            df = _load(spark, store).where(where)
            plan = _plan(df)
            assert "GreaterThan(store_timestamp," in plan, plan
            assert "Filter (" not in plan, plan
            assert spark_rows(df) == want
    finally:
        spark.conf.set(key, before)


def test_offset_options_and_time_conditions_together(spark: Any, store: Path) -> None:
    rows = stored_rows(store)
    t = sorted(r[4] for r in rows if r[0] == "TopicA")[30]
    for options in (
        {"startingOffsets": '{"TopicA":{"1":10}}', "endingOffsets": '{"TopicA":{"2":30}}'},
        {"topics": "TopicA", "rowsPerPartition": "7"},
        {"assign": '{"TopicA":[1]}', "minPartitions": "5"},
    ):
        where = f"store_timestamp >= {_micros(t)} AND tags IN ('Aa', 'C')"
        got = _same(spark, store, where, None, **options)
        assert got, options


def test_tasks_prefer_the_drivers_host(spark: Any, store: Path) -> None:
    """Each partition names the driver's host (the store is a folder of its machine); in local
    mode that is the executor's host, so the reads run there and give every row."""
    df = _load(spark, store, rowsPerPartition="10").where("tags = 'Aa'")
    plan = df._jdf.queryExecution().executedPlan()
    scans = plan.collectLeaves()
    rdd = scans.apply(0).inputRDD()
    parts = rdd.partitions()
    assert len(parts) > 3
    jsc = spark.sparkContext._jsc.sc()
    executors = {e.host() for e in jsc.statusTracker().getExecutorInfos()}
    for p in parts:
        locations = rdd.preferredLocations(p)
        hosts = [locations.apply(i) for i in range(locations.size())]
        assert len(hosts) == 1, hosts
        assert hosts[0] in executors, (hosts, executors)
    assert spark_rows(df) == [r for r in stored_rows(store) if r[6] == "Aa"]


def test_the_date_of_a_timestamp_literal_is_taken_as_spark_takes_it(
    spark: Any, store: Path
) -> None:
    """A literal given as a TIMESTAMP string (session time zone) or a far date (before 1582:
    Spark's calendar rebasing) selects what Spark itself selects."""
    late = datetime.datetime(2999, 1, 1)
    for where in (
        "store_timestamp < TIMESTAMP '1000-01-01 00:00:00'",
        f"store_timestamp < TIMESTAMP '{late:%Y-%m-%d %H:%M:%S}'",
        "store_timestamp > TIMESTAMP '1970-01-01 00:00:00.042001'",
    ):
        _same(spark, store, where, None, topics="Skew")
