"""Open, close, locking, reopening, strict loading and recovery of a damaged tail."""

from __future__ import annotations

import errno
import gc
import logging
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import rmqstore
from rmqstore import Message, MessageStore
from rmqwire import (
    SEGMENT,
    SMALL_STORE,
    commitlog_dir,
    read_segment,
    scan_segment,
    segment_name,
    settled_snapshot,
    snapshot,
)

# -- close --------------------------------------------------------------------------------------


def test_context_manager_closes(store_path: Path) -> None:
    with MessageStore(store_path, mapped_file_size_commit_log=SEGMENT) as store:
        assert not store.closed
        assert store.put_message(Message("T", b"x")).ok
        assert "open" in repr(store)
    assert store.closed
    assert "closed" in repr(store)
    # The lock is released: the folder opens again.
    with MessageStore(store_path, mapped_file_size_commit_log=SEGMENT) as again:
        assert again.get_max_phy_offset() == 93
        assert again.look_message_by_offset(0).body == b"x"


def test_context_manager_closes_on_error(store_path: Path) -> None:
    opened: list[MessageStore] = []

    def use() -> None:
        with MessageStore(store_path, mapped_file_size_commit_log=SEGMENT) as store:
            opened.append(store)
            store.put_message(Message("T", b"x"))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        use()
    assert opened[0].closed


CALLS: dict[str, Callable[[MessageStore], object]] = {
    "put_message": lambda s: s.put_message(Message("T", b"x")),
    "put_messages": lambda s: s.put_messages("T", 0, [b"x"]),
    "put_messages_empty": lambda s: s.put_messages("T", 0, []),
    "look_message_by_offset": lambda s: s.look_message_by_offset(0),
    "look_message_by_offset_outside": lambda s: s.look_message_by_offset(10**9),
    "get_max_phy_offset": lambda s: s.get_max_phy_offset(),
    "get_min_phy_offset": lambda s: s.get_min_phy_offset(),
    "flush": lambda s: s.flush(),
    "commitlog_segments": lambda s: s.commitlog_segments(),
    "recovery_report": lambda s: s.recovery_report(),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_every_method_raises_store_closed_error_after_close(open_store, call: str) -> None:
    store = open_store()
    store.put_message(Message("T", b"x"))
    CALLS[call](store)  # works while open
    store.close()
    with pytest.raises(rmqstore.StoreClosedError) as info:
        CALLS[call](store)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, rmqstore.RmqStoreError)


def test_close_is_idempotent(open_store, store_path: Path) -> None:
    store = open_store()
    store.put_message(Message("T", b"x"))
    store.close()
    store.close()
    assert store.closed
    store.close()
    with open_store() as again:
        assert again.look_message_by_offset(0).body == b"x"


# -- locking ------------------------------------------------------------------------------------


def test_second_open_in_this_process_is_locked_and_touches_nothing(
    open_small, store_path: Path
) -> None:
    store = open_small()
    for i in range(40):
        store.put_message(Message("T", bytes([i]) * 3000))
    store.flush()
    assert store.wait_dispatched()
    before = settled_snapshot(store_path)
    with pytest.raises(rmqstore.StoreLockedError) as info:
        MessageStore(store_path, **SMALL_STORE)
    assert isinstance(info.value, OSError)
    assert isinstance(info.value, rmqstore.RmqStoreError)
    assert info.value.path == str(store_path)
    assert str(store_path) in str(info.value)
    assert snapshot(store_path) == before
    # The first store is unaffected.
    r = store.put_message(Message("T", b"still open"))
    assert r.ok
    assert r.queue_offset == 40


def test_second_open_through_another_path_is_locked(open_store, store_path: Path) -> None:
    store = open_store()
    store.put_message(Message("T", b"x"))
    link = store_path.parent / "link"
    link.symlink_to(store_path, target_is_directory=True)
    with pytest.raises(rmqstore.StoreLockedError):
        MessageStore(link, mapped_file_size_commit_log=SEGMENT)
    with pytest.raises(rmqstore.StoreLockedError):
        MessageStore(store_path / "commitlog" / "..", mapped_file_size_commit_log=SEGMENT)


OTHER_PROCESS = """
import rmqstore
try:
    store = rmqstore.MessageStore({path!r}, **{options!r})
except rmqstore.StoreLockedError as exc:
    print("LOCKED", isinstance(exc, OSError), exc.path)
else:
    m = store.look_message_by_offset(0)
    print("OPENED", store.get_max_phy_offset(), m.body.decode())
    store.close()
"""


def test_open_from_another_process_is_locked_until_closed(
    open_small, store_path: Path, in_subprocess
) -> None:
    store = open_small()
    r = store.put_message(Message("T", b"hello"))
    store.flush()
    assert store.wait_dispatched()  # dispatch writes the consume queue in the background
    before = settled_snapshot(store_path)
    code = OTHER_PROCESS.format(path=str(store_path), options=SMALL_STORE)
    assert in_subprocess(code) == f"LOCKED True {store_path}"
    assert snapshot(store_path) == before
    r2 = store.put_message(Message("T", b"more"))
    assert r2.ok
    store.close()
    assert in_subprocess(code) == f"OPENED {r.wrote_bytes + r2.wrote_bytes} hello"


def test_lock_file(open_store, store_path: Path) -> None:
    store = open_store()
    lock = store_path / "lock"
    assert lock.is_file()  # stat only: opening the file would be a different matter
    store.close()
    assert lock.read_bytes() == b"lock"
    # Reopening keeps it (RocketMQ writes "lock" again at every start).
    with open_store():
        assert lock.stat().st_size == 4
    assert lock.read_bytes() == b"lock"


def test_reading_the_lock_file_does_not_release_the_lock(
    open_small, store_path: Path, in_subprocess
) -> None:
    """POSIX record locks vanish when the owning process closes *any* descriptor of the file,
    so merely reading ``lock`` (a backup tool, a monitoring thread) must not open the folder to
    a second process."""
    store = open_small()
    store.put_message(Message("T", b"hello"))
    assert (store_path / "lock").read_bytes() == b"lock"
    code = OTHER_PROCESS.format(path=str(store_path), options=SMALL_STORE)
    assert in_subprocess(code) == f"LOCKED True {store_path}"


# -- reopen -------------------------------------------------------------------------------------


def test_reopen_finds_everything_written(open_store, store_path: Path) -> None:
    store = open_store()
    written = []
    counts: dict[tuple[str, int], int] = {}
    for i in range(150):
        topic, qid = ("A", "B", "C")[i % 3], i % 5
        if i % 25 == 0:
            r = store.put_messages(topic, qid, [f"b{i}-{j}".encode() * 50 for j in range(3)])
        else:
            r = store.put_message(Message(topic, f"m{i}".encode() * 400, queue_id=qid, tags="t"))
        assert r.ok
        for off in r.record_offsets:
            written.append((off, topic, qid))
        counts[(topic, qid)] = counts.get((topic, qid), 0) + r.msg_num
    last_ts = r.store_timestamp
    max_offset = store.get_max_phy_offset()
    assert max_offset > 2 * SEGMENT
    snapshot_before = {off: store.look_message_by_offset(off) for off, _, _ in written}
    store.close()

    store = open_store()
    assert store.get_max_phy_offset() == max_offset
    assert store.get_min_phy_offset() == 0
    report = store.recovery_report()
    assert report["process_offset"] == max_offset
    # A clean close: the scan starts at the segment of the last message
    # (docs/architecture.md#recovery).
    assert report["start_offset"] == written[-1][0] // SEGMENT * SEGMENT
    assert report["messages"] == sum(1 for off, _, _ in written if off >= report["start_offset"])
    assert report["stop_reason"] is None
    assert report["discarded_bytes"] == 0
    for off, old in snapshot_before.items():
        new = store.look_message_by_offset(off)
        for field in (
            "topic",
            "body",
            "queue_id",
            "queue_offset",
            "store_timestamp",
            "born_timestamp",
            "properties",
            "msg_id",
            "store_size",
        ):
            assert getattr(new, field) == getattr(old, field), (off, field)
    for (topic, qid), n in counts.items():
        r = store.put_message(Message(topic, b"after reopen", queue_id=qid))
        assert r.queue_offset == n, (topic, qid)
        assert r.store_timestamp >= last_ts
    assert store.put_message(Message("Fresh", b"x", queue_id=9)).queue_offset == 0
    assert store.look_message_by_offset(max_offset).body == b"after reopen"


def test_reopen_keeps_v2_and_ipv6_records(open_store) -> None:
    host = "[2001:db8::1]:10911"
    retry = "%RETRY%" + "g" * 200
    store = open_store(store_host=host)
    puts = [
        Message(retry, b"v2", tags="t"),
        Message("T", b"born6", born_host="[::1]:7"),
        Message("T", b"born4", born_host="10.0.0.1:8"),
        Message(retry, b"v2 again", born_host="[fe80::2]:9"),
    ]
    results = [store.put_message(m) for m in puts]
    assert all(r.ok for r in results)
    batch = store.put_messages(retry, 0, [b"b1", b"b2"])
    max_offset = store.get_max_phy_offset()
    store.close()
    store = open_store(store_host=host)
    assert store.get_max_phy_offset() == max_offset
    assert store.recovery_report()["messages"] == 6
    assert store.recovery_report()["stop_reason"] is None
    for m, r in zip(puts, results, strict=True):
        got = store.look_message_by_offset(r.wrote_offset)
        assert (got.topic, got.body, got.msg_id) == (m.topic, m.body, r.msg_id)
        assert got.born_host == (m.born_host or host)
        assert got.store_host == host
    assert [store.look_message_by_offset(o).body for o in batch.record_offsets] == [b"b1", b"b2"]
    assert store.put_message(Message(retry, b"next")).queue_offset == 4
    assert store.put_message(Message("T", b"next")).queue_offset == 2


def test_dropping_an_open_store_releases_it(store_path: Path) -> None:
    store = MessageStore(store_path, mapped_file_size_commit_log=SEGMENT)
    r = store.put_message(Message("T", b"dropped"))
    del store
    gc.collect()
    with MessageStore(store_path, mapped_file_size_commit_log=SEGMENT) as again:
        assert again.get_max_phy_offset() == r.wrote_bytes
        assert again.look_message_by_offset(0).body == b"dropped"


def test_close_while_other_threads_put(open_store) -> None:
    store = open_store()
    done: list[tuple[rmqstore.PutMessageResult, bytes]] = []
    errors: list[BaseException] = []
    started = threading.Barrier(5)

    def worker(t: int) -> None:
        started.wait()
        i = 0
        while True:
            body = f"{t}-{i}".encode() * 40
            try:
                r = store.put_message(Message("Close", body, queue_id=t))
            except rmqstore.StoreClosedError:
                return
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return
            done.append((r, body))
            i += 1

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.1)
    store.close()
    for t in threads:
        t.join(10)
    assert not errors
    assert [r.status for r, _ in done if not r.ok] == []
    assert len(done) > 100
    with open_store() as again:
        assert again.get_max_phy_offset() == max(r.wrote_offset + r.wrote_bytes for r, _ in done)
        start = again.recovery_report()["start_offset"]
        scanned = sum(1 for r, _ in done if r.wrote_offset >= start)
        assert again.recovery_report()["messages"] == scanned
        for r, body in done[:: max(1, len(done) // 200)]:
            assert again.look_message_by_offset(r.wrote_offset).body == body


def test_reopen_an_empty_store(open_store, store_path: Path) -> None:
    open_store().close()
    store = open_store()
    assert store.get_max_phy_offset() == 0
    assert store.get_min_phy_offset() == -1
    assert store.recovery_report()["messages"] == 0
    assert store.put_message(Message("T", b"x")).wrote_offset == 0


def test_zero_length_last_segment_is_removed_at_open(open_store, store_path: Path) -> None:
    store = open_store()
    for _ in range(30):
        store.put_message(Message("T", b"z" * 4000))
    max_offset = store.get_max_phy_offset()
    store.close()
    last = max_offset // SEGMENT * SEGMENT
    empty = commitlog_dir(store_path) / segment_name(last + SEGMENT)
    assert not empty.exists()
    empty.touch()
    store = open_store()
    assert not empty.exists()
    assert store.get_max_phy_offset() == max_offset
    assert [Path(p).name for p in store.commitlog_segments()][-1] == segment_name(last)
    assert store.recovery_report()["stop_reason"] is None
    results = [store.put_message(Message("T", b"z" * 4000)) for _ in range(20)]
    assert results[0].wrote_offset == max_offset
    assert results[0].queue_offset == 30
    assert any(r.wrote_offset >= last + SEGMENT for r in results)
    store.close()
    assert empty.stat().st_size == SEGMENT


# -- strict load --------------------------------------------------------------------------------


def _make_store(open_store, messages: int = 40) -> int:
    store = open_store()
    for i in range(messages):
        store.put_message(Message("T", bytes([i]) * 3000))
    max_offset = store.get_max_phy_offset()
    store.close()
    return max_offset


def _assert_corrupted(store_path: Path, culprit: Path, **overrides) -> None:
    overrides.setdefault("mapped_file_size_commit_log", SEGMENT)
    before = snapshot(commitlog_dir(store_path))
    with pytest.raises(rmqstore.StoreCorruptedError) as info:
        MessageStore(store_path, **overrides)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, rmqstore.RmqStoreError)
    assert culprit.name in str(info.value)
    assert info.value.path == str(culprit)
    assert snapshot(commitlog_dir(store_path)) == before


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("notes.txt", "file"),
        ("0000000000000000000", "file"),  # 19 digits
        ("00000000000000000000.bak", "file"),
        ("sub", "dir"),
        (segment_name(10 * SEGMENT), "dir"),
    ],
)
def test_stray_entry_in_commitlog_fails_to_open(
    open_store, store_path: Path, name: str, kind: str
) -> None:
    max_offset = _make_store(open_store)
    stray = commitlog_dir(store_path) / name
    if kind == "dir":
        stray.mkdir()
    else:
        stray.write_bytes(b"x")
    _assert_corrupted(store_path, stray)
    # Remove the stray entry and everything is there.
    if kind == "dir":
        stray.rmdir()
    else:
        stray.unlink()
    with open_store() as store:
        assert store.get_max_phy_offset() == max_offset


@pytest.mark.parametrize(
    ("segment", "size"),
    [(0, SEGMENT - 1), (0, SEGMENT + 1), (0, 0), (1, SEGMENT // 2), (1, 2 * SEGMENT)],
)
def test_segment_of_the_wrong_size_fails_to_open(
    open_store, store_path: Path, segment: int, size: int
) -> None:
    _make_store(open_store)
    path = commitlog_dir(store_path) / segment_name(segment * SEGMENT)
    assert path.exists()
    with path.open("r+b") as f:
        f.truncate(size)
    _assert_corrupted(store_path, path)


def test_reopening_with_another_segment_size_fails(open_store, store_path: Path) -> None:
    max_offset = _make_store(open_store)
    first = commitlog_dir(store_path) / segment_name(0)
    _assert_corrupted(store_path, first, mapped_file_size_commit_log=2 * SEGMENT)
    _assert_corrupted(store_path, first, mapped_file_size_commit_log=SEGMENT // 2)
    with open_store() as store:
        assert store.get_max_phy_offset() == max_offset


def test_gap_between_segments_fails_to_open(open_store, store_path: Path) -> None:
    max_offset = _make_store(open_store, messages=60)
    assert max_offset // SEGMENT == 2
    third = commitlog_dir(store_path) / segment_name(2 * SEGMENT)
    moved = commitlog_dir(store_path) / segment_name(5 * SEGMENT)
    third.rename(moved)
    _assert_corrupted(store_path, moved)


def test_failed_open_leaves_the_lock_file_untouched(open_store, store_path: Path) -> None:
    """StoreCorruptedError promises that nothing was changed; that includes ``lock``."""
    _make_store(open_store)
    (commitlog_dir(store_path) / "notes.txt").write_bytes(b"x")
    before = snapshot(store_path)
    with pytest.raises(rmqstore.StoreCorruptedError):
        MessageStore(store_path, mapped_file_size_commit_log=SEGMENT)
    assert snapshot(store_path) == before


def test_store_path_that_is_a_file_is_an_io_error(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"x")
    with pytest.raises(rmqstore.StoreIOError) as info:
        MessageStore(path, mapped_file_size_commit_log=SEGMENT)
    assert isinstance(info.value, OSError)
    assert info.value.errno == errno.EEXIST
    assert info.value.filename == str(path)
    assert path.read_bytes() == b"x"


# -- recovery -----------------------------------------------------------------------------------

BODY = 2900


def _body(i: int) -> bytes:
    return bytes((i * 31 + j) % 251 for j in range(BODY))


def _fill_three_segments(open_store, pause: float = 0.0) -> list[rmqstore.PutMessageResult]:
    """50 messages over three segments, then a clean close; ``pause`` seconds between puts
    give every message its own store millisecond."""
    store = open_store()
    results = []
    for i in range(50):
        results.append(store.put_message(Message("Rec", _body(i), tags="t", keys=f"k{i}")))
        if pause:
            time.sleep(pause)
    assert all(r.ok for r in results)
    assert results[-1].wrote_offset // SEGMENT == 2
    store.close()
    return results


def _zero_tail(data: bytearray, pos: int, size: int) -> None:
    data[pos + size // 2 : pos + size] = bytes(size - size // 2)


def _flip_body_byte(data: bytearray, pos: int, size: int) -> None:
    data[pos + 88 + 100] ^= 0xFF


def _bad_magic(data: bytearray, pos: int, size: int) -> None:
    data[pos + 4 : pos + 8] = b"\x12\x34\x56\x78"


def _size_disagrees(data: bytearray, pos: int, size: int) -> None:
    data[pos : pos + 4] = struct.pack(">i", size + 4)


def _size_too_small(data: bytearray, pos: int, size: int) -> None:
    data[pos : pos + 4] = struct.pack(">i", 100)


def _topic_length(data: bytearray, pos: int, size: int) -> None:
    data[pos + 88 + BODY] = 0x7F


DAMAGES = {
    "zero-tail-of-last-record": (_zero_tail, -1),
    "flip-body-byte": (_flip_body_byte, 2),
    "bad-magic": (_bad_magic, 2),
    "size-disagrees-with-fields": (_size_disagrees, 2),
    "size-too-small": (_size_too_small, 0),
    "topic-length": (_topic_length, 3),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_recovery_truncates_at_the_first_damaged_record(
    open_store, store_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    results = _fill_three_segments(open_store)
    newest = [r for r in results if r.wrote_offset >= 2 * SEGMENT]
    assert len(newest) >= 6
    spoil, which = DAMAGES[damage]
    target = newest[which]
    index = results.index(target)
    path = commitlog_dir(store_path) / segment_name(2 * SEGMENT)
    data = bytearray(path.read_bytes())
    spoil(data, target.wrote_offset - 2 * SEGMENT, target.wrote_bytes)
    path.write_bytes(bytes(data))

    with caplog.at_level(logging.WARNING, logger="rmqstore.recovery"):
        store = open_store()
    start = target.wrote_offset
    # The log says where recovery stopped and why.
    said = [r.getMessage() for r in caplog.records if r.name == "rmqstore.recovery"]
    assert any(f"stopped at offset {start}" in m for m in said), said
    assert store.get_max_phy_offset() == start
    report = store.recovery_report()
    assert report["stop_reason"]
    assert report["process_offset"] == start
    # The scan starts at the newest segment (the one before it when its first record is the
    # damaged one) and checks every record up to the damage.
    first = 2 * SEGMENT if which else SEGMENT
    assert report["start_offset"] == first
    assert report["messages"] == sum(1 for r in results[:index] if r.wrote_offset >= first)
    assert report["discarded_bytes"] > 0
    for i, r in enumerate(results[:index]):
        m = store.look_message_by_offset(r.wrote_offset)
        assert m.body == _body(i)
        assert m.queue_offset == i
    for r in results[index:]:
        assert store.look_message_by_offset(r.wrote_offset) is None
    # The consume queue and the index agree with the truncated commitlog.
    assert store.wait_dispatched()
    assert store.get_max_offset_in_queue("Rec", 0) == index
    got = store.get_message("g", "Rec", 0, max(0, index - 5)).messages
    assert [m.body for m in got] == [_body(i) for i in range(max(0, index - 5), index)]
    if index:
        assert [m.body for m in store.query_message("Rec", f"k{index - 1}")] == [_body(index - 1)]
    for i in range(index, len(results)):
        assert store.query_message("Rec", f"k{i}") == []
    # Stale bytes after the truncation point are gone from the file.
    local = start - 2 * SEGMENT
    assert path.read_bytes()[local:] == bytes(SEGMENT - local)
    # New puts continue right there with the next queue offset.
    new = store.put_message(Message("Rec", b"new", tags="t"))
    assert new.wrote_offset == start
    assert new.queue_offset == index
    assert store.look_message_by_offset(start).body == b"new"
    store.close()

    # A later open does not resurrect anything past the new record.
    store = open_store()
    assert store.get_max_phy_offset() == start + new.wrote_bytes
    report = store.recovery_report()
    assert report["stop_reason"] is None
    assert report["start_offset"] == 2 * SEGMENT
    assert report["messages"] == 1 + sum(
        1 for r in results[:index] if r.wrote_offset >= 2 * SEGMENT
    )
    for r in results[index + 1 :]:
        assert store.look_message_by_offset(r.wrote_offset) is None
    n2 = store.put_message(Message("Rec", b"n2"))
    assert n2.queue_offset == index + 1
    assert n2.wrote_offset == start + new.wrote_bytes
    store.flush()
    records, _, end = scan_segment(read_segment(store_path, 2 * SEGMENT))
    assert end == local + new.wrote_bytes + n2.wrote_bytes
    assert [rec.body for rec in records[-2:]] == [b"new", b"n2"]


def test_recovery_in_an_older_segment_drops_the_later_ones(open_store, store_path: Path) -> None:
    results = _fill_three_segments(open_store)
    target = next(r for r in results if r.wrote_offset >= SEGMENT)  # first record of segment 1
    path = commitlog_dir(store_path) / segment_name(SEGMENT)
    data = bytearray(path.read_bytes())
    _flip_body_byte(data, 0, target.wrote_bytes)
    path.write_bytes(bytes(data))
    # Without consume queues recovery scans from the first segment (and rebuilds them).
    shutil.rmtree(store_path / "consumequeue")
    store = open_store()
    assert store.recovery_report()["start_offset"] == 0
    assert store.get_max_phy_offset() == SEGMENT
    assert store.recovery_report()["stop_reason"]
    assert not (commitlog_dir(store_path) / segment_name(2 * SEGMENT)).exists()
    assert store.look_message_by_offset(results[0].wrote_offset).body == _body(0)
    new = store.put_message(Message("Rec", b"x"))
    assert new.wrote_offset == SEGMENT
    assert new.queue_offset == results.index(target)


def test_clean_restart_scans_from_the_segment_of_the_last_dispatched_message(
    open_store,
) -> None:
    store = open_store()
    early = store.put_message(Message("Early", b"only in segment 0"))
    results = [store.put_message(Message("Rec", _body(i), tags="t")) for i in range(50)]
    store.close()
    assert early.wrote_offset < SEGMENT <= 2 * SEGMENT <= results[-1].wrote_offset
    last_segment = results[-1].wrote_offset // SEGMENT * SEGMENT
    with open_store() as again:
        report = again.recovery_report()
        assert not report["abnormal"]
        assert report["start_offset"] == last_segment
        assert report["messages"] == sum(1 for r in results if r.wrote_offset >= last_segment)
        # The next queue offsets of queues last written before the scan come from the
        # consume queues (RocketMQ's recoverTopicQueueTable).
        assert again.put_message(Message("Early", b"next")).queue_offset == 1
        assert again.put_message(Message("Rec", b"next")).queue_offset == 50


def _set_checkpoint_times(store_path: Path, ts: int) -> None:
    """Sets the checkpoint's physic and logics times (offsets 0 and 8, big-endian) to ``ts``,
    as a crash would leave them; its minimum time is then ``ts - 3000``."""
    with open(store_path / "checkpoint", "r+b") as f:
        f.write(struct.pack(">qq", ts, ts))


@pytest.mark.parametrize("segment", [0, 1, 2])
def test_crash_recovery_starts_at_the_newest_segment_older_than_the_checkpoint(
    open_store, store_path: Path, segment: int
) -> None:
    results = _fill_three_segments(open_store, pause=0.002)
    first_of = {r.wrote_offset // SEGMENT: r for r in reversed(results)}
    assert sorted(first_of) == [0, 1, 2]
    # The checkpoint as a crash would leave it: its minimum time (min(physic, logics) - 3 s)
    # is the store time of the chosen segment's first message; 0 (never written) for segment 0.
    ts = first_of[segment].store_timestamp + 3000 if segment else 0
    _set_checkpoint_times(store_path, ts)
    (store_path / "abort").write_text("0")
    with open_store() as store:
        report = store.recovery_report()
        assert report["abnormal"]
        assert report["start_offset"] == segment * SEGMENT
        assert report["messages"] == sum(1 for r in results if r.wrote_offset >= segment * SEGMENT)
        assert store.get_max_phy_offset() == results[-1].wrote_offset + results[-1].wrote_bytes
        assert store.wait_dispatched()
        assert store.put_message(Message("Rec", b"after")).queue_offset == 50
        bodies = [m.body for m in store.get_message("g", "Rec", 0, 0).messages]
        bodies += [m.body for m in store.get_message("g", "Rec", 0, len(bodies)).messages]
        assert bodies[:50] == [_body(i) for i in range(50)]


def test_crash_recovery_without_consume_queues_scans_everything_they_are_rebuilt_from(
    open_store, store_path: Path
) -> None:
    store = open_store()
    early = store.put_message(Message("Early", b"only in segment 0"))
    store.close()
    results = _fill_three_segments(open_store, pause=0.002)
    # A checkpoint that would start a crash recovery at segment 2, but the consume queues
    # are gone: they are rebuilt from segment 0, so the scan must start there too.
    ts = next(r for r in results if r.wrote_offset >= 2 * SEGMENT).store_timestamp + 3000
    _set_checkpoint_times(store_path, ts)
    shutil.rmtree(store_path / "consumequeue")
    (store_path / "abort").write_text("0")
    with open_store() as store:
        assert store.recovery_report()["start_offset"] == 0
        assert store.wait_dispatched()
        assert store.get_max_offset_in_queue("Early", 0) == 1
        assert store.put_message(Message("Early", b"next")).queue_offset == 1
        assert store.put_message(Message("Rec", b"next")).queue_offset == 50
        assert store.look_message_by_offset(early.wrote_offset).body == b"only in segment 0"


@pytest.mark.parametrize("scenario", ["clean", "corrupt-tail", "corrupt-tail-and-abort"])
def test_store_spec_5_6_recover_scenarios(open_store, store_path: Path, scenario: str) -> None:
    """docs/architecture.md#recovery (RocketMQ's DefaultMessageStoreTest testRecover)."""
    results = _fill_three_segments(open_store)
    last = results[-1]
    end = last.wrote_offset + last.wrote_bytes
    if scenario != "clean":
        # Zero 16 bytes at the topic-length position of the last record.
        path = commitlog_dir(store_path) / segment_name(2 * SEGMENT)
        data = bytearray(path.read_bytes())
        at = last.wrote_offset - 2 * SEGMENT + 88 + BODY
        data[at : at + 16] = bytes(16)
        path.write_bytes(bytes(data))
    if scenario == "corrupt-tail-and-abort":
        (store_path / "abort").write_text("0")
    with open_store() as store:
        report = store.recovery_report()
        assert report["abnormal"] is (scenario == "corrupt-tail-and-abort")
        assert store.wait_dispatched()
        if scenario == "clean":
            assert store.get_max_phy_offset() == end
            assert store.get_max_offset_in_queue("Rec", 0) == 50
            return
        # Both recoveries roll back to the end of the previous record.
        assert report["stop_reason"]
        assert store.get_max_phy_offset() == last.wrote_offset
        assert store.get_max_offset_in_queue("Rec", 0) == 49
        assert store.look_message_by_offset(last.wrote_offset) is None
        again = store.put_message(Message("Rec", b"after", tags="t"))
        assert (again.wrote_offset, again.queue_offset) == (last.wrote_offset, 49)
        assert store.look_message_by_offset(again.wrote_offset).body == b"after"


def test_no_crc_check_on_recover_keeps_a_flipped_body(open_store, store_path: Path) -> None:
    results = _fill_three_segments(open_store)
    target = results[-3]
    path = commitlog_dir(store_path) / segment_name(2 * SEGMENT)
    data = bytearray(path.read_bytes())
    _flip_body_byte(data, target.wrote_offset - 2 * SEGMENT, target.wrote_bytes)
    path.write_bytes(bytes(data))
    store = open_store(check_crc_on_recover=False)
    assert store.get_max_phy_offset() == results[-1].wrote_offset + results[-1].wrote_bytes
    assert store.recovery_report()["stop_reason"] is None
    # Kept by recovery, but never served as valid data: reads check the CRC.
    with pytest.raises(rmqstore.CorruptRecordError) as info:
        store.look_message_by_offset(target.wrote_offset)
    assert info.value.path == str(path)
    assert info.value.offset == target.wrote_offset
    store.close()
    # With the read check off too, the flipped body is served as stored.
    store = open_store(check_crc_on_recover=False, check_crc_on_read=False)
    body = store.look_message_by_offset(target.wrote_offset).body
    assert body != _body(len(results) - 3)
    assert body[100] == _body(len(results) - 3)[100] ^ 0xFF
    store.close()
    # With the check on (the default) the same file is truncated at that record.
    store = open_store()
    assert store.get_max_phy_offset() == target.wrote_offset


def test_recovery_survives_a_flipped_sysflag_bit_in_a_small_record(
    open_store, store_path: Path
) -> None:
    """One bit flip turns a record's SYSFLAG into "born host is IPv6" (0x10). For a record
    shorter than the IPv6 layout the fields then run past TOTALSIZE; recovery must treat the
    record as damaged (truncate there), not crash."""
    store = open_store()
    first = store.put_message(Message("T", b"hello"))
    small = store.put_message(Message("T", b""))
    assert small.wrote_bytes == 92
    store.close()
    path = commitlog_dir(store_path) / segment_name(0)
    data = bytearray(path.read_bytes())
    data[small.wrote_offset + 39] ^= 0x10  # SYSFLAG is bytes 36..40
    path.write_bytes(bytes(data))
    try:
        store = open_store()
    except BaseException as exc:  # a Rust panic surfaces as pyo3's PanicException
        pytest.fail(f"open raised {type(exc).__name__}: {exc}")
    assert store.get_max_phy_offset() == small.wrote_offset
    assert store.recovery_report()["stop_reason"]
    assert store.look_message_by_offset(first.wrote_offset).body == b"hello"


CRASHING_WRITER = """
import os, time, rmqstore
store = rmqstore.MessageStore({path!r}, mapped_file_size_commit_log={segment})
for i in range(30):
    store.put_message(rmqstore.Message("T", bytes([i]) * 3000))
deadline = time.monotonic() + 10
while not store._core.preallocated_offsets() and time.monotonic() < deadline:
    time.sleep(0.01)
print(store.get_max_phy_offset(), store._core.preallocated_offsets())
store.flush()
os._exit(0)  # a crash: no close
"""


def test_recovery_after_a_crash_with_a_preallocated_segment(
    store_path: Path, open_store, in_subprocess
) -> None:
    """A crash leaves the pre-allocated next segment behind, all zeros. Recovery drops it; it
    is not damage: nothing but zeros is discarded."""
    out = in_subprocess(CRASHING_WRITER.format(path=str(store_path), segment=SEGMENT))
    max_offset = int(out.split()[0])
    last = max_offset // SEGMENT * SEGMENT
    leftover = commitlog_dir(store_path) / segment_name(last + SEGMENT)
    assert out == f"{max_offset} [{last + SEGMENT}]"
    assert leftover.stat().st_size == SEGMENT
    assert leftover.read_bytes() == bytes(SEGMENT)
    store = open_store()
    assert store.get_max_phy_offset() == max_offset
    assert not leftover.exists()
    report = store.recovery_report()
    assert report["messages"] == 30
    assert report["process_offset"] == max_offset
    assert report["discarded_bytes"] == 0
    assert report["stop_reason"] is None
    r = store.put_message(Message("T", b"after"))
    assert r.wrote_offset == max_offset
    assert r.queue_offset == 30


def test_many_open_close_cycles_keep_data(open_store, store_path: Path) -> None:
    total = 0
    for cycle in range(8):
        store = open_store()
        assert store.get_max_phy_offset() == total
        for i in range(10):
            r = store.put_message(Message("Cyc", f"{cycle}-{i}".encode() * 300))
            assert r.queue_offset == cycle * 10 + i
            total = r.wrote_offset + r.wrote_bytes
        store.close()
    assert total > SEGMENT
    assert os.listdir(commitlog_dir(store_path))
