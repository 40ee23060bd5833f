"""Topic deletion (issue 19): ``MessageStore.delete_topics`` / ``clean_unused_topics`` /
``clean_expired_consumer_queues`` on real files (RocketMQ's ``DefaultMessageStore.deleteTopics``,
``cleanUnusedTopic``, ``cleanExpiredConsumerQueue``, with the broker's topics.json and consumer
offset clean-up)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import rmqstore
from rmqstore import GetMessageStatus, Message, MessageStore
from rmqstore.errors import ArgumentTypeError, InvalidArgumentError, StoreReadOnlyError


def put(store: MessageStore, topic: str, queue_id: int, body: bytes) -> int:
    r = store.put_message(Message(topic, body, queue_id=queue_id))
    assert r.ok, r
    return r.queue_offset


def bodies(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        r = store.get_message("g", topic, queue_id, offset, 1000)
        if not r.messages:
            return out
        out.extend((m.queue_offset, m.body) for m in r.messages)
        offset = r.next_begin_offset


def topic_table(store_path: Path) -> dict[str, object]:
    doc = json.loads((store_path / "config" / "topics.json").read_text())
    return doc["topicConfigTable"]


def test_delete_topics_removes_queues_queue_offsets_topic_config_and_consumer_offsets(
    open_store, store_path: Path
) -> None:
    store = open_store()
    for q in range(3):
        for i in range(4):
            put(store, "Gone", q, b"g%d" % i)
    put(store, "Stays", 0, b"s")
    assert store.wait_dispatched()
    store.commit_offsets("grp", "Gone", {0: 2, 1: 4})
    store.commit_offset("grp", "Stays", 0, 1)
    store.commit_offset("other", "Gone", 2, 3)
    store.close()
    store = open_store()
    assert set(topic_table(store_path)) == {"Gone", "Stays"}

    assert store.delete_topics(["Gone"]) == 1
    assert store.topics() == ["Stays"]
    assert not (store_path / "consumequeue" / "Gone").exists()
    assert store.get_max_offset_in_queue("Gone", 0) == 0
    r = store.get_message("g", "Gone", 0, 0, 32)
    assert r.status == GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert set(topic_table(store_path)) == {"Stays"}
    assert store.query_offset("grp", "Gone", 0) == -1
    assert store.query_offset("other", "Gone", 2) == -1
    assert store.query_offset("grp", "Stays", 0) == 1
    assert store.consumer_offsets.topics() == ["Stays"]
    # The messages stay in the commitlog until they expire, as in RocketMQ.
    assert store.get_max_phy_offset() > 0
    # Nothing left to delete: 0, and the files are not written again.
    assert store.delete_topics(["Gone", "NeverWas"]) == 0
    assert store.delete_topics([]) == 0


def test_a_deleted_topic_put_again_starts_at_zero_and_stays_deleted_across_reopens(
    open_store, store_path: Path
) -> None:
    store = open_store()
    put(store, "Other", 0, b"o")
    for i in range(200):
        put(store, "T", 1, b"old%d" % i)
    assert store.wait_dispatched()
    assert store.delete_topics(("T",)) == 1
    store.close()
    # The deleted topic's messages were the last ones: a reopen must not dispatch them again.
    store = open_store()
    assert store.topics() == ["Other"]
    assert "T" not in topic_table(store_path)
    assert [put(store, "T", 1, b"new%d" % i) for i in range(3)] == [0, 1, 2]
    assert store.wait_dispatched()
    want = [(i, b"new%d" % i) for i in range(3)]
    assert bodies(store, "T", 1) == want
    assert store.get_min_offset_in_queue("T", 1) == 0
    store.close()
    store = open_store()
    assert bodies(store, "T", 1) == want
    assert put(store, "T", 1, b"new3") == 3


def test_delete_while_a_reader_reads_it_and_a_writer_puts_to_another_topic(open_store) -> None:
    store = open_store()
    for i in range(300):
        put(store, "Doomed", i % 4, b"d")
    assert store.wait_dispatched()
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: set[GetMessageStatus] = set()
    written = [0]

    def reader() -> None:
        try:
            while not stop.is_set():
                for q in range(4):
                    r = store.get_message("g", "Doomed", q, 0, 32)
                    seen.add(r.status)
                    assert all(m.body == b"d" for m in r.messages)
                    store.get_max_offset_in_queue("Doomed", q)
        except BaseException as e:
            errors.append(e)

    def writer() -> None:
        try:
            while not stop.is_set():
                put(store, "Kept", 0, b"k%d" % written[0])
                written[0] += 1
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.2)
        assert store.delete_topics(["Doomed"]) == 1
        time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not errors, errors
    assert GetMessageStatus.FOUND in seen
    assert GetMessageStatus.NO_MESSAGE_IN_QUEUE in seen
    assert store.wait_dispatched()
    kept = bodies(store, "Kept", 0)
    assert kept == [(i, b"k%d" % i) for i in range(written[0])]
    assert store.topics() == ["Kept"]


def test_system_topics_are_refused_by_delete_and_kept_by_clean_unused(
    open_store, store_path: Path
) -> None:
    store = open_store()
    for name in ("A", "B", "rmq_sys_mine", "%LMQ%q"):
        put(store, name, 0, b"x")
    r = store.put_message(Message("Delayed", b"later", delay_level=3))
    assert r.ok
    assert store.wait_dispatched()
    assert "SCHEDULE_TOPIC_XXXX" in store.topics()
    for bad in (["A", "SCHEDULE_TOPIC_XXXX"], ["rmq_sys_mine"], ["TBW102"]):
        with pytest.raises(InvalidArgumentError, match="system topic"):
            store.delete_topics(bad)
    assert "A" in store.topics()
    assert store.clean_unused_topics({"B"}) == 1
    assert store.topics() == ["%LMQ%q", "B", "SCHEDULE_TOPIC_XXXX", "rmq_sys_mine"]
    # The delayed message is still delivered from the schedule topic later: its queue is there.
    assert store.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 2) == 1
    assert store.clean_unused_topics(["B"]) == 0


def test_arguments_are_checked_and_a_read_only_store_refuses(open_store, store_path: Path) -> None:
    store = open_store()
    put(store, "A", 0, b"x")
    assert store.wait_dispatched()
    for bad in ("A", b"A", 7, None, [1], ["A", None]):
        with pytest.raises(ArgumentTypeError):
            store.delete_topics(bad)  # type: ignore[arg-type]
        with pytest.raises(ArgumentTypeError):
            store.clean_unused_topics(bad)  # type: ignore[arg-type]
    for bad in ([""], ["A", "  "]):
        with pytest.raises(InvalidArgumentError, match="blank"):
            store.delete_topics(bad)
    assert store.topics() == ["A"]
    store.flush()
    ro = open_store(read_only=True)
    assert ro.topics() == ["A"]
    for call in (
        lambda: ro.delete_topics(["A"]),
        lambda: ro.clean_unused_topics([]),
        ro.clean_expired_consumer_queues,
    ):
        with pytest.raises(StoreReadOnlyError):
            call()
    # A read-only store beside the writer sees the topic go.
    assert store.delete_topics(["A"]) == 1
    time.sleep(0.03)  # readers look at a queue's folder at most every 10 ms
    assert ro.topics() == []
    assert ro.get_message("g", "A", 0, 0, 32).status == GetMessageStatus.NO_MESSAGE_IN_QUEUE
    store.close()
    with pytest.raises(rmqstore.StoreClosedError):
        store.delete_topics(["A"])


def test_clean_expired_consumer_queues_after_the_first_segments_went(
    open_store, store_path: Path
) -> None:
    body = b"y" * 900
    store = open_store()
    for _ in range(100):
        put(store, "Old", 0, body)
        put(store, "rmq_sys_old", 0, body)
    for _ in range(100):
        put(store, "Old", 1, body)
        put(store, "New", 0, body)
    assert store.wait_dispatched()
    last_old0 = store.get_commit_log_offset_in_queue("Old", 0, 99)
    store.commit_offsets("grp", "Old", {0: 100, 1: 50})
    store.close()
    segments = sorted((store_path / "commitlog").iterdir())
    expired = last_old0 // (64 * 1024) + 1
    assert expired < len(segments) - 1
    for seg in segments[:expired]:
        seg.unlink()
    store = open_store()
    assert store.get_min_phy_offset() == expired * 64 * 1024
    assert store.clean_expired_consumer_queues() == 1
    assert store.topics() == ["New", "Old", "rmq_sys_old"]
    assert store.queue_ids("Old") == [1]
    assert not (store_path / "consumequeue" / "Old" / "0").exists()
    assert (store_path / "consumequeue" / "rmq_sys_old" / "0").exists()
    # The queue starts again at 0: offsets committed in the old numbering are gone with it.
    assert store.query_offset("grp", "Old", 0) == -1
    assert store.query_offset("grp", "Old", 1) == 50
    assert put(store, "Old", 0, b"again") == 0
    assert store.wait_dispatched()
    assert bodies(store, "Old", 0) == [(0, b"again")]
    assert store.clean_expired_consumer_queues() == 0


def test_clean_expired_consumer_queues_after_the_cleaner_removed_segments(
    open_store, store_path: Path
) -> None:
    body = b"y" * 900
    store = open_store()
    for _ in range(100):
        put(store, "Old", 0, body)
    for _ in range(100):
        put(store, "Old", 1, body)
        put(store, "New", 0, body)
    assert store.wait_dispatched()
    store.commit_offset("grp", "Old", 0, 100)
    expired = store.get_commit_log_offset_in_queue("Old", 0, 99) // (64 * 1024) + 1
    assert store.clean_expired_consumer_queues() == 0
    removed = store._core.delete_expired_commit_log_files(0, 0, 0, True, expired)
    assert len(removed) == expired
    # The cleaner's consume queue round first (as the clean service runs it), then this.
    store._core.clean_consume_queues(0)
    assert store.clean_expired_consumer_queues() == 1
    assert store.queue_ids("Old") == [1]
    assert store.query_offset("grp", "Old", 0) == -1
    assert put(store, "Old", 0, b"again") == 0
    assert store.wait_dispatched()
    assert bodies(store, "Old", 0) == [(0, b"again")]
