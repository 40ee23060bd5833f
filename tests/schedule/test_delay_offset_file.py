"""Issue 17: ``config/delayOffset.json`` in RocketMQ's shape (``DelayOffsetSerializeWrapper``),
written atomically with a ``.bak`` as ``ConfigManager.persist`` does, read back in the forms
RocketMQ 4.9.8 and 5.5.1 write (bare integer keys; 4.9.8 without ``dataVersion``), damaged files
handled like the other config files. The time the crash-recovery scan starts from is the
persist time (``dataVersion.timestamp``), never later than the file's modification time."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import rmqstore
from rmqstore._schedule import DelayOffsetManager

# What fastjson 1.2.69 (RocketMQ 4.9.8's ScheduleMessageService.persist -> encode(true)) and
# fastjson2 2.0.63 (5.5.1's broker) write for offsetTable {1:12, 2:0, 18:5}: keys unquoted,
# tab-indented, 4.9.8 without dataVersion.
ROCKETMQ_498 = '{\n\t"offsetTable":{1:12,2:0,18:5\n\t}\n}'
ROCKETMQ_551 = (
    '{\n\t"dataVersion":{\n\t\t"counter":0,\n\t\t"stateVersion":0,\n\t\t"timestamp":'
    "1700000000123\n\t},\n\t"
    '"offsetTable":{\n\t\t1:12,\n\t\t2:0,\n\t\t18:5\n\t}\n}'
)


def _set_mtime_ms(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 10**6, ms * 10**6))


def test_no_file(tmp_path: Path) -> None:
    with DelayOffsetManager(tmp_path / "config") as m:
        assert m.offset_table() == {}
        assert m.persisted_at_ms == 0
        assert not m.exists
        assert m.data_version() is None
    assert not (tmp_path / "config" / "delayOffset.json").exists()


def test_persist_shape_bak_and_reload(tmp_path: Path) -> None:
    config = tmp_path / "config"
    with DelayOffsetManager(config) as m:
        m.persist({1: 5, 2: 0}, 1_700_000_000_000)
        assert m.exists
        first = (config / "delayOffset.json").read_bytes()
        assert json.loads(first) == {
            "offsetTable": {"1": 5, "2": 0},
            "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 1_700_000_000_000},
        }
        m.persist({1: 7}, 1_700_000_000_500)
        # The previous version is the .bak; no temp file stays behind.
        assert (config / "delayOffset.json.bak").read_bytes() == first
        assert not (config / "delayOffset.json.tmp").exists()
        doc = json.loads((config / "delayOffset.json").read_bytes())
        assert doc["offsetTable"] == {"1": 7, "2": 0}  # level 2 kept
        assert doc["dataVersion"]["counter"] == 2
        # An unchanged table keeps the counter; the timestamp is the new persist time.
        m.persist({1: 7}, 1_700_000_000_900)
        assert m.data_version() == {
            "counter": 2,
            "stateVersion": 0,
            "timestamp": 1_700_000_000_900,
        }
    with DelayOffsetManager(config) as m:
        assert m.offset_table() == {1: 7, 2: 0}
        # The earlier of dataVersion.timestamp (2023) and the file's mtime (now).
        assert m.persisted_at_ms == 1_700_000_000_900


def test_levels_sorted_numerically_and_other_keys_kept(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "delayOffset.json").write_text(
        '{"offsetTable": {"18": 3, "2": 1, "40": 9}, "brokerAddr": "x"}'
    )
    with DelayOffsetManager(config) as m:
        m.persist({2: 4}, 1_000)
    doc = json.loads((config / "delayOffset.json").read_text())
    assert list(doc["offsetTable"].items()) == [("2", 4), ("18", 3), ("40", 9)]
    assert doc["brokerAddr"] == "x"


@pytest.mark.parametrize("text", [ROCKETMQ_498, ROCKETMQ_551], ids=["4.9.8", "5.5.1"])
def test_reads_what_rocketmq_writes(tmp_path: Path, text: str) -> None:
    config = tmp_path / "config"
    config.mkdir()
    path = config / "delayOffset.json"
    path.write_text(text)
    _set_mtime_ms(path, 1_700_000_000_456)
    with DelayOffsetManager(config) as m:
        assert m.offset_table() == {1: 12, 2: 0, 18: 5}
        # 4.9.8: no dataVersion, the file's mtime; 5.5.1: the earlier dataVersion.timestamp.
        expected = 1_700_000_000_456 if text is ROCKETMQ_498 else 1_700_000_000_123
        assert m.persisted_at_ms == expected


def test_copied_file_keeps_the_earlier_time(tmp_path: Path) -> None:
    config = tmp_path / "config"
    with DelayOffsetManager(config) as m:
        m.persist({1: 1}, 1_600_000_000_000)
    _set_mtime_ms(config / "delayOffset.json", 1_500_000_000_000)
    with DelayOffsetManager(config) as m:
        assert m.persisted_at_ms == 1_500_000_000_000


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"   ",
        b"{not json",
        b"\xff\xfe",
        b"[]",
        b'{"offsetTable": []}',
        b'{"offsetTable": {"01": 1}}',
        b'{"offsetTable": {"1.0": 1}}',
        b'{"offsetTable": {"+1": 1}}',
        b'{"offsetTable": {"2147483648": 1}}',
        b'{"offsetTable": {"1": "5"}}',
        b'{"offsetTable": {"1": 1.5}}',
        b'{"offsetTable": {"1": true}}',
        b'{"offsetTable": {"1": null}}',
        b'{"offsetTable": {"1": 9223372036854775808}}',
        b'{"offsetTable": {"1": 1, "1": 2}}',
        b'{"offsetTable": {}, "dataVersion": 5}',
        b'{"offsetTable": {}, "dataVersion": {"timestamp": "now"}}',
    ],
)
def test_damaged_file_falls_back_to_bak(tmp_path: Path, content: bytes) -> None:
    config = tmp_path / "config"
    with DelayOffsetManager(config) as m:
        m.persist({1: 3}, 1_000)
        m.persist({1: 4}, 2_000)
    path = config / "delayOffset.json"
    path.write_bytes(content)
    with DelayOffsetManager(config) as m:
        # The .bak holds the previous version; the bad file is deleted as RocketMQ does.
        assert m.offset_table() == {1: 3}
        assert m.persisted_at_ms == 1_000
    assert not path.exists()


def test_damaged_file_without_bak_refuses(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    path = config / "delayOffset.json"
    path.write_bytes(b'{"offsetTable": {"1": "x"}}')
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        DelayOffsetManager(config)
    assert info.value.path == str(path)
    assert "delay offsets" in str(info.value)
    assert path.read_bytes() == b'{"offsetTable": {"1": "x"}}'  # nothing changed


def test_symlink_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    target = tmp_path / "elsewhere.json"
    target.write_text('{"offsetTable": {"1": 1}}')
    (config / "delayOffset.json").symlink_to(target)
    with pytest.raises(rmqstore.StoreCorruptedError, match="symbolic link"):
        DelayOffsetManager(config)


def test_closed_manager_refuses(tmp_path: Path) -> None:
    m = DelayOffsetManager(tmp_path / "config")
    m.close()
    with pytest.raises(rmqstore.StoreClosedError):
        m.persist({1: 1}, 1)
    with pytest.raises(rmqstore.StoreClosedError):
        m.offset_table()
