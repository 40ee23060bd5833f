"""Python's StoreConfig against the Rust core's settings table, field by field.

The table (``rmqstore._rmqstore.settings()``) is the one source of truth for every setting's
name, type, default, range or choices. These tests fail when either side gains a setting the
other lacks, when a default, type, range or RocketMQ name differs, or when the core and Python
disagree on whether a value is acceptable.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

import pytest
import rmqstore
from rmqstore import StoreConfig
from rmqstore._rmqstore import check_settings, settings

TABLE = settings()
BY_NAME = {s["name"]: s for s in TABLE}
FIELDS = {f.name: f for f in dataclasses.fields(StoreConfig)}
INTS = [s for s in TABLE if s["type"] == "int"]

# The Python annotation each kind of setting has.
ANNOTATION = {
    "int": "int",
    "bool": "bool",
    "choice": "str",
    "host": "str",
    "path": "str | None",
    "delay_levels": "str",
    "hours": "str",
}


def test_both_sides_have_the_same_settings_in_the_same_order() -> None:
    table, python = set(BY_NAME), set(FIELDS)
    assert not table - python, f"only in the Rust table, not in StoreConfig: {table - python}"
    assert not python - table, f"only in StoreConfig, not in the Rust table: {python - table}"
    assert list(FIELDS) == [s["name"] for s in TABLE]


@pytest.mark.parametrize("name", list(BY_NAME))
def test_default_and_type_agree(name: str) -> None:
    spec, field = BY_NAME[name], FIELDS[name]
    default = getattr(StoreConfig(), name)
    assert default == spec["default"]
    assert type(default) is type(spec["default"])
    assert field.type == ANNOTATION[spec["type"]]
    assert spec["doc"]
    assert "\n" not in spec["doc"]


def _python_docs() -> dict[str, str]:
    """Each field's ``#:`` comment in config.py, joined into one line."""
    source = inspect.getsource(StoreConfig)
    docs: dict[str, str] = {}
    pending: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
        elif m := re.match(r"(\w+): ", stripped):
            if pending:
                docs[m.group(1)] = " ".join(pending)
            pending = []
        else:
            pending = []
    return docs


def test_python_docs_cite_the_tables_rocketmq_names() -> None:
    docs = _python_docs()
    for spec in TABLE:
        doc = docs[spec["name"]]
        cited = re.match(r"``(\w+)``:", doc)
        assert (cited.group(1) if cited else None) == spec["rocketmq_name"], spec["name"]


@pytest.mark.parametrize("name", [s["name"] for s in INTS])
def test_int_ranges_agree(name: str) -> None:
    spec = BY_NAME[name]
    lo, hi = spec["min"], spec["max"]
    assert lo is not None
    assert hi is not None
    for good in (lo, hi):
        if name in ("max_hash_slot_num", "max_index_num") and good == hi:
            continue  # the index file size rule; see test_index_file_rule_agrees
        assert getattr(StoreConfig(**{name: good}), name) == good
        check_settings({name: good})
    for bad in (lo - 1, hi + 1):
        with pytest.raises(rmqstore.StoreConfigError) as py:
            StoreConfig(**{name: bad})
        with pytest.raises(rmqstore.StoreConfigError) as core:
            check_settings({name: bad})
        assert py.value.setting == core.value.setting == name
        assert (
            str(py.value)
            == str(core.value)
            == (f"{name}: must be between {lo} and {hi}, got {bad}")
        )


def test_choices_agree() -> None:
    for spec in TABLE:
        if spec["type"] != "choice":
            continue
        name, choices = spec["name"], spec["choices"]
        assert choices
        for choice in choices:
            assert getattr(StoreConfig(**{name: choice}), name) == choice
            check_settings({name: choice})
        with pytest.raises(rmqstore.StoreConfigError) as py:
            StoreConfig(**{name: "nope"})
        with pytest.raises(rmqstore.StoreConfigError) as core:
            check_settings({name: "nope"})
        assert str(py.value) == str(core.value)


@pytest.mark.parametrize("levels", ["1x", "", "1s  5s", " 1s", "1.5s", "99999999999999999d", "1S"])
def test_delay_level_strings_agree(levels: str) -> None:
    with pytest.raises(rmqstore.StoreConfigError) as py:
        StoreConfig(message_delay_level=levels)
    with pytest.raises(rmqstore.StoreConfigError) as core:
        check_settings({"message_delay_level": levels})
    assert py.value.setting == core.value.setting == "message_delay_level"
    assert str(py.value) == str(core.value)
    assert str(py.value).startswith("message_delay_level: ")


def test_delay_level_strings_rocketmq_takes() -> None:
    for levels in ("1s", "1s 5s 10s  ", "+1s 010m 2h 1d"):
        assert StoreConfig(message_delay_level=levels).message_delay_level == levels
        check_settings({"message_delay_level": levels})
    with pytest.raises(rmqstore.StoreConfigError, match="must be a str"):
        StoreConfig(message_delay_level=5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "when", ["", ";", "04;", ";04", "24", "-1", "+4", " 4", "4 ", "4.0", "a", "04,05"]
)
def test_delete_when_strings_agree(when: str) -> None:
    with pytest.raises(rmqstore.StoreConfigError) as py:
        StoreConfig(delete_when=when)
    with pytest.raises(rmqstore.StoreConfigError) as core:
        check_settings({"delete_when": when})
    assert py.value.setting == core.value.setting == "delete_when"
    assert str(py.value) == str(core.value)
    assert str(py.value).startswith("delete_when: must be hours 0 to 23 separated by ';'")


def test_delete_when_strings_taken() -> None:
    for when in ("04", "4", "0", "23", "02;14", "004", "1;1"):
        assert StoreConfig(delete_when=when).delete_when == when
        check_settings({"delete_when": when})
    with pytest.raises(rmqstore.StoreConfigError, match="must be a str of hours"):
        StoreConfig(delete_when=4)  # type: ignore[arg-type]
    with pytest.raises(rmqstore.StoreConfigError, match="must be a str of hours"):
        check_settings({"delete_when": 4})


def test_the_core_accepts_what_python_builds() -> None:
    check_settings(StoreConfig().to_dict())
    check_settings({})
    small = StoreConfig(
        mapped_file_size_commit_log=4096,
        flush_disk_type="SYNC_FLUSH",
        store_host="[::1]:1",
        store_path_commit_log="/tmp/x",
        max_hash_slot_num=1,
        max_index_num=2,
    )
    check_settings(small.to_dict())


@pytest.mark.parametrize(("slots", "entries"), [(1, 107374180), (1, 107374181), (536870902, 2)])
def test_index_file_rule_agrees(slots: int, entries: int) -> None:
    fits = 40 + slots * 4 + entries * 20 <= 2**31 - 1
    settings: dict[str, Any] = {"max_hash_slot_num": slots, "max_index_num": entries}
    if fits:
        StoreConfig(**settings)
        check_settings(settings)
        return
    with pytest.raises(rmqstore.StoreConfigError) as py:
        StoreConfig(**settings)
    with pytest.raises(rmqstore.StoreConfigError) as core:
        check_settings(settings)
    assert str(py.value) == str(core.value)
    assert py.value.setting == core.value.setting == "max_index_num"


def test_the_core_names_the_closest_setting() -> None:
    with pytest.raises(rmqstore.UnknownSettingError) as info:
        check_settings({"flush_disk_typ": "SYNC_FLUSH"})
    assert str(info.value) == "unknown setting 'flush_disk_typ'; did you mean flush_disk_type?"
    assert info.value.setting == "flush_disk_typ"
    assert isinstance(info.value, TypeError)
    with pytest.raises(rmqstore.UnknownSettingError, match="did you mean max_message_size"):
        check_settings({"maxMessageSize": 1})
    with pytest.raises(rmqstore.UnknownSettingError) as info:
        check_settings({"zzz": 1})
    assert str(info.value) == "unknown setting 'zzz'"
