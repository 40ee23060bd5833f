"""Fixtures of the transaction tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rmqstore import MessageStore
from transaction.txhelp import TX_STORE


@pytest.fixture
def open_tx(open_store: Callable[..., MessageStore]) -> Callable[..., MessageStore]:
    """``open_store`` with ``TX_STORE``'s settings (overridable)."""

    def _open(path: Any = None, **overrides: Any) -> MessageStore:
        return open_store(path, **{**TX_STORE, **overrides})

    return _open


@pytest.fixture
def tx_store(open_tx: Callable[..., MessageStore]) -> MessageStore:
    return open_tx()
