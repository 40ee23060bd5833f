"""Shared fixtures: a store folder per test and a factory of small-segment stores."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import rmqstore
from hypothesis import settings

# The helpers next to this file (rmqwire, rmqspark) are imported by plain name; a test file
# that uses another one's helpers imports it by its folder (``services.test_warming``).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rmqwire import SEGMENT, SMALL_STORE

settings.register_profile("rmqstore", database=None, deadline=None, max_examples=60)
settings.load_profile("rmqstore")

OpenStore = Callable[..., rmqstore.MessageStore]


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A store folder that does not exist yet."""
    return tmp_path / "store"


@pytest.fixture
def open_store(store_path: Path) -> Iterator[OpenStore]:
    """Opens ``MessageStore``\\ s (64 KiB segments unless overridden); all closed at teardown."""
    opened: list[rmqstore.MessageStore] = []

    def _open(path: Path | None = None, **overrides: Any) -> rmqstore.MessageStore:
        overrides.setdefault("mapped_file_size_commit_log", SEGMENT)
        store = rmqstore.MessageStore(path if path is not None else store_path, **overrides)
        opened.append(store)
        return store

    yield _open
    for store in reversed(opened):
        store.close()


@pytest.fixture
def open_small(open_store: OpenStore) -> OpenStore:
    """Like ``open_store``, with small consume queue and index files too (``SMALL_STORE``)."""

    def _open(path: Path | None = None, **overrides: Any) -> rmqstore.MessageStore:
        return open_store(path, **{**SMALL_STORE, **overrides})

    return _open


@pytest.fixture
def store(open_store: OpenStore) -> rmqstore.MessageStore:
    return open_store()


def run_in_subprocess(code: str, timeout: float = 30) -> str:
    """Runs ``code`` with this interpreter (the venv's) in a fresh process; returns stdout."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture
def in_subprocess() -> Callable[..., str]:
    return run_in_subprocess
