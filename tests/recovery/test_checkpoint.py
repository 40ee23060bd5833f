"""The checkpoint file and the abort marker (docs/format.md#checkpoint,
docs/format.md#abort-marker)."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest
from rmqstore import Message, MessageStore, StoreCorruptedError


def _checkpoint(path: Path) -> tuple[int, ...]:
    raw = (path / "checkpoint").read_bytes()
    assert len(raw) == 4096
    return struct.unpack(">5q", raw[:40])


def test_abort_marker_is_there_while_open_and_gone_after_a_clean_close(open_small, store_path):
    store = open_small()
    assert (store_path / "abort").read_text() == str(os.getpid())
    assert store.recovery_report()["abnormal"] is False
    store.put_message(Message("T", b"x"))
    store.close()
    assert not (store_path / "abort").exists()
    again = open_small()
    assert again.recovery_report()["abnormal"] is False


def test_checkpoint_holds_the_last_forced_and_dispatched_times(open_small, store_path):
    store = open_small()
    rs = [store.put_message(Message("T", b"m%d" % i, keys=f"k{i}")) for i in range(20)]
    last = store.look_message_by_offset(rs[-1].wrote_offset).store_timestamp
    store.close()
    physic, logics, index, master_flushed, confirm = _checkpoint(store_path)
    assert physic == last  # store time of the last message when the commitlog was forced
    assert logics == last  # ... and when the consume queues were
    assert index == 0  # no index file filled up yet
    assert (master_flushed, confirm) == (0, 0)


def test_a_crash_leaves_the_abort_marker_and_the_next_open_says_so(store_path, in_subprocess):
    code = f"""
import os, rmqstore
s = rmqstore.MessageStore({str(store_path)!r}, mapped_file_size_commit_log=64 * 1024)
s.put_message(rmqstore.Message("T", b"before the crash", keys="k"))
s.flush()
os._exit(0)  # no close: as a kill would
"""
    in_subprocess(code)
    assert (store_path / "abort").exists()
    with MessageStore(store_path, mapped_file_size_commit_log=64 * 1024) as store:
        assert store.recovery_report()["abnormal"] is True
        assert store.wait_dispatched()
        assert [m.body for m in store.query_message("T", "k")] == [b"before the crash"]
    assert not (store_path / "abort").exists()


def test_a_checkpoint_of_the_wrong_size_is_refused(open_small, store_path):
    open_small().close()
    (store_path / "checkpoint").write_bytes(b"\0" * 100)
    with pytest.raises(StoreCorruptedError) as info:
        MessageStore(store_path, mapped_file_size_commit_log=64 * 1024)
    assert "checkpoint" in str(info.value)


def test_state_runs_forward(open_small) -> None:
    from rmqstore import StoreState

    store = open_small()
    assert store.state is StoreState.RUNNING
    store.close()
    assert store.state is StoreState.SHUTDOWN_OK
    assert [s.value for s in StoreState] == sorted(s.value for s in StoreState)


def test_consume_queue_thorough_rounds_move_the_logics_timestamp(open_small, tmp_path):
    # FlushConsumeQueueService: rounds that need 2 pages leave the logics timestamp alone;
    # a thorough round (every 1.5 s here, 60 s by default) forces the queues and records the
    # time of what was dispatched before it (RocketMQ's FlushConsumeQueueService).
    stamps = {}
    for name, thorough in (("thorough", 1500), ("default", 60_000)):
        store = open_small(
            tmp_path / name,
            flush_interval_consume_queue=20,
            flush_consume_queue_thorough_interval=thorough,
        )
        r = store.put_message(Message("T", b"m"))
        stamps[name] = store.look_message_by_offset(r.wrote_offset).store_timestamp
        assert store.wait_dispatched()
    deadline = time.monotonic() + 6
    while _checkpoint(tmp_path / "thorough")[1] != stamps["thorough"]:
        assert time.monotonic() < deadline, _checkpoint(tmp_path / "thorough")
        time.sleep(0.05)
    time.sleep(1.2)  # another checkpoint round for the other store
    assert _checkpoint(tmp_path / "default")[1] == 0


def test_checkpoint_is_written_every_second_while_open(open_small, store_path):
    # The flush services force any dirty page (least pages 0); the checkpoint service then
    # records their times, with the store still open.
    store = open_small(flush_commit_log_least_pages=0, flush_consume_queue_least_pages=0)
    r = store.put_message(Message("T", b"m", keys="k"))
    stored = store.look_message_by_offset(r.wrote_offset).store_timestamp
    assert store.wait_dispatched()
    deadline = time.monotonic() + 5
    while _checkpoint(store_path)[:2] != (stored, stored):
        assert time.monotonic() < deadline, _checkpoint(store_path)
        time.sleep(0.05)
    assert store.service_stats()["CheckpointService"]["rounds"] >= 1
    assert not store.closed
