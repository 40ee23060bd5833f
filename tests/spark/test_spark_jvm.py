"""Issue 21, first milestone: the JVM DataSource V2 connector (format ``rmqstore-jvm``, the jar
`make jar` builds) reads a store written by rmqstore through the Rust core: every row equals
``get_message`` and the Python source's DataFrame, only the needed columns are read, a damaged
record fails the task with the store's message, and every native buffer is given back."""

from __future__ import annotations

import os
import re
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import rmqstore
from rmqspark import put, spark_rows, store_options, stored_rows
from rmqwire import SEGMENT, SMALL_STORE, commitlog_dir, segment_name

pytestmark = pytest.mark.spark

JVM = "rmqstore-jvm"


@pytest.fixture(scope="module")
def native(spark: Any) -> Any:
    """The connector's native-method class in the session's JVM (the session loaded the jar)."""
    from rmqstore.spark import jar_path

    jar = Path(jar_path())
    assert jar.is_file(), jar
    loaded = spark.sparkContext.getConf().get("spark.jars", "")
    assert str(jar) in loaded, f"the Spark session was started without the jar: {loaded!r}"
    return spark._jvm.rmqstore.jni.NativeStore


def test_the_jar_carries_the_library_and_the_arrow_c_data_of_this_pyspark(native: Any) -> None:
    """arrow-c-data inside the jar is exactly the Arrow Java version the PySpark's jars have
    (the C Data Interface importer must match the vectors Spark's ArrowColumnVector reads)."""
    import pyspark
    from rmqstore.spark import jar_path

    jars = os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))
    [arrow] = [m[1] for n in jars if (m := re.fullmatch(r"arrow-vector-(.+)\.jar", n))]
    with zipfile.ZipFile(jar_path()) as z:
        names = set(z.namelist())
        props = z.read("META-INF/maven/org.apache.arrow/arrow-c-data/pom.properties").decode()
        services = z.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister")
    assert f"version={arrow}" in props.splitlines(), props
    assert "rmqstore/native/linux-x86_64/librmqstore_jni.so" in names
    assert "arrow_cdata_jni/x86_64/libarrow_cdata_jni.so" in names
    assert services.decode().split() == ["rmqstore.spark.RmqStoreJvmSource"]
    assert native.allocations()[0] >= 0  # the library loaded from inside the jar


def test_jar_path_names_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rmqstore.spark import JAR_ENV, jar_path

    missing = tmp_path / "nowhere.jar"
    monkeypatch.setenv(JAR_ENV, str(missing))
    with pytest.raises(FileNotFoundError, match=f"RMQSTORE_SPARK_JAR names '{missing}'"):
        jar_path()
    missing.write_bytes(b"PK")
    assert jar_path() == str(missing)


def _messages() -> list[rmqstore.Message]:
    """Three queues of TopicA with every kind of column value (bodies of up to 12 bytes live
    inside their binary_view views, longer ones point into the segments), and TopicB."""
    out = []
    for i in range(150):
        out.append(
            rmqstore.Message(
                "TopicA",
                f"a-{i}-".encode() * (i % 7 + 1),
                tags=["TagA", "TagB", None][i % 3],
                keys=[f"k{i}", f"x{i % 4}"] if i % 2 else [],
                queue_id=i % 3,
                properties={"n": str(i), "p": "v" * (i % 5 + 1)} if i % 4 == 0 else None,
            )
        )
    for i in range(40):
        out.append(rmqstore.Message("TopicB", bytes([i]) * i, tags="TagB"))
    return out


@pytest.fixture(scope="module")
def jvm_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("jvm") / "store"
    put(path, _messages())
    return path


def _load(spark: Any, path: Path, fmt: str = JVM, **options: str) -> Any:
    return spark.read.format(fmt).options(**store_options(path, **options)).load()


def _allocations(native: Any) -> list[int]:
    """[exported buffers alive, their bytes, stores open, handles open] in the JVM."""
    return list(native.allocations())


def _settled(native: Any, start: list[int], timeout: float = 20.0) -> list[int]:
    """The counters once they are back at ``start`` (tasks of a job that ``limit`` ended early
    are cancelled after the job's result arrives), or as they are after ``timeout``."""
    deadline = time.monotonic() + timeout
    now = _allocations(native)
    while now != start and time.monotonic() < deadline:
        time.sleep(0.1)
        now = _allocations(native)
    return now


def test_rows_equal_get_message_and_the_python_source(
    spark: Any, native: Any, jvm_store: Path
) -> None:
    expected = stored_rows(jvm_store, include_properties=True)
    assert len(expected) == 190
    df = _load(spark, jvm_store, includeProperties="true")
    python_df = _load(spark, jvm_store, "rmqstore", includeProperties="true")
    assert df.schema == python_df.schema
    assert spark_rows(df, include_properties=True) == expected
    assert spark_rows(python_df, include_properties=True) == expected
    plain = _load(spark, jvm_store)
    assert "properties" not in plain.columns
    assert spark_rows(plain) == stored_rows(jvm_store)


@pytest.mark.parametrize(
    "options",
    [
        {"topics": "TopicB"},
        {"assign": '{"TopicA":[0,2]}'},
        {"topicPattern": "Topic[A]"},
        {"startingOffsets": '{"TopicA":{"1":10}}', "endingOffsets": '{"TopicA":{"2":30}}'},
        {"minPartitions": "7"},
        {"rowsPerPartition": "1"},
        {"rowsPerPartition": "100000"},
    ],
)
def test_options_select_the_rows_the_python_source_selects(
    spark: Any, native: Any, jvm_store: Path, options: dict[str, str]
) -> None:
    got = spark_rows(_load(spark, jvm_store, **options))
    want = spark_rows(_load(spark, jvm_store, "rmqstore", **options))
    assert got == want
    assert 0 < len(got) < 190 or set(options) <= {"minPartitions", "rowsPerPartition"}
    parts = _load(spark, jvm_store, **options).rdd.getNumPartitions()
    if options.get("minPartitions"):
        assert parts >= 7
    if options.get("rowsPerPartition") == "1":
        assert parts == 4  # one task per queue
    if options.get("rowsPerPartition") == "100000":
        assert parts == 1  # every queue in one task


def test_queries_over_pruned_columns(spark: Any, native: Any, jvm_store: Path) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    df = _load(spark, jvm_store)
    assert df.count() == 190
    groups = {(r.topic, r.tags): r["count"] for r in df.groupBy("topic", "tags").count().collect()}
    assert groups == {
        ("TopicA", "TagA"): 50,
        ("TopicA", "TagB"): 50,
        ("TopicA", None): 50,
        ("TopicB", "TagB"): 40,
    }
    lengths = df.groupBy("queue_id").agg(F.sum(F.length("body")).alias("n")).collect()
    want: dict[int, int] = {}
    for row in stored_rows(jvm_store):
        want[row[1]] = want.get(row[1], 0) + len(row[-1])
    assert {r.queue_id: r.n for r in lengths} == want
    # A user schema may leave columns out and order them its own way.
    some = (
        spark.read.format(JVM)
        .schema("body binary, topic string, store_timestamp timestamp")
        .options(**store_options(jvm_store))
        .load()
    )
    rows = sorted((r.topic, bytes(r.body)) for r in some.collect())
    assert rows == sorted((r[0], r[-1]) for r in stored_rows(jvm_store))


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_column_pruning_shows_in_the_plan(spark: Any, native: Any, jvm_store: Path) -> None:
    df = _load(spark, jvm_store, includeProperties="true")
    plan = _plan(df.select("topic", "tags").where("tags = 'TagA'"))
    assert "ReadSchema: struct<topic:string,tags:string>" in plan, plan
    assert "body" not in plan, plan
    assert "ColumnarToRow" in plan, plan  # the scan hands Spark columnar batches
    plan = _plan(df.groupBy("queue_id").count())
    assert "ReadSchema: struct<queue_id:int>" in plan, plan


def test_conditions_on_topic_and_queue_id_select_queues(
    spark: Any, native: Any, jvm_store: Path
) -> None:
    """Conditions on topic and queue_id are taken over by the scan (only the queues they leave
    are read); every query plans its own scan, so the same DataFrame with and without them
    gets each its own answer."""
    df = _load(spark, jvm_store)
    everything = stored_rows(jvm_store)
    only_b = df.where("topic = 'TopicB'")
    plan = _plan(only_b)
    assert "PushedFilters: [EqualTo(topic,TopicB)]" in plan, plan
    assert spark_rows(only_b) == [r for r in everything if r[0] == "TopicB"]
    assert df.count() == 190  # the same DataFrame, no condition
    some = df.where("queue_id IN (0, 2) AND topic = 'TopicA' AND tags = 'TagA'")
    want = [r for r in everything if r[0] == "TopicA" and r[1] in (0, 2) and r[6] == "TagA"]
    assert spark_rows(some) == want
    assert len(want) > 0
    assert spark_rows(df.where("topic <=> 'Nope'")) == []
    assert spark_rows(df.where("queue_id = 1 OR topic = 'TopicB'")) == [
        r for r in everything if r[1] == 1 or r[0] == "TopicB"
    ]
    one_task_a_queue = _load(spark, jvm_store, rowsPerPartition="1")
    assert one_task_a_queue.where("topic = 'TopicA'").rdd.getNumPartitions() == 3
    assert df.count() == 190


def test_bad_options_fail_at_planning(spark: Any, native: Any, jvm_store: Path) -> None:
    with pytest.raises(Exception, match="rmqstore data source: topics names \\['Nope'\\]"):
        _load(spark, jvm_store, topics="Nope").collect()
    with pytest.raises(Exception, match="unknown option 'wat' for batch reads"):
        _load(spark, jvm_store, wat="1").collect()
    with pytest.raises(Exception, match="mapped_file_size_commit_lg: unknown setting; did you"):
        _load(spark, jvm_store, **{"store.mapped_file_size_commit_lg": "1"}).collect()
    with pytest.raises(Exception, match="is not an rmqstore store"):
        spark.read.format(JVM).load(str(jvm_store / "nowhere")).collect()


BODY = 1900


def _body(i: int) -> bytes:
    return bytes((i * 7 + j) % 251 for j in range(BODY))


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, Path]:
    """100 messages over four segments with one body byte flipped in the first segment;
    returns the path, the damaged record's commitlog offset and its segment."""
    path = tmp_path_factory.mktemp("jvm-damaged") / "store"
    with rmqstore.MessageStore(path, **SMALL_STORE) as store:
        results = [store.put_message(rmqstore.Message("Crc", _body(i))) for i in range(100)]
    target = results[3].wrote_offset
    segment = commitlog_dir(path) / segment_name(target - target % SEGMENT)
    data = bytearray(segment.read_bytes())
    data[target % SEGMENT + 88 + 10] ^= 0xFF
    segment.write_bytes(bytes(data))
    return path, target, segment


def test_a_damaged_record_fails_the_task_with_the_stores_message(
    spark: Any, native: Any, damaged: tuple[Path, int, Path]
) -> None:
    path, target, segment = damaged
    start = _allocations(native)
    with pytest.raises(Exception, match="StoreCorruptedException") as e:  # Spark wraps it
        _load(spark, path).select("queue_offset", "body").collect()
    text = str(e.value)
    assert f"{segment}: the record at commitlog offset {target} is damaged" in text
    # The JVM is fine, nothing is held, and the check can be turned off.
    assert _settled(native, start) == start
    rows = _load(spark, path, **{"store.check_crc_on_read": "false"}).collect()
    assert len(rows) == 100
    bodies = {r.queue_offset: bytes(r.body) for r in rows}
    assert bodies[3] != _body(3)
    assert all(bodies[i] == _body(i) for i in range(100) if i != 3)


def test_native_buffers_all_come_back(spark: Any, native: Any, jvm_store: Path) -> None:
    """After ``limit`` (tasks stopped early) and after full reads, the native allocation
    counter, the open stores and the handles are where they started."""
    start = _allocations(native)
    assert start[:2] == [0, 0], start
    df = _load(spark, jvm_store, includeProperties="true", rowsPerPartition="1")
    assert len(df.limit(3).collect()) == 3
    assert _settled(native, start) == start
    assert len(df.collect()) == 190
    assert _settled(native, start) == start
    assert df.select("body").rdd.map(lambda r: len(r.body)).sum() > 0
    assert _settled(native, start) == start


def test_exported_buffers_are_counted_until_released(
    spark: Any, native: Any, jvm_store: Path
) -> None:
    """The entry points straight from the JVM: a batch exported and not yet released is
    counted (so the checks above can fail), and goes back on release, imported or not."""
    jvm = spark._jvm
    gateway = spark.sparkContext._gateway
    start = _allocations(native)
    root_alloc = jvm.org.apache.arrow.memory.RootAllocator()
    names = gateway.new_array(jvm.String, 4)
    values = gateway.new_array(jvm.String, 4)
    for i, (k, v) in enumerate(SMALL_STORE.items()):
        names[i], values[i] = k, str(v)
    handle = native.open(str(jvm_store), names, values)
    out = gateway.new_array(jvm.long, 3)
    try:
        assert sorted(native.topics(handle)) == ["TopicA", "TopicB"]
        assert list(native.queueIds(handle, "TopicA")) == [0, 1, 2]
        assert list(native.queueOffsets(handle, "TopicA", 1))[:2] == [0, 50]
        for imported in (True, False):
            array = jvm.org.apache.arrow.c.ArrowArray.allocateNew(root_alloc)
            schema = jvm.org.apache.arrow.c.ArrowSchema.allocateNew(root_alloc)
            rows = native.readBatch(
                handle,
                "TopicA",
                1,
                5,
                1000,
                0xFF,
                True,
                array.memoryAddress(),
                schema.memoryAddress(),
                out,
            )
            assert (rows, list(out)) == (45, [50, 5, 49])
            held = _allocations(native)
            assert min(held[:2]) > 0, held
            if imported:
                root = jvm.org.apache.arrow.c.Data.importVectorSchemaRoot(
                    root_alloc, array, schema, None
                )
                assert root.getRowCount() == 45
                assert root.getVector("body").getClass().getSimpleName() == "ViewVarBinaryVector"
                assert _allocations(native) == held
                root.close()
            else:
                array.release()
                array.close()
                schema.release()
                schema.close()
            assert _allocations(native)[:2] == start[:2]
        # Errors arrive as Java exceptions with the store's message.
        with pytest.raises(Exception, match="queue id -1 is negative"):
            native.queueOffsets(handle, "TopicA", -1)
    finally:
        native.close(handle)
        root_alloc.close()
    assert _allocations(native) == start
    with pytest.raises(Exception, match=f"store handle {handle} is closed or unknown"):
        native.topics(handle)
