"""Byte-level checks: the segment files hold RocketMQ commitlog records
(docs/format.md#commitlog-records, docs/format.md#commitlog-segments).

Every check here reads the files with plain Python (struct, zlib) through ``rmqwire``, never
through the store.
"""

from __future__ import annotations

import ipaddress
import struct
import time
from pathlib import Path

import pytest
import rmqstore
from rmqstore import Message, MessageStore, PutMessageStatus
from rmqwire import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    SEGMENT,
    Blank,
    commitlog_dir,
    encode_properties,
    host_bytes,
    masked_crc32,
    msg_id,
    read_segment,
    record_length,
    scan_segment,
    segment_name,
)

DEFAULT_STORE_HOST = "127.0.0.1:10911"


def records_in(store: MessageStore, store_path: Path, segment_offset: int = 0):
    store.flush()
    return scan_segment(read_segment(store_path, segment_offset))


# -- single records -----------------------------------------------------------------------------


def test_every_field_on_disk_is_what_was_put(store: MessageStore, store_path: Path) -> None:
    messages = [
        Message(
            "TopicA",
            b"hello",
            tags="TagA",
            keys=["k1", "k2"],
            properties={"p": "v", "ключ": "значение"},
            flag=7,
            queue_id=3,
            born_timestamp=1_700_000_000_123,
            born_host="10.1.2.3:5555",
        ),
        Message("TopicA", bytes(range(256)), queue_id=3, flag=-1),
        Message("TopicB", b"", flag=2**31 - 1, born_timestamp=-5),
        Message("TopicA", b"x" * 3000, queue_id=4, tags="T2"),
        Message("TopicA", b"\x00\x01\x02", queue_id=3),
    ]
    expected_queue_offsets = [0, 1, 0, 0, 2]
    before = int(time.time() * 1000)
    results = [store.put_message(m) for m in messages]
    after = int(time.time() * 1000)
    assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * len(messages)

    records, blank, end = records_in(store, store_path)
    assert blank is None
    assert len(records) == len(messages)
    assert end == store.get_max_phy_offset() == sum(r.wrote_bytes for r in results)
    data = read_segment(store_path, 0)
    assert len(data) == SEGMENT
    assert data[end:] == bytes(SEGMENT - end)

    position = 0
    for msg, res, rec, qo in zip(messages, results, records, expected_queue_offsets, strict=True):
        props_raw = encode_properties(list(msg.properties.items()))
        assert rec.position == position == res.wrote_offset
        assert rec.total_size == res.wrote_bytes
        assert rec.total_size == record_length(len(msg.body), len(msg.topic), len(props_raw))
        assert rec.magic == MAGIC_V1
        assert rec.body_crc == masked_crc32(msg.body)
        assert rec.queue_id == msg.queue_id
        assert rec.flag == msg.flag
        assert rec.queue_offset == res.queue_offset == qo
        assert rec.physical_offset == res.wrote_offset
        assert rec.sys_flag == 0
        assert rec.born_timestamp == msg.born_timestamp
        assert rec.born_host == (msg.born_host or DEFAULT_STORE_HOST)
        assert rec.store_timestamp == res.store_timestamp
        assert before <= rec.store_timestamp <= after
        assert rec.store_ip == bytes([127, 0, 0, 1])
        assert rec.store_port == 10911
        assert rec.reconsume_times == 0
        assert rec.prepared_transaction_offset == 0
        assert rec.body == msg.body
        assert rec.topic_len_size == 1
        assert rec.topic == msg.topic
        assert rec.properties_raw == props_raw
        assert rec.properties == msg.properties
        position += rec.total_size
    assert records[0].properties == {
        "p": "v",
        "ключ": "значение",
        "TAGS": "TagA",
        "KEYS": "k1 k2",
    }


GOLDEN_BODY = bytes(range(32))
GOLDEN_PROPS = b"TAGS\x01TAG1\x02KEYS\x011234567890123\x02"


def _golden_put(store: MessageStore, how: str) -> list[rmqstore.PutMessageResult]:
    common = {"born_timestamp": 1_600_000_000_000, "born_host": "10.0.0.1:5000"}
    if how == "batch":
        return [
            store.put_messages(
                "FooBar", 0, [GOLDEN_BODY] * 10, tags="TAG1", keys="1234567890123", **common
            )
        ]
    if how == "properties":
        kwargs = {"properties": {"TAGS": "TAG1", "KEYS": "1234567890123"}}
    else:
        kwargs = {"tags": "TAG1", "keys": ["1234567890123"]}
    return [
        store.put_message(Message("FooBar", GOLDEN_BODY, **kwargs, **common)) for _ in range(10)
    ]


@pytest.mark.parametrize("how", ["properties", "tags_keys", "batch"])
def test_golden_158_byte_record(store: MessageStore, store_path: Path, how: str) -> None:
    results = _golden_put(store, how)
    assert all(r.ok for r in results)
    assert sum(r.wrote_bytes for r in results) == 1580
    assert store.get_max_phy_offset() == 1580
    store.flush()
    data = read_segment(store_path, 0)
    for i in range(10):
        rec = data[i * 158 : (i + 1) * 158]
        assert rec[0:4] == struct.pack(">i", 158)
        assert rec[4:8] == bytes.fromhex("DAA320A7")
        assert rec[8:12] == struct.pack(">i", masked_crc32(GOLDEN_BODY))
        assert rec[12:16] == bytes(4)  # QUEUEID 0
        assert rec[16:20] == bytes(4)  # FLAG 0
        assert rec[20:28] == struct.pack(">q", i)  # QUEUEOFFSET
        assert rec[28:36] == struct.pack(">q", i * 158)  # PHYSICALOFFSET
        assert rec[36:40] == bytes(4)  # SYSFLAG
        assert rec[40:48] == struct.pack(">q", 1_600_000_000_000)
        assert rec[48:56] == bytes([10, 0, 0, 1]) + struct.pack(">i", 5000)
        (store_ts,) = struct.unpack(">q", rec[56:64])
        assert store_ts == results[0 if how == "batch" else i].store_timestamp
        assert rec[64:72] == bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
        assert rec[72:76] == bytes(4)  # RECONSUMETIMES
        assert rec[76:84] == bytes(8)  # PREPARED TRANSACTION OFFSET
        assert rec[84:88] == struct.pack(">i", 32)
        assert rec[88:120] == GOLDEN_BODY
        assert rec[120] == 6
        assert rec[121:127] == b"FooBar"
        assert rec[127:129] == struct.pack(">h", 29)
        assert rec[129:158] == GOLDEN_PROPS
    assert data[1580:] == bytes(SEGMENT - 1580)


def test_body_crc_matches_the_spec_vector(store: MessageStore, store_path: Path) -> None:
    store.put_message(Message("T", b"body"))
    (rec,), _, _ = records_in(store, store_path)
    assert rec.body_crc == 1537739698
    assert store.look_message_by_offset(0).body_crc == 1537739698


# -- IPv6 hosts ---------------------------------------------------------------------------------


def test_ipv6_born_host_widens_the_field_and_sets_sysflag(
    store: MessageStore, store_path: Path
) -> None:
    r = store.put_message(Message("T6", b"abc", born_host="[::1]:1234", born_timestamp=42))
    assert r.ok
    assert r.wrote_bytes == record_length(3, 2, 0, born_v6=True) == 91 + 12 + 3 + 2
    store.flush()
    data = read_segment(store_path, 0)
    (rec,), _, end = scan_segment(data)
    assert end == r.wrote_bytes
    assert rec.sys_flag == 0x10
    assert data[48:64] == ipaddress.IPv6Address("::1").packed
    assert data[64:68] == struct.pack(">i", 1234)
    # STORETIMESTAMP moves from 56 to 68, STOREHOST to 76.
    assert rec.store_timestamp_at == 68
    assert data[68:76] == struct.pack(">q", r.store_timestamp)
    assert data[76:84] == bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
    assert rec.born_host == "[::1]:1234"
    assert rec.body == b"abc"
    ext = store.look_message_by_offset(0)
    assert ext.born_host == "[::1]:1234"
    assert ext.sys_flag == 0x10
    assert len(ext.msg_id) == 32


def test_ipv6_store_host_widens_the_field_and_sets_sysflag(open_store, store_path: Path) -> None:
    host = "[fe80::1]:10911"
    store = open_store(store_host=host)
    a = store.put_message(Message("T6", b"abc", born_host="10.0.0.1:1"))
    b = store.put_message(Message("T6", b"defg"))
    assert a.ok
    assert b.ok
    assert a.wrote_bytes == record_length(3, 2, 0, store_v6=True)
    assert b.wrote_bytes == record_length(4, 2, 0, born_v6=True, store_v6=True)
    (ra, rb), _, _ = records_in(store, store_path)
    assert ra.sys_flag == 0x20
    assert ra.born_host == "10.0.0.1:1"
    assert ra.store_ip == ipaddress.IPv6Address("fe80::1").packed
    assert ra.store_port == 10911
    assert ra.store_host == host
    # Without a born host the store host is used for both, so both fields are IPv6.
    assert rb.sys_flag == 0x30
    assert rb.born_host == host
    assert rb.store_host == host
    # Message ids are 56 hex characters for an IPv6 store host.
    for res, rec in ((a, ra), (b, rb)):
        expected = ipaddress.IPv6Address("fe80::1").packed + struct.pack(">iq", 10911, rec.position)
        assert res.msg_id == expected.hex().upper() == msg_id(host, rec.position)
        assert len(res.msg_id) == 56
        ext = store.look_message_by_offset(rec.position)
        assert ext.msg_id == res.msg_id
        assert ext.store_host == host


# -- topic length and record version ------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "magic", "len_size"),
    [
        ("t" * 127, MAGIC_V1, 1),
        ("%RETRY%" + "g" * 120, MAGIC_V1, 1),  # 127 bytes
        ("%RETRY%" + "g" * 121, MAGIC_V2, 2),  # 128 bytes
        ("%RETRY%" + "g" * 150, MAGIC_V2, 2),
        ("%RETRY%" + "g" * 248, MAGIC_V2, 2),  # 255 bytes, the longest allowed
    ],
)
def test_record_version_follows_topic_length(
    store: MessageStore, store_path: Path, topic: str, magic: int, len_size: int
) -> None:
    r = store.put_message(Message(topic, b"payload", tags="x"))
    assert r.status is PutMessageStatus.PUT_OK
    props = b"TAGS\x01x\x02"
    assert r.wrote_bytes == record_length(7, len(topic), len(props))
    (rec,), _, _ = records_in(store, store_path)
    assert rec.magic == magic
    assert rec.topic_len_size == len_size
    assert rec.topic == topic
    assert rec.total_size == r.wrote_bytes
    data = read_segment(store_path, 0)
    at = 88 + 7  # topic length field right after the 7-byte body (IPv4 hosts)
    if len_size == 1:
        assert data[at] == len(topic)
    else:
        assert data[at : at + 2] == struct.pack(">h", len(topic))
    assert data[at + len_size : at + len_size + len(topic)] == topic.encode()
    assert data[at + len_size + len(topic) :][:2] == struct.pack(">h", len(props))
    assert store.look_message_by_offset(0).topic == topic


# -- segments -----------------------------------------------------------------------------------


def test_segments_are_named_by_offset_and_have_the_configured_size(
    store: MessageStore, store_path: Path
) -> None:
    for i in range(200):
        assert store.put_message(Message("Roll", i.to_bytes(4, "big") * 250)).ok
    max_offset = store.get_max_phy_offset()
    count = max_offset // SEGMENT + 1
    assert count >= 3
    expected = [commitlog_dir(store_path) / segment_name(k * SEGMENT) for k in range(count)]
    assert [Path(p) for p in store.commitlog_segments()] == expected
    for p in expected:
        assert len(p.name) == 20
        assert p.name.isdigit()
        assert p.stat().st_size == SEGMENT
    assert expected[1].name == "00000000000000065536"
    store.close()
    assert sorted(commitlog_dir(store_path).iterdir()) == expected


def test_every_full_segment_ends_with_a_blank_record(store: MessageStore, store_path: Path) -> None:
    offsets = [store.put_message(Message("Roll", b"b" * 1000)).wrote_offset for _ in range(150)]
    store.flush()
    segments = store.get_max_phy_offset() // SEGMENT + 1
    seen = []
    for k in range(segments):
        records, blank, end = scan_segment(read_segment(store_path, k * SEGMENT))
        seen += [k * SEGMENT + r.position for r in records]
        for r in records:
            assert r.physical_offset == k * SEGMENT + r.position
        if k < segments - 1:
            assert isinstance(blank, Blank)
            assert blank.position == end
            assert blank.size == SEGMENT - blank.position
            assert blank.size >= 8
        else:
            assert blank is None
    assert seen == offsets


RECORD = 92  # topic "T", no properties: 91 + 1 + body


@pytest.mark.parametrize("spare", [8, 7])
def test_blank_record_when_a_message_does_not_fit_with_8_bytes_to_spare(
    store: MessageStore, store_path: Path, spare: int
) -> None:
    for _ in range(7):
        assert store.put_message(Message("T", b"f" * 9000)).ok
    position = 7 * (RECORD + 9000)
    remaining = SEGMENT - position
    assert store.get_max_phy_offset() == position
    size = remaining - spare  # the record, leaving `spare` bytes after it
    r = store.put_message(Message("T", b"m" * (size - RECORD)))
    assert r.ok
    assert r.wrote_bytes == size
    store.flush()
    seg0 = read_segment(store_path, 0)
    if spare == 8:
        # Fits with exactly 8 bytes to spare: stays in this segment.
        assert r.wrote_offset == position
        nxt = store.put_message(Message("T", b""))
        assert nxt.wrote_offset == SEGMENT
        store.flush()
        seg0 = read_segment(store_path, 0)
        blank_at = SEGMENT - 8
    else:
        # One byte short: an 8-byte blank record claims the rest, the message opens segment 1.
        assert r.wrote_offset == SEGMENT
        blank_at = position
    assert struct.unpack_from(">iI", seg0, blank_at) == (SEGMENT - blank_at, BLANK_MAGIC)
    assert seg0[blank_at + 8 :] == bytes(SEGMENT - blank_at - 8)
    records, blank, _ = scan_segment(seg0)
    assert blank == Blank(blank_at, SEGMENT - blank_at)
    assert records[-1].end == blank_at
    records1, _, _ = scan_segment(read_segment(store_path, SEGMENT))
    assert records1[0].position == 0
    assert records1[0].physical_offset == SEGMENT
    if spare == 7:
        assert records1[0].body == b"m" * (size - RECORD)
    with pytest.raises(rmqstore.InvalidArgumentError):
        store.look_message_by_offset(blank_at)


# -- batches ------------------------------------------------------------------------------------


def test_batch_records_are_contiguous_with_consecutive_queue_offsets(
    store: MessageStore, store_path: Path
) -> None:
    first = store.put_message(Message("TopicB", b"single", queue_id=2))
    assert first.queue_offset == 0
    bodies = [b"a", b"bb" * 10, b"", bytearray(b"ccc"), memoryview(b"dddd")]
    r = store.put_messages(
        "TopicB",
        2,
        bodies,
        tags="TB",
        keys=["x", "y"],
        properties={"p": "1"},
        flag=5,
        born_timestamp=123,
        born_host="10.0.0.2:7",
    )
    assert r.status is PutMessageStatus.PUT_OK
    assert r.msg_num == len(bodies)
    assert r.queue_offset == 1
    assert r.wrote_offset == first.wrote_bytes
    props = b"p\x011\x02TAGS\x01TB\x02KEYS\x01x y\x02"
    sizes = [record_length(len(b), 6, len(props)) for b in bodies]
    assert r.wrote_bytes == sum(sizes)
    expected_offsets = [r.wrote_offset + sum(sizes[:i]) for i in range(len(bodies))]
    assert r.record_offsets == expected_offsets
    assert r.msg_id == ",".join(msg_id(DEFAULT_STORE_HOST, o) for o in expected_offsets)

    records, _, end = records_in(store, store_path)
    assert end == r.wrote_offset + r.wrote_bytes == store.get_max_phy_offset()
    batch = records[1:]
    assert [rec.position for rec in batch] == expected_offsets
    for i, (rec, body) in enumerate(zip(batch, bodies, strict=True)):
        assert rec.physical_offset == rec.position
        assert rec.queue_offset == 1 + i
        assert rec.queue_id == 2
        assert rec.store_timestamp == r.store_timestamp
        assert rec.body == bytes(body)
        assert rec.body_crc == masked_crc32(bytes(body))
        assert rec.properties_raw == props
        assert rec.flag == 5
        assert rec.born_timestamp == 123
        assert rec.born_host == "10.0.0.2:7"
        assert rec.topic == "TopicB"
    after = store.put_message(Message("TopicB", b"next", queue_id=2))
    assert after.queue_offset == 1 + len(bodies)


def test_batch_that_does_not_fit_moves_whole_to_the_next_segment(
    store: MessageStore, store_path: Path
) -> None:
    for _ in range(7):
        store.put_message(Message("T", b"f" * 9000))
    position = 7 * (RECORD + 9000)
    remaining = SEGMENT - position
    # One 592-byte record would fit in the remaining bytes; four do not.
    assert RECORD + 500 + 8 <= remaining < 4 * (RECORD + 500) + 8
    r = store.put_messages("T", 0, [bytes([i]) * 500 for i in range(4)])
    assert r.ok
    assert r.wrote_offset == SEGMENT
    assert r.queue_offset == 7
    store.flush()
    records0, blank, _ = scan_segment(read_segment(store_path, 0))
    assert len(records0) == 7
    assert blank == Blank(position, remaining)
    records1, _, end1 = scan_segment(read_segment(store_path, SEGMENT))
    assert [rec.body for rec in records1] == [bytes([i]) * 500 for i in range(4)]
    assert [rec.queue_offset for rec in records1] == [7, 8, 9, 10]
    assert [rec.physical_offset for rec in records1] == r.record_offsets
    assert r.record_offsets == [SEGMENT + i * (RECORD + 500) for i in range(4)]
    assert {rec.store_timestamp for rec in records1} == {r.store_timestamp}
    assert end1 == 4 * (RECORD + 500)


# -- message ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1:10911", "10.20.30.40:9876"])
def test_message_id_is_hex_of_store_host_and_offset(open_store, host: str) -> None:
    store = open_store(store_host=host)
    results = [store.put_message(Message("T", b"x" * n)) for n in (1, 50, 0)]
    ip, port = host_bytes(host)
    for r in results:
        expected = (ip + struct.pack(">i", port) + struct.pack(">q", r.wrote_offset)).hex().upper()
        assert r.msg_id == expected
        assert len(r.msg_id) == 32
        assert r.msg_id == r.msg_id.upper()
        assert store.look_message_by_offset(r.wrote_offset).msg_id == expected
    if host == "127.0.0.1:10911":
        assert results[0].msg_id == "7F00000100002A9F0000000000000000"
    assert len({r.msg_id for r in results}) == 3
