"""Shared set-up of the benchmarks: quick mode (CI) and store factories.

Run them with ``make bench`` (full) or ``make bench-quick`` (CI); ``benches/report.py`` turns
the pytest-benchmark JSON into the ratios the issues name and checks them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import rmqstore

QUICK = os.environ.get("RMQ_BENCH_QUICK") == "1"


def _scaled(full: int, quick: int) -> int:
    return quick if QUICK else full


@pytest.fixture
def scaled() -> Callable[[int, int], int]:
    """``scaled(full, quick)``: a size or count for the current mode."""
    return _scaled


@pytest.fixture
def quick() -> bool:
    return QUICK


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., rmqstore.MessageStore]]:
    stores: list[rmqstore.MessageStore] = []
    counter = iter(range(1_000_000))

    def factory(**overrides: Any) -> rmqstore.MessageStore:
        store = rmqstore.MessageStore(tmp_path / f"store-{next(counter)}", **overrides)
        stores.append(store)
        return store

    yield factory
    for store in stores:
        store.close()
