"""Reads by queue: ``get_message`` statuses and next offsets
(docs/architecture.md#reading-by-queue), batch limits (``testPullSize``, ``isTheBatchFull``) and tag
filtering (docs/format.md#tag-codes)."""

from __future__ import annotations

import enum
from pathlib import Path

import pytest
from rmqstore import GetMessageResult, GetMessageStatus, Message, MessageStore
from rmqwire import CQ_FILE_SIZE, CQ_UNIT_SIZE, commitlog_dir, java_hash, segment_name

S = GetMessageStatus
UNITS_PER_FILE = CQ_FILE_SIZE // CQ_UNIT_SIZE


def fill(store: MessageStore, topic: str, n: int, *, queue_id: int = 0, tags=None) -> list:
    """Puts ``n`` messages with bodies ``b"<topic>-<i>"``; tags from ``tags(i)`` if given."""
    out = []
    for i in range(n):
        tag = tags(i) if callable(tags) else tags
        r = store.put_message(Message(topic, f"{topic}-{i}".encode(), tags=tag, queue_id=queue_id))
        assert r.ok
        out.append(r)
    assert store.wait_dispatched()
    return out


def test_get_message_status_is_rocketmqs_enum(store: MessageStore) -> None:
    """A standard ``enum.Enum`` with the members of RocketMQ's ``GetMessageStatus``, in its
    order, and results carry its members."""
    assert issubclass(GetMessageStatus, enum.Enum)
    assert [m.name for m in GetMessageStatus] == [
        "FOUND",
        "NO_MATCHED_MESSAGE",
        "MESSAGE_WAS_REMOVING",
        "OFFSET_FOUND_NULL",
        "OFFSET_OVERFLOW_BADLY",
        "OFFSET_OVERFLOW_ONE",
        "OFFSET_TOO_SMALL",
        "NO_MATCHED_LOGIC_QUEUE",
        "NO_MESSAGE_IN_QUEUE",
        "OFFSET_RESET",
    ]
    assert store.get_message("g", "None", 0, 0).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    fill(store, "Enum", 1)
    assert store.get_message("g", "Enum", 0, 0).status is GetMessageStatus.FOUND


def check_result(r: GetMessageResult, topic: str, queue_id: int) -> None:
    """Counters agree with the messages, which come in queue order."""
    assert r.message_count == len(r.messages)
    assert r.buffer_total_size == sum(m.store_size for m in r.messages)
    offsets = [m.queue_offset for m in r.messages]
    assert offsets == sorted(set(offsets))
    for m in r.messages:
        assert (m.topic, m.queue_id) == (topic, queue_id)
        assert m.body == f"{topic}-{m.queue_offset}".encode()


def pull_all(
    store: MessageStore, topic: str, subscription, *, queue_id: int = 0, max_msg_nums: int = 32
) -> list[int]:
    """Queue offsets of every message returned while pulling from 0 to the end."""
    got: list[int] = []
    offset = 0
    for _ in range(1000):
        r = store.get_message("g", topic, queue_id, offset, max_msg_nums, subscription)
        check_result(r, topic, queue_id)
        if r.status is S.OFFSET_OVERFLOW_ONE:
            return got
        assert r.status in (S.FOUND, S.NO_MATCHED_MESSAGE), r.status
        assert r.next_begin_offset > offset
        got += [m.queue_offset for m in r.messages]
        offset = r.next_begin_offset
    raise AssertionError("pull did not reach the end")


# -- the status table ------------------------------------------------------------------------


def test_empty_and_unknown_queues(open_small) -> None:
    store = open_small()
    fill(store, "Known", 3)
    for topic, q, offset in [("Known", 1, 0), ("Unknown", 0, 0), ("Unknown", 0, 5)]:
        r = store.get_message("g", topic, q, offset)
        assert r.status is S.NO_MESSAGE_IN_QUEUE
        assert r.next_begin_offset == 0
        assert (r.min_offset, r.max_offset) == (0, 0)
        assert r.messages == []
        assert (r.message_count, r.buffer_total_size) == (0, 0)


def test_offset_overflow_and_found(open_small) -> None:
    store = open_small()
    rs = fill(store, "Q", 10)
    r = store.get_message("g", "Q", 0, 10)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_ONE, 10)
    assert (r.min_offset, r.max_offset, r.messages) == (0, 10, [])
    for offset in (11, 12, 10**12):
        r = store.get_message("g", "Q", 0, offset)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 10)
        assert r.messages == []
    for offset, n in [(0, 32), (0, 4), (3, 4), (9, 32), (6, 1)]:
        r = store.get_message("g", "Q", 0, offset, n)
        assert r.status is S.FOUND
        check_result(r, "Q", 0)
        want = list(range(offset, min(offset + n, 10)))
        assert [m.queue_offset for m in r.messages] == want
        assert r.next_begin_offset == want[-1] + 1
        assert (r.min_offset, r.max_offset) == (0, 10)
        for m in r.messages:
            assert m.commit_log_offset == rs[m.queue_offset].wrote_offset
            assert m.store_timestamp == rs[m.queue_offset].store_timestamp


def test_offset_too_small_for_a_negative_offset(open_small) -> None:
    store = open_small()
    fill(store, "Q", 3)
    r = store.get_message("g", "Q", 0, -1)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_TOO_SMALL, 0)
    assert r.messages == []


def test_offset_too_small_above_zero(open_small, store_path: Path) -> None:
    """A minimum above 0 cannot be made by puts alone; deleting the oldest commitlog segment
    while closed (what expiry does) makes one."""
    store = open_small()
    for i in range(300):
        assert store.put_message(Message("Q", bytes([i % 250]) * 400)).ok
    store.close()
    (commitlog_dir(store_path) / segment_name(0)).unlink()
    store = open_small()
    assert store.wait_dispatched()
    lo = store.get_min_offset_in_queue("Q", 0)
    assert 0 < lo < 300
    for offset in (0, lo - 1, -5):
        r = store.get_message("g", "Q", 0, offset)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_TOO_SMALL, lo)
        assert (r.min_offset, r.max_offset) == (lo, 300)
        assert r.messages == []
    r = store.get_message("g", "Q", 0, lo, 1)
    assert r.status is S.FOUND
    assert [m.queue_offset for m in r.messages] == [lo]
    assert r.next_begin_offset == lo + 1


def test_no_matched_message_advances_past_filtered_units(open_small) -> None:
    """All filtered: NO_MATCHED_MESSAGE, next past the scanned units, which stop at the end of
    the consume queue segment (one segment per call)."""
    assert UNITS_PER_FILE == 50
    store = open_small()
    fill(store, "F", 120, tags="TagA")
    for offset, nxt in [(0, 50), (13, 50), (50, 100), (99, 100), (100, 120), (119, 120)]:
        r = store.get_message("g", "F", 0, offset, 32, "TagB")
        assert r.status is S.NO_MATCHED_MESSAGE, offset
        assert r.next_begin_offset == nxt, offset
        assert r.messages == []
        assert (r.message_count, r.buffer_total_size) == (0, 0)


def test_filtered_scan_is_bounded_by_max_filter_message_size(open_small) -> None:
    """Without a segment end in the way, a filtered scan covers
    max(maxFilterMessageSize, maxMsgNums * 20) bytes of units: 800 units by default."""
    store = open_small(mapped_file_size_consume_queue=20 * 5000)
    fill(store, "F", 1000, tags="TagA")
    r = store.get_message("g", "F", 0, 0, 32, "TagB")
    assert (r.status, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 800)
    r = store.get_message("g", "F", 0, 100, 900, "TagB")  # 900 * 20 bytes > 16000
    assert (r.status, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 1000)


def test_found_after_filtered_units(open_small) -> None:
    store = open_small()
    fill(store, "F", 20, tags=lambda i: "TagB" if i in (5, 9) else "TagA")
    r = store.get_message("g", "F", 0, 0, 1, "TagB")
    assert r.status is S.FOUND
    assert [m.queue_offset for m in r.messages] == [5]
    assert r.next_begin_offset == 6  # batch full: last returned + 1
    r = store.get_message("g", "F", 0, 6, 32, "TagB")
    assert [m.queue_offset for m in r.messages] == [9]
    assert r.status is S.FOUND
    assert r.next_begin_offset == 20  # the filtered units after it were scanned too


# -- batch limits ------------------------------------------------------------------------------


def test_pull_size(open_small) -> None:
    """DefaultMessageStoreTest.testPullSize: 32 small messages; maxMsgNums 32/20/10."""
    store = open_small()
    fill(store, "PullSize", 32)
    for n in (32, 20, 10):
        r = store.get_message("g", "PullSize", 0, 0, n)
        assert r.status is S.FOUND
        assert r.message_count == n
        assert [m.queue_offset for m in r.messages] == list(range(n))
        assert r.next_begin_offset == n
        check_result(r, "PullSize", 0)


def test_in_memory_count_limit(open_small) -> None:
    store = open_small(max_transfer_count_on_message_in_memory=5)
    fill(store, "C", 30)
    r = store.get_message("g", "C", 0, 0, 32)
    assert [m.queue_offset for m in r.messages] == [0, 1, 2, 3, 4]
    assert r.next_begin_offset == 5


def test_in_memory_byte_limit_caps_a_batch_but_never_below_one(open_small) -> None:
    store = open_small()
    rs = fill(store, "B", 40)
    size = rs[10].wrote_bytes
    assert all(x.wrote_bytes == size for x in rs[10:])  # bodies "B-10" .. "B-39"
    store.close()
    for limit, per_pull in [(3 * size + size // 2, 3), (3 * size, 3), (size, 1), (10, 1)]:
        store = open_small(max_transfer_bytes_on_message_in_memory=limit)
        r = store.get_message("g", "B", 0, 10, 32)
        assert r.status is S.FOUND
        assert [m.queue_offset for m in r.messages] == list(range(10, 10 + per_pull)), limit
        assert r.buffer_total_size == per_pull * size
        assert r.next_begin_offset == 10 + per_pull
        if per_pull == 1:
            assert pull_all(store, "B", "*") == list(range(40))
        store.close()


def test_pull_never_crosses_a_consume_queue_segment(open_small) -> None:
    assert UNITS_PER_FILE == 50
    store = open_small()
    fill(store, "Seg", 120)
    r = store.get_message("g", "Seg", 0, 40, 32)
    assert [m.queue_offset for m in r.messages] == list(range(40, 50))
    assert r.next_begin_offset == 50
    r = store.get_message("g", "Seg", 0, r.next_begin_offset, 32)
    assert [m.queue_offset for m in r.messages] == list(range(50, 82))
    assert r.next_begin_offset == 82
    r = store.get_message("g", "Seg", 0, 99, 32)
    assert [m.queue_offset for m in r.messages] == [99]
    assert r.next_begin_offset == 100
    assert pull_all(store, "Seg", "*") == list(range(120))


# -- tag filtering -----------------------------------------------------------------------------

MIXED = ["TagA", "TagB", None, "TagC", "TagA", "", "TagB", "TagA || TagB", "tagA", "TagA "]


@pytest.mark.parametrize(
    ("subscription", "matching"),
    [
        ("*", None),
        (None, None),
        ("", None),
        ("TagA", {"TagA"}),
        ("TagA || TagB", {"TagA", "TagB"}),
        ("  TagA||TagB  ", {"TagA", "TagB"}),
        ("TagB ||TagA|| TagA", {"TagA", "TagB"}),
        ("TagC", {"TagC"}),
        ("TagZ", set()),
    ],
)
def test_tag_subscriptions(open_small, subscription, matching) -> None:
    """``*``, None and empty take everything, messages without tags included; a tag list
    takes exactly the messages whose TAGS equals one of its (trimmed) tags."""
    store = open_small()
    fill(store, "Tags", 3 * len(MIXED), tags=lambda i: MIXED[i % len(MIXED)])
    if matching is None:
        want = list(range(3 * len(MIXED)))
    else:
        want = [i for i in range(3 * len(MIXED)) if MIXED[i % len(MIXED)] in matching]
    assert pull_all(store, "Tags", subscription) == want
    assert pull_all(store, "Tags", subscription, max_msg_nums=2) == want


def test_tag_hash_collision_never_returns_the_other_tag(open_small) -> None:
    """ "Aa" and "BB" have the same Java hashCode, so their consume queue units carry the same
    tags code; the real tag string decides."""
    assert java_hash("Aa") == java_hash("BB") == 2112
    store = open_small()
    tags = ["Aa", "BB", "BB", "Aa", "BB", None, "Aa"] * 9
    fill(store, "Coll", len(tags), tags=lambda i: tags[i])
    for sub, take in [("Aa", {"Aa"}), ("BB", {"BB"}), ("Aa || BB", {"Aa", "BB"})]:
        want = [i for i, t in enumerate(tags) if t in take]
        assert pull_all(store, "Coll", sub) == want, sub
        assert pull_all(store, "Coll", sub, max_msg_nums=1) == want, sub
    # Colliding units are scanned past, never returned.
    r = store.get_message("g", "Coll", 0, 1, 1, "Aa")
    assert [m.queue_offset for m in r.messages] == [3]
    assert r.next_begin_offset == 4
    r = store.get_message("g", "Coll", 0, 4, 32, "Aa")
    assert [m.tags for m in r.messages] == ["Aa"] * len(r.messages)
    # Only colliding units in range: nothing matched, but the scan moved past them.
    fill(store, "OnlyBB", 5, tags="BB")
    r = store.get_message("g", "OnlyBB", 0, 0, 32, "Aa")
    assert (r.status, r.next_begin_offset, r.messages) == (S.NO_MATCHED_MESSAGE, 5, [])


def test_tags_ending_in_unicode_spaces_can_be_subscribed_to(open_small) -> None:
    """Issue 15 item 13: RocketMQ trims each tag of a subscription with Java's String.trim(),
    which strips only code points up to U+0020; a tag ending in a no-break, line-separator or
    ideographic space is subscribed to as it was stored."""
    store = open_small()
    tags = ["Paid\u00a0", "Paid\u2028", "\u3000Paid", "Paid"]
    for t in tags:
        assert store.put_message(Message("Uni", t.encode(), tags=t)).ok
    assert store.wait_dispatched()
    for t in tags:
        r = store.get_message("g", "Uni", 0, 0, 32, f" {t}\t|| Other ")
        assert r.status is GetMessageStatus.FOUND, repr(t)
        assert [m.tags for m in r.messages] == [t]
    r = store.get_message("g", "Uni", 0, 0, 32, "\x01Paid\x1f")
    assert [m.tags for m in r.messages] == ["Paid"]
