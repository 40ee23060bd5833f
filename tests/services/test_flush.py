"""Flush services: group commit (SYNC_FLUSH), periodic flush (ASYNC_FLUSH), consume queues."""

from __future__ import annotations

import threading
import time

from rmqstore import Message, PutMessageStatus
from rmqwire import other_thread_ran_inside


def _wait(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def test_a_sync_put_returns_forced(open_small) -> None:
    store = open_small(flush_disk_type="SYNC_FLUSH")
    for i in range(20):
        r = store.put_message(Message("S", b"x%d" % i))
        assert r.status is PutMessageStatus.PUT_OK
        assert store.get_flushed_where() >= r.wrote_offset + r.wrote_bytes
    r = store.put_messages("S", 1, [b"a", b"b", b"c"])
    assert r.status is PutMessageStatus.PUT_OK
    assert store.get_flushed_where() >= r.wrote_offset + r.wrote_bytes


def test_concurrent_sync_puts_share_forces(open_small) -> None:
    store = open_small(flush_disk_type="SYNC_FLUSH")
    errors: list[BaseException] = []

    def produce(t: int) -> None:
        try:
            for i in range(40):
                r = store.put_message(Message("G", b"%d-%d" % (t, i), queue_id=t % 4))
                assert r.status is PutMessageStatus.PUT_OK, r.status
                assert store.get_flushed_where() >= r.wrote_offset + r.wrote_bytes
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    forces = store.service_stats()["GroupCommitService"]["forces"]
    assert 1 <= forces < 640, f"640 puts took {forces} forces"


def test_sync_put_times_out_without_a_force_and_is_still_stored(open_small) -> None:
    store = open_small(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=50)
    store._pause_service("GroupCommitService")
    start = time.perf_counter()
    r = store.put_message(Message("S", b"late", keys="late-key"))
    assert time.perf_counter() - start >= 0.05
    assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert r.ok  # RocketMQ's isOk: the append succeeded
    assert store.look_message_by_offset(r.wrote_offset).body == b"late"
    assert store.flush() >= r.wrote_offset + r.wrote_bytes
    assert store.wait_dispatched()
    assert [m.body for m in store.query_message("S", "late-key")] == [b"late"]


def test_wait_false_does_not_wait(open_small) -> None:
    store = open_small(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=2000)
    store._pause_service("GroupCommitService")
    start = time.perf_counter()
    r = store.put_message(Message("S", b"now", properties={"WAIT": "false"}))
    assert time.perf_counter() - start < 1.0
    assert r.status is PutMessageStatus.PUT_OK
    assert store.get_flushed_where() < r.wrote_offset + r.wrote_bytes


def test_a_waiting_sync_put_does_not_hold_the_gil(open_small) -> None:
    store = open_small(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=400)
    store._pause_service("GroupCommitService")
    r, ran = other_thread_ran_inside(lambda: store.put_message(Message("S", b"wait")))
    assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert ran > 0, "another Python thread never ran during the 400 ms wait"


def test_waiting_sync_puts_spin_only_briefly(open_small, tmp_path) -> None:
    # Producers waiting together spin for a moment before they park (PRODUCER_SPIN), and the
    # service spins while it gathers them (GATHER_SPIN): both are bounded, so a long wait and
    # an idle store after a burst cost next to no CPU (unbounded, 8 spinners would keep both
    # CPUs busy for the whole wait).
    paused = open_small(tmp_path / "paused", flush_disk_type="SYNC_FLUSH", sync_flush_timeout=600)
    running = open_small(tmp_path / "running", flush_disk_type="SYNC_FLUSH")
    statuses: list[PutMessageStatus] = []

    def burst(store) -> float:
        def put(i: int) -> None:
            statuses.append(store.put_message(Message("Spin", b"%d" % i)).status)

        threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - start

    paused._pause_service("GroupCommitService")
    cpu = time.process_time()
    waited = burst(paused)
    cpu = time.process_time() - cpu
    assert statuses == [PutMessageStatus.FLUSH_DISK_TIMEOUT] * 8
    assert waited >= 0.6
    assert cpu < 0.25 * waited, f"8 waiting puts used {cpu:.3f} s of CPU in {waited:.3f} s"

    statuses.clear()
    burst(running)
    assert statuses == [PutMessageStatus.PUT_OK] * 8
    cpu = time.process_time()
    time.sleep(1.0)
    cpu = time.process_time() - cpu
    assert cpu < 0.25, f"an idle SYNC_FLUSH store used {cpu:.3f} s of CPU in 1 s"


def test_async_flush_forces_periodically(open_small) -> None:
    store = open_small(
        flush_disk_type="ASYNC_FLUSH",
        flush_interval_commit_log=20,
        flush_commit_log_least_pages=0,
        flush_interval_consume_queue=20,
    )
    r = store.put_message(Message("A", b"x" * 5000))
    end = r.wrote_offset + r.wrote_bytes
    assert _wait(lambda: store.get_flushed_where() >= end)
    stats = store.service_stats()
    assert stats["FlushRealTimeService"]["rounds"] >= 1
    assert _wait(lambda: store.service_stats()["FlushConsumeQueueService"]["rounds"] >= 1)
    assert "GroupCommitService" not in stats


def test_async_flush_waits_for_least_pages(open_small) -> None:
    store = open_small(
        flush_disk_type="ASYNC_FLUSH",
        flush_interval_commit_log=20,
        flush_commit_log_least_pages=4,
        flush_commit_log_thorough_interval=60_000,
    )
    r = store.put_message(Message("A", b"small"))
    time.sleep(0.2)
    # Less than 4 pages written: not forced until a thorough round (or flush()).
    assert store.get_flushed_where() < r.wrote_offset + r.wrote_bytes
    assert store.flush() >= r.wrote_offset + r.wrote_bytes


def test_async_flush_forces_a_small_write_at_the_thorough_round(open_small) -> None:
    # The same small write, with thorough rounds every 1.5 s instead of 60 s: least-pages
    # rounds leave it, the first thorough round after it forces it.
    store = open_small(
        flush_disk_type="ASYNC_FLUSH",
        flush_interval_commit_log=20,
        flush_commit_log_least_pages=4,
        flush_commit_log_thorough_interval=1500,
    )
    r = store.put_message(Message("A", b"small"))
    end = r.wrote_offset + r.wrote_bytes
    time.sleep(0.3)
    assert store.get_flushed_where() < end
    assert _wait(lambda: store.get_flushed_where() >= end, timeout=5.0)
