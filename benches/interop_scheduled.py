"""Issue 17 side by side: scheduled messages in Apache RocketMQ's own code and in rmqstore,
same machine, same run, same message shape and segment sizes.

    .venv/bin/python benches/interop_scheduled.py [--n 1000000] [--rounds 3] [--quick]
        [--only deliver|timer]

deliver: a backlog of ``n`` due delay-level-1 messages (level table ``"1s"``, 100-byte bodies,
tag ``TagA``, real topic ``BenchTopic`` queues 0-3) delivered into their real queues.
RocketMQ side: the store harness's ``bench-deliver`` (``tests/interop/java``, profile rmq4):
4.9.8's own ``ScheduleMessageService`` (in its store jar) on a store whose backlog was written
with the service stopped and which is reopened once every message is due; timed from the first
delivery seen (the service's fixed 1 s first delay is not counted) to the last one dispatched.
rmqstore side: the same backlog put with ``delay_level=1`` while the store's
``ScheduleMessageService`` is paused, the store closed and reopened once everything is due;
timed (``schedule_stats`` polled every millisecond) until nothing is pending and everything is
dispatched. The rmqstore rate counts from the reopen call (its open included;
``rate_from_first_seen`` is the other reading), RocketMQ's from its first delivery seen: the
ratio is on the cautious side for rmqstore.

timer: ``n`` timer messages with random delays (60 s to 24 h, 1000 ms precision) enqueued
from ``rmq_sys_wheel_timer`` into the timer wheel and log. RocketMQ side: the harness's
``bench-timer-enqueue`` (5.5.1's ``TimerMessageStore``, default profile): the messages put as
HookUtils leaves them, the timer store loaded and started, timed until its commit queue offset
reaches ``n``. rmqstore side: the messages put with ``delay_ms=`` while the timer services are
paused, the store reopened, timed from the reopen call (open included; RocketMQ's from the
timer store's start, its load not counted) until its enqueue offset reaches ``n``.

The rounds alternate the two sides; the figures are the median rate of each and their ratio.
``--quick`` (CI): 20,000 messages, one round.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rmqstore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "interop"))

from interop_harness import JavaHarness, Sizes, build_harness

BODY = b"d" * 100
#: Both sides: 256 MiB commitlog segments, RocketMQ's 300,000-unit consume queue files, small
#: index files (the messages have no keys).
SIZES = Sizes(commitlog=256 * 1024 * 1024, cq=300_000 * 20, hash_slots=500_000, index_num=2_000_000)


def java_harness(home: Path, profile: str) -> JavaHarness:
    java = shutil.which("java")
    if java is None or shutil.which("mvn") is None:
        raise SystemExit("java and mvn are needed for the RocketMQ side")
    return JavaHarness(java=java, classpath=build_harness(profile), home=home)


def java_line(out: str, kind: str) -> dict[str, Any]:
    for raw in out.splitlines():
        line = json.loads(raw)
        if line["kind"] == kind:
            return line
    raise AssertionError(f"no {kind} line in {out[-2000:]}")


# -- deliver --------------------------------------------------------------------------------


def java_deliver(harness: JavaHarness, path: Path, n: int) -> dict[str, float]:
    out = harness.run(
        SIZES, "--delay-levels", "1s", "bench-deliver", str(path), str(n), timeout=1800
    )
    line = java_line(out, "benchDeliver")
    assert line["inRealQueues"] == n, line
    return {"rate": line["messagesPerSecond"], "open_to_done_s": line["secondsFromStart"]}


def _pending(store: rmqstore.MessageStore) -> int:
    return sum(s.pending for s in store.schedule_stats())


def rmq_deliver(path: Path, n: int) -> dict[str, float]:
    settings = {**SIZES.rmq(), "message_delay_level": "1s"}
    with rmqstore.MessageStore(path, **settings) as store:
        store._pause_service("ScheduleMessageService")
        for i in range(n):
            r = store.put_message(
                rmqstore.Message(
                    "BenchTopic",
                    BODY,
                    tags="TagA",
                    queue_id=i & 3,
                    born_timestamp=int(time.time() * 1000),
                    born_host="10.0.0.1:4000",
                    delay_level=1,
                )
            )
            if not r.ok:
                raise RuntimeError(f"put {i}: {r.status}")
        last_put = time.time()
        assert store.wait_dispatched(600)
    time.sleep(max(0.0, last_put + 1.05 - time.time()))  # every message is due
    t0 = time.perf_counter()
    with rmqstore.MessageStore(path, **settings) as store:
        first = 0.0
        while True:
            left = _pending(store)
            if not first and left < n:
                first = time.perf_counter()
            if left == 0:
                break
            time.sleep(0.001)
        assert store.wait_dispatched(600)
        t1 = time.perf_counter()
        real = sum(store.get_max_offset_in_queue("BenchTopic", q) for q in range(4))
        assert real == n, real
    # From the reopen (its open included): a round of up to 2048 deliveries can pass before
    # the first poll sees progress, so the first-seen time would flatter rmqstore.
    return {
        "rate": n / (t1 - t0),
        "rate_from_first_seen": n / (t1 - first),
        "open_to_done_s": t1 - t0,
    }


# -- timer ----------------------------------------------------------------------------------


def java_timer(harness: JavaHarness, path: Path, n: int) -> dict[str, float]:
    out = harness.run(SIZES, "bench-timer-enqueue", str(path), str(n), timeout=1800)
    line = java_line(out, "benchTimerEnqueue")
    return {"rate": line["messagesPerSecond"]}


def rmq_timer(path: Path, n: int) -> dict[str, float]:
    settings = {**SIZES.rmq(), "timer_precision_ms": 1000}
    rng = random.Random(17)
    with rmqstore.MessageStore(path, **settings) as store:
        store._pause_service("TimerEnqueueService")
        store._pause_service("TimerDequeueService")
        for i in range(n):
            r = store.put_message(
                rmqstore.Message(
                    "BenchTopic",
                    BODY,
                    tags="TagA",
                    queue_id=i & 3,
                    born_timestamp=int(time.time() * 1000),
                    born_host="10.0.0.1:4000",
                    delay_ms=60_000 + int(rng.random() * 86_340_000),
                )
            )
            if not r.ok:
                raise RuntimeError(f"put {i}: {r.status}")
        assert store.wait_dispatched(600)
    t0 = time.perf_counter()
    with rmqstore.MessageStore(path, **settings) as store:
        while store.timer_stats()["enqueue_offset"] < n:
            time.sleep(0.001)
        t1 = time.perf_counter()
    return {"rate": n / (t1 - t0)}


# -- main -----------------------------------------------------------------------------------


def side_by_side(
    name: str,
    rounds: int,
    root: Path,
    java: Callable[[Path], dict[str, float]],
    ours: Callable[[Path], dict[str, float]],
) -> dict[str, Any]:
    js: list[dict[str, float]] = []
    rs: list[dict[str, float]] = []
    for r in range(rounds):
        for side in ("rocketmq", "rmqstore"):
            path = root / f"{name}-{side}-{r}"
            (js if side == "rocketmq" else rs).append(
                java(path) if side == "rocketmq" else ours(path)
            )
            shutil.rmtree(path, ignore_errors=True)
    j = statistics.median(x["rate"] for x in js)
    o = statistics.median(x["rate"] for x in rs)
    return {
        "bench": name,
        "rocketmq_msgs_per_s": round(j),
        "rmqstore_msgs_per_s": round(o),
        "ratio": round(o / j, 2),
        "rocketmq_rounds": js,
        "rmqstore_rounds": rs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="20,000 messages, one round (CI)")
    ap.add_argument("--only", choices=["deliver", "timer"], default=None)
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    args = ap.parse_args()
    n, rounds = (20_000, 1) if args.quick else (args.n, args.rounds)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="sched-bench-") as tmp:
        root = Path(tmp)
        results = []
        if args.only in (None, "deliver"):
            h4 = java_harness(root / "jvm-home-4", "rmq4")
            res = side_by_side(
                "deliver",
                rounds,
                root,
                lambda p: java_deliver(h4, p, n),
                lambda p: rmq_deliver(p, n),
            )
            results.append({**res, "n": n, "rocketmq": "4.9.8 ScheduleMessageService"})
        if args.only in (None, "timer"):
            h5 = java_harness(root / "jvm-home-5", "rmq5")
            res = side_by_side(
                "timer_enqueue",
                rounds,
                root,
                lambda p: java_timer(h5, p, n),
                lambda p: rmq_timer(p, n),
            )
            results.append({**res, "n": n, "rocketmq": "5.5.1 TimerMessageStore"})
        for res in results:
            j, o = res["rocketmq_msgs_per_s"] / 1e3, res["rmqstore_msgs_per_s"] / 1e3
            print(
                f"{res['bench']:>14} n={n}: RocketMQ {j:8.1f} k msg/s, "
                f"rmqstore {o:8.1f} k msg/s, ratio {res['ratio']:5.2f}x"
            )
        print(json.dumps(results))


if __name__ == "__main__":
    main()
