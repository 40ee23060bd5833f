"""What reads serve (issue 15): every read path checks the body CRC of what it returns,
compressed bodies come back as the producer sent them, and a property stored twice reads as
RocketMQ reads it (the last value)."""

from __future__ import annotations

import time
import zlib
from pathlib import Path
from typing import Any

import lz4.frame
import pytest
import rmqstore
import zstandard
from rmqstore import GetMessageStatus, Message, MessageStore
from rmqwire import (
    SEGMENT,
    SMALL_STORE,
    append_records,
    commitlog_dir,
    encode_properties,
    masked_crc32,
    segment_name,
)

BODY = 1900


def _body(i: int) -> bytes:
    return bytes((i * 7 + j) % 251 for j in range(BODY))


def _fill(store_path: Path, n: int = 100, **settings: Any) -> list[rmqstore.PutMessageResult]:
    """``n`` messages of topic Crc queue 0 over several 64 KiB segments, then a clean close."""
    with MessageStore(store_path, **{**SMALL_STORE, **settings}) as store:
        results = [
            store.put_message(Message("Crc", _body(i), tags="t", keys=[f"k{i}"])) for i in range(n)
        ]
    assert all(r.ok for r in results)
    return results


def _flip_body_byte(store_path: Path, r: rmqstore.PutMessageResult, segment: int = SEGMENT) -> Path:
    path = commitlog_dir(store_path) / segment_name(r.wrote_offset - r.wrote_offset % segment)
    data = bytearray(path.read_bytes())
    data[r.wrote_offset % segment + 88 + 100] ^= 0x5A  # inside the body (IPv4 hosts)
    path.write_bytes(bytes(data))
    return path


def test_a_flipped_body_byte_is_refused_by_every_read_path(store_path: Path) -> None:
    results = _fill(store_path)
    target = results[3]
    path = _flip_body_byte(store_path, target)
    with MessageStore(store_path, **SMALL_STORE) as store:
        # After a clean close recovery scans only the last segment: the flip is not seen there.
        assert store.recovery_report()["start_offset"] > target.wrote_offset
        assert store.get_max_phy_offset() == results[-1].wrote_offset + results[-1].wrote_bytes

        def check(e: pytest.ExceptionInfo[rmqstore.CorruptRecordError]) -> None:
            assert isinstance(e.value, rmqstore.StoreCorruptedError)
            assert isinstance(e.value, ValueError)
            assert e.value.path == str(path)
            assert e.value.offset == target.wrote_offset
            assert str(path) in str(e.value)
            assert str(target.wrote_offset) in str(e.value)
            assert "CRC" in str(e.value)

        with pytest.raises(rmqstore.CorruptRecordError) as e:
            store.look_message_by_offset(target.wrote_offset)
        check(e)
        for start, n in ((0, 32), (target.queue_offset, 1)):
            with pytest.raises(rmqstore.CorruptRecordError) as e:
                store.get_message("g", "Crc", 0, start, n)
            check(e)
        with pytest.raises(rmqstore.CorruptRecordError) as e:
            store.read_batch("Crc", 0, 0, 1000)
        check(e)
        assert f"queue Crc/0 offset {target.queue_offset}" in str(e.value)
        with pytest.raises(rmqstore.CorruptRecordError) as e:
            store.query_message("Crc", "k3")
        check(e)
        # Everything else reads as before.
        after = store.get_message("g", "Crc", 0, target.queue_offset + 1, 32)
        assert after.status is GetMessageStatus.FOUND
        assert [m.body for m in after.messages] == [
            _body(i) for i in range(4, 4 + len(after.messages))
        ]
        batch = store.read_batch("Crc", 0, target.queue_offset + 1, 1000)
        assert batch.num_rows == len(results) - 4
        assert store.read_batch("Crc", 0, 0, target.queue_offset).num_rows == 3
        assert [m.body for m in store.query_message("Crc", "k4")] == [_body(4)]
        assert store.look_message_by_offset(results[4].wrote_offset).body == _body(4)
    # The check can be turned off: the damaged body is then served as stored.
    with MessageStore(store_path, **SMALL_STORE, check_crc_on_read=False) as store:
        body = store.look_message_by_offset(target.wrote_offset).body
        assert body != _body(3)
        assert len(body) == BODY
        assert store.get_message("g", "Crc", 0, 3, 1).messages[0].body == body
        assert store.read_batch("Crc", 0, 3, 1).column("body")[0].as_py() == body
        assert [m.body for m in store.query_message("Crc", "k3")] == [body]


def test_a_read_only_store_checks_every_record(store_path: Path) -> None:
    results = _fill(store_path, n=70)
    target = results[-2]  # in the last segment: a writable open's recovery would truncate it
    path = _flip_body_byte(store_path, target)
    with MessageStore(store_path, **SMALL_STORE, read_only=True) as store:
        with pytest.raises(rmqstore.CorruptRecordError) as e:
            store.get_message("g", "Crc", 0, target.queue_offset, 1)
        assert e.value.path == str(path)
        with pytest.raises(rmqstore.CorruptRecordError):
            store.read_batch("Crc", 0, 0, 100)
        with pytest.raises(rmqstore.CorruptRecordError):
            store.look_message_by_offset(target.wrote_offset)
        assert store.read_batch("Crc", 0, 0, target.queue_offset).num_rows == len(results) - 2


@pytest.mark.parametrize("where", ["first half", "second half"])
def test_a_large_read_batch_fails_on_a_damaged_record_in_either_half(
    store_path: Path, where: str
) -> None:
    """From 16,384 rows read_batch builds two halves on two threads; a damaged record in
    either fails the read, and the vectors of the other half are given back. (512 KiB segments:
    both damaged records are in segments recovery does not scan after a clean close.)"""
    segment = 512 * 1024
    with MessageStore(store_path, mapped_file_size_commit_log=segment) as store:
        offsets: list[int] = []
        for chunk in range(10):
            r = store.put_messages("Big", 0, [b"%06d" % i for i in range(2_000)])
            assert r.ok, chunk
            offsets += r.record_offsets
    n = 3_000 if where == "first half" else 15_000
    path = commitlog_dir(store_path) / segment_name(offsets[n] - offsets[n] % segment)
    data = bytearray(path.read_bytes())
    data[offsets[n] % segment + 88 + 2] ^= 0x01
    path.write_bytes(bytes(data))
    with MessageStore(store_path, mapped_file_size_commit_log=segment) as store:
        for _ in range(3):
            with pytest.raises(rmqstore.CorruptRecordError) as e:
                store.read_batch("Big", 0, 0, 20_000)
            assert e.value.offset == offsets[n]
            assert f"queue Big/0 offset {n}" in str(e.value)
        assert store.read_batch("Big", 0, 0, n).num_rows == n
        assert store.read_batch("Big", 0, n + 1, 20_000).num_rows == 20_000 - n - 1


# -- compressed bodies ------------------------------------------------------------------------

ORIGINAL = b"".join(b"order %06d paid; " % i for i in range(600))  # 10.8 KB, compressible


def _lz4_like_java(data: bytes) -> bytes:
    """An LZ4 frame as lz4-java's ``LZ4FrameOutputStream`` writes it: 4 MB blocks,
    independent, no content size."""
    return lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX4MB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def _zstd_stream(data: bytes) -> bytes:
    """A zstd frame as a streaming compressor (zstd-jni's ``ZstdOutputStream``) writes it,
    without the content size."""
    c = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    return c.compress(data) + c.flush()


#: (sysflag, stored body, compression name): 4.x (ZLIB without type bits) and 5.x encodings.
COMPRESSED = [
    (0x1, zlib.compress(ORIGINAL), "ZLIB"),
    (0x301, zlib.compress(ORIGINAL, 9), "ZLIB"),
    (0x101, lz4.frame.compress(ORIGINAL), "LZ4"),
    (0x101, _lz4_like_java(ORIGINAL), "LZ4"),
    (0x201, zstandard.ZstdCompressor().compress(ORIGINAL), "ZSTD"),
    (0x201, _zstd_stream(ORIGINAL), "ZSTD"),
]


def _append(store_path: Path, specs: list[dict[str, Any]], **settings: Any) -> list[int]:
    """A store holding one plain message of topic Z, then ``specs`` forged after it (queue 0,
    consecutive queue offsets), as a RocketMQ broker would have stored them."""
    with MessageStore(store_path, **{**SMALL_STORE, **settings}) as store:
        assert store.put_message(Message("Z", b"plain", keys=["plain"])).ok
        end = store.get_max_phy_offset()
    now = int(time.time() * 1000)
    full = [
        {"topic": "Z", "queue_offset": i + 1, "store_timestamp": now, "born_timestamp": now, **s}
        for i, s in enumerate(specs)
    ]
    segment = settings.get("mapped_file_size_commit_log", SEGMENT)
    return append_records(store_path, end, full, segment)


def test_compressed_bodies_come_back_as_the_producer_sent_them(store_path: Path) -> None:
    specs = [
        {
            "body": stored,
            "sys_flag": flag,
            "properties": encode_properties([("KEYS", f"z{i}"), ("TAGS", "Zip")]),
        }
        for i, (flag, stored, _) in enumerate(COMPRESSED)
    ]
    offsets = _append(store_path, specs)
    with MessageStore(store_path, **SMALL_STORE) as store:
        assert store.wait_dispatched()
        for off, (flag, stored, name) in zip(offsets, COMPRESSED, strict=True):
            m = store.look_message_by_offset(off)
            assert m.body == ORIGINAL, name
            assert m.stored_body == stored
            assert m.compression == name
            # As RocketMQ's decoder: the COMPRESSED bit goes with the compression, the type
            # bits stay.
            assert m.sys_flag == flag & ~0x1
            assert m.body_crc == masked_crc32(stored)  # the CRC covers the stored bytes
        plain = store.get_message("g", "Z", 0, 0, 1).messages[0]
        assert (plain.body, plain.stored_body, plain.compression) == (b"plain", b"plain", None)
        got = store.get_message("g", "Z", 0, 1, 32, "Zip")
        assert [m.body for m in got.messages] == [ORIGINAL] * len(COMPRESSED)
        batch = store.read_batch("Z", 0, 0, 100)
        assert batch.column("body").to_pylist() == [b"plain"] + [ORIGINAL] * len(COMPRESSED)
        raw = store.read_batch("Z", 0, 0, 100, decompress=False)
        assert raw.column("body").to_pylist() == [b"plain"] + [s for _, s, _ in COMPRESSED]
        for i in range(len(COMPRESSED)):
            assert [m.body for m in store.query_message("Z", f"z{i}")] == [ORIGINAL]
    # With decompression off, every read gives the stored bytes (and can still ask for them
    # decompressed in bulk).
    with MessageStore(store_path, **SMALL_STORE, decompress_body_on_read=False) as store:
        for off, (flag, stored, name) in zip(offsets, COMPRESSED, strict=True):
            m = store.look_message_by_offset(off)
            assert (m.body, m.stored_body, m.compression) == (stored, stored, name)
            assert m.sys_flag == flag
        got = store.get_message("g", "Z", 0, 1, 32)
        assert [m.body for m in got.messages] == [s for _, s, _ in COMPRESSED]
        assert store.read_batch("Z", 0, 1, 100).column("body").to_pylist() == [
            s for _, s, _ in COMPRESSED
        ]
        batch = store.read_batch("Z", 0, 1, 100, decompress=True)
        assert batch.column("body").to_pylist() == [ORIGINAL] * len(COMPRESSED)


@pytest.mark.parametrize(
    ("flag", "stored", "problem"),
    [
        (0x101, b"this is not an lz4 frame at all", "cannot be decompressed"),
        (0x1, zlib.compress(ORIGINAL)[:-9], "cannot be decompressed"),
        (0x201, b"\x28\xb5\x2f\xfd garbage", "cannot be decompressed"),
        (0x501, zlib.compress(ORIGINAL), "unknown compression type 5"),
    ],
)
def test_a_compressed_body_that_cannot_be_given_back_is_a_typed_error(
    store_path: Path, flag: int, stored: bytes, problem: str
) -> None:
    (off,) = _append(store_path, [{"body": stored, "sys_flag": flag}])
    with MessageStore(store_path, **SMALL_STORE) as store:
        assert store.wait_dispatched()
        for read in (
            lambda: store.look_message_by_offset(off),
            lambda: store.get_message("g", "Z", 0, 1, 1),
            lambda: store.read_batch("Z", 0, 0, 10),
        ):
            with pytest.raises(rmqstore.CorruptRecordError) as e:
                read()
            assert e.value.offset == off
            assert problem in str(e.value)
        # The stored bytes stay readable.
        assert store.read_batch("Z", 0, 1, 10, decompress=False).column("body")[0].as_py() == stored
    with MessageStore(store_path, **SMALL_STORE, decompress_body_on_read=False) as store:
        assert store.look_message_by_offset(off).body == stored


def test_a_decompression_bomb_is_refused(store_path: Path) -> None:
    bomb = zlib.compress(bytes(300 * 1024 * 1024), 9)  # 300 MiB of zeros in ~300 KB
    assert len(bomb) < 400_000
    big = {"mapped_file_size_commit_log": 1 << 20}
    (off,) = _append(store_path, [{"body": bomb, "sys_flag": 0x1}], **big)
    with (
        MessageStore(store_path, **{**SMALL_STORE, **big}) as store,
        pytest.raises(rmqstore.CorruptRecordError, match="expands past 268435456 bytes"),
    ):
        store.look_message_by_offset(off)


# -- a property stored twice ------------------------------------------------------------------


def test_a_uniq_key_stored_twice_reads_as_its_last_value(store_path: Path) -> None:
    """RocketMQ 5.3.3 batch members hold UNIQ_KEY twice (their own id, then the batch's); its
    properties map, its index and its lookups keep the last value, and so does every rmqstore
    read."""
    specs = [
        {
            "body": b"member %d" % i,
            "properties": encode_properties(
                [("UNIQ_KEY", f"OWN{i}"), ("TAGS", "B"), ("UNIQ_KEY", "BATCHID"), ("KEYS", "k")]
            ),
        }
        for i in range(5)
    ]
    offsets = _append(store_path, specs)
    with MessageStore(store_path, **SMALL_STORE) as store:
        assert store.wait_dispatched()
        found = store.query_message("Z", "BATCHID")
        assert sorted(m.commit_log_offset for m in found) == offsets
        assert store.query_message("Z", "OWN0") == []  # not indexed, as by RocketMQ
        m = store.look_message_by_offset(offsets[0])
        assert m.properties == {"UNIQ_KEY": "BATCHID", "TAGS": "B", "KEYS": "k"}
        batch = store.read_batch("Z", 0, 1, 10)
        for props in batch.column("properties").to_pylist():
            assert sorted(props) == [("KEYS", "k"), ("TAGS", "B"), ("UNIQ_KEY", "BATCHID")]
