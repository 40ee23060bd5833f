"""The timer message services (RocketMQ 5.x ``TimerMessageStore``'s pipeline threads), paced
here; each round is one call into the Rust core with the GIL released.

RocketMQ runs enqueue-get, enqueue-put, dequeue-get, dequeue-get-message and dequeue-put
threads joined by queues, and a flush thread. Here one enqueue round reads the timer queue and
writes the wheel and the timer log (RocketMQ's two enqueue threads), one dequeue round walks the
due slots and puts their messages (its three dequeue threads), and the flush service forces the
timer log, the wheel and ``config/timercheck`` every ``timer_flush_interval_ms``. Idle, the
enqueue and dequeue services wait ``100 x timer_precision_ms / 1000`` ms between rounds (10 ms
at 100 ms precision), RocketMQ's ``waitForRunning`` of both get services; a dequeue whose put is
refused for now retries after ``500 x timer_precision_ms / 1000`` ms, as RocketMQ's put
service does.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ._services import ServiceThread

if TYPE_CHECKING:
    from ._rmqstore import Store
    from .config import StoreConfig

__all__ = ["TimerDequeueService", "TimerEnqueueService", "TimerFlushService", "timer_services"]

#: Messages one enqueue or dequeue round takes at most (the round then returns so the GIL and
#: close are never held up long).
ROUND_MESSAGES = 4096


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _TimerService(ServiceThread):
    def __init__(self, core: Store, precision_ms: int) -> None:
        super().__init__()
        self._core = core
        #: ``100L * precisionMs / 1000``: the idle wait of RocketMQ's get services.
        self.idle_seconds = 100 * precision_ms / 1000 / 1000
        #: ``500L * precisionMs / 1000``: the pause before a refused put is tried again.
        self.retry_pause_seconds = 500 * precision_ms / 1000 / 1000
        self.rounds = 0
        self.messages = 0

    def stats(self) -> dict[str, float]:
        return {
            **super().stats(),
            "rounds": float(self.rounds),
            "messages": float(self.messages),
            "failures": float(self.failures),
        }


class TimerEnqueueService(_TimerService):
    """Moves messages of ``rmq_sys_wheel_timer`` into the wheel (``TimerEnqueueGetService`` and
    ``TimerEnqueuePutService``); messages due already are delivered at once."""

    name = "TimerEnqueueService"

    def run_once(self) -> bool:
        try:
            step = self._core.timer_enqueue(_now_ms(), ROUND_MESSAGES)
        except Exception:
            return self._round_failed("timer enqueue", self.retry_seconds)
        self._round_ok("timer enqueue")
        self.rounds += 1
        self.messages += step["messages"]
        if step["stalled"]:
            return not self._stopped.wait(self.retry_pause_seconds)
        if step["behind"] == 0:
            return not self._stopped.wait(self.idle_seconds)
        return True


class TimerDequeueService(_TimerService):
    """Delivers due slots to their real topics (``TimerDequeueGetService``, the get-message and
    put-message services)."""

    name = "TimerDequeueService"

    def run_once(self) -> bool:
        try:
            step = self._core.timer_dequeue(_now_ms(), ROUND_MESSAGES)
        except Exception:
            return self._round_failed("timer dequeue", self.retry_seconds)
        self._round_ok("timer dequeue")
        self.rounds += 1
        # Messages passed over after a crash (delivered before it) are work done too: a round
        # spent on them goes on at once.
        done = step["delivered"] + step["rolled"] + step["deleted"] + step["recovered"]
        self.messages += done
        if step["partial"]:
            # The budget ran out (go on at once) or a put was refused for now (pause).
            return done > 0 or not self._stopped.wait(self.retry_pause_seconds)
        return not self._stopped.wait(self.idle_seconds)


class TimerFlushService(ServiceThread):
    """Forces the timer log and wheel and writes ``config/timercheck`` every
    ``timer_flush_interval_ms`` (``TimerFlushService``); close flushes once more."""

    name = "TimerFlushService"

    def __init__(self, core: Store, interval_ms: int) -> None:
        super().__init__()
        self._core = core
        self.interval_seconds = interval_ms / 1000
        self.rounds = 0

    def run_once(self) -> bool:
        if self._stopped.wait(self.interval_seconds):
            return False
        try:
            self._core.timer_flush()
        except Exception:
            return self._round_failed("timer flush")
        self._round_ok("timer flush")
        self.rounds += 1
        return True

    def stats(self) -> dict[str, float]:
        return {**super().stats(), "rounds": float(self.rounds), "failures": float(self.failures)}


def timer_services(core: Store, cfg: StoreConfig) -> list[ServiceThread]:
    """The timer services of a writable store whose core runs the timer engine (none when
    ``timer_wheel_enable`` is off)."""
    if not core.timer_enabled():
        return []
    return [
        TimerEnqueueService(core, cfg.timer_precision_ms),
        TimerDequeueService(core, cfg.timer_precision_ms),
        TimerFlushService(core, cfg.timer_flush_interval_ms),
    ]
