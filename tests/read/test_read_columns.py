"""read_batch(..., columns=...): a batch of exactly the columns asked for, in the order given,
each equal to that column of the full read (every subset of the ten columns, in both body
layouts, with compressed bodies, with and without properties, on one thread and on two); bad
column lists are typed errors naming the culprits; and a read of no column still checks every
record's body CRC."""

from __future__ import annotations

import itertools
import random
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
import rmqstore
from rmqstore import Message, MessageStore
from rmqwire import (
    SEGMENT,
    SMALL_STORE,
    append_records,
    commitlog_dir,
    encode_properties,
    segment_name,
)

COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "commit_log_offset",
    "store_timestamp",
    "born_timestamp",
    "tags",
    "keys",
    "properties",
    "body",
)


def _fill(store_path: Path, topic: str, n: int) -> MessageStore:
    """``n`` messages (tags present or not, keys, other properties now and then, bodies short
    and long) over several segments, then 20 compressed ones (zlib, sys_flag 0x1, appended to
    the closed store's last segment as a RocketMQ 5 producer's would be); the store, opened."""
    with MessageStore(store_path, **SMALL_STORE) as store:
        for i in range(n):
            body = (b"%d|" % i) * (1 + (i % 5) * 9)
            props = {"note": "zürich" * (1 + i % 3)} if i % 4 == 0 else {}
            tags = None if i % 5 == 0 else f"T{i % 3}"
            keys = [f"k{i}", "shared"] if i % 2 else []
            m = Message(topic, body, tags=tags, keys=keys, properties=props)
            assert store.put_message(m).ok
        end = store.get_max_phy_offset()
    records = [
        {
            "topic": topic,
            "queue_offset": n + i,
            "store_timestamp": 1_700_000_000_000 + i,
            "born_timestamp": 1_600_000_000_000 + i,
            "properties": encode_properties([("TAGS", f"z{i % 2}"), ("KEYS", f"c{i} d")]),
            "body": zlib.compress((b"compressed %d;" % i) * (1 + i * 3)),
            "sys_flag": 0x1,
        }
        for i in range(20)
    ]
    append_records(store_path, end, records)
    store = MessageStore(store_path, **SMALL_STORE)
    assert store.wait_dispatched()
    return store


def _subsets() -> list[tuple[str, ...]]:
    """Every subset of the columns, each in an order of its own (seeded)."""
    rng = random.Random(20)
    out = []
    for r in range(len(COLUMNS) + 1):
        for subset in itertools.combinations(COLUMNS, r):
            names = list(subset)
            rng.shuffle(names)
            out.append(tuple(names))
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("body_type", ["binary_view", "binary"])
@pytest.mark.parametrize("decompress", [True, False])
def test_every_subset_equals_the_full_batchs_columns(
    store_path: Path, body_type: str, decompress: bool
) -> None:
    store = _fill(store_path, "Cols", 400)
    assert len(store.commitlog_segments()) >= 2
    full = store.read_batch("Cols", 0, 5, 1000, body_type=body_type, decompress=decompress)
    assert full.num_rows == 415
    bodies = full.column("body").to_pylist()
    assert (bodies[-1] == (b"compressed 19;" * 58)) is decompress
    assert full.schema.names == list(COLUMNS)
    for names in _subsets():
        got = store.read_batch(
            "Cols", 0, 5, 1000, body_type=body_type, decompress=decompress, columns=names
        )
        got.validate(full=True)
        assert got.schema.names == list(names)
        assert got.num_rows == 415
        for name in names:
            assert got.schema.field(name) == full.schema.field(name), name
            assert got.column(name).equals(full.column(name)), (names, name)
    store.close()


def test_without_properties_every_other_subset_equals_the_full_batch(store_path: Path) -> None:
    store = _fill(store_path, "Lean", 120)
    full = store.read_batch("Lean", 0, 0, 200, include_properties=False)
    assert "properties" not in full.schema.names
    for names in _subsets():
        if "properties" in names:
            continue
        got = store.read_batch("Lean", 0, 0, 200, include_properties=False, columns=names)
        assert got.schema.names == list(names)
        for name in names:
            assert got.column(name).equals(full.column(name)), (names, name)
    store.close()


@pytest.mark.timeout(120)
def test_subsets_on_the_two_thread_path(open_store) -> None:
    # From 16,384 units a read is built by two threads and joined.
    store = open_store(mapped_file_size_commit_log=8 << 20)
    n = 20_003
    for start in range(0, n, 1000):
        bodies = [(b"%d|" % i) * (1 + i % 40) for i in range(start, min(n, start + 1000))]
        assert store.put_messages("Big", 0, bodies, tags=f"T{start % 3}", keys=["k"]).ok
    assert store.wait_dispatched()
    for body_type in ("binary_view", "binary"):
        full = store.read_batch("Big", 0, 1, n, body_type=body_type)
        assert full.num_rows == n - 1
        for names in (("tags",), ("body", "queue_offset"), ("keys", "topic"), ()):
            got = store.read_batch("Big", 0, 1, n, body_type=body_type, columns=names)
            assert got.num_rows == n - 1
            for name in names:
                assert got.column(name).equals(full.column(name)), (body_type, names, name)


def test_bad_column_lists_are_typed_errors_naming_them(open_store) -> None:
    store = open_store()
    assert store.put_messages("Bad", 0, [b"a"] * 10).ok
    assert store.wait_dispatched()
    cases = [
        (["body", "nope", "Body"], "unknown columns 'nope', 'Body'"),
        (["body", "tags", "body", "tags", "topic"], "more than once: 'body', 'tags'"),
    ]
    for columns, message in cases:
        with pytest.raises(rmqstore.InvalidArgumentError, match=message) as e:
            store.read_batch("Bad", 0, 0, 10, columns=columns)
        assert isinstance(e.value, ValueError)
    with pytest.raises(rmqstore.InvalidArgumentError, match="include_properties is False"):
        store.read_batch("Bad", 0, 0, 10, include_properties=False, columns=["properties"])
    for columns in ("body", b"body", 3, ["body", 1]):
        with pytest.raises(rmqstore.ArgumentTypeError, match="columns"):
            store.read_batch("Bad", 0, 0, 10, columns=columns)  # type: ignore[arg-type]
    # The binding checks the names too (the core's mask), for callers of the buffers.
    with pytest.raises(rmqstore.InvalidArgumentError, match='unknown columns "nope"'):
        store._core.read_batch_buffers("Bad", 0, 0, 10, columns=["nope"])
    # A generator of names is a sequence of names too.
    got = store.read_batch("Bad", 0, 0, 10, columns=(c for c in ("body", "tags")))
    assert got.schema.names == ["body", "tags"]


def test_no_column_counts_rows_and_still_checks_every_crc(store_path: Path) -> None:
    with MessageStore(store_path, **SMALL_STORE) as store:
        results = [store.put_message(Message("Crc", bytes([i]) * 1900)) for i in range(100)]
    target = results[40]
    with MessageStore(store_path, **SMALL_STORE) as store:
        counted = store.read_batch("Crc", 0, 0, 1000, columns=[])
        assert (counted.num_rows, counted.num_columns) == (100, 0)
        assert store.read_batch("Crc", 0, 95, 1000, columns=()).num_rows == 5
        assert store.read_batch("Nobody", 0, 0, 10, columns=[]).num_rows == 0
    # Flip a byte of message 40's body (the recovery of a clean close does not scan its segment).
    path = commitlog_dir(store_path) / segment_name(
        target.wrote_offset - target.wrote_offset % SEGMENT
    )
    data = bytearray(path.read_bytes())
    data[target.wrote_offset % SEGMENT + 88 + 100] ^= 0x5A
    path.write_bytes(bytes(data))
    with MessageStore(store_path, **SMALL_STORE) as store:
        for columns in ([], ["queue_offset"], ["tags", "keys"], ["body"], None):
            for body_type in ("binary_view", "binary"):
                with pytest.raises(rmqstore.CorruptRecordError, match="CRC"):
                    store.read_batch("Crc", 0, 0, 1000, columns=columns, body_type=body_type)
        assert store.read_batch("Crc", 0, 0, 40, columns=[]).num_rows == 40


def test_an_empty_queue_gives_the_columns_asked_for(open_store) -> None:
    store = open_store()
    for body_type in ("binary_view", "binary"):
        got = store.read_batch("None", 3, 0, 10, columns=["keys", "body"], body_type=body_type)
        assert got.schema.names == ["keys", "body"]
        assert got.num_rows == 0
        want = pa.binary_view() if body_type == "binary_view" else pa.binary()
        assert got.schema.field("body").type == want
