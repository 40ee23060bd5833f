"""The timer on a full disk: the wheel is sparse (as RocketMQ leaves it), so a store without
timer messages spends no disk on it, and an enqueue that needs a page of it on a full disk fails
with a StoreIOError naming the file, never a SIGBUS (a write, or on tmpfs even a read, of an
unreserved page of a mapping on a full disk kills the process). Each run is a child process, so
that a regression shows as a crash of the child, not of the test session. The disk is a small
tmpfs the test mounts (root only; otherwise the test is skipped and says why)."""

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
    import os, sys, time
    import rmqstore

    path, ballast = sys.argv[1], sys.argv[2]
    store = rmqstore.MessageStore(
        path, mapped_file_size_commit_log=64 * 1024, max_hash_slot_num=64, max_index_num=200,
        mapped_file_size_consume_queue=2000, timer_precision_ms=100,
        mapped_file_size_timer_log=52 * 20 + 16,
    )
    for service in store._services:
        if service.name.startswith("Timer"):
            service.signal_stop()
            service.join()
    print("WHEEL_BLOCKS", os.stat(os.path.join(path, "timerwheel")).st_blocks, flush=True)
    for i in range(5):
        m = rmqstore.Message("T", b"x", properties={"TIMER_DELAY_MS": "60000"})
        assert store.put_message(m).status is rmqstore.PutMessageStatus.PUT_OK
    store.wait_dispatched()
    with open(ballast, "wb") as f:
        try:
            while True:
                f.write(b"\\0" * 65536)
                f.flush()
        except OSError:
            pass
    try:
        store._core.timer_enqueue(time.time_ns() // 1_000_000, 100)
        print("ENQUEUED", flush=True)
    except rmqstore.StoreIOError as e:
        print("REFUSED", e, flush=True)
    print("STATS", store.timer_stats()["pending"], flush=True)
    os.remove(ballast)
    store.close()
    print("CLOSED", flush=True)
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


@pytest.mark.parametrize("rocketmq_wheel", [False, True])
def test_full_disk_refuses_the_enqueue_without_a_crash(
    small_disk: Path, rocketmq_wheel: bool
) -> None:
    store = small_disk / "store"
    store.mkdir()
    if rocketmq_wheel:
        # As RocketMQ leaves it: the exact length, no block reserved.
        with open(store / "timerwheel", "wb") as f:
            f.truncate(38_707_200)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(store), str(small_disk / "ballast")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    lines = r.stdout.splitlines()
    # The 38,707,200-byte wheel takes no space until a timer message is enqueued.
    assert int(lines[0].split()[1]) * 512 < 64 * 1024, lines
    refused = [line for line in lines if line.startswith("REFUSED")]
    assert refused, lines
    assert "timer" in refused[0], refused
    assert "STATS 0" in lines, lines
    assert lines[-1] == "CLOSED", lines
