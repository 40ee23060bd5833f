"""Batch reads: :class:`RmqStoreReader` plans the read tasks and reads each one's offset
ranges as Arrow batches (:func:`_read_range`, which streaming reads share)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from ..errors import RmqStoreError
from ..store import MessageStore
from .options import _bad_option, _ReadOptions
from .planning import (
    QueueRange,
    _check_json_topics,
    _data_loss,
    _open_for_read,
    _plan,
    _readable_low,
    _resolve,
    _selected_queues,
    _starting_offset,
    _task_ranges,
)
from .schema import _arrow_schema, _check_read_schema

if TYPE_CHECKING:
    import pyarrow as pa

#: Rows per Arrow batch a read task yields.
BATCH_ROWS = 64 * 1024


def _read_range(
    opts: _ReadOptions, target: pa.Schema, part: QueueRange
) -> Iterator[pa.RecordBatch]:
    """Yields the rows of ``part`` as batches of the Spark schema ``target``.

    The store's cleaner may remove the segments of the range while it is read (a writer in
    another process, or this one): every offset of the range is either yielded or reported as
    lost (:func:`_data_loss`: the task fails, or logs the lost offsets and goes on), never
    skipped in silence. ``read_batch`` itself starts at the queue's minimum and passes over
    units whose commitlog record is gone, so the offsets it returns are checked against the
    ones asked for."""
    store = _open_for_read(opts.path, opts.settings)
    topic, qid = part.topic, part.queue_id
    offset = part.start
    # Only the schema's columns are built (and queue_offset, which the gap checks need).
    columns = list(dict.fromkeys((*target.names, "queue_offset")))
    while offset < part.end:
        low = _readable_low(store, topic, qid, high=part.end)
        if offset < low:
            offset = _data_loss(opts, topic, qid, offset, min(low, part.end))
            continue
        batch = store.read_batch(
            topic,
            qid,
            offset,
            min(BATCH_ROWS, part.end - offset),
            include_properties=opts.include_properties,
            # Spark's BinaryType is Arrow binary: the bodies are copied once, here.
            body_type="binary",
            columns=columns,
        )
        if batch.num_rows == 0:
            if _readable_low(store, topic, qid, high=part.end) > offset:
                continue  # removed since the check above: reported at the loop's top
            high = store.get_max_offset_in_queue(topic, qid)
            raise RmqStoreError(
                f"rmqstore data source: {topic}/{qid} has no message at offset {offset} "
                f"(readable offsets [{low}, {high})), planned up to {part.end}"
            )
        offsets = batch.column("queue_offset")
        last = offsets[-1].as_py()
        if offsets[0].as_py() != offset or last != offset + batch.num_rows - 1:
            _check_gaps(store, opts, part, offset, offsets.to_pylist())
        offset = last + 1
        yield batch.select(target.names).cast(target)


def _check_gaps(
    store: MessageStore, opts: _ReadOptions, part: QueueRange, offset: int, offsets: list[int]
) -> None:
    """Reports the offsets from ``offset`` to the batch's last row that the batch (queue
    offsets ``offsets``, ascending) does not have: lost when their commitlog records are
    below the commitlog's minimum (removed during the read), an error otherwise."""
    previous = offset - 1
    for got in offsets:
        if got != previous + 1:
            _missing(store, opts, part, previous + 1, got)
        previous = got


def _missing(store: MessageStore, opts: _ReadOptions, part: QueueRange, lo: int, hi: int) -> None:
    """Offsets ``[lo, hi)`` were asked for and not read."""
    topic, qid = part.topic, part.queue_id
    phy_min = store.get_min_phy_offset()
    if store.get_commit_log_offset_in_queue(topic, qid, hi - 1) < phy_min:
        _data_loss(opts, topic, qid, lo, hi)
        return
    raise RmqStoreError(
        f"rmqstore data source: {topic}/{qid}: the read of offsets from {lo} returned none "
        f"before {hi}, though their messages are not below the commitlog's first offset "
        f"{phy_min}"
    )


class RmqStoreReader(DataSourceReader):
    """Batch reader: one partition per queue offset range; see the package docstring.

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
            high = store.get_max_offset_in_queue(topic, qid)
            low = _readable_low(store, topic, qid, high=high)
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
