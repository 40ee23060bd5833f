"""Issue 18 figures, transactional messages: prepare + commit from one Python thread
(ASYNC_FLUSH) and from 32 threads (SYNC_FLUSH, forces shared by group commit), and the
check-back scan of pending halves, each next to ``put_message`` of the same messages in the
same run."""

from __future__ import annotations

import mmap
import shutil
import threading
import time
from pathlib import Path

import pytest
import rmqstore
from rmqstore import Message, PutMessageStatus
from rmqstore._transaction import TransactionCheckService

BODY = bytes(range(128))
STORE = {"mapped_file_size_commit_log": 256 * 1024 * 1024}
#: RocketMQ's default fileReservedTime (72 h), what the check uses until it is a setting.
FILE_RESERVED_MS = 72 * 3600 * 1000


def _drop(store: rmqstore.MessageStore) -> None:
    """Closes ``store`` and removes its files: the machine's disk is shared, and a store
    above the disk warning level refuses puts."""
    path = store.store_path
    store.close()
    shutil.rmtree(path)


def _messages(n: int, topic: str = "Real") -> list[Message]:
    """``n`` messages of 128 B over 16 queues, each with a key (the user's business id)."""
    return [Message(topic, BODY, keys=[f"k{i}"], queue_id=i % 16) for i in range(n)]


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def _first_segment(store: rmqstore.MessageStore) -> None:
    """Creates the store's first commitlog segment before the clock starts (with
    ``warm_mapped_file_enable`` that means pre-faulting all of it, on the putting thread:
    a one-off cost of opening a store, not of each message); later segments are made ahead
    by the allocation service."""
    assert store.put_message(Message("Warmup", b"w")).status is PutMessageStatus.PUT_OK


def _put_rate(
    store: rmqstore.MessageStore, msgs: list[Message], cpu: list[float] | None = None
) -> float:
    """Puts per second; ``cpu`` gets the putting thread's CPU time a put (µs: what the rate
    would be on a machine not shared with other processes)."""
    _first_segment(store)
    t0, c0 = time.perf_counter(), time.thread_time()
    for m in msgs:
        assert store.put_message(m).status is PutMessageStatus.PUT_OK
    if cpu is not None:
        cpu.append((time.thread_time() - c0) / len(msgs) * 1e6)
    return len(msgs) / (time.perf_counter() - t0)


def _tx_rate(
    store: rmqstore.MessageStore, msgs: list[Message], cpu: list[float] | None = None
) -> float:
    """Prepare then commit (by the half's offset) each message through the Python API;
    transactions per second (``cpu``: the thread's CPU time a transaction, µs)."""
    prepare, end = store.prepare_message, store.end_transaction
    _first_segment(store)
    t0, c0 = time.perf_counter(), time.thread_time()
    for m in msgs:
        r = prepare(m)
        assert r.status is PutMessageStatus.PUT_OK
        assert end(r.wrote_offset, True).ended
    if cpu is not None:
        cpu.append((time.thread_time() - c0) / len(msgs) * 1e6)
    return len(msgs) / (time.perf_counter() - t0)


def _tx_rate_core(store: rmqstore.MessageStore, msgs: list[Message]) -> float:
    """The same through ``store._core``'s methods: what ``MessageStore.prepare_message`` and
    ``end_transaction`` are bound to when the store opens, so both rates should agree (a gap
    is a Python layer in between)."""
    prepare, end = store._core.prepare_message, store._core.end_transaction_result
    _first_segment(store)
    t0 = time.perf_counter()
    for m in msgs:
        r = prepare(m)
        assert r.status is PutMessageStatus.PUT_OK
        assert end(r.wrote_offset, True).ended
    return len(msgs) / (time.perf_counter() - t0)


#: The page size the fresh-page probe touches.
PAGE = 4096


def _fresh_page_us(folder: Path, size: int) -> float:
    """Microseconds to fault in one page of a new file's shared mapping, touched in order by
    one thread (as an append touches a segment's pages): what the machine makes a store pay
    for each page of memory it had not used yet. On this VM that is the host's price for
    memory the guest returned to it (free page reporting): 15-25 µs a page (150-260 MB/s),
    against 2-5 µs for a page the guest freed a moment ago. The file is deleted after, so its
    pages are free again, and for a few seconds cheap."""
    path = folder / "fresh-page-probe"
    with open(path, "w+b") as f:
        f.truncate(size)
        with mmap.mmap(f.fileno(), size) as m:
            t0 = time.perf_counter()
            for off in range(0, size, PAGE):
                m[off] = 1
            took = time.perf_counter() - t0
    path.unlink()
    return took / (size // PAGE) * 1e6


def _check_committed(store: rmqstore.MessageStore, n: int) -> None:
    stats = store.transaction_stats()
    assert stats["committed"] == n, stats
    assert store.wait_dispatched(60)
    assert store.get_max_offset_in_queue("Real", 0) == (n + 15) // 16


@pytest.mark.parametrize("warm", [False, True], ids=["default", "warm"])
def test_prepare_commit_throughput(benchmark, open_store, scaled, warm: bool) -> None:
    """One Python thread, ASYNC_FLUSH: prepare + commit of ``n`` messages of 128 B, through
    the Python API and through the binding alone, against ``put_message`` of the same messages
    (built beforehand), each in a fresh store; the phases of a round run back to back, so each
    round's ratio pairs them. ``warm``: every store with ``warm_mapped_file_enable`` (see
    ``test_check_scan``)."""
    store_config = {**STORE, "warm_mapped_file_enable": warm}
    n = scaled(300_000, 30_000)
    rounds = scaled(5, 3)
    msgs = _messages(n)
    tx_rates: list[float] = []
    core_rates: list[float] = []
    put_rates: list[float] = []
    tx_cpu: list[float] = []
    put_cpu: list[float] = []

    def one_round() -> None:
        plain = open_store(**store_config)
        put_rates.append(_put_rate(plain, msgs, put_cpu))
        _drop(plain)
        store = open_store(**store_config)
        tx_rates.append(_tx_rate(store, msgs, tx_cpu))
        _check_committed(store, n)
        _drop(store)
        store = open_store(**store_config)
        core_rates.append(_tx_rate_core(store, msgs))
        _check_committed(store, n)
        _drop(store)

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    ratios = sorted(t / p for t, p in zip(tx_rates, put_rates, strict=True))
    core_ratios = sorted(t / p for t, p in zip(core_rates, put_rates, strict=True))
    benchmark.extra_info.update(
        metric="tx_prepare_commit_warm" if warm else "tx_prepare_commit",
        transactions=n,
        tx_rate=_median(tx_rates),
        tx_rates=sorted(tx_rates),
        core_rate=_median(core_rates),
        core_rates=sorted(core_rates),
        put_rate=_median(put_rates),
        ratio=_median(ratios),
        ratios=ratios,
        core_ratio=_median(core_ratios),
        tx_cpu_us=_median(tx_cpu),
        tx_cpu_us_all=sorted(tx_cpu),
        put_cpu_us=_median(put_cpu),
    )


def test_prepare_commit_sync_flush(benchmark, open_store, scaled) -> None:
    """SYNC_FLUSH, 32 threads each preparing and committing; then the same threads putting the
    same number of messages with ``put_message``, rounds alternating. Forces per transaction
    from the group commit service's counter: each transaction waits for two forces (its half
    and its commit), shared with the other threads' waits."""
    threads = 32
    per_thread = scaled(200, 60)
    rounds = scaled(5, 3)
    store = open_store(flush_disk_type="SYNC_FLUSH", mapped_file_size_commit_log=64 << 20)
    msgs = [_messages(per_thread, f"Sync{t}") for t in range(threads)]
    assert store.put_message(Message("Warm", BODY)).status is PutMessageStatus.PUT_OK
    gate = threading.Barrier(threads + 1)
    done = threading.Barrier(threads + 1)
    mode = ["tx"]
    errors: list[BaseException] = []

    def worker(mine: list[Message]) -> None:
        try:
            for _ in range(2 * rounds):
                gate.wait()
                if mode[0] == "tx":
                    for m in mine:
                        r = store.prepare_message(m)
                        assert r.status is PutMessageStatus.PUT_OK
                        assert store.end_transaction(r.wrote_offset, True).ended
                else:
                    for m in mine:
                        assert store.put_message(m).status is PutMessageStatus.PUT_OK
                done.wait()
        except BaseException as e:  # a failed assertion must not hang the barriers
            errors.append(e)
            gate.abort()
            done.abort()

    tx_rates: list[float] = []
    put_rates: list[float] = []
    tx_forces: list[int] = []
    put_forces: list[int] = []

    def phase(which: str) -> tuple[float, int]:
        mode[0] = which
        before = store._core.group_commit_forces()
        gate.wait()
        t0 = time.perf_counter()
        done.wait()
        elapsed = time.perf_counter() - t0
        return threads * per_thread / elapsed, store._core.group_commit_forces() - before

    def run() -> None:
        ts = [threading.Thread(target=worker, args=(msgs[t],)) for t in range(threads)]
        for t in ts:
            t.start()
        try:
            for _ in range(rounds):
                rate, forces = phase("tx")
                tx_rates.append(rate)
                tx_forces.append(forces)
                rate, forces = phase("put")
                put_rates.append(rate)
                put_forces.append(forces)
        finally:
            for t in ts:
                t.join()
        assert not errors, errors

    benchmark.pedantic(run, rounds=1, iterations=1)
    total = rounds * threads * per_thread
    ratios = sorted(t / p for t, p in zip(tx_rates, put_rates, strict=True))
    benchmark.extra_info.update(
        metric="tx_sync_flush",
        transactions=total,
        threads=threads,
        tx_rate=_median(tx_rates),
        put_rate=_median(put_rates),
        ratio=_median(ratios),
        ratios=ratios,
        # Each transaction is two synchronous puts (half, commit); ops are written in batches.
        forces_per_tx=sum(tx_forces) / total,
        puts_per_force=2 * total / max(1, sum(tx_forces)),
        forces_per_put=sum(put_forces) / total,
    )


@pytest.mark.parametrize(
    ("warm", "recycled"),
    [(False, False), (True, False), (False, True)],
    ids=["default", "warm", "recycled"],
)
def test_check_scan(benchmark, open_store, scaled, warm: bool, recycled: bool) -> None:
    """``n`` pending halves, no op message: the core's check round walks them all (each
    examined, found unresolved, copied to the half queue for its check-back) in the check
    service's steps, with the checker left out, timed until the walk reports done; the
    baseline is ``put_message`` of the same messages into a fresh store of the same run.

    ``warm``: both stores with ``warm_mapped_file_enable`` (RocketMQ's
    ``warmMapedFileEnable``): the allocation service pre-faults each new segment, so the
    appending thread does not pay the kernel's zeroing of fresh pages (about 40% of a copy's
    time without it).

    Every copy is a new record, so the scan writes about 400 bytes of new pages a half
    (commitlog, consume queue, index): at 1 M halves/s, 100,000 pages a second. Each round
    also measures what a fresh page costs on the machine (:func:`_fresh_page_us`): after the
    scan by default (memory as the scan found it), and just before it with ``recycled``, whose
    probe file, deleted, leaves as many pages just freed, as a broker's machine has them (a
    full page cache whose old pages are reclaimed for new ones). ``page_cpu_us`` is what the
    pages of one half cost at that price."""
    store_config = {**STORE, "warm_mapped_file_enable": warm}
    n = scaled(1_000_000, 100_000)
    rounds = scaled(3, 2)
    msgs = _messages(n)
    scan_rates: list[float] = []
    put_rates: list[float] = []
    step_counts: list[int] = []
    page_us: list[float] = []
    half_bytes: list[float] = []

    def one_round() -> None:
        plain = open_store(**store_config)
        put_rates.append(_put_rate(plain, msgs))
        _drop(plain)
        store = open_store(**store_config)
        # The check service must not take part: the round is driven by hand.
        store._pause_service("TransactionCheckService")
        for m in msgs:
            assert store.prepare_message(m).status is PutMessageStatus.PUT_OK
        assert store.wait_dispatched(120)
        time.sleep(0.01)  # every half older than the 1 ms timeout below
        folder = Path(store.store_path).parent
        before = store.get_max_phy_offset()
        # A copy is its half plus one property: a little more than the halves took.
        probe = -(-before * 5 // 4 // PAGE) * PAGE
        if recycled:
            page_us.append(_fresh_page_us(folder, probe))
        core = store._core
        per_step = TransactionCheckService.max_to_check  # the service's own step
        now_ms = time.time_ns() // 1_000_000
        examined = copies = steps = 0
        t0 = time.perf_counter()
        while True:
            step = core.transaction_check(now_ms, 1, 15, FILE_RESERVED_MS, per_step)
            examined += step["examined"]
            copies += len(step["to_check"])
            steps += 1
            if step["done"]:
                break
        elapsed = time.perf_counter() - t0
        # A later step looks at the first copy of an earlier one too (stored after the round
        # began: the walk stops there).
        assert n <= examined <= n + steps, (examined, n, steps)
        assert copies == n, (copies, n)
        scan_rates.append(n / elapsed)
        step_counts.append(steps)
        # Commitlog bytes of a copy, and its consume queue entry and two index entries.
        half_bytes.append((store.get_max_phy_offset() - before) / n + 20 + 2 * 20)
        if not recycled:
            page_us.append(_fresh_page_us(folder, probe))
        _drop(store)

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    ratios = sorted(s / p for s, p in zip(scan_rates, put_rates, strict=True))
    pages_per_half = _median(half_bytes) / PAGE
    benchmark.extra_info.update(
        metric="tx_check_scan_warm"
        if warm
        else ("tx_check_scan_recycled" if recycled else "tx_check_scan"),
        halves=n,
        fresh_page_us=_median(page_us),
        fresh_page_us_all=sorted(page_us),
        half_bytes=_median(half_bytes),
        page_cpu_us=pages_per_half * _median(page_us),
        steps=step_counts[0],
        scan_rate=_median(scan_rates),
        scan_rates=sorted(scan_rates),
        put_rate=_median(put_rates),
        ratio=_median(ratios),
        ratios=ratios,
    )
