"""The embedded message store: RocketMQ's ``DefaultMessageStore`` with a Python face."""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from . import _rmqstore
from ._rmqstore import Message, MessageExt, PutMessageResult
from ._services import AllocateMappedFileService, ServiceThread
from .config import StoreConfig

__all__ = ["MessageStore"]

_OPEN_STORES: weakref.WeakSet[MessageStore] = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    for store in list(_OPEN_STORES):
        store.close()


BodyLike = bytes | bytearray | memoryview


class MessageStore:
    """A message store in one folder, in Apache RocketMQ's on-disk format.

    Opening takes the folder's ``lock`` (a second open, here or in another process, raises
    :class:`~rmqstore.errors.StoreLockedError`), loads and recovers what is there, and starts the
    background services. Use it as a context manager, or call :meth:`close`.

    ``config`` is a :class:`StoreConfig`; keyword ``overrides`` change single settings::

        with MessageStore("./store", mapped_file_size_commit_log=64 * 1024 * 1024) as store:
            store.put_message(Message("TopicA", b"hello", tags="TagA", keys=["order-1"]))
    """

    def __init__(
        self,
        store_path: str | os.PathLike[str],
        config: StoreConfig | None = None,
        **overrides: Any,
    ) -> None:
        cfg = config if config is not None else StoreConfig()
        if overrides:
            cfg = cfg.replace(**overrides)
        self._config = cfg
        self._path = Path(store_path)
        self._close_lock = threading.Lock()
        self._core = _rmqstore.Store(os.fspath(self._path), cfg.to_dict())
        self._services: list[ServiceThread] = [AllocateMappedFileService(self._core)]
        for service in self._services:
            service.start()
        _OPEN_STORES.add(self)

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def config(self) -> StoreConfig:
        return self._config

    @property
    def store_path(self) -> Path:
        return self._path

    @property
    def closed(self) -> bool:
        return self._core.closed

    def close(self) -> None:
        """Stops the services, forces everything to disk and releases the folder. Idempotent."""
        with self._close_lock:
            if self._core.closed:
                return
            for service in self._services:
                service.signal_stop()
            self._core.stop_services()
            for service in self._services:
                service.join()
            self._core.close()
            _OPEN_STORES.discard(self)

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        core = getattr(self, "_core", None)
        if core is not None and not core.closed:
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"MessageStore({os.fspath(self._path)!r}, {state})"

    # -- write -----------------------------------------------------------------------------

    def put_message(self, msg: Message) -> PutMessageResult:
        """Appends one message. Bad content is answered by ``result.status``, not raised."""
        return self._core.put_message(msg)

    def put_messages(
        self,
        topic: str,
        queue_id: int,
        bodies: Iterable[BodyLike],
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        flag: int = 0,
        born_timestamp: int | None = None,
        born_host: str | None = None,
    ) -> PutMessageResult:
        """Appends a batch: one record per body, contiguous in one segment, one store timestamp.

        The result gives the first record's ``wrote_offset`` and ``queue_offset``, the bytes of
        all records and their comma-joined ``msg_id``\\ s.
        """
        props = dict(properties) if properties is not None else None
        return self._core.put_messages(
            topic,
            queue_id,
            bodies,
            tags=tags,
            keys=keys,
            properties=props,
            flag=flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
        )

    # -- read ------------------------------------------------------------------------------

    def look_message_by_offset(self, offset: int) -> MessageExt | None:
        """The message whose record starts at commitlog ``offset``; ``None`` outside the log.

        An offset inside the log that is not a record start raises
        :class:`~rmqstore.errors.InvalidArgumentError`.
        """
        return self._core.look_message_by_offset(offset)

    def get_max_phy_offset(self) -> int:
        """End of the last record in the commitlog."""
        return self._core.get_max_phy_offset()

    def get_min_phy_offset(self) -> int:
        """Start of the first commitlog segment; -1 when the commitlog is empty (as RocketMQ)."""
        return self._core.get_min_phy_offset()

    # -- maintenance -----------------------------------------------------------------------

    def flush(self) -> int:
        """Forces everything written to disk now; returns the flushed commitlog offset."""
        return self._core.flush()

    def commitlog_segments(self) -> list[str]:
        """Paths of the commitlog segment files, oldest first."""
        return self._core.commitlog_segments()

    def service_stats(self) -> dict[str, dict[str, float]]:
        """Counters of the background services, by service name."""
        return {service.name: service.stats() for service in self._services}

    def recovery_report(self) -> dict[str, Any]:
        """What recovery found when the store was opened."""
        return self._core.recovery_report()
