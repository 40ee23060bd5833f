"""Topic configuration: RocketMQ's broker ``TopicConfigManager`` on ``config/topics.json``.

A RocketMQ broker serves only the topics its ``topics.json`` lists, with the read and write queue
counts given there: without an entry, a broker that loads rmqstore's consume queues answers its
clients "Can not find Message Queue for this topic". rmqstore therefore keeps the file in
RocketMQ's shape (``TopicConfigSerializeWrapper`` serialised by fastjson2, fields in its
order)::

    {"dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 1700000000000},
     "topicConfigTable": {"TopicA": {"attributes": {}, "order": false, "perm": 6,
                                     "readQueueNums": 4, "topicFilterType": "SINGLE_TAG",
                                     "topicName": "TopicA", "topicSysFlag": 0,
                                     "writeQueueNums": 4}}}

rmqstore only adds: every topic with messages gets an entry (read and write queue counts one
past its highest queue id with messages, ``perm`` 6 = read and write, no attributes), and an
entry whose counts do not cover a queue with messages has them grown. Everything else a broker
wrote (its other topics, perms, attributes, order flags, other top-level keys) is kept as it
is. System topics (``TopicValidator.isSystemTopic``: ``SCHEDULE_TOPIC_XXXX``, ``TBW102``,
``rmq_sys_*``, ...) are left to the broker, which defines them itself at start. Each change
moves ``dataVersion`` on (counter + 1, timestamp now), as ``DataVersion.nextVersion``.

The file is written with the same ``ConfigManager`` protocol as ``consumerOffset.json``
(:mod:`rmqstore._configfile`: temp file forced, previous version kept as ``topics.json.bak``,
rename, folder forced; loading falls back to the ``.bak``). Decoding is strict on the fields
it knows (a ``readQueueNums`` that is not a Java ``int`` makes the file undecodable); other
fields are kept verbatim.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from . import _rmqstore
from ._configfile import ConfigManager, UndecodableError, dump_json, is_json_int
from .errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["SYSTEM_TOPICS", "TopicConfigManager", "is_system_topic"]

logger = logging.getLogger("rmqstore.topics")

#: File name under the store's ``config/`` folder (``BrokerPathConfigHelper``).
FILE_NAME = "topics.json"
#: ``PermName.PERM_READ | PermName.PERM_WRITE``.
PERM_READ_WRITE = 6
#: ``TopicConfig.defaultReadQueueNums`` / ``defaultWriteQueueNums``: what the broker assumes
#: for an entry without the field.
DEFAULT_QUEUE_NUMS = 16

#: ``TopicValidator.SYSTEM_TOPIC_SET`` (RocketMQ 5.5.1), from the core's list; names starting
#: with :data:`SYSTEM_TOPIC_PREFIX` are system topics too.
SYSTEM_TOPICS = frozenset(_rmqstore.SYSTEM_TOPICS)
SYSTEM_TOPIC_PREFIX = _rmqstore.SYSTEM_TOPIC_PREFIX

_MIN_INT = -(2**31)
_MAX_INT = 2**31 - 1
_MIN_LONG = -(2**63)
_MAX_LONG = 2**63 - 1

#: Known fields of a ``TopicConfig`` entry and the JSON type each must have when present.
_INT_FIELDS = ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")


def is_system_topic(topic: str) -> bool:
    """``TopicValidator.isSystemTopic``."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def _check_entry(name: str, entry: object) -> dict[str, Any]:
    where = f"topicConfigTable[{name[:200]!r}]"
    if not isinstance(entry, dict):
        raise UndecodableError(f"{where} is not an object")
    for field in _INT_FIELDS:
        if field in entry:
            value = entry[field]
            if not is_json_int(value) or not _MIN_INT <= value <= _MAX_INT:
                raise UndecodableError(f"{where}.{field} {str(value)[:40]} is not a Java int")
    if "order" in entry and not isinstance(entry["order"], bool):
        raise UndecodableError(f"{where}.order is not a boolean")
    for field in ("topicName", "topicFilterType"):
        if field in entry and not isinstance(entry[field], (str, type(None))):
            raise UndecodableError(f"{where}.{field} is not a string")
    attributes = entry.get("attributes")
    if attributes is not None and (
        not isinstance(attributes, dict) or not all(isinstance(v, str) for v in attributes.values())
    ):
        raise UndecodableError(f"{where}.attributes is not an object of strings")
    return entry


def _decode(doc: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The document without its table, and the table; raises ``UndecodableError``."""
    if not isinstance(doc, dict):
        raise UndecodableError("top level is not an object")
    table = doc.pop("topicConfigTable", None)
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise UndecodableError("topicConfigTable is not an object")
    version = doc.get("dataVersion")
    if version is not None:
        if not isinstance(version, dict):
            raise UndecodableError("dataVersion is not an object")
        for field in ("counter", "stateVersion", "timestamp"):
            value = version.get(field, 0)
            if not is_json_int(value) or not _MIN_LONG <= value <= _MAX_LONG:
                raise UndecodableError(f"dataVersion.{field} is not a Java long")
    return doc, {name: _check_entry(name, entry) for name, entry in table.items()}


def new_entry(topic: str, queue_nums: int) -> dict[str, Any]:
    """A ``TopicConfig`` as fastjson2 writes it: fields in name order, read and write queue
    counts ``queue_nums``, read-write, ``SINGLE_TAG``, not ordered, no attributes."""
    return {
        "attributes": {},
        "order": False,
        "perm": PERM_READ_WRITE,
        "readQueueNums": queue_nums,
        "topicFilterType": "SINGLE_TAG",
        "topicName": topic,
        "topicSysFlag": 0,
        "writeQueueNums": queue_nums,
    }


class TopicConfigManager(ConfigManager[tuple[dict[str, Any], dict[str, dict[str, Any]]]]):
    """The topic table of a store, ``<config_dir>/topics.json`` (see the module documentation).

    Loaded at construction with the ``.bak`` fallback (a warning names the file passed over);
    when neither file is usable :class:`~rmqstore.errors.StoreCorruptedError` (``.path``) is
    raised and nothing changes. :meth:`cover` adds and grows entries and writes the file when
    something changed; writes are durable when they return and serialised by a lock.
    """

    def __init__(self, config_dir: str | os.PathLike[str]) -> None:
        super().__init__(config_dir, FILE_NAME, _decode, "topic config", logger)
        self._doc, self._table = self._loaded if self._loaded is not None else ({}, {})
        self.writes = 0

    # -- reading ---------------------------------------------------------------------------

    def topic_config_table(self) -> dict[str, dict[str, Any]]:
        """Every entry, as the file holds it (a deep copy)."""
        with self._lock:
            self._check_open()
            return {name: _copy(entry) for name, entry in self._table.items()}

    def queue_nums(self, topic: str) -> tuple[int, int] | None:
        """(readQueueNums, writeQueueNums) of ``topic``, or None when it has no entry."""
        with self._lock:
            self._check_open()
            entry = self._table.get(topic)
        if entry is None:
            return None
        return (
            entry.get("readQueueNums", DEFAULT_QUEUE_NUMS),
            entry.get("writeQueueNums", DEFAULT_QUEUE_NUMS),
        )

    def data_version(self) -> dict[str, int] | None:
        with self._lock:
            self._check_open()
            version = self._doc.get("dataVersion")
            return dict(version) if isinstance(version, dict) else None

    # -- writing ---------------------------------------------------------------------------

    def cover(self, queues: Mapping[str, int]) -> bool:
        """Makes every topic of ``queues`` (topic -> how many queues it needs: its highest
        queue id with messages + 1) readable and writable by a broker: adds an entry, or grows
        the read and write queue counts of one that has fewer. System topics are skipped.
        Writes the file (durably) when something changed; returns whether it did."""
        changes: dict[str, dict[str, Any]] = {}
        with self._lock:
            self._check_open()
            for topic, needed in queues.items():
                if not isinstance(topic, str) or not is_json_int(needed):
                    raise ArgumentTypeError("queues must map topic names to queue counts")
                if not 0 < needed <= _MAX_INT:
                    raise InvalidArgumentError(
                        f"queue count of topic {topic[:200]!r} must be between 1 and "
                        f"{_MAX_INT}, got {needed}"
                    )
                if is_system_topic(topic):
                    continue
                entry = self._table.get(topic)
                if entry is None:
                    changes[topic] = new_entry(topic, needed)
                    continue
                read = entry.get("readQueueNums", DEFAULT_QUEUE_NUMS)
                write = entry.get("writeQueueNums", DEFAULT_QUEUE_NUMS)
                if read < needed or write < needed:
                    grown = _copy(entry)
                    grown["readQueueNums"] = max(read, needed)
                    grown["writeQueueNums"] = max(write, needed)
                    changes[topic] = grown
            if not changes:
                return False
            table = {**self._table, **changes}
            doc = dict(self._doc)
            doc["dataVersion"] = _next_version(doc.get("dataVersion"))
            self._file.replace(_encode(doc, table))
            self._doc, self._table = doc, table
            self.writes += 1
            self._file.sync_dir()
        logger.info(
            "topic config: %s now covers %s%s",
            self._file.path,
            ", ".join(sorted(changes)[:20]),
            " ..." if len(changes) > 20 else "",
        )
        return True

    def delete_topic_configs(self, topics: Iterable[str]) -> list[str]:
        """Removes the entries of ``topics`` (the broker's ``deleteTopicConfig``, which a
        topic's deletion calls) and writes the file (durably) when one was there; returns the
        topics whose entries went, sorted."""
        with self._lock:
            self._check_open()
            gone = sorted({t for t in topics if t in self._table})
            if not gone:
                return []
            table = {name: entry for name, entry in self._table.items() if name not in gone}
            doc = dict(self._doc)
            doc["dataVersion"] = _next_version(doc.get("dataVersion"))
            self._file.replace(_encode(doc, table))
            self._doc, self._table = doc, table
            self.writes += 1
            self._file.sync_dir()
        logger.info("topic config: %s no longer lists %s", self._file.path, ", ".join(gone[:20]))
        return gone


def _copy(entry: dict[str, Any]) -> dict[str, Any]:
    out = dict(entry)
    if isinstance(out.get("attributes"), dict):
        out["attributes"] = dict(out["attributes"])
    return out


def _next_version(version: object) -> dict[str, Any]:
    """``DataVersion.nextVersion``: counter + 1, timestamp now, other fields as they were."""
    old = version if isinstance(version, dict) else {}
    new = dict(old)
    new["counter"] = min(old.get("counter", 0) + 1, _MAX_LONG)
    new.setdefault("stateVersion", 0)
    new["timestamp"] = int(time.time() * 1000)
    return {key: new[key] for key in sorted(new)}


def _encode(doc: Mapping[str, Any], table: Mapping[str, Any]) -> bytes:
    out: dict[str, Any] = {}
    out["dataVersion"] = doc["dataVersion"]
    for key, value in doc.items():
        if key != "dataVersion":
            out[key] = value
    out["topicConfigTable"] = dict(table)
    return dump_json(out)
