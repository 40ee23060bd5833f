"""Reads by commitlog offset, and the physical offset bounds."""

from __future__ import annotations

import ipaddress
import zlib

import pytest
import rmqstore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rmqstore import Message, MessageStore, PutMessageStatus
from rmqwire import SEGMENT, encode_record, msg_id, record_length


def test_look_message_by_offset_returns_every_field(store: MessageStore) -> None:
    store.put_message(Message("Other", b"first"))
    msg = Message(
        "TopicA",
        b"\x00payload\xff",
        tags="TagA",
        keys=["order-1", "order-2"],
        properties={"p1": "v1", "UNIQ_KEY": "abc"},
        flag=7,
        queue_id=3,
        born_timestamp=1_700_000_000_123,
        born_host="10.0.0.9:4321",
    )
    r = store.put_message(msg)
    m = store.look_message_by_offset(r.wrote_offset)
    assert isinstance(m, rmqstore.MessageExt)
    assert m.topic == "TopicA"
    assert m.body == b"\x00payload\xff"
    assert m.queue_id == 3
    assert m.queue_offset == 0 == r.queue_offset
    assert m.commit_log_offset == r.wrote_offset == record_length(5, 5, 0)
    assert m.store_size == r.wrote_bytes
    props_len = len(b"p1\x01v1\x02UNIQ_KEY\x01abc\x02TAGS\x01TagA\x02KEYS\x01order-1 order-2\x02")
    assert m.store_size == record_length(9, 6, props_len)
    assert m.body_crc == zlib.crc32(b"\x00payload\xff") & 0x7FFFFFFF
    assert m.flag == 7
    assert m.sys_flag == 0
    assert m.born_timestamp == 1_700_000_000_123
    assert m.born_host == "10.0.0.9:4321"
    assert m.store_timestamp == r.store_timestamp
    assert m.store_host == "127.0.0.1:10911"
    assert m.reconsume_times == 0
    assert m.prepared_transaction_offset == 0
    assert m.properties == {
        "p1": "v1",
        "UNIQ_KEY": "abc",
        "TAGS": "TagA",
        "KEYS": "order-1 order-2",
    }
    assert m.tags == "TagA"
    assert m.keys == ["order-1", "order-2"]
    assert m.msg_id == r.msg_id == msg_id("127.0.0.1:10911", r.wrote_offset)
    assert "TopicA" in repr(m)


def test_message_without_tags_or_keys(store: MessageStore) -> None:
    r = store.put_message(Message("T", b"x"))
    m = store.look_message_by_offset(r.wrote_offset)
    assert m.tags is None
    assert m.keys == []
    assert m.properties == {}
    m2 = store.look_message_by_offset(store.put_message(Message("T", b"x", tags="")).wrote_offset)
    assert m2.tags is None


def test_batch_records_read_back(store: MessageStore) -> None:
    r = store.put_messages("B", 1, [b"one", b"two", b"three"], tags="t", keys="a b")
    ids = r.msg_id.split(",")
    assert len(ids) == 3
    for i, off in enumerate(r.record_offsets):
        m = store.look_message_by_offset(off)
        assert m.body == [b"one", b"two", b"three"][i]
        assert m.queue_offset == i
        assert m.commit_log_offset == off
        assert m.store_timestamp == r.store_timestamp
        assert m.tags == "t"
        assert m.keys == ["a", "b"]
        assert m.msg_id == ids[i]


def test_offsets_outside_the_log_give_none(store: MessageStore) -> None:
    assert store.look_message_by_offset(0) is None
    assert store.look_message_by_offset(-1) is None
    store.put_message(Message("T", b"x"))
    store.put_message(Message("T", b"y"))
    end = store.get_max_phy_offset()
    assert store.look_message_by_offset(0).body == b"x"
    for offset in (-1, -(2**63), end, end + 1, SEGMENT, 2**62, 2**63 - 1):
        assert store.look_message_by_offset(offset) is None, offset


def test_offset_inside_a_record_is_an_invalid_argument(store: MessageStore) -> None:
    a = store.put_message(Message("T", b"a" * 100, tags="x"))
    b = store.put_message(Message("T", b"b" * 100))
    for offset in (1, 4, 8, 28, 88, a.wrote_bytes - 1, b.wrote_offset + 50):
        with pytest.raises(rmqstore.InvalidArgumentError) as info:
            store.look_message_by_offset(offset)
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, rmqstore.RmqStoreError)
    # The real starts still work afterwards.
    assert store.look_message_by_offset(b.wrote_offset).body == b"b" * 100


def test_offset_on_the_blank_record_or_after_it_is_an_invalid_argument(
    store: MessageStore,
) -> None:
    results = [store.put_message(Message("T", b"f" * 9000)) for _ in range(8)]
    assert results[-1].wrote_offset == SEGMENT  # the 8th rolled over
    blank_at = results[-2].wrote_offset + results[-2].wrote_bytes
    assert blank_at < SEGMENT
    for offset in (blank_at, blank_at + 4, blank_at + 8, SEGMENT - 1):
        with pytest.raises(rmqstore.InvalidArgumentError):
            store.look_message_by_offset(offset)
    assert store.look_message_by_offset(SEGMENT).body == b"f" * 9000


def test_record_forged_inside_a_body_is_not_a_message(store: MessageStore) -> None:
    """A body may contain bytes that look like a record; an offset pointing there is still not
    the start of a message (its PHYSICALOFFSET field does not name that offset)."""
    forged = encode_record(topic="Forged", body=b"evil", physical_offset=999_999, queue_offset=5)
    r = store.put_message(Message("T", b"prefix" + forged + b"suffix"))
    assert r.ok
    inner = r.wrote_offset + 88 + len(b"prefix")  # body starts at 88 with IPv4 hosts
    try:
        got = store.look_message_by_offset(inner)
    except rmqstore.InvalidArgumentError:
        return
    pytest.fail(f"a forged record was returned as a message: {got!r}")


def test_min_phy_offset(store: MessageStore) -> None:
    assert store.get_min_phy_offset() == -1
    store.put_message(Message("T", b"x"))
    assert store.get_min_phy_offset() == 0
    for _ in range(20):
        store.put_message(Message("T", b"y" * 9000))
    assert store.get_max_phy_offset() > 2 * SEGMENT
    assert store.get_min_phy_offset() == 0


def test_max_phy_offset_grows_by_wrote_bytes(store: MessageStore) -> None:
    assert store.get_max_phy_offset() == 0
    expected = 0
    for i in range(200):
        if i % 7 == 0:
            r = store.put_messages("T", i % 3, [b"z" * (i * 13 % 700)] * (1 + i % 4))
        else:
            r = store.put_message(Message("T", b"z" * (i * 37 % 2000), queue_id=i % 3))
        assert r.ok
        if r.wrote_offset != expected:
            # A roll: the record opens the next segment.
            assert r.wrote_offset == (expected // SEGMENT + 1) * SEGMENT
            assert expected + r.wrote_bytes + 8 > r.wrote_offset
        expected = r.wrote_offset + r.wrote_bytes
        assert store.get_max_phy_offset() == expected
    assert expected > 2 * SEGMENT


def test_flush_returns_the_max_offset(store: MessageStore) -> None:
    assert store.flush() == 0
    for _ in range(30):
        store.put_message(Message("T", b"q" * 5000))
    assert store.get_max_phy_offset() > 2 * SEGMENT
    assert store.flush() == store.get_max_phy_offset()


# -- property test: anything put comes back the same --------------------------------------------

_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
    min_size=1,
    max_size=20,
)
_topic = st.from_regex(r"[%|a-zA-Z0-9_-]{1,127}", fullmatch=True) | st.from_regex(
    r"%RETRY%[a-z]{121,200}", fullmatch=True
)
_host = st.one_of(
    st.ip_addresses(v=4).map(str).flatmap(lambda ip: st.integers(0, 65535).map(lambda p: (ip, p))),
    st.ip_addresses(v=6)
    .map(lambda a: f"[{a}]")
    .flatmap(lambda ip: st.integers(0, 65535).map(lambda p: (ip, p))),
)


_message_args = st.fixed_dictionaries(
    {
        "topic": _topic,
        "body": st.binary(max_size=3000),
        "properties": st.dictionaries(_text, _text, max_size=6),
        "queue_id": st.integers(0, 2**31 - 1),
        "flag": st.integers(-(2**31), 2**31 - 1),
        "born_timestamp": st.integers(-(2**63), 2**63 - 1),
        "born_host": st.none() | _host,
    }
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=80)
@given(args=_message_args)
def test_put_then_look_round_trips(store: MessageStore, args: dict) -> None:
    topic, body, properties = args["topic"], args["body"], args["properties"]
    queue_id, flag, born_timestamp = args["queue_id"], args["flag"], args["born_timestamp"]
    born_host = args["born_host"]
    host = None if born_host is None else f"{born_host[0]}:{born_host[1]}"
    before = store.get_max_phy_offset()
    r = store.put_message(
        Message(
            topic,
            body,
            properties=properties,
            queue_id=queue_id,
            flag=flag,
            born_timestamp=born_timestamp,
            born_host=host,
        )
    )
    assert r.status is PutMessageStatus.PUT_OK
    assert store.get_max_phy_offset() == r.wrote_offset + r.wrote_bytes
    assert r.wrote_offset == before or r.wrote_offset % SEGMENT == 0
    m = store.look_message_by_offset(r.wrote_offset)
    assert m.topic == topic
    assert m.body == body
    assert m.properties == properties
    assert m.queue_id == queue_id
    assert m.flag == flag
    assert m.born_timestamp == born_timestamp
    assert m.queue_offset == r.queue_offset
    assert m.commit_log_offset == r.wrote_offset
    assert m.store_size == r.wrote_bytes
    assert m.body_crc == zlib.crc32(body) & 0x7FFFFFFF
    assert m.msg_id == r.msg_id
    if born_host is None:
        assert m.born_host == "127.0.0.1:10911"
        assert m.sys_flag == 0
    else:
        got_ip, _, got_port = m.born_host.rpartition(":")
        assert ipaddress.ip_address(got_ip.strip("[]")) == ipaddress.ip_address(
            born_host[0].strip("[]")
        )
        assert int(got_port) == born_host[1]
        assert m.sys_flag == (0x10 if born_host[0].startswith("[") else 0)
    props_len = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in properties.items())
    assert m.store_size == record_length(
        len(body), len(topic), props_len, born_v6=bool(m.sys_flag & 0x10)
    )


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
@given(
    bodies=st.lists(st.binary(max_size=500), min_size=1, max_size=20),
    tags=st.none() | _text.filter(lambda s: s.strip() != ""),
)
def test_batch_round_trips(store: MessageStore, bodies, tags) -> None:
    r = store.put_messages("Batch", 0, bodies, tags=tags)
    assert r.ok
    assert r.msg_num == len(bodies)
    got = [store.look_message_by_offset(o) for o in r.record_offsets]
    assert [m.body for m in got] == bodies
    assert [m.queue_offset for m in got] == list(
        range(r.queue_offset, r.queue_offset + len(bodies))
    )
    assert {m.store_timestamp for m in got} == {r.store_timestamp}
    assert all(m.tags == tags for m in got)
