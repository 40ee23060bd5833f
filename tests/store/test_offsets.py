"""Consumer offsets: RocketMQ's config/consumerOffset.json, its .bak fallback, durable commits."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rmqstore
from rmqstore.offsets import ConsumerOffsetManager
from rmqwire import snapshot

NAME = "consumerOffset.json"
LOGGER = "rmqstore.offsets"


def file_of(config_dir: Path) -> Path:
    return config_dir / NAME


def bak_of(config_dir: Path) -> Path:
    return config_dir / (NAME + ".bak")


def tmp_of(config_dir: Path) -> Path:
    return config_dir / (NAME + ".tmp")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def reload(config_dir: Path) -> dict[str, dict[int, int]]:
    """The table a fresh manager loads from ``config_dir``."""
    with ConsumerOffsetManager(config_dir) as manager:
        return manager.offset_table()


def two_versions(config_dir: Path) -> tuple[bytes, bytes]:
    """Commits twice; returns (previous file content = .bak, current file content)."""
    with ConsumerOffsetManager(config_dir) as m:
        m.commit_offset("G", "T", 0, 5)
        m.commit_offset("G", "T", 1, 6)
    return bak_of(config_dir).read_bytes(), file_of(config_dir).read_bytes()


# -- shape and reload ---------------------------------------------------------------------------


def test_new_folder_is_created_and_the_table_is_empty(config_dir: Path, open_offsets) -> None:
    m = open_offsets()
    assert config_dir.is_dir()
    assert m.path == file_of(config_dir)
    assert m.query_offset("G", "T", 0) == -1
    assert m.offsets("G", "T") == {}
    assert m.groups() == []
    assert m.topics() == []
    assert m.offset_table() == {}
    assert list(config_dir.iterdir()) == []  # nothing is written before the first commit


def test_json_shape_is_rocketmq_offset_table(config_dir: Path, open_offsets) -> None:
    m = open_offsets()
    m.commit_offset("group_a", "TopicTest", 0, 12)
    m.commit_offset("group_a", "TopicTest", 1, 7)
    m.commit_offsets("group_b", "TopicTest", {3: 0, 2: 2**40})
    m.commit_offset("group_a", "%RETRY%group_a", 0, 1)
    assert read_json(file_of(config_dir)) == {
        "offsetTable": {
            "TopicTest@group_a": {"0": 12, "1": 7},
            "TopicTest@group_b": {"2": 2**40, "3": 0},
            "%RETRY%group_a@group_a": {"0": 1},
        }
    }
    # Exactly those types: string queue ids, int (never float or bool) offsets.
    for queues in read_json(file_of(config_dir))["offsetTable"].values():
        for queue_id, offset in queues.items():
            assert type(queue_id) is str
            assert type(offset) is int


def test_reload_sees_committed_values(config_dir: Path, open_offsets) -> None:
    m = open_offsets()
    m.commit_offset("G1", "T1", 0, 10)
    m.commit_offset("G1", "T1", 3, 30)
    m.commit_offset("G2", "T1", 0, 99)
    m.commit_offset("G1", "T2", 1, 11)
    m.commit_offset("G1", "T1", 0, 4)  # an offset may go back, as in RocketMQ
    m.close()
    again = open_offsets()
    assert again.query_offset("G1", "T1", 0) == 4
    assert again.query_offset("G1", "T1", 3) == 30
    assert again.query_offset("G1", "T1", 1) == -1
    assert again.query_offset("G2", "T1", 0) == 99
    assert again.query_offset("G2", "T2", 0) == -1
    assert again.offsets("G1", "T1") == {0: 4, 3: 30}
    assert again.groups() == ["G1", "G2"]
    assert again.groups("T2") == ["G1"]
    assert again.topics() == ["T1", "T2"]
    assert again.topics("G2") == ["T1"]
    assert again.offset_table() == {
        "T1@G1": {0: 4, 3: 30},
        "T1@G2": {0: 99},
        "T2@G1": {1: 11},
    }


def test_largest_values_round_trip(config_dir: Path, open_offsets) -> None:
    m = open_offsets()
    m.commit_offset("G", "T", 2**31 - 1, 2**63 - 1)
    assert reload(config_dir) == {"T@G": {2**31 - 1: 2**63 - 1}}


def test_helpers_return_copies(open_offsets) -> None:
    m = open_offsets()
    m.commit_offset("G", "T", 0, 1)
    m.offsets("G", "T")[0] = 100
    m.offset_table()["T@G"][0] = 100
    assert m.query_offset("G", "T", 0) == 1


def test_bak_after_second_commit_holds_previous_content(config_dir: Path, open_offsets) -> None:
    m = open_offsets()
    m.commit_offset("G", "T", 0, 1)
    assert not bak_of(config_dir).exists()
    first = file_of(config_dir).read_bytes()
    m.commit_offset("G", "T", 0, 2)
    assert bak_of(config_dir).read_bytes() == first
    assert read_json(bak_of(config_dir)) == {"offsetTable": {"T@G": {"0": 1}}}
    assert read_json(file_of(config_dir)) == {"offsetTable": {"T@G": {"0": 2}}}
    second = file_of(config_dir).read_bytes()
    m.commit_offset("G", "T", 1, 3)
    assert bak_of(config_dir).read_bytes() == second
    assert not tmp_of(config_dir).exists()


def test_commit_offsets_is_one_write(config_dir: Path, open_offsets) -> None:
    m = open_offsets()
    m.commit_offset("G", "T", 0, 1)
    before = file_of(config_dir).read_bytes()
    m.commit_offsets("G", "T", {q: 100 + q for q in range(64)})
    # One write: the .bak is the file before the batch, not a half-applied batch.
    assert bak_of(config_dir).read_bytes() == before
    assert m.offsets("G", "T") == {q: 100 + q for q in range(64)}
    assert reload(config_dir) == {"T@G": {q: 100 + q for q in range(64)}}


def test_commit_offsets_with_nothing_writes_nothing(config_dir: Path, open_offsets) -> None:
    m = open_offsets()
    m.commit_offset("G", "T", 0, 1)
    before = snapshot(config_dir)
    m.commit_offsets("G", "T", {})
    assert snapshot(config_dir) == before


# -- RocketMQ's own files -----------------------------------------------------------------------

# What a broker's fastjson writes: pretty-printed with tabs, queue ids as bare numbers (not valid
# JSON), plus dataVersion.
FASTJSON = (
    "{\n"
    '\t"dataVersion":{\n\t\t"counter":7,\n\t\t"stateVersion":0,\n'
    '\t\t"timestamp":1700000000000\n\t},\n'
    '\t"offsetTable":{\n'
    '\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0\n'
    "\t\t},\n"
    '\t\t"TopicTest@please_rename_unique_group_name_4":{1:250,0:248,3:251,2:250\n'
    "\t\t},\n"
    '\t\t"odd{1:name,2:@G":{0:5\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)


def test_reads_rocketmq_fastjson_output_and_keeps_unknown_keys(
    config_dir: Path, open_offsets
) -> None:
    config_dir.mkdir(parents=True)
    file_of(config_dir).write_text(FASTJSON, encoding="utf-8")
    m = open_offsets()
    group = "please_rename_unique_group_name_4"
    assert m.offsets(group, "TopicTest") == {0: 248, 1: 250, 2: 250, 3: 251}
    assert m.query_offset(group, "%RETRY%" + group, 0) == 0
    # Text inside a string that looks like a bare key is left alone.
    assert m.offset_table()["odd{1:name,2:@G"] == {0: 5}
    assert m.groups() == ["G", group]

    m.commit_offset(group, "TopicTest", 0, 252)
    doc = read_json(file_of(config_dir))  # standard JSON from now on
    assert doc["dataVersion"] == {"counter": 7, "stateVersion": 0, "timestamp": 1700000000000}
    assert doc["offsetTable"] == {
        f"%RETRY%{group}@{group}": {"0": 0},
        f"TopicTest@{group}": {"0": 252, "1": 250, "2": 250, "3": 251},
        "odd{1:name,2:@G": {"0": 5},
    }
    assert bak_of(config_dir).read_text(encoding="utf-8") == FASTJSON


def test_unknown_top_level_keys_survive_commits(config_dir: Path, open_offsets) -> None:
    config_dir.mkdir(parents=True)
    extra = {"dataVersion": {"counter": 3, "timestamp": 1}, "pullOffsetTable": {"T@G": {"0": 9}}}
    file_of(config_dir).write_text(json.dumps({**extra, "offsetTable": {}}), encoding="utf-8")
    m = open_offsets()
    m.commit_offset("G", "T", 0, 1)
    m.commit_offset("G", "T", 0, 2)
    assert read_json(file_of(config_dir)) == {**extra, "offsetTable": {"T@G": {"0": 2}}}


# -- fallback to .bak ---------------------------------------------------------------------------

BAD_CONTENT = {
    "empty": b"",
    "blank": b" \n\t",
    "truncated": b'{"offsetTable": {"T@G": {"0": 5, "1"',
    "garbage": b"\x00\x00\x00\x00",
    "not_utf8": b'{"offsetTable": {"T@G\xff": {}}}',
    "top_level_list": b"[]",
    "table_is_list": b'{"offsetTable": []}',
    "queues_are_list": b'{"offsetTable": {"T@G": [1, 2]}}',
    "queue_id_not_int": b'{"offsetTable": {"T@G": {"x": 1}}}',
    "offset_is_string": b'{"offsetTable": {"T@G": {"0": "5"}}}',
    "offset_is_float": b'{"offsetTable": {"T@G": {"0": 5.0}}}',
    "offset_is_bool": b'{"offsetTable": {"T@G": {"0": true}}}',
    "offset_is_nan": b'{"offsetTable": {"T@G": {"0": NaN}}}',
}


@pytest.mark.parametrize("bad", list(BAD_CONTENT))
def test_unusable_file_falls_back_to_bak(
    config_dir: Path, open_offsets, caplog: pytest.LogCaptureFixture, bad: str
) -> None:
    previous, _ = two_versions(config_dir)  # .bak: queue 0 only
    file_of(config_dir).write_bytes(BAD_CONTENT[bad])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        m = open_offsets()
    assert m.offsets("G", "T") == {0: 5}
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(file_of(config_dir)) in warnings[0].getMessage()
    assert ".bak" in warnings[0].getMessage()
    # The bad file is deleted (ConfigManager.load), the .bak kept.
    assert not file_of(config_dir).exists()
    assert bak_of(config_dir).read_bytes() == previous
    # The next commit writes a good file again.
    m.commit_offset("G", "T", 2, 7)
    m.close()
    assert reload(config_dir) == {"T@G": {0: 5, 2: 7}}


def test_missing_file_falls_back_to_bak(
    config_dir: Path, open_offsets, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash after the move to .bak and before the rename: .bak and a temp file remain."""
    previous, current = two_versions(config_dir)
    file_of(config_dir).unlink()
    tmp_of(config_dir).write_bytes(current)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        m = open_offsets()
    assert m.offsets("G", "T") == {0: 5}
    assert any(r.name == LOGGER and r.levelno == logging.WARNING for r in caplog.records)
    assert bak_of(config_dir).read_bytes() == previous
    assert not tmp_of(config_dir).exists()


def test_good_file_is_used_without_warning(
    config_dir: Path, open_offsets, caplog: pytest.LogCaptureFixture
) -> None:
    two_versions(config_dir)
    bak_of(config_dir).write_bytes(b"garbage")  # never read when the file is good
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        m = open_offsets()
    assert m.offsets("G", "T") == {0: 5, 1: 6}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("file_content", "bak_content"),
    [
        pytest.param(b"{broken", b"{broken too", id="both_corrupted"),
        pytest.param(b"", b"", id="both_empty"),
        pytest.param(b"{broken", None, id="corrupted_without_bak"),
        pytest.param(b"", None, id="empty_without_bak"),
        pytest.param(None, b"[1]", id="missing_with_corrupted_bak"),
    ],
)
def test_no_usable_file_raises_store_corrupted_error(
    config_dir: Path, file_content: bytes | None, bak_content: bytes | None
) -> None:
    config_dir.mkdir(parents=True)
    if file_content is not None:
        file_of(config_dir).write_bytes(file_content)
    if bak_content is not None:
        bak_of(config_dir).write_bytes(bak_content)
    tmp_of(config_dir).write_bytes(b'{"offsetTable": {}}')
    before = snapshot(config_dir)
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        ConsumerOffsetManager(config_dir)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, rmqstore.RmqStoreError)
    assert info.value.path == str(file_of(config_dir))
    assert str(file_of(config_dir)) in str(info.value)
    assert snapshot(config_dir) == before  # nothing was changed, not even the temp file


@pytest.mark.parametrize(
    "tmp_content",
    [
        pytest.param(b'{"offsetTable": {"T@G": {"0": 999}}}', id="complete_but_not_renamed"),
        pytest.param(b'{"offsetTable": {"T@G": {"0"', id="half_written"),
        pytest.param(b"", id="empty"),
    ],
)
def test_stray_temp_file_is_ignored(
    config_dir: Path, open_offsets, caplog: pytest.LogCaptureFixture, tmp_content: bytes
) -> None:
    """A crash after writing the temp file and before renaming it: that commit never returned."""
    _, current = two_versions(config_dir)
    tmp_of(config_dir).write_bytes(tmp_content)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        m = open_offsets()
    assert m.offsets("G", "T") == {0: 5, 1: 6}
    assert not caplog.records
    assert file_of(config_dir).read_bytes() == current
    assert not tmp_of(config_dir).exists()
    m.commit_offset("G", "T", 0, 8)
    assert reload(config_dir) == {"T@G": {0: 8, 1: 6}}


def test_stray_temp_file_alone_means_no_offsets(config_dir: Path, open_offsets) -> None:
    config_dir.mkdir(parents=True)
    tmp_of(config_dir).write_bytes(b'{"offsetTable": {"T@G": {"0": 999}}}')
    m = open_offsets()
    assert m.offset_table() == {}


# -- malformed files (issue 15, item 14) --------------------------------------------------------


def _queues(body: bytes) -> bytes:
    return b'{"offsetTable": {"T@G": {' + body + b"}}}"


GOOD = _queues(b'"0": 12')

#: Content RocketMQ's decoder (fastjson2) reads by guessing, or refuses: undecodable here.
#: (tests/interop/test_broker.py runs RocketMQ's own ConfigManager.load on every one.)
MALFORMED = {
    # Queue ids: only a plain decimal Java int.
    "queue_id_0_0": _queues(b'"0": 12, "0_0": 5'),  # fastjson2: 0, replacing queue 0's 12
    "queue_id_plus": _queues(b'"+1": 5'),
    "queue_id_leading_zero": _queues(b'"01": 5'),
    "queue_id_minus_zero": _queues(b'"-0": 5'),
    "queue_id_decimal_point": _queues(b'"1.0": 5'),
    "queue_id_hex": _queues(b'"0x1": 5'),
    "queue_id_space": _queues(b'" 0": 5'),
    "queue_id_empty": _queues(b'"": 5'),
    "queue_id_past_int": _queues(b'"2147483648": 5'),
    "queue_id_below_int": _queues(b'"-2147483649": 5'),
    "queue_id_5000_digits": _queues(b'"' + b"7" * 5000 + b'": 5'),
    "bare_queue_id_past_int": _queues(b"2147483648: 5"),
    # Offsets: only a JSON integer within a Java long.
    "offset_5000_digits": _queues(b'"0": ' + b"9" * 5000),
    "offset_past_long": _queues(b'"0": 9223372036854775808'),
    "offset_below_long": _queues(b'"0": -9223372036854775809'),
    "offset_fraction": _queues(b'"0": 12.5'),
    "offset_exponent": _queues(b'"0": 1e3'),
    "offset_huge_exponent": _queues(b'"0": 1e400'),
    "offset_string_number": _queues(b'"0": "12"'),
    "offset_null": _queues(b'"0": null'),
    "offset_list": _queues(b'"0": [12]'),
    "offset_object": _queues(b'"0": {}'),
    "offset_infinity": _queues(b'"0": Infinity'),
    # Structure.
    "queues_null": b'{"offsetTable": {"T@G": null}}',
    "queues_string": b'{"offsetTable": {"T@G": "0:1"}}',
    "table_string": b'{"offsetTable": "x"}',
    "table_number": b'{"offsetTable": 1}',
    "top_string": b'"x"',
    "top_number": b"5",
    "top_null": b"null",
    "top_true": b"true",
    # Duplicates: which one would be meant?
    "duplicate_queue": _queues(b'"0": 1, "0": 2'),
    "duplicate_queue_bare_and_quoted": _queues(b'0: 1, "0": 2'),
    "duplicate_group": b'{"offsetTable": {"T@G": {"0": 1}, "T@G": {"1": 2}}}',
    "duplicate_top_level_key": b'{"offsetTable": {}, "offsetTable": {"T@G": {"0": 1}}}',
    # Not JSON.
    "trailing_garbage": GOOD + b" xyz",
    "two_documents": GOOD + GOOD,
    "comment": b'{"offsetTable": {"T@G": {"0": 1}} /* c */}',
    "single_quotes": b"{'offsetTable': {'T@G': {'0': 1}}}",
    "byte_order_mark": b"\xef\xbb\xbf" + GOOD,
    "utf8_encoded_surrogate": b'{"offsetTable": {"T\xed\xa0\x80@G": {"0": 1}}}',
    "utf16": GOOD.decode().encode("utf-16"),
    "deep_nesting": b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b', "offsetTable": {}}',
    "nul_byte": GOOD[:-1] + b"\x00}",
}
BAD_CONTENT.update(MALFORMED)


@pytest.mark.parametrize("bad", list(BAD_CONTENT))
def test_unusable_file_without_bak_raises_naming_the_file(config_dir: Path, bad: str) -> None:
    """No .bak to fall back to: a typed error with the file named, nothing changed (RocketMQ
    would delete the file and start from an empty table)."""
    config_dir.mkdir(parents=True)
    file_of(config_dir).write_bytes(BAD_CONTENT[bad])
    before = snapshot(config_dir)
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        ConsumerOffsetManager(config_dir)
    assert info.value.path == str(file_of(config_dir))
    assert str(file_of(config_dir)) in str(info.value)
    assert "no " + str(bak_of(config_dir)) in str(info.value)
    assert len(str(info.value)) < 1000  # a 5,000-digit number is not echoed
    assert snapshot(config_dir) == before


def test_queue_id_0_0_never_replaces_queue_0(
    config_dir: Path, open_offsets, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's case: ``{"0": 12, "0_0": 5}`` read as queue 0 at 5. The file is undecodable:
    the .bak is loaded, and the warning names the file and the queue id."""
    two_versions(config_dir)
    file_of(config_dir).write_bytes(MALFORMED["queue_id_0_0"])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        m = open_offsets()
    assert m.offset_table() == {"T@G": {0: 5}}  # the .bak's, not 12 or a 5 from "0_0"
    (warning,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert str(file_of(config_dir)) in warning
    assert "'0_0'" in warning


def test_well_formed_entries_rocketmq_keeps_are_kept_but_answer_no_offset(
    config_dir: Path, open_offsets
) -> None:
    """Negative offsets and queue ids, keys without '@' and empty keys are what RocketMQ's
    broker also loads and keeps; a negative offset means none (the broker answers a query for
    it with QUERY_NOT_FOUND), so ``query_offset`` gives -1. Commits write them back as they
    were."""
    config_dir.mkdir(parents=True)
    doc = {
        "offsetTable": {
            "T@G": {"0": -5, "1": 7, "-1": 3, "2": -1, "3": -(2**63)},
            "NoSeparator": {"0": 1},
            "": {"0": 2},
            "T\ud800@G": {"0": 4},  # a lone surrogate, escaped: valid JSON
        }
    }
    file_of(config_dir).write_text(json.dumps(doc), encoding="ascii")
    m = open_offsets()
    assert m.query_offset("G", "T", 0) == -1
    assert m.query_offset("G", "T", 1) == 7
    assert m.query_offset("G", "T", 2) == -1
    assert m.query_offset("G", "T", 3) == -1
    assert m.offsets("G", "T") == {1: 7}
    assert m.groups() == ["G"]
    assert m.offset_table()["T@G"] == {-1: 3, 0: -5, 1: 7, 2: -1, 3: -(2**63)}
    m.commit_offset("G", "T", 1, 8)
    m.commit_offset("G", "T", 2, 0)
    written = read_json(file_of(config_dir))["offsetTable"]
    assert written == {
        "T@G": {"-1": 3, "0": -5, "1": 8, "2": 0, "3": -(2**63)},
        "NoSeparator": {"0": 1},
        "": {"0": 2},
        "T\ud800@G": {"0": 4},
    }


# -- file kinds ---------------------------------------------------------------------------------


def test_symlinked_file_is_refused_without_reading_or_falling_back(
    tmp_path: Path, config_dir: Path
) -> None:
    two_versions(config_dir)
    outside = tmp_path / "outside.json"
    outside.write_bytes(GOOD)
    file_of(config_dir).unlink()
    file_of(config_dir).symlink_to(outside)
    before = snapshot(config_dir)
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        ConsumerOffsetManager(config_dir)
    assert info.value.path == str(file_of(config_dir))
    assert "symbolic link" in str(info.value)
    assert snapshot(config_dir) == before
    assert file_of(config_dir).is_symlink()
    assert outside.read_bytes() == GOOD


def test_symlinked_bak_is_refused(tmp_path: Path, config_dir: Path) -> None:
    two_versions(config_dir)
    outside = tmp_path / "outside.json"
    outside.write_bytes(GOOD)
    file_of(config_dir).unlink()  # the load needs the .bak
    bak_of(config_dir).unlink()
    bak_of(config_dir).symlink_to(outside)
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        ConsumerOffsetManager(config_dir)
    assert info.value.path == str(bak_of(config_dir))
    assert bak_of(config_dir).is_symlink()
    assert outside.read_bytes() == GOOD


def test_symlinked_config_folder_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    config_dir = tmp_path / "store" / "config"
    config_dir.parent.mkdir()
    config_dir.symlink_to(elsewhere)
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        ConsumerOffsetManager(config_dir)
    assert info.value.path == str(config_dir)
    assert list(elsewhere.iterdir()) == []


def test_a_fifo_is_refused_at_once(config_dir: Path, in_subprocess) -> None:
    """Reading a FIFO would wait for a writer forever."""
    config_dir.mkdir(parents=True)
    os.mkfifo(file_of(config_dir))
    out = in_subprocess(
        f"""
        import rmqstore
        from rmqstore.offsets import ConsumerOffsetManager
        try:
            ConsumerOffsetManager({str(config_dir)!r})
        except rmqstore.StoreCorruptedError as e:
            print(e.path, "|", e)
        """,
        timeout=20,
    )
    assert out.startswith(str(file_of(config_dir)) + " |")
    assert "not a regular file" in out


def test_a_file_over_64_mib_is_refused_not_deleted(config_dir: Path) -> None:
    two_versions(config_dir)
    with open(file_of(config_dir), "r+b") as f:
        f.truncate(64 * 1024 * 1024 + 1)  # sparse
    before = snapshot(config_dir)
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        ConsumerOffsetManager(config_dir)
    assert info.value.path == str(file_of(config_dir))
    assert str(64 * 1024 * 1024) in str(info.value)
    assert snapshot(config_dir) == before


def test_a_symlink_planted_as_the_temp_file_is_never_followed(
    tmp_path: Path, config_dir: Path, open_offsets
) -> None:
    m = open_offsets()
    m.commit_offset("G", "T", 0, 1)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    tmp_of(config_dir).symlink_to(victim)
    m.commit_offset("G", "T", 0, 2)
    assert victim.read_bytes() == b"precious"
    assert not tmp_of(config_dir).exists()
    assert reload(config_dir) == {"T@G": {0: 2}}


# -- through MessageStore -----------------------------------------------------------------------


def test_store_open_names_the_offsets_file_and_releases_the_folder(store_path: Path) -> None:
    (store_path / "config").mkdir(parents=True)
    offsets_file = store_path / "config" / NAME
    offsets_file.write_bytes(MALFORMED["offset_5000_digits"])
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        rmqstore.MessageStore(store_path)
    assert info.value.path == str(offsets_file)
    offsets_file.write_bytes(GOOD)
    with rmqstore.MessageStore(store_path) as store:  # not locked by the failed open
        assert store.query_offset("G", "T", 0) == 12
        with pytest.raises(rmqstore.ArgumentOverflowError, match="queue_id"):
            store.query_offset("G", "T", 2**31)
        with pytest.raises(rmqstore.ArgumentTypeError, match="offset"):
            store.commit_offset("G", "T", 0, "1")  # type: ignore[arg-type]


# -- arguments ----------------------------------------------------------------------------------

BAD_CALLS: dict[str, Callable[[ConsumerOffsetManager], object]] = {
    "group_empty": lambda m: m.commit_offset("", "T", 0, 1),
    "topic_empty": lambda m: m.commit_offset("G", "", 0, 1),
    "group_with_at": lambda m: m.commit_offset("G@x", "T", 0, 1),
    "topic_with_at": lambda m: m.commit_offset("G", "T@x", 0, 1),
    "group_not_str": lambda m: m.commit_offset(b"G", "T", 0, 1),  # type: ignore[arg-type]
    "topic_none": lambda m: m.commit_offset("G", None, 0, 1),  # type: ignore[arg-type]
    "queue_negative": lambda m: m.commit_offset("G", "T", -1, 1),
    "queue_too_big": lambda m: m.commit_offset("G", "T", 2**31, 1),
    "queue_bool": lambda m: m.commit_offset("G", "T", True, 1),
    "queue_float": lambda m: m.commit_offset("G", "T", 1.0, 1),  # type: ignore[arg-type]
    "queue_str": lambda m: m.commit_offset("G", "T", "1", 1),  # type: ignore[arg-type]
    "offset_negative": lambda m: m.commit_offset("G", "T", 0, -1),
    "offset_too_big": lambda m: m.commit_offset("G", "T", 0, 2**63),
    "offset_bool": lambda m: m.commit_offset("G", "T", 0, False),
    "offset_float": lambda m: m.commit_offset("G", "T", 0, 2.0),  # type: ignore[arg-type]
    "offset_none": lambda m: m.commit_offset("G", "T", 0, None),  # type: ignore[arg-type]
    "batch_group_with_at": lambda m: m.commit_offsets("@", "T", {0: 1}),
    "batch_not_mapping": lambda m: m.commit_offsets("G", "T", [(0, 1)]),  # type: ignore[arg-type]
    "batch_one_bad_offset": lambda m: m.commit_offsets("G", "T", {0: 1, 1: -5, 2: 3}),
    "batch_one_bad_queue": lambda m: m.commit_offsets("G", "T", {0: 1, "1": 2}),  # type: ignore[dict-item]
    "batch_bool_offset": lambda m: m.commit_offsets("G", "T", {0: True}),
    "query_topic_with_at": lambda m: m.query_offset("G", "a@b", 0),
    "query_queue_negative": lambda m: m.query_offset("G", "T", -1),
    "query_queue_bool": lambda m: m.query_offset("G", "T", False),
    "offsets_group_empty": lambda m: m.offsets("", "T"),
    "groups_topic_with_at": lambda m: m.groups("T@G"),
    "topics_group_not_str": lambda m: m.topics(1),  # type: ignore[arg-type]
}


BAD_CALLS.update(
    {
        "group_lone_surrogate": lambda m: m.commit_offset("G\ud800", "T", 0, 1),
        "topic_lone_surrogate": lambda m: m.query_offset("G", "\udfffT", 0),
        "queue_huge": lambda m: m.commit_offset("G", "T", 10**5000, 1),
        "offset_huge": lambda m: m.commit_offset("G", "T", 0, 10**5000),
        "offset_huge_negative": lambda m: m.commit_offset("G", "T", 0, -(10**5000)),
        "batch_queue_too_big": lambda m: m.commit_offsets("G", "T", {2**31: 1}),
        "batch_offset_too_big": lambda m: m.commit_offsets("G", "T", {0: 2**63}),
        "query_queue_too_big": lambda m: m.query_offset("G", "T", 2**63),
        "query_queue_none": lambda m: m.query_offset("G", "T", None),  # type: ignore[arg-type]
        "query_group_int": lambda m: m.query_offset(7, "T", 0),  # type: ignore[arg-type]
    }
)

#: Calls whose argument has the wrong type: ArgumentTypeError, also a TypeError.
WRONG_TYPE = {
    "group_not_str",
    "topic_none",
    "queue_bool",
    "queue_float",
    "queue_str",
    "offset_bool",
    "offset_float",
    "offset_none",
    "batch_not_mapping",
    "batch_one_bad_queue",
    "batch_bool_offset",
    "query_queue_bool",
    "topics_group_not_str",
    "query_queue_none",
    "query_group_int",
}
#: Calls whose integer is past the field's range: ArgumentOverflowError, also an OverflowError.
TOO_BIG = {
    "queue_too_big",
    "offset_too_big",
    "queue_huge",
    "offset_huge",
    "batch_queue_too_big",
    "batch_offset_too_big",
    "query_queue_too_big",
}


def _argument_named(call: str) -> str:
    if call.startswith("batch_") and "queue" in call:
        return "queue id"
    if call.startswith("batch_") and "offset" in call:
        return "offsets["
    if call == "batch_not_mapping":
        return "offsets"
    for name in ("group", "topic", "queue", "offset"):
        if name in call.split("_")[:2] or call.startswith(name):
            return {"queue": "queue_id"}.get(name, name)
    raise AssertionError(call)


@pytest.mark.parametrize("call", list(BAD_CALLS))
def test_invalid_arguments_raise_and_change_nothing(
    config_dir: Path, open_offsets, call: str
) -> None:
    m = open_offsets()
    m.commit_offset("G", "T", 0, 42)
    before = snapshot(config_dir)
    with pytest.raises(rmqstore.InvalidArgumentError) as info:
        BAD_CALLS[call](m)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, rmqstore.RmqStoreError)
    assert isinstance(info.value, rmqstore.ArgumentTypeError) == (call in WRONG_TYPE)
    assert isinstance(info.value, TypeError) == (call in WRONG_TYPE)
    assert isinstance(info.value, rmqstore.ArgumentOverflowError) == (call in TOO_BIG)
    assert isinstance(info.value, OverflowError) == (call in TOO_BIG)
    assert _argument_named(call) in str(info.value)
    assert len(str(info.value)) < 400  # a 5,000-digit argument is not echoed whole
    assert snapshot(config_dir) == before
    assert m.offset_table() == {"T@G": {0: 42}}


# -- lifecycle ----------------------------------------------------------------------------------

CALLS: dict[str, Callable[[ConsumerOffsetManager], object]] = {
    "commit_offset": lambda m: m.commit_offset("G", "T", 0, 1),
    "commit_offsets": lambda m: m.commit_offsets("G", "T", {0: 1, 1: 2}),
    "commit_offsets_empty": lambda m: m.commit_offsets("G", "T", {}),
    "query_offset": lambda m: m.query_offset("G", "T", 0),
    "offsets": lambda m: m.offsets("G", "T"),
    "groups": lambda m: m.groups(),
    "topics": lambda m: m.topics(),
    "offset_table": lambda m: m.offset_table(),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_calls_after_close_raise_store_closed_error(
    config_dir: Path, open_offsets, call: str
) -> None:
    m = open_offsets()
    CALLS[call](m)  # works while open
    assert not m.closed
    m.close()
    m.close()  # idempotent
    assert m.closed
    assert "closed" in repr(m)
    before = snapshot(config_dir)
    with pytest.raises(rmqstore.StoreClosedError) as info:
        CALLS[call](m)
    assert isinstance(info.value, rmqstore.RmqStoreError)
    assert snapshot(config_dir) == before


def test_context_manager_closes(config_dir: Path) -> None:
    with ConsumerOffsetManager(config_dir) as m:
        m.commit_offset("G", "T", 0, 1)
    assert m.closed
    with pytest.raises(rmqstore.StoreClosedError):
        m.commit_offset("G", "T", 0, 2)
    assert reload(config_dir) == {"T@G": {0: 1}}


# -- threads ------------------------------------------------------------------------------------


def test_concurrent_commits_from_8_threads_keep_every_last_value(
    config_dir: Path, open_offsets
) -> None:
    """All threads share one topic@group (one inner map): a lost update would show."""
    m = open_offsets()
    threads_n, rounds = 8, 60
    start = threading.Barrier(threads_n)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(rounds):
                if i % 3 == 2:
                    # A batch touching this thread's two queues.
                    m.commit_offsets("G", "T", {t: i * 10, threads_n + t: i * 10})
                else:
                    m.commit_offset("G", "T", t, i * 10)
                m.commit_offset(f"G{t}", "T", 0, i)  # and a key of its own
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    last = (rounds - 1) * 10
    last_batch = max(i for i in range(rounds) if i % 3 == 2) * 10
    expected = {
        "T@G": dict.fromkeys(range(threads_n), last)
        | {threads_n + t: last_batch for t in range(threads_n)},
        **{f"T@G{t}": {0: rounds - 1} for t in range(threads_n)},
    }
    assert m.offset_table() == expected
    assert reload(config_dir) == expected
    assert not tmp_of(config_dir).exists()
