"""Consumer offsets: RocketMQ's broker ``ConsumerOffsetManager`` on ``config/consumerOffset.json``.

The file has RocketMQ's shape (docs/format.md#consumeroffsetjson)::

    {"offsetTable": {"topic@group": {"0": 12, "1": 7}}}

Loading also reads what RocketMQ's fastjson writes, whose queue-id keys are bare numbers
(``{0:12,1:7}``); other top-level keys (``"dataVersion"``, ...) are kept and written back.

Every commit is durable when it returns. A commit writes the whole table to
``consumerOffset.json.tmp``, forces it, moves the current file to ``consumerOffset.json.bak``,
renames the temp file into place and forces the folder. Loading falls back to the ``.bak`` file
when the file is missing, empty or undecodable (deleting the bad file, as ``ConfigManager.load``
does), so a crash at any step leaves either the new table or the previous one
(:mod:`rmqstore._configfile`).

What loading accepts, entry by entry (RocketMQ's decoder, fastjson2, reads more; this one never
guesses):

* ``offsetTable`` is an object (missing or ``null``: no offsets); each ``topic@group`` value is
  an object (``null`` is undecodable, as for RocketMQ); keys without ``'@'`` are kept as they
  are and never answer a query (RocketMQ keeps them too);
* a queue id is a decimal Java ``int`` written plainly (``"0"``, ``"17"``, ``"-1"``): ``"0_0"``,
  ``"+1"``, ``"01"``, ``"-0"``, ``"1.0"``, ``"0x1"``, ``" 0"`` and ids outside a Java ``int``
  make the file undecodable
  (fastjson2 reads ``"0_0"`` as 0, silently replacing queue 0's offset);
* an offset is a JSON integer within a Java ``long``: strings, fractions, booleans, ``null``
  and longer numbers make the file undecodable;
* a key appearing twice in one object makes the file undecodable (fastjson2 keeps the last);
* negative offsets (and negative queue ids) are kept, as RocketMQ keeps them, but they mean
  "no offset": the broker answers a query for one with ``QUERY_NOT_FOUND`` and so
  :meth:`ConsumerOffsetManager.query_offset` answers ``-1``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ._configfile import ConfigManager, UndecodableError, dump_json, is_json_int
from .errors import (
    ArgumentOverflowError,
    ArgumentTypeError,
    InvalidArgumentError,
)

__all__ = ["ConsumerOffsetManager"]

logger = logging.getLogger("rmqstore.offsets")

#: File name under the store's ``config/`` folder (BrokerPathConfigHelper).
FILE_NAME = "consumerOffset.json"
#: RocketMQ's ``TOPIC_GROUP_SEPARATOR``: table keys are ``topic@group``.
SEPARATOR = "@"
#: ``queryOffset``'s answer when nothing was committed.
NO_OFFSET = -1

_MIN_INT = -(2**31)
_MAX_QUEUE_ID = 2**31 - 1  # Java int
_MIN_LONG = -(2**63)
_MAX_OFFSET = 2**63 - 1  # Java long

# Offset table in memory: "topic@group" -> queue id -> offset, as the file holds it.
_Table = dict[str, dict[int, int]]

_QUEUE_ID = re.compile(r"0|-?[1-9][0-9]{0,9}")


# -- decoding -----------------------------------------------------------------------------------


def _decode(doc: Any) -> tuple[dict[str, Any], _Table]:
    """The top-level keys but ``offsetTable``, and the table; raises ``UndecodableError``."""
    if not isinstance(doc, dict):
        raise UndecodableError(f"top level is a {_json_type(doc)}, not an object")
    raw_table = doc.pop("offsetTable", None)
    if raw_table is None:
        raw_table = {}
    if not isinstance(raw_table, dict):
        raise UndecodableError(f"offsetTable is a {_json_type(raw_table)}, not an object")
    table: _Table = {}
    for key, queues in raw_table.items():
        where = f"offsetTable[{key[:200]!r}]"
        if not isinstance(queues, dict):
            raise UndecodableError(f"{where} is a {_json_type(queues)}, not an object")
        offsets: dict[int, int] = {}
        for queue_id, offset in queues.items():
            if not _QUEUE_ID.fullmatch(queue_id) or not (
                _MIN_INT <= int(queue_id) <= _MAX_QUEUE_ID
            ):
                raise UndecodableError(f"{where}: queue id {queue_id[:40]!r} is not a Java int")
            if not is_json_int(offset) or not _MIN_LONG <= offset <= _MAX_OFFSET:
                raise UndecodableError(
                    f"{where}[{queue_id!r}]: offset {str(offset)[:40]} is not a Java long"
                )
            offsets[int(queue_id)] = offset
        table[key] = offsets
    return doc, table


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _encode(extra: Mapping[str, Any], table: Mapping[str, Mapping[int, int]]) -> bytes:
    doc = dict(extra)
    doc["offsetTable"] = {
        key: {str(qid): queues[qid] for qid in sorted(queues)} for key, queues in table.items()
    }
    return dump_json(doc)


# -- argument checks ----------------------------------------------------------------------------


def _check_name(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidArgumentError(f"{what} must not be empty")
    if SEPARATOR in value:
        raise InvalidArgumentError(
            f"{what} {value[:200]!r} contains {SEPARATOR!r}, which separates topic and group "
            f"in the offset table"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"{what} {value[:200]!r} holds a lone surrogate, which UTF-8 cannot encode"
        ) from None
    return value


def _int_text(value: int) -> str:
    """``value`` in decimal, or its size when it is too long to print (Python refuses to
    convert integers of more than 4300 digits)."""
    if value.bit_length() <= 256:
        return str(value)
    digits = int(value.bit_length() * 0.30103) + 1
    return f"{'-' if value < 0 else ''}an integer of about {digits} digits"


def _check_int(what: str, value: object, hi: int) -> int:
    if not is_json_int(value):
        raise ArgumentTypeError(f"{what} must be an int, got {type(value).__name__}")
    if value < 0:
        raise InvalidArgumentError(f"{what} must be between 0 and {hi}, got {_int_text(value)}")
    if value > hi:
        raise ArgumentOverflowError(f"{what} must be between 0 and {hi}, got {_int_text(value)}")
    return value


def _key(group: object, topic: object) -> str:
    return _check_name("topic", topic) + SEPARATOR + _check_name("group", group)


# -- the manager --------------------------------------------------------------------------------


class ConsumerOffsetManager(ConfigManager[tuple[dict[str, Any], "_Table"]]):
    """Committed consumer offsets of a store, in ``<config_dir>/consumerOffset.json``.

    ``config_dir`` is the store's ``config/`` folder; it is created when missing. The table is
    loaded at construction: a missing, empty or undecodable file falls back to
    ``consumerOffset.json.bak`` (logging a warning and deleting the bad file); when neither is
    usable :class:`~rmqstore.errors.StoreCorruptedError` (``.path`` names the file) is raised
    and nothing is changed; when neither exists the table starts empty. A file that is a
    symbolic link, not a regular file or larger than 64 MiB is refused the same way, without
    falling back. The module documentation lists what an entry may hold.

    Commits are durable when they return and serialised by a lock, so the manager can be shared
    by threads. An I/O failure raises :class:`~rmqstore.errors.StoreIOError` and leaves the
    previous file and the table in memory as they were; the one exception is a failure to sync
    the folder after the new file is in place, where the table follows the new file and the
    error says the commit is not known to be durable. One process at a time may use a folder
    (the store's ``lock`` file guarantees it).

    Arguments are checked before anything changes: a group or topic that is not a ``str``, a
    queue id or offset that is not an ``int`` raise
    :class:`~rmqstore.errors.ArgumentTypeError` (a ``TypeError``); an empty name, one with
    ``'@'`` or a lone surrogate, a negative queue id or offset
    :class:`~rmqstore.errors.InvalidArgumentError`; a queue id past 2**31-1 or an offset past
    2**63-1 :class:`~rmqstore.errors.ArgumentOverflowError` (an ``OverflowError``). Each message
    names the argument.
    """

    def __init__(self, config_dir: str | os.PathLike[str]) -> None:
        super().__init__(config_dir, FILE_NAME, _decode, "consumer offsets", logger)
        self._dir = self._file.dir
        self._path = self._file.path
        self._extra, self._table = self._loaded if self._loaded is not None else ({}, {})

    # -- commit ----------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Records ``offset`` (the next one to consume) of ``group`` on ``topic``/``queue_id``.

        Durable when it returns. ``group`` and ``topic`` are non-empty and free of ``'@'``;
        ``queue_id`` and ``offset`` are ints >= 0 (see the class documentation for the errors
        a bad argument raises). As in RocketMQ, an offset may go back.
        """
        key = _key(group, topic)
        qid = _check_int("queue_id", queue_id, _MAX_QUEUE_ID)
        value = _check_int("offset", offset, _MAX_OFFSET)
        self._commit(key, {qid: value})

    def commit_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Records several queues' offsets of ``group`` on ``topic`` with one durable write.

        All or nothing: every entry is checked before anything changes. An empty mapping
        writes nothing.
        """
        key = _key(group, topic)
        if not isinstance(offsets, Mapping):
            raise ArgumentTypeError(
                f"offsets must be a mapping of queue id to offset, got {type(offsets).__name__}"
            )
        checked: dict[int, int] = {}
        for queue_id, offset in offsets.items():
            qid = _check_int("queue id (a key of offsets)", queue_id, _MAX_QUEUE_ID)
            checked[qid] = _check_int(f"offsets[{qid}]", offset, _MAX_OFFSET)
        if checked:
            self._commit(key, checked)
        else:
            with self._lock:
                self._check_open()

    def _commit(self, key: str, changes: Mapping[int, int]) -> None:
        with self._lock:
            self._check_open()
            queues = dict(self._table.get(key, {}))
            queues.update(changes)
            table = dict(self._table)
            table[key] = queues
            self._file.replace(_encode(self._extra, table))
            # The new file is in place: memory follows it even if the folder sync below fails
            # (that error says the commit is not known to be durable; a reload would see it).
            self._table = table
            self._file.sync_dir()

    # -- removal ---------------------------------------------------------------------------

    def clean_offsets(self, queues: Mapping[str, Iterable[int] | None]) -> int:
        """Forgets committed offsets of every group: of every queue of a topic mapped to
        ``None`` (the broker's ``ConsumerOffsetManager.cleanOffsetByTopic``, which a topic's
        deletion calls), or of the queue ids given. One durable write when something was
        removed; returns how many group-and-topic entries changed."""
        wanted: dict[str, frozenset[int] | None] = {}
        for topic, ids in queues.items():
            if not isinstance(topic, str):
                raise ArgumentTypeError(f"topic must be a str, not {type(topic).__name__}")
            wanted[topic] = None if ids is None else frozenset(ids)
        with self._lock:
            self._check_open()
            table = dict(self._table)
            changed = 0
            for key, entry in self._table.items():
                topic, group = _split(key)
                if group is None or topic not in wanted:
                    continue
                ids = wanted[topic]
                kept = {} if ids is None else {q: o for q, o in entry.items() if q not in ids}
                if len(kept) == len(entry):
                    continue
                changed += 1
                if kept:
                    table[key] = kept
                else:
                    del table[key]
            if changed:
                self._file.replace(_encode(self._extra, table))
                self._table = table
                self._file.sync_dir()
        return changed

    # -- query -----------------------------------------------------------------------------

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when none was (RocketMQ's ``queryOffset``; a negative
        offset in the file also means none, as the broker's answer to a query says)."""
        key = _key(group, topic)
        qid = _check_int("queue_id", queue_id, _MAX_QUEUE_ID)
        with self._lock:
            self._check_open()
            offset = self._table.get(key, {}).get(qid, NO_OFFSET)
        return offset if offset >= 0 else NO_OFFSET

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        """The committed offsets of ``group`` on ``topic``, by queue id (a copy; negative
        entries of the file, which mean none, are left out)."""
        key = _key(group, topic)
        with self._lock:
            self._check_open()
            queues = self._table.get(key, {})
            return {q: o for q, o in sorted(queues.items()) if q >= 0 and o >= 0}

    def groups(self, topic: str | None = None) -> list[str]:
        """Groups with committed offsets (on ``topic`` when given), sorted."""
        if topic is not None:
            _check_name("topic", topic)
        with self._lock:
            self._check_open()
            pairs = [_split(key) for key in self._table]
        return sorted({g for t, g in pairs if g is not None and (topic is None or t == topic)})

    def topics(self, group: str | None = None) -> list[str]:
        """Topics with committed offsets (of ``group`` when given), sorted."""
        if group is not None:
            _check_name("group", group)
        with self._lock:
            self._check_open()
            pairs = [_split(key) for key in self._table]
        return sorted({t for t, g in pairs if g is not None and (group is None or g == group)})

    def offset_table(self) -> dict[str, dict[int, int]]:
        """The whole table as RocketMQ keys it, ``"topic@group"`` -> queue id -> offset (a copy,
        with every entry the file holds)."""
        with self._lock:
            self._check_open()
            return {key: dict(sorted(queues.items())) for key, queues in self._table.items()}

    # -- internals -------------------------------------------------------------------------


def _split(key: str) -> tuple[str, str | None]:
    """``"topic@group"`` -> (topic, group); a key without ``'@'`` (not ours) has no group."""
    topic, sep, group = key.partition(SEPARATOR)
    return (topic, group) if sep else (key, None)
