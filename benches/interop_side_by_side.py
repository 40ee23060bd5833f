"""Issue 6 side by side: Apache RocketMQ's in-process ``putMessage`` against rmqstore's
``put_message``, same machine, same run, same message sizes, segment size and flush mode.

    .venv/bin/python benches/interop_side_by_side.py [--n 200000] [--size 128 1024] [--rounds 3]

Java side: the interop harness's ``bench`` command (``tests/interop/java``, built by the interop
tests' fixture or ``mvn -q package`` there): a loop of ``new MessageExtBrokerInner`` +
``DefaultMessageStore.putMessage`` in one thread, after a warm-up of the same count as here.
rmqstore side: a loop of ``Message(...)`` + ``MessageStore.put_message`` in one Python thread.
Both put to topic ``BenchTopic``, queues 0-3 in turn, tag ``TagA``, ASYNC_FLUSH (or SYNC_FLUSH
with ``--flush SYNC_FLUSH``), with ``--segment`` byte commitlog segments, into a fresh folder.
The rounds alternate the two sides; the figure is the median rate of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import rmqstore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "interop"))

from interop_harness import JavaHarness, Sizes, build_harness


def java_harness(home: Path) -> JavaHarness:
    """The interop tests' harness, built by their Maven build (offline when warm)."""
    java = shutil.which("java")
    if java is None or shutil.which("mvn") is None:
        raise SystemExit("java and mvn are needed for the RocketMQ side")
    return JavaHarness(java=java, classpath=build_harness(), home=home)


def java_rate(
    harness: JavaHarness, sizes: Sizes, path: Path, *, n: int, size: int, warm: int
) -> float:
    out = harness.run(sizes, "--warmup", str(warm), "bench", str(path), str(n), str(size))
    line = json.loads(out.splitlines()[-1])
    assert line["kind"] == "bench", line
    return float(line["messagesPerSecond"])


def rmq_rate(sizes: Sizes, path: Path, n: int, size: int, warm: int) -> float:
    body = b"b" * size
    with rmqstore.MessageStore(path, **sizes.rmq()) as store:
        start = 0.0
        for i in range(-warm, n):
            if i == 0:
                start = time.perf_counter()
            r = store.put_message(
                rmqstore.Message(
                    "BenchTopic",
                    body,
                    tags="TagA",
                    queue_id=i & 3,
                    born_timestamp=int(time.time() * 1000),
                    born_host="10.0.0.1:4000",
                )
            )
            if not r.ok:
                raise RuntimeError(f"put {i}: {r.status}")
        seconds = time.perf_counter() - start
    return n / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="timed puts per round")
    ap.add_argument("--warmup", type=int, default=20_000, help="untimed puts first, both sides")
    ap.add_argument("--size", type=int, nargs="+", default=[128, 1024], help="body bytes")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--segment", type=int, default=256 * 1024 * 1024)
    ap.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    args = ap.parse_args()
    sizes = Sizes(
        commitlog=args.segment,
        cq=300_000 * 20,
        hash_slots=5_000_000,
        index_num=20_000_000,
        flush=args.flush,
    )
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="interop-bench-") as tmp:
        root = Path(tmp)
        harness = java_harness(root / "jvm-home")
        results = []
        for size in args.size:
            java, ours = [], []
            for r in range(args.rounds):
                for side in ("rocketmq", "rmqstore"):
                    path = root / f"{side}-{size}-{r}"
                    if side == "rocketmq":
                        java.append(
                            java_rate(harness, sizes, path, n=args.n, size=size, warm=args.warmup)
                        )
                    else:
                        ours.append(rmq_rate(sizes, path, args.n, size, args.warmup))
                    shutil.rmtree(path)
            j, o = statistics.median(java), statistics.median(ours)
            res = {
                "body_size": size,
                "n": args.n,
                "flush": args.flush,
                "rocketmq_msgs_per_s": round(j),
                "rmqstore_msgs_per_s": round(o),
                "ratio": round(o / j, 2),
                "rocketmq_rounds": [round(x) for x in java],
                "rmqstore_rounds": [round(x) for x in ours],
            }
            results.append(res)
            print(
                f"{size:>6} B bodies, {args.flush}: RocketMQ {j / 1e3:8.1f} k msg/s, "
                f"rmqstore {o / 1e3:8.1f} k msg/s, ratio {o / j:5.2f}x"
            )
        print(json.dumps(results))


if __name__ == "__main__":
    main()
