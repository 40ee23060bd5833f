"""Retention: the services that delete expired files (RocketMQ 5.5.1's
``DefaultMessageStore.CleanCommitLogService`` and ``ConsumeQueueStore.CleanConsumeQueueService``)
and the cleaning API of :class:`rmqstore.MessageStore` (a mixin of it).

Python decides when and what kind of round runs (the hour, the disks' ratios, manual deletion,
pacing); each round's work is one GIL-free call into the core, which deletes segments without
ever invalidating a mapping a reader still holds.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ._services import ServiceThread
from .enums import RunningFlags
from .errors import StoreClosedError, StoreConfigError, unwritable_error

if TYPE_CHECKING:
    from ._rmqstore import Store
    from .config import StoreConfig

__all__ = [
    "CleanCommitLogService",
    "CleanConsumeQueueService",
    "CleanReport",
    "CleaningMixin",
    "parse_delete_when",
]

log = logging.getLogger("rmqstore.clean")

_HOUR_MS = 3600 * 1000


def parse_delete_when(when: str) -> frozenset[int]:
    """The local hours of a ``delete_when`` string (``"04"``, ``"02;14"``): ``;``-separated
    parts, each an int from 0 to 23 in decimal digits. Anything else raises
    :class:`~rmqstore.errors.StoreConfigError` (the config refuses such a string already)."""
    hours = set()
    for part in when.split(";"):
        if not part.isascii() or not part.isdigit() or int(part) > 23:
            raise StoreConfigError(
                f"delete_when: must be hours 0 to 23 separated by ';' (such as '04' or '02;14'), "
                f"got {when!r}",
                "delete_when",
            )
        hours.add(int(part))
    return frozenset(hours)


@dataclasses.dataclass(frozen=True)
class CleanReport:
    """What :meth:`rmqstore.MessageStore.clean_expired_files` removed."""

    #: Paths of the commitlog segments deleted, oldest first.
    commit_log_files: tuple[str, ...]
    #: Consume queue files removed (wholly below the commitlog's new minimum offset).
    consume_queue_files: int
    #: Index files removed (their last entry points below the commitlog's minimum offset).
    index_files: int
    #: The commitlog's minimum offset after the round.
    min_commit_log_offset: int
    #: The round deleted at once, expired or not (a disk above
    #: ``disk_space_clean_forcibly_ratio`` or ``disk_space_warning_level_ratio``; with
    #: ``clean_file_forcibly_enable``).
    clean_immediately: bool


class _PeriodicService(ServiceThread):
    """A service whose rounds run ``first_delay`` seconds after it starts, then every
    ``interval`` seconds: at a fixed rate (a late round runs at once, rounds never overlap) or,
    with ``fixed_rate`` False, that long after the previous round ended."""

    #: Seconds before the first round (RocketMQ: one minute after the store starts).
    first_delay = 60.0
    fixed_rate = True

    def __init__(self, interval: float) -> None:
        super().__init__()
        self.interval = interval
        self.rounds = 0
        self._next: float | None = None
        # One round at a time: the thread's and an operator's (clean_expired_files).
        self._round_lock = threading.Lock()

    def run_once(self) -> bool:
        now = time.monotonic()
        if self._next is None:
            self._next = now + self.first_delay
        if self._stopped.wait(max(0.0, self._next - now)):
            return False
        try:
            self.run_round()
        except Exception:
            go_on = self._round_failed("cleaning")
        else:
            self._round_ok("cleaning")
            go_on = True
        finished = time.monotonic()
        if self.fixed_rate:
            self._next = max(self._next + self.interval, finished)
        else:
            self._next = finished + self.interval
        return go_on

    def run_round(self) -> object:
        raise NotImplementedError

    def stats(self) -> dict[str, float]:
        return {**super().stats(), "rounds": float(self.rounds), "failures": float(self.failures)}


class CleanCommitLogService(_PeriodicService):
    """Deletes commitlog segments (RocketMQ's ``CleanCommitLogService``): every
    ``clean_resource_interval`` ms (the first round a minute after the store opens), segments
    whose file was last written more than ``file_reserved_time`` hours ago, oldest first, at most
    ``delete_file_batch_max`` a round, ``delete_commit_log_files_interval`` ms apart, never the
    segment being written; only when the local hour is one of ``delete_when``, a disk is above
    ``disk_max_used_space_ratio``, or a manual deletion is pending (its next 20 rounds). A disk
    above ``disk_space_clean_forcibly_ratio`` (or ``disk_space_warning_level_ratio``, which also
    stops puts) deletes the oldest segments whatever their age, with
    ``clean_file_forcibly_enable``. Every ``redelete_hanged_file_interval`` ms it retries a
    first segment whose deletion hung (``reDeleteHangedFile``)."""

    name = "CleanCommitLogService"

    #: Rounds that delete expired files whatever the hour after a manual deletion
    #: (``MAX_MANUAL_DELETE_FILE_TIMES``).
    MAX_MANUAL_DELETE_FILE_TIMES = 20

    def __init__(
        self, core: Store, cfg: StoreConfig, *, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(cfg.clean_resource_interval / 1000.0)
        self._core = core
        self._cfg = cfg
        self._clock = clock
        self.delete_hours = parse_delete_when(cfg.delete_when)
        self._manual_lock = threading.Lock()
        self._manual = 0
        self._last_redelete_ms = 0
        #: Whether the last round found a disk full enough to delete at once.
        self.clean_immediately = False
        #: Used fractions of the commitlog's and the consume queues' disks at the last round.
        self.disk_ratios = (0.0, 0.0)
        self.deleted_files = 0
        self.redeleted = 0

    # -- decisions -------------------------------------------------------------------------

    def is_time_to_delete(self) -> bool:
        """The local hour is one of ``delete_when`` (``UtilAll.isItTimeToDo``)."""
        return time.localtime(self._clock()).tm_hour in self.delete_hours

    def is_space_to_delete(self) -> bool:
        """``isSpaceToDelete``: re-reads both disks (the core sets or clears DISK_FULL and
        LOGIC_DISK_FULL above the warning level) and says whether space must be reclaimed;
        sets :attr:`clean_immediately` when a disk is above the warning or the clean-forcibly
        level."""
        self.clean_immediately = False
        physic, logics = self._core.disk_ratios()
        self.disk_ratios = (physic, logics)
        warning = self._cfg.disk_space_warning_level_ratio / 100.0
        forcibly = self._cfg.disk_space_clean_forcibly_ratio / 100.0
        for ratio, what in ((physic, "commitlog"), (logics, "consume queue")):
            if ratio > warning or ratio > forcibly:
                log.warning(
                    "%s: %s disk is %.1f %% used, above the %s level of %.0f %%: deleting the "
                    "oldest segments at once",
                    self.name,
                    what,
                    ratio * 100,
                    "warning" if ratio > warning else "clean-forcibly",
                    (warning if ratio > warning else forcibly) * 100,
                )
                self.clean_immediately = True
                return True
        max_used = self._cfg.disk_max_used_space_ratio / 100.0
        for ratio, what in ((physic, "commitlog"), (logics, "consume queue")):
            if ratio > max_used:
                log.info(
                    "%s: %s disk is %.1f %% used, above %.0f %%: deleting expired segments",
                    self.name,
                    what,
                    ratio * 100,
                    max_used * 100,
                )
                return True
        return False

    def execute_delete_files_manually(self) -> None:
        """``executeDeleteFilesManually``: the next :attr:`MAX_MANUAL_DELETE_FILE_TIMES` rounds
        delete expired segments whatever the hour."""
        with self._manual_lock:
            self._manual = self.MAX_MANUAL_DELETE_FILE_TIMES
        log.info("%s: manual deletion requested", self.name)

    @property
    def manual_rounds_left(self) -> int:
        with self._manual_lock:
            return self._manual

    # -- rounds ----------------------------------------------------------------------------

    def run_round(self, *, time_up: bool | None = None) -> tuple[list[str], bool]:
        """One round (``CleanCommitLogService.run``): deletes what the rules allow, then retries
        a hanged first segment when due. ``time_up`` True runs as if the hour were in
        ``delete_when``. Returns the deleted paths and whether the round deleted at once."""
        with self._round_lock:
            deleted = self._delete_expired_files(time_up)
            self._redelete_hanged_file()
            self.rounds += 1
            return deleted, self.clean_immediately

    def _delete_expired_files(self, time_up: bool | None) -> list[str]:
        is_time_up = self.is_time_to_delete() if time_up is None else time_up
        usage_exceeds = self.is_space_to_delete()
        with self._manual_lock:
            manual = self._manual > 0
            if manual:
                self._manual -= 1
        if not (is_time_up or usage_exceeds or manual):
            return []
        cfg = self._cfg
        clean_at_once = cfg.clean_file_forcibly_enable and self.clean_immediately
        log.info(
            "%s: deleting segments older than %d hours (time up: %s, disk over threshold: %s, "
            "manual rounds left: %d, at once: %s, at most %d)",
            self.name,
            cfg.file_reserved_time,
            is_time_up,
            usage_exceeds,
            self.manual_rounds_left,
            clean_at_once,
            cfg.delete_file_batch_max,
        )
        deleted = self._core.delete_expired_commit_log_files(
            cfg.file_reserved_time * _HOUR_MS,
            cfg.delete_commit_log_files_interval,
            cfg.destroy_mapped_file_interval_forcibly,
            clean_at_once,
            cfg.delete_file_batch_max,
        )
        self.deleted_files += len(deleted)
        if deleted:
            if clean_at_once:
                # Messages younger than file_reserved_time may be among them: say so loudly.
                log.warning(
                    "%s: the disk is %.1f %% / %.1f %% used (commitlog / consume queues), over "
                    "disk_space_clean_forcibly_ratio: deleted %d oldest segment(s) whatever "
                    "their age (clean_file_forcibly_enable): %s",
                    self.name,
                    self.disk_ratios[0] * 100,
                    self.disk_ratios[1] * 100,
                    len(deleted),
                    ", ".join(deleted),
                )
            else:
                log.info(
                    "%s: deleted %d segment(s): %s", self.name, len(deleted), ", ".join(deleted)
                )
            # Re-read the disks now: puts refused for a full disk are accepted again at once,
            # not at the next check.
            self.disk_ratios = self._core.disk_ratios()
        elif usage_exceeds:
            log.warning(
                "%s: the disk will be full soon, but no segment could be deleted", self.name
            )
        return list(deleted)

    def _redelete_hanged_file(self) -> None:
        """``reDeleteHangedFile``: every ``redelete_hanged_file_interval`` ms, destroy a first
        segment whose deletion hung once ``destroy_mapped_file_interval_forcibly`` passed."""
        now_ms = int(self._clock() * 1000)
        if now_ms - self._last_redelete_ms > self._cfg.redelete_hanged_file_interval:
            self._last_redelete_ms = now_ms
            if self._core.redelete_hanged_file(self._cfg.destroy_mapped_file_interval_forcibly):
                self.redeleted += 1

    def stats(self) -> dict[str, float]:
        return {
            **super().stats(),
            "deleted_files": float(self.deleted_files),
            "redeleted": float(self.redeleted),
            "manual_rounds_left": float(self.manual_rounds_left),
            "clean_immediately": float(self.clean_immediately),
            "commit_log_disk_ratio": self.disk_ratios[0],
            "consume_queue_disk_ratio": self.disk_ratios[1],
        }


class CleanConsumeQueueService(_PeriodicService):
    """Removes what points below the commitlog's minimum offset (``ConsumeQueueStore``'s
    ``CorrectLogicOffsetService`` and ``CleanConsumeQueueService``): every
    ``clean_resource_interval`` ms after the previous round ended (the first a minute after the
    store opens), when that minimum grew since the last round, each consume queue's files wholly
    below it (``delete_consume_queue_files_interval`` ms after each queue that lost files), its
    minimum offset corrected, and the index files whose last entry points below it."""

    name = "CleanConsumeQueueService"
    fixed_rate = False

    def __init__(self, core: Store, cfg: StoreConfig) -> None:
        super().__init__(cfg.clean_resource_interval / 1000.0)
        self._core = core
        self._cfg = cfg
        self.last_physical_min_offset = 0
        self.consume_queue_files = 0
        self.index_files = 0

    def run_round(self, *, force: bool = False) -> tuple[int, int]:
        """One round; ``force`` runs it even when the commitlog's minimum did not grow.
        Returns the consume queue files and the index files removed."""
        with self._round_lock:
            self.rounds += 1
            min_offset = self._core.get_min_phy_offset()
            if not force and min_offset <= self.last_physical_min_offset:
                return 0, 0
            cq_files, index_files = self._core.clean_consume_queues(
                self._cfg.delete_consume_queue_files_interval
            )
            self.last_physical_min_offset = max(self.last_physical_min_offset, min_offset)
            self.consume_queue_files += cq_files
            self.index_files += index_files
            if cq_files or index_files:
                log.info(
                    "%s: below commitlog offset %d, removed %d consume queue file(s) and %d "
                    "index file(s)",
                    self.name,
                    min_offset,
                    cq_files,
                    index_files,
                )
            return cq_files, index_files

    def stats(self) -> dict[str, float]:
        return {
            **super().stats(),
            "consume_queue_files": float(self.consume_queue_files),
            "index_files": float(self.index_files),
            "last_physical_min_offset": float(self.last_physical_min_offset),
        }


class CleaningMixin:
    """Retention on a :class:`rmqstore.MessageStore`: the cleaning services, the running flags,
    a cleaning round on demand and manual deletion (docs/architecture.md, "Retention")."""

    # Set by MessageStore.
    _core: Store
    _path: Path
    _forked: bool
    _clean_commit_log: CleanCommitLogService | None
    _clean_consume_queue: CleanConsumeQueueService | None

    def _load_cleaning(self, cfg: StoreConfig) -> list[ServiceThread]:
        """Builds the commitlog and consume-queue cleaners of a writable store."""
        self._clean_commit_log = CleanCommitLogService(self._core, cfg)
        self._clean_consume_queue = CleanConsumeQueueService(self._core, cfg)
        return [self._clean_commit_log, self._clean_consume_queue]

    def _cleaners(self, what: str) -> tuple[CleanCommitLogService, CleanConsumeQueueService]:
        err = unwritable_error(
            what,
            forked=self._forked,
            read_only=self._core.read_only,
            why="the writing process deletes the files",
        )
        if err is not None:
            raise err
        if self._core.closed:
            raise StoreClosedError(f"{what}: the store is closed")
        if self._clean_commit_log is None or self._clean_consume_queue is None:
            raise StoreClosedError(f"{what}: the store's services are not running")
        return self._clean_commit_log, self._clean_consume_queue

    @property
    def running_flags(self) -> RunningFlags:
        """The store's running flags now (RocketMQ's ``RunningFlags``): a put answers
        SERVICE_NOT_AVAILABLE while any flag but NOT_READABLE is set. DISK_FULL (the
        commitlog's disk) and LOGIC_DISK_FULL (the consume queues') are set above
        ``disk_space_warning_level_ratio`` and cleared once space returns (checked every
        second); a read-only store has NOT_WRITEABLE."""
        return RunningFlags(self._core.running_flags())

    def clean_expired_files(self) -> CleanReport:
        """Runs one commitlog cleaning round now, as if the hour were in ``delete_when`` (the
        disks' ratios and ``clean_file_forcibly_enable`` apply as in the service's rounds), then
        the consume-queue and index round; returns what was removed. A read-only store raises
        :class:`~rmqstore.errors.StoreReadOnlyError`."""
        commit_log, consume_queue = self._cleaners("clean_expired_files")
        deleted, immediately = commit_log.run_round(time_up=True)
        cq_files, index_files = consume_queue.run_round(force=True)
        return CleanReport(
            commit_log_files=tuple(deleted),
            consume_queue_files=cq_files,
            index_files=index_files,
            min_commit_log_offset=self._core.get_min_phy_offset(),
            clean_immediately=immediately,
        )

    def execute_delete_files_manually(self) -> None:
        """RocketMQ's ``executeDeleteFilesManually``: the cleaner's next 20 rounds delete the
        expired segments (older than ``file_reserved_time``) whatever the hour. A read-only
        store raises :class:`~rmqstore.errors.StoreReadOnlyError`."""
        commit_log, _ = self._cleaners("execute_delete_files_manually")
        commit_log.execute_delete_files_manually()
