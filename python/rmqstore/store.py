"""The embedded message store: RocketMQ's ``DefaultMessageStore`` with a Python face."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from . import _rmqstore
from ._clean import CleanCommitLogService, CleanConsumeQueueService, CleaningMixin
from ._rmqstore import GetMessageResult, Message, MessageExt, PutMessageResult
from ._schedule import DelayOffsetManager, ScheduleLevelStats, ScheduleMessageService
from ._services import (
    AllocateMappedFileService,
    CheckpointService,
    CommitLogPrefaultService,
    CommitRealTimeService,
    FlushConsumeQueueService,
    FlushRealTimeService,
    GroupCommitService,
    ReputMessageService,
    ServiceThread,
    TopicConfigService,
)
from ._store_topics import TopicDeletionMixin
from ._store_transactions import TransactionsMixin
from ._timer import timer_services
from ._transaction import TransactionalOpBatchService, TransactionCheckService
from .config import StoreConfig
from .enums import FlushDiskType, StoreState
from .errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    StoreClosedError,
    StoreReadOnlyError,
    StoreResourceError,
    unwritable_error,
)
from .offsets import ConsumerOffsetManager
from .topics import TopicConfigManager

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["MessageStore"]

log = logging.getLogger("rmqstore.store")

_OPEN_STORES: weakref.WeakSet[MessageStore] = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    for store in list(_OPEN_STORES):
        store.close()


def _forget_stores_after_fork() -> None:
    """In a forked child: the parent's open stores are the parent's. Their service threads do
    not exist here, their locks may be held forever by threads that do not exist here, and their
    files are the parent's to write; the child leaves them alone (every call raises
    :class:`~rmqstore.errors.StoreClosedError`, closing does nothing)."""
    for store in list(_OPEN_STORES):
        store._forked_copy()
    _OPEN_STORES.clear()


os.register_at_fork(after_in_child=_forget_stores_after_fork)


BodyLike = bytes | bytearray | memoryview


def _resource_error(exc: BaseException, doing: str) -> BaseException:
    """The exception to raise for a failed open: a resource the process ran out of (a thread
    that cannot start, memory) becomes :class:`StoreResourceError`; anything else (already
    typed, or an interrupt) is raised as it is."""
    if isinstance(exc, MemoryError) or (type(exc) is RuntimeError and "thread" in str(exc)):
        return StoreResourceError(
            f"{doing} failed: {exc} (the process is out of threads or memory; everything the "
            "store held was released)"
        )
    return exc


class MessageStore(TransactionsMixin, CleaningMixin, TopicDeletionMixin):
    """A message store in one folder, in Apache RocketMQ's on-disk format.

    Opening takes the folder's ``lock`` (a second open, here or in another process, raises
    :class:`~rmqstore.errors.StoreLockedError`), loads and recovers what is there, and starts the
    background services. Use it as a context manager, or call :meth:`close`.

    ``config`` is a :class:`StoreConfig`; keyword ``overrides`` change single settings::

        with MessageStore("./store", mapped_file_size_commit_log=64 * 1024 * 1024) as store:
            store.put_message(Message("TopicA", b"hello", tags="TagA", keys=["order-1"]))

    ``read_only=True`` opens an existing store for reading while another process (or nothing)
    writes it: no lock is taken, no file is created or changed, no recovery runs and no service
    starts. Reads see what the writer has dispatched, each consume queue unit at the tail
    checked against its commitlog record, so a torn unit or record is never returned; queues
    and segments the writer adds are found as reads reach them. Calls that would change the
    store (puts, flushes, truncation, consumer offset commits) raise
    :class:`~rmqstore.errors.StoreReadOnlyError`; ``query_message`` does too (the index files
    are not opened yet). The segment sizes must be the writer's. If the writer cuts its log
    (``truncate_files``, or recovery after a crash) while a read-only store is open, open the
    read-only store again: it keeps what it had seen.

    A store is not shared across ``fork()``: in a forked child every call on a store the parent
    opened raises :class:`~rmqstore.errors.StoreClosedError` and closing it does nothing (its
    locks, threads and files are the parent's). A child opens stores of its own (a folder the
    parent does not hold open); ``multiprocessing`` workers started with ``fork`` should open
    their stores after they start (``read_only=True`` beside a writing parent).
    """

    def __init__(
        self,
        store_path: str | os.PathLike[str],
        config: StoreConfig | None = None,
        *,
        read_only: bool = False,
        **overrides: Any,
    ) -> None:
        # Set first: close() and __del__ must work on a store whose open failed half-way.
        self._services: list[ServiceThread] = []
        self._offsets: ConsumerOffsetManager | None = None
        self._topic_config: TopicConfigService | None = None
        self._delay_offsets: DelayOffsetManager | None = None
        self._schedule: ScheduleMessageService | None = None
        self._tx_check: TransactionCheckService | None = None
        self._tx_ops: TransactionalOpBatchService | None = None
        self._clean_commit_log: CleanCommitLogService | None = None
        self._clean_consume_queue: CleanConsumeQueueService | None = None
        self._close_lock = threading.Lock()
        self._forked = False
        if not isinstance(store_path, (str, os.PathLike)):
            raise ArgumentTypeError(
                f"store_path must be a str or os.PathLike, not {type(store_path).__name__}"
            )
        path = os.fspath(store_path)
        if not isinstance(path, str):
            raise ArgumentTypeError("store_path must be a text path, not bytes")
        if path == "":
            raise InvalidArgumentError(
                'store_path is empty: give the store\'s folder ("" would put the store in the '
                "current directory)"
            )
        if not isinstance(read_only, bool):
            raise ArgumentTypeError(f"read_only must be a bool, not {type(read_only).__name__}")
        cfg = config if config is not None else StoreConfig()
        if not isinstance(cfg, StoreConfig):
            raise ArgumentTypeError(f"config must be a StoreConfig, not {type(cfg).__name__}")
        if overrides:
            cfg = cfg.replace(**overrides)
        self._config = cfg
        self._path = Path(path)
        # The consumer offsets and the topic table are loaded while the core checks the
        # store's files, before it changes any: a bad config/ file refuses the open with
        # everything as it was.
        loaded: list[ConsumerOffsetManager] = []
        loaded_topics: list[TopicConfigManager] = []
        loaded_delay: list[DelayOffsetManager] = []

        def before_changes() -> None:
            loaded.append(ConsumerOffsetManager(self._path / "config"))
            loaded_topics.append(TopicConfigManager(self._path / "config"))
            loaded_delay.append(DelayOffsetManager(self._path / "config"))

        try:
            self._core = _rmqstore.Store(
                path, cfg.to_dict(), read_only, None if read_only else before_changes
            )
        except BaseException as exc:
            for manager in loaded:
                manager.close()
            for topics in loaded_topics:
                topics.close()
            for delay in loaded_delay:
                delay.close()
            raise _resource_error(exc, "opening the store") from exc
        if type(self).put_message is MessageStore.put_message:
            # put_message only forwards to the binding: calls go to it directly, without a
            # Python frame (about a fifth of a put's cost from Python). A subclass that
            # overrides put_message keeps its own.
            self.__dict__["put_message"] = self._core.put_message
        if read_only:
            _OPEN_STORES.add(self)
            return
        self._offsets = loaded[0]
        self._delay_offsets = loaded_delay[0]
        # config/topics.json: what a broker needs to serve the store's topics (written now,
        # when dispatch finds a new topic or queue, and at close).
        self._topic_config = TopicConfigService(self._core, loaded_topics[0])
        try:
            self._start_services(cfg)
        except BaseException as exc:
            # Whatever failed (a thread that cannot start, an interrupt), nothing is left
            # behind: the started services stop, the store closes and its lock is released.
            self._abandon()
            raise _resource_error(exc, "starting the store's services") from exc
        _OPEN_STORES.add(self)

    def _start_services(self, cfg: StoreConfig) -> None:
        flush: ServiceThread
        if cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH.value:
            flush = GroupCommitService(self._core)
        else:
            flush = FlushRealTimeService.for_config(self._core, cfg)
        services: list[ServiceThread] = [
            AllocateMappedFileService(self._core),
            flush,
            ReputMessageService(self._core),
            FlushConsumeQueueService.for_config(self._core, cfg),
            CheckpointService(self._core),
        ]
        if cfg.transient_store_pool_enable:
            services.append(CommitRealTimeService.for_config(self._core, cfg))
        elif cfg.prefault_window_commit_log > 0:
            services.append(CommitLogPrefaultService(self._core, cfg.prefault_window_commit_log))
        if self._topic_config is not None:
            self._topic_config.sync()
            services.append(self._topic_config)
        services.extend(timer_services(self._core, cfg))
        if self._delay_offsets is not None:
            services.append(self._load_schedule(cfg, self._delay_offsets))
        if self._offsets is not None:
            services.extend(self._load_transactions(cfg, self._offsets))
        services.extend(self._load_cleaning(cfg))
        for service in services:
            service.start()
            self._services.append(service)

    def _load_schedule(
        self, cfg: StoreConfig, manager: DelayOffsetManager
    ) -> ScheduleMessageService:
        """Hands ``config/delayOffset.json``'s offsets to the core (which clamps them to each
        level queue's range and skips what was delivered after the file was written) and
        builds the delivery service."""
        levels = {row[0] for row in self._core.schedule_stats()}
        offsets = {lv: off for lv, off in manager.offset_table().items() if lv in levels}
        self._core.schedule_load(offsets, manager.persisted_at_ms)
        self._schedule = ScheduleMessageService(
            self._core, manager, cfg.flush_delay_offset_interval
        )
        return self._schedule

    def _abandon(self) -> None:
        """Undoes a half-done open: stops what started, closes the core (releasing the lock)."""
        try:
            self.close()
        except BaseException:
            log.exception("closing %s after a failed open failed too", self._path)

    def _forked_copy(self) -> None:
        """Marks this store as the copy a forked child holds (see ``_forget_stores_after_fork``):
        nothing of it is used, stopped or closed in this process."""
        self._forked = True
        self._services = []
        self._offsets = None
        self._topic_config = None
        self._delay_offsets = None
        self._schedule = None
        self._tx_check = None
        self._tx_ops = None
        self._clean_commit_log = None
        self._clean_consume_queue = None
        self._close_lock = threading.Lock()

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

    @property
    def read_only(self) -> bool:
        """Opened with ``read_only=True``."""
        return self._core.read_only

    @property
    def state(self) -> StoreState:
        """Where the store is in its lifecycle (RUNNING while open, SHUTDOWN_OK after close)."""
        return StoreState[self._core.state]

    def close(self) -> None:
        """Stops the services, forces everything to disk and releases the folder. Idempotent.

        In a process forked from the one that opened the store it does nothing: the store is
        the parent's (see :class:`MessageStore`)."""
        if self._forked or not hasattr(self, "_core"):
            return
        with self._close_lock:
            if self._core.closed:
                return
            for service in self._services:
                service.signal_stop()
            self._core.stop_services()
            for service in self._services:
                service.join()
            self._close_transactions()
            self._persist_schedule_at_close()
            self._sync_topic_config_at_close()
            try:
                self._core.close()
            finally:
                if self._offsets is not None:
                    self._offsets.close()
                if self._delay_offsets is not None:
                    self._delay_offsets.close()
                if self._topic_config is not None:
                    self._topic_config.manager.close()
                _OPEN_STORES.discard(self)

    def _persist_schedule_at_close(self) -> None:
        """Writes ``config/delayOffset.json`` from the core's offsets once the schedule
        service stopped (RocketMQ's ``ScheduleMessageService.shutdown``). A failure is logged:
        closing goes on (the next open re-delivers at most what the file does not count)."""
        if self._schedule is None:
            return
        try:
            self._schedule.persist()
        except Exception:
            log.exception("%s: cannot write config/delayOffset.json at close", self._path)

    def _sync_topic_config_at_close(self) -> None:
        """Dispatches what the last puts appended (close would do it next) and makes
        ``config/topics.json`` cover it. A failure is logged: closing goes on."""
        if self._topic_config is None:
            return
        try:
            self._core.flush()
            while self._core.dispatch_behind_bytes() > 0:
                if self._core.dispatch_step(16 * 1024 * 1024, 0, 200).bytes == 0:
                    break
            self._topic_config.sync()
        except Exception:
            log.exception("%s: cannot update config/topics.json at close", self._path)

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
        if core is not None and not getattr(self, "_forked", False) and not core.closed:
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"MessageStore({os.fspath(self._path)!r}, {state})"

    # -- write -----------------------------------------------------------------------------

    def put_message(self, msg: Message) -> PutMessageResult:
        """Appends one message. Bad content is answered by ``result.status``, not raised.

        An open store answers this with the binding's ``Store.put_message`` itself (bound in
        ``__init__``), which does exactly this."""
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
        props: dict[str, str] | None
        if properties is None or isinstance(properties, dict):
            props = properties
        elif isinstance(properties, Mapping):
            props = dict(properties)
        else:
            raise ArgumentTypeError(
                f"properties must be a dict of str to str, not {type(properties).__name__}"
            )
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

    # -- dispatch --------------------------------------------------------------------------

    def dispatch_behind_bytes(self) -> int:
        """Confirmed commitlog bytes not yet dispatched to consume queues and index files.

        At 0, every message put so far is visible to :meth:`get_message`,
        :meth:`query_message` and :meth:`read_batch`. In SYNC_FLUSH mode only flushed bytes
        are confirmed.
        """
        return self._core.dispatch_behind_bytes()

    def wait_dispatched(self, timeout: float = 10.0) -> bool:
        """Waits until :meth:`dispatch_behind_bytes` is 0; False if ``timeout`` passed first."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise ArgumentTypeError(f"timeout must be a number, not {type(timeout).__name__}")
        if not timeout >= 0:  # also refuses NaN
            raise InvalidArgumentError(f"timeout must be >= 0 seconds, got {timeout!r}")
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while self._core.dispatch_behind_bytes() > 0:
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
        return True

    def skipped_records(self) -> int:
        """Damaged records dispatch has passed over since the store opened: records whose topic
        or queue id is not one a put accepts (a damaged or forged record: those bytes are
        outside the body CRC). They get no consume queue unit and no index entry, so no file
        is ever made from their names; each is logged with its commitlog offset."""
        return self._core.skipped_records()

    def get_confirm_offset(self) -> int:
        """How far dispatch may read: the flushed offset (SYNC_FLUSH) or the written end."""
        return self._core.get_confirm_offset()

    # -- read by queue ---------------------------------------------------------------------

    def get_message(  # noqa: PLR0917 - RocketMQ's getMessage signature
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int = 32,
        subscription: str | None = "*",
    ) -> GetMessageResult:
        """Reads up to ``max_msg_nums`` messages of a queue from ``offset``.

        ``subscription`` is RocketMQ's tag expression: ``"*"`` or ``"TagA || TagB"``. The
        status and ``next_begin_offset`` follow RocketMQ's ``getMessage``
        (docs/architecture.md#reading-by-queue).
        """
        return self._core.get_message(group, topic, queue_id, offset, max_msg_nums, subscription)

    def query_message(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_timestamp: int = 0,
        end_timestamp: int | None = None,
    ) -> list[MessageExt]:
        """Messages whose KEYS entry or UNIQ_KEY equals ``key``, newest first, stored within
        ``[begin_timestamp, end_timestamp]`` (ms)."""
        return self._core.query_message(topic, key, max_num, begin_timestamp, end_timestamp)

    def query_message_by_tag(
        self,
        topic: str,
        tag: str,
        max_num: int = 32,
        begin_timestamp: int = 0,
        end_timestamp: int | None = None,
    ) -> list[MessageExt]:
        """Messages whose TAGS value equals ``tag`` exactly, newest first, stored within
        ``[begin_timestamp, end_timestamp]`` (ms), through the ``topic#T#tags`` index entries
        that RocketMQ 5.4+ writes and rmqstore writes with ``index_tags=True`` (RocketMQ's
        ``queryMessage`` with index type ``T``). Messages indexed without them are not found:
        for a full scan by tag use :meth:`get_message` with a subscription."""
        return self._core.query_message_by_tag(topic, tag, max_num, begin_timestamp, end_timestamp)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The queue offset the next dispatched message of the queue will get (0 if none)."""
        return self._core.get_max_offset_in_queue(topic, queue_id)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The first readable queue offset (0 for an unknown queue)."""
        return self._core.get_min_offset_in_queue(topic, queue_id)

    def get_message_total_in_queue(self, topic: str, queue_id: int) -> int:
        return self._core.get_message_total_in_queue(topic, queue_id)

    def get_commit_log_offset_in_queue(
        self, topic: str, queue_id: int, consume_queue_offset: int
    ) -> int:
        """Commitlog offset of the message at a queue offset (0 if none)."""
        return self._core.get_commit_log_offset_in_queue(topic, queue_id, consume_queue_offset)

    def get_message_store_timestamp(
        self, topic: str, queue_id: int, consume_queue_offset: int
    ) -> int:
        """Store timestamp (ms) of the message at a queue offset, -1 if none."""
        return self._core.get_message_store_timestamp(topic, queue_id, consume_queue_offset)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store timestamp of the queue's first readable message, -1 if none."""
        return self._core.get_earliest_message_time(topic, queue_id)

    def get_offset_in_queue_by_time(
        self,
        topic: str,
        queue_id: int,
        timestamp: int,
        boundary: Literal["lower", "upper"] = "lower",
    ) -> int:
        """``"lower"``: the first queue offset stored at or after ``timestamp`` (the max offset
        when none is); ``"upper"``: the last one stored at or before it."""
        return self._core.get_offset_in_queue_by_time(topic, queue_id, timestamp, boundary)

    def read_batch(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        *,
        include_properties: bool = True,
        decompress: bool | None = None,
        body_type: Literal["binary_view", "binary"] = "binary_view",
        columns: Sequence[str] | None = None,
    ) -> pa.RecordBatch:
        """Up to ``max_msgs`` messages of a queue from ``offset`` as a ``pyarrow.RecordBatch``
        (topic, queue_id, queue_offset, commit_log_offset, store_timestamp, born_timestamp,
        tags, keys, properties, body), built in Rust without a Python object per message.

        ``columns`` (a sequence of those names) gives exactly those columns, in that order;
        the others are not built at all (no property is parsed unless tags, keys or properties
        is asked for; no body is decompressed unless body is). Unknown names, names given
        twice and ``"properties"`` with ``include_properties=False`` raise
        :class:`~rmqstore.errors.InvalidArgumentError` naming them; a str or a non-str name
        raises :class:`~rmqstore.errors.ArgumentTypeError`. ``columns=[]`` gives a batch of no
        column whose ``num_rows`` is the number of messages read (a count). Every record read is
        checked (its body CRC too) whatever the columns. ``None`` (the default): every column,
        ``properties`` only with ``include_properties``.

        The read crosses consume queue segments; the next offset to read is the last row's
        ``queue_offset + 1`` (or ``offset`` when the batch is empty).

        Each record's body CRC is checked (``check_crc_on_read``): a damaged record raises
        :class:`~rmqstore.errors.CorruptRecordError` naming its segment, commitlog offset and
        queue offset, and no batch is returned. Compressed bodies come back decompressed;
        ``decompress=False`` gives them as stored (``None``: the store's
        ``decompress_body_on_read``).

        ``body_type="binary_view"`` (the default) gives the body column as Arrow
        ``binary_view`` whose bodies are not copied: each row is a 16-byte view (bodies of up to
        12 bytes inside it) pointing into the commitlog segments' read-only mappings, which the
        batch keeps alive; decompressed bodies are in one more buffer of the batch. The bytes of
        a returned batch never change: they stay readable and equal after ``close()``, the
        store's deletion of their segments, a ``truncate_files`` or the recovery of a store
        opened again in this process (a truncation first gives live batches a private copy of
        the bytes it rewrites), and in a forked child. They are not protected against another
        process rewriting the files. ``body_type="binary"`` copies the bodies into a plain
        ``binary`` column, for consumers that do not take ``binary_view``
        (``batch.column("body").cast(pa.binary())`` does the same afterwards).

        The other columns' memory belongs to the batch until Python drops it; it then goes to a
        pool of this process (at most 64 MiB) that the next reads take their vectors from, so a
        read loop does not fault fresh pages in for every batch.
        """
        from ._arrow import BODY_TYPES, batch_from_buffers, resolve_columns

        if body_type not in BODY_TYPES:
            raise InvalidArgumentError(
                f"body_type must be one of {', '.join(map(repr, BODY_TYPES))}, got {body_type!r}"
            )
        names = resolve_columns(columns, include_properties)
        read = self._core.read_batch_buffers(
            topic,
            queue_id,
            offset,
            max_msgs,
            include_properties,
            decompress,
            body_type == "binary_view",
            None if columns is None else names,
        )
        return batch_from_buffers(read.rows, read.columns, include_properties, body_type, names)

    def topics(self) -> list[str]:
        """Topics that have messages dispatched."""
        return self._core.topics()

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of a topic, ascending."""
        return self._core.queue_ids(topic)

    # -- consumer offsets ------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Records a consumer group's next offset for a queue, durably, in
        ``config/consumerOffset.json`` (RocketMQ's shape; written atomically with a ``.bak``)."""
        self._offset_manager("commit_offset").commit_offset(group, topic, queue_id, offset)

    def commit_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Several queues' offsets of one group and topic in one durable write."""
        self._offset_manager("commit_offsets").commit_offsets(group, topic, offsets)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset of a group for a queue, -1 when none."""
        return self._offset_manager("query_offset").query_offset(group, topic, queue_id)

    def _offset_manager(self, what: str) -> ConsumerOffsetManager:
        if self._forked:
            raise StoreClosedError(
                f"{what}: the store was opened by the process this one forked from; a forked "
                "child cannot use it (open the store in the child once the parent closed it)"
            )
        if self._offsets is None:
            raise StoreReadOnlyError(
                f"the store is open read-only: {what} needs a store opened for writing "
                "(consumer offsets live in config/consumerOffset.json, which a read-only store "
                "does not open)"
            )
        return self._offsets

    @property
    def consumer_offsets(self) -> ConsumerOffsetManager:
        """The consumer offset table (``config/consumerOffset.json``); a read-only store raises
        :class:`~rmqstore.errors.StoreReadOnlyError`."""
        return self._offset_manager("consumer_offsets")

    # -- scheduled messages ----------------------------------------------------------------

    def schedule_stats(self) -> list[ScheduleLevelStats]:
        """Every delay level of ``message_delay_level``: its delay, the next offset of its
        ``SCHEDULE_TOPIC_XXXX`` queue to deliver, the queue's end, the messages pending and the
        deliver time (epoch ms) of the oldest one (None when none is pending). A read-only
        store raises :class:`~rmqstore.errors.StoreReadOnlyError`."""
        self._check_schedule("schedule_stats")
        return [ScheduleLevelStats(*row) for row in self._core.schedule_stats()]

    def schedule_offsets(self) -> dict[int, int]:
        """Delay level -> the next offset of its queue to deliver (what
        ``config/delayOffset.json`` holds once persisted). A read-only store raises
        :class:`~rmqstore.errors.StoreReadOnlyError`."""
        self._check_schedule("schedule_offsets")
        return dict(self._core.schedule_offsets())

    def _check_schedule(self, what: str) -> None:
        err = unwritable_error(
            what,
            forked=self._forked,
            read_only=self._core.read_only,
            why="the delay levels' progress lives in config/delayOffset.json, which a read-only "
            "store does not open, and no schedule service runs",
        )
        if err is not None:
            raise err

    # -- read by commitlog offset ----------------------------------------------------------

    def look_message_by_offset(self, offset: int) -> MessageExt | None:
        """The message whose record starts at commitlog ``offset``; ``None`` outside the log.

        An offset inside the log that is not a record start raises
        :class:`~rmqstore.errors.InvalidArgumentError`.
        """
        return self._core.look_message_by_offset(offset)

    # -- timer messages --------------------------------------------------------------------

    def cancel_timer(
        self, topic: str, uniq_key: str, deliver_time_ms: int | None = None
    ) -> PutMessageResult:
        """Cancels the pending timer message of ``topic`` whose ``UNIQ_KEY`` is ``uniq_key``, as
        RocketMQ's recall does: a delete marker (``TIMER_DEL_UNIQKEY``) for the message's slot.

        ``deliver_time_ms`` is the recall handle's time (the message's ``TIMER_OUT_MS`` + 1);
        without it the message is looked up by key in ``rmq_sys_wheel_timer`` (the index must
        be on). The result's status is WHEEL_TIMER_MSG_ILLEGAL once that time has passed (the
        message is delivered or about to be), WHEEL_TIMER_NOT_ENABLE with the timer off.
        """
        return self._core.cancel_timer(topic, uniq_key, deliver_time_ms)

    def timer_stats(self) -> dict[str, int]:
        """The timer engine's state: ``enqueue_offset`` / ``queue_max_offset`` (the
        ``rmq_sys_wheel_timer`` queue), ``read_time_ms`` (next slot to deliver), ``write_time_ms``,
        ``pending`` (messages in the wheel from the read time on), ``timer_log_end``, and totals
        since open: ``enqueued``, ``delivered``, ``rolled``, ``deleted``, ``dropped``, and
        ``recovered`` (work done before a crash and found again at open: timer queue messages
        linked already, copies stored already, a message linked twice into a slot; not
        repeated).

        Raises :class:`~rmqstore.errors.InvalidArgumentError` when ``timer_wheel_enable`` is
        off and :class:`~rmqstore.errors.StoreReadOnlyError` on a read-only store."""
        return self._core.timer_stats()

    def get_max_phy_offset(self) -> int:
        """End of the last record in the commitlog."""
        return self._core.get_max_phy_offset()

    def get_min_phy_offset(self) -> int:
        """Start of the first commitlog segment; -1 when the commitlog is empty (as RocketMQ)."""
        return self._core.get_min_phy_offset()

    # -- maintenance -----------------------------------------------------------------------

    def flush(self) -> int:
        """Forces everything written to disk now (commitlog, consume queues, index files);
        returns the flushed commitlog offset."""
        return self._core.flush()

    def is_offset_aligned(self, offset: int) -> bool:
        """Whether a valid message record (CRC checked) starts at commitlog ``offset``."""
        return self._core.is_offset_aligned(offset)

    def truncate_files(self, offset: int) -> bool:
        """Cuts the store at commitlog ``offset``, which must be a message start
        (:meth:`is_offset_aligned`): that message and every later one leave the commitlog, the
        consume queues and the index, and writing continues there. Returns False, changing
        nothing, when ``offset`` is at or past the end; an offset inside a message raises
        :class:`~rmqstore.errors.InvalidArgumentError`."""
        return self._core.truncate_files(offset)

    def get_flushed_where(self) -> int:
        """How far the commitlog is forced to disk."""
        return self._core.get_flushed_where()

    def get_committed_where(self) -> int:
        """How far the transient store pool's write buffers are committed into the commitlog
        files, and so readable; without the pool every append is readable at once and this is
        the written end (:meth:`get_max_phy_offset`)."""
        return self._core.get_committed_where()

    def transient_store_pool_buffers(self) -> tuple[int, int] | None:
        """The transient store pool's buffers as (free, total), or None when the pool is
        disabled (RocketMQ's ``remainTransientStoreBufferNumbs``)."""
        buffers = self._core.transient_store_pool_buffers()
        return None if buffers is None else (buffers.available, buffers.total)

    def commitlog_segments(self) -> list[str]:
        """Paths of the commitlog segment files, oldest first."""
        return self._core.commitlog_segments()

    def _pause_service(self, name: str) -> None:
        """Stops one background service thread (benchmarks and tests drive its work by hand)."""
        for service in self._services:
            if service.name == name:
                service.signal_stop()
                service.join()
                return
        raise InvalidArgumentError(f"no service named {name!r}")

    def service_stats(self) -> dict[str, dict[str, float]]:
        """Counters of the background services, by service name."""
        return {service.name: service.stats() for service in self._services}

    def recovery_report(self) -> dict[str, Any]:
        """What recovery found when the store was opened.

        ``abnormal`` (the last run did not close cleanly), ``start_offset`` (the segment the
        scan began at, chosen as RocketMQ does: after a clean close the newest segment at or
        before the consume queues' end, after a crash the newest one whose first message is
        older than the checkpoint and that is not after the consume queues' end), ``messages``
        (messages the scan checked),
        ``process_offset`` (the recovered end), ``discarded_bytes`` and ``stop_reason``.
        """
        return self._core.recovery_report()
