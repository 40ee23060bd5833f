"""Consumer offsets: RocketMQ's broker ``ConsumerOffsetManager`` on ``config/consumerOffset.json``.

The file has RocketMQ's shape (STORE_SPEC §13)::

    {"offsetTable": {"topic@group": {"0": 12, "1": 7}}}

Loading also reads what RocketMQ's fastjson writes, whose queue-id keys are bare numbers
(``{0:12,1:7}``); other top-level keys (``"dataVersion"``, ...) are kept and written back.

Every commit is durable when it returns. A commit writes the whole table to
``consumerOffset.json.tmp``, forces it, moves the current file to ``consumerOffset.json.bak``,
renames the temp file into place and forces the folder. Loading falls back to the ``.bak`` file
when the file is missing, empty or undecodable (deleting the bad file, as ``ConfigManager.load``
does), so a crash at any step leaves either the new table or the previous one.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, TypeGuard

from .errors import InvalidArgumentError, StoreClosedError, StoreCorruptedError, StoreIOError

__all__ = ["ConsumerOffsetManager"]

logger = logging.getLogger("rmqstore.offsets")

#: File name under the store's ``config/`` folder (BrokerPathConfigHelper).
FILE_NAME = "consumerOffset.json"
#: RocketMQ's ``TOPIC_GROUP_SEPARATOR``: table keys are ``topic@group``.
SEPARATOR = "@"
#: ``queryOffset``'s answer when nothing was committed.
NO_OFFSET = -1

_MAX_QUEUE_ID = 2**31 - 1  # Java int
_MAX_OFFSET = 2**63 - 1  # Java long

# Offset table in memory: "topic@group" -> queue id -> offset.
_Table = dict[str, dict[int, int]]


class _UndecodableError(Exception):
    """A config file whose content is not an offset table (the reason is the message)."""


# -- decoding -----------------------------------------------------------------------------------

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BARE_INT_KEY = re.compile(r"([{,]\s*)(-?[0-9]+)(\s*:)")


def _quote_bare_int_keys(text: str) -> str:
    """fastjson writes ``Map<Integer, Long>`` keys unquoted (``{0:12}``); quote them.

    Only text outside string literals is touched, so a topic name is never rewritten.
    """
    out: list[str] = []
    pos = 0
    for match in _JSON_STRING.finditer(text):
        out.append(_BARE_INT_KEY.sub(r'\1"\2"\3', text[pos : match.start()]))
        out.append(match.group())
        pos = match.end()
    out.append(_BARE_INT_KEY.sub(r'\1"\2"\3', text[pos:]))
    return "".join(out)


def _reject_constant(name: str) -> NoReturn:
    raise _UndecodableError(f"non-JSON constant {name}")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _decode(raw: bytes) -> tuple[dict[str, Any], _Table]:
    """The top-level keys but ``offsetTable``, and the table; raises ``_UndecodableError``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _UndecodableError(f"not UTF-8 ({e})") from None
    if not text.strip():
        raise _UndecodableError("empty")
    try:
        try:
            doc = json.loads(text, parse_constant=_reject_constant)
        except json.JSONDecodeError:
            doc = json.loads(_quote_bare_int_keys(text), parse_constant=_reject_constant)
    except (json.JSONDecodeError, RecursionError) as e:
        raise _UndecodableError(f"not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise _UndecodableError(f"top level is a {type(doc).__name__}, not an object")
    raw_table = doc.pop("offsetTable", None)
    if raw_table is None:
        raw_table = {}
    if not isinstance(raw_table, dict):
        raise _UndecodableError(f"offsetTable is a {type(raw_table).__name__}, not an object")
    table: _Table = {}
    for key, value in raw_table.items():
        queues = {} if value is None else value
        if not isinstance(queues, dict):
            raise _UndecodableError(f"offsetTable[{key!r}] is a {type(queues).__name__}")
        offsets: dict[int, int] = {}
        for queue_id, offset in queues.items():
            try:
                qid = int(queue_id)
            except ValueError:
                raise _UndecodableError(f"offsetTable[{key!r}]: queue id {queue_id!r}") from None
            if not _is_int(offset):
                raise _UndecodableError(f"offsetTable[{key!r}][{queue_id!r}]: offset {offset!r}")
            offsets[qid] = offset
        table[key] = offsets
    return doc, table


def _encode(extra: Mapping[str, Any], table: Mapping[str, Mapping[int, int]]) -> bytes:
    doc = dict(extra)
    doc["offsetTable"] = {
        key: {str(qid): queues[qid] for qid in sorted(queues)} for key, queues in table.items()
    }
    return json.dumps(doc, indent=4, allow_nan=False).encode("utf-8") + b"\n"


# -- argument checks ----------------------------------------------------------------------------


def _check_name(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidArgumentError(f"{what} must not be empty")
    if SEPARATOR in value:
        raise InvalidArgumentError(
            f"{what} {value!r} contains {SEPARATOR!r}, which separates topic and group "
            f"in the offset table"
        )
    return value


def _check_int(what: str, value: object, hi: int) -> int:
    if not _is_int(value):
        raise InvalidArgumentError(f"{what} must be an int, got {type(value).__name__}")
    if not 0 <= value <= hi:
        raise InvalidArgumentError(f"{what} must be between 0 and {hi}, got {value}")
    return value


def _key(group: object, topic: object) -> str:
    return _check_name("topic", topic) + SEPARATOR + _check_name("group", group)


def _io_error(action: str, err: OSError, path: Path) -> StoreIOError:
    code = err.errno if err.errno is not None else errno_mod.EIO
    reason = err.strerror or str(err)
    return StoreIOError(code, f"{action} {os.fspath(path)}: {reason}", os.fspath(path))


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the manager --------------------------------------------------------------------------------


class ConsumerOffsetManager:
    """Committed consumer offsets of a store, in ``<config_dir>/consumerOffset.json``.

    ``config_dir`` is the store's ``config/`` folder; it is created when missing. The table is
    loaded at construction: a missing, empty or undecodable file falls back to
    ``consumerOffset.json.bak`` (logging a warning and deleting the bad file); when neither is
    usable :class:`~rmqstore.errors.StoreCorruptedError` is raised and nothing is changed; when
    neither exists the table starts empty.

    Commits are durable when they return and serialised by a lock, so the manager can be shared
    by threads. An I/O failure raises :class:`~rmqstore.errors.StoreIOError` and leaves the
    previous file and the table in memory as they were; the one exception is a failure to sync
    the folder after the new file is in place, where the table follows the new file and the
    error says the commit is not known to be durable. One process at a time may use a folder
    (the store's ``lock`` file guarantees it).
    """

    def __init__(self, config_dir: str | os.PathLike[str]) -> None:
        self._dir = Path(config_dir)
        self._path = self._dir / FILE_NAME
        self._bak = self._dir / (FILE_NAME + ".bak")
        self._tmp = self._dir / (FILE_NAME + ".tmp")
        self._lock = threading.Lock()
        self._closed = False
        self._make_dir()
        self._extra, self._table = self._load()

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The offsets file, ``<config_dir>/consumerOffset.json``."""
        return self._path

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Waits for a commit in progress, then refuses further calls. Idempotent.

        Nothing needs writing: every commit was durable when it returned.
        """
        with self._lock:
            self._closed = True

    def __enter__(self) -> ConsumerOffsetManager:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"ConsumerOffsetManager({os.fspath(self._dir)!r}, {state})"

    # -- commit ----------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Records ``offset`` (the next one to consume) of ``group`` on ``topic``/``queue_id``.

        Durable when it returns. ``group`` and ``topic`` are non-empty and free of ``'@'``;
        ``queue_id`` and ``offset`` are ints >= 0 (a bad argument raises
        :class:`~rmqstore.errors.InvalidArgumentError`). As in RocketMQ, an offset may go back.
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
            raise InvalidArgumentError(
                f"offsets must be a mapping of queue id to offset, got {type(offsets).__name__}"
            )
        checked: dict[int, int] = {}
        for queue_id, offset in offsets.items():
            qid = _check_int("queue_id", queue_id, _MAX_QUEUE_ID)
            checked[qid] = _check_int(f"offset of queue {qid}", offset, _MAX_OFFSET)
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
            self._replace_file(_encode(self._extra, table))
            # The new file is in place: memory follows it even if the folder sync below fails
            # (that error says the commit is not known to be durable; a reload would see it).
            self._table = table
            try:
                _fsync_dir(self._dir)
            except OSError as e:
                raise _io_error("consumer offsets: sync folder", e, self._dir) from e

    # -- query -----------------------------------------------------------------------------

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when none was (RocketMQ's ``queryOffset``)."""
        key = _key(group, topic)
        qid = _check_int("queue_id", queue_id, _MAX_QUEUE_ID)
        with self._lock:
            self._check_open()
            return self._table.get(key, {}).get(qid, NO_OFFSET)

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        """The committed offsets of ``group`` on ``topic``, by queue id (a copy)."""
        key = _key(group, topic)
        with self._lock:
            self._check_open()
            return dict(sorted(self._table.get(key, {}).items()))

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
        """The whole table as RocketMQ keys it, ``"topic@group"`` -> queue id -> offset (a copy)."""
        with self._lock:
            self._check_open()
            return {key: dict(sorted(queues.items())) for key, queues in self._table.items()}

    # -- internals -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"consumer offsets {os.fspath(self._path)} are closed")

    def _make_dir(self) -> None:
        if self._dir.is_dir():
            return
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            _fsync_dir(self._dir.parent)
        except OSError as e:
            raise _io_error("create config folder", e, self._dir) from e

    def _read(self, path: Path) -> bytes | None:
        """The file's bytes, ``None`` when it does not exist; other failures raise."""
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise _io_error("read", e, path) from e

    def _load(self) -> tuple[dict[str, Any], _Table]:
        raw = self._read(self._path)
        problem: str
        if raw is None:
            problem = "missing"
        else:
            try:
                loaded = _decode(raw)
            except _UndecodableError as e:
                problem = str(e)
            else:
                self._remove_stray_tmp()
                return loaded

        raw_bak = self._read(self._bak)
        if raw_bak is None:
            if raw is None:
                self._remove_stray_tmp()
                return {}, {}  # a new store: no offsets yet
            self._corrupted(f"{self._path} is unusable ({problem}) and there is no {self._bak}")
        try:
            loaded = _decode(raw_bak)
        except _UndecodableError as e:
            self._corrupted(
                f"{self._path} is unusable ({problem}) and so is {self._bak} ({e})"
                if raw is not None
                else f"{self._path} is missing and {self._bak} is unusable ({e})"
            )
        logger.warning(
            "consumer offsets: %s is %s; loaded the previous version from %s",
            self._path,
            problem,
            self._bak,
        )
        if raw is not None:
            try:
                self._path.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                raise _io_error("delete unusable", e, self._path) from e
        self._remove_stray_tmp()
        return loaded

    def _corrupted(self, message: str) -> NoReturn:
        err = StoreCorruptedError(f"consumer offsets: {message}")
        err.path = os.fspath(self._path)
        raise err

    def _remove_stray_tmp(self) -> None:
        """A temp file left by a crash before its rename holds nothing committed: drop it."""
        with contextlib.suppress(OSError):
            self._tmp.unlink()

    def _replace_file(self, data: bytes) -> None:
        """Write temp + fsync, current -> .bak, temp -> current (the caller syncs the folder).

        On a failure the temp file is removed and the current file is as it was: if it had been
        moved to ``.bak`` already when the rename failed, it is linked back from there (and
        should that fail too, loading falls back to the ``.bak``, which holds it).
        """
        step, path = "write", self._tmp
        moved_to_bak = False
        try:
            fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                step = "sync"
                os.fsync(fd)
            finally:
                os.close(fd)
            step, path = "back up", self._path
            try:
                os.replace(self._path, self._bak)
                moved_to_bak = True
            except FileNotFoundError:
                pass  # first commit, or the file was unusable at load
            step = "replace"
            os.replace(self._tmp, self._path)
        except OSError as e:
            with contextlib.suppress(OSError):
                self._tmp.unlink()
            if moved_to_bak:
                with contextlib.suppress(OSError):
                    os.link(self._bak, self._path)
            raise _io_error(f"consumer offsets: {step}", e, path) from e


def _split(key: str) -> tuple[str, str | None]:
    """``"topic@group"`` -> (topic, group); a key without ``'@'`` (not ours) has no group."""
    topic, sep, group = key.partition(SEPARATOR)
    return (topic, group) if sep else (key, None)
