"""Helpers of the Spark suite: test stores and their rows as the source and get_message see them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import rmqstore
from rmqwire import SMALL_STORE

#: The options that open a test store (small segments) at ``path``.
STORE_OPTIONS = {f"store.{name}": str(value) for name, value in SMALL_STORE.items()}


def store_options(path: Path, **extra: str) -> dict[str, str]:
    return {"path": str(path), **STORE_OPTIONS, **extra}


Row = tuple[Any, ...]


def put(path: Path, messages: Sequence[rmqstore.Message]) -> list[rmqstore.PutMessageResult]:
    """Appends ``messages`` to the store at ``path`` (opened and closed here)."""
    with rmqstore.MessageStore(path, **SMALL_STORE) as store:
        results = [store.put_message(m) for m in messages]
        assert all(r.ok for r in results), [r.status for r in results]
        assert store.wait_dispatched()
    return results


def stored_rows(path: Path, *, include_properties: bool = False) -> list[Row]:
    """Every message of the store, read with ``get_message``, as the source's row tuples
    (timestamps in ms, properties as a sorted tuple)."""
    rows: list[Row] = []
    with rmqstore.MessageStore(path, **SMALL_STORE) as store:
        for topic in store.topics():
            for qid in store.queue_ids(topic):
                offset = store.get_min_offset_in_queue(topic, qid)
                end = store.get_max_offset_in_queue(topic, qid)
                while offset < end:
                    result = store.get_message("spark-tests", topic, qid, offset, 32)
                    assert result.messages, (topic, qid, offset, result.status)
                    for m in result.messages:
                        row: Row = (
                            m.topic,
                            m.queue_id,
                            m.queue_offset,
                            m.commit_log_offset,
                            m.store_timestamp,
                            m.born_timestamp,
                            m.tags,
                            tuple(m.keys),
                        )
                        if include_properties:
                            row += (tuple(sorted(m.properties.items())),)
                        rows.append((*row, m.body))
                    offset = result.next_begin_offset
    return sorted(rows)


def spark_rows(df: Any, *, include_properties: bool = False) -> list[Row]:
    """A source DataFrame's rows as :func:`stored_rows` gives them."""
    from pyspark.sql import functions as F  # noqa: N812

    cols = [
        "topic",
        "queue_id",
        "queue_offset",
        "commit_log_offset",
        F.unix_millis("store_timestamp").alias("store_timestamp"),
        F.unix_millis("born_timestamp").alias("born_timestamp"),
        "tags",
        "keys",
    ]
    if include_properties:
        cols.append("properties")
    cols.append("body")
    out = []
    for r in df.select(*cols).collect():
        values = list(r)
        values[7] = tuple(values[7])
        if include_properties:
            values[8] = tuple(sorted(values[8].items()))
        values[-1] = bytes(values[-1])
        out.append(tuple(values))
    return sorted(out)
