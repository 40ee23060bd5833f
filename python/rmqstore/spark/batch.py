"""Batch reads: :class:`RmqStoreReader` plans the read tasks and reads each one's offset
ranges as Arrow batches (:func:`_read_range`, which streaming reads share)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from ..errors import RmqStoreError
from .options import _bad_option, _ReadOptions
from .planning import (
    QueueRange,
    _check_json_topics,
    _data_loss,
    _open_for_read,
    _plan,
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
