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
    Fail when offsets to read are gone: below a queue's first readable offset because the
    store's cleaner removed their segments (expired files, a full disk), whether before the
    query planned them or while a task read them. The error names the lost range (topic,
    queue, offsets ``[from, to)``). ``false`` logs that range as a warning and reads from the
    first readable offset. Reads run beside the cleaner: a task never reads a wrong byte or
    crashes because a segment went away under it.
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

The package's modules: ``options`` (parsing and checking the options), ``schema`` (the rows'
schema), ``planning`` (the selected queues, their offsets and the read tasks), ``batch`` and
``stream`` (the readers), ``write`` (the writer); this one holds the data source itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from .batch import BATCH_ROWS as BATCH_ROWS
from .batch import RmqStoreReader
from .options import MAX_PATTERN_LENGTH as MAX_PATTERN_LENGTH
from .options import ROWS_PER_PARTITION as ROWS_PER_PARTITION
from .options import (
    _bad_option,
    _check_is_store,
    _check_known,
    _lower,
    _parse_bool,
    _parse_read_options,
    _store_path,
    _store_settings,
)
from .planning import PATTERN_TIMEOUT as PATTERN_TIMEOUT
from .planning import QueueRange, RangeGroup
from .schema import source_schema
from .stream import RmqStoreStreamReader
from .write import ABORT_GRACE_SECONDS as ABORT_GRACE_SECONDS
from .write import DEFAULT_QUEUES as DEFAULT_QUEUES
from .write import STAGING_DIR as STAGING_DIR
from .write import RmqStoreWriter, StagedFile, _check_write_schema

__all__ = [
    "QueueRange",
    "RangeGroup",
    "RmqStoreDataSource",
    "RmqStoreReader",
    "RmqStoreStreamReader",
    "RmqStoreWriter",
    "StagedFile",
    "jar_path",
    "local_session",
]


#: Environment variable naming the JVM connector's jar (see :func:`jar_path`).
JAR_ENV = "RMQSTORE_SPARK_JAR"


def jar_path() -> str:
    """The jar of the JVM connector (format ``rmqstore-jvm``, docs/spark-jvm.md): the file
    ``$RMQSTORE_SPARK_JAR`` names, else ``rmqstore/jars/rmqstore-spark.jar`` beside this
    package (the wheel carries it there; ``make jar`` puts it there in a source tree). Pass it
    as ``spark.jars``; :func:`local_session` does. :class:`FileNotFoundError` when there is
    none (a wheel built from the sdist, which has no Java build)."""
    given = os.environ.get(JAR_ENV)
    path = given or os.path.join(
        os.path.dirname(os.path.dirname(__file__)), "jars", "rmqstore-spark.jar"
    )
    if not os.path.isfile(path):
        where = f"${JAR_ENV} names {path!r}" if given else f"no {path}"
        raise FileNotFoundError(
            f"the rmqstore JVM connector's jar is missing ({where}): install a wheel built by "
            f"`make wheel` (it carries the jar), or build it with `make jar` in a source tree "
            f"and set {JAR_ENV} to python/rmqstore/jars/rmqstore-spark.jar"
        )
    return path


def _has_jar() -> bool:
    try:
        jar_path()
    except FileNotFoundError:
        return False
    return True


def local_session(
    app: str = "rmqstore", master: str = "local[2]", jars: Sequence[str] | None = None
) -> Any:
    """A quiet local SparkSession (UI off, loopback only, UTC, filter pushdown on, few shuffle
    partitions) with both formats: ``rmqstore`` (this Python source, registered) and
    ``rmqstore-jvm`` (the JVM connector: ``jars`` go to ``spark.jars``, and by default they are
    ``[jar_path()]`` when that jar exists; ``jars=()`` starts Spark without it). Its Python
    workers run this interpreter, so they import this very ``rmqstore``. For jobs on one
    machine, tests and benchmarks::

        spark = local_session()
        df = spark.read.format("rmqstore-jvm").option("topics", "TopicA").load("/data/store")
    """
    if jars is None:
        # A missing jar named by $RMQSTORE_SPARK_JAR is an error; a missing packaged one only
        # leaves the Python source.
        jars = [jar_path()] if os.environ.get(JAR_ENV) or _has_jar() else []
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    session = (
        builder.appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # Executors fetch spark.jars from the driver at this address.
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(RmqStoreDataSource)
    return session


class RmqStoreDataSource(DataSource):
    """The ``rmqstore`` format: see the package docstring for options and columns."""

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
