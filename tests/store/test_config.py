"""StoreConfig: RocketMQ's defaults, validation naming the bad setting, overrides."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import rmqstore
from rmqstore import FlushDiskType, Message, MessageStore, StoreConfig
from rmqstore._rmqstore import check_settings
from rmqwire import SEGMENT, read_segment, scan_segment, segment_name


def test_defaults_are_rocketmqs() -> None:
    cfg = StoreConfig()
    assert cfg.mapped_file_size_commit_log == 1073741824
    assert cfg.max_message_size == 4194304
    assert cfg.flush_disk_type == "ASYNC_FLUSH"
    assert cfg.warm_mapped_file_enable is False
    assert cfg.flush_least_pages_when_warm_mapped_file == 4096
    assert cfg.check_crc_on_recover is True
    assert cfg.store_host == "127.0.0.1:10911"
    assert cfg.store_path_commit_log is None
    assert cfg.to_dict() == {
        "mapped_file_size_commit_log": 1073741824,
        "max_message_size": 4194304,
        "flush_disk_type": "ASYNC_FLUSH",
        "warm_mapped_file_enable": False,
        "flush_least_pages_when_warm_mapped_file": 4096,
        "prefault_window_commit_log": 32 * 1024 * 1024,
        "check_crc_on_recover": True,
        "check_crc_on_read": True,
        "decompress_body_on_read": True,
        "store_host": "127.0.0.1:10911",
        "store_path_commit_log": None,
        "mapped_file_size_consume_queue": 6000000,
        "message_index_enable": True,
        "index_tags": False,
        "max_hash_slot_num": 5000000,
        "max_index_num": 20000000,
        "max_msgs_num_batch": 64,
        "max_transfer_count_on_message_in_memory": 32,
        "max_transfer_bytes_on_message_in_memory": 262144,
        "max_transfer_count_on_message_in_disk": 8,
        "max_transfer_bytes_on_message_in_disk": 65536,
        "access_message_in_memory_max_ratio": 40,
        "max_filter_message_size": 16000,
        "sync_flush_timeout": 5000,
        "disk_space_warning_level_ratio": 90,
        "file_reserved_time": 72,
        "delete_when": "04",
        "clean_resource_interval": 10000,
        "delete_commit_log_files_interval": 100,
        "delete_consume_queue_files_interval": 100,
        "destroy_mapped_file_interval_forcibly": 120000,
        "redelete_hanged_file_interval": 120000,
        "delete_file_batch_max": 10,
        "clean_file_forcibly_enable": True,
        "disk_max_used_space_ratio": 75,
        "disk_space_clean_forcibly_ratio": 85,
        "os_page_cache_busy_timeout_mills": 1000,
        "flush_interval_commit_log": 500,
        "transient_store_pool_enable": False,
        "transient_store_pool_size": 5,
        "commit_interval_commit_log": 200,
        "commit_commit_log_least_pages": 4,
        "commit_commit_log_thorough_interval": 200,
        "wake_commit_when_put_message": True,
        "flush_commit_log_least_pages": 4,
        "flush_commit_log_thorough_interval": 10000,
        "flush_interval_consume_queue": 1000,
        "flush_consume_queue_least_pages": 2,
        "flush_consume_queue_thorough_interval": 60000,
        "message_delay_level": "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        "flush_delay_offset_interval": 10000,
        "timer_wheel_enable": True,
        "timer_precision_ms": 1000,
        "timer_max_delay_sec": 259200,
        "timer_roll_window_slot": 172800,
        "mapped_file_size_timer_log": 104857600,
        "timer_flush_interval_ms": 1000,
        "timer_congest_num_each_slot": 2147483647,
        "append_topic_for_timer_delete_key": False,
        "transaction_timeout": 6000,
        "transaction_check_max": 15,
        "transaction_check_interval": 30000,
        "transaction_op_msg_max_size": 4096,
        "transaction_op_batch_interval": 3000,
    }


def test_a_store_opened_without_config_uses_the_defaults(store_path: Path) -> None:
    # Nothing is put: the first put would create a 1 GiB segment (and pre-allocate another).
    with MessageStore(store_path) as store:
        assert store.config == StoreConfig()
        assert store.store_path == store_path
        assert store.get_max_phy_offset() == 0
        assert store.commitlog_segments() == []
    assert (store_path / "commitlog").is_dir()
    assert (store_path / "lock").is_file()


def test_config_is_frozen() -> None:
    cfg = StoreConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_message_size = 5  # type: ignore[misc]


BAD_VALUES = [
    ("mapped_file_size_commit_log", -1),
    ("mapped_file_size_commit_log", 0),
    ("mapped_file_size_commit_log", 4095),
    ("mapped_file_size_commit_log", 2**31),
    ("mapped_file_size_commit_log", "65536"),
    ("mapped_file_size_commit_log", 65536.0),
    ("mapped_file_size_commit_log", None),
    ("mapped_file_size_commit_log", True),
    ("max_message_size", 0),
    ("max_message_size", -5),
    ("max_message_size", 2**31),
    ("max_message_size", "4"),
    ("max_message_size", True),
    ("flush_disk_type", "async"),
    ("flush_disk_type", "ASYNC"),
    ("flush_disk_type", ""),
    ("flush_disk_type", 0),
    ("flush_disk_type", None),
    ("flush_disk_type", ["ASYNC_FLUSH"]),
    ("warm_mapped_file_enable", 1),
    ("warm_mapped_file_enable", "true"),
    ("warm_mapped_file_enable", None),
    ("flush_least_pages_when_warm_mapped_file", 0),
    ("flush_least_pages_when_warm_mapped_file", -1),
    ("flush_least_pages_when_warm_mapped_file", False),
    ("flush_least_pages_when_warm_mapped_file", 1.5),
    ("check_crc_on_recover", 0),
    ("check_crc_on_recover", "yes"),
    ("store_host", "localhost:10911"),
    ("store_host", "127.0.0.1"),
    ("store_host", "127.0.0.1:"),
    ("store_host", ":10911"),
    ("store_host", "127.0.0.1:65536"),
    ("store_host", "127.0.0.1:-1"),
    ("store_host", "127.0.0.1:port"),
    ("store_host", "256.0.0.1:10911"),
    ("store_host", "::1:10911"),
    ("store_host", "[::1]"),
    ("store_host", "[127.0.0.1]:10911"),  # brackets are for IPv6 only; the core rejects it
    ("store_host", ""),
    ("store_host", 10911),
    ("store_host", None),
    ("store_host", "127.0.0.1:\u00b2"),  # '²'.isdigit() is True, int('²') fails
    ("store_path_commit_log", 5),
    ("transient_store_pool_enable", 1),
    ("transient_store_pool_size", 0),
    ("transient_store_pool_size", 1025),
    ("commit_interval_commit_log", 0),
    ("commit_commit_log_least_pages", -1),
    ("commit_commit_log_thorough_interval", 0),
    ("wake_commit_when_put_message", "no"),
]


@pytest.mark.parametrize(
    ("setting", "value"), BAD_VALUES, ids=[f"{s}={v!r}" for s, v in BAD_VALUES]
)
def test_bad_value_names_the_setting(setting: str, value: object) -> None:
    with pytest.raises(rmqstore.StoreConfigError) as info:
        StoreConfig(**{setting: value})
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, rmqstore.RmqStoreError)
    assert info.value.setting == setting
    assert setting in str(info.value)


@pytest.mark.parametrize(
    ("setting", "value"), BAD_VALUES, ids=[f"{s}={v!r}" for s, v in BAD_VALUES]
)
def test_the_core_rejects_what_python_rejects(setting: str, value: object) -> None:
    # The core's own check of a settings dict (what opening a store runs) agrees.
    with pytest.raises(rmqstore.StoreConfigError) as info:
        check_settings({setting: value})
    assert info.value.setting == setting


@pytest.mark.parametrize(
    ("setting", "value"), BAD_VALUES[::4], ids=[f"{s}={v!r}" for s, v in BAD_VALUES[::4]]
)
def test_bad_override_fails_before_anything_is_created(
    store_path: Path, setting: str, value: object
) -> None:
    with pytest.raises(rmqstore.StoreConfigError) as info:
        MessageStore(store_path, **{setting: value})
    assert info.value.setting == setting
    with pytest.raises(rmqstore.StoreConfigError):
        StoreConfig().replace(**{setting: value})
    assert not store_path.exists()


def test_unknown_setting_is_a_type_error(store_path: Path) -> None:
    with pytest.raises(rmqstore.UnknownSettingError, match="unknown_setting") as info:
        MessageStore(store_path, unknown_setting=1)
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, rmqstore.RmqStoreError)
    assert info.value.setting == "unknown_setting"
    with pytest.raises(rmqstore.UnknownSettingError, match="unknown_setting"):
        StoreConfig(unknown_setting=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unknown_setting"):
        StoreConfig().replace(unknown_setting=1)
    with pytest.raises(TypeError):
        StoreConfig(65536)  # type: ignore[misc]  # keyword-only
    assert not store_path.exists()


def test_unknown_setting_names_the_closest_one(store_path: Path) -> None:
    with pytest.raises(rmqstore.UnknownSettingError) as info:
        MessageStore(store_path, flush_disk_typ="SYNC_FLUSH")
    assert str(info.value) == (
        "unknown store setting(s): flush_disk_typ; did you mean flush_disk_type?"
    )
    assert info.value.setting == "flush_disk_typ"
    # RocketMQ's camelCase name points at the snake_case one.
    with pytest.raises(TypeError, match=r"did you mean max_message_size\?"):
        StoreConfig().replace(maxMessageSize=100)
    with pytest.raises(TypeError) as several:
        StoreConfig().replace(index_tag=True, max_mesage_size=5, zzz=1)
    assert str(several.value) == (
        "unknown store setting(s): index_tag, max_mesage_size, zzz; "
        "did you mean index_tags for index_tag, max_message_size for max_mesage_size?"
    )
    # Building the config directly says the same (a dataclass alone raises a bare TypeError).
    with pytest.raises(rmqstore.UnknownSettingError) as direct:
        StoreConfig(flush_disk_typ="SYNC_FLUSH")  # type: ignore[call-arg]
    assert str(direct.value) == str(info.value)
    assert StoreConfig(flush_disk_type="SYNC_FLUSH").flush_disk_type == "SYNC_FLUSH"
    with pytest.raises(TypeError) as nothing_close:
        StoreConfig().replace(zzz=1)
    assert str(nothing_close.value) == "unknown store setting(s): zzz"
    assert not store_path.exists()


@pytest.mark.parametrize(
    "host",
    ["10.0.0.1:0", "10.0.0.1:65535", "[::1]:10911", "[fe80::1]:1", "[2001:db8::8:800:200c:417a]:9"],
)
def test_good_store_hosts(host: str) -> None:
    assert StoreConfig(store_host=host).store_host == host


def test_replace_returns_a_copy() -> None:
    base = StoreConfig()
    other = base.replace(max_message_size=100, warm_mapped_file_enable=True)
    assert other.max_message_size == 100
    assert other.warm_mapped_file_enable is True
    assert base.max_message_size == 4194304
    assert base.warm_mapped_file_enable is False


def test_flush_disk_type_accepts_the_enum() -> None:
    cfg = StoreConfig(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    assert cfg.flush_disk_type == "SYNC_FLUSH"
    assert [t.value for t in FlushDiskType] == ["ASYNC_FLUSH", "SYNC_FLUSH"]


def test_overrides_are_applied(store_path: Path) -> None:
    cfg = StoreConfig(mapped_file_size_commit_log=SEGMENT, max_message_size=4096)
    with MessageStore(store_path, cfg, max_message_size=100, store_host="10.9.8.7:1234") as store:
        assert store.config.max_message_size == 100
        assert store.config.mapped_file_size_commit_log == SEGMENT
        assert store.config.store_host == "10.9.8.7:1234"
        assert cfg.max_message_size == 4096  # the given config is not changed
        assert store.put_message(Message("T", bytes(100))).ok
        too_big = store.put_message(Message("T", bytes(101)))
        assert too_big.status is rmqstore.PutMessageStatus.MESSAGE_ILLEGAL
        m = store.look_message_by_offset(0)
        assert m.store_host == "10.9.8.7:1234"
        assert m.msg_id.startswith("0A090807000004D2")
        store.flush()
        (rec,), _, _ = scan_segment(read_segment(store_path, 0))
        assert rec.store_host == "10.9.8.7:1234"


def test_segment_size_override(open_store, store_path: Path) -> None:
    store = open_store(mapped_file_size_commit_log=128 * 1024)
    for _ in range(60):
        store.put_message(Message("T", bytes(3000)))
    segments = [Path(p) for p in store.commitlog_segments()]
    assert [p.name for p in segments] == [segment_name(0), segment_name(128 * 1024)]
    assert all(p.stat().st_size == 128 * 1024 for p in segments)


def test_store_path_commit_log_override(open_store, store_path: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "cl"
    store = open_store(store_path_commit_log=elsewhere)
    assert store.config.store_path_commit_log == str(elsewhere)
    r = store.put_message(Message("T", b"x"))
    assert r.ok
    assert (elsewhere / segment_name(0)).stat().st_size == SEGMENT
    assert not (store_path / "commitlog" / segment_name(0)).exists()
    assert (store_path / "lock").exists()
    store.close()
    with open_store(store_path_commit_log=str(elsewhere)) as again:
        assert again.look_message_by_offset(0).body == b"x"


def test_sync_flush_store_works(open_store) -> None:
    store = open_store(flush_disk_type="SYNC_FLUSH", warm_mapped_file_enable=True)
    results = [store.put_message(Message("T", bytes(5000))) for _ in range(30)]
    assert all(r.ok for r in results)
    assert store.flush() == store.get_max_phy_offset()
