"""Delay levels: RocketMQ's ``ScheduleMessageService`` and its ``config/delayOffset.json``.

A message put with ``delay_level=N`` is stored in ``SCHEDULE_TOPIC_XXXX`` queue ``N - 1``,
whose consume queue units hold the deliver time in their tag slot (the core does this on put).
:class:`ScheduleMessageService` is the thread that delivers them: it paces every level as
RocketMQ's per-level ``DeliverDelayedMessageTimerTask`` does, and each round of one level is a
single call into the core (``Store.schedule_deliver``), made without the GIL, that re-puts the
due messages to their real topic and queue (RocketMQ's ``messageTimeUp``) and moves the level's
offset on.

The progress is kept in ``config/delayOffset.json`` by :class:`DelayOffsetManager`, in the shape
RocketMQ writes (``DelayOffsetSerializeWrapper``)::

    {"offsetTable": {"1": 12, "2": 0}, "dataVersion": {"counter": 3, "stateVersion": 0,
                                                       "timestamp": 1700000000000}}

RocketMQ 4.9.8 (the schedule service in the store jar) writes only ``offsetTable`` and 5.5.1
(in the broker) adds ``dataVersion``; both serialise the ``Map<Integer, Long>`` with bare
integer keys (``{1:12,2:0}``) and both read quoted keys back, as they read a ``dataVersion``
they do not know (4.9.8 ignores it). rmqstore reads either form and writes standard JSON.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._configfile import ConfigManager, UndecodableError, dump_json, is_json_int
from ._services import ServiceThread
from .errors import StoreClosedError

if TYPE_CHECKING:
    from ._rmqstore import Store

__all__ = ["DelayOffsetManager", "ScheduleLevelStats", "ScheduleMessageService"]

log = logging.getLogger("rmqstore.schedule")

#: File name under the store's ``config/`` folder
#: (``StorePathConfigHelper.getDelayOffsetStorePath``).
FILE_NAME = "delayOffset.json"

_MIN_INT, _MAX_INT = -(2**31), 2**31 - 1
_MIN_LONG, _MAX_LONG = -(2**63), 2**63 - 1
_LEVEL = re.compile(r"0|-?[1-9][0-9]{0,9}")


@dataclass(frozen=True, slots=True)
class ScheduleLevelStats:
    """One delay level as :meth:`rmqstore.MessageStore.schedule_stats` reports it.

    ``offset`` is the next unit of the level's queue (``SCHEDULE_TOPIC_XXXX`` queue
    ``level - 1``) to deliver, ``max_offset`` the queue's end, ``pending`` the messages between
    them and ``oldest_due_ms`` the deliver time (epoch ms) of the first of those, None when
    none is pending.
    """

    level: int
    delay_ms: int
    offset: int
    max_offset: int
    pending: int
    oldest_due_ms: int | None


# -- config/delayOffset.json ----------------------------------------------------------------


def _decode(doc: Any) -> tuple[dict[str, Any], dict[int, int], dict[str, Any] | None]:
    """(other top-level keys, offsetTable, dataVersion); raises ``UndecodableError``."""
    if not isinstance(doc, dict):
        raise UndecodableError("top level is not an object")
    raw = doc.pop("offsetTable", None)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UndecodableError("offsetTable is not an object")
    table: dict[int, int] = {}
    for level, offset in raw.items():
        if not _LEVEL.fullmatch(level) or not _MIN_INT <= int(level) <= _MAX_INT:
            raise UndecodableError(f"offsetTable: level {level[:40]!r} is not a Java int")
        if not is_json_int(offset) or not _MIN_LONG <= offset <= _MAX_LONG:
            raise UndecodableError(
                f"offsetTable[{level!r}]: offset {str(offset)[:40]} is not a Java long"
            )
        table[int(level)] = offset
    version = doc.pop("dataVersion", None)
    if version is not None:
        if not isinstance(version, dict):
            raise UndecodableError("dataVersion is not an object")
        for field in ("counter", "stateVersion", "timestamp"):
            value = version.get(field, 0)
            if not is_json_int(value) or not _MIN_LONG <= value <= _MAX_LONG:
                raise UndecodableError(f"dataVersion.{field} is not a Java long")
    return doc, table, version


class DelayOffsetManager(
    ConfigManager[tuple[dict[str, Any], dict[int, int], "dict[str, Any] | None"]]
):
    """The delivery progress of every delay level, ``<config_dir>/delayOffset.json``: level ->
    the next offset of its ``SCHEDULE_TOPIC_XXXX`` queue to deliver.

    Loaded at construction with RocketMQ's ``ConfigManager`` protocol (``.bak`` fallback,
    warning; neither usable: :class:`~rmqstore.errors.StoreCorruptedError` naming the file,
    nothing changed; neither present: an empty table). Entries of levels the store's
    ``message_delay_level`` does not have are kept and written back, as RocketMQ keeps them.
    :meth:`persist` writes the file atomically (temp file forced, the previous version kept as
    ``delayOffset.json.bak``, rename, folder forced).
    """

    def __init__(self, config_dir: str | os.PathLike[str]) -> None:
        super().__init__(config_dir, FILE_NAME, _decode, "delay offsets", log)
        loaded = self._loaded
        self._extra, self._table, self._version = loaded if loaded is not None else ({}, {}, None)
        self._persisted_at_ms = self._loaded_persist_time() if loaded is not None else 0
        self.writes = 0

    def _loaded_persist_time(self) -> int:
        """When the loaded table was taken: the earlier of its ``dataVersion.timestamp`` and
        the modification time of the file it came from (the ``.bak`` when that was loaded).

        The core's crash-recovery scan (``Store.schedule_load``) looks for deliveries the table
        does not count among the messages stored at or after this time, so it must not be
        later than the moment the offsets were read. rmqstore writes that moment as
        ``dataVersion.timestamp``; RocketMQ 5.5.1 writes the time of its last version step
        (earlier still), 4.9.8 no ``dataVersion`` at all, where the file's modification time,
        set when its writer persisted it, is the bound. A copied file whose modification time
        is new keeps its ``dataVersion``, and the earlier of the two is taken.
        """
        times: list[int] = []
        if self._version is not None and is_json_int(self._version.get("timestamp")):
            times.append(max(0, self._version["timestamp"]))
        for path in (self._file.path, self._file.bak):
            try:
                times.append(max(0, os.stat(path, follow_symlinks=False).st_mtime_ns // 10**6))
                break
            except OSError:
                continue
        return min(times) if times else 0

    @property
    def exists(self) -> bool:
        """Whether a table was loaded or written (the store used delay levels)."""
        with self._lock:
            return self._persisted_at_ms > 0 or self.writes > 0 or bool(self._table)

    @property
    def persisted_at_ms(self) -> int:
        """When the table on disk was taken (epoch ms; 0 when there is none): the time the
        crash-recovery scan starts from (see :meth:`_loaded_persist_time`)."""
        with self._lock:
            return self._persisted_at_ms

    def offset_table(self) -> dict[int, int]:
        """Level -> next offset, as the file holds it (a copy)."""
        with self._lock:
            self._check_open()
            return dict(sorted(self._table.items()))

    def data_version(self) -> dict[str, int] | None:
        with self._lock:
            self._check_open()
            return dict(self._version) if self._version is not None else None

    def persist(self, offsets: Mapping[int, int], taken_at_ms: int) -> None:
        """Writes ``offsets`` (merged over the entries of other levels) durably, with
        ``dataVersion.timestamp = taken_at_ms``, the wall-clock time read *before* the offsets
        were (see :meth:`_loaded_persist_time`). ``counter`` moves on when the table changed
        (RocketMQ's ``DataVersion.nextVersion``)."""
        with self._lock:
            self._check_open()
            table = {**self._table, **{int(k): int(v) for k, v in offsets.items()}}
            old = self._version or {}
            changed = table != self._table or self._version is None
            version = {
                "counter": min(old.get("counter", 0) + (1 if changed else 0), _MAX_LONG),
                "stateVersion": old.get("stateVersion", 0),
                "timestamp": taken_at_ms,
            }
            doc: dict[str, Any] = {"offsetTable": {str(k): table[k] for k in sorted(table)}}
            doc["dataVersion"] = version
            for key, value in self._extra.items():
                doc.setdefault(key, value)
            self._file.replace(dump_json(doc))
            self._table, self._version = table, version
            self._persisted_at_ms = taken_at_ms
            self.writes += 1
            self._file.sync_dir()


# -- the service ----------------------------------------------------------------------------


class ScheduleMessageService(ServiceThread):
    """Delivers due delayed messages, one level at a time (``ScheduleMessageService``).

    Pacing per level, as RocketMQ's ``DeliverDelayedMessageTimerTask``:

    * a level whose next message is not yet due sleeps until exactly its deliver time (RocketMQ
      polls every ``DELAY_FOR_A_WHILE`` = 100 ms, so a message is up to 100 ms late); the wait
      is capped at the level's delay, past which the core treats a deliver time as due
      (``correctDeliverTimestamp``, a clock that went back);
    * a level with nothing pending polls every 100 ms (``DELAY_FOR_A_WHILE``);
    * a failed put (a RocketMQ status, e.g. a full disk) retries the same offset after 100 ms;
    * an exception pauses that level for 10 s (``DELAY_FOR_A_PERIOD``); the others go on.

    RocketMQ starts the tasks ``FIRST_DELAY_TIME`` = 1 s after the broker starts, to let it
    finish starting. An opened store has recovered and dispatched its log already, so the
    first round runs at once: messages due while the store was closed are delivered without
    an extra second of lateness.

    Each round delivers at most :attr:`max_msgs_per_round` messages of one level in one call to
    the core; levels with more due take turns, so a backlog on one level does not hold back
    the others. The offsets are persisted every ``flush_delay_offset_interval`` ms from this
    thread, between rounds (so the table read is exact: no delivery is half done), right
    after the first delivery when there is no file yet, and by the store at close after the
    service stopped (:meth:`persist`).
    """

    name = "ScheduleMessageService"

    #: Messages one core call delivers at most (one level, one round).
    max_msgs_per_round = 2048
    #: ``DELAY_FOR_A_WHILE``: poll of an empty level and retry after a failed put (s).
    delay_for_a_while = 0.1
    #: ``DELAY_FOR_A_PERIOD``: pause of a level whose round raised (s).
    delay_for_a_period = 10.0
    #: An unchanged table is written again after this long (s), so that the time the
    #: crash-recovery scan starts from stays recent.
    refresh_unchanged = 60.0

    def __init__(self, core: Store, manager: DelayOffsetManager, flush_interval_ms: int) -> None:
        super().__init__()
        self._core = core
        self.manager = manager
        self.flush_interval = max(flush_interval_ms, 1) / 1000
        self._delays = {int(s[0]): int(s[1]) for s in core.schedule_stats()}
        now = time.monotonic()
        self._next_run = dict.fromkeys(self._delays, now)
        self._next_persist = now + self.flush_interval
        self._persist_lock = threading.Lock()
        self._last_offsets: dict[int, int] | None = None
        self._last_write = now
        self.delivered = 0
        self.dropped = 0
        self.rounds = 0
        self.failed_puts = 0
        self.persists = 0
        self.persist_failures = 0

    # -- pacing ---------------------------------------------------------------------------

    def run_once(self) -> bool:
        wake = min(min(self._next_run.values(), default=math.inf), self._next_persist)
        now = time.monotonic()
        if wake > now and self._stopped.wait(wake - now):
            return False
        now = time.monotonic()
        for level in sorted(
            (lv for lv, at in self._next_run.items() if at <= now), key=self._next_run.__getitem__
        ):
            if self._stopped.is_set():
                return False
            self._round(level)
        if time.monotonic() >= self._next_persist:
            self._periodic_persist()
        return True

    def _round(self, level: int) -> None:
        try:
            step = self._core.schedule_deliver(level, self.max_msgs_per_round)
        except StoreClosedError:
            self._stopped.set()
            return
        except Exception:
            self._round_failed(f"delivery of delay level {level}")
            self._next_run[level] = time.monotonic() + self.delay_for_a_period
            return
        self._round_ok(f"delivery of delay level {level}")
        self.rounds += 1
        self.delivered += step.delivered
        self.dropped += step.dropped
        mono = time.monotonic()
        if step.status is not None:
            self.failed_puts += 1
            if self.failed_puts % 100 == 1:
                log.warning(
                    "%s: delivering delay level %d at offset %d: put answered %s; retrying",
                    self.name,
                    level,
                    step.offset,
                    step.status,
                )
            self._next_run[level] = mono + self.delay_for_a_while
        elif step.next_due_ms is None:
            self._next_run[level] = mono + self.delay_for_a_while
        else:
            wait_ms = step.next_due_ms - time.time() * 1000
            if wait_ms <= 0 and not step.delivered and not step.dropped:
                # Due, yet the round moved nothing (the core's clock read just before the
                # deliver time): look again shortly rather than spin.
                wait_ms = 1
            cap_ms = self._delays.get(level, 0)
            self._next_run[level] = mono + max(0.0, min(wait_ms, cap_ms)) / 1000
        if step.delivered and not self.manager.exists:
            # The first delivery of a store without the file: write it now, so that a crash
            # before the first interval has a recent time to scan from.
            self._periodic_persist(force=True)

    # -- persistence ----------------------------------------------------------------------

    def _periodic_persist(self, force: bool = False) -> None:
        self._next_persist = time.monotonic() + self.flush_interval
        try:
            self.persist(force=force)
        except Exception:
            self.persist_failures += 1
            log.exception("%s: cannot write %s; retrying", self.name, self.manager.path)

    def persist(self, force: bool = True) -> bool:
        """Writes the core's offsets to ``delayOffset.json``; returns whether it wrote.

        Nothing is written for a store that never delivered a delayed message and has no
        file; without ``force`` an unchanged table is written again only after
        :attr:`refresh_unchanged` seconds. Called by this thread and, once it stopped, by the
        store at close.
        """
        with self._persist_lock:
            # The time is read before the offsets: every delivery the table does not count
            # is stored at or after it (rounds run on this thread, or not at all at close).
            taken_at = int(time.time() * 1000)
            offsets = {int(k): int(v) for k, v in self._core.schedule_offsets().items()}
            if not self.manager.exists and not any(offsets.values()):
                return False
            mono = time.monotonic()
            if (
                not force
                and offsets == self._last_offsets
                and mono - self._last_write < self.refresh_unchanged
            ):
                return False
            self.manager.persist(offsets, taken_at)
            self._last_offsets = offsets
            self._last_write = mono
            self.persists += 1
            return True

    def stats(self) -> dict[str, float]:
        return {
            **super().stats(),
            "delivered": float(self.delivered),
            "dropped": float(self.dropped),
            "rounds": float(self.rounds),
            "failed_puts": float(self.failed_puts),
            "failures": float(self.failures),
            "persists": float(self.persists),
            "persist_failures": float(self.persist_failures),
        }
