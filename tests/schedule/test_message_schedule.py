"""Issue 17: ``Message(..., delay_level=N)`` and the timer keyword arguments set RocketMQ's
properties as the client's ``Message.setDelayTimeLevel`` / ``setDeliverTimeMs`` /
``setDelayTimeMs`` / ``setDelayTimeSec`` do (decimal strings); hostile values are typed
exceptions of the package's tree, never a property the broker could not parse."""

from __future__ import annotations

from typing import Any

import pytest
import rmqstore
from rmqstore import Message

# keyword -> (property, largest value)
KWARGS = {
    "delay_level": ("DELAY", 2**31 - 1),
    "deliver_time_ms": ("TIMER_DELIVER_MS", 2**63 - 1),
    "delay_ms": ("TIMER_DELAY_MS", 2**63 - 1),
    "delay_sec": ("TIMER_DELAY_SEC", (2**63 - 1) // 1000),
}


class _Index:
    """An int-like object (numpy's integers are such)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


@pytest.mark.parametrize("kwarg", sorted(KWARGS))
@pytest.mark.parametrize("value", [0, 1, 7, "max"])
def test_sets_the_property_in_decimal(kwarg: str, value: Any) -> None:
    prop, hi = KWARGS[kwarg]
    v = hi if value == "max" else value
    msg = Message("TopicA", b"body", tags="TagA", keys=["k1"], **{kwarg: v})
    assert msg.properties == {"TAGS": "TagA", "KEYS": "k1", prop: str(v)}
    assert getattr(msg, kwarg) == v
    for other in set(KWARGS) - {kwarg}:
        assert getattr(msg, other) is None
    # An int-like object is taken as its index, as every other int argument.
    assert Message("T", b"", **{kwarg: _Index(v)}).properties == {prop: str(v)}


def test_unscheduled_message_has_none() -> None:
    msg = Message("T", b"")
    assert msg.properties == {}
    assert [getattr(msg, k) for k in KWARGS] == [None] * 4
    # None is "not given" for every one of them.
    assert Message("T", b"", **dict.fromkeys(KWARGS)).properties == {}


@pytest.mark.parametrize("kwarg", sorted(KWARGS))
@pytest.mark.parametrize(
    ("value", "error", "stdlib"),
    [
        (True, rmqstore.ArgumentTypeError, TypeError),
        (False, rmqstore.ArgumentTypeError, TypeError),
        (1.0, rmqstore.ArgumentTypeError, TypeError),
        ("5", rmqstore.ArgumentTypeError, TypeError),
        (b"5", rmqstore.ArgumentTypeError, TypeError),
        ([1], rmqstore.ArgumentTypeError, TypeError),
        (-1, rmqstore.InvalidArgumentError, ValueError),
        (-(2**63), rmqstore.InvalidArgumentError, ValueError),
        ("-huge", rmqstore.InvalidArgumentError, ValueError),
        ("max+1", rmqstore.ArgumentOverflowError, OverflowError),
        (2**64, rmqstore.ArgumentOverflowError, OverflowError),
        ("huge", rmqstore.ArgumentOverflowError, OverflowError),
    ],
)
def test_hostile_values_raise_typed(kwarg: str, value: Any, error: type, stdlib: type) -> None:
    # Values whose repr is too long for a test id are built here.
    value = (
        {"max+1": KWARGS[kwarg][1] + 1, "huge": 10**5000, "-huge": -(10**5000)}.get(value, value)
        if isinstance(value, str)
        else value
    )
    with pytest.raises(error) as info:
        Message("T", b"", **{kwarg: value})
    assert isinstance(info.value, stdlib)
    assert isinstance(info.value, rmqstore.RmqStoreError)
    assert kwarg in str(info.value)
    assert len(str(info.value)) < 300  # a 5,000-digit int is named by its size


@pytest.mark.parametrize("first", sorted(KWARGS))
@pytest.mark.parametrize("second", sorted(KWARGS))
def test_two_schedules_are_refused(first: str, second: str) -> None:
    if first == second:
        return
    with pytest.raises(rmqstore.InvalidArgumentError, match="give one of"):
        Message("T", b"", **{first: 1, second: 1})


@pytest.mark.parametrize("kwarg", sorted(KWARGS))
@pytest.mark.parametrize("prop", [p for p, _ in KWARGS.values()])
def test_argument_and_scheduling_property_are_refused(kwarg: str, prop: str) -> None:
    # The same property twice, or two schedules RocketMQ would pick one of in silence.
    with pytest.raises(rmqstore.InvalidArgumentError, match=prop):
        Message("T", b"", properties={prop: "3"}, **{kwarg: 1})


def test_scheduling_properties_alone_are_raw() -> None:
    # Given through ``properties`` they are the caller's bytes, as RocketMQ stores them; the
    # read-only attributes show what parses.
    msg = Message("T", b"", properties={"DELAY": "2", "TIMER_DELAY_MS": "x"})
    assert msg.properties == {"DELAY": "2", "TIMER_DELAY_MS": "x"}
    assert msg.delay_level == 2
    assert msg.delay_ms is None


def test_attributes_are_read_only() -> None:
    msg = Message("T", b"", delay_level=2)
    for kwarg in KWARGS:
        with pytest.raises(AttributeError):
            setattr(msg, kwarg, 3)
