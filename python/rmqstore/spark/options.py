"""Read and write options of the ``rmqstore`` data source: parsing and checking them, with
messages that name the option (see the package docstring for the options)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from .._configfile import UndecodableError, strict_loads
from ..config import StoreConfig
from ..errors import ArgumentOverflowError, InvalidArgumentError, StoreConfigError

#: Default ``rowsPerPartition``: about how many messages a read task reads at most when it
#: packs several small queues.
ROWS_PER_PARTITION = 250_000
#: Longest ``topicPattern``, in characters.
MAX_PATTERN_LENGTH = 64 * 1024

_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1

_OFFSETS_EXAMPLE = '{"TopicA":{"0":23,"1":-1},"TopicB":{"0":-2}}'
_EARLIEST = -2
_LATEST = -1

_SELECTION_OPTIONS = ("topics", "topicpattern", "assign")
_BATCH_OPTIONS = {"endingoffsets", "endingtimestamp", "minpartitions"}
_STREAM_OPTIONS = {"maxoffsetspertrigger", "consumergroup"}
_COMMON_READ_OPTIONS = {
    "path",
    "rowsperpartition",
    *_SELECTION_OPTIONS,
    "startingoffsets",
    "startingtimestamp",
    "failondataloss",
    "includeproperties",
}
_STORE_PREFIX = "store."

# Spellings as documented, for messages (options arrive lower-cased).
_SPELLING = {
    "topicpattern": "topicPattern",
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp",
    "endingtimestamp": "endingTimestamp",
    "failondataloss": "failOnDataLoss",
    "minpartitions": "minPartitions",
    "rowsperpartition": "rowsPerPartition",
    "includeproperties": "includeProperties",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "consumergroup": "consumerGroup",
}


def _spell(name: str) -> str:
    return _SPELLING.get(name, name)


def _bad_option(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"rmqstore data source: {message}")


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _show(text: str, limit: int = 60) -> str:
    """``text`` quoted for a message, cut after ``limit`` characters."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def _describe(value: object) -> str:
    """A JSON value for a message (a type name for containers, which may be huge)."""
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, str):
        return _show(value, 30)
    return "an array" if isinstance(value, list) else "an object"


def _parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name)
    if text is None:
        return default
    value = text.strip().lower()
    if value not in {"true", "false"}:
        raise _bad_option(f"{_spell(name)} must be 'true' or 'false', got {_show(text)}")
    return value == "true"


# ASCII digits only: int() also takes '1_000' and other scripts' digits.
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _to_int(what: str, text: str, minimum: int, maximum: int) -> int:
    """``text`` (an integer, blanks around it allowed) in [minimum, maximum]:
    :class:`ArgumentOverflowError` past a signed 64-bit integer or ``maximum``,
    :class:`InvalidArgumentError` for anything else, each naming ``what``."""
    s = text.strip()
    if not _INTEGER.fullmatch(s):
        raise _bad_option(f"{what} must be an integer, got {_show(text)}")
    digits = s.lstrip("+-").lstrip("0")
    # More than 19 digits is past 64 bits (and int() of a long string is slow, or refused).
    value = int(s) if len(digits) <= 19 else None
    if value is not None and minimum <= value <= maximum:
        return value
    if value is not None and -_I64_MAX - 1 <= value < minimum:
        raise _bad_option(f"{what} must be >= {minimum}, got {value}")
    if value is None:
        sign = "negative " if s.startswith("-") else ""
        shown = f"a {sign}number of {len(digits)} digits"
    else:
        shown = str(value)
    raise ArgumentOverflowError(
        f"rmqstore data source: {what} must be between {minimum} and {maximum}, got {shown}"
    )


def _parse_int(
    options: Mapping[str, str], name: str, minimum: int, maximum: int = _I64_MAX
) -> int | None:
    text = options.get(name)
    if text is None:
        return None
    return _to_int(_spell(name), text, minimum, maximum)


def _store_settings(options: Mapping[str, str]) -> dict[str, Any]:
    """``store.<setting>`` options as typed :class:`StoreConfig` overrides."""
    defaults = StoreConfig()
    fields = {f.name for f in dataclasses.fields(StoreConfig)}
    settings: dict[str, Any] = {}
    for key, text in options.items():
        if not key.startswith(_STORE_PREFIX):
            continue
        name = key[len(_STORE_PREFIX) :]
        if name not in fields:
            raise _bad_option(
                f"option {_show(key)}: {_show(name)} is not a StoreConfig setting "
                f"(known: {', '.join(sorted(fields))})"
            )
        default = getattr(defaults, name)
        value: Any
        if isinstance(default, bool):
            if text.strip().lower() not in {"true", "false"}:
                raise _bad_option(f"option {key!r} must be 'true' or 'false', got {_show(text)}")
            value = text.strip().lower() == "true"
        elif isinstance(default, int):
            # StoreConfig checks each setting's own range below.
            value = _to_int(f"option {key!r}", text, -_I64_MAX - 1, _I64_MAX)
        elif not text:
            raise _bad_option(f"option {key!r} is empty")
        else:
            value = text
        settings[name] = value
    try:
        defaults.replace(**settings)
    except StoreConfigError as exc:
        option = f"store.{exc.setting}" if exc.setting else "store.<setting>"
        raise type(exc)(f"rmqstore data source: option {option!r}: {exc}", exc.setting) from None
    return settings


def _load_json(name: str, text: str, example: str) -> Any:
    """The JSON option ``name``: a number past 64 bits raises :class:`ArgumentOverflowError`,
    a key given twice, deep nesting or bad JSON :class:`InvalidArgumentError`, each naming the
    option."""
    what = _spell(name)
    try:
        return strict_loads(
            text,
            int_error=lambda digits: ArgumentOverflowError(
                f"rmqstore data source: {what}: the number {_show(digits, 24)} is out of the "
                "range of a signed 64-bit integer"
            ),
            duplicate_error=lambda key: _bad_option(f"{what} names {_show(key)} twice"),
        )
    except UndecodableError as exc:
        raise _bad_option(f"{what}: {exc}; expected e.g. {example}") from None
    except RecursionError:
        raise _bad_option(
            f"{what} is nested too deeply (a JSON value like {example} is expected)"
        ) from None
    except json.JSONDecodeError as exc:
        raise _bad_option(f"{what} is not valid JSON ({exc}); expected e.g. {example}") from None


def _queue_id(what: str, text: str, topic: str) -> int:
    """A queue id written as a JSON key: ASCII digits, at most a 32-bit int."""
    if not re.fullmatch(r"[0-9]{1,10}", text) or int(text) > _I32_MAX:
        raise _bad_option(
            f"{what}: queue id {_show(text, 30)} of topic {_show(topic, 30)} is not an "
            f"integer from 0 to {_I32_MAX}"
        )
    return int(text)


OffsetSpec = str | dict[str, dict[int, int]]


def _parse_offsets(name: str, text: str | None, default: str, *, ending: bool) -> OffsetSpec:
    """``earliest`` / ``latest`` / ``{"T":{"0":23}}`` (-2 earliest, -1 latest)."""
    if text is None:
        return default
    what = _spell(name)
    word = text.strip().lower()
    allowed = ("latest",) if ending else ("earliest", "latest")
    if word in allowed:
        return word
    if not text.strip().startswith("{"):
        raise _bad_option(
            f"{what} must be {' or '.join(repr(a) for a in allowed)} or JSON like "
            f"{_OFFSETS_EXAMPLE}, got {_show(text)}"
        )
    raw = _load_json(name, text, _OFFSETS_EXAMPLE)
    result: dict[str, dict[int, int]] = {}
    if not isinstance(raw, dict):
        raise _bad_option(f"{what} must be a JSON object like {_OFFSETS_EXAMPLE}")
    lowest = _LATEST if ending else _EARLIEST
    hint = "-1 (latest) or an offset >= 0" if ending else "-2, -1 or an offset >= 0"
    for topic, queues in raw.items():
        if not isinstance(queues, dict):
            raise _bad_option(
                f"{what}: topic {_show(topic, 30)} must map queue ids to offsets, "
                f"e.g. {_OFFSETS_EXAMPLE}; got {_describe(queues)}"
            )
        per_queue: dict[int, int] = {}
        for qid, offset in queues.items():
            queue_id = _queue_id(what, qid, topic)
            if queue_id in per_queue:
                raise _bad_option(f"{what} names queue {queue_id} of topic {_show(topic)} twice")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < lowest:
                raise _bad_option(
                    f"{what}: offset {_describe(offset)} of {_show(topic, 30)}/{qid} must be "
                    + hint
                )
            per_queue[queue_id] = offset
        result[topic] = per_queue
    return result


_ASSIGN_EXAMPLE = '{"TopicA":[0,1]}'


def _parse_assign(text: str) -> dict[str, tuple[int, ...]]:
    """``{"TopicA":[0,1]}``: topics and the queue ids to read of each."""
    raw = _load_json("assign", text, _ASSIGN_EXAMPLE)
    if not isinstance(raw, dict) or not raw:
        raise _bad_option(f"assign must be JSON like {_ASSIGN_EXAMPLE}, got {_show(text)}")
    assign = {}
    for topic, qids in raw.items():
        if not isinstance(qids, list):
            raise _bad_option(
                f"assign must be JSON like {_ASSIGN_EXAMPLE}: topic {_show(topic, 30)} maps to "
                f"{_describe(qids)}, not a list of queue ids"
            )
        for q in qids:
            if isinstance(q, bool) or not isinstance(q, int) or not 0 <= q <= _I32_MAX:
                raise _bad_option(
                    f"assign must be JSON like {_ASSIGN_EXAMPLE}: queue id {_describe(q)} of "
                    f"topic {_show(topic, 30)} is not an integer from 0 to {_I32_MAX}"
                )
        assign[topic] = tuple(sorted(set(qids)))
    return assign


def _check_pattern(pattern: str) -> None:
    """A ``topicPattern`` that compiles, in bounded time (:func:`_matching_topics` bounds the
    time matching takes)."""
    if not pattern:
        raise _bad_option("topicPattern is empty: give a regex that topic names fully match")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise _bad_option(
            f"topicPattern is {len(pattern)} characters long; at most {MAX_PATTERN_LENGTH}"
        )
    try:
        re.compile(pattern)
    except re.error as exc:
        raise _bad_option(f"topicPattern {_show(pattern)} is not a valid regex: {exc}") from None
    except RecursionError:
        raise _bad_option(
            f"topicPattern {_show(pattern)} is not a valid regex: it nests too deeply"
        ) from None
    except OverflowError as exc:
        raise ArgumentOverflowError(
            f"rmqstore data source: topicPattern {_show(pattern)} is not a valid regex: {exc}"
        ) from None


@dataclasses.dataclass(frozen=True)
class _ReadOptions:
    """Parsed read options; plain data, so readers pickle."""

    path: str
    settings: dict[str, Any]
    topics: tuple[str, ...] | None
    topic_pattern: str | None
    assign: dict[str, tuple[int, ...]] | None
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: int | None
    ending_timestamp: int | None
    fail_on_data_loss: bool
    min_partitions: int | None
    rows_per_partition: int
    include_properties: bool
    max_offsets_per_trigger: int | None
    consumer_group: str | None


def _check_known(options: Mapping[str, str], known: set[str], what: str) -> None:
    for key in options:
        if key in known or key.startswith(_STORE_PREFIX):
            continue
        if key in _BATCH_OPTIONS | _STREAM_OPTIONS | _COMMON_READ_OPTIONS:
            raise _bad_option(f"option {_spell(key)!r} does not apply to {what}")
        raise _bad_option(
            f"unknown option {_show(key)} for {what}; known: "
            f"{', '.join(sorted(_spell(k) for k in known))} and store.<StoreConfig setting>"
        )


def _store_path(options: Mapping[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise _bad_option("no store path: pass it to load()/save() or as option 'path'")
    return path


def _check_is_store(path: str) -> None:
    """Reads never create a store: the folder must hold one (a ``commitlog`` folder)."""
    if not os.path.isdir(os.path.join(path, "commitlog")):
        raise _bad_option(
            f"{_show(path, 200)} is not an rmqstore store (no 'commitlog' folder in it); "
            "give the folder a MessageStore or RocketMQ broker wrote"
        )


def _parse_read_options(raw: Mapping[str, str], *, streaming: bool) -> _ReadOptions:
    options = _lower(raw)
    what = "streaming reads" if streaming else "batch reads"
    known = _COMMON_READ_OPTIONS | (_STREAM_OPTIONS if streaming else _BATCH_OPTIONS)
    _check_known(options, known, what)
    path = _store_path(options)
    given = [_spell(k) for k in _SELECTION_OPTIONS if k in options]
    if len(given) > 1:
        raise _bad_option(f"give at most one of topics, topicPattern, assign; got {given}")
    topics: tuple[str, ...] | None = None
    if "topics" in options:
        topics = tuple(t.strip() for t in options["topics"].split(",") if t.strip())
        if not topics:
            raise _bad_option("topics is empty: give a comma-separated list of topic names")
    pattern = options.get("topicpattern")
    if pattern is not None:
        _check_pattern(pattern)
    assign = _parse_assign(options["assign"]) if "assign" in options else None
    starting = _parse_offsets(
        "startingoffsets",
        options.get("startingoffsets"),
        "latest" if streaming else "earliest",
        ending=False,
    )
    ending = _parse_offsets("endingoffsets", options.get("endingoffsets"), "latest", ending=True)
    if not streaming and starting == "latest":
        # Kafka refuses it for batch reads too: it would always read nothing.
        raise _bad_option("startingOffsets='latest' reads nothing in a batch query")
    start_ts = _parse_int(options, "startingtimestamp", 0)
    end_ts = _parse_int(options, "endingtimestamp", 0)
    if start_ts is not None and end_ts is not None and start_ts > end_ts:
        raise _bad_option(f"startingTimestamp {start_ts} is after endingTimestamp {end_ts}")
    # Spark numbers a scan's partitions with 32-bit ints.
    min_partitions = _parse_int(options, "minpartitions", 1, _I32_MAX)
    rows_per_partition = _parse_int(options, "rowsperpartition", 1)
    max_per_trigger = _parse_int(options, "maxoffsetspertrigger", 1)
    group = options.get("consumergroup")
    if group is not None:
        if not group.strip():
            raise _bad_option("consumerGroup is empty")
        if "@" in group:
            raise _bad_option(
                f"consumerGroup {_show(group)} contains '@', which separates topic and group "
                "in config/consumerOffset.json"
            )
    return _ReadOptions(
        path=path,
        settings=_store_settings(options),
        topics=topics,
        topic_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_timestamp=start_ts,
        ending_timestamp=end_ts,
        fail_on_data_loss=_parse_bool(options, "failondataloss", True),
        min_partitions=min_partitions,
        rows_per_partition=(
            rows_per_partition if rows_per_partition is not None else ROWS_PER_PARTITION
        ),
        include_properties=_parse_bool(options, "includeproperties", False),
        max_offsets_per_trigger=max_per_trigger,
        consumer_group=group,
    )
