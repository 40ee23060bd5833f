"""Issue 15 items 3 and 15 through Spark: a damaged record fails the read with the segment and
offset named (unless the store option turns the check off), and compressed bodies arrive as
the producer sent them."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import rmqstore
from rmqspark import store_options
from rmqwire import SEGMENT, SMALL_STORE, append_records, commitlog_dir, segment_name

pytestmark = pytest.mark.spark

BODY = 1900
ORIGINAL = b"".join(b"line %05d of a compressible body; " % i for i in range(300))


def _body(i: int) -> bytes:
    return bytes((i * 7 + j) % 251 for j in range(BODY))


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, Path, list[int]]:
    """A store of 100 messages over four segments with one body byte flipped in the first
    segment (which recovery after a clean close does not scan), and two compressed records in
    another topic; returns the path, the damaged offset, its segment and the compressed
    records' offsets."""
    path = tmp_path_factory.mktemp("checks") / "store"
    with rmqstore.MessageStore(path, **SMALL_STORE) as store:
        results = [store.put_message(rmqstore.Message("Crc", _body(i))) for i in range(100)]
        assert store.put_message(rmqstore.Message("Zip", b"plain")).ok
        end = store.get_max_phy_offset()
    zipped = append_records(
        path,
        end,
        [
            {"topic": "Zip", "body": zlib.compress(ORIGINAL), "sys_flag": 0x1, "queue_offset": 1},
            {"topic": "Zip", "body": zlib.compress(ORIGINAL), "sys_flag": 0x301, "queue_offset": 2},
        ],
    )
    with rmqstore.MessageStore(path, **SMALL_STORE) as store:  # recovers and dispatches them
        assert store.wait_dispatched()
        assert store.get_max_offset_in_queue("Zip", 0) == 3
    target = results[3].wrote_offset
    segment = commitlog_dir(path) / segment_name(target - target % SEGMENT)
    data = bytearray(segment.read_bytes())
    data[target % SEGMENT + 88 + 10] ^= 0xFF
    segment.write_bytes(bytes(data))
    return path, target, segment, zipped


def _load(spark: Any, path: Path, **options: str) -> Any:
    return spark.read.format("rmqstore").options(**store_options(path, **options)).load()


def test_a_damaged_record_fails_the_read_naming_it(spark: Any, damaged) -> None:
    path, target, segment, _ = damaged
    with pytest.raises(Exception, match="CorruptRecordError") as e:  # Spark wraps it
        _load(spark, path, topics="Crc").select("body").collect()
    text = str(e.value)
    assert "CorruptRecordError" in text
    assert str(segment) in text
    assert f"commitlog offset {target}" in text
    # Off: the damaged body is read as stored.
    rows = _load(spark, path, topics="Crc", **{"store.check_crc_on_read": "false"}).collect()
    assert len(rows) == 100
    bodies = {r.queue_offset: bytes(r.body) for r in rows}
    assert bodies[3] != _body(3)
    assert all(bodies[i] == _body(i) for i in range(100) if i != 3)


def test_compressed_bodies_arrive_decompressed(spark: Any, damaged) -> None:
    path = damaged[0]
    rows = _load(spark, path, topics="Zip").orderBy("queue_offset").collect()
    assert [bytes(r.body) for r in rows] == [b"plain", ORIGINAL, ORIGINAL]
    raw = _load(spark, path, topics="Zip", **{"store.decompress_body_on_read": "false"})
    assert [bytes(r.body) for r in raw.orderBy("queue_offset").collect()] == [
        b"plain",
        zlib.compress(ORIGINAL),
        zlib.compress(ORIGINAL),
    ]
