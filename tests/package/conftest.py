"""The built distributions the package tests inspect: ``make wheel`` leaves exactly one wheel
and one sdist in ``dist/``."""

from __future__ import annotations

from pathlib import Path

import pytest

DIST = Path(__file__).resolve().parents[2] / "dist"


def _one(pattern: str) -> Path:
    found = sorted(DIST.glob(pattern))
    assert len(found) == 1, f"`make wheel` builds exactly one {pattern} into {DIST}: {found}"
    return found[0]


@pytest.fixture(scope="session")
def wheel() -> Path:
    return _one("rmqstore-*.whl")


@pytest.fixture(scope="session")
def sdist() -> Path:
    return _one("rmqstore-*.tar.gz")
