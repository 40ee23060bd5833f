"""Appends: :class:`RmqStoreWriter` stages each task's rows in an Arrow IPC file
(:class:`StagedFile` names it) and the driver appends the staged files in partition order."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
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
    StructType,
)

from ..errors import ArgumentOverflowError, RmqStoreError, StoreIOError, StoreLockedError
from ..store import MessageStore
from .options import _I32_MAX, _bad_option

if TYPE_CHECKING:
    import pyarrow as pa

#: Queues a written row without ``queue_id`` is spread over.
DEFAULT_QUEUES = 8
#: How long an aborted write job keeps removing files its last running tasks stage.
ABORT_GRACE_SECONDS = 3.0
#: Folder, inside the store folder, where write tasks stage their rows.
STAGING_DIR = "spark-staging"


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


def _check_folder(folder: str) -> None:
    if os.path.islink(folder) or not os.path.isdir(folder):
        raise StoreIOError(
            f"rmqstore data source: {folder} is a symbolic link or not a folder; write tasks "
            "stage their rows in that folder, inside the store folder only: remove it and "
            "write again"
        )


def _make_staging(path: str, job: str) -> None:
    """Creates the job's staging folder inside the store folder (on the driver, before the
    tasks run): a ``spark-staging`` that is a symbolic link (or not a folder) is refused, so
    staged files never land elsewhere."""
    staging = os.path.join(path, STAGING_DIR)
    os.makedirs(path, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(staging)
    _check_folder(staging)
    os.mkdir(os.path.join(staging, job))


def _job_folder(path: str, job: str) -> str:
    """The job's staging folder, for a task: tasks never create it, so a task that starts after
    the job was aborted fails instead of staging anew."""
    _check_folder(os.path.join(path, STAGING_DIR))
    folder = _staging_dir(path, job)
    if os.path.islink(folder) or not os.path.isdir(folder):
        raise StoreIOError(
            f"rmqstore data source: the staging folder {folder} is gone (the write job was "
            "aborted) or is not a folder"
        )
    return folder


def _remove_staging(path: str, job: str) -> None:
    staging = os.path.join(path, STAGING_DIR)
    if os.path.islink(staging) or not os.path.isdir(staging):
        return  # never through a link
    folder = _staging_dir(path, job)
    if os.path.islink(folder):
        with contextlib.suppress(OSError):
            os.remove(folder)
    else:
        # rmtree removes links found inside, never what they point to.
        shutil.rmtree(folder, ignore_errors=True)
    # Fails while another job's staging folder is there, or when it is gone already.
    with contextlib.suppress(OSError):
        os.rmdir(staging)


class RmqStoreWriter(DataSourceArrowWriter):
    """Appends a DataFrame to the store, every row once.

    The job's folder ``<store>/spark-staging/<job>/`` is made here, on the driver (never
    through a ``spark-staging`` link); each task writes its rows to an Arrow IPC file in it, and
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
        _make_staging(path, self.job)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFile:
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        folder = _job_folder(self.path, self.job)
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
