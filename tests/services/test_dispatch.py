"""Dispatch (reput, docs/architecture.md#dispatch): what makes puts visible to reads by queue and by
key, in ASYNC_FLUSH and SYNC_FLUSH mode, under concurrency, across reopen, after the consume queues
are deleted and after the commitlog's tail is damaged."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import rmqstore
from rmqstore import GetMessageStatus, Message, MessageStore, PutMessageResult
from rmqwire import (
    CQ_FILE_SIZE,
    SMALL_STORE,
    other_thread_ran_inside,
    read_commitlog,
    read_consume_queue,
    read_index_files,
    segment_files,
)

S = GetMessageStatus
SLOTS = SMALL_STORE["max_hash_slot_num"]
ENTRIES = SMALL_STORE["max_index_num"]


def put(store: MessageStore, msg: Message) -> PutMessageResult:
    r = store.put_message(msg)
    assert r.ok, r.status
    return r


def pull(store: MessageStore, topic: str, queue_id: int, offset: int = 0) -> list[Any]:
    """Every message of a queue from ``offset`` to its end."""
    out = []
    for _ in range(10_000):
        r = store.get_message("g", topic, queue_id, offset, 32)
        if r.status is not S.FOUND:
            assert r.status in (S.OFFSET_OVERFLOW_ONE, S.NO_MESSAGE_IN_QUEUE), r.status
            return out
        out += r.messages
        offset = r.next_begin_offset
    raise AssertionError("no end")


# -- ReputMessageServiceTest -----------------------------------------------------------------

KEYS_13 = "1700000000123"


def put_foobar(store: MessageStore) -> list[PutMessageResult]:
    """ReputMessageServiceTest's messages: 32-byte bodies, TAGS=TAG1, a 13-digit KEYS."""
    rs = [
        put(store, Message("FooBar", bytes([i]) * 32, tags="TAG1", keys=KEYS_13)) for i in range(10)
    ]
    assert [r.wrote_bytes for r in rs] == [158] * 10
    assert store.get_max_phy_offset() == 1580
    return rs


def check_foobar_readable(store: MessageStore, rs: list[PutMessageResult]) -> None:
    assert store.get_max_offset_in_queue("FooBar", 0) == 10
    r = store.get_message("g", "FooBar", 0, 0, 32)
    assert r.status is S.FOUND
    assert r.message_count == 10
    assert r.buffer_total_size == 1580
    assert [m.commit_log_offset for m in r.messages] == [x.wrote_offset for x in rs]
    assert [m.body for m in r.messages] == [bytes([i]) * 32 for i in range(10)]
    assert len(store.query_message("FooBar", KEYS_13)) == 10


def test_reput_async_flush_dispatches_everything(open_small) -> None:
    store = open_small(flush_disk_type="ASYNC_FLUSH")
    rs = put_foobar(store)
    assert store.get_confirm_offset() == 1580  # the written end
    assert store.wait_dispatched(timeout=5)
    assert store.dispatch_behind_bytes() == 0
    check_foobar_readable(store, rs)


def test_reput_sync_flush_dispatches_only_what_is_flushed(open_small) -> None:
    # RocketMQ's test mocks the flush service; here the group-commit service is paused, so the
    # puts wait sync_flush_timeout for a force that never comes and answer FLUSH_DISK_TIMEOUT.
    store = open_small(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=20)
    store._pause_service("GroupCommitService")
    rs = put_foobar(store)
    assert {r.status for r in rs} == {rmqstore.PutMessageStatus.FLUSH_DISK_TIMEOUT}
    time.sleep(0.2)  # give dispatch every chance
    assert store.get_confirm_offset() == 0
    assert store.dispatch_behind_bytes() == 0
    assert store.get_max_offset_in_queue("FooBar", 0) == 0
    r = store.get_message("g", "FooBar", 0, 0, 32)
    assert (r.status, r.next_begin_offset, r.messages) == (S.NO_MESSAGE_IN_QUEUE, 0, [])
    assert store.query_message("FooBar", KEYS_13) == []
    assert store.flush() == 1580
    assert store.get_confirm_offset() == 1580
    assert store.wait_dispatched(timeout=5)
    check_foobar_readable(store, rs)


# -- visibility ------------------------------------------------------------------------------


def test_a_put_is_readable_within_milliseconds(open_small) -> None:
    store = open_small()
    worst = 0.0
    for i in range(40):
        r = put(store, Message("Vis", b"v%d" % i, keys=f"vk{i}"))
        start = time.perf_counter()
        while True:
            g = store.get_message("g", "Vis", 0, i, 1)
            if g.status is S.FOUND:
                break
            assert g.status in (S.OFFSET_OVERFLOW_ONE, S.NO_MESSAGE_IN_QUEUE), g.status
            assert time.perf_counter() - start < 2, "not visible after 2 s"
            time.sleep(0.0002)
        worst = max(worst, time.perf_counter() - start)
        assert g.messages[0].commit_log_offset == r.wrote_offset
        if i % 10 == 0:
            time.sleep(0.05)  # let dispatch park, so the next put must wake it
    assert worst < 0.2, f"worst visibility delay {worst * 1000:.1f} ms"
    assert store.wait_dispatched(timeout=2)
    assert store.dispatch_behind_bytes() == 0
    assert [m.commit_log_offset for m in store.query_message("Vis", "vk39")] == [r.wrote_offset]


def test_dispatch_behind_bytes_returns_to_zero(open_small) -> None:
    store = open_small()
    seen = []
    for i in range(2000):
        put(store, Message("Behind", b"x" * 100, queue_id=i % 4))
        if i % 100 == 0:
            seen.append(store.dispatch_behind_bytes())
    end = store.get_max_phy_offset()
    assert store.get_confirm_offset() == end
    assert all(0 <= b <= end for b in seen)
    assert store.wait_dispatched(timeout=10)
    assert store.dispatch_behind_bytes() == 0
    assert sum(store.get_max_offset_in_queue("Behind", q) for q in range(4)) == 2000


def test_the_dispatch_call_lets_other_python_threads_run(open_store) -> None:
    """The service's Rust call (parse records, append consume queue units, put index keys) runs
    with the GIL released: another Python thread keeps running meanwhile."""
    store = open_store(mapped_file_size_commit_log=256 << 20)
    store._pause_service("ReputMessageService")
    bodies = [b"g" * 128] * 1000
    for _ in range(600):
        assert store.put_messages("Gil", 0, bodies, tags="T", keys=["a", "b"]).ok
    step, ran = other_thread_ran_inside(lambda: store._core.dispatch_step(1 << 30, 0, 60_000))
    assert (step.dispatched, step.behind) == (600_000, 0)
    assert store.get_max_offset_in_queue("Gil", 0) == 600_000
    assert ran > 0, "another Python thread never ran while dispatch worked"


# -- concurrency -----------------------------------------------------------------------------


def test_concurrent_producers_and_readers(open_small) -> None:
    """Producers put singles and batches into three queues while a reader pulls every queue
    (and a second one pulls one producer's tag): each message is read exactly once, in queue
    offset order, with the queue offset its put got."""
    store = open_small()
    producers, per_producer, queues = 4, 1500, 3
    put_offsets: dict[bytes, tuple[int, int]] = {}  # body -> (queue, queue offset)
    lock = threading.Lock()
    errors: list[BaseException] = []
    done = threading.Event()

    def produce(t: int) -> None:
        try:
            for i in range(per_producer):
                q = (t + i) % queues
                if i % 20 == 0:
                    bodies = [f"{t}:{i}:{j}".encode() for j in range(3)]
                    r = store.put_messages("Conc", q, bodies, tags=f"T{t}")
                    assert r.ok
                    placed = {b: (q, r.queue_offset + j) for j, b in enumerate(bodies)}
                else:
                    body = f"{t}:{i}".encode()
                    r = put(store, Message("Conc", body, tags=f"T{t}", queue_id=q))
                    placed = {body: (q, r.queue_offset)}
                with lock:
                    put_offsets.update(placed)
        except BaseException as e:
            errors.append(e)

    total = producers * (per_producer + 2 * (per_producer // 20))
    got: dict[int, list[tuple[int, bytes]]] = {q: [] for q in range(queues)}
    tagged: list[bytes] = []

    def read_all() -> None:
        try:
            offsets = dict.fromkeys(range(queues), 0)
            deadline = time.monotonic() + 30
            while sum(len(v) for v in got.values()) < total:
                assert time.monotonic() < deadline, "reader timed out"
                for q in range(queues):
                    r = store.get_message("g", "Conc", q, offsets[q], 16)
                    if r.status is S.FOUND:
                        got[q] += [(m.queue_offset, m.body) for m in r.messages]
                        offsets[q] = r.next_begin_offset
                    else:
                        assert r.status in (S.OFFSET_OVERFLOW_ONE, S.NO_MESSAGE_IN_QUEUE)
                        assert r.next_begin_offset == offsets[q] or r.max_offset == 0
        except BaseException as e:
            errors.append(e)

    def read_tag() -> None:
        try:
            offsets = dict.fromkeys(range(queues), 0)
            while not done.is_set() or any(
                offsets[q] < store.get_max_offset_in_queue("Conc", q) for q in range(queues)
            ):
                for q in range(queues):
                    r = store.get_message("g", "Conc", q, offsets[q], 8, "T1")
                    if r.status in (S.FOUND, S.NO_MATCHED_MESSAGE):
                        tagged.extend(m.body for m in r.messages)
                        offsets[q] = r.next_begin_offset
                time.sleep(0.0005)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(t,), daemon=True) for t in range(producers)]
    readers = [
        threading.Thread(target=read_all, daemon=True),
        threading.Thread(target=read_tag, daemon=True),
    ]
    for th in readers + threads:
        th.start()
    for th in [*threads, readers[0]]:
        th.join(timeout=60)
    assert store.wait_dispatched()
    done.set()
    readers[1].join(timeout=60)
    assert not errors, errors
    assert len(put_offsets) == total
    for q in range(queues):
        offsets = [o for o, _ in got[q]]
        assert offsets == list(range(len(offsets))), q
        for o, body in got[q]:
            assert put_offsets[body] == (q, o)
        # Each producer's messages keep their order within a queue.
        for t in range(producers):
            mine = [b for _, b in got[q] if b.startswith(b"%d:" % t)]
            seq = [tuple(int(x) for x in b.split(b":")[1:]) for b in mine]
            assert seq == sorted(seq)
    assert sum(len(v) for v in got.values()) == total
    assert sorted(tagged) == sorted(b for b in put_offsets if b.startswith(b"1:"))
    assert len(tagged) == len(set(tagged))


# -- reopen and rebuild ----------------------------------------------------------------------


def populate(store: MessageStore) -> None:
    for i in range(240):
        topic, q = [("RA", 0), ("RA", 1), ("RB", 0), ("RA", 0)][i % 4]
        tags = [None, "TagA", "TagB", "Aa", "BB"][i % 5]
        put(
            store,
            Message(
                topic,
                bytes([i % 256]) * (100 + 13 * (i % 31)),
                tags=tags,
                keys=[f"k{i}", f"g{i % 9}"],
                properties={"UNIQ_KEY": f"U{i}"},
                queue_id=q,
            ),
        )
        if i % 60 == 0:
            assert store.put_messages(topic, q, [b"a", b"b"], tags="Batch", keys="bk").ok
    assert store.wait_dispatched()


def view(store: MessageStore) -> dict[Any, Any]:
    """Everything the read API says about the store."""
    out: dict[Any, Any] = {"topics": sorted(store.topics()), "max_phy": store.get_max_phy_offset()}
    for topic in out["topics"]:
        out[topic] = store.queue_ids(topic)
        for q in out[topic]:
            msgs = pull(store, topic, q)
            out[topic, q] = (
                store.get_min_offset_in_queue(topic, q),
                store.get_max_offset_in_queue(topic, q),
                store.get_message_total_in_queue(topic, q),
                store.get_earliest_message_time(topic, q),
                [
                    (
                        m.queue_offset,
                        m.commit_log_offset,
                        m.store_size,
                        m.body,
                        m.tags,
                        m.keys,
                        m.properties,
                        m.store_timestamp,
                        m.msg_id,
                    )
                    for m in msgs
                ],
                [store.get_message("g", topic, q, 0, 32, sub).message_count for sub in TAG_SUBS],
            )
        for key in ["k0", "k17", "k239", "g0", "g4", "U5", "U238", "bk"]:
            out[topic, key] = [m.commit_log_offset for m in store.query_message(topic, key)]
    return out


TAG_SUBS = ["*", "TagA", "Aa", "BB", "TagA || Batch"]


def cq_bytes(store_path: Path) -> dict[str, bytes]:
    root = store_path / "consumequeue"
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def index_content(store_path: Path) -> list[Any]:
    """Index files without their names (which are creation times)."""
    return [(f.header, f.slots, f.entries) for f in read_index_files(store_path, SLOTS, ENTRIES)]


@pytest.mark.parametrize("removed", [(), ("consumequeue",), ("consumequeue", "index")])
def test_reopen_reads_identically(open_small, store_path: Path, removed: tuple[str, ...]) -> None:
    """Close and reopen; with the consume queues (and the index) deleted while closed, they are
    rebuilt from the commitlog byte for byte."""
    store = open_small()
    populate(store)
    before = view(store)
    assert len(before["topics"]) == 2
    assert len(segment_files(store_path)) >= 2
    store.close()
    files_before = cq_bytes(store_path)
    index_before = index_content(store_path)
    assert len(index_before) > 3
    for name in removed:
        shutil.rmtree(store_path / name)
    store = open_small()
    assert store.wait_dispatched()
    assert view(store) == before
    assert cq_bytes(store_path) == files_before
    index_after = index_content(store_path)
    if removed == ("consumequeue",):
        # Re-dispatch skips records below the last index file's end offset (IndexService's
        # `commitLogOffset < endPhyOffset`), so only the record at that offset may be indexed
        # again; queries drop the duplicate.
        assert index_after[:-1] == index_before[:-1]
        header, _, entries = index_before[-1]
        entries_after = index_after[-1][2]
        assert entries_after[: len(entries)] == entries
        again = entries_after[len(entries) :]
        if again:
            assert all(e.phy_offset == header.end_phy_offset for e in again)
            assert [e.key_hash for e in again] == [e.key_hash for e in entries[-len(again) :]]
    else:
        assert index_after == index_before
    # And it keeps going: queue offsets continue.
    r = put(store, Message("RA", b"after", queue_id=1, keys="after"))
    assert r.queue_offset == before["RA", 1][1]
    assert store.wait_dispatched()
    assert pull(store, "RA", 1, r.queue_offset)[0].body == b"after"
    assert [m.commit_log_offset for m in store.query_message("RA", "after")] == [r.wrote_offset]


# -- a damaged commitlog tail ----------------------------------------------------------------


def damage_tail(open_small, store_path: Path) -> tuple[list[PutMessageResult], int]:
    """300 messages over two queues, then one body byte flipped in the newest commitlog
    segment, 4 records before its end, while closed. Returns the puts and the damaged offset."""
    store = open_small()
    rs = [
        put(
            store,
            Message("D", bytes([i % 256]) * 500, tags="t", queue_id=i % 2, keys=[f"key{i}", "all"]),
        )
        for i in range(300)
    ]
    assert store.wait_dispatched()
    store.close()
    newest = segment_files(store_path)[-1]
    base = int(newest.name)
    assert base > 0
    records = sorted((off, rec) for off, rec in read_commitlog(store_path).items() if off >= base)
    victim_offset, victim = records[-4]
    data = bytearray(newest.read_bytes())
    data[victim.position + victim.body_at + 7] ^= 0xFF
    newest.write_bytes(bytes(data))
    assert victim_offset == rs[-4].wrote_offset
    return rs, victim_offset


def test_damaged_commitlog_tail_is_cut_from_queues_and_queries(
    open_small, store_path: Path
) -> None:
    rs, cut = damage_tail(open_small, store_path)
    store = open_small()
    assert store.wait_dispatched()
    assert store.get_max_phy_offset() == cut
    kept = [i for i, r in enumerate(rs) if r.wrote_offset < cut]
    lost = [i for i, r in enumerate(rs) if r.wrote_offset >= cut]
    assert len(lost) == 4
    for q in (0, 1):
        mine = [i for i in kept if i % 2 == q]
        assert store.get_max_offset_in_queue("D", q) == len(mine)
        assert [m.commit_log_offset for m in pull(store, "D", q)] == [
            rs[i].wrote_offset for i in mine
        ]
        # The consume queue's units (up to its max) all point before the cut.
        _, units = read_consume_queue(store_path, "D", q, CQ_FILE_SIZE)
        assert all(u.phy_offset + u.size <= cut for u in units[: len(mine)])
    for i in lost:
        r = store.get_message("g", "D", i % 2, rs[i].queue_offset)
        assert r.status in (S.OFFSET_OVERFLOW_ONE, S.OFFSET_OVERFLOW_BADLY)
        assert r.messages == []
        assert store.query_message("D", f"key{i}") == []
        assert store.get_message_store_timestamp("D", i % 2, rs[i].queue_offset) == -1
    for i in kept[-5:] + kept[:3]:
        assert [m.commit_log_offset for m in store.query_message("D", f"key{i}")] == [
            rs[i].wrote_offset
        ]
    assert [m.commit_log_offset for m in store.query_message("D", "all", max_num=3)] == [
        rs[i].wrote_offset for i in kept[::-1][:3]
    ]


def test_damaged_commitlog_tail_leaves_no_index_entry_past_the_end(
    open_small, store_path: Path
) -> None:
    _, cut = damage_tail(open_small, store_path)
    store = open_small()
    assert store.wait_dispatched()
    assert store.get_max_phy_offset() == cut
    past = [
        (f.name, n, e.phy_offset)
        for f in read_index_files(store_path, SLOTS, ENTRIES)
        for n, e in enumerate(f.entries)
        if e is not None and e.phy_offset >= cut
    ]
    assert past == []


def test_puts_after_a_damaged_tail_are_dispatched_and_indexed(open_small, store_path: Path) -> None:
    rs, cut = damage_tail(open_small, store_path)
    store = open_small()
    new = [
        put(store, Message("D", b"new%d" % i, queue_id=i % 2, keys=[f"new{i}", f"key{296 + i}"]))
        for i in range(6)
    ]
    assert new[0].wrote_offset == cut  # the damaged records' space is reused
    assert store.wait_dispatched()
    for q in (0, 1):
        msgs = pull(store, "D", q)
        assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
        ours = [r.wrote_offset for i, r in enumerate(rs) if r.wrote_offset < cut and i % 2 == q]
        ours += [r.wrote_offset for i, r in enumerate(new) if i % 2 == q]
        assert [m.commit_log_offset for m in msgs] == ours
        base, units = read_consume_queue(store_path, "D", q, CQ_FILE_SIZE)
        assert base == 0
        assert [u.phy_offset for u in units[: len(ours)]] == ours
    for i, r in enumerate(new):
        assert [m.commit_log_offset for m in store.query_message("D", f"new{i}")] == [
            r.wrote_offset
        ], i
        # The key of a lost message now names only the new one.
        assert [m.commit_log_offset for m in store.query_message("D", f"key{296 + i}")] == [
            r.wrote_offset
        ], i
