"""The PySpark Python Data Source ``rmqstore``: batch and streaming reads of a store, and appends.

Register it once per session, then use the format name::

    from rmqstore.spark import RmqStoreDataSource

    spark.dataSource.register(RmqStoreDataSource)
    df = spark.read.format("rmqstore").option("topics", "TopicA").load("/data/store")
    df.write.format("rmqstore").mode("append").save("/data/store")

Reads open the store read-only (one :class:`MessageStore` per worker process, shared by its
tasks), so they see every dispatched message and run beside a process writing the store; a
folder without a store is an error, never created. Rows have the columns topic, queue_id,
queue_offset, commit_log_offset, store_timestamp, born_timestamp, tags, keys, properties (only
with ``includeProperties=true``) and body; a schema given with ``.schema(...)`` may leave
columns out, and gives each column it has the type of :func:`source_schema`.

Read options (names as Spark's Kafka source where they mean the same; case does not matter):

``topics`` (comma list) | ``topicPattern`` (regex, full match) | ``assign`` (``{"TopicA":[0,1]}``)
    At most one; none selects every topic. A named topic or queue the store does not have is an
    error.
``startingOffsets`` / ``endingOffsets``
    ``"earliest"``, ``"latest"`` or JSON ``{"TopicA":{"0":23,"1":-2}}`` (-2 = earliest,
    -1 = latest); queues the JSON leaves out use the default. Offsets are consume queue offsets,
    an ending offset is exclusive (the next offset to read). Defaults: earliest / latest for
    batch reads, latest for streams; ``endingOffsets`` is for batch reads only.
``startingTimestamp`` / ``endingTimestamp``
    Milliseconds since the epoch: the first offset stored at or after it (so the end excludes
    messages stored at the ending timestamp). They win over the offsets options, as in Kafka.
``failOnDataLoss`` (default true)
    Fail when an offset to read is below a queue's first readable offset (its segments were
    removed); ``false`` logs a warning and reads from the first readable offset.
``minPartitions``
    Split queues into offset ranges so that a batch read has at least about this many tasks.
``rowsPerPartition`` (default 250000)
    Queues (and offset ranges) with fewer messages share a read task, up to about this many
    messages per task, so a store of many small queues is not read by as many tiny tasks
    (each costs a Python worker round trip); 1 gives every queue its own task.
``includeProperties`` (default false)
    Add the ``properties`` column.
``maxOffsetsPerTrigger`` (streams)
    Messages per micro-batch, split over the queues in proportion to their backlog as Kafka
    does; ``Trigger.AvailableNow`` honours it too.
``consumerGroup`` (streams)
    Record the end offsets of each micro-batch Spark commits to the source as this consumer
    group's offsets in the store (``commit_offsets``). Spark commits a batch when it plans the
    next one, so the last batch of a run is recorded when the query runs again. That needs the
    store's write lock: while a writer holds it the commit is skipped with a warning (a later
    commit records later offsets) and the query goes on.
``store.<setting>``
    A :class:`rmqstore.StoreConfig` setting the store was written with, e.g.
    ``store.mapped_file_size_commit_log``; segment sizes must be the writer's.

Bad options fail when Spark plans the query, with an :class:`rmqstore.errors.InvalidArgumentError`
(a ``ValueError``; :class:`~rmqstore.errors.ArgumentOverflowError`, also an ``OverflowError``,
for a number out of range; :class:`~rmqstore.errors.StoreConfigError` for a bad ``store.``
value) whose message names the option; Spark reports it inside its own exception (an
``AnalysisException`` for batch reads). Numbers are ASCII digits and fit a signed 64-bit
integer (``minPartitions`` and queue ids a 32-bit one); JSON options take each key once. A
``topicPattern`` has at most :data:`MAX_PATTERN_LENGTH` characters, and a child process matches
it against the topic names, so a regex that backtracks catastrophically fails after
:data:`PATTERN_TIMEOUT` seconds instead of hanging the query.

The source takes no filter: ``where`` conditions select rows after the read, with or without
``spark.sql.python.filterPushdown.enabled``. Spark 4.1 to 4.3 keep the read that a Python source
plans for pushed filters on the DataFrame's data source, and reuse it for the DataFrame's later
queries that push no filter and for its other scans in the same query, so a source that used
them would answer ``df.count()`` after ``df.where(...)`` with the filtered rows. To read less,
select with the options: ``topics`` / ``topicPattern`` / ``assign`` pick queues, and
``startingOffsets`` / ``endingOffsets`` / ``startingTimestamp`` / ``endingTimestamp`` bound
the offsets. Spark plans a DataFrame's read once and reuses the plan, so its later queries
read the store as it was then; a query with a condition Spark offers the source (pushdown on)
plans it again, and the queries after it reuse that plan. Load the store again for newer
messages.

Writes (:class:`RmqStoreWriter`) take the columns topic, body and optionally queue_id, tags,
keys and properties; only the ``append`` mode is accepted. A row with a null topic or body, or
a queue_id outside 0 to 2^31 - 1, fails its write task, so the job appends nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ._configfile import UndecodableError, strict_loads
from .config import StoreConfig
from .errors import (
    ArgumentOverflowError,
    InvalidArgumentError,
    RmqStoreError,
    StoreConfigError,
    StoreLockedError,
)
from .store import MessageStore

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "QueueRange",
    "RangeGroup",
    "RmqStoreDataSource",
    "RmqStoreReader",
    "RmqStoreStreamReader",
    "RmqStoreWriter",
    "StagedFile",
    "local_session",
]

log = logging.getLogger("rmqstore.spark")

#: Default ``rowsPerPartition``: about how many messages a read task reads at most when it
#: packs several small queues.
ROWS_PER_PARTITION = 250_000
#: Rows per Arrow batch a read task yields.
BATCH_ROWS = 64 * 1024
#: Queues a written row without ``queue_id`` is spread over.
DEFAULT_QUEUES = 8
#: How long an aborted write job keeps removing files its last running tasks stage.
ABORT_GRACE_SECONDS = 3.0
#: Folder, inside the store folder, where write tasks stage their rows.
STAGING_DIR = "spark-staging"
#: Longest ``topicPattern``, in characters.
MAX_PATTERN_LENGTH = 64 * 1024
#: Seconds a ``topicPattern`` may take to match the topic names of a store (a child process
#: matches them, and is killed after this long).
PATTERN_TIMEOUT = 10.0

_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1

_OFFSETS_EXAMPLE = '{"TopicA":{"0":23,"1":-1},"TopicB":{"0":-2}}'
_EARLIEST = -2
_LATEST = -1

_SELECTION_OPTIONS = ("topics", "topicpattern", "assign")
_BATCH_OPTIONS = {"endingoffsets", "endingtimestamp", "minpartitions"}
_STREAM_OPTIONS = {"maxoffsetspertrigger", "consumergroup"}
_COMMON_READ_OPTIONS = {
    "path",
    "rowsperpartition",
    *_SELECTION_OPTIONS,
    "startingoffsets",
    "startingtimestamp",
    "failondataloss",
    "includeproperties",
}
_STORE_PREFIX = "store."

# Spellings as documented, for messages (options arrive lower-cased).
_SPELLING = {
    "topicpattern": "topicPattern",
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp",
    "endingtimestamp": "endingTimestamp",
    "failondataloss": "failOnDataLoss",
    "minpartitions": "minPartitions",
    "rowsperpartition": "rowsPerPartition",
    "includeproperties": "includeProperties",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "consumergroup": "consumerGroup",
}

QueueOffsets = dict[str, dict[str, int]]


def _spell(name: str) -> str:
    return _SPELLING.get(name, name)


def _bad_option(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"rmqstore data source: {message}")


# -- schema ----------------------------------------------------------------------------------


def source_schema(include_properties: bool = False) -> StructType:
    """The rows' Spark schema (``properties`` only with ``includeProperties``)."""
    fields = [
        StructField("topic", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("commit_log_offset", LongType(), False),
        StructField("store_timestamp", TimestampType(), False),
        StructField("born_timestamp", TimestampType(), False),
        StructField("tags", StringType(), True),
        StructField("keys", ArrayType(StringType(), False), False),
    ]
    if include_properties:
        fields.append(StructField("properties", MapType(StringType(), StringType()), False))
    fields.append(StructField("body", BinaryType(), False))
    return StructType(fields)


def _check_read_schema(schema: StructType, opts: _ReadOptions) -> StructType:
    """``schema`` if a read can fill it: a user's ``.schema(...)`` may leave columns out, but
    each column it has is a source column, once, of the source's type."""
    source = {f.name: f.dataType for f in source_schema(True).fields}
    names = schema.fieldNames()
    unknown = [n for n in names if n not in source]
    if unknown:
        raise _bad_option(f"columns {sorted(unknown)} are not columns of the source")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise _bad_option(f"the schema has the columns {twice} more than once")
    for field in schema.fields:
        have, want = field.dataType.simpleString(), source[field.name].simpleString()
        if have != want:
            raise _bad_option(
                f"the schema gives column {field.name!r} the type {have}; the source reads it "
                f"as {want} (declare it so, and cast it after loading)"
            )
    if "properties" in names and not opts.include_properties:
        raise _bad_option(
            "the schema has a 'properties' column: set includeProperties=true to read it"
        )
    return schema


# -- options ---------------------------------------------------------------------------------


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _show(text: str, limit: int = 60) -> str:
    """``text`` quoted for a message, cut after ``limit`` characters."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def _describe(value: object) -> str:
    """A JSON value for a message (a type name for containers, which may be huge)."""
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, str):
        return _show(value, 30)
    return "an array" if isinstance(value, list) else "an object"


def _parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name)
    if text is None:
        return default
    value = text.strip().lower()
    if value not in {"true", "false"}:
        raise _bad_option(f"{_spell(name)} must be 'true' or 'false', got {_show(text)}")
    return value == "true"


# ASCII digits only: int() also takes '1_000' and other scripts' digits.
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _to_int(what: str, text: str, minimum: int, maximum: int) -> int:
    """``text`` (an integer, blanks around it allowed) in [minimum, maximum]:
    :class:`ArgumentOverflowError` past a signed 64-bit integer or ``maximum``,
    :class:`InvalidArgumentError` for anything else, each naming ``what``."""
    s = text.strip()
    if not _INTEGER.fullmatch(s):
        raise _bad_option(f"{what} must be an integer, got {_show(text)}")
    digits = s.lstrip("+-").lstrip("0")
    # More than 19 digits is past 64 bits (and int() of a long string is slow, or refused).
    value = int(s) if len(digits) <= 19 else None
    if value is not None and minimum <= value <= maximum:
        return value
    if value is not None and -_I64_MAX - 1 <= value < minimum:
        raise _bad_option(f"{what} must be >= {minimum}, got {value}")
    if value is None:
        sign = "negative " if s.startswith("-") else ""
        shown = f"a {sign}number of {len(digits)} digits"
    else:
        shown = str(value)
    raise ArgumentOverflowError(
        f"rmqstore data source: {what} must be between {minimum} and {maximum}, got {shown}"
    )


def _parse_int(
    options: Mapping[str, str], name: str, minimum: int, maximum: int = _I64_MAX
) -> int | None:
    text = options.get(name)
    if text is None:
        return None
    return _to_int(_spell(name), text, minimum, maximum)


def _store_settings(options: Mapping[str, str]) -> dict[str, Any]:
    """``store.<setting>`` options as typed :class:`StoreConfig` overrides."""
    defaults = StoreConfig()
    fields = {f.name for f in dataclasses.fields(StoreConfig)}
    settings: dict[str, Any] = {}
    for key, text in options.items():
        if not key.startswith(_STORE_PREFIX):
            continue
        name = key[len(_STORE_PREFIX) :]
        if name not in fields:
            raise _bad_option(
                f"option {_show(key)}: {_show(name)} is not a StoreConfig setting "
                f"(known: {', '.join(sorted(fields))})"
            )
        default = getattr(defaults, name)
        value: Any
        if isinstance(default, bool):
            if text.strip().lower() not in {"true", "false"}:
                raise _bad_option(f"option {key!r} must be 'true' or 'false', got {_show(text)}")
            value = text.strip().lower() == "true"
        elif isinstance(default, int):
            # StoreConfig checks each setting's own range below.
            value = _to_int(f"option {key!r}", text, -_I64_MAX - 1, _I64_MAX)
        elif not text:
            raise _bad_option(f"option {key!r} is empty")
        else:
            value = text
        settings[name] = value
    try:
        defaults.replace(**settings)
    except StoreConfigError as exc:
        option = f"store.{exc.setting}" if exc.setting else "store.<setting>"
        raise type(exc)(f"rmqstore data source: option {option!r}: {exc}", exc.setting) from None
    return settings


def _load_json(name: str, text: str, example: str) -> Any:
    """The JSON option ``name``: a number past 64 bits raises :class:`ArgumentOverflowError`,
    a key given twice, deep nesting or bad JSON :class:`InvalidArgumentError`, each naming the
    option."""
    what = _spell(name)
    try:
        return strict_loads(
            text,
            int_error=lambda digits: ArgumentOverflowError(
                f"rmqstore data source: {what}: the number {_show(digits, 24)} is out of the "
                "range of a signed 64-bit integer"
            ),
            duplicate_error=lambda key: _bad_option(f"{what} names {_show(key)} twice"),
        )
    except UndecodableError as exc:
        raise _bad_option(f"{what}: {exc}; expected e.g. {example}") from None
    except RecursionError:
        raise _bad_option(
            f"{what} is nested too deeply (a JSON value like {example} is expected)"
        ) from None
    except json.JSONDecodeError as exc:
        raise _bad_option(f"{what} is not valid JSON ({exc}); expected e.g. {example}") from None


def _queue_id(what: str, text: str, topic: str) -> int:
    """A queue id written as a JSON key: ASCII digits, at most a 32-bit int."""
    if not re.fullmatch(r"[0-9]{1,10}", text) or int(text) > _I32_MAX:
        raise _bad_option(
            f"{what}: queue id {_show(text, 30)} of topic {_show(topic, 30)} is not an "
            f"integer from 0 to {_I32_MAX}"
        )
    return int(text)


OffsetSpec = str | dict[str, dict[int, int]]


def _parse_offsets(name: str, text: str | None, default: str, *, ending: bool) -> OffsetSpec:
    """``earliest`` / ``latest`` / ``{"T":{"0":23}}`` (-2 earliest, -1 latest)."""
    if text is None:
        return default
    what = _spell(name)
    word = text.strip().lower()
    allowed = ("latest",) if ending else ("earliest", "latest")
    if word in allowed:
        return word
    if not text.strip().startswith("{"):
        raise _bad_option(
            f"{what} must be {' or '.join(repr(a) for a in allowed)} or JSON like "
            f"{_OFFSETS_EXAMPLE}, got {_show(text)}"
        )
    raw = _load_json(name, text, _OFFSETS_EXAMPLE)
    result: dict[str, dict[int, int]] = {}
    if not isinstance(raw, dict):
        raise _bad_option(f"{what} must be a JSON object like {_OFFSETS_EXAMPLE}")
    lowest = _LATEST if ending else _EARLIEST
    hint = "-1 (latest) or an offset >= 0" if ending else "-2, -1 or an offset >= 0"
    for topic, queues in raw.items():
        if not isinstance(queues, dict):
            raise _bad_option(
                f"{what}: topic {_show(topic, 30)} must map queue ids to offsets, "
                f"e.g. {_OFFSETS_EXAMPLE}; got {_describe(queues)}"
            )
        per_queue: dict[int, int] = {}
        for qid, offset in queues.items():
            queue_id = _queue_id(what, qid, topic)
            if queue_id in per_queue:
                raise _bad_option(f"{what} names queue {queue_id} of topic {_show(topic)} twice")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < lowest:
                raise _bad_option(
                    f"{what}: offset {_describe(offset)} of {_show(topic, 30)}/{qid} must be "
                    + hint
                )
            per_queue[queue_id] = offset
        result[topic] = per_queue
    return result


_ASSIGN_EXAMPLE = '{"TopicA":[0,1]}'


def _parse_assign(text: str) -> dict[str, tuple[int, ...]]:
    """``{"TopicA":[0,1]}``: topics and the queue ids to read of each."""
    raw = _load_json("assign", text, _ASSIGN_EXAMPLE)
    if not isinstance(raw, dict) or not raw:
        raise _bad_option(f"assign must be JSON like {_ASSIGN_EXAMPLE}, got {_show(text)}")
    assign = {}
    for topic, qids in raw.items():
        if not isinstance(qids, list):
            raise _bad_option(
                f"assign must be JSON like {_ASSIGN_EXAMPLE}: topic {_show(topic, 30)} maps to "
                f"{_describe(qids)}, not a list of queue ids"
            )
        for q in qids:
            if isinstance(q, bool) or not isinstance(q, int) or not 0 <= q <= _I32_MAX:
                raise _bad_option(
                    f"assign must be JSON like {_ASSIGN_EXAMPLE}: queue id {_describe(q)} of "
                    f"topic {_show(topic, 30)} is not an integer from 0 to {_I32_MAX}"
                )
        assign[topic] = tuple(sorted(set(qids)))
    return assign


def _check_pattern(pattern: str) -> None:
    """A ``topicPattern`` that compiles, in bounded time (:func:`_matching_topics` bounds the
    time matching takes)."""
    if not pattern:
        raise _bad_option("topicPattern is empty: give a regex that topic names fully match")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise _bad_option(
            f"topicPattern is {len(pattern)} characters long; at most {MAX_PATTERN_LENGTH}"
        )
    try:
        re.compile(pattern)
    except re.error as exc:
        raise _bad_option(f"topicPattern {_show(pattern)} is not a valid regex: {exc}") from None
    except RecursionError:
        raise _bad_option(
            f"topicPattern {_show(pattern)} is not a valid regex: it nests too deeply"
        ) from None
    except OverflowError as exc:
        raise ArgumentOverflowError(
            f"rmqstore data source: topicPattern {_show(pattern)} is not a valid regex: {exc}"
        ) from None


@dataclasses.dataclass(frozen=True)
class _ReadOptions:
    """Parsed read options; plain data, so readers pickle."""

    path: str
    settings: dict[str, Any]
    topics: tuple[str, ...] | None
    topic_pattern: str | None
    assign: dict[str, tuple[int, ...]] | None
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: int | None
    ending_timestamp: int | None
    fail_on_data_loss: bool
    min_partitions: int | None
    rows_per_partition: int
    include_properties: bool
    max_offsets_per_trigger: int | None
    consumer_group: str | None


def _check_known(options: Mapping[str, str], known: set[str], what: str) -> None:
    for key in options:
        if key in known or key.startswith(_STORE_PREFIX):
            continue
        if key in _BATCH_OPTIONS | _STREAM_OPTIONS | _COMMON_READ_OPTIONS:
            raise _bad_option(f"option {_spell(key)!r} does not apply to {what}")
        raise _bad_option(
            f"unknown option {_show(key)} for {what}; known: "
            f"{', '.join(sorted(_spell(k) for k in known))} and store.<StoreConfig setting>"
        )


def _store_path(options: Mapping[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise _bad_option("no store path: pass it to load()/save() or as option 'path'")
    return path


def _check_is_store(path: str) -> None:
    """Reads never create a store: the folder must hold one (a ``commitlog`` folder)."""
    if not os.path.isdir(os.path.join(path, "commitlog")):
        raise _bad_option(
            f"{_show(path, 200)} is not an rmqstore store (no 'commitlog' folder in it); "
            "give the folder a MessageStore or RocketMQ broker wrote"
        )


def _parse_read_options(raw: Mapping[str, str], *, streaming: bool) -> _ReadOptions:
    options = _lower(raw)
    what = "streaming reads" if streaming else "batch reads"
    known = _COMMON_READ_OPTIONS | (_STREAM_OPTIONS if streaming else _BATCH_OPTIONS)
    _check_known(options, known, what)
    path = _store_path(options)
    given = [_spell(k) for k in _SELECTION_OPTIONS if k in options]
    if len(given) > 1:
        raise _bad_option(f"give at most one of topics, topicPattern, assign; got {given}")
    topics: tuple[str, ...] | None = None
    if "topics" in options:
        topics = tuple(t.strip() for t in options["topics"].split(",") if t.strip())
        if not topics:
            raise _bad_option("topics is empty: give a comma-separated list of topic names")
    pattern = options.get("topicpattern")
    if pattern is not None:
        _check_pattern(pattern)
    assign = _parse_assign(options["assign"]) if "assign" in options else None
    starting = _parse_offsets(
        "startingoffsets",
        options.get("startingoffsets"),
        "latest" if streaming else "earliest",
        ending=False,
    )
    ending = _parse_offsets("endingoffsets", options.get("endingoffsets"), "latest", ending=True)
    if not streaming and starting == "latest":
        # Kafka refuses it for batch reads too: it would always read nothing.
        raise _bad_option("startingOffsets='latest' reads nothing in a batch query")
    start_ts = _parse_int(options, "startingtimestamp", 0)
    end_ts = _parse_int(options, "endingtimestamp", 0)
    if start_ts is not None and end_ts is not None and start_ts > end_ts:
        raise _bad_option(f"startingTimestamp {start_ts} is after endingTimestamp {end_ts}")
    # Spark numbers a scan's partitions with 32-bit ints.
    min_partitions = _parse_int(options, "minpartitions", 1, _I32_MAX)
    rows_per_partition = _parse_int(options, "rowsperpartition", 1)
    max_per_trigger = _parse_int(options, "maxoffsetspertrigger", 1)
    group = options.get("consumergroup")
    if group is not None:
        if not group.strip():
            raise _bad_option("consumerGroup is empty")
        if "@" in group:
            raise _bad_option(
                f"consumerGroup {_show(group)} contains '@', which separates topic and group "
                "in config/consumerOffset.json"
            )
    return _ReadOptions(
        path=path,
        settings=_store_settings(options),
        topics=topics,
        topic_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_timestamp=start_ts,
        ending_timestamp=end_ts,
        fail_on_data_loss=_parse_bool(options, "failondataloss", True),
        min_partitions=min_partitions,
        rows_per_partition=(
            rows_per_partition if rows_per_partition is not None else ROWS_PER_PARTITION
        ),
        include_properties=_parse_bool(options, "includeproperties", False),
        max_offsets_per_trigger=max_per_trigger,
        consumer_group=group,
    )


# -- opening the store -----------------------------------------------------------------------

# Read-only stores opened in this process (a Python worker is reused across tasks), by path and
# settings.
_READ_STORES: dict[tuple[str, tuple[tuple[str, Any], ...]], MessageStore] = {}


def _open_for_read(path: str, settings: Mapping[str, Any]) -> MessageStore:
    """The store at ``path`` opened read-only (no lock, no file changed, only dispatched
    messages seen, a writer may be at work), shared by this process's tasks: do not close it."""
    _check_is_store(path)
    key = (os.path.abspath(path), tuple(sorted(settings.items())))
    store = _READ_STORES.get(key)
    if store is None or store.closed:
        store = MessageStore(path, read_only=True, **settings)
        _READ_STORES[key] = store
    return store


# -- planning --------------------------------------------------------------------------------


def _selected_queues(store: MessageStore, opts: _ReadOptions) -> list[tuple[str, int]]:
    """(topic, queue id) pairs the selection options name, sorted."""
    present = sorted(store.topics())
    if opts.assign is not None:
        pairs: list[tuple[str, int]] = []
        for topic, qids in sorted(opts.assign.items()):
            if topic not in present:
                raise _bad_option(f"assign names topic {topic!r}, which the store does not have")
            have = set(store.queue_ids(topic))
            missing = [q for q in qids if q not in have]
            if missing:
                raise _bad_option(
                    f"assign names queues {missing} of topic {topic!r}; it has {sorted(have)}"
                )
            pairs.extend((topic, q) for q in qids)
        return pairs
    if opts.topics is not None:
        unknown = [t for t in opts.topics if t not in present]
        if unknown:
            raise _bad_option(
                f"topics names {unknown}, which the store does not have (it has {present})"
            )
        topics = sorted(set(opts.topics))
    elif opts.topic_pattern is not None:
        topics = _matching_topics(opts.topic_pattern, present)
    else:
        topics = present
    return [(t, q) for t in topics for q in store.queue_ids(t)]


# A child process matches topic names against a topicPattern: the time a regex takes is
# unbounded (nested repetition backtracks exponentially) and Python cannot stop a match in a
# thread, but it can kill a process.
_MATCHER = """
import json, re, sys
request = json.loads(sys.stdin.read())
rx = re.compile(request["pattern"])
json.dump([t for t in request["topics"] if rx.fullmatch(t)], sys.stdout)
"""

# Topic names this process matched against a topicPattern: (pattern, topic) -> matched, so a
# stream matches only the topics that are new since its last batch.
_PATTERN_MATCHES: dict[tuple[str, str], bool] = {}
_PATTERN_MATCHES_MAX = 100_000


def _matching_topics(pattern: str, topics: Sequence[str]) -> list[str]:
    """The ``topics`` that ``pattern`` fully matches, in order, found within
    :data:`PATTERN_TIMEOUT` seconds (or :class:`InvalidArgumentError`)."""
    known = {t: _PATTERN_MATCHES[(pattern, t)] for t in topics if (pattern, t) in _PATTERN_MATCHES}
    new = [t for t in topics if t not in known]
    if new:
        matched = set(_match_in_child(pattern, new))
        if len(_PATTERN_MATCHES) + len(new) > _PATTERN_MATCHES_MAX:
            _PATTERN_MATCHES.clear()
        for t in new:
            known[t] = _PATTERN_MATCHES[(pattern, t)] = t in matched
    return [t for t in topics if known[t]]


def _match_in_child(pattern: str, topics: Sequence[str]) -> list[str]:
    if not sys.executable:
        raise RmqStoreError(
            "rmqstore data source: topicPattern needs a Python executable to match topic names "
            "in (sys.executable is empty); select topics with 'topics' or 'assign'"
        )
    request = json.dumps({"pattern": pattern, "topics": list(topics)}).encode("ascii")
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _MATCHER],
            input=request,
            capture_output=True,
            timeout=PATTERN_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise _bad_option(
            f"topicPattern {_show(pattern)} did not match the store's {len(topics)} topic "
            f"names within {PATTERN_TIMEOUT:g} s: it backtracks catastrophically (nested "
            "repetition such as '(a+)+' does); write it without nested repetition"
        ) from None
    if done.returncode != 0:
        error = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RmqStoreError(
            f"rmqstore data source: matching topicPattern {_show(pattern)} against the "
            f"store's topic names failed: {error[-1] if error else done.returncode}"
        )
    return cast(list[str], json.loads(done.stdout))


def _check_json_topics(name: str, spec: OffsetSpec, queues: Iterable[tuple[str, int]]) -> None:
    if isinstance(spec, str):
        return
    selected = set(queues)
    for topic, per_queue in spec.items():
        for qid in per_queue:
            if (topic, qid) not in selected:
                raise _bad_option(
                    f"{name} names {topic}/{qid}, which is not a selected queue of the store"
                )


def _resolve(spec: OffsetSpec, topic: str, qid: int, *, low: int, high: int, default: str) -> int:
    """The offset ``spec`` gives a queue whose readable offsets are [low, high)."""
    if isinstance(spec, str):
        word = spec
    else:
        given = spec.get(topic, {}).get(qid)
        if given is None:
            word = default
        elif given == _EARLIEST:
            word = "earliest"
        elif given == _LATEST:
            word = "latest"
        else:
            return given
    return low if word == "earliest" else high


def _starting_offset(
    store: MessageStore,
    opts: _ReadOptions,
    topic: str,
    qid: int,
    *,
    low: int,
    high: int,
    default: str,
) -> int:
    """Where a read of a queue starts: ``startingTimestamp`` if given, else ``startingOffsets``
    (``default`` for queues it does not name)."""
    if opts.starting_timestamp is not None:
        return store.get_offset_in_queue_by_time(topic, qid, opts.starting_timestamp)
    return _resolve(opts.starting, topic, qid, low=low, high=high, default=default)


def _data_loss(opts: _ReadOptions, topic: str, qid: int, offset: int, low: int) -> int:
    """``offset`` is below the queue's first readable ``low``: fail or skip to ``low``."""
    text = (
        f"{topic}/{qid}: offset {offset} is below the queue's first readable offset {low} "
        "(its segments were removed)"
    )
    if opts.fail_on_data_loss:
        raise RmqStoreError(
            f"rmqstore data source: data loss, {text}; "
            "set failOnDataLoss=false to read from the first readable offset"
        )
    log.warning("%s; reading from %d (failOnDataLoss=false)", text, low)
    return low


@dataclasses.dataclass(frozen=True)
class QueueRange(InputPartition):
    """One read task: offsets ``[start, end)`` of one queue."""

    topic: str
    queue_id: int
    start: int
    end: int


def _split(ranges: list[QueueRange], min_partitions: int | None) -> list[QueueRange]:
    """Splits ranges, each in proportion to its size, so that there are at least
    ``min_partitions`` of them (as far as there are offsets), as Kafka's
    ``KafkaOffsetRangeCalculator`` does (it rounds where this rounds up)."""
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    if total == 0:
        return ranges
    out = []
    for r in ranges:
        size = r.end - r.start
        parts = min(size, math.ceil(size * min_partitions / total))
        for i in range(parts):
            lo = r.start + size * i // parts
            hi = r.start + size * (i + 1) // parts
            if hi > lo:
                out.append(QueueRange(r.topic, r.queue_id, lo, hi))
    return out


@dataclasses.dataclass(frozen=True)
class RangeGroup(InputPartition):
    """One read task over several small offset ranges, read one after the other."""

    ranges: tuple[QueueRange, ...]


def _pack(ranges: list[QueueRange], rows: int) -> list[InputPartition]:
    """Packs consecutive ranges into tasks of at most about ``rows`` messages (a range larger
    than that keeps a task of its own; splitting is ``minPartitions``' job)."""
    out: list[InputPartition] = []
    group: list[QueueRange] = []
    held = 0

    def close() -> None:
        if group:
            out.append(group[0] if len(group) == 1 else RangeGroup(tuple(group)))

    for r in ranges:
        size = r.end - r.start
        if group and held + size > rows:
            close()
            group, held = [], 0
        group.append(r)
        held += size
    close()
    return out


def _plan(ranges: list[QueueRange], opts: _ReadOptions) -> list[InputPartition]:
    """The read tasks: ranges split for ``minPartitions``, then small ones packed together,
    never into fewer tasks than ``minPartitions`` asks for."""
    ranges = _split(ranges, opts.min_partitions)
    rows = opts.rows_per_partition
    if opts.min_partitions is not None:
        total = sum(r.end - r.start for r in ranges)
        rows = min(rows, max(1, total // opts.min_partitions))
    return _pack(ranges, rows)


def _task_ranges(partition: InputPartition) -> tuple[QueueRange, ...]:
    if isinstance(partition, QueueRange):
        return (partition,)
    if isinstance(partition, RangeGroup):
        return partition.ranges
    return ()  # Spark's placeholder when there is nothing to read


# -- reading ---------------------------------------------------------------------------------


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _read_range(
    opts: _ReadOptions, target: pa.Schema, part: QueueRange
) -> Iterator[pa.RecordBatch]:
    """Yields the rows of ``part`` as batches of the Spark schema ``target``."""
    store = _open_for_read(opts.path, opts.settings)
    offset = part.start
    while offset < part.end:
        low = store.get_min_offset_in_queue(part.topic, part.queue_id)
        if offset < low:
            offset = _data_loss(opts, part.topic, part.queue_id, offset, low)
            continue
        batch = store.read_batch(
            part.topic,
            part.queue_id,
            offset,
            min(BATCH_ROWS, part.end - offset),
            include_properties=opts.include_properties,
        )
        if batch.num_rows == 0:
            high = store.get_max_offset_in_queue(part.topic, part.queue_id)
            raise RmqStoreError(
                f"rmqstore data source: {part.topic}/{part.queue_id} has no message at offset "
                f"{offset} (readable offsets [{low}, {high})), planned up to {part.end}"
            )
        offset = batch.column("queue_offset")[-1].as_py() + 1
        yield batch.select(target.names).cast(target)


class RmqStoreReader(DataSourceReader):
    """Batch reader: one partition per queue offset range; see the module docstring.

    It takes no filter (Spark applies every ``where``): Spark 4.1 to 4.3 keep the read that a
    source plans after ``pushFilters`` on the DataFrame's data source and reuse it for the
    DataFrame's later scans that push no filter, and for its other scans in the same query,
    so any filter the reader used would change the rows of queries that do not have it.
    """

    def __init__(self, opts: _ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.target = _arrow_schema(_check_read_schema(schema, opts))

    def partitions(self) -> list[InputPartition]:
        opts = self.opts
        store = _open_for_read(opts.path, opts.settings)
        queues = _selected_queues(store, opts)
        _check_json_topics("startingOffsets", opts.starting, queues)
        _check_json_topics("endingOffsets", opts.ending, queues)
        ranges = []
        for topic, qid in queues:
            low = store.get_min_offset_in_queue(topic, qid)
            high = store.get_max_offset_in_queue(topic, qid)
            start = _starting_offset(
                store, opts, topic, qid, low=low, high=high, default="earliest"
            )
            if opts.ending_timestamp is not None:
                end = store.get_offset_in_queue_by_time(topic, qid, opts.ending_timestamp)
            else:
                end = _resolve(opts.ending, topic, qid, low=low, high=high, default="latest")
            if start > high:
                raise _bad_option(
                    f"startingOffsets {start} of {topic}/{qid} is past its end {high}"
                )
            if end > high:
                raise _bad_option(f"endingOffsets {end} of {topic}/{qid} is past its end {high}")
            if start > end:
                raise _bad_option(
                    f"{topic}/{qid}: the starting offset {start} is after the ending offset "
                    f"{end} (startingOffsets / startingTimestamp against endingOffsets / "
                    "endingTimestamp)"
                )
            if start < low:
                start = _data_loss(opts, topic, qid, start, low)
            if end > start:
                ranges.append(QueueRange(topic, qid, start, end))
        return _plan(ranges, opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for part in _task_ranges(partition):
            yield from _read_range(self.opts, self.target, part)


# -- streaming -------------------------------------------------------------------------------


def _rate_limit(
    start: Mapping[tuple[str, int], int], until: Mapping[tuple[str, int], int], limit: int
) -> dict[tuple[str, int], int]:
    """Kafka's ``rateLimit``: ``limit`` offsets split over the queues in proportion to their
    backlog (``until - start``), at least one per queue with a backlog, never past ``until``."""
    sizes = {q: end - start[q] for q, end in until.items() if end - start[q] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(until)
    out = {}
    for q, end in until.items():
        if q not in sizes:
            out[q] = max(end, start[q])
            continue
        prorate = limit * (sizes[q] / total)
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[q] = min(end, start[q] + step)
    return out


def _to_json(offsets: Mapping[tuple[str, int], int]) -> QueueOffsets:
    """Offsets as Spark stores them: sorted topics, sorted queue ids as strings."""
    out: QueueOffsets = {}
    for topic, qid in sorted(offsets):
        out.setdefault(topic, {})[str(qid)] = offsets[(topic, qid)]
    return out


def _from_json(offsets: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, int], int]:
    return {(t, int(q)): int(o) for t, per in offsets.items() for q, o in per.items()}


class RmqStoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Offsets are ``{"Topic": {"queueId": next offset}}``.

    ``commit(end)`` records ``end`` as the ``consumerGroup``'s offsets when that option is set;
    it opens the store for writing, so while another process holds the store's lock (a writer)
    the commit is skipped with a warning instead of failing the query.
    """

    def __init__(self, opts: _ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.target = _arrow_schema(_check_read_schema(schema, opts))
        self._frozen: dict[tuple[str, int], int] | None = None
        self._latest: dict[tuple[str, int], int] | None = None

    def _bounds(self) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        """(first readable, next to write) offsets of every selected queue."""
        store = _open_for_read(self.opts.path, self.opts.settings)
        queues = _selected_queues(store, self.opts)
        low = {q: store.get_min_offset_in_queue(*q) for q in queues}
        high = {q: store.get_max_offset_in_queue(*q) for q in queues}
        return low, high

    def initialOffset(self) -> QueueOffsets:  # noqa: N802 - Spark's name
        opts = self.opts
        store = _open_for_read(opts.path, opts.settings)
        queues = _selected_queues(store, opts)
        _check_json_topics("startingOffsets", opts.starting, queues)
        out = {}
        for topic, qid in queues:
            low = store.get_min_offset_in_queue(topic, qid)
            high = store.get_max_offset_in_queue(topic, qid)
            offset = _starting_offset(store, opts, topic, qid, low=low, high=high, default="latest")
            out[(topic, qid)] = min(offset, high)
        return _to_json(out)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        self._frozen = self._bounds()[1]

    def latestOffset(self, start: QueueOffsets, limit: ReadLimit) -> QueueOffsets:  # noqa: N802
        low, high = self._bounds()
        self._latest = dict(high)
        if self._frozen is not None:
            high = {q: min(h, self._frozen[q]) for q, h in high.items() if q in self._frozen}
        begin = _from_json(start)
        # Queues found since the last batch start at their first readable offset.
        from_ = {q: begin.get(q, low[q]) for q in high}
        until = {q: max(h, from_[q]) for q, h in high.items()}
        if isinstance(limit, ReadMaxRows):
            until = _rate_limit(from_, until, limit.max_rows)
        # Keep queues that vanished from the listing where they were.
        for q, off in begin.items():
            until.setdefault(q, off)
        return _to_json(until)

    def reportLatestOffset(self) -> QueueOffsets | None:  # noqa: N802 - Spark's name
        return _to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: QueueOffsets, end: QueueOffsets) -> list[InputPartition]:
        begin = _from_json(start)
        stop = _from_json(end)
        low = self._bounds()[0]
        ranges = []
        for q, until in sorted(stop.items()):
            first = low.get(q, 0)
            offset = begin.get(q, first)
            if offset < first:
                offset = _data_loss(self.opts, q[0], q[1], offset, first)
            if until > offset:
                ranges.append(QueueRange(q[0], q[1], offset, until))
        return _pack(ranges, self.opts.rows_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for part in _task_ranges(partition):
            yield from _read_range(self.opts, self.target, part)

    def commit(self, end: QueueOffsets) -> None:
        group = self.opts.consumer_group
        if group is None:
            return
        try:
            with MessageStore(self.opts.path, **self.opts.settings) as store:
                for topic, per_queue in end.items():
                    store.commit_offsets(group, topic, {int(q): o for q, o in per_queue.items()})
        except StoreLockedError as exc:
            log.warning(
                "consumer group %r: offsets not recorded, the store is locked by a writer (%s)",
                group,
                exc,
            )


# -- writing ---------------------------------------------------------------------------------

_WRITE_COLUMNS: dict[str, tuple[type[DataType], ...]] = {
    "topic": (StringType,),
    "body": (BinaryType, StringType),
    "queue_id": (IntegerType, LongType, ShortType, ByteType),
    "tags": (StringType,),
    "keys": (ArrayType, StringType),
    "properties": (MapType,),
}


def _check_write_schema(schema: StructType) -> None:
    names = schema.fieldNames()
    for required in ("topic", "body"):
        if required not in names:
            raise _bad_option(f"writes need a {required!r} column; the DataFrame has {names}")
    for field in schema.fields:
        kinds = _WRITE_COLUMNS.get(field.name)
        if kinds is None:
            raise _bad_option(
                f"column {field.name!r} cannot be written; the columns are "
                f"{', '.join(_WRITE_COLUMNS)} (drop or rename the others)"
            )
        dt = field.dataType
        ok = isinstance(dt, kinds)
        if isinstance(dt, ArrayType):
            ok = isinstance(dt.elementType, StringType)
        if isinstance(dt, MapType):
            ok = isinstance(dt.keyType, StringType) and isinstance(dt.valueType, StringType)
        if not ok:
            raise _bad_option(
                f"column {field.name!r} has type {dt.simpleString()}; expected "
                + " or ".join(k.__name__.removesuffix("Type").lower() for k in kinds)
                + (" of strings" if field.name in {"keys", "properties"} else "")
            )


def _check_write_batch(batch: pa.RecordBatch) -> None:
    """Refuses rows the store would not take (a null topic or body, a queue id outside 0 to
    2^31 - 1) in the write task, so that the job fails before it appends anything."""
    import pyarrow.compute as pc

    for name in ("topic", "body"):
        nulls = batch.column(name).null_count
        if nulls:
            raise _bad_option(
                f"column {name!r} is null in {nulls} row(s); filter those rows out before writing"
            )
    if "queue_id" in batch.schema.names:
        bounds = pc.min_max(batch.column("queue_id"))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is not None and low < 0:
            raise _bad_option(f"column 'queue_id' holds {low}; queue ids are 0 to {_I32_MAX}")
        if high is not None and high > _I32_MAX:
            raise ArgumentOverflowError(
                f"rmqstore data source: column 'queue_id' holds {high}; queue ids are 0 to "
                f"{_I32_MAX}"
            )


@dataclasses.dataclass(frozen=True)
class StagedFile(WriterCommitMessage):
    """A write task's staged rows: ``file`` (None when the task had no rows) inside the job's
    staging folder, from Spark partition ``partition``."""

    partition: int
    file: str | None
    rows: int


def _staging_dir(path: str, job: str) -> str:
    return os.path.join(path, STAGING_DIR, job)


def _remove_staging(path: str, job: str) -> None:
    shutil.rmtree(_staging_dir(path, job), ignore_errors=True)
    # Fails while another job's staging folder is there, or when it is gone already.
    with contextlib.suppress(OSError):
        os.rmdir(os.path.join(path, STAGING_DIR))


class RmqStoreWriter(DataSourceArrowWriter):
    """Appends a DataFrame to the store, every row once.

    Each task writes its rows to an Arrow IPC file in ``<store>/spark-staging/<job>/``, and
    names it in its commit message once complete. The driver's :meth:`commit` appends the named
    files in partition order (``put_messages`` for runs of rows with the same topic, queue,
    tags, keys and properties) and removes the staging folder; :meth:`abort` removes it. A
    retried task's abandoned file is never named, and a failed job appends nothing. A commit is
    not atomic against a failing put (for example a full disk): the rows appended before it
    stay, and the error says how many.

    A row without ``queue_id`` goes to queue ``crc32(keys joined by NUL) % 8`` when it has keys,
    else to queue ``n % 8`` with n its position in the job (round robin over
    :data:`DEFAULT_QUEUES`).
    """

    def __init__(self, path: str, settings: dict[str, Any]) -> None:
        self.path = path
        self.settings = settings
        self.job = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFile:
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        folder = _staging_dir(self.path, self.job)
        os.makedirs(folder, exist_ok=True)
        name = f"{partition:06d}-{uuid.uuid4().hex}.arrow"
        tmp = os.path.join(folder, name + ".tmp")
        rows = 0
        sink: Any = None
        try:
            for batch in iterator:
                _check_write_batch(batch)
                if sink is None:
                    sink = pa.ipc.new_file(tmp, batch.schema)
                sink.write_batch(batch)
                rows += batch.num_rows
        except BaseException:
            # This attempt failed: its partial file is nobody's (a retry writes its own).
            if sink is not None:
                sink.close()
                sink = None
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
        finally:
            if sink is not None:
                sink.close()
        if sink is None:
            return StagedFile(partition, None, 0)
        os.replace(tmp, os.path.join(folder, name))
        return StagedFile(partition, name, rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        staged = sorted(
            (m for m in messages if isinstance(m, StagedFile) and m.file is not None),
            key=lambda m: m.partition,
        )
        try:
            if staged:
                self._append(staged)
        finally:
            _remove_staging(self.path, self.job)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _remove_staging(self.path, self.job)
        # Tasks of the failed job that were still running may finish their file just after:
        # look again for a little while. (One that outlives this leaves a staged file, never
        # messages in the store.)
        deadline = time.monotonic() + ABORT_GRACE_SECONDS
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if os.path.exists(_staging_dir(self.path, self.job)):
                _remove_staging(self.path, self.job)

    def _append(self, staged: Sequence[StagedFile]) -> None:
        import pyarrow as pa

        try:
            store = MessageStore(self.path, **self.settings)
        except StoreLockedError as exc:
            raise StoreLockedError(
                f"rmqstore data source: cannot append to {self.path}: another process holds the "
                f"store open ({exc}); close that writer and write again. Nothing was appended."
            ) from exc
        appended = 0
        try:
            budget = max(1, store.config.mapped_file_size_commit_log // 8)
            row_number = 0
            run: list[bytes] = []
            run_key: tuple[Any, ...] | None = None
            run_bytes = 0

            def flush() -> None:
                nonlocal run, run_bytes, appended
                if not run or run_key is None:
                    return
                topic, qid, tags, keys, props = run_key
                result = store.put_messages(
                    topic,
                    qid,
                    run,
                    tags=tags,
                    keys=list(keys) if keys else None,
                    properties=dict(props) if props else None,
                )
                if not result.ok:
                    raise RmqStoreError(
                        f"rmqstore data source: put to {topic}/{qid} failed with "
                        f"{result.status.name}; {appended} rows of this job were appended "
                        "before it"
                    )
                appended += len(run)
                run, run_bytes = [], 0

            for item in staged:
                file = os.path.join(_staging_dir(self.path, self.job), cast(str, item.file))
                with pa.memory_map(file) as source:
                    table = pa.ipc.open_file(source).read_all()
                for row in table.to_pylist():
                    body = row["body"]
                    if body is None or row.get("topic") is None:
                        raise _bad_option(
                            f"row {row_number} of the job has a null topic or body; "
                            "filter those rows out before writing"
                        )
                    if isinstance(body, str):
                        body = body.encode()
                    keys_value = row.get("keys")
                    if isinstance(keys_value, str):
                        keys_value = [keys_value]
                    keys = tuple(k for k in keys_value or () if k is not None)
                    qid = row.get("queue_id")
                    if qid is None:
                        if keys:
                            qid = zlib.crc32("\0".join(keys).encode()) % DEFAULT_QUEUES
                        else:
                            qid = row_number % DEFAULT_QUEUES
                    props = row.get("properties")
                    key = (
                        row["topic"],
                        int(qid),
                        row.get("tags"),
                        keys,
                        tuple(sorted(props)) if props else (),
                    )
                    if key != run_key or run_bytes + len(body) > budget or len(run) >= 1024:
                        flush()
                        run_key = key
                    run.append(body)
                    run_bytes += len(body)
                    row_number += 1
            flush()
        finally:
            store.close()


# -- the data source -------------------------------------------------------------------------


def local_session(app: str = "rmqstore", master: str = "local[2]") -> Any:
    """A quiet local SparkSession (UI off, loopback only, UTC, filter pushdown on, few shuffle
    partitions) with this source registered; its Python workers run this interpreter, so they
    import this very ``rmqstore``. For jobs on one machine, tests and benchmarks."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(RmqStoreDataSource)
    return session


class RmqStoreDataSource(DataSource):
    """The ``rmqstore`` format: see the module docstring for options and columns."""

    @classmethod
    def name(cls) -> str:
        return "rmqstore"

    def schema(self) -> StructType:
        options = _lower(self.options)
        return source_schema(_parse_bool(options, "includeproperties", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = _parse_read_options(self.options, streaming=False)
        _check_is_store(opts.path)
        return RmqStoreReader(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        opts = _parse_read_options(self.options, streaming=True)
        _check_is_store(opts.path)
        return RmqStoreStreamReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> RmqStoreWriter:
        if overwrite:
            raise _bad_option(
                "the store is an append-only log: overwrite is not supported, use mode('append')"
            )
        options = _lower(self.options)
        _check_known(options, {"path"}, "writes")
        _check_write_schema(schema)
        return RmqStoreWriter(_store_path(options), _store_settings(options))
