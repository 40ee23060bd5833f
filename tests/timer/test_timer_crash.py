"""Timer messages survive SIGKILL: a child puts timer messages while its timer services enqueue
and deliver them, the parent kills it at random moments, round after round; in the end every
acknowledged message is delivered to its real queue at or after its deliver time, and
duplicates are at most one per kill (a put in flight): what the timer did after its last
checkpoint (messages linked into the wheel, copies stored) is found again at open and not
done twice."""

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

STORE = {
    "mapped_file_size_commit_log": 1024 * 1024,
    "mapped_file_size_consume_queue": 20 * 2000,
    "max_hash_slot_num": 512,
    "max_index_num": 4000,
    "timer_precision_ms": 100,
    "timer_flush_interval_ms": 100,
    "mapped_file_size_timer_log": 52 * 200 + 16,
}

CHILD = textwrap.dedent(
    """
    import random, sys, time
    import rmqstore

    path, start, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = rmqstore.MessageStore(path, **STORE)
    rng = random.Random(seed)
    print("READY", flush=True)
    i = start
    while True:
        deliver = time.time_ns() // 1_000_000 + rng.randint(50, 1200)
        key = f"t{i}"
        msg = rmqstore.Message(
            "Crash", key.encode(), queue_id=i % 2,
            properties={"UNIQ_KEY": key, "TIMER_DELIVER_MS": str(deliver)},
        )
        r = store.put_message(msg)
        if r.status is not rmqstore.PutMessageStatus.PUT_OK:
            print("BAD", r.status.name, flush=True)
            break
        print(f"ACK {key} {deliver}", flush=True)
        i += 1
        time.sleep(0.002)
    """
).replace("**STORE", "**" + repr(STORE))


def _run_and_kill(path: Path, start: int, rng: random.Random) -> dict[str, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(start), str(rng.randint(0, 1 << 30))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    acked: dict[str, int] = {}

    def take(line: str) -> None:
        parts = line.split()
        if parts and parts[0] == "ACK":
            acked[parts[1]] = int(parts[2])

    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "READY", (line, proc.stderr.read() if proc.stderr else "")
        deadline = time.monotonic() + rng.uniform(0.2, 1.5)
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.02)
            if ready:
                line = proc.stdout.readline()
                if not line:
                    break
                assert not line.startswith("BAD"), line
                take(line)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            for line in proc.stdout.read().splitlines():
                take(line)
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return acked


def _rounds(path: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    acked: dict[str, int] = {}
    for _ in range(rounds):
        acked.update(_run_and_kill(path, len(acked), rng))
    assert len(acked) > 100
    with MessageStore(path, **STORE) as store:
        deadline = time.monotonic() + 15
        last_due = max(acked.values())
        seen: collections.Counter[str] = collections.Counter()
        arrived: dict[str, int] = {}
        enqueue_marks: dict[str, list[str]] = collections.defaultdict(list)
        while time.monotonic() < deadline:
            store.wait_dispatched()
            seen.clear()
            enqueue_marks.clear()
            for q in (0, 1):
                offset = 0
                while True:
                    r = store.get_message("g", "Crash", q, offset, 32)
                    if not r.messages:
                        break
                    for m in r.messages:
                        key = m.body.decode()
                        seen[key] += 1
                        enqueue_marks[key].append(m.properties.get("TIMER_ENQUEUE_MS", ""))
                        arrived.setdefault(key, m.store_timestamp)
                    offset = r.next_begin_offset
            if set(acked) <= set(seen) and time.time_ns() // 1_000_000 > last_due + 500:
                break
            time.sleep(0.05)
        recovered = store.timer_stats()["recovered"]
    missing = sorted(set(acked) - set(seen), key=lambda k: int(k[1:]))
    assert not missing, f"{len(missing)} acknowledged messages never delivered: {missing[:10]}"
    early = [k for k in acked if arrived[k] < acked[k]]
    assert not early, f"delivered before their time: {early[:10]}"
    duplicates = sum(n - 1 for n in seen.values())
    # A copy carries the TIMER_ENQUEUE_MS of the wheel unit it came from (Long.MAX_VALUE when
    # delivered at enqueue): two copies with the same value are one unit delivered twice
    # (re-dequeued), different values are a message enqueued twice (re-enqueued).
    redequeued = sum(n - len(set(enqueue_marks[k])) for k, n in seen.items())
    print(
        f"\n{len(acked)} timer messages over {rounds} kills, {duplicates} duplicates "
        f"({duplicates - redequeued} re-enqueued, {redequeued} re-dequeued); "
        f"{recovered} passed over at the last open"
    )
    # Each kill may leave one put in flight; everything else done after the last checkpoint
    # is found again at open (without that, 200-280 duplicates out of 1,900-2,700 messages).
    assert duplicates <= rounds, (duplicates, duplicates - redequeued, redequeued, len(acked))


def test_nothing_due_is_lost_nor_delivered_twice_across_sigkills(tmp_path: Path) -> None:
    _rounds(tmp_path / "store", rounds=6, seed=int(os.environ.get("RMQSTORE_CRASH_SEED", "17")))


@pytest.mark.slow
def test_sigkill_many_rounds(tmp_path: Path) -> None:
    _rounds(tmp_path / "a", rounds=40, seed=171)
    _rounds(tmp_path / "b", rounds=40, seed=172)
