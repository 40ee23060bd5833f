"""The five transaction settings: defaults, RocketMQ names, ranges, checked as the others."""

from __future__ import annotations

import pytest
from rmqstore import StoreConfig, StoreConfigError, UnknownSettingError
from rmqstore._rmqstore import check_settings, closest_setting, settings

EXPECTED = {
    # name: (default, RocketMQ BrokerConfig name, min)
    "transaction_timeout": (6000, "transactionTimeOut", 0),
    "transaction_check_max": (15, "transactionCheckMax", 0),
    "transaction_check_interval": (30000, "transactionCheckInterval", 1),
    "transaction_op_msg_max_size": (4096, "transactionOpMsgMaxSize", 1),
    "transaction_op_batch_interval": (3000, "transactionOpBatchInterval", 0),
}
TABLE = {s["name"]: s for s in settings()}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_defaults_names_and_ranges(name: str) -> None:
    default, rocketmq, lo = EXPECTED[name]
    spec = TABLE[name]
    assert spec["type"] == "int"
    assert spec["default"] == default == getattr(StoreConfig(), name)
    assert spec["rocketmq_name"] == rocketmq
    assert closest_setting(rocketmq) == name
    assert (spec["min"], spec["max"]) == (lo, 2**31 - 1)


BAD = [
    (name, bad)
    for name, (_, _, lo) in EXPECTED.items()
    for bad in (lo - 1, 2**31, True, "10", 1.5, None)
]


@pytest.mark.parametrize(("name", "bad"), BAD)
def test_bad_values_are_refused_by_both_sides(name: str, bad: object) -> None:
    with pytest.raises(StoreConfigError) as py:
        StoreConfig(**{name: bad})
    with pytest.raises(StoreConfigError) as core:
        check_settings({name: bad})
    assert py.value.setting == core.value.setting == name
    assert str(py.value).startswith(f"{name}: ")


def test_zero_is_allowed_where_it_means_something() -> None:
    cfg = StoreConfig(
        transaction_timeout=0, transaction_check_max=0, transaction_op_batch_interval=0
    )
    check_settings(cfg.to_dict())
    for name in ("transaction_check_interval", "transaction_op_msg_max_size"):
        with pytest.raises(StoreConfigError, match=f"{name}: must be between 1 and"):
            StoreConfig(**{name: 0})


def test_rocketmq_spelling_suggests_the_setting() -> None:
    with pytest.raises(UnknownSettingError, match="did you mean transaction_timeout"):
        StoreConfig(transactionTimeOut=1)  # type: ignore[call-arg]
