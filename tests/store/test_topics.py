"""config/topics.json: RocketMQ's TopicConfigManager file, kept so that a broker serves the
store's topics (issue 15 item 17). The real broker reading it is tests/interop/test_broker.py."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
import rmqstore
from rmqstore import Message, MessageStore
from rmqstore._services import TopicConfigService
from rmqstore.topics import TopicConfigManager
from rmqwire import snapshot

LOGGER = "rmqstore.topics"

#: What a RocketMQ 5.5.1 broker writes (fastjson2, pretty: tabs), abridged: system topics, a
#: read-only topic with attributes, an ordered one, and a top-level key rmqstore does not know.
BROKER_FILE = """{
\t"dataVersion":{
\t\t"counter":7,
\t\t"stateVersion":3,
\t\t"timestamp":1700000000000
\t},
\t"futureKey":{"x":[1,2]},
\t"topicConfigTable":{
\t\t"SCHEDULE_TOPIC_XXXX":{
\t\t\t"attributes":{},
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":18,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"SCHEDULE_TOPIC_XXXX",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":18
\t\t},
\t\t"Orders":{
\t\t\t"attributes":{"+message.type":"FIFO"},
\t\t\t"order":true,
\t\t\t"perm":4,
\t\t\t"readQueueNums":2,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"Orders",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":2
\t\t},
\t\t"Wide":{
\t\t\t"attributes":{},
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":8,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"Wide",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":8
\t\t}
\t}
}"""


def topics_file(store_path: Path) -> Path:
    return store_path / "config" / "topics.json"


def read_topics(store_path: Path) -> dict[str, Any]:
    return json.loads(topics_file(store_path).read_text(encoding="utf-8"))


def put(store: MessageStore, topic: str, queue_id: int) -> None:
    assert store.put_message(Message(topic, b"x", queue_id=queue_id)).ok


def test_shape_is_rocketmq_topic_config_table(open_store, store_path: Path) -> None:
    t0 = int(time.time() * 1000)
    store = open_store()
    assert not topics_file(store_path).exists()  # nothing to say yet
    for q in (0, 1, 5):
        put(store, "TopicA", q)
    put(store, "Single", 0)
    store.close()
    doc = read_topics(store_path)
    assert list(doc) == ["dataVersion", "topicConfigTable"]
    version = doc["dataVersion"]
    assert list(version) == ["counter", "stateVersion", "timestamp"]
    assert version["counter"] >= 1
    assert version["stateVersion"] == 0
    assert t0 <= version["timestamp"] <= int(time.time() * 1000)
    # Field names and order as TopicConfig serialised by fastjson2; queue 5 is covered.
    assert doc["topicConfigTable"] == {
        "TopicA": {
            "attributes": {},
            "order": False,
            "perm": 6,
            "readQueueNums": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicName": "TopicA",
            "topicSysFlag": 0,
            "writeQueueNums": 6,
        },
        "Single": {
            "attributes": {},
            "order": False,
            "perm": 6,
            "readQueueNums": 1,
            "topicFilterType": "SINGLE_TAG",
            "topicName": "Single",
            "topicSysFlag": 0,
            "writeQueueNums": 1,
        },
    }
    assert list(doc["topicConfigTable"]["TopicA"]) == sorted(doc["topicConfigTable"]["TopicA"])


def test_a_brokers_entries_are_kept_and_only_grown(open_store, store_path: Path) -> None:
    (store_path / "config").mkdir(parents=True)
    topics_file(store_path).write_text(BROKER_FILE, encoding="utf-8")
    store = open_store()
    put(store, "Orders", 3)  # beyond the broker's 2 queues: grown to 4
    put(store, "Wide", 1)  # within 8: unchanged
    put(store, "SCHEDULE_TOPIC_XXXX", 20)  # a system topic: the broker's business
    put(store, "Fresh", 0)
    store.close()
    before = json.loads(BROKER_FILE)
    doc = read_topics(store_path)
    assert doc["futureKey"] == {"x": [1, 2]}
    assert doc["dataVersion"]["stateVersion"] == 3
    assert doc["dataVersion"]["counter"] > 7
    table = doc["topicConfigTable"]
    assert table["SCHEDULE_TOPIC_XXXX"] == before["topicConfigTable"]["SCHEDULE_TOPIC_XXXX"]
    assert table["Wide"] == before["topicConfigTable"]["Wide"]
    assert table["Orders"] == {
        **before["topicConfigTable"]["Orders"],
        "readQueueNums": 4,
        "writeQueueNums": 4,
    }
    assert table["Fresh"]["readQueueNums"] == 1
    assert set(table) == {"SCHEDULE_TOPIC_XXXX", "Orders", "Wide", "Fresh"}
    # The broker's version is the .bak (the previous version, as ConfigManager.persist).
    bak = json.loads((store_path / "config" / "topics.json.bak").read_text())
    assert set(bak["topicConfigTable"]) <= set(table)


def _config_files(store_path: Path) -> dict[str, tuple[int, int, str]]:
    """The JSON config files as ``snapshot`` gives them. ``timercheck`` is left out: it holds
    the timer's read time, which moves with the clock whether or not anything changed (as
    RocketMQ's does), so it is rewritten by any open that lasts into a new timer slot."""
    return {k: v for k, v in snapshot(store_path / "config").items() if k != "timercheck"}


def test_nothing_is_written_when_nothing_changes(open_store, store_path: Path) -> None:
    store = open_store()
    put(store, "T", 2)
    store.close()
    settled = _config_files(store_path)
    assert "topics.json" in settled
    store = open_store()
    put(store, "T", 1)  # within 3 queues
    store.close()
    assert _config_files(store_path) == settled


def test_written_at_open_for_a_store_without_one(open_store, store_path: Path) -> None:
    """A store written before topics.json was kept (or by RocketMQ's store alone): the open
    writes it, before any put."""
    store = open_store()
    put(store, "Old", 3)
    store.close()
    topics_file(store_path).unlink()
    (store_path / "config" / "topics.json.bak").unlink(missing_ok=True)
    store = open_store()
    assert read_topics(store_path)["topicConfigTable"]["Old"]["readQueueNums"] == 4


def test_the_service_writes_a_new_topic_while_open(open_store, store_path: Path) -> None:
    store = open_store()
    put(store, "Live", 0)
    deadline = time.monotonic() + 10
    while not topics_file(store_path).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert read_topics(store_path)["topicConfigTable"]["Live"]["readQueueNums"] == 1
    put(store, "Live", 2)
    while read_topics(store_path)["topicConfigTable"]["Live"]["readQueueNums"] != 3:
        assert time.monotonic() < deadline, "the service did not grow the queue count"
        time.sleep(0.05)
    stats = store.service_stats()["TopicConfigService"]
    assert stats["alive"] == 1.0
    assert stats["writes"] >= 2
    assert stats["failures"] == 0


def test_close_covers_what_the_last_puts_made(
    open_store, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the service's rounds far apart, only the close can write the last topic."""
    monkeypatch.setattr(TopicConfigService, "interval", 3600.0)
    store = open_store()
    store._pause_service("ReputMessageService")  # nothing dispatched before the close
    put(store, "Last", 7)
    assert store.dispatch_behind_bytes() > 0
    store.close()
    assert read_topics(store_path)["topicConfigTable"]["Last"]["readQueueNums"] == 8


def test_read_only_store_writes_no_topics_file(open_store, store_path: Path) -> None:
    store = open_store()
    put(store, "T", 0)
    store.close()
    topics_file(store_path).unlink()
    before = snapshot(store_path)
    ro = open_store(read_only=True)
    assert ro.topics() == ["T"]
    ro.close()
    assert snapshot(store_path) == before


# -- the file ------------------------------------------------------------------------------------

MALFORMED = {
    "not_json": b"{",
    "table_is_list": b'{"topicConfigTable": []}',
    "entry_is_string": b'{"topicConfigTable": {"T": "x"}}',
    "queue_nums_string": b'{"topicConfigTable": {"T": {"readQueueNums": "3"}}}',
    "queue_nums_past_int": b'{"topicConfigTable": {"T": {"writeQueueNums": 2147483648}}}',
    "perm_float": b'{"topicConfigTable": {"T": {"perm": 6.0}}}',
    "order_string": b'{"topicConfigTable": {"T": {"order": "true"}}}',
    "attributes_not_strings": b'{"topicConfigTable": {"T": {"attributes": {"a": 1}}}}',
    "data_version_list": b'{"dataVersion": [], "topicConfigTable": {}}',
    "counter_string": b'{"dataVersion": {"counter": "1"}, "topicConfigTable": {}}',
    "duplicate_topic": b'{"topicConfigTable": {"T": {}, "T": {}}}',
}


@pytest.mark.parametrize("bad", list(MALFORMED))
def test_malformed_file_falls_back_to_bak_or_names_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: str
) -> None:
    config = tmp_path / "config"
    with TopicConfigManager(config) as m:
        m.cover({"A": 2})
        m.cover({"B": 1})  # .bak: A only
    (config / "topics.json").write_bytes(MALFORMED[bad])
    with caplog.at_level(logging.WARNING, logger=LOGGER), TopicConfigManager(config) as m:
        assert m.queue_nums("A") == (2, 2)
        assert m.queue_nums("B") is None
    assert str(config / "topics.json") in caplog.text
    (config / "topics.json").write_bytes(MALFORMED[bad])
    (config / "topics.json.bak").unlink()
    before = snapshot(config)
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        TopicConfigManager(config)
    assert info.value.path == str(config / "topics.json")
    assert snapshot(config) == before


def test_store_open_fails_on_an_unusable_file_and_releases_the_folder(
    open_store, store_path: Path
) -> None:
    (store_path / "config").mkdir(parents=True)
    topics_file(store_path).write_bytes(MALFORMED["queue_nums_string"])
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        MessageStore(store_path)
    assert info.value.path == str(topics_file(store_path))
    topics_file(store_path).write_text(BROKER_FILE)
    store = open_store()  # not locked by the failed open
    assert store.topics() == []


def test_symlinked_topics_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text(BROKER_FILE)
    (config / "topics.json").symlink_to(outside)
    with pytest.raises(rmqstore.StoreCorruptedError, match="symbolic link"):
        TopicConfigManager(config)
    assert outside.read_text() == BROKER_FILE


def test_cover_arguments(tmp_path: Path) -> None:
    with TopicConfigManager(tmp_path / "config") as m:
        with pytest.raises(rmqstore.ArgumentTypeError):
            m.cover({"T": 1.5})  # type: ignore[dict-item]
        with pytest.raises(rmqstore.InvalidArgumentError, match="queue count"):
            m.cover({"T": 0})
        assert not m.cover({})
        assert m.cover({"T": 2**31 - 1})
        assert m.queue_nums("T") == (2**31 - 1, 2**31 - 1)
        assert not m.cover({"rmq_sys_anything": 3, "TBW102": 1})
    with pytest.raises(rmqstore.StoreClosedError):
        m.cover({"T": 1})
