"""Background services of a store, as Python threads (RocketMQ's ``ServiceThread``s).

Python owns their lifecycle, pacing and logging; each round of real work is one call into the
Rust core with the GIL released. The services here: segment allocation, dispatch (reput), the
commitlog and consume-queue flushes, group commit, the transient pool's commit and the
checkpoint; the coming clean, schedule, timer and transaction-check services take the same base
(docs/architecture.md#threads).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, TypeVar

from .errors import StoreClosedError

if TYPE_CHECKING:
    from ._rmqstore import Store
    from .config import StoreConfig
    from .topics import TopicConfigManager

__all__ = [
    "AllocateMappedFileService",
    "CheckpointService",
    "CommitLogPrefaultService",
    "CommitRealTimeService",
    "FlushConsumeQueueService",
    "FlushRealTimeService",
    "GroupCommitService",
    "ReputMessageService",
    "ServiceThread",
    "TopicConfigService",
]

log = logging.getLogger("rmqstore.services")


class ServiceThread:
    """A named daemon thread that calls :meth:`run_once` until stopped or it says it is done."""

    name = "ServiceThread"

    #: While a round keeps failing, the error is logged again once per this many failures.
    repeat_log_every = 60
    #: Pause after a failed round before trying again, for services whose rounds do not wait
    #: on their own.
    retry_seconds = 1.0

    def __init__(self) -> None:
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.failures = 0
        self._failing = 0

    def _round_failed(self, what: str, pause: float = 0.0) -> bool:
        """Counts a failed round (call from an ``except`` block) and returns whether the
        service goes on: not once it is asked to stop (the failure is then the store closing),
        nor when it is stopped during the ``pause`` before its next round. The first failure
        of a run is logged with its traceback, then one line per ``repeat_log_every``
        failures."""
        if self._stopped.is_set():
            return False
        self.failures += 1
        self._failing += 1
        if self._failing == 1:
            log.exception("%s: %s failed; retrying", self.name, what)
        elif self._failing % self.repeat_log_every == 0:
            log.error(
                "%s: %s still failing (%d times in a row): %s",
                self.name,
                what,
                self._failing,
                sys.exc_info()[1],
            )
        return not (pause and self._stopped.wait(pause))

    def _round_ok(self, what: str) -> None:
        if self._failing:
            log.warning("%s: %s works again after %d failures", self.name, what, self._failing)
            self._failing = 0

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        log.debug("%s started", self.name)
        try:
            while not self._stopped.is_set():
                if not self.run_once():
                    break
        except BaseException as exc:  # a service must never die silently
            self.failure = exc
            log.exception("%s stopped on an error", self.name)
        log.debug("%s stopped", self.name)

    def run_once(self) -> bool:
        """One round of work; return False to end the thread."""
        raise NotImplementedError

    def signal_stop(self) -> None:
        """Asks the thread to end after its current round."""
        self._stopped.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stats(self) -> dict[str, float]:
        """Counters of what the service did."""
        return {"alive": float(self.alive)}


class AllocateMappedFileService(ServiceThread):
    """Creates the next commitlog segment before it is needed, warms it when configured, and
    releases the ``mlock`` of full segments (``AllocateMappedFileService``)."""

    name = "AllocateMappedFileService"

    #: How long one Rust call waits for a request before coming back to check for stop.
    poll_ms = 200

    def __init__(self, core: Store) -> None:
        super().__init__()
        self._core = core
        self.allocated = 0
        self.unlocked = 0
        #: Seconds spent creating (and warming) segments.
        self.alloc_seconds = 0.0

    def start(self) -> None:
        self._core.attach_allocation_service()
        super().start()

    def stats(self) -> dict[str, float]:
        return {
            **super().stats(),
            "allocated": float(self.allocated),
            "unlocked": float(self.unlocked),
            "alloc_seconds": self.alloc_seconds,
        }

    def run_once(self) -> bool:
        step = self._core.allocation_service_step(self.poll_ms)
        self.allocated += step.allocated
        self.unlocked += step.unlocked
        self.alloc_seconds += step.alloc_seconds
        return not step.stopped


class CommitLogPrefaultService(ServiceThread):
    """Faults in the pages of the commitlog segment being appended to ahead of the write
    position (200 ms of appends at the measured rate, 2 MiB to ``prefault_window_commit_log``
    bytes), so that puts find them mapped (rmqstore's own service; ``commitlog/prefault.rs``).
    Each round waits in Rust (looking after 1, 2, then every 4 ms) until the appender is within
    half that distance of the pages faulted in, then faults in the rest with the GIL
    released."""

    name = "CommitLogPrefaultService"

    #: How long one Rust call waits for the appender before coming back to check for stop.
    poll_ms = 200

    def __init__(self, core: Store, window: int) -> None:
        super().__init__()
        self._core = core
        self.window = window
        #: Commitlog bytes faulted in ahead of the appender.
        self.prefaulted = 0

    def run_once(self) -> bool:
        try:
            step = self._core.prefault_step(self.window, self.poll_ms)
        except Exception:
            return self._round_failed("prefault", self.retry_seconds)
        self._round_ok("prefault")
        self.prefaulted += step.bytes
        return not step.stopped

    def stats(self) -> dict[str, float]:
        return {
            **super().stats(),
            "prefaulted": float(self.prefaulted),
            "failures": float(self.failures),
        }


class ReputMessageService(ServiceThread):
    """Dispatch: builds consume queues and index files from committed commitlog records
    (``ReputMessageService``). Each round dispatches in Rust with the GIL released while there is
    work; idle, it waits in Rust, looking for new bytes every millisecond (puts do not signal it,
    as RocketMQ's reput thread also polls), woken at once only by a SYNC_FLUSH force or stop."""

    name = "ReputMessageService"

    #: Commitlog bytes dispatched per Rust call.
    chunk_bytes = 16 * 1024 * 1024
    #: How long one call parks when there is nothing to dispatch.
    poll_ms = 200
    #: How long one call keeps dispatching while there is work before it comes back to Python
    #: (a return per chunk would queue for the GIL behind every producer).
    budget_ms = 200

    def __init__(self, core: Store) -> None:
        super().__init__()
        self._core = core
        self.dispatched = 0

    def run_once(self) -> bool:
        try:
            step = self._core.dispatch_step(self.chunk_bytes, self.poll_ms, self.budget_ms)
        except Exception:
            return self._round_failed("dispatch", self.retry_seconds)
        self._round_ok("dispatch")
        self.dispatched += step.dispatched
        return True

    def stats(self) -> dict[str, float]:
        return {
            **super().stats(),
            "dispatched": float(self.dispatched),
            "failures": float(self.failures),
        }


_P = TypeVar("_P", bound="_PagedService")


class _PagedService(ServiceThread):
    """A service that works every ``interval`` ms when at least ``least_pages`` pages wait, and
    on anything once ``thorough`` ms have passed since its last such round (RocketMQ's flush
    and commit services). ``settings`` names its three StoreConfig fields."""

    settings: tuple[str, str, str]

    def __init__(self, core: Store, interval_ms: int, least_pages: int, thorough_ms: int) -> None:
        super().__init__()
        self._core = core
        self.interval_ms = interval_ms
        self.least_pages = least_pages
        self.thorough = thorough_ms / 1000
        self._last_thorough = time.monotonic()
        self.rounds = 0

    @classmethod
    def for_config(cls: type[_P], core: Store, cfg: StoreConfig) -> _P:
        interval, least, thorough = (getattr(cfg, name) for name in cls.settings)
        return cls(core, interval, least, thorough)

    def _least_pages_now(self) -> int:
        """``least_pages``, or 0 when a thorough round is due."""
        now = time.monotonic()
        if now - self._last_thorough >= self.thorough:
            self._last_thorough = now
            return 0
        return self.least_pages


class _PeriodicFlush(_PagedService):
    """Forces pages every ``interval`` ms when at least ``least_pages`` are waiting, and
    everything written every ``thorough`` ms (RocketMQ's flush services)."""

    def flush(self, least_pages: int) -> None:
        raise NotImplementedError

    def run_once(self) -> bool:
        if self._stopped.wait(self.interval_ms / 1000):
            return False
        least = self._least_pages_now()
        try:
            self.flush(least)
            self.rounds += 1
        except Exception:
            return self._round_failed("force")
        self._round_ok("force")
        return True

    def stats(self) -> dict[str, float]:
        return {**super().stats(), "rounds": float(self.rounds), "failures": float(self.failures)}


class FlushRealTimeService(_PeriodicFlush):
    """ASYNC_FLUSH: forces the commitlog every ``flush_interval_commit_log`` ms."""

    name = "FlushRealTimeService"
    settings = (
        "flush_interval_commit_log",
        "flush_commit_log_least_pages",
        "flush_commit_log_thorough_interval",
    )

    def flush(self, least_pages: int) -> None:
        self._core.flush_commitlog(least_pages)


class FlushConsumeQueueService(_PeriodicFlush):
    """Forces the consume queues every ``flush_interval_consume_queue`` ms."""

    name = "FlushConsumeQueueService"
    settings = (
        "flush_interval_consume_queue",
        "flush_consume_queue_least_pages",
        "flush_consume_queue_thorough_interval",
    )

    def flush(self, least_pages: int) -> None:
        self._core.flush_consume_queues(least_pages)


class CommitRealTimeService(_PagedService):
    """Transient store pool: copies what puts appended to the segments' write buffers into the
    files, making it readable (``CommitRealTimeService``). A round waits in Rust, without the
    GIL, until a put asks for it (``wake_commit_when_put_message``) or the interval passes,
    then commits when at least ``least_pages`` pages wait, or anything once ``thorough`` ms
    have passed since the last such round. The flush service forces what is committed on its
    own timer (RocketMQ's default ``flushCommitLogTimed``)."""

    name = "CommitRealTimeService"
    settings = (
        "commit_interval_commit_log",
        "commit_commit_log_least_pages",
        "commit_commit_log_thorough_interval",
    )

    def __init__(self, core: Store, interval_ms: int, least_pages: int, thorough_ms: int) -> None:
        super().__init__(core, interval_ms, least_pages, thorough_ms)
        self.commits = 0

    def run_once(self) -> bool:
        least = self._least_pages_now()
        try:
            step = self._core.commit_step(least, self.interval_ms)
        except Exception:
            return self._round_failed("commit", self.retry_seconds)
        self._round_ok("commit")
        self.rounds += 1
        self.commits += step.committed
        return not step.stopped

    def stats(self) -> dict[str, float]:
        return {
            **super().stats(),
            "rounds": float(self.rounds),
            "commits": float(self.commits),
            "failures": float(self.failures),
        }


class GroupCommitService(ServiceThread):
    """SYNC_FLUSH: forces the commitlog for every put waiting on it; many waiting puts share
    one force. Producers wait in Rust without the GIL."""

    name = "GroupCommitService"

    #: How long one round waits for a producer before forcing anyway (RocketMQ: 10 ms).
    poll_ms = 10
    #: How long one call keeps running rounds before it comes back to Python: a return after
    #: every force would queue the service for the GIL behind the producers it must wake.
    budget_ms = 50

    def __init__(self, core: Store) -> None:
        super().__init__()
        self._core = core
        self.forces = 0

    def start(self) -> None:
        self._core.attach_group_commit()
        super().start()

    def run_once(self) -> bool:
        step = self._core.group_commit_step(self.poll_ms, self.budget_ms)
        self.forces = step.forces
        return not step.stopped

    def stats(self) -> dict[str, float]:
        # Once the store is closed, the last count the service saw.
        with contextlib.suppress(StoreClosedError):
            self.forces = self._core.group_commit_forces()
        return {**super().stats(), "forces": float(self.forces)}


class CheckpointService(ServiceThread):
    """Every second: re-reads how full the disk is (puts are refused above
    ``disk_space_warning_level_ratio``) and writes and forces the ``checkpoint`` file when its
    fields changed (RocketMQ's scheduled tasks; an idle store writes nothing)."""

    name = "CheckpointService"

    interval = 1.0

    def __init__(self, core: Store) -> None:
        super().__init__()
        self._core = core
        self.rounds = 0

    def run_once(self) -> bool:
        if self._stopped.wait(self.interval):
            return False
        try:
            self._core.check_disk_space()
            self._core.flush_checkpoint()
            self.rounds += 1
        except Exception:
            return self._round_failed("checkpoint")
        self._round_ok("checkpoint")
        return True

    def stats(self) -> dict[str, float]:
        return {**super().stats(), "rounds": float(self.rounds), "failures": float(self.failures)}


def queues_with_messages(core: Store) -> dict[str, int]:
    """Topic -> its highest queue id holding messages + 1, for every topic with messages."""
    needed: dict[str, int] = {}
    for topic in core.topics():
        for queue_id in sorted(core.queue_ids(topic), reverse=True):
            if core.get_max_offset_in_queue(topic, queue_id) > 0:
                needed[topic] = queue_id + 1
                break
    return needed


class TopicConfigService(ServiceThread):
    """Every second: makes ``config/topics.json`` (the broker's topic table) cover every topic
    and queue that has messages, writing it only when a topic or queue appeared (RocketMQ's
    broker registers a topic when it is created; rmqstore has no creation step, so dispatch is
    what creates one). The store also calls :meth:`sync` at open and at close."""

    name = "TopicConfigService"

    interval = 1.0

    def __init__(self, core: Store, manager: TopicConfigManager) -> None:
        super().__init__()
        self._core = core
        self.manager = manager
        self.rounds = 0
        #: Held by a check from the look at the queues to the write, and by a topic deletion
        #: (so that a check never writes back a topic deleted after it looked).
        self.sync_lock = threading.Lock()

    def sync(self) -> bool:
        """One check; returns whether the file was written."""
        with self.sync_lock:
            return self.manager.cover(queues_with_messages(self._core))

    def run_once(self) -> bool:
        if self._stopped.wait(self.interval):
            return False
        try:
            self.sync()
            self.rounds += 1
        except Exception:
            return self._round_failed("topic config")
        self._round_ok("topic config")
        return True

    def stats(self) -> dict[str, float]:
        return {
            **super().stats(),
            "rounds": float(self.rounds),
            "writes": float(self.manager.writes),
            "failures": float(self.failures),
        }
