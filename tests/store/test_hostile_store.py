"""Issue 15: a store folder or process someone tampered with, and the ends of the offset ranges.

Forged records naming paths, links and special files where the store keeps its files, opens
refused half-way, offsets near 2**63, forked children and failed service starts: none may write
outside the store, change a file of a store it refuses, acknowledge what it cannot keep, or hang.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import pytest
import rmqstore
from rmqstore import Message, MessageStore, PutMessageStatus
from rmqwire import (
    SEGMENT,
    SMALL_STORE,
    append_records,
    cq_dir,
    encode_properties,
    index_dir,
    segment_name,
    snapshot,
)

# -- records naming paths (item 4) -------------------------------------------------------------


def _store_with(store_path: Path, forged: list[dict[str, object]]) -> list[int]:
    """A store with two good messages of topic Good, then ``forged`` records, then one more
    good one (queue offset 2), all written as a broker would have; returns the forged offsets."""
    with MessageStore(store_path, **SMALL_STORE) as store:
        for i in range(2):
            assert store.put_message(Message("Good", b"good %d" % i, keys=[f"g{i}"])).ok
        end = store.get_max_phy_offset()
    now = int(time.time() * 1000)
    good = {
        "topic": "Good",
        "body": b"good 2",
        "queue_offset": 2,
        "properties": encode_properties([("KEYS", "g2")]),
    }
    specs = [{"store_timestamp": now, **f} for f in forged] + [{"store_timestamp": now, **good}]
    return append_records(store_path, end, specs)[:-1]


def test_records_naming_paths_never_become_files(tmp_path: Path, store_path: Path, caplog) -> None:
    """Topic and queue id are outside the body CRC: a forged or damaged record naming an
    absolute path, ``..``, a ``/``, bytes that are not UTF-8, a negative queue id, a queue offset
    past the largest, or another record's offset is passed over by dispatch (logged, counted),
    also when the consume queues are rebuilt from scratch, and the store keeps opening."""
    outside = tmp_path / "outside"
    forged = [
        {"topic": "x", "topic_bytes": str(outside / "abs").encode(), "body": b"1"},
        {"topic": "x", "topic_bytes": b"../../escape", "body": b"2"},
        {"topic": "x", "topic_bytes": b"a/b", "body": b"3"},
        {"topic": "x", "topic_bytes": b"..", "body": b"4"},
        {"topic": "x", "topic_bytes": b"T\xff\xfe", "body": b"5"},
        {"topic": "x", "topic_bytes": b"", "body": b"6"},
        {"topic": "Neg", "queue_id": -1, "body": b"7"},
        {"topic": "Far", "queue_offset": 2**62, "body": b"8"},
        {"topic": "Far", "queue_offset": -5, "body": b"9"},
    ]
    offsets = _store_with(store_path, forged)
    before = sorted(p.name for p in tmp_path.iterdir())
    for rebuild in (False, True):
        if rebuild:
            # Rebuilding the consume queues (and the index) re-dispatches every record.
            shutil.rmtree(store_path / "consumequeue")
            shutil.rmtree(index_dir(store_path))
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="rmqstore"):
            store = MessageStore(store_path, **SMALL_STORE)
        try:
            assert store.wait_dispatched()
            assert store.skipped_records() == len(forged)
            assert store.topics() == ["Good"]
            got = store.get_message("g", "Good", 0, 0, 32)
            assert [m.body for m in got.messages] == [b"good 0", b"good 1", b"good 2"]
            assert [m.body for m in store.query_message("Good", "g2")] == [b"good 2"]
        finally:
            store.close()
        logged = "\n".join(r.getMessage() for r in caplog.records)
        for off in offsets:
            assert f"commitlog offset {off} is damaged" in logged
        assert sorted(p.name for p in tmp_path.iterdir()) == before
        assert not outside.exists()
        assert sorted(p.name for p in (store_path / "consumequeue").iterdir()) == ["Good"]
    # The forged records are still there, readable by offset, as stored.
    with MessageStore(store_path, **SMALL_STORE) as store:
        assert store.look_message_by_offset(offsets[1]).body == b"2"


# -- links and special files (item 5) ----------------------------------------------------------


def _small_store_with_data(store_path: Path) -> None:
    with MessageStore(store_path, **SMALL_STORE) as store:
        for i in range(60):
            assert store.put_message(Message("L", b"%d" % i * 50, keys=[f"k{i}"])).ok
        assert store.wait_dispatched()


def _one(folder: Path) -> Path:
    files = sorted(p for p in folder.iterdir() if p.is_file())
    assert files, folder
    return files[0]


@pytest.mark.parametrize(
    "target",
    ["lock", "checkpoint", "abort", "index file", "segment", "consume queue file"],
)
def test_a_link_where_the_store_keeps_a_file_is_refused_before_anything_is_written(
    tmp_path: Path, store_path: Path, target: str
) -> None:
    _small_store_with_data(store_path)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious content that must not change" * 200)
    where = {
        "lock": lambda: store_path / "lock",
        "checkpoint": lambda: store_path / "checkpoint",
        "abort": lambda: store_path / "abort",
        "index file": lambda: _one(index_dir(store_path)),
        "segment": lambda: _one(store_path / "commitlog"),
        "consume queue file": lambda: _one(cq_dir(store_path, "L", 0)),
    }[target]()
    if where.exists():
        # A copy of the real file's bytes, so only the link (not the content) is wrong.
        victim.write_bytes(where.read_bytes())
        where.unlink()
    where.symlink_to(victim)
    wanted = victim.read_bytes()
    before = snapshot(store_path)
    with pytest.raises(rmqstore.StoreCorruptedError) as e:
        MessageStore(store_path, **SMALL_STORE)
    assert e.value.path == str(where)
    assert victim.read_bytes() == wanted
    assert snapshot(store_path) == before
    # A read-only open refuses links too (it never reads through them).
    if target in ("segment", "consume queue file"):
        with pytest.raises(rmqstore.StoreCorruptedError):
            _read_all_read_only(store_path)


def _read_all_read_only(store_path: Path) -> None:
    with MessageStore(store_path, **SMALL_STORE, read_only=True) as ro:
        ro.read_batch("L", 0, 0, 100)


def test_a_linked_topic_folder_is_refused(tmp_path: Path, store_path: Path) -> None:
    _small_store_with_data(store_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(store_path / "consumequeue" / "L", elsewhere)
    (store_path / "consumequeue" / "L").symlink_to(elsewhere)
    before = snapshot(elsewhere)
    with pytest.raises(rmqstore.StoreCorruptedError, match="not links"):
        MessageStore(store_path, **SMALL_STORE)
    assert snapshot(elsewhere) == before


def test_special_files_are_refused_without_blocking(store_path: Path) -> None:
    _small_store_with_data(store_path)
    for name in ("abort", "checkpoint"):
        p = store_path / name
        if p.exists():
            p.unlink()
        os.mkfifo(p)
        with pytest.raises(rmqstore.StoreCorruptedError, match="not a regular file"):
            MessageStore(store_path, **SMALL_STORE)
        p.unlink()


# -- a refused open changes nothing (item 6) ---------------------------------------------------


def _crashed_copy(store_path: Path) -> None:
    """A store with data, indexes and an abort marker (as a killed writer leaves it)."""
    _small_store_with_data(store_path)
    (store_path / "abort").write_text("12345")


@pytest.mark.parametrize(
    "damage",
    [
        "abort is a folder",
        "checkpoint is a folder",
        "checkpoint has the wrong size",
        "index is a file",
        "config is a file",
        "consumerOffset.json and its .bak are both bad",
        "a stray file in consumequeue",
    ],
)
def test_a_refused_open_changes_no_file(store_path: Path, damage: str) -> None:
    """Recovery after a crash rewrites index files and queues; an open that is then refused
    must not have started: every check runs before the first change."""
    _crashed_copy(store_path)
    if damage == "abort is a folder":
        (store_path / "abort").unlink()
        (store_path / "abort").mkdir()
    elif damage == "checkpoint is a folder":
        (store_path / "checkpoint").unlink()
        (store_path / "checkpoint").mkdir()
    elif damage == "checkpoint has the wrong size":
        with (store_path / "checkpoint").open("ab") as f:
            f.write(b"x")
    elif damage == "index is a file":
        shutil.rmtree(index_dir(store_path))
        index_dir(store_path).write_bytes(b"not a folder")
    elif damage == "config is a file":
        shutil.rmtree(store_path / "config", ignore_errors=True)
        (store_path / "config").write_bytes(b"not a folder")
    elif damage == "consumerOffset.json and its .bak are both bad":
        (store_path / "config").mkdir(exist_ok=True)
        (store_path / "config" / "consumerOffset.json").write_text("{not json")
        (store_path / "config" / "consumerOffset.json.bak").write_text("[also not")
    elif damage == "a stray file in consumequeue":
        (store_path / "consumequeue" / "notes.txt").write_text("x")
    # An empty last segment (an interrupted allocation) is removed only by an open that goes on.
    segments = sorted((store_path / "commitlog").iterdir())
    nxt = int(segments[-1].name) + SEGMENT
    (store_path / "commitlog" / segment_name(nxt)).write_bytes(b"")
    before = snapshot(store_path)
    with pytest.raises(rmqstore.RmqStoreError) as e:
        MessageStore(store_path, **SMALL_STORE)
    assert isinstance(e.value, (rmqstore.StoreCorruptedError, rmqstore.StoreIOError)), e.value
    assert snapshot(store_path) == before


# -- offsets at the end of the range (item 8) --------------------------------------------------


def test_a_segment_that_would_end_past_the_largest_offset_is_refused(store_path: Path) -> None:
    (store_path / "commitlog").mkdir(parents=True)
    name = segment_name(2**63 - SEGMENT)  # 09223372036854710272: it would end at 2**63
    (store_path / "commitlog" / name).write_bytes(bytes(SEGMENT))
    before = snapshot(store_path)
    with pytest.raises(rmqstore.StoreCorruptedError, match="too large") as e:
        MessageStore(store_path, mapped_file_size_commit_log=SEGMENT)
    assert e.value.path.endswith(name)
    after = snapshot(store_path)
    assert after.pop("lock")[0] == 0  # the lock is taken before anything is read: empty
    assert after == before


def test_puts_at_the_last_segment_are_refused_not_wrapped(store_path: Path) -> None:
    """The last segment that fits below 2**63: puts fill it, then answer
    CREATE_MAPPED_FILE_FAILED; nothing is acknowledged that cannot be read back, no file with
    a negative name appears, and the store reopens."""
    start = 2**63 - 2 * SEGMENT  # ends at 2**63 - SEGMENT: the next one would not fit
    (store_path / "commitlog").mkdir(parents=True)
    (store_path / "commitlog" / segment_name(start)).write_bytes(bytes(SEGMENT))
    acked = []
    with MessageStore(store_path, mapped_file_size_commit_log=SEGMENT) as store:
        for i in range(200):
            r = store.put_message(Message("Edge", b"%04d" % i * 100))
            if not r.ok:
                assert r.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
                break
            assert start <= r.wrote_offset < 2**63 - SEGMENT
            acked.append(r)
        else:
            pytest.fail("the segment never filled")
        assert acked
        r = store.put_messages("Edge", 1, [b"x", b"y"])
        assert r.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
        assert store.wait_dispatched()
        for r in acked:
            assert store.look_message_by_offset(r.wrote_offset).commit_log_offset == r.wrote_offset
    assert sorted(p.name for p in (store_path / "commitlog").iterdir()) == [segment_name(start)]
    with MessageStore(store_path, mapped_file_size_commit_log=SEGMENT) as store:
        assert store.get_max_offset_in_queue("Edge", 0) == len(acked)
        batch = store.read_batch("Edge", 0, 0, 1000)
        assert batch.column("commit_log_offset").to_pylist() == [r.wrote_offset for r in acked]


def test_a_queue_at_the_largest_queue_offset_refuses_more_puts(store_path: Path) -> None:
    """A record (from another writer) at the queue offset before the largest: one more put
    gets the largest, the next is refused (UNKNOWN_ERROR) rather than wrapping to a negative
    queue offset; the other queues go on."""
    largest = (2**63 - 1 - 2 * (2**31 - 1)) // 20  # MAX_QUEUE_OFFSET
    with MessageStore(store_path, **SMALL_STORE) as store:
        assert store.put_message(Message("Q", b"first")).ok
        end = store.get_max_phy_offset()
    append_records(store_path, end, [{"topic": "Q", "body": b"far", "queue_offset": largest - 1}])
    with MessageStore(store_path, **SMALL_STORE) as store:
        r = store.put_message(Message("Q", b"at the largest"))
        assert r.ok
        assert r.queue_offset == largest
        for _ in range(2):
            assert store.put_message(Message("Q", b"one too many")).status is (
                PutMessageStatus.UNKNOWN_ERROR
            )
            assert store.put_messages("Q", 0, [b"a", b"b"]).status is (
                PutMessageStatus.UNKNOWN_ERROR
            )
        assert store.put_message(Message("Q", b"other queue", queue_id=1)).ok
        assert store.wait_dispatched()
        # RocketMQ's consume queue appends units out of order at its end (with a warning).
        got = store.get_message("g", "Q", 0, 0, 32)
        assert [m.body for m in got.messages] == [b"first", b"far", b"at the largest"]
        assert [m.queue_offset for m in got.messages] == [0, largest - 1, largest]


# -- forked children (item 10) -----------------------------------------------------------------

FORK_SCRIPT = r"""
import os, sys, threading, time
import rmqstore
from rmqstore import Message, MessageStore

path, other = sys.argv[1], sys.argv[2]
store = MessageStore(path, mapped_file_size_commit_log=64 * 1024)
stop = threading.Event()

def writer():
    while not stop.is_set():
        assert store.put_message(Message("F", b"x" * 300)).ok
        store.commit_offset("g", "F", 0, 1)

threads = [threading.Thread(target=writer) for _ in range(2)]
for t in threads:
    t.start()
for round in range(15):
    time.sleep(0.02)
    pid = os.fork()
    if pid == 0:
        # The child: the parent's store is not its to use, and its exit must not block.
        for call in (
            lambda: store.put_message(Message("F", b"child")),
            lambda: store.get_message("g", "F", 0, 0),
            lambda: store.commit_offset("g", "F", 0, 5),
            lambda: store.flush(),
        ):
            try:
                call()
            except rmqstore.StoreClosedError as e:
                assert "forked" in str(e), e
            else:
                os._exit(3)
        assert store.closed
        store.close()
        if round == 0:
            # A store of its own works in the child.
            with MessageStore(other, mapped_file_size_commit_log=64 * 1024) as mine:
                assert mine.put_message(Message("C", b"child's own")).ok
        sys.exit(0)  # a normal exit: atexit handlers and finalisation run
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            print("HUNG", round)
            sys.exit(1)
        time.sleep(0.01)
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        print("CHILD FAILED", round, status)
        sys.exit(1)
stop.set()
for t in threads:
    t.join()
n = store.get_max_phy_offset()
store.close()
with MessageStore(path, mapped_file_size_commit_log=64 * 1024) as again:
    assert again.get_max_phy_offset() == n
    assert again.recovery_report()["abnormal"] is False
    assert again.query_offset("g", "F", 0) == 1
print("OK")
"""


def test_a_forked_child_never_touches_its_parents_store(tmp_path: Path, in_subprocess) -> None:
    out = in_subprocess(
        FORK_SCRIPT.replace(
            "sys.argv[1], sys.argv[2]", f"{str(tmp_path / 's')!r}, {str(tmp_path / 'c')!r}"
        ),
        timeout=240,
    )
    assert out.endswith("OK"), out


LOCK_SCRIPT = r"""
import os, sys, time
import rmqstore
from rmqstore import Message, MessageStore

path = PATH
small = {"mapped_file_size_commit_log": 64 * 1024}
store = MessageStore(path, **small)
store.put_message(Message("L", b"x"))
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    os.read(r, 1)  # the parent closed and reopened the store
    try:
        MessageStore(path, **small)  # the parent holds it: refused, not a second writer
    except rmqstore.StoreLockedError:
        os._exit(0)
    os._exit(4)
os.close(r)
# The child lives on with copies of every descriptor: the store's lock must still be the
# parent's alone, so closing and reopening here works.
store.close()
again = MessageStore(path, **small)
assert again.look_message_by_offset(0).body == b"x"
os.write(w, b"1")
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
again.close()
print("OK")
"""


def test_a_forked_child_does_not_keep_its_parents_lock(tmp_path: Path, in_subprocess) -> None:
    """The lock is an open-file-description lock, and a child inherits the lock file's
    descriptor: without closing the child's copy at fork, the parent could not reopen a store
    it closed while the child lived."""
    out = in_subprocess(LOCK_SCRIPT.replace("PATH", repr(str(tmp_path / "s"))))
    assert out.endswith("OK"), out


# -- a failed start (item 7) -------------------------------------------------------------------

START_SCRIPT = r"""
import resource, threading, sys
import rmqstore
from rmqstore import Message, MessageStore

path = sys.argv[1]
small = {
    "mapped_file_size_commit_log": 64 * 1024,
    "mapped_file_size_consume_queue": 1000,
    "max_hash_slot_num": 64,
    "max_index_num": 50,
}
with MessageStore(path, **small) as s:
    s.put_message(Message("T", b"x"))
# Thread stacks of 256 MiB under an address-space limit with 64 MiB to spare: every service
# thread fails to start, while the store's own (small) maps fit.
threading.stack_size(256 * 1024 * 1024)
with open("/proc/self/statm") as f:
    pages = int(f.read().split()[0])
used = pages * resource.getpagesize()
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (used + 64 * 1024 * 1024, hard))
try:
    MessageStore(path, **small)
except rmqstore.StoreResourceError as e:
    assert isinstance(e, RuntimeError)
    print("refused:", e)
else:
    print("opened")
    sys.exit(2)
finally:
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    threading.stack_size(0)
# Nothing was left behind: the same process opens the folder again.
with MessageStore(path, **small) as s:
    assert s.look_message_by_offset(0).body == b"x"
    names = sorted(t.name for t in threading.enumerate())
assert not [t for t in threading.enumerate() if t.name.endswith("Service")], names
print("OK")
"""


def test_a_store_whose_services_cannot_start_releases_everything(
    tmp_path: Path, in_subprocess
) -> None:
    out = in_subprocess(START_SCRIPT.replace("sys.argv[1]", repr(str(tmp_path / "s"))))
    assert "refused:" in out
    assert "starting the store's services" in out
    assert out.endswith("OK"), out


# -- an empty path (item 12) -------------------------------------------------------------------


@pytest.mark.parametrize("read_only", [False, True])
def test_an_empty_store_path_is_refused(tmp_path: Path, monkeypatch, read_only: bool) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(rmqstore.InvalidArgumentError, match="store_path is empty"):
        MessageStore("", read_only=read_only)
    with pytest.raises(rmqstore.ArgumentTypeError, match="store_path"):
        MessageStore(b"store", read_only=read_only)  # type: ignore[arg-type]
    with pytest.raises(rmqstore.ArgumentTypeError, match="store_path"):
        MessageStore(None, read_only=read_only)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
