"""The timer wheel on a disk without room for it: the open is refused with a StoreIOError
naming the file, never a SIGBUS later (a write, or on tmpfs even a read, of an unreserved page
of a mapping on a full disk kills the process). Each open runs in a child process, so that a
regression shows as a crash of the child, not of the test session. The disk is a small tmpfs
the test mounts (root only; otherwise the test is skipped and says why)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

CHILD = textwrap.dedent(
    """
    import sys
    import rmqstore

    try:
        rmqstore.MessageStore(
            sys.argv[1], mapped_file_size_commit_log=64 * 1024, max_hash_slot_num=64,
            max_index_num=200, mapped_file_size_consume_queue=2000,
        ).close()
        print("OPENED")
    except rmqstore.StoreIOError as e:
        print("REFUSED", e)
    """
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    fs = tmp_path / "fs"
    fs.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(fs)],
        capture_output=True,
        check=False,
    )
    if os.geteuid() != 0 or r.returncode != 0:
        pytest.skip("needs root to mount a 16 MiB tmpfs (a real full disk)")
    try:
        yield fs
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)


def _open(path: Path) -> str:
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    return r.stdout.strip()


@pytest.mark.parametrize("sparse_wheel", [False, True])
def test_no_room_for_the_wheel_refuses_the_open(small_disk: Path, sparse_wheel: bool) -> None:
    store = small_disk / "store"
    store.mkdir()
    if sparse_wheel:
        # As RocketMQ leaves it: the exact length, no block reserved.
        with open(store / "timerwheel", "wb") as f:
            f.truncate(38_707_200)
    out = _open(store)
    assert out.startswith("REFUSED"), out
    assert "timer wheel" in out, out
    assert "timerwheel" in out, out
