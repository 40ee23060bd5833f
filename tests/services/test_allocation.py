"""Segment allocation ahead of need, warming, service threads, and the error hierarchy."""

from __future__ import annotations

import inspect
import threading
import time
from pathlib import Path

import pytest
import rmqstore
import rmqstore.errors
import rmqwire
from rmqstore import Message, MessageStore
from rmqwire import SEGMENT, commitlog_dir, segment_name


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def fill_until(store: MessageStore, offset: int, body: bytes = bytes(3000)) -> list[int]:
    """Puts until the max offset passes ``offset``; returns the record offsets."""
    offsets = []
    while store.get_max_phy_offset() <= offset:
        r = store.put_message(Message("Alloc", body))
        assert r.ok
        offsets.append(r.wrote_offset)
    return offsets


def data_segments(store: MessageStore) -> list[str]:
    last = (store.get_max_phy_offset() - 1) // SEGMENT
    return [segment_name(k * SEGMENT) for k in range(last + 1)]


def test_next_segment_is_created_before_it_is_needed(store: MessageStore, store_path: Path) -> None:
    assert store._core.preallocated_offsets() == []
    store.put_message(Message("Alloc", b"first"))
    assert wait_for(lambda: store._core.preallocated_offsets() == [SEGMENT])
    nxt = commitlog_dir(store_path) / segment_name(SEGMENT)
    assert nxt.stat().st_size == SEGMENT
    assert nxt.read_bytes() == bytes(SEGMENT)
    assert store.get_max_phy_offset() < SEGMENT
    inode = nxt.stat().st_ino
    # Roll into it: the pre-allocated file is the one used, and the one after it is requested.
    offsets = fill_until(store, SEGMENT)
    assert offsets[-1] == SEGMENT
    assert nxt.stat().st_ino == inode
    assert wait_for(lambda: store._core.preallocated_offsets() == [2 * SEGMENT])
    assert (commitlog_dir(store_path) / segment_name(2 * SEGMENT)).stat().st_size == SEGMENT
    assert [Path(p).name for p in store.commitlog_segments()] == [
        segment_name(0),
        segment_name(SEGMENT),
    ]


def test_preallocation_keeps_up_over_many_rolls(store: MessageStore, store_path: Path) -> None:
    for k in range(1, 6):
        fill_until(store, k * SEGMENT)
        assert wait_for(lambda k=k: store._core.preallocated_offsets() == [(k + 1) * SEGMENT])
    names = sorted(p.name for p in commitlog_dir(store_path).iterdir())
    assert names == [segment_name(k * SEGMENT) for k in range(7)]


def test_close_deletes_unused_preallocated_segments(open_store, store_path: Path) -> None:
    store = open_store()
    fill_until(store, 2 * SEGMENT + 100)
    assert wait_for(lambda: store._core.preallocated_offsets() == [3 * SEGMENT])
    assert (commitlog_dir(store_path) / segment_name(3 * SEGMENT)).exists()
    expected = data_segments(store)
    assert expected == [segment_name(k * SEGMENT) for k in range(3)]
    store.close()
    assert store._core.preallocated_offsets() == []
    assert sorted(p.name for p in commitlog_dir(store_path).iterdir()) == expected
    # The last file holds data; no empty segment follows it.
    last = commitlog_dir(store_path) / expected[-1]
    records, _, end = rmqwire.scan_segment(last.read_bytes())
    assert records
    assert end > 0
    # Reopening and closing without puts leaves the same files.
    open_store().close()
    assert sorted(p.name for p in commitlog_dir(store_path).iterdir()) == expected


def test_close_right_after_a_roll_leaves_no_empty_segment(open_store, store_path: Path) -> None:
    for _ in range(5):
        store = open_store()
        fill_until(store, store.get_max_phy_offset() // SEGMENT * SEGMENT + SEGMENT)
        store.close()  # the service may be creating the next segment right now
        names = sorted(p.name for p in commitlog_dir(store_path).iterdir())
        for p in commitlog_dir(store_path).iterdir():
            assert p.stat().st_size == SEGMENT
        with open_store() as again:
            assert names == data_segments(again)


def test_warm_mapped_files_across_many_rolls(open_store, store_path: Path) -> None:
    store = open_store(warm_mapped_file_enable=True)
    results = [store.put_message(Message("Warm", i.to_bytes(4, "big") * 750)) for i in range(400)]
    assert all(r.ok for r in results)
    assert store.get_max_phy_offset() > 15 * SEGMENT
    for i, r in list(enumerate(results))[::37]:
        m = store.look_message_by_offset(r.wrote_offset)
        assert m.body == i.to_bytes(4, "big") * 750
        assert m.queue_offset == i
    batch = store.put_messages("Warm", 1, [bytes(3000)] * 15)
    assert batch.ok
    expected = data_segments(store)
    assert len(expected) > 15
    store.close()
    assert sorted(p.name for p in commitlog_dir(store_path).iterdir()) == expected
    with open_store() as again:
        assert again.get_max_phy_offset() == batch.wrote_offset + batch.wrote_bytes
        for i, r in list(enumerate(results))[::37]:
            assert again.look_message_by_offset(r.wrote_offset).queue_offset == i
        assert again.put_message(Message("Warm", b"next")).queue_offset == 400
        assert again.put_messages("Warm", 1, [b"next"]).queue_offset == 15


def test_service_threads_stop_at_close(open_store) -> None:
    store = open_store()
    service_names = {s.name for s in store._services}
    assert "AllocateMappedFileService" in service_names
    assert all(s.alive for s in store._services)
    fill_until(store, SEGMENT)
    store.close()
    assert not any(s.alive for s in store._services)
    assert all(s.failure is None for s in store._services)
    alive = [t for t in threading.enumerate() if t.name in service_names]
    assert not any(t.is_alive() for t in alive)


# -- errors -------------------------------------------------------------------------------------


def _error_classes() -> list[type[BaseException]]:
    return [
        obj
        for _, obj in inspect.getmembers(rmqstore.errors, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == "rmqstore.errors"
    ]


def test_every_error_derives_from_rmqstore_error() -> None:
    classes = _error_classes()
    assert {c.__name__ for c in classes} == set(rmqstore.errors.__all__)
    for cls in classes:
        assert issubclass(cls, rmqstore.RmqStoreError), cls
        assert issubclass(cls, Exception), cls
        assert getattr(rmqstore, cls.__name__) is cls


def test_errors_also_derive_from_the_fitting_builtin() -> None:
    for cls in (rmqstore.StoreIOError, rmqstore.StoreLockedError):
        assert issubclass(cls, OSError)
    for cls in (
        rmqstore.StoreConfigError,
        rmqstore.StoreCorruptedError,
        rmqstore.InvalidArgumentError,
        rmqstore.StoreClosedError,
    ):
        assert issubclass(cls, ValueError)
        assert not issubclass(cls, OSError)
    assert issubclass(rmqstore.StoreReadOnlyError, PermissionError)
    # A misspelt setting is also what Python raises for an unknown keyword.
    assert issubclass(rmqstore.UnknownSettingError, TypeError)
    assert issubclass(rmqstore.UnknownSettingError, rmqstore.StoreConfigError)


def test_errors_raised_by_the_extension_are_the_package_classes(store_path: Path) -> None:
    store = MessageStore(store_path, mapped_file_size_commit_log=SEGMENT)
    try:
        store.put_message(Message("T", b"x" * 200))
        with pytest.raises(rmqstore.RmqStoreError) as info:
            store.look_message_by_offset(3)
        assert type(info.value) is rmqstore.errors.InvalidArgumentError
    finally:
        store.close()
