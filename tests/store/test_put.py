"""Puts: statuses for bad content, queue offsets, timestamps, concurrency, the Message class."""

from __future__ import annotations

import enum
import threading
import time
from pathlib import Path

import pytest
import rmqstore
from rmqstore import Message, MessageStore, PutMessageStatus
from rmqwire import SEGMENT, record_length, scan_segment, segment_files

MiB = 1024 * 1024

ROCKETMQ_STATUSES = [
    "PUT_OK",
    "FLUSH_DISK_TIMEOUT",
    "FLUSH_SLAVE_TIMEOUT",
    "SLAVE_NOT_AVAILABLE",
    "SERVICE_NOT_AVAILABLE",
    "CREATE_MAPPED_FILE_FAILED",
    "MESSAGE_ILLEGAL",
    "PROPERTIES_SIZE_EXCEEDED",
    "OS_PAGE_CACHE_BUSY",
    "UNKNOWN_ERROR",
    "IN_SYNC_REPLICAS_NOT_ENOUGH",
    "PUT_TO_REMOTE_BROKER_FAIL",
    "LMQ_CONSUME_QUEUE_NUM_EXCEEDED",
    "WHEEL_TIMER_FLOW_CONTROL",
    "WHEEL_TIMER_MSG_ILLEGAL",
    "WHEEL_TIMER_NOT_ENABLE",
]


def disk_state(store: MessageStore, store_path: Path) -> tuple[int, dict[str, bytes]]:
    store.flush()
    end = store.get_max_phy_offset()
    # Segments past the end are pre-allocated in the background (they may appear between two
    # looks) and must hold nothing: they count only if they do.
    files = {}
    for p in segment_files(store_path):
        data = p.read_bytes()
        if int(p.name) < end or data.count(0) != len(data):
            files[p.name] = data
    return end, files


def assert_failed(result: rmqstore.PutMessageResult, status: PutMessageStatus) -> None:
    assert result.status is status
    assert not result.ok
    assert result.wrote_offset == -1
    assert result.wrote_bytes == 0
    assert result.msg_id is None
    assert result.msg_num == 0
    assert result.record_offsets == []


def test_put_message_status_is_rocketmqs_enum(store: MessageStore) -> None:
    assert issubclass(PutMessageStatus, enum.Enum)
    assert [m.name for m in PutMessageStatus] == ROCKETMQ_STATUSES
    r = store.put_message(Message("T", b"x"))
    assert r.status is PutMessageStatus.PUT_OK
    assert r.ok
    assert r.msg_num == 1
    assert r.record_offsets == [0]


# -- topics -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "topic",
    [
        "",
        "a" * 128,
        "%RETRY%" + "g" * 249,  # 256 bytes
        "%DLQ%" + "g" * 123,  # 128 bytes, not a retry topic
        "a/b",
        "..",
        "../etc",
        "a b",
        " ",
        "a\tb",
        "café",
        "主题",
        "a.b",
        "a\x00b",
    ],
)
def test_illegal_topic(store: MessageStore, topic: str) -> None:
    assert_failed(store.put_message(Message(topic, b"x")), PutMessageStatus.MESSAGE_ILLEGAL)
    assert_failed(store.put_messages(topic, 0, [b"x"]), PutMessageStatus.MESSAGE_ILLEGAL)
    assert store.get_max_phy_offset() == 0
    assert store.get_min_phy_offset() == -1


@pytest.mark.parametrize(
    "topic", ["a" * 127, "%RETRY%" + "g" * 248, "%DLQ%grp|x_y-1", "A-Z_0-9", "%RETRY%g"]
)
def test_legal_topic(store: MessageStore, topic: str) -> None:
    r = store.put_message(Message(topic, b"x"))
    assert r.status is PutMessageStatus.PUT_OK
    assert store.look_message_by_offset(r.wrote_offset).topic == topic


# -- sizes --------------------------------------------------------------------------------------


def test_default_max_message_size_is_4_mib_of_body(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=16 * MiB)
    ok = store.put_message(Message("Big", bytes(4 * MiB)))
    assert ok.status is PutMessageStatus.PUT_OK
    assert ok.wrote_bytes == record_length(4 * MiB, 3, 0)
    assert store.look_message_by_offset(ok.wrote_offset).body == bytes(4 * MiB)
    before = store.get_max_phy_offset()
    too_big = store.put_message(Message("Big", bytes(4 * MiB + 1)))
    assert_failed(too_big, PutMessageStatus.MESSAGE_ILLEGAL)
    assert_failed(
        store.put_messages("Big", 0, [b"x", bytes(4 * MiB + 1)]), PutMessageStatus.MESSAGE_ILLEGAL
    )
    assert store.get_max_phy_offset() == before


def test_configured_max_message_size(open_store) -> None:
    store = open_store(max_message_size=1000)
    assert store.put_message(Message("T", bytes(1000))).ok
    assert_failed(store.put_message(Message("T", bytes(1001))), PutMessageStatus.MESSAGE_ILLEGAL)
    assert_failed(
        store.put_messages("T", 0, [bytes(10), bytes(1001)]), PutMessageStatus.MESSAGE_ILLEGAL
    )
    assert store.put_messages("T", 0, [bytes(1000)] * 3).ok
    assert store.get_max_phy_offset() == 4 * record_length(1000, 1, 0)


def test_properties_up_to_32767_bytes(store: MessageStore) -> None:
    # "k" + \x01 + value + \x02 = 32767 bytes.
    ok = store.put_message(Message("T", b"x", properties={"k": "v" * 32764}))
    assert ok.status is PutMessageStatus.PUT_OK
    assert store.look_message_by_offset(ok.wrote_offset).properties == {"k": "v" * 32764}
    before = store.get_max_phy_offset()
    over = store.put_message(Message("T", b"x", properties={"k": "v" * 32765}))
    assert_failed(over, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
    # The limit is on UTF-8 bytes: 16384 two-byte characters are 32768 bytes.
    wide = store.put_message(Message("T", b"x", properties={"k": "é" * 16383}))
    assert_failed(wide, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
    many = {f"key{i:05d}": "v" * 20 for i in range(1200)}
    assert_failed(
        store.put_message(Message("T", b"x", properties=many)),
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
    )
    assert_failed(
        store.put_messages("T", 0, [b"x"], properties=many),
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
    )
    assert_failed(
        store.put_message(Message("T", b"x", keys=["k" * 20000, "j" * 20000])),
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
    )
    assert store.get_max_phy_offset() == before


@pytest.mark.parametrize(
    "properties",
    [
        {"k": "a\x01b"},
        {"k": "a\x02b"},
        {"k\x01": "v"},
        {"k\x02x": "v"},
        {"ok": "fine", "bad": "\x02"},
    ],
)
def test_property_with_a_separator_is_illegal(store: MessageStore, properties) -> None:
    assert_failed(
        store.put_message(Message("T", b"x", properties=properties)),
        PutMessageStatus.MESSAGE_ILLEGAL,
    )
    assert_failed(
        store.put_messages("T", 0, [b"x"], properties=properties),
        PutMessageStatus.MESSAGE_ILLEGAL,
    )
    assert store.get_max_phy_offset() == 0


@pytest.mark.parametrize("tags", ["a\x01b", "a\x02"])
def test_tags_with_a_separator_are_illegal(store: MessageStore, tags: str) -> None:
    assert_failed(
        store.put_message(Message("T", b"x", tags=tags)), PutMessageStatus.MESSAGE_ILLEGAL
    )


@pytest.mark.parametrize("queue_id", [-1, -(2**31)])
def test_negative_queue_id_is_illegal(store: MessageStore, queue_id: int) -> None:
    assert_failed(
        store.put_message(Message("T", b"x", queue_id=queue_id)), PutMessageStatus.MESSAGE_ILLEGAL
    )
    assert_failed(store.put_messages("T", queue_id, [b"x"]), PutMessageStatus.MESSAGE_ILLEGAL)
    assert store.get_max_phy_offset() == 0


def test_largest_queue_id_is_accepted(store: MessageStore) -> None:
    r = store.put_message(Message("T", b"x", queue_id=2**31 - 1))
    assert r.ok
    assert store.look_message_by_offset(0).queue_id == 2**31 - 1


def test_empty_batch_is_rejected(store: MessageStore, store_path: Path) -> None:
    store.put_message(Message("T", b"x"))
    before = disk_state(store, store_path)
    r = store.put_messages("T", 0, [])
    assert not r.ok
    assert_failed(r, PutMessageStatus.MESSAGE_ILLEGAL)
    assert_failed(store.put_messages("T", 0, iter(())), PutMessageStatus.MESSAGE_ILLEGAL)
    assert disk_state(store, store_path) == before
    assert store.put_message(Message("T", b"y")).queue_offset == 1


def test_batch_bigger_than_a_segment_is_illegal(store: MessageStore, store_path: Path) -> None:
    store.put_message(Message("T", b"x"))
    before = disk_state(store, store_path)
    # Every body alone is fine, together they exceed one 64 KiB segment.
    r = store.put_messages("T", 0, [bytes(10_000)] * 7)
    assert_failed(r, PutMessageStatus.MESSAGE_ILLEGAL)
    assert disk_state(store, store_path) == before
    fits = store.put_messages("T", 0, [bytes(10_000)] * 6)
    assert fits.ok
    assert fits.queue_offset == 1


def test_record_that_cannot_fit_any_segment_is_illegal(store: MessageStore) -> None:
    started = time.monotonic()
    # The body is under max_message_size (4 MiB) but the record exceeds a 64 KiB segment.
    assert_failed(store.put_message(Message("T", bytes(SEGMENT))), PutMessageStatus.MESSAGE_ILLEGAL)
    # Largest record a segment takes: segment size minus the 8-byte blank record.
    too_big = SEGMENT - 8 + 1 - 92
    assert_failed(store.put_message(Message("T", bytes(too_big))), PutMessageStatus.MESSAGE_ILLEGAL)
    assert time.monotonic() - started < 5
    assert store.get_max_phy_offset() == 0
    largest = store.put_message(Message("T", bytes(too_big - 1)))
    assert largest.ok
    assert largest.wrote_offset == 0
    assert largest.wrote_bytes == SEGMENT - 8
    # After it only the 8-byte blank fits; the next message opens segment 1.
    small = store.put_message(Message("T", b"s"))
    assert small.wrote_offset == SEGMENT
    # A full-size record after a small one rolls to a fresh segment and fits there.
    again = store.put_message(Message("T", bytes(too_big - 1)))
    assert again.ok
    assert again.wrote_offset == 2 * SEGMENT
    assert store.look_message_by_offset(again.wrote_offset).body == bytes(too_big - 1)


# -- rejected puts leave no trace ---------------------------------------------------------------


def test_rejected_puts_change_nothing_and_consume_no_queue_offset(
    open_store, store_path: Path
) -> None:
    store = open_store(max_message_size=2000)
    for i in range(3):
        assert store.put_message(Message("Q", b"ok", queue_id=1)).queue_offset == i
    before = disk_state(store, store_path)
    rejected = [
        store.put_message(Message("Q", bytes(2001), queue_id=1)),
        store.put_message(Message("Q", b"x", queue_id=1, properties={"k": "v" * 40000})),
        store.put_message(Message("Q", b"x", queue_id=1, properties={"k": "\x01"})),
        store.put_message(Message("Q/", b"x", queue_id=1)),
        store.put_messages("Q", 1, [b"x", bytes(2001)]),
        store.put_messages("Q", 1, []),
        store.put_messages("Q", 1, [bytes(2000)] * 40),  # bigger than a segment
    ]
    assert [r.ok for r in rejected] == [False] * len(rejected)
    assert disk_state(store, store_path) == before
    assert store._core.next_queue_offset("Q", 1) == 3
    good = store.put_message(Message("Q", b"good", queue_id=1))
    assert good.queue_offset == 3
    assert good.wrote_offset == before[0]
    batch = store.put_messages("Q", 1, [b"a", b"b"])
    assert batch.queue_offset == 4
    assert store.put_message(Message("Q", b"c", queue_id=1)).queue_offset == 6


def test_queue_offsets_count_per_topic_and_queue(store: MessageStore) -> None:
    expected: dict[tuple[str, int], int] = {}
    plan = [("A", 0), ("A", 1), ("B", 0), ("A", 0), ("B", 0), ("A", 0), ("B", 7), ("A", 1)]
    for topic, qid in plan * 3:
        r = store.put_message(Message(topic, f"{topic}{qid}".encode(), queue_id=qid))
        assert r.queue_offset == expected.get((topic, qid), 0)
        expected[(topic, qid)] = r.queue_offset + 1
        m = store.look_message_by_offset(r.wrote_offset)
        assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, r.queue_offset)
    assert expected == {("A", 0): 9, ("A", 1): 6, ("B", 0): 6, ("B", 7): 3}
    b = store.put_messages("B", 7, [b"1", b"2", b"3"])
    assert b.queue_offset == 3
    assert store.put_message(Message("B", b"x", queue_id=7)).queue_offset == 6
    assert store.put_message(Message("A", b"x", queue_id=1)).queue_offset == 6
    assert store.put_message(Message("A", b"x", queue_id=2)).queue_offset == 0


# -- concurrency --------------------------------------------------------------------------------


def _put_concurrently(store: MessageStore, threads: int, per_thread: int):
    results: list[list[tuple[bytes, int, rmqstore.PutMessageResult]]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                body = f"t{t}-m{i}-".encode() * (1 + (t * 7 + i) % 40)
                if i % 10 == 9:
                    bodies = [body, body + b"!"]
                    r = store.put_messages("Conc", t % 3, bodies)
                    results[t].append((bodies, t % 3, r))
                else:
                    r = store.put_message(Message("Conc", body, queue_id=t % 3))
                    results[t].append(([body], t % 3, r))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not errors
    return [item for per in results for item in per]


def test_concurrent_puts_neither_overlap_nor_get_lost(store: MessageStore) -> None:
    items = _put_concurrently(store, threads=8, per_thread=150)
    assert all(r.ok for _, _, r in items)
    records = []
    for bodies, qid, r in items:
        assert len(r.record_offsets) == len(bodies)
        for i, (off, body) in enumerate(zip(r.record_offsets, bodies, strict=True)):
            records.append((off, body, qid, r.queue_offset + i, r.store_timestamp))
    records.sort()
    assert len({off for off, *_ in records}) == len(records)
    # No two records overlap and nothing is between them except end-of-segment blanks.
    end = 0
    for off, body, qid, qo, _ in records:
        m = store.look_message_by_offset(off)
        assert m.body == body
        assert (m.queue_id, m.queue_offset, m.commit_log_offset) == (qid, qo, off)
        assert off >= end
        if off != end:
            assert off % SEGMENT == 0
            assert off - end < SEGMENT
        end = off + m.store_size
    assert end == store.get_max_phy_offset()
    # Every queue got exactly 0..n-1.
    per_queue: dict[int, list[int]] = {}
    for _, _, qid, qo, _ in records:
        per_queue.setdefault(qid, []).append(qo)
    for offsets in per_queue.values():
        assert sorted(offsets) == list(range(len(offsets)))


def test_store_timestamps_never_decrease_as_offsets_grow(store: MessageStore) -> None:
    items = _put_concurrently(store, threads=6, per_thread=200)
    by_offset = sorted((r.wrote_offset, r.store_timestamp) for _, _, r in items)
    stamps = [ts for _, ts in by_offset]
    assert stamps == sorted(stamps)
    assert stamps[-1] - stamps[0] < 60_000
    # What the records say agrees with the results.
    for off, ts in by_offset[:: max(1, len(by_offset) // 50)]:
        assert store.look_message_by_offset(off).store_timestamp == ts


def test_concurrent_puts_leave_well_formed_segments(store: MessageStore, store_path: Path) -> None:
    items = _put_concurrently(store, threads=4, per_thread=100)
    expected = sorted(off for _, _, r in items for off in r.record_offsets)
    store.flush()
    found = []
    for p in segment_files(store_path):
        base = int(p.name)
        if base > store.get_max_phy_offset():
            continue  # pre-allocated, still empty
        records, _, _ = scan_segment(p.read_bytes())
        found += [base + rec.position for rec in records]
        assert all(rec.physical_offset == base + rec.position for rec in records)
    assert found == expected


# -- the Message class --------------------------------------------------------------------------


def test_message_getters() -> None:
    m = Message(
        "TopicA",
        b"body",
        tags="TagA",
        keys=["k1", "k2"],
        properties={"p": "v"},
        flag=9,
        queue_id=4,
        born_timestamp=1234,
        born_host="10.0.0.1:80",
    )
    assert m.topic == "TopicA"
    assert m.body == b"body"
    assert type(m.body) is bytes
    assert m.tags == "TagA"
    assert m.keys == ["k1", "k2"]
    assert m.properties == {"p": "v", "TAGS": "TagA", "KEYS": "k1 k2"}
    assert m.flag == 9
    assert m.queue_id == 4
    assert m.born_timestamp == 1234
    assert m.born_host == "10.0.0.1:80"
    assert "TopicA" in repr(m)


def test_message_defaults() -> None:
    before = int(time.time() * 1000)
    m = Message("T", b"")
    after = int(time.time() * 1000)
    assert m.body == b""
    assert m.tags is None
    assert m.keys == []
    assert m.properties == {}
    assert m.flag == 0
    assert m.queue_id == 0
    assert before <= m.born_timestamp <= after
    assert m.born_host is None


def test_message_is_immutable() -> None:
    m = Message("T", b"x")
    with pytest.raises(AttributeError):
        m.topic = "U"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        m.body = b"y"  # type: ignore[misc]


def test_born_host_is_normalised_and_checked() -> None:
    assert Message("T", b"", born_host="[0:0::1]:1234").born_host == "[::1]:1234"
    for bad in ["localhost:80", "1.2.3.4", "::1:80", "1.2.3.4:70000", "[::1]", ""]:
        with pytest.raises(rmqstore.InvalidArgumentError) as info:
            Message("T", b"", born_host=bad)
        assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (["k1", "k2"], ["k1", "k2"]),
        (("k1",), ["k1"]),
        ("k1 k2", ["k1", "k2"]),
        ("  k1   k2 ", ["k1", "k2"]),
        ("single", ["single"]),
        ([], []),
        ("", []),
        (None, []),
    ],
)
def test_keys_as_list_or_space_separated_string(
    store: MessageStore, keys, expected: list[str]
) -> None:
    m = Message("T", b"x", keys=keys)
    assert m.keys == expected
    assert m.properties.get("KEYS") == (" ".join(expected) if expected else None)
    r = store.put_message(m)
    ext = store.look_message_by_offset(r.wrote_offset)
    assert ext.keys == expected
    b = store.put_messages("T", 0, [b"y"], keys=keys)
    assert store.look_message_by_offset(b.wrote_offset).keys == expected


@pytest.mark.parametrize("keys", [["a b"], ["ok", "has space"], [""], ["tab\there"]])
def test_key_with_whitespace_in_a_list_is_a_value_error(store: MessageStore, keys) -> None:
    with pytest.raises(ValueError, match="key"):
        Message("T", b"x", keys=keys)
    with pytest.raises(ValueError, match="key"):
        store.put_messages("T", 0, [b"x"], keys=keys)
    assert store.get_max_phy_offset() == 0


def test_keys_must_be_strings() -> None:
    with pytest.raises(TypeError):
        Message("T", b"x", keys=[1, 2])
    with pytest.raises(TypeError):
        Message("T", b"x", keys=5)


def test_tags_or_keys_given_twice_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="TAGS"):
        Message("T", b"x", tags="a", properties={"TAGS": "b"})
    with pytest.raises(ValueError, match="KEYS"):
        Message("T", b"x", keys=["a"], properties={"KEYS": "b"})


@pytest.mark.parametrize("body", ["text", 5, None, [1, 2]])
def test_body_must_be_bytes_like(store: MessageStore, body) -> None:
    with pytest.raises(TypeError):
        Message("T", body)
    with pytest.raises(TypeError):
        store.put_messages("T", 0, [b"ok", body])
    assert store.get_max_phy_offset() == 0


def test_str_body_error_says_to_encode() -> None:
    with pytest.raises(TypeError, match="str"):
        Message("T", "text")


@pytest.mark.parametrize(
    "body",
    [
        bytearray(b"from a bytearray"),
        memoryview(b"from a memoryview"),
        memoryview(b"xxsliced memoryviewxx")[2:-2],
        memoryview(bytearray(b"writable view")),
    ],
)
def test_bytes_like_bodies(store: MessageStore, body) -> None:
    expected = bytes(body)
    m = Message("T", body)
    assert m.body == expected
    r = store.put_message(m)
    assert store.look_message_by_offset(r.wrote_offset).body == expected
    b = store.put_messages("T", 0, [body, expected])
    assert [store.look_message_by_offset(o).body for o in b.record_offsets] == [expected] * 2


def test_message_body_is_a_copy() -> None:
    buf = bytearray(b"abc")
    m = Message("T", buf)
    buf[0] = ord("z")
    assert m.body == b"abc"


def test_put_message_is_the_binding_method_and_answers_as_the_wrapper(
    open_store, store_path: Path
) -> None:
    """An open store's ``put_message`` is the binding's method itself (no Python frame), with
    the wrapper's answers: results, statuses, errors after close."""
    store = open_store()
    assert store.put_message == store._core.put_message
    r = store.put_message(Message("TopicA", b"x", tags="TagA"))
    assert r.ok
    assert r.queue_offset == 0
    assert r.msg_num == 1
    assert MessageStore.put_message(store, Message("TopicA", b"y")).queue_offset == 1
    assert_failed(
        store.put_message(Message("TopicA", b"z", queue_id=-1)), PutMessageStatus.MESSAGE_ILLEGAL
    )
    store.close()
    with pytest.raises(rmqstore.errors.StoreClosedError):
        store.put_message(Message("TopicA", b"z"))


def test_a_subclass_overriding_put_message_keeps_its_own(store_path: Path) -> None:
    seen: list[str] = []

    class Audited(MessageStore):
        def put_message(self, msg: Message) -> rmqstore.PutMessageResult:
            seen.append(msg.topic)
            return super().put_message(msg)

    with Audited(store_path, mapped_file_size_commit_log=SEGMENT) as store:
        assert store.put_message(Message("TopicA", b"x")).ok
    assert seen == ["TopicA"]
