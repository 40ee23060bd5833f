"""Store settings: Apache RocketMQ's ``MessageStoreConfig`` names in snake_case, with its defaults.

Only the settings the store acts on are here; each is checked when the config is built, and a
bad value raises :class:`rmqstore.errors.StoreConfigError` (a ``ValueError``) naming it.

The Rust core's settings table (``rmqstore._rmqstore.settings()``) is the source of truth for
every setting's name, type, default, range or choices: the checks here take their ranges and
choices from it, and the tests hold each field of :class:`StoreConfig` (name, order, type,
default, RocketMQ name) to it.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import os
import re
from typing import TYPE_CHECKING, Any

from ._rmqstore import check_settings as _check_settings
from ._rmqstore import closest_setting as _closest_setting
from ._rmqstore import settings as _core_settings
from .enums import FlushDiskType
from .errors import StoreConfigError, UnknownSettingError

if TYPE_CHECKING:
    from ._rmqstore import _Setting

__all__ = ["StoreConfig"]

_GiB = 1024 * 1024 * 1024
_MiB = 1024 * 1024
_I32_MAX = 2**31 - 1

# The core's settings table, in field order.
_SETTINGS: list[_Setting] = _core_settings()
# RocketMQ's camelCase names of the settings, to their snake_case names.


def _bad(setting: str, problem: str) -> StoreConfigError:
    """The error for a bad value of ``setting``; the message starts with the setting's name."""
    return StoreConfigError(f"{setting}: {problem}", setting)


def _check_int(name: str, value: object, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, f"must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise _bad(name, f"must be between {lo} and {hi}, got {value}")


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise _bad(name, f"must be a bool, got {type(value).__name__}")


def _check_choice(name: str, value: object, choices: list[str]) -> object:
    """``value`` (a :class:`FlushDiskType` stands for its value) if it is one of ``choices``."""
    if isinstance(value, FlushDiskType):
        value = value.value
    if not isinstance(value, str) or value not in choices:
        quoted = [repr(c) for c in choices]
        expected = " or ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)
        raise _bad(name, f"must be {expected}, got {value!r}")
    return value


_PORT = re.compile(r"[0-9]{1,5}")


def _check_host(name: str, value: object) -> None:
    """``ip:port`` as the core parses it: IPv4 bare, IPv6 in brackets, ASCII port 0-65535."""
    ok = False
    if isinstance(value, str):
        host, sep, port = value.rpartition(":")
        if sep and _PORT.fullmatch(port) and int(port) <= 65535:
            bracketed = host.startswith("[") and host.endswith("]")
            try:
                ip = ipaddress.ip_address(host[1:-1] if bracketed else host)
                ok = bracketed == (ip.version == 6)
            except ValueError:
                ok = False
    if not ok:
        raise _bad(name, f"must be 'ip:port' (IPv6 as '[::1]:10911'), got {value!r}")


def _check_path(name: str, value: object) -> object:
    """``value`` as a str path, or None."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise _bad(name, "must be a path or None")
    return os.fspath(value)


def _checked(spec: _Setting, value: object) -> object:
    """``value`` checked against ``spec`` (its row of the core's table), in its stored form."""
    name = spec["name"]
    kind = spec["type"]
    if kind == "int":
        lo, hi = spec["min"], spec["max"]
        assert lo is not None
        assert hi is not None
        _check_int(name, value, lo, hi)
    elif kind == "bool":
        _check_bool(name, value)
    elif kind == "choice":
        assert spec["choices"] is not None
        return _check_choice(name, value, spec["choices"])
    elif kind == "host":
        _check_host(name, value)
    elif kind == "delay_levels":
        if not isinstance(value, str):
            expected = "a str of delays such as '1s 5s 10s 30s 1m 2h 1d'"
            raise _bad(name, f"must be {expected}, got {value!r}")
        # The core parses it (as RocketMQ does) and raises StoreConfigError naming the setting.
        _check_settings({name: value})
    elif kind == "hours":
        if not isinstance(value, str):
            raise _bad(name, f"must be a str of hours such as '04' or '02;14', got {value!r}")
        # The core parses it and raises StoreConfigError naming the setting.
        _check_settings({name: value})
    else:
        return _check_path(name, value)
    return value


def _did_you_mean(unknown: list[str]) -> str:
    """``"; did you mean <setting>?"`` for the unknown names that resemble a setting (the one
    RocketMQ calls that, else the closest spelling, as the core suggests it), or ``""``."""
    guesses = []
    for name in unknown:
        guess = _closest_setting(name)
        if guess is not None:
            guesses.append((name, guess))
    if not guesses:
        return ""
    if len(unknown) == 1:
        return f"; did you mean {guesses[0][1]}?"
    return "; did you mean " + ", ".join(f"{g} for {n}" for n, g in guesses) + "?"


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreConfig:
    """Settings of a :class:`rmqstore.MessageStore` (RocketMQ's names in snake_case;
    docs/architecture.md#settings)."""

    #: ``mappedFileSizeCommitLog``: bytes per commitlog segment (1 GiB). A store must be
    #: reopened, and read by RocketMQ, with the size it was written with.
    mapped_file_size_commit_log: int = _GiB
    #: ``maxMessageSize``: largest body in bytes (4 MiB); a record may exceed it by 64 KiB.
    max_message_size: int = 4 * _MiB
    #: ``flushDiskType``: ``"ASYNC_FLUSH"`` (a service forces written pages every
    #: ``flush_interval_commit_log`` ms) or ``"SYNC_FLUSH"`` (a put returns once its bytes are
    #: forced, sharing forces with concurrent puts; dispatch, and so every read by queue or key,
    #: sees only forced bytes).
    flush_disk_type: str = FlushDiskType.ASYNC_FLUSH.value
    #: ``warmMapedFileEnable``: pre-fault and ``mlock`` each new commitlog segment.
    warm_mapped_file_enable: bool = False
    #: ``flushLeastPagesWhenWarmMapedFile``: pages between forces while warming in SYNC_FLUSH.
    flush_least_pages_when_warm_mapped_file: int = 1024 // 4 * 16
    #: Most bytes of the commitlog segment being appended to that a service thread
    #: (``CommitLogPrefaultService``) faults in ahead of the write position (200 ms of appends at
    #: the measured rate, at least 2 MiB), so that puts find their pages mapped instead of having
    #: the kernel zero each new page on the producer's thread; 0 turns it off. rmqstore's own
    #: setting: nothing is written ahead (RocketMQ's ``warm_mapped_file_enable`` writes and
    #: locks whole segments instead).
    prefault_window_commit_log: int = 32 * _MiB
    #: ``checkCRCOnRecover``: verify body CRCs when recovering at open.
    check_crc_on_recover: bool = True
    #: Verify each record's body CRC whenever a message is read (``get_message``,
    #: ``look_message_by_offset``, ``query_message``, ``read_batch``, Spark): a mismatch raises
    #: :class:`~rmqstore.errors.CorruptRecordError` naming the segment and offset. rmqstore's
    #: own setting (RocketMQ checks CRCs only at recovery); off serves damaged bodies as stored.
    check_crc_on_read: bool = True
    #: Give compressed bodies (the COMPRESSED sysflag that RocketMQ's producers set for bodies
    #: over 4 KiB; ZLIB, LZ4 or ZSTD) back decompressed, as RocketMQ's consumers receive them;
    #: off, ``body`` is the stored bytes. ``MessageExt.stored_body`` always has the stored bytes.
    decompress_body_on_read: bool = True
    #: The broker address written as STOREHOST into every record and used in message ids.
    store_host: str = "127.0.0.1:10911"
    #: ``storePathCommitLog``: commitlog folder; ``None`` means ``<store>/commitlog``.
    store_path_commit_log: str | None = None
    #: ``mappedFileSizeConsumeQueue``: bytes per consume queue segment (300,000 units of 20
    #: bytes); rounded up to whole units.
    mapped_file_size_consume_queue: int = 300_000 * 20
    #: ``messageIndexEnable``: build index files (lookup by key).
    message_index_enable: bool = True
    #: Also index each message's TAGS value (``topic#T#tags``), as RocketMQ 5.4 and later (5.5.1)
    #: do, so that their tag queries and :meth:`MessageStore.query_message_by_tag` find messages.
    #: Off by default: the index of RocketMQ 4.x and 5.3 (and of docs/format.md#index-files).
    index_tags: bool = False
    #: ``maxHashSlotNum``: hash slots per index file.
    max_hash_slot_num: int = 5_000_000
    #: ``maxIndexNum``: entries per index file (one fewer fit).
    max_index_num: int = 20_000_000
    #: ``maxMsgsNumBatch``: most offsets one index lookup returns.
    max_msgs_num_batch: int = 64
    #: ``maxTransferCountOnMessageInMemory``: most messages per read while in page cache.
    max_transfer_count_on_message_in_memory: int = 32
    #: ``maxTransferBytesOnMessageInMemory``: most bytes per read while in page cache.
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    #: ``maxTransferCountOnMessageInDisk``: most messages per read from cold data.
    max_transfer_count_on_message_in_disk: int = 8
    #: ``maxTransferBytesOnMessageInDisk``: most bytes per read from cold data.
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    #: ``accessMessageInMemoryMaxRatio``: percent of RAM behind the log end taken as in memory.
    access_message_in_memory_max_ratio: int = 40
    #: ``maxFilterMessageSize``: consume queue bytes one filtered read may scan.
    max_filter_message_size: int = 16000
    #: ``syncFlushTimeout``: ms a SYNC_FLUSH put waits for its force before answering
    #: FLUSH_DISK_TIMEOUT (the message is stored either way).
    sync_flush_timeout: int = 5000
    #: ``diskSpaceWarningLevelRatio``: percent of the commitlog's disk (the DISK_FULL running
    #: flag) or the consume queues' disk (LOGIC_DISK_FULL) in use above which puts answer
    #: SERVICE_NOT_AVAILABLE until space returns, and the cleaner deletes at once (35 to 90,
    #: RocketMQ's bounds).
    disk_space_warning_level_ratio: int = 90
    #: ``fileReservedTime``: hours a commitlog segment is kept after its last write (its file's
    #: modification time) before the cleaner may delete it; 0 makes every full segment expired.
    #: The segment being written is never deleted.
    file_reserved_time: int = 72
    #: ``deleteWhen``: local hours at which expired segments are deleted, ``;``-separated
    #: (``"04"``, ``"02;14"``), each 0 to 23. A disk above ``disk_max_used_space_ratio`` or
    #: :meth:`MessageStore.execute_delete_files_manually` deletes expired segments at any hour.
    delete_when: str = "04"
    #: ``cleanResourceInterval``: ms between rounds of the commitlog and consume-queue cleaners
    #: (their first round runs 60 s after the store opens).
    clean_resource_interval: int = 10000
    #: ``deleteCommitLogFilesInterval``: ms the commitlog cleaner waits between two deletions.
    delete_commit_log_files_interval: int = 100
    #: ``deleteConsumeQueueFilesInterval``: ms the consume-queue cleaner waits after each queue
    #: that lost files.
    delete_consume_queue_files_interval: int = 100
    #: ``destroyMapedFileIntervalForcibly``: ms after a first deletion attempt when a segment
    #: still in use (a read holds it) is destroyed anyway; whoever still holds its mapping
    #: keeps reading valid bytes, only the file goes.
    destroy_mapped_file_interval_forcibly: int = 120000
    #: ``redeleteHangedFileInterval``: ms between retries to destroy a first segment whose
    #: deletion hung (RocketMQ's ``reDeleteHangedFile``).
    redelete_hanged_file_interval: int = 120000
    #: ``deleteFileBatchMax``: most commitlog segments one cleaner round deletes.
    delete_file_batch_max: int = 10
    #: ``cleanFileForciblyEnable``: a disk above ``disk_space_clean_forcibly_ratio`` (or above
    #: ``disk_space_warning_level_ratio``) deletes the oldest segments whatever their age;
    #: off, only expired ones, at any hour.
    clean_file_forcibly_enable: bool = True
    #: ``diskMaxUsedSpaceRatio``: percent of the commitlog's or consume queues' disk in use
    #: above which expired segments are deleted at any hour (10 to 95).
    disk_max_used_space_ratio: int = 75
    #: ``diskSpaceCleanForciblyRatio``: percent of a disk in use above which segments are
    #: deleted at once, expired or not, with ``clean_file_forcibly_enable`` (30 to 85,
    #: RocketMQ's bounds).
    disk_space_clean_forcibly_ratio: int = 85
    #: ``osPageCacheBusyTimeOutMills``: a put that finds the append lock held longer than this
    #: answers OS_PAGE_CACHE_BUSY.
    os_page_cache_busy_timeout_mills: int = 1000
    #: ``flushIntervalCommitLog``: ms between ASYNC_FLUSH forces.
    flush_interval_commit_log: int = 500
    #: ``flushCommitLogLeastPages``: pages that must be waiting for an ASYNC_FLUSH force.
    flush_commit_log_least_pages: int = 4
    #: ``flushCommitLogThoroughInterval``: ms after which any written byte is forced.
    flush_commit_log_thorough_interval: int = 10000
    #: ``transientStorePoolEnable``: appends go to ``mlock``ed write buffers (one per segment,
    #: from a pool of ``transient_store_pool_size``), which CommitRealTimeService copies into
    #: the segment files every ``commit_interval_commit_log`` ms; readers, dispatch and forces
    #: see only committed bytes, so a put becomes readable up to about that interval later, and
    #: what a killed process had not committed is lost (as RocketMQ's). SYNC_FLUSH puts commit
    #: and force before they return.
    transient_store_pool_enable: bool = False
    #: ``transientStorePoolSize``: write buffers in the pool, each one commitlog segment long
    #: (allocated and locked in memory when the store opens). A segment created while all are
    #: lent is written directly, with a warning.
    transient_store_pool_size: int = 5
    #: ``commitIntervalCommitLog``: ms between commit rounds of the transient store pool.
    commit_interval_commit_log: int = 200
    #: ``commitCommitLogLeastPages``: pages that must be waiting for a commit.
    commit_commit_log_least_pages: int = 4
    #: ``commitCommitLogThoroughInterval``: ms after which any appended byte is committed.
    commit_commit_log_thorough_interval: int = 200
    #: ``wakeCommitWhenPutMessage``: a put wakes the commit service at once instead of it
    #: waiting out its interval.
    wake_commit_when_put_message: bool = True
    #: ``flushIntervalConsumeQueue``: ms between consume queue forces.
    flush_interval_consume_queue: int = 1000
    #: ``flushConsumeQueueLeastPages``: pages that must be waiting for a consume queue force.
    flush_consume_queue_least_pages: int = 2
    #: ``flushConsumeQueueThoroughInterval``: ms after which any consume queue byte is forced.
    flush_consume_queue_thorough_interval: int = 60000
    #: ``messageDelayLevel``: delay of each delay level, level 1 first (units s, m, h, d). A
    #: message put with ``DELAY`` = n is stored in ``SCHEDULE_TOPIC_XXXX`` queue n - 1 and
    #: delivered to its own topic once level n's delay has passed since it was stored (n above
    #: the number of levels is the last level). Parsed as RocketMQ parses it; a malformed string
    #: raises :class:`~rmqstore.errors.StoreConfigError`.
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    #: ``flushDelayOffsetInterval``: ms between saves of the delay levels' progress
    #: (``config/delayOffset.json``).
    flush_delay_offset_interval: int = 10000
    #: ``timerWheelEnable``: timer messages (``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS``,
    #: ``TIMER_DELIVER_MS``) are accepted and delivered when due; off, such a put answers
    #: WHEEL_TIMER_NOT_ENABLE and the timer files are not opened.
    timer_wheel_enable: bool = True
    #: ``timerPrecisionMs``: ms per timer wheel slot, 100, 200, 500 or 1000; deliver times are
    #: rounded down to it. A store is reopened (and read by RocketMQ) with the precision its
    #: wheel was written with.
    timer_precision_ms: int = 1000
    #: ``timerMaxDelaySec``: longest timer delay (3 days); longer answers WHEEL_TIMER_MSG_ILLEGAL.
    timer_max_delay_sec: int = 3 * 24 * 3600
    #: ``timerRollWindowSlot``: slots ahead beyond which a timer message waits in a slot at most
    #: this far ahead and is then put back to the timer topic (``TIMER_ROLL_TIMES``).
    timer_roll_window_slot: int = 2 * 24 * 3600
    #: ``mappedFileSizeTimerLog``: bytes per ``timerlog/`` segment (100 MiB).
    mapped_file_size_timer_log: int = 100 * _MiB
    #: ``timerFlushIntervalMs``: ms between forces of the timer log, wheel and ``timercheck``.
    timer_flush_interval_ms: int = 1000
    #: ``timerCongestNumEachSlot``: messages per wheel slot above which timer puts are refused
    #: at random (always at twice as many) with WHEEL_TIMER_FLOW_CONTROL.
    timer_congest_num_each_slot: int = _I32_MAX
    #: ``appendTopicForTimerDeleteKey``: delete markers name their message as
    #: ``topic+uniqKey`` instead of ``uniqKey``.
    append_topic_for_timer_delete_key: bool = False
    #: ``transactionTimeOut``: ms after its birth before a half message (a prepared
    #: transaction) may be checked; a half carrying ``CHECK_IMMUNITY_TIME_IN_SECONDS`` uses that
    #: instead, as RocketMQ does.
    transaction_timeout: int = 6000
    #: ``transactionCheckMax``: times one transaction is checked (at least once) before its
    #: half message moves to ``TRANS_CHECK_MAX_TIME_TOPIC`` (logged, and ``on_discard`` of
    #: :meth:`MessageStore.set_transaction_checker` called).
    transaction_check_max: int = 15
    #: ``transactionCheckInterval``: ms between rounds of the transaction check service.
    transaction_check_interval: int = 30000
    #: ``transactionOpMsgMaxSize``: characters of queued op text (half queue offsets, each
    #: followed by a comma) that make one op message; capped at ``max_message_size`` - 20 when
    #: used, so that an op message (one entry may pass the size) always fits.
    transaction_op_msg_max_size: int = 4096
    #: ``transactionOpBatchInterval``: ms after the last op message before the queued ops are
    #: written whatever their size (0: each op is written at the next round of the service).
    transaction_op_batch_interval: int = 3000

    def __post_init__(self) -> None:
        # Each setting as the core's table says (in table order), then the rules that tie
        # settings together.
        for spec in _SETTINGS:
            name = spec["name"]
            value = getattr(self, name)
            checked = _checked(spec, value)
            if checked is not value:
                object.__setattr__(self, name, checked)
        if self.timer_precision_ms not in (100, 200, 500, 1000):
            raise _bad(
                "timer_precision_ms",
                f"must be 100, 200, 500 or 1000, got {self.timer_precision_ms}",
            )
        index_bytes = 40 + self.max_hash_slot_num * 4 + self.max_index_num * 20
        if index_bytes > _I32_MAX:
            raise _bad(
                "max_index_num",
                f"an index file of {index_bytes} bytes (40 + 4 x max_hash_slot_num + 20 x "
                f"max_index_num) exceeds {_I32_MAX} bytes",
            )

    def replace(self, **overrides: Any) -> StoreConfig:
        """A copy with some settings changed; an unknown name raises
        :class:`UnknownSettingError` (a ``TypeError``)."""
        _check_names(overrides)
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (what the Rust core reads)."""
        return dataclasses.asdict(self)


def _check_names(settings: dict[str, Any]) -> None:
    """Raise :class:`UnknownSettingError`, with a hint, if a name is not a setting."""
    names = [f.name for f in dataclasses.fields(StoreConfig)]
    unknown = sorted(set(settings) - set(names))
    if unknown:
        hint = _did_you_mean(unknown)
        raise UnknownSettingError(
            f"unknown store setting(s): {', '.join(unknown)}{hint}", unknown[0]
        )


def _init_naming_unknown_settings(init: Any) -> Any:
    """The dataclass's ``__init__``, refusing an unknown keyword with :class:`UnknownSettingError`
    and its hint ("did you mean flush_disk_type?") instead of the bare ``TypeError`` of an
    unexpected keyword; type checkers still see the generated signature."""

    @functools.wraps(init)
    def checked(self: StoreConfig, *args: Any, **settings: Any) -> None:
        _check_names(settings)
        init(self, *args, **settings)

    return checked


StoreConfig.__init__ = _init_naming_unknown_settings(StoreConfig.__init__)  # type: ignore[method-assign]
