"""rmqstore's Python API in issue 20's same-run peer table (``benches/peers/run.py``): one round
of every figure, printed as one JSON line of msg/s.

    .venv/bin/python benches/peers/rmqstore_py.py DIR N128 N1K WARMUP

For bodies of 128 B (N128 messages) and 1 KiB (N1K messages), in fresh stores under DIR
(removed after), each store opened as users open it (its services running: dispatch builds
the consume queue behind the puts, ASYNC_FLUSH's flush service), 1 GiB commitlog segments:

- ``put_<size>``: ``put_message`` of one prebuilt ``Message`` (topic, queue 0, body) in a loop;
- ``read_batch_<size>`` / ``read_batch8k_<size>``: ``read_batch`` of the whole queue at 65,536
  and 8,192 rows a call, each call's ``pyarrow.RecordBatch`` taken as a consumer takes it (its
  row count and its body column), body CRCs checked;
- ``read_bodies_<size>`` / ``read_bodies8k_<size>``: the same with ``columns=("queue_offset",
  "body")``, the columns a consumer of the bytes asks for (as Chronicle Queue's tailer reads
  them); the other columns are not built;
- ``get_message_<size>``: ``get_message`` of the whole queue, 32 messages a call, each message's
  body length summed;
- ``batch_put_<size>``: ``put_messages`` of batches of 1,000 bodies into another fresh store.

The reads start once dispatch has caught up (``wait_dispatched``, untimed). WARMUP messages first
go through the same phases in a store of their own, untimed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import rmqstore

TOPIC = "PeerTopic"
BATCH = 1000
SEGMENT = 1 << 30


def body(size: int) -> bytes:
    return bytes(ord("a") + i % 26 for i in range(size))


def fresh(folder: Path, name: str) -> Path:
    path = folder / f"{name}-{os.getpid()}"
    shutil.rmtree(path, ignore_errors=True)
    return path


def single_round(folder: Path, size: int, n: int) -> dict[str, float]:
    """Single puts and the three reads of ``n`` messages: msg/s by key."""
    path = fresh(folder, "rmqstore-py")
    out: dict[str, float] = {}
    try:
        with rmqstore.MessageStore(path, mapped_file_size_commit_log=SEGMENT) as store:
            msg = rmqstore.Message(TOPIC, body(size), queue_id=0)
            put = store.put_message
            t = time.perf_counter()
            for _ in range(n):
                put(msg)
            out[f"put_{size}"] = n / (time.perf_counter() - t)
            if not store.wait_dispatched(timeout=120):
                raise RuntimeError("dispatch did not catch up within 120 s")
            if store.get_max_offset_in_queue(TOPIC, 0) != n:
                raise RuntimeError("a put failed: the queue does not hold every message")
            bodies_only = ("queue_offset", "body")
            for key, rows_a_call, columns in (
                ("read_batch", 65_536, None),
                ("read_batch8k", 8_192, None),
                ("read_bodies", 65_536, bodies_only),
                ("read_bodies8k", 8_192, bodies_only),
            ):
                t = time.perf_counter()
                offset = rows = 0
                while offset < n:
                    batch = store.read_batch(TOPIC, 0, offset, rows_a_call, columns=columns)
                    bodies = batch.column("body")
                    if batch.num_rows == 0 or len(bodies) != batch.num_rows:
                        raise RuntimeError(f"read_batch stopped at {offset}")
                    rows += batch.num_rows
                    offset += batch.num_rows
                out[f"{key}_{size}"] = n / (time.perf_counter() - t)
                if rows != n:
                    raise RuntimeError(f"read_batch read {rows} rows of {n}")
            t = time.perf_counter()
            offset = got = nbytes = 0
            while offset < n:
                r = store.get_message("peer", TOPIC, 0, offset, 32)
                if not r.messages:
                    raise RuntimeError(f"get_message stopped at {offset}: {r.status}")
                for m in r.messages:
                    nbytes += len(m.body)
                got += len(r.messages)
                offset = r.next_begin_offset
            out[f"get_message_{size}"] = n / (time.perf_counter() - t)
            if (got, nbytes) != (n, n * size):
                raise RuntimeError(f"get_message read {got} messages / {nbytes} bytes")
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return out


def batch_round(folder: Path, size: int, n: int) -> float:
    """``put_messages`` of ``n`` bodies in batches of ``BATCH`` into a fresh store: msg/s."""
    path = fresh(folder, "rmqstore-py-batch")
    bodies = [body(size)] * BATCH
    try:
        with rmqstore.MessageStore(path, mapped_file_size_commit_log=SEGMENT) as store:
            t = time.perf_counter()
            done = 0
            while done < n:
                k = min(BATCH, n - done)
                r = store.put_messages(TOPIC, 0, bodies if k == BATCH else bodies[:k])
                if not r.ok:
                    raise RuntimeError(f"put_messages: {r.status}")
                done += k
            return n / (time.perf_counter() - t)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    if len(sys.argv) != 5:
        raise SystemExit("usage: rmqstore_py.py DIR N128 N1K WARMUP")
    folder = Path(sys.argv[1])
    n128, n1k, warmup = (int(a) for a in sys.argv[2:])
    rates: dict[str, object] = {"peer": "rmqstore-py"}
    # Warm-up: every phase of both sizes, untimed, before any timed phase (as the Java peers).
    for size in (128, 1024) if warmup > 0 else ():
        single_round(folder, size, warmup)
        batch_round(folder, size, warmup)
    for size, n in ((128, n128), (1024, n1k)):
        rates.update(single_round(folder, size, n))
        rates[f"batch_put_{size}"] = batch_round(folder, size, n)
    print(json.dumps(rates))


if __name__ == "__main__":
    main()
