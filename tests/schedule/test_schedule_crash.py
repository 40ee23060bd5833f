"""Issue 17: delay-level delivery survives SIGKILL at any moment. A child process puts delayed
messages while its schedule service delivers what earlier rounds left due; the parent kills it
at a random moment, many times over. Afterwards every acknowledged delayed message is in its
real queue, and at most the deliveries in flight at a kill (one per level) are there twice."""

from __future__ import annotations

import collections
import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rmqstore import MessageStore
from schedule.schedhelp import read_queue, wait_delivered

LEVELS = "1s 2s"
QUEUES = 3

CHILD = textwrap.dedent(
    """
    import sys
    import time
    import rmqstore

    path, start, interval = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = rmqstore.MessageStore(
        path,
        message_delay_level="1s 2s",
        flush_delay_offset_interval=interval,
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=20 * 500,
    )
    print("READY", flush=True)
    i = start
    while True:
        msg = rmqstore.Message(
            "Due", f"body-{i}".encode(), keys=[f"d-{i}"], queue_id=i % 3, delay_level=1 + i % 2
        )
        r = store.put_message(msg)
        if r.status is not rmqstore.PutMessageStatus.PUT_OK:
            print("BAD", r.status.name, flush=True)
            break
        print(f"ACK d-{i}", flush=True)
        i += 1
        time.sleep(0.001)  # light load: a round puts up to about a thousand
    """
)


def _run_and_kill(path: Path, start: int, rng: random.Random) -> list[str]:
    """Starts a child, lets it run for a random time (deliveries of earlier rounds go out at
    its start; its own puts fall due after 1-2 s), kills it with SIGKILL; returns the keys it
    acknowledged."""
    interval = rng.choice([50, 200, 10_000])
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(start), str(interval)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    acked: list[str] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "READY", (line, proc.stderr.read() if proc.stderr else "")
        target = rng.randint(0, 300)
        deadline = time.monotonic() + rng.uniform(0.0, 2.2)
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.02)
            if not ready:
                continue
            line = proc.stdout.readline()
            if not line:
                break
            parts = line.split()
            assert parts[0] == "ACK", line
            acked.append(parts[1])
            if len(acked) >= target:
                # Stop putting (the child blocks on a full pipe) and let deliveries run on.
                time.sleep(rng.uniform(0, max(0.0, deadline - time.monotonic())))
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            acked += [
                ln.split()[1] for ln in proc.stdout.read().splitlines() if ln.startswith("ACK")
            ]
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return acked


def _rounds(tmp_path: Path, rounds: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    path = tmp_path / "store"
    acked: list[str] = []
    start = 0
    for _ in range(rounds):
        got = _run_and_kill(path, start, rng)
        acked += got
        start += len(got) + 1000  # a put in flight at the kill is never acknowledged
    with MessageStore(
        path,
        message_delay_level=LEVELS,
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=20 * 500,
    ) as store:
        wait_delivered(store, 10)
        assert store.wait_dispatched()
        counts: collections.Counter[str] = collections.Counter()
        for q in range(QUEUES):
            for m in read_queue(store, "Due", q):
                (key,) = m.keys
                assert m.body == f"body-{key[2:]}".encode()
                assert m.queue_id == int(key[2:]) % QUEUES
                counts[key] += 1
        scheduled = sum(store.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", q) for q in range(2))
    missing = [k for k in acked if counts[k] == 0]
    assert not missing, (
        f"{len(missing)} acknowledged delayed messages never delivered: {missing[:5]}"
    )
    # Delivered keys that were never acknowledged: puts in flight at a kill (stored, not yet
    # acknowledged); at most one per round.
    unacked = set(counts) - set(acked)
    assert len(unacked) <= rounds, sorted(unacked)[:10]
    duplicates = {k: n for k, n in counts.items() if n > 1}
    # Every scheduled record was delivered at least once; twice only for a delivery in flight
    # at a kill, at most one per level per kill.
    assert len(counts) == scheduled
    assert sum(n - 1 for n in duplicates.values()) <= 2 * rounds, duplicates
    print(
        f"schedule SIGKILL: {rounds} kills, {len(acked)} acknowledged, {scheduled} scheduled, "
        f"{sum(counts.values())} delivered, {len(duplicates)} duplicated"
    )
    return {"acked": len(acked), "duplicates": len(duplicates), "scheduled": scheduled}


def test_sigkill_during_delivery(tmp_path: Path) -> None:
    _rounds(tmp_path, rounds=20, seed=17)


@pytest.mark.slow
def test_sigkill_during_delivery_many_rounds(tmp_path: Path) -> None:
    _rounds(tmp_path / "a", rounds=100, seed=171)
    _rounds(tmp_path / "b", rounds=100, seed=172)
