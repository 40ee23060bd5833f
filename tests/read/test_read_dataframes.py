"""polars and DuckDB take read_batch's default batch (``binary_view`` bodies pointing into the
mapped segments) as it is: the bodies they read equal those of the ``binary`` batch and the ones
put, across segments, inline (up to 12 bytes) and decompressed bodies included. The versions
pinned in requirements-dev.txt (polars 2.1, DuckDB 2.0) read ``binary_view`` natively, so no
conversion is needed."""

from __future__ import annotations

import zlib
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from rmqstore import Message, MessageStore
from rmqwire import SMALL_STORE, append_records, encode_properties

#: Empty, inline (<= 12 bytes), the first size that points into a segment, and larger ones.
SIZES = [0, 1, 12, 13, 100, 1024, 3000]


def _store(store_path: Path) -> tuple[MessageStore, list[bytes]]:
    """300 messages over several 64 KiB segments, then 5 compressed ones; the store, open, and
    the bodies as read back."""
    bodies = [((b"%06d|" % i) * 600)[: SIZES[i % len(SIZES)]] for i in range(300)]
    with MessageStore(store_path, **SMALL_STORE) as store:
        for i, body in enumerate(bodies):
            assert store.put_message(Message("DF", body, tags=f"t{i % 3}", keys=[f"k{i}"])).ok
        end = store.get_max_phy_offset()
    packed = [(b"packed %d " % i) * (1 + 50 * i) for i in range(5)]
    records = [
        {
            "topic": "DF",
            "queue_offset": 300 + i,
            "store_timestamp": 1,
            "born_timestamp": 1,
            "properties": encode_properties([("TAGS", "z")]),
            "body": zlib.compress(body),
            "sys_flag": 0x1,
        }
        for i, body in enumerate(packed)
    ]
    append_records(store_path, end, records)
    store = MessageStore(store_path, **SMALL_STORE)
    assert store.wait_dispatched()
    assert len(store.commitlog_segments()) >= 3
    return store, bodies + packed


def _batches(store: MessageStore) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    view = store.read_batch("DF", 0, 0, 1000)
    plain = store.read_batch("DF", 0, 0, 1000, body_type="binary")
    assert view.schema.field("body").type == pa.binary_view()
    assert plain.schema.field("body").type == pa.binary()
    return view, plain


@pytest.mark.timeout(60)
def test_polars_reads_the_default_batch(store_path: Path) -> None:
    store, bodies = _store(store_path)
    with store:
        view, plain = _batches(store)
        from_view, from_plain = pl.from_arrow(view), pl.from_arrow(plain)
        assert isinstance(from_view, pl.DataFrame)
        assert isinstance(from_plain, pl.DataFrame)
        assert from_view.schema["body"] == pl.Binary
        assert from_view["body"].to_list() == bodies
        assert from_view.equals(from_plain)
        # A query over the bodies: lengths by tag.
        lengths = (
            from_view.group_by("tags")
            .agg(pl.col("body").bin.size().sum().alias("n"))
            .sort("tags")
            .rows()
        )
        want: dict[str, int] = {}
        for tags, body in zip(view.column("tags").to_pylist(), bodies, strict=True):
            want[tags] = want.get(tags, 0) + len(body)
        assert lengths == sorted(want.items())
        # Only some columns: body and queue_offset.
        lean = pl.from_arrow(store.read_batch("DF", 0, 3, 1000, columns=["body", "queue_offset"]))
        assert isinstance(lean, pl.DataFrame)
        assert lean.columns == ["body", "queue_offset"]
        assert lean["body"].to_list() == bodies[3:]


@pytest.mark.timeout(60)
def test_duckdb_reads_the_default_batch(store_path: Path) -> None:
    store, bodies = _store(store_path)
    with store:
        view, plain = _batches(store)
        con = duckdb.connect()
        try:
            con.register("view_batch", view)
            con.register("plain_batch", plain)
            for table in ("view_batch", "plain_batch"):
                rows = con.execute(
                    f"SELECT queue_offset, body FROM {table} ORDER BY queue_offset"
                ).fetchall()
                assert [r[1] for r in rows] == bodies, table
                assert [r[0] for r in rows] == list(range(len(bodies)))
            total = con.execute("SELECT sum(octet_length(body)) FROM view_batch").fetchall()
            assert total == [(sum(map(len, bodies)),)]
            # The relation API over the batch, and the bodies it hands back to Arrow.
            rel = duckdb.arrow(view, connection=con.cursor())
            got = rel.select("body").to_arrow_table().column("body")
            assert got.cast(pa.binary()).to_pylist() == bodies
        finally:
            con.close()
