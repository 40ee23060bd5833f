"""Fixtures of the consumer offsets tests (test_offsets, test_offsets_durability)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rmqstore.offsets import ConsumerOffsetManager


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    """A store's config folder that does not exist yet."""
    return tmp_path / "store" / "config"


@pytest.fixture
def open_offsets(config_dir: Path) -> Iterator[Callable[[], ConsumerOffsetManager]]:
    """Opens managers on ``config_dir``; all closed at teardown."""
    opened: list[ConsumerOffsetManager] = []

    def _open() -> ConsumerOffsetManager:
        manager = ConsumerOffsetManager(config_dir)
        opened.append(manager)
        return manager

    yield _open
    for manager in opened:
        manager.close()
