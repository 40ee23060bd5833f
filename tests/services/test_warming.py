"""Page warming: segments are pre-faulted and mlocked; without the right to lock, the store warns
once and goes on."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rmqstore import Message, MessageStore

SEGMENT = 1 << 20


def locked_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmLck:"):
            return int(line.split()[1])
    raise AssertionError("no VmLck in /proc/self/status")


def can_lock() -> bool:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(SEGMENT)
    ok = libc.mlock(buf, SEGMENT) == 0
    if ok:
        libc.munlock(buf, SEGMENT)
    return ok


@pytest.mark.skipif(not can_lock(), reason="this process may not mlock 1 MiB")
def test_warmed_segments_are_locked_and_released(tmp_path: Path) -> None:
    before = locked_kib()
    store = MessageStore(
        tmp_path / "s", mapped_file_size_commit_log=SEGMENT, warm_mapped_file_enable=True
    )
    assert store.put_message(Message("T", b"x")).ok
    deadline = time.monotonic() + 10
    # The segment in use and the pre-allocated next one are both locked.
    while locked_kib() - before < 2 * SEGMENT // 1024 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert locked_kib() - before >= 2 * SEGMENT // 1024
    store.close()
    assert locked_kib() == before


SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.WARNING, format="%(name)s|%(levelname)s|%(message)s")
import rmqstore
with rmqstore.MessageStore(sys.argv[1], mapped_file_size_commit_log=1 << 20,
                           warm_mapped_file_enable=True) as s:
    for i in range(3000):
        assert s.put_message(rmqstore.Message("T", bytes(1000))).ok
    print("segments", len(s.commitlog_segments()))
"""


@pytest.mark.skipif(
    shutil.which("setpriv") is None or shutil.which("prlimit") is None,
    reason="needs setpriv and prlimit (util-linux) to take the right to mlock away",
)
def test_mlock_refused_warns_once_and_goes_on(tmp_path: Path) -> None:
    cmd = [
        "prlimit",
        "--memlock=65536:65536",
        "setpriv",
        "--inh-caps=-ipc_lock",
        "--bounding-set=-ipc_lock",
        sys.executable,
        "-c",
        SCRIPT,
        str(tmp_path / "s"),
    ]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[1]) >= 3
    warnings = [line for line in out.stderr.splitlines() if "mlock" in line]
    assert len(warnings) == 1, out.stderr
    assert "WARNING" in warnings[0]
    assert "RLIMIT_MEMLOCK" in warnings[0]
