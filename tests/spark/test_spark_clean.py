"""Spark reads across the store's cleaner: expired segments removed before a query plans a range,
while a task reads it, and all along a batch read and a streaming query (issue 19).

The writer is a store opened in this process; the source reads through read-only stores (the
driver's planner process and the Python workers). Segments expire by having their modification
time set back (``os.utime``) before a cleaning round runs."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import rmqstore
from rmqspark import spark_rows, store_options
from rmqwire import SMALL_STORE

pytestmark = pytest.mark.spark

#: The writer's settings: the tests' small segments.
WRITER = dict(SMALL_STORE)

#: RocketMQ's default ``fileReservedTime``, 72 hours, in ms.
RESERVED_MS = 72 * 3600 * 1000

#: Bodies name their queue and queue offset, so every row read can be checked byte for byte.
PAD = b"." * 180


def _body(queue_id: int, offset: int) -> bytes:
    return f"{queue_id}:{offset}:".encode() + PAD


def _append(store: rmqstore.MessageStore, topic: str, queue_id: int, count: int) -> None:
    first = store.get_max_offset_in_queue(topic, queue_id)
    for offset in range(first, first + count):
        r = store.put_message(rmqstore.Message(topic, _body(queue_id, offset), queue_id=queue_id))
        assert r.ok, r.status
    assert store.wait_dispatched()


def _expire(store: rmqstore.MessageStore, keep: int) -> int:
    """Sets back the modification time of every commitlog segment but the last ``keep`` by
    100 hours and runs one cleaning round as the store's cleaners do, commitlog then consume
    queues, with RocketMQ's ``file_reserved_time`` (72 h); returns how many segments it
    removed."""
    segments = sorted((store.store_path / "commitlog").iterdir())
    old = time.time() - 100 * 3600
    for seg in segments[: max(0, len(segments) - keep)]:
        os.utime(seg, (old, old))
    removed = store._core.delete_expired_commit_log_files(RESERVED_MS, 0, 0, False, 100)
    store._core.clean_consume_queues(0)
    # A read-only store looks for segments removed at the front at most every 20 ms; until
    # then it reads those it still maps (the same bytes): let readers see the new minimum.
    time.sleep(0.05)
    return len(removed)


def _check_rows(rows: list[tuple[int, int, bytes]]) -> dict[int, list[int]]:
    """Rows (queue_id, queue_offset, body): every body is the one written at its offset; returns
    each queue's offsets, sorted."""
    per_queue: dict[int, list[int]] = {}
    for qid, offset, body in rows:
        assert body == _body(qid, offset), (qid, offset, body[:20])
        per_queue.setdefault(qid, []).append(offset)
    for offsets in per_queue.values():
        offsets.sort()
        assert len(set(offsets)) == len(offsets), "a row read twice"
    return per_queue


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[rmqstore.MessageStore]:
    with rmqstore.MessageStore(tmp_path / "store", **WRITER) as store:
        yield store


# -- a task whose range is removed while it reads (no Spark session: the task's own code) ----


def _task(path: Path, monkeypatch: pytest.MonkeyPatch, **options: str) -> Iterator[Any]:
    """The batch reader's task over E/0 [0, 600), reading 100 rows at a time."""
    from rmqstore.spark import RmqStoreDataSource, batch, source_schema
    from rmqstore.spark.planning import QueueRange

    monkeypatch.setattr(batch, "BATCH_ROWS", 100)
    source = RmqStoreDataSource({**store_options(path), **options})
    reader = source.reader(source_schema())
    return iter(reader.read(QueueRange("E", 0, 0, 600)))


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_task_reports_the_range_removed_under_it(
    writer: rmqstore.MessageStore,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fail_on_data_loss: bool,
) -> None:
    _append(writer, "E", 0, 600)
    task = _task(writer.store_path, monkeypatch, failOnDataLoss=str(fail_on_data_loss).lower())
    first = next(task)
    assert first.column("queue_offset").to_pylist() == list(range(100))
    # The cleaner removes the segments under offsets 100 and on before the task reads them.
    assert _expire(writer, keep=1) >= 2
    low = writer.get_min_offset_in_queue("E", 0)
    assert 100 < low < 600
    lost = rf"data loss, E/0: offsets \[100, {low}\) of topic 'E' queue 0 were removed"
    if fail_on_data_loss:
        with pytest.raises(rmqstore.errors.RmqStoreError, match=lost):
            next(task)
        return
    with caplog.at_level(logging.WARNING, logger="rmqstore.spark"):
        rest = list(task)
    offsets = [o for b in rest for o in b.column("queue_offset").to_pylist()]
    assert offsets == list(range(low, 600))
    bodies = [b for batch in rest for b in batch.column("body").to_pylist()]
    assert bodies == [_body(0, o) for o in offsets]
    assert any(
        f"offsets [100, {low}) of topic 'E' queue 0" in r.getMessage()
        and f"reading from {low}" in r.getMessage()
        for r in caplog.records
    )


def test_task_sees_commitlog_removed_before_the_consume_queue(
    writer: rmqstore.MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the cleaner's commitlog step and its consume queue step, the queue's minimum
    still names units whose records are gone: the task reports them as lost all the same."""
    _append(writer, "E", 0, 600)
    task = _task(writer.store_path, monkeypatch)
    next(task)
    # The first two segments (offsets 0 to about 380) go, at once, whatever their age.
    assert len(writer._core.delete_expired_commit_log_files(0, 0, 0, True, 2)) == 2
    time.sleep(0.05)  # past the read-only store's look for removed segments
    # The consume queue step has not run: its first file is still there (a read in the
    # writing store corrects the queue's minimum on the spot; the task's store is another).
    assert (Path(writer.store_path) / "consumequeue" / "E" / "0" / ("0" * 20)).exists()
    with pytest.raises(rmqstore.errors.RmqStoreError, match=r"data loss, E/0: offsets \[100, "):
        next(task)


def test_task_reports_offsets_removed_between_its_check_and_its_read(
    writer: rmqstore.MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleaner removes segments after the task looked up the first readable offset and
    before it reads: ``read_batch`` starts at the queue's new minimum, and the task reports
    the offsets it did not get instead of passing over them."""
    from rmqstore.spark import batch

    _append(writer, "E", 0, 600)
    task = _task(writer.store_path, monkeypatch)
    next(task)
    assert _expire(writer, keep=1) >= 2
    low = writer.get_min_offset_in_queue("E", 0)
    # The look-up as it was just before the removal.
    monkeypatch.setattr(batch, "_readable_low", lambda *_a, **_k: 0)
    lost = rf"data loss, E/0: offsets \[100, {low}\) of topic 'E' queue 0 were removed"
    with pytest.raises(rmqstore.errors.RmqStoreError, match=lost):
        next(task)


# -- streaming: the next micro-batch's range removed between two batches ---------------------


def _stream(
    spark: Any, path: Path, checkpoint: Path, on_batch: Any, **options: str
) -> tuple[list[list[tuple[int, int, bytes]]], BaseException | None]:
    """Runs a stream of topic E from the earliest offset, 100 messages a batch, with
    Trigger.AvailableNow; ``on_batch(batch_id)`` runs after each batch's rows are collected."""
    batches: list[list[tuple[int, int, bytes]]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append([(r[1], r[2], r[-1]) for r in spark_rows(df)])
        on_batch(batch_id)

    query = (
        spark.readStream.format("rmqstore")
        .options(
            **store_options(
                path, topics="E", startingOffsets="earliest", maxOffsetsPerTrigger="100", **options
            )
        )
        .load()
        .writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(collect)
        .start()
    )
    try:
        query.awaitTermination(180)
    except Exception as exc:  # the query's failure: what some tests expect
        return batches, exc
    return batches, query.exception()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_stream_next_range_removed_between_batches(
    spark: Any, writer: rmqstore.MessageStore, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    _append(writer, "E", 0, 600)
    lows: list[int] = []

    def clean_after_first(batch_id: int) -> None:
        if batch_id == 0:
            assert _expire(writer, keep=1) >= 2
            lows.append(writer.get_min_offset_in_queue("E", 0))

    batches, error = _stream(
        spark,
        writer.store_path,
        tmp_path / "checkpoint",
        clean_after_first,
        failOnDataLoss=str(fail_on_data_loss).lower(),
    )
    (low,) = lows
    assert 200 < low < 600  # the next batch, [100, 200), is gone and more
    assert [o for _, o, _ in batches[0]] == list(range(100))
    if fail_on_data_loss:
        assert error is not None
        assert f"data loss, E/0: offsets [100, {low}) of topic 'E' queue 0 were removed" in str(
            error
        )
        assert len(batches) == 1
        return
    assert error is None
    offsets = _check_rows([r for b in batches for r in b])[0]
    assert offsets == list(range(100)) + list(range(low, 600))
    # The limit counts readable offsets only: the batch after the loss is a full one.
    assert [len(b) for b in batches][:2] == [100, 100]


# -- reads and a stream running while the cleaner deletes and a producer appends -------------


class _Churn(threading.Thread):
    """Appends to E/0 and E/1 and removes all but the newest segments every few rounds, until
    stopped."""

    def __init__(self, store: rmqstore.MessageStore) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.stop = threading.Event()
        self.removed = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            rounds = 0
            while not self.stop.is_set():
                for qid in (0, 1):
                    _append(self.store, "E", qid, 50)
                rounds += 1
                if rounds % 4 == 0:
                    self.removed += _expire(self.store, keep=3)
                time.sleep(0.02)
        except BaseException as exc:  # reported by the test
            self.error = exc


def test_batch_reads_and_stream_while_segments_are_deleted(
    spark: Any, writer: rmqstore.MessageStore, tmp_path: Path
) -> None:
    for qid in (0, 1):
        _append(writer, "E", qid, 1000)
    churn = _Churn(writer)
    stream_rows: list[tuple[int, int, bytes]] = []

    def collect(df: Any, _batch_id: int) -> None:
        stream_rows.extend((r[1], r[2], r[-1]) for r in spark_rows(df))

    query = (
        spark.readStream.format("rmqstore")
        .options(
            **store_options(
                writer.store_path,
                topics="E",
                startingOffsets="earliest",
                maxOffsetsPerTrigger="300",
                failOnDataLoss="false",
            )
        )
        .load()
        .writeStream.trigger(processingTime="200 milliseconds")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .foreachBatch(collect)
        .start()
    )
    churn.start()
    reads = 0
    failures: list[tuple[str, str]] = []
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for fail in ("false", "true"):
                df = spark.read.format("rmqstore").options(
                    **store_options(writer.store_path, topics="E", failOnDataLoss=fail)
                )
                try:
                    rows = [(r[1], r[2], r[-1]) for r in spark_rows(df.load())]
                except Exception as exc:  # planned from, or reading, offsets removed meanwhile
                    failures.append((fail, str(exc)))
                    continue
                # Per queue a run of offsets without a gap (the cleaner takes from the front).
                for offsets in _check_rows(rows).values():
                    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
                reads += 1
    finally:
        churn.stop.set()
        churn.join(30)
    assert churn.error is None, churn.error
    assert churn.removed > 0
    assert reads >= 4, (reads, failures)
    # Only failOnDataLoss=true reads fail, and only for data loss.
    unexpected = [f for f in failures if f[0] != "true" or "data loss, E/" not in f[1]]
    assert not unexpected, unexpected[0][1]
    query.processAllAvailable()
    query.stop()
    assert query.exception() is None
    # The stream read every message still readable at its end, each once and unaltered, in a
    # run per queue that may skip only what the cleaner removed first.
    per_queue = _check_rows(stream_rows)
    for qid in (0, 1):
        end = writer.get_max_offset_in_queue("E", qid)
        assert per_queue[qid][-1] == end - 1
        low = writer.get_min_offset_in_queue("E", qid)
        assert [o for o in per_queue[qid] if o >= low] == list(range(low, end))
