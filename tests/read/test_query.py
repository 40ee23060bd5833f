"""Index files (docs/format.md#index-files) and ``query_message``: lookup by KEYS entry or UNIQ_KEY.

The files are decoded with the independent reader in ``rmqwire``; ``query_message`` must give
exact key matches only, newest first, even when key hashes collide.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import rmqstore
from rmqstore import Message, MessageStore, PutMessageResult
from rmqwire import (
    INT_MIN,
    SMALL_STORE,
    index_dir,
    index_file_size,
    index_key_hash,
    index_keys,
    java_hash,
    read_commitlog,
    read_index_files,
    string_with_java_hash,
)

SLOTS = SMALL_STORE["max_hash_slot_num"]
ENTRIES = SMALL_STORE["max_index_num"]


def put(store: MessageStore, topic: str, body: bytes = b"x", **kw) -> PutMessageResult:
    r = store.put_message(Message(topic, body, **kw))
    assert r.ok, r.status
    return r


def query(store: MessageStore, topic: str, key: str, **kw) -> list[int]:
    """Commitlog offsets of what ``query_message`` returns, in its order."""
    found = store.query_message(topic, key, **kw)
    for m in found:
        assert m.topic == topic
        assert key in m.keys or m.properties.get("UNIQ_KEY") == key
    return [m.commit_log_offset for m in found]


def newest_first(rs: list[PutMessageResult]) -> list[int]:
    return [r.wrote_offset for r in reversed(rs)]


# -- files -----------------------------------------------------------------------------------


def index_file_time(name: str) -> float:
    """Seconds since the epoch of a ``yyyyMMddHHmmssSSS`` name (local time)."""
    tm = time.strptime(name[:14], "%Y%m%d%H%M%S")
    return time.mktime(tm) + int(name[14:]) / 1000


def test_index_files_decode_and_hold_every_key(open_small, store_path: Path) -> None:
    t0 = time.time()
    store = open_small()
    min_key = string_with_java_hash("Idx#", INT_MIN)  # abs(MIN_VALUE) is negative in Java -> 0
    rs = []
    for i in range(60):
        if i in (33, 45):
            # Message 33 starts the third file (3 entries a message, 2 for message 7, 49 a
            # file): its first entry is timed against the previous file's end, 1 s earlier.
            # Message 45 is mid-file: its entries are >= 1 s after the file's begin.
            time.sleep(1.05)
        keys = [f"k{i}", "shared"] if i != 7 else [min_key]
        rs.append(put(store, "Idx", b"b%d" % i, keys=keys, properties={"UNIQ_KEY": f"U{i:04d}"}))
    put(store, "Idx", b"no keys at all")
    put(store, "Other", keys="x  y")  # empty items of KEYS are not indexed
    assert store.wait_dispatched()
    t1 = time.time()

    def check() -> None:
        records = sorted(read_commitlog(store_path).items())
        expected = [
            (index_key_hash(k), off, rec.store_timestamp)
            for off, rec in records
            for k in index_keys(rec)
        ]
        assert len(expected) == 60 * 3 - 1 + 2
        files = read_index_files(store_path, SLOTS, ENTRIES)
        size = index_file_size(SLOTS, ENTRIES)
        assert size == 40 + 64 * 4 + 50 * 20
        assert all(p.stat().st_size == size for p in index_dir(store_path).iterdir())
        # Capacity is max_index_num - 1 entries; then a new file.
        per_file = ENTRIES - 1
        assert len(files) == -(-len(expected) // per_file)
        names = [f.name for f in files]
        assert names == sorted(set(names))
        for name in names:
            assert len(name) == 17
            assert name.isdigit()
            assert t0 - 2 <= index_file_time(name) <= t1 + 2
        got = []
        prev_end_ts = 0
        for j, f in enumerate(files):
            want = expected[j * per_file : (j + 1) * per_file]
            h = f.header
            assert h.index_count == len(want) + 1
            entries = f.entries[1:]
            got += [(e.key_hash, e.phy_offset) for e in entries]
            assert (h.begin_phy_offset, h.end_phy_offset) == (want[0][1], want[-1][1])
            assert (h.begin_timestamp, h.end_timestamp) == (want[0][2], want[-1][2])
            slot_of = [e.key_hash % SLOTS for e in entries]
            assert h.hash_slot_count == len(set(slot_of))
            for s in range(SLOTS):
                numbers = [n for n, x in enumerate(slot_of, start=1) if x == s]
                assert f.slots[s] == (numbers[-1] if numbers else 0)
            for n, e in enumerate(entries, start=1):
                older = [m for m in range(1, n) if slot_of[m - 1] == slot_of[n - 1]]
                assert e.prev_index == (older[-1] if older else 0)
                # The first entry is timed against the header begin before it is set: the
                # previous file's end (0 for the first file: diff 0).
                base = h.begin_timestamp if n > 1 else prev_end_ts
                ts = want[n - 1][2]
                assert e.time_diff == (max(0, (ts - base) // 1000) if base > 0 else 0)
            prev_end_ts = h.end_timestamp
        assert got == [(kh, off) for kh, off, _ in expected]
        third = files[2]
        assert third.header.begin_phy_offset == rs[33].wrote_offset
        assert third.entries[1].time_diff >= 1
        assert third.entries[2].time_diff == 0
        assert third.entries[-1].time_diff >= 1
        # Every key leads (through its slot chain) to its record.
        for off, rec in records:
            for k in index_keys(rec):
                assert any(off in f.lookup(k) for f in files), k
        assert index_key_hash(f"Idx#{min_key}") == 0
        assert any(e is not None and e.key_hash == 0 for f in files for e in f.entries)

    check()
    store.close()
    check()


# -- query_message -----------------------------------------------------------------------------


def test_query_by_keys_entry_and_by_uniq_key(open_small) -> None:
    store = open_small()
    a = put(store, "Q", keys=["order-1", "customer-9"], properties={"UNIQ_KEY": "AC1E0001"})
    b = put(store, "Q", keys="order-10")
    c = put(store, "Q", properties={"UNIQ_KEY": "order-1"})  # a UNIQ_KEY equal to a key
    batch = store.put_messages("Q", 2, [b"1", b"2", b"3"], keys=["bk"])
    assert batch.ok
    assert store.wait_dispatched()
    assert query(store, "Q", "order-1") == [c.wrote_offset, a.wrote_offset]
    assert query(store, "Q", "customer-9") == [a.wrote_offset]
    assert query(store, "Q", "AC1E0001") == [a.wrote_offset]
    assert query(store, "Q", "order-10") == [b.wrote_offset]
    assert query(store, "Q", "bk") == batch.record_offsets[::-1]
    for missing in ["order", "order-", "order-100", "ORDER-1", "AC1E000", "", " "]:
        assert query(store, "Q", missing) == [], missing
    found = store.query_message("Q", "customer-9")
    assert found[0].body == b"x"
    assert found[0].keys == ["order-1", "customer-9"]
    assert found[0].msg_id == a.msg_id


def test_query_exact_under_key_hash_collisions(open_small, store_path: Path) -> None:
    """ "Q#Aa" and "Q#BB" have the same hash, so they share index slot chains."""
    assert java_hash("Q#Aa") == java_hash("Q#BB")
    store = open_small()
    aa, bb = [], []
    for i in range(12):
        if i % 3 == 0:
            aa.append(put(store, "Q", keys="Aa"))
        else:
            bb.append(put(store, "Q", keys=["BB"]))
    u = put(store, "Q", properties={"UNIQ_KEY": "BB"})
    assert store.wait_dispatched()
    files = read_index_files(store_path, SLOTS, ENTRIES)
    hashes = {e.key_hash for f in files for e in f.entries if e is not None}
    assert hashes == {index_key_hash("Q#Aa")}
    assert query(store, "Q", "Aa") == newest_first(aa)
    assert query(store, "Q", "BB") == newest_first([*bb, u])


def test_collisions_do_not_crowd_out_real_matches(open_small) -> None:
    """One "Aa" message, then more newer "BB" messages than one index lookup returns: the
    exact answer is still the "Aa" message."""
    store = open_small(max_index_num=1000)
    aa = put(store, "Q", keys="Aa")
    for _ in range(80):
        put(store, "Q", keys="BB")
    assert store.wait_dispatched()
    assert query(store, "Q", "Aa", max_num=1) == [aa.wrote_offset]
    assert query(store, "Q", "Aa") == [aa.wrote_offset]


def test_newest_first_and_max_num(open_small) -> None:
    store = open_small()
    rs = [put(store, "Q", b"%d" % i, keys="same") for i in range(10)]
    assert store.wait_dispatched()
    assert query(store, "Q", "same") == newest_first(rs)
    assert query(store, "Q", "same", max_num=3) == newest_first(rs)[:3]
    assert query(store, "Q", "same", max_num=1) == [rs[-1].wrote_offset]
    assert query(store, "Q", "same", max_num=10) == newest_first(rs)
    assert query(store, "Q", "same", max_num=11) == newest_first(rs)


def test_max_msgs_num_batch_caps_a_query(open_small) -> None:
    store = open_small(max_msgs_num_batch=4)
    rs = [put(store, "Q", keys="same") for _ in range(10)]
    assert store.wait_dispatched()
    assert query(store, "Q", "same", max_num=32) == newest_first(rs)[:4]
    assert query(store, "Q", "same", max_num=2) == newest_first(rs)[:2]


def test_query_time_range(open_small) -> None:
    """Index entries keep time in whole seconds from the file's first entry; the window is
    still applied to the store timestamps."""
    store = open_small(max_index_num=1000)  # one index file
    first = [put(store, "Q", keys="tk") for _ in range(5)]
    time.sleep(1.1)
    second = [put(store, "Q", keys="tk") for _ in range(5)]
    assert store.wait_dispatched()
    assert second[0].store_timestamp - first[-1].store_timestamp >= 1000
    everything = newest_first(first + second)
    assert query(store, "Q", "tk") == everything
    assert query(store, "Q", "tk", begin_timestamp=first[0].store_timestamp) == everything
    assert query(store, "Q", "tk", end_timestamp=first[-1].store_timestamp) == newest_first(first)
    assert query(
        store, "Q", "tk", begin_timestamp=second[0].store_timestamp - 1000
    ) == newest_first(second)
    assert query(store, "Q", "tk", begin_timestamp=second[-1].store_timestamp + 1) == []
    assert query(store, "Q", "tk", end_timestamp=first[0].store_timestamp - 1) == []
    assert (
        query(
            store,
            "Q",
            "tk",
            begin_timestamp=first[0].store_timestamp,
            end_timestamp=second[-1].store_timestamp,
        )
        == everything
    )


def test_query_time_range_is_exact_to_the_millisecond(open_small) -> None:
    """``query_message`` documents a window in milliseconds: a message stored exactly at
    ``begin_timestamp`` (or ``end_timestamp``) is inside it."""
    store = open_small(max_index_num=1000)
    rs = []
    for _ in range(6):
        time.sleep(0.003)
        rs.append(put(store, "Q", keys="tk"))
    assert store.wait_dispatched()
    ts = [r.store_timestamp for r in rs]
    assert ts == sorted(set(ts))
    for i in range(6):
        got = query(store, "Q", "tk", begin_timestamp=ts[i], end_timestamp=ts[i])
        assert got == [rs[i].wrote_offset], i
    assert query(store, "Q", "tk", begin_timestamp=ts[3]) == newest_first(rs[3:])
    assert query(store, "Q", "tk", begin_timestamp=ts[2] + 1, end_timestamp=ts[4]) == [
        rs[4].wrote_offset,
        rs[3].wrote_offset,
    ]


def test_query_across_several_index_files(open_small, store_path: Path) -> None:
    store = open_small(max_msgs_num_batch=200)
    rs = [put(store, "Q", b"%d" % i, keys=[f"k{i}", "common"]) for i in range(100)]
    assert store.wait_dispatched()
    assert len(list(index_dir(store_path).iterdir())) == -(-200 // (ENTRIES - 1))
    for i, r in enumerate(rs):
        assert query(store, "Q", f"k{i}") == [r.wrote_offset], i
    assert query(store, "Q", "common", max_num=100) == newest_first(rs)
    assert query(store, "Q", "common", max_num=60) == newest_first(rs)[:60]
    assert query(store, "Q", "k1") == [rs[1].wrote_offset]  # not k10..k19


def test_topic_isolation(open_small) -> None:
    """Same key in other topics, including topics whose "topic#key" hashes collide."""
    assert java_hash("Aa#k") == java_hash("BB#k")
    store = open_small()
    mine = [put(store, "Aa", keys="k"), put(store, "Aa", properties={"UNIQ_KEY": "k"})]
    put(store, "BB", keys="k")
    put(store, "BB", properties={"UNIQ_KEY": "k"})
    put(store, "Aa2", keys="k")
    put(store, "A", keys="a#k")  # "A#a#k" is not "Aa#k"
    assert store.wait_dispatched()
    assert query(store, "Aa", "k") == newest_first(mine)
    assert len(query(store, "BB", "k")) == 2
    assert len(query(store, "Aa2", "k")) == 1
    assert query(store, "Nobody", "k") == []


def test_min_value_key_hash(open_small) -> None:
    """A key whose "topic#key" hash is Integer.MIN_VALUE is indexed under hash 0."""
    key = string_with_java_hash("Q#", INT_MIN)
    zero = string_with_java_hash("Q#", 0)  # hashes to slot 0 as well
    store = open_small()
    r = put(store, "Q", keys=key)
    z = put(store, "Q", keys=zero)
    assert store.wait_dispatched()
    assert query(store, "Q", key) == [r.wrote_offset]
    assert query(store, "Q", zero) == [z.wrote_offset]


def test_index_disabled(open_small, store_path: Path) -> None:
    store = open_small(message_index_enable=False)
    put(store, "Q", keys="k", properties={"UNIQ_KEY": "u"})
    assert store.wait_dispatched()
    assert store.query_message("Q", "k") == []
    assert store.query_message("Q", "u") == []
    assert not index_dir(store_path).exists() or not any(index_dir(store_path).iterdir())
    # The consume queue is still built.
    assert store.get_max_offset_in_queue("Q", 0) == 1


def test_query_survives_reopen(open_small) -> None:
    store = open_small()
    rs = [put(store, "Q", keys=[f"k{i % 7}"]) for i in range(70)]
    assert store.wait_dispatched()
    before = {k: query(store, "Q", f"k{k}") for k in range(7)}
    for k in range(7):
        assert before[k] == newest_first([r for i, r in enumerate(rs) if i % 7 == k])
    store.close()
    store = open_small()
    assert {k: query(store, "Q", f"k{k}") for k in range(7)} == before


@pytest.mark.parametrize("abort", [True, False], ids=["after-crash", "clean"])
def test_empty_index_file_left_by_a_crash_is_removed(
    open_small, store_path: Path, caplog: pytest.LogCaptureFixture, abort: bool
) -> None:
    """A crash between creating an index file and sizing it leaves a 0-byte file; the store
    opens (as RocketMQ's does), removes it, and every key is still found."""
    store = open_small()
    rs = [put(store, "Q", keys=[f"k{i}"]) for i in range(30)]
    assert store.wait_dispatched()
    store.close()
    newest = max(p.name for p in index_dir(store_path).iterdir())
    empty = index_dir(store_path) / f"{int(newest) + 1:017d}"
    empty.touch()
    if abort:
        (store_path / "abort").write_bytes(b"")
    # A wrong non-zero size is still refused (and nothing is changed).
    empty.write_bytes(b"x")
    with pytest.raises(rmqstore.StoreCorruptedError, match=empty.name):
        open_small()
    empty.write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="rmqstore.index"):
        store = open_small()
    assert not empty.exists()
    assert any("removing empty index file" in m for m in caplog.messages)
    assert store.recovery_report()["abnormal"] is abort
    assert store.wait_dispatched()
    for i, r in enumerate(rs):
        assert query(store, "Q", f"k{i}") == [r.wrote_offset]
    later = put(store, "Q", keys=["after"])
    assert store.wait_dispatched()
    assert query(store, "Q", "after") == [later.wrote_offset]


# -- tag entries (RocketMQ 5.4+) ----------------------------------------------------------------


def test_index_tags_writes_typed_tag_entries_after_the_keys(open_small, store_path: Path) -> None:
    store = open_small(index_tags=True)
    put(store, "Tg", b"a", tags="TagA", keys=["k1", "k2"], properties={"UNIQ_KEY": "U1"})
    put(store, "Tg", b"b", tags="TagB")
    put(store, "Tg", b"c")  # no TAGS: no tag entry
    put(store, "Tg", b"d", tags="Tag A || spaced", keys="k3")  # the raw value, unsplit
    assert store.wait_dispatched()
    store.close()
    records = sorted(read_commitlog(store_path).items())
    expected = [(index_key_hash(k), off) for off, rec in records for k in index_keys(rec, True)]
    assert len(expected) == 4 + 1 + 0 + 2
    assert index_key_hash("Tg#T#TagA") in [h for h, _ in expected]
    files = read_index_files(store_path, SLOTS, ENTRIES)
    got = [(e.key_hash, e.phy_offset) for f in files for e in f.entries[1:]]
    assert got == expected


def test_query_message_by_tag_is_exact_newest_first_and_survives_reopen(
    open_small, store_path: Path
) -> None:
    store = open_small(index_tags=True)
    # "Aa" and "BB" have the same Java hash: the index cannot tell them apart, the answer can.
    assert java_hash("Tg#T#Aa") == java_hash("Tg#T#BB")
    rs = [put(store, "Tg", b"%d" % i, tags="Aa" if i % 2 else "BB") for i in range(12)]
    put(store, "Other", tags="Aa")
    put(store, "Tg", tags="Aa || BB")
    assert store.wait_dispatched()

    def check(s: MessageStore) -> None:
        aa = s.query_message_by_tag("Tg", "Aa")
        assert [m.commit_log_offset for m in aa] == newest_first(rs[1::2])
        assert all(m.tags == "Aa" and m.topic == "Tg" for m in aa)
        assert [m.commit_log_offset for m in s.query_message_by_tag("Tg", "BB", max_num=2)] == (
            newest_first(rs[0::2])[:2]
        )
        assert s.query_message_by_tag("Tg", "Cc") == []
        assert s.query_message_by_tag("Tg", "k") == []
        # A tag is not a key.
        assert s.query_message("Tg", "Aa") == []

    check(store)
    store.close()
    check(open_small(index_tags=False))  # reading entries already written needs no setting


def test_without_index_tags_no_tag_entries_and_no_tag_answers(open_small, store_path: Path) -> None:
    store = open_small()
    put(store, "Tg", b"a", tags="TagA", keys="k1")
    assert store.wait_dispatched()
    assert store.query_message_by_tag("Tg", "TagA") == []
    assert query(store, "Tg", "k1") != []
    store.close()
    files = read_index_files(store_path, SLOTS, ENTRIES)
    assert [e.key_hash for f in files for e in f.entries[1:]] == [index_key_hash("Tg#k1")]
