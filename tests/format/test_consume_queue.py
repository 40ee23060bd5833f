"""Consume queues: the files dispatch writes (docs/format.md#consume-queues) and the queue-level
lookups (docs/architecture.md#queue-lookups-and-offsets-by-time).

The files are checked with the independent reader in ``rmqwire``: every unit must point at the
commitlog record it indexes, byte for byte as RocketMQ writes it.
"""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path

import pytest
from rmqstore import GetMessageStatus, Message, MessageStore, PutMessageResult
from rmqwire import (
    CQ_FILE_SIZE,
    CQ_UNIT_SIZE,
    INT_MAX,
    INT_MIN,
    Record,
    commitlog_dir,
    cq_files,
    java_hash,
    read_commitlog,
    read_consume_queue,
    segment_name,
    tags_code,
)

UNITS_PER_FILE = CQ_FILE_SIZE // CQ_UNIT_SIZE


def put(store: MessageStore, msg: Message) -> PutMessageResult:
    r = store.put_message(msg)
    assert r.ok, r.status
    return r


def check_queue(store_path: Path, topic: str, queue_id: int) -> list[Record]:
    """Checks every unit of a queue against the record it points at; returns those records,
    in queue order (the queue must start at offset 0)."""
    records = read_commitlog(store_path)
    first, units = read_consume_queue(store_path, topic, queue_id, CQ_FILE_SIZE)
    assert first == 0
    out = []
    for i, u in enumerate(units):
        rec = records[u.phy_offset]
        assert rec.physical_offset == u.phy_offset
        assert (rec.topic, rec.queue_id, rec.queue_offset) == (topic, queue_id, i)
        assert u.size == rec.total_size
        assert u.tags_code == tags_code(rec.properties.get("TAGS"))
        out.append(rec)
    return out


# -- the hash the files depend on -------------------------------------------------------------


def test_java_hash_helper_matches_java() -> None:
    # Values of java.lang.String.hashCode.
    assert java_hash("") == 0
    assert java_hash("abc") == 96354
    assert java_hash("hello") == 99162322
    assert java_hash("Aa") == java_hash("BB") == 2112
    assert java_hash("polygenelubricants") == INT_MIN
    # Outside the BMP a character is two UTF-16 code units: 0xD83D * 31 + 0xDE00.
    assert java_hash("\U0001f600") == 0xD83D * 31 + 0xDE00
    assert tags_code(None) == tags_code("") == 0


# -- files -----------------------------------------------------------------------------------

TAGS = [
    "TagA",
    None,
    "",
    "标签",  # non-ASCII, BMP
    "tag-\U0001f600",  # a surrogate pair
    "zzzzzzzz",  # negative hash: sign-extended in the unit
    "TagA || TagB",  # a multi-tag string is hashed whole
    "Aa",
    "BB",
]


def test_units_match_the_records_they_point_at(open_small, store_path: Path) -> None:
    assert java_hash("zzzzzzzz") < 0
    store = open_small()
    sent: dict[tuple[str, int], list[tuple[PutMessageResult, str | None]]] = {}
    # Queue 0 gets 130 messages (three segments: 50, 50, 30), queue 1 20, another topic 5;
    # ~90 KiB of records: the commitlog rolls, so units point into two segments.
    for i in range(130):
        for topic, q in [("CqTopic", 0), ("CqTopic", 1), ("Other", 7)]:
            if (q == 1 and i % 6) or (q == 7 and i % 26):
                continue
            tag = TAGS[i % len(TAGS)]
            body = bytes([i % 256]) * (200 + 37 * (i % 17))
            r = put(store, Message(topic, body, tags=tag, queue_id=q))
            sent.setdefault((topic, q), []).append((r, tag))
    # A batch: one store timestamp, consecutive records and queue offsets.
    batch = store.put_messages("CqTopic", 1, [b"b1", b"b2", b"b3"], tags="Batch")
    assert batch.ok
    assert store.wait_dispatched()
    assert len(store.commitlog_segments()) >= 2

    for (topic, q), puts in sent.items():
        records = check_queue(store_path, topic, q)
        expected = [r.wrote_offset for r, _ in puts]
        if (topic, q) == ("CqTopic", 1):
            expected += batch.record_offsets
        assert [rec.physical_offset for rec in records] == expected
        for rec, (_, tag) in zip(records, puts, strict=False):
            assert rec.properties.get("TAGS") == (tag or None)
        assert store.get_max_offset_in_queue(topic, q) == len(expected)
        files = cq_files(store_path, topic, q)
        assert [f.name for f in files] == [
            segment_name(k * CQ_FILE_SIZE) for k in range(-(-len(expected) // UNITS_PER_FILE))
        ]
        assert all(f.stat().st_size == CQ_FILE_SIZE for f in files)

    # Every record of the commitlog is indexed by exactly one unit.
    units = []
    for topic, q in sent:
        units += read_consume_queue(store_path, topic, q, CQ_FILE_SIZE)[1]
    assert sorted(u.phy_offset for u in units) == sorted(read_commitlog(store_path))
    # The tags slot is the sign-extended code, not the 32-bit pattern.
    raw = cq_files(store_path, "CqTopic", 0)[0].read_bytes()
    neg = TAGS.index("zzzzzzzz")
    assert raw[neg * 20 + 12 : neg * 20 + 20] == struct.pack(">q", java_hash("zzzzzzzz"))
    assert raw[neg * 20 + 12 : neg * 20 + 16] == b"\xff\xff\xff\xff"
    # "Aa" and "BB" share one code.
    aa, bb = TAGS.index("Aa"), TAGS.index("BB")
    assert raw[aa * 20 + 12 : aa * 20 + 20] == raw[bb * 20 + 12 : bb * 20 + 20]


def test_consume_queue_folder_appears_with_the_first_dispatched_message(
    open_small, store_path: Path
) -> None:
    store = open_small()
    assert store.topics() == []
    bad = store.put_message(Message("../etc", b"x"))
    assert not bad.ok
    put(store, Message("Fresh", b"x", queue_id=4))
    assert store.wait_dispatched()
    assert store.topics() == ["Fresh"]
    assert store.queue_ids("Fresh") == [4]
    assert [f.name for f in cq_files(store_path, "Fresh", 4)] == [segment_name(0)]
    assert sorted(p.name for p in (store_path / "consumequeue").iterdir()) == ["Fresh"]


# -- queue lookups -----------------------------------------------------------------------------


def test_offsets_totals_topics_and_queue_ids(open_small) -> None:
    store = open_small()
    puts: dict[tuple[str, int], list[PutMessageResult]] = {}
    for i in range(60):
        topic, q = [("Alpha", 0), ("Alpha", 3), ("Beta", 1)][i % 3]
        if q == 3 and i % 2:
            continue
        puts.setdefault((topic, q), []).append(put(store, Message(topic, b"m%d" % i, queue_id=q)))
    assert store.wait_dispatched()

    assert sorted(store.topics()) == ["Alpha", "Beta"]
    assert store.queue_ids("Alpha") == [0, 3]
    assert store.queue_ids("Beta") == [1]
    assert store.queue_ids("Gamma") == []
    for (topic, q), rs in puts.items():
        n = len(rs)
        assert store.get_max_offset_in_queue(topic, q) == n
        assert store.get_min_offset_in_queue(topic, q) == 0
        assert store.get_message_total_in_queue(topic, q) == n
        for i, r in enumerate(rs):
            assert r.queue_offset == i
            assert store.get_commit_log_offset_in_queue(topic, q, i) == r.wrote_offset
            assert store.get_message_store_timestamp(topic, q, i) == r.store_timestamp
        assert store.get_commit_log_offset_in_queue(topic, q, n) == 0
        assert store.get_message_store_timestamp(topic, q, n) == -1
        assert store.get_message_store_timestamp(topic, q, -1) == -1
        assert store.get_earliest_message_time(topic, q) == rs[0].store_timestamp
    for topic, q in [("Alpha", 1), ("Gamma", 0)]:
        assert store.get_max_offset_in_queue(topic, q) == 0
        assert store.get_min_offset_in_queue(topic, q) == 0
        assert store.get_message_total_in_queue(topic, q) == 0
        assert store.get_commit_log_offset_in_queue(topic, q, 0) == 0
        assert store.get_message_store_timestamp(topic, q, 0) == -1
        assert store.get_earliest_message_time(topic, q) == -1
        assert store.get_offset_in_queue_by_time(topic, q, int(time.time() * 1000)) == 0


def test_offset_in_queue_by_time(open_small) -> None:
    """LOWER/UPPER for exact, equal (a batch), between, before-first and after-last times, over
    three consume queue segments (a batch straddles the first segment boundary)."""
    store = open_small()
    ts: list[int] = []

    def single(i: int) -> None:
        time.sleep(0.003)
        ts.append(put(store, Message("Time", b"s%d" % i)).store_timestamp)

    def batch(n: int) -> None:
        time.sleep(0.003)
        r = store.put_messages("Time", 0, [b"b"] * n)
        assert r.ok
        ts.extend([r.store_timestamp] * n)

    for i in range(48):
        single(i)
    batch(4)  # queue offsets 48..51 share one timestamp, across the file boundary at 50
    for i in range(52, 70):
        single(i)
    batch(3)  # 70..72
    for i in range(73, 120):
        single(i)
    assert store.wait_dispatched()
    n = len(ts)
    assert n == 120
    assert len(cq_files(store.store_path, "Time", 0)) == 3
    # Preconditions: times never go back, and differ by >= 2 ms outside the batches.
    assert ts == sorted(ts)
    for i in range(n - 1):
        if not (48 <= i < 51 or 70 <= i < 72):
            assert ts[i + 1] - ts[i] >= 2, i

    def lower(t: int) -> int:
        return store.get_offset_in_queue_by_time("Time", 0, t, "lower")

    def upper(t: int) -> int:
        return store.get_offset_in_queue_by_time("Time", 0, t, "upper")

    for i in [0, 1, 25, 47, 49, 50, 52, 99, 100, 119]:
        if 48 <= i <= 51:
            continue
        assert lower(ts[i]) == i, i
        assert upper(ts[i]) == i, i
        assert store.get_offset_in_queue_by_time("Time", 0, ts[i]) == i  # default LOWER
    assert (lower(ts[48]), upper(ts[48])) == (48, 51)
    assert (lower(ts[70]), upper(ts[70])) == (70, 72)
    for i in [0, 20, 47, 51, 60, 72, 99, 118]:  # strictly between i and i + 1
        assert lower(ts[i] + 1) == i + 1, i
        assert upper(ts[i] + 1) == i, i
    # Before the first message: the first index both ways; after the last: max / last index.
    assert lower(ts[0] - 1) == 0
    assert upper(ts[0] - 1) == 0
    assert lower(0) == 0
    assert lower(ts[-1] + 1) == n
    assert upper(ts[-1] + 1) == n - 1
    assert lower(ts[-1] + 10**9) == n
    assert store.get_earliest_message_time("Time", 0) == ts[0]
    with pytest.raises(ValueError, match="boundary"):
        store.get_offset_in_queue_by_time("Time", 0, ts[0], "middle")  # type: ignore[arg-type]


# -- a queue that does not start at offset 0 ---------------------------------------------------


@pytest.mark.parametrize("rebuild", [False, True], ids=["corrected", "rebuilt"])
def test_queue_above_zero_after_the_oldest_commitlog_segment_is_gone(
    open_small, store_path: Path, rebuild: bool
) -> None:
    """The oldest commitlog segment deleted while closed (what expiry does): the queue minimum
    moves to the first surviving record. Rebuilt from scratch, the queue starts with
    pre-blank units (0, Integer.MAX_VALUE, 0) up to it (docs/format.md#consume-queue-units)."""
    store = open_small()
    rs = [put(store, Message("Exp", bytes([i % 250]) * 400, tags="t")) for i in range(300)]
    store.close()
    assert len(list(commitlog_dir(store_path).iterdir())) >= 3
    (commitlog_dir(store_path) / segment_name(0)).unlink()
    if rebuild:
        shutil.rmtree(store_path / "consumequeue")
    store = open_small()
    assert store.wait_dispatched()
    first = min(i for i, r in enumerate(rs) if r.wrote_offset >= store.get_min_phy_offset())
    assert first > 0
    assert store.get_min_phy_offset() == rs[first].wrote_offset
    assert store.get_min_offset_in_queue("Exp", 0) == first
    assert store.get_max_offset_in_queue("Exp", 0) == 300
    assert store.get_message_total_in_queue("Exp", 0) == 300 - first
    assert store.get_earliest_message_time("Exp", 0) == rs[first].store_timestamp
    assert store.get_message_store_timestamp("Exp", 0, first - 1) == -1
    assert store.get_commit_log_offset_in_queue("Exp", 0, first) == rs[first].wrote_offset
    assert store.get_offset_in_queue_by_time("Exp", 0, 0, "lower") == first
    assert store.get_offset_in_queue_by_time("Exp", 0, 0, "upper") == first
    assert store.get_offset_in_queue_by_time("Exp", 0, rs[first].store_timestamp) == first

    r = store.get_message("g", "Exp", 0, first - 1)
    assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, first)
    r = store.get_message("g", "Exp", 0, first, 1)
    assert r.status is GetMessageStatus.FOUND
    assert r.messages[0].queue_offset == first
    assert r.messages[0].commit_log_offset == rs[first].wrote_offset

    base, units = read_consume_queue(store_path, "Exp", 0, CQ_FILE_SIZE)
    records = read_commitlog(store_path)
    if rebuild:
        # The first file is the one holding `first`, pre-blanked up to it.
        assert base == first - first % UNITS_PER_FILE
        for u in units[: first - base]:
            assert (u.phy_offset, u.size, u.tags_code) == (0, INT_MAX, 0)
    else:
        assert base == 0
    for i, u in enumerate(units[first - base :], start=first):
        assert records[u.phy_offset].queue_offset == i
        assert u.phy_offset == rs[i].wrote_offset
