"""Bad options fail when Spark plans the query, with a message that says what to fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import rmqstore
from rmqspark import put, store_options
from rmqstore.errors import InvalidArgumentError, RmqStoreError

pytestmark = pytest.mark.spark

BAD_READS = [
    ({"topics": "TopicA,Nope"}, "topics names ['Nope'], which the store does not have"),
    ({"assign": '{"TopicA":[0,7]}'}, "assign names queues [7] of topic 'TopicA'"),
    ({"assign": '{"TopicA":"0"}'}, 'assign must be JSON like {"TopicA":[0,1]}'),
    ({"startingOffsets": '{"TopicA":{"0":'}, "startingOffsets is not valid JSON"),
    ({"startingOffsets": '{"TopicA":{"0":-3}}'}, "must be -2, -1 or an offset >= 0"),
    ({"endingOffsets": "earliest"}, "endingOffsets must be 'latest' or JSON like"),
    ({"startingOffsets": '{"TopicB":{"0":1}}'}, "names TopicB/0, which is not a selected queue"),
    ({"endingOffsets": '{"TopicA":{"0":99}}'}, "endingOffsets 99 of TopicA/0 is past its end 3"),
    ({"topics": "TopicA", "topicPattern": "T.*"}, "give at most one of topics, topicPattern"),
    ({"topicPattern": "(["}, "topicPattern '([' is not a valid regex"),
    ({"minPartitions": "-1"}, "minPartitions must be >= 1, got -1"),
    ({"minPartitions": "two"}, "minPartitions must be an integer, got 'two'"),
    ({"startingOffset": "earliest"}, "unknown option 'startingoffset' for batch reads"),
    ({"maxOffsetsPerTrigger": "5"}, "option 'maxOffsetsPerTrigger' does not apply to batch"),
    ({"failOnDataLoss": "maybe"}, "failOnDataLoss must be 'true' or 'false'"),
    ({"store.no_such_setting": "1"}, "'no_such_setting' is not a StoreConfig setting"),
]


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("options") / "store"
    put(path, [rmqstore.Message("TopicA", b"m", queue_id=0) for _ in range(3)])
    return path


def _read(spark: Any, options: dict[str, str]) -> Any:
    return spark.read.format("rmqstore").options(**options).load()


@pytest.mark.parametrize(("options", "message"), BAD_READS)
def test_bad_read_options_fail_at_planning(
    spark: Any, small_store: Path, options: dict[str, str], message: str
) -> None:
    from pyspark.errors import AnalysisException

    # AnalysisException: Spark failed while planning, before any task ran.
    with pytest.raises(AnalysisException, match=r"rmqstore\.errors\.InvalidArgumentError") as info:
        _read(spark, store_options(small_store, **options)).collect()
    assert message in str(info.value)


@pytest.mark.parametrize("make", [False, True])
def test_a_folder_without_a_store_is_refused_and_left_alone(
    spark: Any, tmp_path: Path, make: bool
) -> None:
    from pyspark.errors import AnalysisException

    path = tmp_path / "not-a-store"
    if make:
        path.mkdir()
    with pytest.raises(
        AnalysisException, match="is not an rmqstore store \\(no 'commitlog' folder"
    ):
        _read(spark, store_options(path)).collect()
    assert path.exists() == make
    if make:
        assert list(path.iterdir()) == []


def test_stream_only_and_batch_only_options(spark: Any, small_store: Path) -> None:
    stream = (
        spark.readStream.format("rmqstore")
        .options(**store_options(small_store, endingOffsets="latest"))
        .load()
    )
    with pytest.raises(Exception, match="'endingOffsets' does not apply to streaming reads"):
        stream.writeStream.format("noop").start().awaitTermination(60)


@pytest.mark.parametrize("fmt", ["rmqstore", "rmqstore-jvm"])
def test_overwrite_and_bad_columns_are_refused(spark: Any, small_store: Path, fmt: str) -> None:
    df = spark.createDataFrame([("TopicA", b"x")], "topic STRING, body BINARY")
    writer = df.write.format(fmt).options(**store_options(small_store))
    with pytest.raises(Exception, match="overwrite is not supported, use mode\\('append'\\)"):
        writer.mode("overwrite").save()
    for mode in ("ErrorIfExists", "Ignore"):  # refused by Spark itself
        with pytest.raises(Exception, match=f'cannot be written in the "{mode}" mode'):
            writer.mode(mode.lower()).save()
    extra = spark.createDataFrame([("TopicA", b"x", 1)], "topic STRING, body BINARY, n INT")
    with pytest.raises(Exception, match="column 'n' cannot be written"):
        extra.write.format(fmt).mode("append").options(**store_options(small_store)).save()
    with pytest.raises(Exception, match="writes need a 'body' column"):
        df.select("topic").write.format(fmt).mode("append").options(
            **store_options(small_store)
        ).save()
    with pytest.raises(Exception, match="keys' has type array<int>; expected array or string"):
        spark.createDataFrame(
            [("T", b"x", [1])], "topic STRING, body BINARY, keys ARRAY<INT>"
        ).write.format(fmt).mode("append").options(**store_options(small_store)).save()
    with pytest.raises(Exception, match="option 'startingOffsets' does not apply to writes"):
        writer.mode("append").option("startingOffsets", "earliest").save()


def test_option_errors_are_value_errors_of_the_rmqstore_tree() -> None:
    from rmqstore.spark.options import _parse_read_options

    with pytest.raises(InvalidArgumentError) as info:
        _parse_read_options({"path": "/x", "minPartitions": "0"}, streaming=False)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, RmqStoreError)
