"""Planning a read: the store opened read-only, the queues the options select (a
``topicPattern`` matched in a child process), where each queue's read starts and ends, and the
read tasks (:class:`QueueRange`, :class:`RangeGroup`) that Spark pickles to its workers."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from pyspark.sql.datasource import InputPartition

from ..errors import RmqStoreError
from ..store import MessageStore
from .options import (
    _EARLIEST,
    _LATEST,
    OffsetSpec,
    _bad_option,
    _check_is_store,
    _ReadOptions,
    _show,
)

log = logging.getLogger("rmqstore.spark")

#: Seconds a ``topicPattern`` may take to match the topic names of a store (a child process
#: matches them, and is killed after this long).
PATTERN_TIMEOUT = 10.0

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


def _readable_low(store: MessageStore, topic: str, qid: int, *, high: int | None = None) -> int:
    """The first offset of a queue whose message can still be read: its consume queue's
    minimum, or past it while the queue's first units point into commitlog segments the
    cleaner already removed (the commitlog goes first; the consume queue files that point into
    it follow in the cleaner's next step). Units are in commitlog order, so the first unit at
    or past the commitlog's minimum offset is found by bisection."""
    low = store.get_min_offset_in_queue(topic, qid)
    phy_min = store.get_min_phy_offset()
    if phy_min <= 0 or store.get_commit_log_offset_in_queue(topic, qid, low) >= phy_min:
        return low
    hi = store.get_max_offset_in_queue(topic, qid) if high is None else high
    if low >= hi:
        return low
    lo = low + 1  # the unit at `low` points below the commitlog's minimum
    while lo < hi:
        mid = (lo + hi) // 2
        if store.get_commit_log_offset_in_queue(topic, qid, mid) >= phy_min:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _data_loss(opts: _ReadOptions, topic: str, qid: int, offset: int, low: int) -> int:
    """Offsets ``[offset, low)`` of a queue are gone (their segments were removed before they
    were read): fail, naming the lost range, or log it and go on from ``low``
    (``failOnDataLoss=false``)."""
    text = (
        f"{topic}/{qid}: offsets [{offset}, {low}) of topic {topic!r} queue {qid} were removed "
        f"before they were read (offset {offset} is below the first readable offset {low}: "
        "its segments expired)"
    )
    if opts.fail_on_data_loss:
        raise RmqStoreError(
            f"rmqstore data source: data loss, {text}; "
            "set failOnDataLoss=false to read from the first readable offset"
        )
    log.warning("data loss, %s; skipped them, reading from %d (failOnDataLoss=false)", text, low)
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
