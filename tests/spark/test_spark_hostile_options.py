"""Hostile option values get a typed error naming the option, never a hang (issue 15, item 11).

Every option the source parses is tried with huge and negative numbers, non-numbers, wrong JSON
types, JSON nested 100,000 deep, keys given twice, regexes that do not compile or backtrack
catastrophically, and empty strings: the parser raises an ``RmqStoreError`` subclass that is
also the standard exception that fits, and a Spark job shows its message.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import rmqstore
from rmqspark import put, store_options, stored_rows
from rmqstore.errors import (
    ArgumentOverflowError,
    InvalidArgumentError,
    RmqStoreError,
    StoreConfigError,
)

pytestmark = pytest.mark.spark

HUGE = "9" * 5000
I64_MAX = 2**63 - 1
DEEP = 100_000

# (options, streaming, error class, message fragment). Every class is an RmqStoreError and a
# ValueError; ArgumentOverflowError is an OverflowError too.
CASES: list[tuple[dict[str, str], bool, type[RmqStoreError], str]] = [
    # -- numbers ----------------------------------------------------------------------------
    (
        {"startingTimestamp": HUGE},
        False,
        ArgumentOverflowError,
        f"startingTimestamp must be between 0 and {I64_MAX}, got a number of 5000 digits",
    ),
    (
        {"endingTimestamp": str(I64_MAX + 1)},
        False,
        ArgumentOverflowError,
        f"endingTimestamp must be between 0 and {I64_MAX}, got {I64_MAX + 1}",
    ),
    ({"startingTimestamp": "-1"}, False, InvalidArgumentError, "startingTimestamp must be >= 0"),
    (
        {"startingTimestamp": "-" + HUGE},
        False,
        ArgumentOverflowError,
        "startingTimestamp must be between 0 and",
    ),
    (
        {"startingTimestamp": "1_000"},
        False,
        InvalidArgumentError,
        "must be an integer, got '1_000'",
    ),
    (
        {"endingTimestamp": "\u0661\u0662"},
        False,
        InvalidArgumentError,
        "endingTimestamp must be an integer",
    ),
    ({"startingTimestamp": ""}, False, InvalidArgumentError, "must be an integer, got ''"),
    ({"startingTimestamp": "1e3"}, False, InvalidArgumentError, "must be an integer, got '1e3'"),
    ({"minPartitions": "0x10"}, False, InvalidArgumentError, "minPartitions must be an integer"),
    (
        {"minPartitions": str(2**31)},
        False,
        ArgumentOverflowError,
        f"minPartitions must be between 1 and {2**31 - 1}, got {2**31}",
    ),
    ({"minPartitions": HUGE}, False, ArgumentOverflowError, "minPartitions must be between 1"),
    ({"rowsPerPartition": "0"}, False, InvalidArgumentError, "rowsPerPartition must be >= 1"),
    ({"rowsPerPartition": HUGE}, False, ArgumentOverflowError, "rowsPerPartition must be between"),
    (
        {"maxOffsetsPerTrigger": HUGE},
        True,
        ArgumentOverflowError,
        "maxOffsetsPerTrigger must be between 1 and",
    ),
    ({"maxOffsetsPerTrigger": "NaN"}, True, InvalidArgumentError, "maxOffsetsPerTrigger must be"),
    # -- booleans and strings ---------------------------------------------------------------
    ({"failOnDataLoss": ""}, False, InvalidArgumentError, "failOnDataLoss must be 'true' or"),
    ({"includeProperties": "1"}, False, InvalidArgumentError, "includeProperties must be 'true'"),
    ({"topics": " , ,"}, False, InvalidArgumentError, "topics is empty"),
    ({"consumerGroup": " "}, True, InvalidArgumentError, "consumerGroup is empty"),
    ({"consumerGroup": "g@t"}, True, InvalidArgumentError, "consumerGroup 'g@t' contains '@'"),
    ({"path": ""}, False, InvalidArgumentError, "no store path"),
    ({"x" * 100_000: "1"}, False, InvalidArgumentError, "(100000 characters) for batch reads"),
    # -- assign -----------------------------------------------------------------------------
    ({"assign": "[" * DEEP}, False, InvalidArgumentError, "assign is nested too deeply"),
    (
        {"assign": '{"TopicA":' + "[" * DEEP},
        False,
        InvalidArgumentError,
        "assign is nested too deeply",
    ),
    (
        {"assign": '{"TopicA":[' + HUGE + "]}"},
        False,
        ArgumentOverflowError,
        "assign: the number '999",
    ),
    (
        {"assign": '{"TopicA":[2147483648]}'},
        False,
        InvalidArgumentError,
        "queue id 2147483648 of topic 'TopicA' is not an integer from 0 to 2147483647",
    ),
    ({"assign": '{"TopicA":[-1]}'}, False, InvalidArgumentError, "queue id -1 of topic"),
    ({"assign": '{"TopicA":[1.5]}'}, False, InvalidArgumentError, "queue id 1.5 of topic"),
    ({"assign": '{"TopicA":[true]}'}, False, InvalidArgumentError, "queue id true of topic"),
    ({"assign": '{"TopicA":[[0]]}'}, False, InvalidArgumentError, "queue id an array of topic"),
    ({"assign": '{"TopicA":{"0":1}}'}, False, InvalidArgumentError, "maps to an object, not"),
    ({"assign": '{"A":[0],"A":[1]}'}, False, InvalidArgumentError, "assign names 'A' twice"),
    ({"assign": "{}"}, False, InvalidArgumentError, 'assign must be JSON like {"TopicA":[0,1]}'),
    ({"assign": "null"}, False, InvalidArgumentError, 'assign must be JSON like {"TopicA":[0,1]}'),
    ({"assign": ""}, False, InvalidArgumentError, "assign is not valid JSON"),
    # -- starting / ending offsets ----------------------------------------------------------
    (
        {"startingOffsets": '{"TopicA":{"0":' + "[" * DEEP},
        False,
        InvalidArgumentError,
        "startingOffsets is nested too deeply",
    ),
    (
        {"startingOffsets": '{"TopicA":{"0":' + HUGE + "}}"},
        False,
        ArgumentOverflowError,
        "startingOffsets: the number '999",
    ),
    (
        {"endingOffsets": '{"TopicA":{"0":' + str(I64_MAX + 1) + "}}"},
        False,
        ArgumentOverflowError,
        "endingOffsets: the number",
    ),
    (
        {"startingOffsets": '{"TopicA":{"0":-' + HUGE + "}}"},
        False,
        ArgumentOverflowError,
        "startingOffsets: the number '-999",
    ),
    (
        {"startingOffsets": '{"TopicA":{"0_0":1}}'},
        False,
        InvalidArgumentError,
        "startingOffsets: queue id '0_0' of topic 'TopicA' is not an integer",
    ),
    ({"startingOffsets": '{"TopicA":{" 1":1}}'}, False, InvalidArgumentError, "queue id ' 1'"),
    (
        {"startingOffsets": '{"TopicA":{"\u0661":1}}'},
        False,
        InvalidArgumentError,
        "queue id '\u0661'",
    ),
    ({"startingOffsets": '{"TopicA":{"-1":1}}'}, False, InvalidArgumentError, "queue id '-1'"),
    (
        {"endingOffsets": '{"TopicA":{"99999999999":1}}'},
        False,
        InvalidArgumentError,
        "endingOffsets: queue id '99999999999'",
    ),
    (
        {"startingOffsets": '{"TopicA":{"0":1,"00":2}}'},
        False,
        InvalidArgumentError,
        "startingOffsets names queue 0 of topic 'TopicA' twice",
    ),
    (
        {"startingOffsets": '{"TopicA":{"0":1},"TopicA":{"1":2}}'},
        False,
        InvalidArgumentError,
        "startingOffsets names 'TopicA' twice",
    ),
    (
        {"startingOffsets": '{"TopicA":{"0":NaN}}'},
        False,
        InvalidArgumentError,
        "startingOffsets: non-JSON constant NaN",
    ),
    ({"startingOffsets": '{"TopicA":{"0":"5"}}'}, False, InvalidArgumentError, "offset '5' of"),
    ({"endingOffsets": '{"TopicA":{"0":-2}}'}, False, InvalidArgumentError, "must be -1 (latest)"),
    ({"startingOffsets": '{"TopicA":[0]}'}, False, InvalidArgumentError, "got an array"),
    ({"startingOffsets": ""}, False, InvalidArgumentError, "must be 'earliest' or 'latest' or"),
    ({"startingOffsets": "[1]"}, False, InvalidArgumentError, "must be 'earliest' or 'latest' or"),
    # -- topicPattern -----------------------------------------------------------------------
    (
        {"topicPattern": "(" * 10_000},
        False,
        InvalidArgumentError,
        "(10000 characters) is not a valid regex: it nests too deeply",
    ),
    (
        {"topicPattern": "a{99999999999}"},
        False,
        ArgumentOverflowError,
        "the repetition number is too large",
    ),
    ({"topicPattern": ""}, False, InvalidArgumentError, "topicPattern is empty"),
    (
        {"topicPattern": "a" * 70_000},
        False,
        InvalidArgumentError,
        "topicPattern is 70000 characters long; at most 65536",
    ),
    ({"topicPattern": "(?P<1>a)"}, False, InvalidArgumentError, "is not a valid regex"),
    # -- store settings ---------------------------------------------------------------------
    (
        {"store.max_hash_slot_num": HUGE},
        False,
        ArgumentOverflowError,
        "option 'store.max_hash_slot_num' must be between",
    ),
    (
        {"store.max_hash_slot_num": "1_0"},
        False,
        InvalidArgumentError,
        "option 'store.max_hash_slot_num' must be an integer, got '1_0'",
    ),
    (
        {"store.max_hash_slot_num": "99999999999"},
        False,
        StoreConfigError,
        "option 'store.max_hash_slot_num': max_hash_slot_num: must be between 1 and",
    ),
    (
        {"store.check_crc_on_recover": "yes"},
        False,
        InvalidArgumentError,
        "option 'store.check_crc_on_recover' must be 'true' or 'false'",
    ),
    (
        {"store.store_path_commit_log": ""},
        False,
        InvalidArgumentError,
        "option 'store.store_path_commit_log' is empty",
    ),
]


def _id(case: tuple[dict[str, str], bool, type[RmqStoreError], str]) -> str:
    options, streaming, _, _ = case
    (name, value), *_ = options.items()
    shown = value if len(value) <= 20 else f"{value[:12]}...({len(value)})"
    return f"{'stream' if streaming else 'batch'}-{name[:20]}={shown}"


@pytest.mark.parametrize(("options", "streaming", "error", "message"), CASES, ids=map(_id, CASES))
def test_the_parser_raises_a_typed_error_naming_the_option(
    options: dict[str, str], streaming: bool, error: type[RmqStoreError], message: str
) -> None:
    from rmqstore.spark.options import _parse_read_options

    given = {"path": "/no/store", **options}
    started = time.monotonic()
    with pytest.raises(RmqStoreError) as info:
        _parse_read_options(given, streaming=streaming)
    assert time.monotonic() - started < 5
    assert type(info.value) is error
    assert isinstance(info.value, ValueError)
    if error is ArgumentOverflowError:
        assert isinstance(info.value, OverflowError)
    assert message in str(info.value)
    assert len(str(info.value)) < 2000  # hostile values are cut in messages


def test_blanks_around_numbers_and_words_are_fine() -> None:
    from rmqstore.spark.options import _parse_read_options

    opts = _parse_read_options(
        {
            "path": "/x",
            "startingTimestamp": " 12 ",
            "endingTimestamp": f"+{I64_MAX}",
            "minPartitions": "0002",
            "startingOffsets": " EARLIEST ",
            "failOnDataLoss": " False",
            "assign": '{"TopicA":[2147483647, 0, 0]}',
        },
        streaming=False,
    )
    assert (opts.starting_timestamp, opts.ending_timestamp) == (12, I64_MAX)
    assert opts.min_partitions == 2
    assert opts.starting == "earliest"
    assert opts.fail_on_data_loss is False
    assert opts.assign == {"TopicA": (0, 2**31 - 1)}


def test_the_schema_must_be_one_the_source_fills() -> None:
    from pyspark.sql.types import (
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
    )
    from rmqstore.spark import RmqStoreReader, RmqStoreStreamReader
    from rmqstore.spark.options import _parse_read_options

    def schema(*fields: tuple[str, Any]) -> StructType:
        return StructType([StructField(n, t) for n, t in fields])

    batch = _parse_read_options({"path": "/x"}, streaming=False)
    stream = _parse_read_options({"path": "/x"}, streaming=True)
    bad = [
        (schema(("topic", StringType()), ("nope", StringType())), "columns ['nope'] are not"),
        (schema(("topic", StringType()), ("topic", StringType())), "['topic'] more than once"),
        (
            schema(("queue_id", LongType())),
            "column 'queue_id' the type bigint; the source reads it as int",
        ),
        (schema(("topic", IntegerType())), "column 'topic' the type int"),
        (
            schema(("properties", MapType(StringType(), StringType()))),
            "set includeProperties=true",
        ),
    ]
    for wrong, message in bad:
        for make, opts in ((RmqStoreReader, batch), (RmqStoreStreamReader, stream)):
            with pytest.raises(InvalidArgumentError, match=re.escape(message)):
                make(opts, wrong)
    # Fewer columns, in any order, is fine.
    RmqStoreReader(batch, schema(("body", _binary()), ("topic", StringType())))


def _binary() -> Any:
    from pyspark.sql.types import BinaryType

    return BinaryType()


# -- topicPattern matching --------------------------------------------------------------------

SLOW_TOPIC = "a" * 40 + "-"  # '(a+)+' backtracks through 2^40 ways to split the a's


@pytest.fixture(scope="module")
def pattern_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "store"
    put(
        path,
        [rmqstore.Message(t, b"m", queue_id=0) for t in ("TopicA", "TopicB", SLOW_TOPIC)],
    )
    return path


def test_a_catastrophic_pattern_fails_in_bounded_time(
    pattern_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rmqstore.spark import options, planning

    monkeypatch.setattr(planning, "PATTERN_TIMEOUT", 1.0)
    monkeypatch.setattr(planning, "_PATTERN_MATCHES", {})
    opts = options._parse_read_options(
        store_options(pattern_store, topicPattern="(a+)+"), streaming=False
    )
    store = planning._open_for_read(opts.path, opts.settings)
    started = time.monotonic()
    with pytest.raises(InvalidArgumentError, match="backtracks catastrophically"):
        planning._selected_queues(store, opts)
    assert time.monotonic() - started < 10
    # A sane pattern matches as re.fullmatch does, and the answers are kept for the next call.
    opts = options._parse_read_options(
        store_options(pattern_store, topicPattern="Topic[AB]|a+-"), streaming=True
    )
    assert planning._selected_queues(store, opts) == [
        ("TopicA", 0),
        ("TopicB", 0),
        (SLOW_TOPIC, 0),
    ]
    assert planning._PATTERN_MATCHES[("Topic[AB]|a+-", "TopicA")] is True
    opts = options._parse_read_options(
        store_options(pattern_store, topicPattern="B"), streaming=True
    )
    assert planning._selected_queues(store, opts) == []


# -- through Spark ----------------------------------------------------------------------------

SPARK_CASES = [
    ({"assign": "[" * DEEP}, "InvalidArgumentError", "assign is nested too deeply"),
    ({"topicPattern": "(" * 10_000}, "InvalidArgumentError", "it nests too deeply"),
    (
        {"startingOffsets": '{"TopicA":{"0":' + HUGE + "}}"},
        "ArgumentOverflowError",
        "startingOffsets: the number '999",
    ),
    ({"endingTimestamp": HUGE}, "ArgumentOverflowError", "endingTimestamp must be between 0"),
    ({"topicPattern": "(a+)+"}, "InvalidArgumentError", "backtracks catastrophically"),
    (
        {"startingOffsets": '{"TopicA":{"0":1}}', "endingOffsets": '{"TopicA":{"0":0}}'},
        "InvalidArgumentError",
        "TopicA/0: the starting offset 1 is after the ending offset 0",
    ),
]


@pytest.mark.parametrize(
    ("options", "error", "message"), SPARK_CASES, ids=[str(i) for i in range(len(SPARK_CASES))]
)
def test_a_batch_job_shows_the_error_and_the_option(
    spark: Any, pattern_store: Path, options: dict[str, str], error: str, message: str
) -> None:
    from pyspark.errors import AnalysisException

    started = time.monotonic()
    df = spark.read.format("rmqstore").options(**store_options(pattern_store, **options)).load()
    with pytest.raises(AnalysisException) as info:
        df.collect()
    assert time.monotonic() - started < 60
    assert f"rmqstore.errors.{error}" in str(info.value)
    assert message in str(info.value)


def test_a_user_schema_is_checked_when_the_job_is_planned(spark: Any, pattern_store: Path) -> None:
    from pyspark.errors import AnalysisException

    reader = spark.read.format("rmqstore").options(**store_options(pattern_store))
    with pytest.raises(AnalysisException, match="set includeProperties=true to read it"):
        reader.schema("topic STRING, properties MAP<STRING,STRING>").load().collect()
    with pytest.raises(AnalysisException, match="the source reads it as int"):
        reader.schema("topic STRING, queue_id BIGINT").load().collect()
    rows = reader.schema("body BINARY, topic STRING").load().collect()
    assert sorted((r["topic"], bytes(r["body"])) for r in rows) == sorted(
        (r[0], r[-1]) for r in stored_rows(pattern_store)
    )


def test_a_stream_shows_the_error_and_the_option(spark: Any, pattern_store: Path) -> None:
    stream = (
        spark.readStream.format("rmqstore")
        .options(**store_options(pattern_store, maxOffsetsPerTrigger=HUGE))
        .load()
    )
    with pytest.raises(Exception, match="maxOffsetsPerTrigger must be between 1 and") as info:
        stream.writeStream.format("noop").start().awaitTermination(60)
    assert "rmqstore.errors.ArgumentOverflowError" in str(info.value)
