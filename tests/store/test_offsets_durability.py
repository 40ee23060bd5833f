"""Consumer offsets, continued: what I/O failures and crashes (SIGKILL) during commits leave of
config/consumerOffset.json (helpers of ``test_offsets``)."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import rmqstore
from rmqstore.offsets import ConsumerOffsetManager
from rmqwire import snapshot
from store.test_offsets import (
    bak_of,
    file_of,
    read_json,
    reload,
    tmp_of,
    two_versions,
)

# -- I/O failures -------------------------------------------------------------------------------


def read_only_folders_stop_writes(base: Path) -> bool:
    """False when this process writes into a mode 0o500 folder anyway (root, CAP_DAC_OVERRIDE)."""
    probe = base / "read-only-probe"
    probe.mkdir()
    probe.chmod(0o500)
    try:
        (probe / "f").write_bytes(b"")
    except PermissionError:
        return True
    finally:
        probe.chmod(0o700)
    return False


def test_write_failure_in_read_only_folder(tmp_path: Path, config_dir: Path, open_offsets) -> None:
    if not read_only_folders_stop_writes(tmp_path):
        pytest.skip(
            "this process writes into read-only folders anyway (root or CAP_DAC_OVERRIDE); "
            "test_write_failure_from_a_file_size_limit covers a real write failure instead"
        )
    m = open_offsets()
    m.commit_offset("G", "T", 0, 1)
    m.commit_offset("G", "T", 0, 2)
    before = snapshot(config_dir)
    config_dir.chmod(0o500)
    try:
        with pytest.raises(rmqstore.StoreIOError) as info:
            m.commit_offset("G", "T", 0, 3)
    finally:
        config_dir.chmod(0o700)
    assert isinstance(info.value, OSError)
    assert info.value.errno == errno.EACCES
    assert snapshot(config_dir) == before
    assert m.query_offset("G", "T", 0) == 2
    assert reload(config_dir) == {"T@G": {0: 2}}


FSIZE_CHILD = """
import errno, json, resource, signal
import rmqstore
from rmqstore.offsets import ConsumerOffsetManager

m = ConsumerOffsetManager({config_dir!r})
m.commit_offset("G", "T", 0, 1)
m.commit_offset("G", "T", 0, 2)
# Writes past 4 KiB now fail with EFBIG (for root too) instead of killing us with SIGXFSZ.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    m.commit_offsets("G", "T", {{q: 10**12 + q for q in range(1000)}})
except rmqstore.StoreIOError as e:
    result = {{"errno": e.errno, "oserror": isinstance(e, OSError), "filename": e.filename}}
else:
    result = {{"errno": None}}
result["offsets_after"] = m.offsets("G", "T")
m.commit_offset("G", "T", 1, 3)  # a small commit still fits
print(json.dumps(result))
"""


def test_write_failure_from_a_file_size_limit(config_dir: Path, in_subprocess) -> None:
    """A real kernel write failure (EFBIG), whoever runs the tests."""
    out = json.loads(in_subprocess(FSIZE_CHILD.format(config_dir=str(config_dir))))
    assert out["errno"] == errno.EFBIG
    assert out["oserror"] is True
    assert out["filename"] == str(tmp_of(config_dir))
    assert out["offsets_after"] == {"0": 2}  # the failed batch left the table as it was
    assert reload(config_dir) == {"T@G": {0: 2, 1: 3}}
    assert read_json(bak_of(config_dir)) == {"offsetTable": {"T@G": {"0": 2}}}
    assert not tmp_of(config_dir).exists()


def test_folder_under_a_regular_file_is_an_io_error(tmp_path: Path) -> None:
    blocker = tmp_path / "store"
    blocker.write_bytes(b"x")
    with pytest.raises(rmqstore.StoreIOError) as info:
        ConsumerOffsetManager(blocker / "config")
    assert info.value.errno == errno.ENOTDIR
    assert info.value.filename == str(blocker / "config")
    assert blocker.read_bytes() == b"x"


def test_config_dir_that_is_a_file_is_an_io_error(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_bytes(b"x")
    with pytest.raises(rmqstore.StoreIOError) as info:
        ConsumerOffsetManager(path)
    assert isinstance(info.value, OSError)
    assert info.value.filename == str(path)


def test_a_folder_in_place_of_the_file_is_refused_not_a_fallback(config_dir: Path) -> None:
    two_versions(config_dir)
    file_of(config_dir).unlink()
    file_of(config_dir).mkdir()  # not a file of the store's: never read, deleted or replaced
    before = snapshot(config_dir)
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        ConsumerOffsetManager(config_dir)
    assert info.value.path == str(file_of(config_dir))
    assert "not a regular file" in str(info.value)
    assert file_of(config_dir).is_dir()
    assert snapshot(config_dir) == before


class Fault:
    """Makes the n-th call of an ``os`` function fail with EIO (calls counted from install)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, nth: int) -> None:
        self.calls = 0
        real = getattr(os, name)

        def failing(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == nth:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real(*args, **kwargs)

        monkeypatch.setattr(os, name, failing)


# step -> (os function, which call of it fails)
STEPS = {
    "write_temp": ("write", 1),
    "fsync_temp": ("fsync", 1),
    "move_to_bak": ("replace", 1),
    "rename_into_place": ("replace", 2),
}


@pytest.mark.parametrize("step", list(STEPS))
def test_failure_at_each_step_keeps_the_previous_file(
    config_dir: Path, open_offsets, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    m = open_offsets()
    m.commit_offset("G", "T", 0, 1)
    m.commit_offset("G", "T", 0, 2)
    before = snapshot(config_dir)
    content = file_of(config_dir).read_bytes()
    name, nth = STEPS[step]
    Fault(monkeypatch, name, nth)
    with pytest.raises(rmqstore.StoreIOError) as info:
        m.commit_offsets("G", "T", {0: 3, 1: 3})
    monkeypatch.undo()
    assert info.value.errno == errno.EIO
    assert m.offsets("G", "T") == {0: 2}
    if step == "rename_into_place":
        # The file was moved to .bak already: it is linked back, so file and .bak both hold it.
        assert file_of(config_dir).read_bytes() == content
        assert bak_of(config_dir).read_bytes() == content
    else:
        assert snapshot(config_dir) == before
    assert not tmp_of(config_dir).exists()
    assert reload(config_dir) == {"T@G": {0: 2}}
    # The manager still works.
    m.commit_offset("G", "T", 1, 4)
    assert reload(config_dir) == {"T@G": {0: 2, 1: 4}}


def test_failed_folder_sync_reports_the_commit_unconfirmed(
    config_dir: Path, open_offsets, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new file is in place but not known durable: raise, and memory follows the file."""
    m = open_offsets()
    m.commit_offset("G", "T", 0, 1)
    Fault(monkeypatch, "fsync", 2)  # 1: the temp file, 2: the folder
    with pytest.raises(rmqstore.StoreIOError) as info:
        m.commit_offset("G", "T", 0, 2)
    monkeypatch.undo()
    assert info.value.filename == str(config_dir)
    assert m.query_offset("G", "T", 0) == 2
    assert reload(config_dir) == {"T@G": {0: 2}}
    assert read_json(bak_of(config_dir)) == {"offsetTable": {"T@G": {"0": 1}}}


# -- crashes ------------------------------------------------------------------------------------

QUEUES = 32

KILL_CHILD = """
import sys
from rmqstore.offsets import ConsumerOffsetManager

m = ConsumerOffsetManager(sys.argv[1])
i = m.query_offset("G", "T", 0)
while True:
    i += 1
    m.commit_offsets("G", "T", {{q: i for q in range({queues})}})
    print(i, flush=True)
"""


def sigkill_rounds(config_dir: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    script = textwrap.dedent(KILL_CHILD.format(queues=QUEUES))
    for _ in range(rounds):
        previous = reload(config_dir).get("T@G", {}).get(0, -1)
        with subprocess.Popen(
            [sys.executable, "-c", script, str(config_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as child:
            assert child.stdout is not None
            assert child.stderr is not None
            try:
                wanted = rng.randint(1, 40)
                seen: list[int] = []
                while len(seen) < wanted and (line := child.stdout.readline()):
                    seen.append(int(line))
                if len(seen) < wanted:
                    child.wait(timeout=30)
                    pytest.fail(f"child stopped after {seen}: {child.stderr.read()}")
                time.sleep(rng.random() * 0.003)
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=30)
                # Through the same buffered reader: lines it already holds are not lost.
                rest = child.stdout.read()
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait()
        assert child.returncode == -signal.SIGKILL
        printed = seen + [int(x) for x in rest.split()]
        # Each commit is durable when it returns, and the child prints after it returns: the
        # file holds the last printed value, or the next one if it was killed before printing.
        last_printed = printed[-1]
        assert printed == list(range(previous + 1, last_printed + 1))
        table = reload(config_dir)
        assert set(table) == {"T@G"}
        loaded = table["T@G"]
        assert set(loaded) == set(range(QUEUES))
        values = set(loaded.values())
        assert len(values) == 1, f"a batch was half applied: {loaded}"
        (value,) = values
        # (Stricter than "at least the last value the parent read - 1": every printed line
        # was drained after the kill.)
        assert last_printed <= value <= last_printed + 1


@pytest.mark.timeout(120)
def test_sigkill_during_commits_leaves_a_loadable_prefix(config_dir: Path) -> None:
    sigkill_rounds(config_dir, rounds=6, seed=1)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_during_commits_many_rounds(config_dir: Path) -> None:
    sigkill_rounds(config_dir, rounds=60, seed=2)
