"""The commitlog prefault service (``prefault_window_commit_log``): single ``put_message`` of
128 B and prepare + commit from one Python thread, ASYNC_FLUSH, with the service (the default
32 MiB window) and without it (window 0), alternating in the same run, each round in fresh
stores. Reports the wall-clock rate and the putting thread's CPU time a message; the service
moves the kernel's zeroing of new pages from that thread to its own, so the gain in wall-clock
time needs a free core (on a loaded machine only the CPU figure shows it)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

import rmqstore
from rmqstore import Message, PutMessageStatus

BODY = bytes(range(128))
SEGMENT = 1024 * 1024 * 1024
WINDOW = 32 * 1024 * 1024


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def _timed(store: rmqstore.MessageStore, run: Callable[[], None], n: int) -> tuple[float, float]:
    """Runs ``run`` once the store's first segment exists and its services had a moment to
    start; returns (operations a second, putting-thread CPU microseconds an operation)."""
    assert store.put_message(Message("Warmup", b"w")).status is PutMessageStatus.PUT_OK
    time.sleep(0.05)
    t0, c0 = time.perf_counter(), time.thread_time()
    run()
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    return n / wall, cpu / n * 1e6


def _puts(store: rmqstore.MessageStore, msgs: list[Message]) -> Callable[[], None]:
    put = store.put_message

    def run() -> None:
        for m in msgs:
            assert put(m).status is PutMessageStatus.PUT_OK

    return run


def _transactions(store: rmqstore.MessageStore, msgs: list[Message]) -> Callable[[], None]:
    prepare, end = store.prepare_message, store.end_transaction

    def run() -> None:
        for m in msgs:
            r = prepare(m)
            assert r.status is PutMessageStatus.PUT_OK
            assert end(r.wrote_offset, True).ended

    return run


def test_prefault_service(benchmark, open_store, scaled) -> None:
    n_put = scaled(1_000_000, 200_000)
    n_tx = scaled(300_000, 60_000)
    rounds = scaled(5, 3)
    puts = [Message("Real", BODY, queue_id=i % 16) for i in range(n_put)]
    txs = puts[:n_tx]
    rates: dict[tuple[str, int], list[float]] = {}
    cpus: dict[tuple[str, int], list[float]] = {}
    ratios: dict[str, list[float]] = {"put": [], "tx": []}

    def measure(kind: str, window: int) -> float:
        store = open_store(mapped_file_size_commit_log=SEGMENT, prefault_window_commit_log=window)
        if kind == "put":
            rate, cpu = _timed(store, _puts(store, puts), n_put)
        else:
            rate, cpu = _timed(store, _transactions(store, txs), n_tx)
        path = store.store_path
        store.close()
        shutil.rmtree(path)
        rates.setdefault((kind, window), []).append(rate)
        cpus.setdefault((kind, window), []).append(cpu)
        return rate

    def one_round() -> None:
        # Alternate which side goes first from round to round.
        first = len(ratios["put"]) % 2 == 0
        for kind in ("put", "tx"):
            order = (WINDOW, 0) if first else (0, WINDOW)
            got = {w: measure(kind, w) for w in order}
            ratios[kind].append(got[WINDOW] / got[0])

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    info: dict[str, object] = {"metric": "prefault", "puts": n_put, "transactions": n_tx}
    for kind in ("put", "tx"):
        info[f"{kind}_ratio"] = _median(ratios[kind])
        info[f"{kind}_ratios"] = sorted(ratios[kind])
        info[f"{kind}_rate"] = _median(rates[(kind, WINDOW)])
        info[f"{kind}_rate_off"] = _median(rates[(kind, 0)])
        info[f"{kind}_cpu_us"] = _median(cpus[(kind, WINDOW)])
        info[f"{kind}_cpu_us_off"] = _median(cpus[(kind, 0)])
    benchmark.extra_info.update(info)
