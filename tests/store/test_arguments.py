"""Issue 15 item 11: every bad argument of the public API is an exception of the package's tree
(``RmqStoreError``), still the stdlib class that fits (``OverflowError``, ``TypeError``,
``ValueError``), with a message naming the argument; and no argument, however hostile, reaches
a panic (``pyo3_runtime.PanicException`` is not even an ``Exception``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
import rmqstore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rmqstore import Message, MessageStore

HUGE = [2**63, -(2**63) - 1, 2**64, 10**5000, -(10**5000)]
SURROGATE = "a\ud800b"

# Each public call with good arguments, by name, and the kind of each argument.
INT, UINT, STR, OPT_STR, BOOL = "int", "uint", "str", "opt str", "bool"
OUT_OF_RANGE = {
    INT: [2**63, -(2**63) - 1, 2**64, 10**5000, -(10**5000)],
    UINT: [2**64, -1, -(2**63), 10**5000, -(10**5000)],
}


def _calls(
    store: MessageStore,
) -> dict[str, tuple[Callable[..., Any], dict[str, Any], dict[str, str]]]:
    return {
        "get_message": (
            store.get_message,
            {
                "group": "g",
                "topic": "T",
                "queue_id": 0,
                "offset": 0,
                "max_msg_nums": 4,
                "subscription": "*",
            },
            {
                "group": STR,
                "topic": STR,
                "queue_id": INT,
                "offset": INT,
                "max_msg_nums": INT,
                "subscription": OPT_STR,
            },
        ),
        "read_batch": (
            store.read_batch,
            {
                "topic": "T",
                "queue_id": 0,
                "offset": 0,
                "max_msgs": 10,
                "include_properties": True,
                "decompress": None,
            },
            {
                "topic": STR,
                "queue_id": INT,
                "offset": INT,
                "max_msgs": UINT,
                "include_properties": BOOL,
            },
        ),
        "query_message": (
            store.query_message,
            {"topic": "T", "key": "k", "max_num": 4, "begin_timestamp": 0, "end_timestamp": None},
            {
                "topic": STR,
                "key": STR,
                "max_num": UINT,
                "begin_timestamp": INT,
                "end_timestamp": INT,
            },
        ),
        "query_message_by_tag": (
            store.query_message_by_tag,
            {"topic": "T", "tag": "t", "max_num": 4, "begin_timestamp": 0},
            {"topic": STR, "tag": STR, "max_num": UINT, "begin_timestamp": INT},
        ),
        "look_message_by_offset": (store.look_message_by_offset, {"offset": 0}, {"offset": INT}),
        "is_offset_aligned": (store.is_offset_aligned, {"offset": 0}, {"offset": INT}),
        "truncate_files": (store.truncate_files, {"offset": 10**9}, {"offset": INT}),
        "get_max_offset_in_queue": (
            store.get_max_offset_in_queue,
            {"topic": "T", "queue_id": 0},
            {"topic": STR, "queue_id": INT},
        ),
        "get_min_offset_in_queue": (
            store.get_min_offset_in_queue,
            {"topic": "T", "queue_id": 0},
            {"topic": STR, "queue_id": INT},
        ),
        "get_message_total_in_queue": (
            store.get_message_total_in_queue,
            {"topic": "T", "queue_id": 0},
            {"topic": STR, "queue_id": INT},
        ),
        "get_commit_log_offset_in_queue": (
            store.get_commit_log_offset_in_queue,
            {"topic": "T", "queue_id": 0, "consume_queue_offset": 0},
            {"topic": STR, "queue_id": INT, "consume_queue_offset": INT},
        ),
        "get_message_store_timestamp": (
            store.get_message_store_timestamp,
            {"topic": "T", "queue_id": 0, "consume_queue_offset": 0},
            {"topic": STR, "queue_id": INT, "consume_queue_offset": INT},
        ),
        "get_earliest_message_time": (
            store.get_earliest_message_time,
            {"topic": "T", "queue_id": 0},
            {"topic": STR, "queue_id": INT},
        ),
        "get_offset_in_queue_by_time": (
            store.get_offset_in_queue_by_time,
            {"topic": "T", "queue_id": 0, "timestamp": 0, "boundary": "lower"},
            {"topic": STR, "queue_id": INT, "timestamp": INT, "boundary": STR},
        ),
        "queue_ids": (store.queue_ids, {"topic": "T"}, {"topic": STR}),
        "put_messages": (
            store.put_messages,
            {
                "topic": "T",
                "queue_id": 0,
                "bodies": [b"x"],
                "tags": "t",
                "keys": ["k"],
                "properties": {"p": "v"},
                "flag": 0,
                "born_timestamp": 1,
                "born_host": "1.2.3.4:5",
            },
            {
                "topic": STR,
                "queue_id": INT,
                "tags": OPT_STR,
                "flag": INT,
                "born_timestamp": INT,
                "born_host": OPT_STR,
            },
        ),
        "Message": (
            Message,
            {
                "topic": "T",
                "body": b"x",
                "tags": "t",
                "keys": ["k"],
                "properties": {"p": "v"},
                "flag": 0,
                "queue_id": 0,
                "born_timestamp": 1,
                "born_host": "1.2.3.4:5",
            },
            {
                "topic": STR,
                "tags": OPT_STR,
                "flag": INT,
                "queue_id": INT,
                "born_timestamp": INT,
                "born_host": OPT_STR,
            },
        ),
    }


def _call(fn: Callable[..., Any], good: dict[str, Any], **bad: Any) -> Any:
    return fn(**{**good, **bad})


@pytest.fixture
def calls(store: MessageStore):
    assert store.put_message(Message("T", b"x", tags="t", keys=["k"])).ok
    assert store.wait_dispatched()
    return _calls(store)


def test_good_arguments_work(calls) -> None:
    for fn, good, _ in calls.values():
        _call(fn, good)


def test_out_of_range_integers(calls) -> None:
    for name, (fn, good, kinds) in calls.items():
        for arg, kind in kinds.items():
            for value in OUT_OF_RANGE.get(kind, []):
                with pytest.raises(rmqstore.ArgumentOverflowError) as e:
                    _call(fn, good, **{arg: value})
                assert isinstance(e.value, OverflowError), (name, arg)
                assert isinstance(e.value, rmqstore.InvalidArgumentError), (name, arg)
                assert str(e.value).startswith(f"{arg} must be between"), (name, arg, e.value)
                assert len(str(e.value)) < 200  # a 5,000-digit value is shortened


def test_unsigned_counts_refuse_negatives(calls) -> None:
    for name, arg in (("read_batch", "max_msgs"), ("query_message", "max_num")):
        fn, good, _ = calls[name]
        with pytest.raises(rmqstore.ArgumentOverflowError, match=rf"^{arg} must be between 0"):
            _call(fn, good, **{arg: -1})


def test_wrong_types(calls) -> None:
    wrong = {
        INT: ["1", 1.5, b"1", [1]],
        UINT: ["1", 1.5],
        STR: [1, b"T", ["T"]],
        OPT_STR: [1, b"T"],
        BOOL: ["yes", 1, None],
    }
    for name, (fn, good, kinds) in calls.items():
        for arg, kind in kinds.items():
            for value in wrong[kind]:
                if kind == INT and value is None:
                    continue
                with pytest.raises(rmqstore.ArgumentTypeError) as e:
                    _call(fn, good, **{arg: value})
                assert isinstance(e.value, TypeError), (name, arg, value)
                assert str(e.value).startswith(f"{arg} must be"), (name, arg, e.value)


def test_text_with_lone_surrogates(calls) -> None:
    for name, (fn, good, kinds) in calls.items():
        for arg, kind in kinds.items():
            if kind not in (STR, OPT_STR):
                continue
            with pytest.raises(rmqstore.InvalidArgumentError) as e:
                _call(fn, good, **{arg: SURROGATE})
            assert isinstance(e.value, ValueError), (name, arg)
            assert not isinstance(e.value, UnicodeError), (name, arg)
            assert str(e.value).startswith(f"{arg}: "), (name, arg, e.value)
            assert "surrogate" in str(e.value)


@pytest.mark.parametrize("make", ["Message", "put_messages"])
def test_keys_and_properties(calls, make: str) -> None:
    fn, good, _ = calls[make]
    for keys in (["a b"], [""], ["ok", "x\ty"]):
        with pytest.raises(rmqstore.InvalidArgumentError, match=r"^keys: key"):
            _call(fn, good, keys=keys)
    for keys in ([1], [SURROGATE]):
        with pytest.raises(rmqstore.RmqStoreError, match=r"^every key"):
            _call(fn, good, keys=keys)
    with pytest.raises(rmqstore.ArgumentTypeError, match=r"^keys must be"):
        _call(fn, good, keys=5)
    with pytest.raises(rmqstore.InvalidArgumentError, match=r"^properties\['a'\]: "):
        _call(fn, good, properties={"a": SURROGATE})
    with pytest.raises(rmqstore.ArgumentTypeError, match=r"^properties\['a'\] must be a str"):
        _call(fn, good, properties={"a": 1})
    with pytest.raises(rmqstore.InvalidArgumentError, match=r"^properties \(a name\): "):
        _call(fn, good, properties={SURROGATE: "v"})
    with pytest.raises(rmqstore.ArgumentTypeError, match=r"^properties must be a dict"):
        _call(fn, good, properties=[("a", "b")])
    with pytest.raises(rmqstore.InvalidArgumentError, match="both as an argument"):
        _call(fn, good, properties={"TAGS": "x"})


def test_bodies(calls) -> None:
    fn, good, _ = calls["Message"]
    with pytest.raises(rmqstore.ArgumentTypeError, match=r"^body must be bytes"):
        _call(fn, good, body="text")
    with pytest.raises(rmqstore.ArgumentTypeError, match=r"^body must be bytes-like"):
        _call(fn, good, body=12)
    fn, good, _ = calls["put_messages"]
    with pytest.raises(rmqstore.ArgumentTypeError, match=r"^bodies must be an iterable"):
        _call(fn, good, bodies=3)
    with pytest.raises(rmqstore.ArgumentTypeError, match=r"^every body must be bytes"):
        _call(fn, good, bodies=[b"ok", "text"])


_anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(HUGE),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from([SURROGATE, "", "../x", "a/b", " ", "\x00", "T"]),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_argument_reaches_a_panic(store: MessageStore, data) -> None:
    """Any value in any argument: a result, or an exception of the package's tree."""
    calls = _calls(store)
    name = data.draw(st.sampled_from(sorted(calls)))
    fn, good, _ = calls[name]
    args = dict(good)
    for arg in data.draw(st.lists(st.sampled_from(sorted(good)), min_size=1, max_size=3)):
        args[arg] = data.draw(_anything)
    with contextlib.suppress(rmqstore.RmqStoreError):
        _call(fn, {}, **args)


def test_a_panic_in_the_core_is_an_rmqstore_error(store: MessageStore) -> None:
    """Should a bug reach a panic, Python gets an RmqStoreError (an Exception), not PyO3's
    PanicException (a BaseException that `except Exception` lets through), and the store goes
    on working."""
    with pytest.raises(rmqstore.RmqStoreError, match=r"deliberate panic.*a bug in rmqstore"):
        store._core._panic_for_tests()
    assert store.put_message(Message("T", b"after")).ok


def test_wait_dispatched_timeout(store: MessageStore) -> None:
    with pytest.raises(rmqstore.ArgumentTypeError, match=r"^timeout must be a number"):
        store.wait_dispatched("1")  # type: ignore[arg-type]
    for bad in (-1, float("nan")):
        with pytest.raises(rmqstore.InvalidArgumentError, match=r"^timeout must be >= 0"):
            store.wait_dispatched(bad)
    assert store.wait_dispatched(0.5)
