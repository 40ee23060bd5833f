"""Type stubs of the compiled extension ``rmqstore._rmqstore`` (checked by mypy.stubtest)."""

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypedDict, final

from ._transaction import EndTransactionResult
from .enums import GetMessageStatus, PutMessageStatus

__all__ = [
    "BLANK_MAGIC_CODE",
    "MESSAGE_MAGIC_CODE",
    "MESSAGE_MAGIC_CODE_V2",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "AllocationStep",
    "ColumnBuffer",
    "CommitStep",
    "DispatchStep",
    "GetMessageResult",
    "GroupCommitStep",
    "Message",
    "MessageExt",
    "PoolBuffers",
    "PrefaultStep",
    "PutMessageResult",
    "ReadBatchBuffers",
    "ScheduleStep",
    "SegmentBuffer",
    "Store",
    "__version__",
    "check_settings",
    "closest_setting",
    "settings",
]

__version__: str
BLANK_MAGIC_CODE: int
SYSTEM_TOPICS: list[str]
SYSTEM_TOPIC_PREFIX: str
MESSAGE_MAGIC_CODE: int
MESSAGE_MAGIC_CODE_V2: int

_BodyLike = bytes | bytearray | memoryview

class _Setting(TypedDict):
    """One row of the core's settings table."""

    name: str
    rocketmq_name: str | None
    type: Literal["int", "bool", "choice", "host", "path", "delay_levels", "hours"]
    default: int | bool | str | None
    min: int | None
    max: int | None
    choices: list[str] | None
    doc: str

def settings() -> list[_Setting]:
    """The core's settings table: every store setting, in field order."""

def closest_setting(name: str) -> str | None:
    """The setting RocketMQ calls ``name``, else the one spelled most like it, or None."""

def check_settings(settings: dict[str, Any]) -> None:
    """Builds and validates the core's config of ``settings`` as opening a store does."""

class _EndOutcome(TypedDict):
    """What ``Store.end_transaction`` did."""

    transaction_id: str
    half_offset: int
    half_queue_offset: int
    commit: bool
    ended: bool
    result: PutMessageResult | None

class _CheckStep(TypedDict):
    """One call of the check walk (``Store.transaction_check``)."""

    to_check: list[int]
    discarded: list[int]
    already_committed: int
    examined: int
    done: bool

class _PendingRow(TypedDict):
    """One pending transaction (``Store.pending_transactions``)."""

    transaction_id: str
    half_offset: int
    half_queue_offset: int
    topic: str
    queue_id: int
    producer_group: str
    born_timestamp: int
    store_timestamp: int
    check_times: int

@final
class Message:
    """A message to put. Immutable once built.

    At most one of ``delay_level`` (property ``DELAY``: one of the store's
    ``message_delay_level`` levels, 1-based; 0 means not delayed), ``deliver_time_ms``
    (``TIMER_DELIVER_MS``, epoch ms), ``delay_ms`` (``TIMER_DELAY_MS``) and ``delay_sec``
    (``TIMER_DELAY_SEC``) schedules the message, as RocketMQ's client setters do; a value that
    is not an int, is negative or too large raises.
    """

    def __new__(
        cls,
        topic: str,
        body: _BodyLike,
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        flag: int = 0,
        queue_id: int = 0,
        born_timestamp: int | None = None,
        born_host: str | None = None,
        delay_level: int | None = None,
        deliver_time_ms: int | None = None,
        delay_ms: int | None = None,
        delay_sec: int | None = None,
    ) -> Message: ...
    @property
    def topic(self) -> str: ...
    @property
    def body(self) -> bytes: ...
    @property
    def tags(self) -> str | None: ...
    @property
    def keys(self) -> list[str]: ...
    @property
    def properties(self) -> dict[str, str]: ...
    @property
    def flag(self) -> int: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def born_timestamp(self) -> int: ...
    @property
    def born_host(self) -> str | None: ...
    @property
    def delay_level(self) -> int | None: ...
    @property
    def deliver_time_ms(self) -> int | None: ...
    @property
    def delay_ms(self) -> int | None: ...
    @property
    def delay_sec(self) -> int | None: ...

@final
class MessageExt:
    """A stored message read back from the commitlog."""

    @property
    def topic(self) -> str: ...
    @property
    def body(self) -> bytes: ...
    @property
    def stored_body(self) -> bytes: ...
    @property
    def compression(self) -> str | None: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def queue_offset(self) -> int: ...
    @property
    def commit_log_offset(self) -> int: ...
    @property
    def store_size(self) -> int: ...
    @property
    def body_crc(self) -> int: ...
    @property
    def flag(self) -> int: ...
    @property
    def sys_flag(self) -> int: ...
    @property
    def born_timestamp(self) -> int: ...
    @property
    def born_host(self) -> str: ...
    @property
    def store_timestamp(self) -> int: ...
    @property
    def store_host(self) -> str: ...
    @property
    def reconsume_times(self) -> int: ...
    @property
    def prepared_transaction_offset(self) -> int: ...
    @property
    def properties(self) -> dict[str, str]: ...
    @property
    def tags(self) -> str | None: ...
    @property
    def keys(self) -> list[str]: ...
    @property
    def msg_id(self) -> str: ...

@final
class PutMessageResult:
    """What a put answered."""

    @property
    def status(self) -> PutMessageStatus: ...
    @property
    def ok(self) -> bool: ...
    @property
    def wrote_offset(self) -> int: ...
    @property
    def wrote_bytes(self) -> int: ...
    @property
    def queue_offset(self) -> int: ...
    @property
    def store_timestamp(self) -> int: ...
    @property
    def msg_num(self) -> int: ...
    @property
    def msg_id(self) -> str | None: ...
    @property
    def record_offsets(self) -> list[int]: ...
    @property
    def transaction_id(self) -> str | None:
        """The transaction id ``prepare_message`` gave the half (also when the put was
        refused: then it names no transaction); None for other puts."""

@final
class GetMessageResult:
    """What a read by queue answered."""

    @property
    def status(self) -> GetMessageStatus: ...
    @property
    def next_begin_offset(self) -> int: ...
    @property
    def min_offset(self) -> int: ...
    @property
    def max_offset(self) -> int: ...
    @property
    def buffer_total_size(self) -> int: ...
    @property
    def messages(self) -> list[MessageExt]: ...
    @property
    def message_count(self) -> int: ...

@final
class ColumnBuffer:
    """Read-only bytes owned by Rust, exposed through the buffer protocol (no copy)."""

    def __len__(self) -> int: ...

@final
class SegmentBuffer:
    """A range of a mapped commitlog segment that ``binary_view`` bodies point into, exposed
    through the buffer protocol (no copy); it keeps the mapping alive and its bytes unchanged."""

    def __len__(self) -> int: ...

@final
class ScheduleStep:
    """What ``Store.schedule_deliver`` did in one round of a delay level."""

    @property
    def delivered(self) -> int:
        """Messages put into their real queues."""
    @property
    def dropped(self) -> int:
        """Messages passed over (unreadable record, unusable REAL_TOPIC/REAL_QID, half topic)."""
    @property
    def offset(self) -> int:
        """The level's progress after the round (next queue offset to deliver)."""
    @property
    def next_due_ms(self) -> int | None:
        """Deliver time in ms of the next message; None when the level's queue is exhausted."""
    @property
    def status(self) -> str | None:
        """PutMessageStatus name of a put that failed (retried next round), else None."""

@final
class DispatchStep:
    """What ``Store.dispatch_step`` did."""

    @property
    def dispatched(self) -> int:
        """Messages dispatched."""
    @property
    def bytes(self) -> int:
        """Commitlog bytes consumed (records and blank records)."""
    @property
    def reput_offset(self) -> int:
        """Where the next call starts."""
    @property
    def behind(self) -> int:
        """Confirmed bytes not dispatched yet."""

@final
class GroupCommitStep:
    """What ``Store.group_commit_step`` did."""

    @property
    def flushed(self) -> bool:
        """The last round forced the commitlog."""
    @property
    def stopped(self) -> bool:
        """The service was told to stop."""
    @property
    def forces(self) -> int:
        """Forces done so far."""

@final
class CommitStep:
    """What ``Store.commit_step`` (transient store pool) did."""

    @property
    def committed(self) -> bool:
        """Bytes were committed (readable now)."""
    @property
    def stopped(self) -> bool:
        """The service was told to stop."""

@final
class PrefaultStep:
    """What ``Store.prefault_step`` did."""

    @property
    def bytes(self) -> int:
        """Commitlog bytes faulted in ahead of the appender."""
    @property
    def stopped(self) -> bool:
        """The service was told to stop."""

@final
class AllocationStep:
    """What ``Store.allocation_service_step`` did."""

    @property
    def allocated(self) -> int:
        """Segments created."""
    @property
    def unlocked(self) -> int:
        """Segments whose pages were unlocked (``munlock``)."""
    @property
    def stopped(self) -> bool:
        """The service was told to stop."""
    @property
    def alloc_seconds(self) -> float:
        """Seconds spent creating (and warming) segments."""

@final
class PoolBuffers:
    """The transient store pool's write buffers."""

    @property
    def available(self) -> int:
        """Buffers free to lend."""
    @property
    def total(self) -> int:
        """Buffers in the pool."""

@final
class ReadBatchBuffers:
    """One bulk read of a queue as Arrow column buffers."""

    @property
    def rows(self) -> int:
        """Rows read."""
    @property
    def next_offset(self) -> int:
        """The queue offset after the last row read."""
    @property
    def columns(self) -> dict[str, ColumnBuffer]:
        """``{column name: ColumnBuffer}``."""

@final
class Store:
    """The Rust store behind ``rmqstore.MessageStore``."""

    def __new__(
        cls,
        path: str,
        config: dict[str, Any],
        read_only: bool = False,
        before_changes: Callable[[], object] | None = None,
    ) -> Store: ...
    @property
    def read_only(self) -> bool: ...
    def put_message(self, msg: Message) -> PutMessageResult: ...
    def put_messages(
        self,
        topic: str,
        queue_id: int,
        bodies: Iterable[_BodyLike],
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        born_timestamp: int | None = None,
        born_host: str | None = None,
    ) -> PutMessageResult: ...
    def dispatch_step(
        self, max_bytes: int, timeout_ms: int, budget_ms: int = 0
    ) -> DispatchStep: ...
    def attach_group_commit(self) -> None: ...
    def group_commit_step(self, timeout_ms: int, budget_ms: int = 0) -> GroupCommitStep: ...
    def _panic_for_tests(self) -> None: ...
    def skipped_records(self) -> int: ...
    def group_commit_forces(self) -> int: ...
    def flush_commitlog(self, least_pages: int) -> int: ...
    def commit_step(self, least_pages: int, timeout_ms: int) -> CommitStep: ...
    def transient_store_pool_buffers(self) -> PoolBuffers | None: ...
    def get_committed_where(self) -> int: ...
    def flush_consume_queues(self, least_pages: int) -> None: ...
    def is_offset_aligned(self, offset: int) -> bool: ...
    def truncate_files(self, offset: int) -> bool: ...
    def check_disk_space(self) -> float: ...
    def running_flags(self) -> int:
        """The running flags' bits now (``rmqstore.RunningFlags``)."""
    def disk_ratios(self) -> tuple[float, float]:
        """Re-reads how full the commitlog's and the consume queues' file systems are (setting
        or clearing DISK_FULL and LOGIC_DISK_FULL); returns both used fractions."""
    def set_running_flags(self, bits: int, on: bool) -> int:
        """Sets (``on``) or clears running flag ``bits``; returns the bits after."""
    def flush_checkpoint(self) -> None: ...
    def get_flushed_where(self) -> int: ...
    def dispatch_behind_bytes(self) -> int: ...
    def get_confirm_offset(self) -> int: ...
    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int = 32,
        subscription: str | None = None,
    ) -> GetMessageResult: ...
    def query_message(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_timestamp: int = 0,
        end_timestamp: int | None = None,
    ) -> list[MessageExt]: ...
    def query_message_by_tag(
        self,
        topic: str,
        tag: str,
        max_num: int = 32,
        begin_timestamp: int = 0,
        end_timestamp: int | None = None,
    ) -> list[MessageExt]: ...
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_message_total_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_commit_log_offset_in_queue(
        self, topic: str, queue_id: int, consume_queue_offset: int
    ) -> int: ...
    def get_message_store_timestamp(
        self, topic: str, queue_id: int, consume_queue_offset: int
    ) -> int: ...
    def get_earliest_message_time(self, topic: str, queue_id: int) -> int: ...
    def get_offset_in_queue_by_time(
        self, topic: str, queue_id: int, timestamp: int, boundary: str | None = None
    ) -> int: ...
    def read_batch_buffers(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        include_properties: bool = True,
        decompress: bool | None = None,
        body_view: bool = False,
        columns: Iterable[str] | None = None,
    ) -> ReadBatchBuffers: ...
    def topics(self) -> list[str]: ...
    def queue_ids(self, topic: str) -> list[int]: ...
    # Topic deletion (rust/py/src/topics_clean.rs).
    def delete_topics(self, topics: Iterable[str]) -> int: ...
    def clean_unused_topics(self, keep: Iterable[str]) -> list[str]: ...
    def clean_expired_consumer_queues(self) -> list[tuple[str, int]]: ...
    def look_message_by_offset(self, offset: int) -> MessageExt | None: ...
    def get_max_phy_offset(self) -> int: ...
    def get_min_phy_offset(self) -> int: ...
    def next_queue_offset(self, topic: str, queue_id: int) -> int: ...
    def flush(self) -> int: ...
    def commitlog_segments(self) -> list[str]: ...
    def recovery_report(self) -> dict[str, Any]: ...
    @property
    def closed(self) -> bool: ...
    @property
    def state(self) -> str: ...
    def attach_allocation_service(self) -> None: ...
    def allocation_service_step(self, timeout_ms: int) -> AllocationStep: ...
    def preallocated_offsets(self) -> list[int]: ...
    def prefault_step(self, window: int, timeout_ms: int) -> PrefaultStep: ...
    def stop_services(self) -> None: ...
    def close(self) -> None: ...
    def schedule_load(self, offsets: dict[int, int], persisted_at_ms: int) -> dict[int, int]: ...
    def schedule_deliver(self, level: int, max_msgs: int) -> ScheduleStep: ...
    def schedule_offsets(self) -> dict[int, int]: ...
    def schedule_stats(self) -> list[tuple[int, int, int, int, int, int | None]]: ...
    def schedule_levels(self) -> list[int]: ...
    @staticmethod
    def check_host(host: str) -> str: ...
    # timer messages
    def timer_enabled(self) -> bool: ...
    def timer_enqueue(self, now_ms: int, max_msgs: int) -> dict[str, int]: ...
    def timer_dequeue(self, now_ms: int, max_msgs: int) -> dict[str, int]: ...
    def timer_flush(self) -> None: ...
    def timer_stats(self) -> dict[str, int]: ...
    def cancel_timer(
        self, topic: str, uniq_key: str, deliver_time_ms: int | None = None
    ) -> PutMessageResult: ...
    # transactional messages (issue 18)
    def prepare_message(
        self, msg: Message, *, producer_group: str | None = None
    ) -> PutMessageResult: ...
    def end_transaction(self, target: int | str, commit: bool) -> _EndOutcome: ...
    def end_transaction_result(
        self, half_offset_or_transaction_id: int | str, commit: bool
    ) -> EndTransactionResult: ...
    def transaction_wait_ops(self, timeout_ms: int) -> bool: ...
    def transaction_wake_ops(self) -> None: ...
    def transaction_flush_ops(
        self, now_ms: int, max_size: int, interval_ms: int, force: bool
    ) -> int: ...
    def transaction_load(self, half_offset: int, op_offset: int) -> tuple[int, int]: ...
    def transaction_offsets(self) -> tuple[int, int]: ...
    def transaction_stats(self) -> dict[str, int]: ...
    def transaction_check(
        self,
        now_ms: int,
        timeout_ms: int,
        check_max: int,
        file_reserved_ms: int,
        max_to_check: int,
    ) -> _CheckStep: ...
    def transaction_message(self, offset: int) -> MessageExt | None: ...
    def pending_transactions(self, limit: int) -> list[_PendingRow]: ...
    # retention (issue 19): GIL released; paths removed, oldest first
    def delete_expired_commit_log_files(
        self,
        expired_ms: int,
        interval_ms: int,
        destroy_forcibly_ms: int,
        clean_at_once: bool,
        batch_max: int,
    ) -> list[str]: ...
    def redelete_hanged_file(self, destroy_forcibly_ms: int) -> bool: ...
    def clean_consume_queues(self, interval_ms: int) -> tuple[int, int]: ...
