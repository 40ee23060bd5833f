"""Streaming reads: :class:`RmqStoreStreamReader` (offsets per queue, ``maxOffsetsPerTrigger``
as Kafka's rate limit, consumer-group commits)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..errors import StoreLockedError
from ..store import MessageStore
from .batch import _read_range
from .options import _ReadOptions
from .planning import (
    QueueRange,
    _check_json_topics,
    _data_loss,
    _open_for_read,
    _pack,
    _readable_low,
    _selected_queues,
    _starting_offset,
    _task_ranges,
)
from .schema import _arrow_schema, _check_read_schema

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("rmqstore.spark")

QueueOffsets = dict[str, dict[str, int]]


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
        high = {q: store.get_max_offset_in_queue(*q) for q in queues}
        low = {q: _readable_low(store, *q, high=high[q]) for q in queues}
        return low, high

    def initialOffset(self) -> QueueOffsets:  # noqa: N802 - Spark's name
        opts = self.opts
        store = _open_for_read(opts.path, opts.settings)
        queues = _selected_queues(store, opts)
        _check_json_topics("startingOffsets", opts.starting, queues)
        out = {}
        for topic, qid in queues:
            high = store.get_max_offset_in_queue(topic, qid)
            low = _readable_low(store, topic, qid, high=high)
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
        # Queues found since the last batch start at their first readable offset; offsets the
        # cleaner removed since do not count against the limit (partitions() reports them).
        from_ = {q: max(begin.get(q, low[q]), low[q]) for q in high}
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
