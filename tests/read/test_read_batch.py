"""read_batch: the Arrow columns equal what get_message returns, including the two-thread path
taken for large reads (rows split at an odd row, tags present and absent)."""

from __future__ import annotations

import pyarrow as pa
from rmqstore import GetMessageStatus, Message
from rmqwire import other_thread_ran_inside


def _expected(store, topic: str, queue_id: int, start: int, count: int) -> list[dict]:
    out: list[dict] = []
    offset = start
    while len(out) < count:
        r = store.get_message("g", topic, queue_id, offset, 32)
        assert r.status is GetMessageStatus.FOUND
        for m in r.messages:
            out.append(
                {
                    "topic": m.topic,
                    "queue_id": m.queue_id,
                    "queue_offset": m.queue_offset,
                    "commit_log_offset": m.commit_log_offset,
                    "tags": m.tags,
                    "keys": m.keys,
                    "properties": sorted(m.properties.items()),
                    "body": m.body,
                    "store_timestamp": m.store_timestamp,
                    "born_timestamp": m.born_timestamp,
                }
            )
        offset = r.next_begin_offset
    return out[:count]


def _rows(batch: pa.RecordBatch) -> list[dict]:
    rows = batch.to_pylist()
    for row in rows:
        row["properties"] = sorted(row["properties"])
        for ts in ("store_timestamp", "born_timestamp"):
            row[ts] = int(row[ts].timestamp() * 1000 + 0.5)
    return rows


def test_large_read_equals_get_message(open_store) -> None:
    store = open_store(
        mapped_file_size_commit_log=8 << 20, mapped_file_size_consume_queue=20 * 7001
    )
    n = 40_001
    for i in range(n):
        tags = f"T{i % 3}" if i % 5 else None
        if i % 11 == 0:
            tags = "標籤-longer-than-sixteen-bytes"
        keys = [f"k{i}", "shared"] if i % 2 else None
        if i % 13 == 0:
            keys = [f"a-key-longer-than-sixteen-bytes-{i}", "ключ", "k"]
        # Short and long (over 16 bytes), ASCII and not: every copy path of the columns.
        props = {"idx": str(i), "note": "zürich 東京 🙂" * (1 + i % 3)} if i % 7 == 0 else None
        msg = Message("Big", b"b%d" % i * (1 + i % 4), tags=tags, keys=keys, properties=props)
        assert store.put_message(msg).ok
    assert store.wait_dispatched()
    # 33,333 rows: halves of 16,666 and 16,667 (not a multiple of 8), across consume queue
    # segments of 7,001 units.
    start, count = 5, 33_333
    batch = store.read_batch("Big", 0, start, count)
    assert batch.num_rows == count
    batch.validate(full=True)
    assert _rows(batch) == _expected(store, "Big", 0, start, count)
    # Small reads take the one-thread path and give the same rows.
    small = store.read_batch("Big", 0, start + 100, 50)
    assert _rows(small) == _rows(batch.slice(100, 50))
    # Without properties the column is absent and the rest is unchanged.
    lean = store.read_batch("Big", 0, start, count, include_properties=False)
    assert "properties" not in lean.schema.names
    assert lean.column("body") == batch.column("body")
    # Past the end: empty; reading the tail returns only what exists.
    assert store.read_batch("Big", 0, n, 10).num_rows == 0
    assert store.read_batch("Big", 0, n - 3, 100).num_rows == 3


def test_runs_of_equal_properties_and_changes_between_them(open_store) -> None:
    """Rows in runs with equal properties (one ``put_messages`` batch each), runs that differ
    only in a value, single messages between them, and long stretches where every message has
    properties of its own (the reuse of the last split pauses there, then resumes): every row
    equals ``get_message``'s, on both read paths."""
    store = open_store()
    props_runs = [
        ({"tags": "A", "keys": ["k1", "k2"]}, 7),
        ({"tags": "A", "keys": ["k1", "k3"]}, 5),  # same names, one value differs
        ({"tags": None, "keys": None}, 3),
        ({"tags": "B", "keys": ["k1", "k2"], "properties": {"x": "1"}}, 9),
        ({"tags": "B", "keys": ["k1", "k2"], "properties": {"x": "2"}}, 1),
        ({"tags": "A", "keys": ["k1", "k2"]}, 4),  # back to the first run's properties
    ]
    for _round in range(300):
        for kw, count in props_runs:
            bodies = [b"r%d" % i for i in range(count)]
            assert store.put_messages("Runs", 0, bodies, **kw).ok
        for i in range(150):  # properties of their own: a stretch of misses
            assert store.put_message(Message("Runs", b"u", tags="U", keys=[f"u{_round}-{i}"])).ok
    assert store.wait_dispatched()
    total = store.get_max_offset_in_queue("Runs", 0)
    for start, count in ((0, total), (3, 17_000), (total - 500, 500)):
        batch = store.read_batch("Runs", 0, start, count)
        assert batch.num_rows == count
        batch.validate(full=True)
        assert _rows(batch) == _expected(store, "Runs", 0, start, count)


def test_reads_after_dropped_batches_reuse_their_vectors_and_stay_exact(open_store) -> None:
    """Vectors of dropped batches are reused by the next reads (``vec_pool``): batches of two
    queues with different row sizes, tags and keys, read alternately and dropped, always give
    the same rows, whichever vectors they were built in."""
    store = open_store()
    for i in range(40_000):
        tags = "wide" if i % 3 else None
        keys = [f"k{i}"] * (i % 4) or None
        assert store.put_message(Message("Pool", b"w" * (i % 300), tags=tags, keys=keys)).ok
        assert store.put_message(Message("Pool", b"n", queue_id=1, tags=f"t{i % 7}")).ok
    assert store.wait_dispatched()
    expected = {q: _rows(store.read_batch("Pool", q, 0, 40_000)) for q in (0, 1)}
    for q in (0, 1):
        assert expected[q] == _expected(store, "Pool", q, 0, 40_000)
    for _ in range(3):
        for q in (1, 0, 0, 1):
            batch = store.read_batch("Pool", q, 0, 40_000)
            batch.validate(full=True)
            assert _rows(batch) == expected[q]
            del batch


def test_a_bulk_read_lets_other_python_threads_run(open_store) -> None:
    """``read_batch`` builds its columns in one Rust call with the GIL released (the pyarrow
    assembly after it is Python and takes the GIL, so the call is timed on its own)."""
    store = open_store(mapped_file_size_commit_log=256 << 20)
    # A million rows: tens of milliseconds in one call, even with pooled vectors.
    for _ in range(1000):
        assert store.put_messages("Gil", 0, [b"r" * 128] * 1000, tags="T", keys=["a"]).ok
    assert store.wait_dispatched(60)
    read = store._core.read_batch_buffers
    batch, ran = other_thread_ran_inside(lambda: read("Gil", 0, 0, 1_000_000, True))
    assert batch.rows == 1_000_000
    assert ran > 0, "another Python thread never ran while read_batch worked"


def test_counts_and_offsets_at_the_ends_of_the_integer_ranges(store) -> None:
    """Issue 15 item 9: ``read_batch(topic, q, 0, 2**63)`` panicked in the core (a count
    turned negative); any count or offset is either read (clamped to the queue) or refused
    with a typed error, never a panic."""
    assert store.put_messages("Ends", 0, [b"a", b"b", b"c"]).ok
    assert store.wait_dispatched()
    for count in (2**31, 2**32 + 1, 2**63 - 1, 2**63, 2**64 - 1):
        assert store.read_batch("Ends", 0, 0, count).num_rows == 3
        assert store.read_batch("Ends", 0, 2, count).num_rows == 1
        assert store.read_batch("Ends", 0, -(2**63), count).num_rows == 3
        assert store.read_batch("Ends", 0, 2**63 - 1, count).num_rows == 0
        assert store.read_batch("Nope", 0, 2**63 - 1, count).num_rows == 0
    assert store.read_batch("Ends", 0, 0, 0).num_rows == 0
