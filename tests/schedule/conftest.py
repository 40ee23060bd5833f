"""Fixtures of the schedule tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rmqstore import MessageStore
from schedule.schedhelp import SCHEDULE_STORE


@pytest.fixture
def open_sched(open_store: Callable[..., MessageStore]) -> Callable[..., MessageStore]:
    """``open_store`` with a 1 s / 2 s level table and a 200 ms offset persist interval."""

    def _open(path: Any = None, **overrides: Any) -> MessageStore:
        return open_store(path, **{**SCHEDULE_STORE, **overrides})

    return _open
