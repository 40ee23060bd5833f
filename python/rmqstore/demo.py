"""The main job (``make demo``): write a realistic mix of messages into a store, read every one
back, reopen the store, and report what happened.

Run it as ``python -m rmqstore.demo [STORE_FOLDER] [--messages N]``; the folder defaults to
``./demo-store`` and is appended to on every run (the store recovers what earlier runs wrote).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
import zlib
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import Message, MessageStore, PutMessageStatus

if TYPE_CHECKING:
    from .demo_spark import SparkReport

TOPICS = {
    # topic: (tags, share of traffic, body size range)
    "Orders": (["Created", "Paid", "Shipped", "Cancelled"], 0.35, (200, 1200)),
    "Payments": (["Authorized", "Captured", "Refunded"], 0.20, (150, 600)),
    "Clickstream": (["view", "click", "scroll"], 0.35, (60, 300)),
    "Inventory": (["Restock", "Reserve"], 0.08, (400, 4000)),
    "%RETRY%order-notification-consumers": (["retry"], 0.02, (200, 800)),
}
QUEUES = 8
BATCH_TOPIC = "Clickstream"  # the high-volume topic is produced in batches


@dataclass
class Ledger:
    """What was written, compactly (a million messages must not cost a gigabyte): commitlog
    offset, topic and CRC-32 of the body of every message, and the keys of a sample."""

    offsets: array[int] = field(default_factory=lambda: array("q"))
    topics: array[int] = field(default_factory=lambda: array("b"))
    crcs: array[int] = field(default_factory=lambda: array("L"))
    sample_keys: list[tuple[str, str, int]] = field(default_factory=list)
    body_bytes: int = 0

    def add(self, offset: int, topic: str, body: bytes) -> None:
        self.offsets.append(offset)
        self.topics.append(TOPIC_INDEX[topic])
        self.crcs.append(zlib.crc32(body))
        self.body_bytes += len(body)

    def __len__(self) -> int:
        return len(self.offsets)


TOPIC_INDEX = {t: i for i, t in enumerate(TOPICS)}


def _body(rng: random.Random, topic: str, lo: int, hi: int, seq: int) -> bytes:
    doc = {"seq": seq, "topic": topic, "ts": int(time.time() * 1000), "note": "ünïcødé ✓"}
    text = json.dumps(doc, ensure_ascii=False).encode()
    pad = rng.randint(lo, hi) - len(text)
    return text + b" " * max(pad, 0)


class _Progress:
    """A one-line progress bar, redrawn at most ten times a second."""

    def __init__(self, total: int, quiet: bool = False) -> None:
        self.total = total
        self.quiet = quiet
        self.started = time.perf_counter()
        self.drawn = 0.0

    def update(self, done: int, force: bool = False) -> None:
        now = time.perf_counter()
        if self.quiet or (not force and now - self.drawn < 0.1):
            return
        self.drawn = now
        width = 30
        filled = width * done // max(self.total, 1)
        rate = done / max(now - self.started, 1e-9)
        bar = "#" * filled + "." * (width - filled)
        sys.stdout.write(f"\r  [{bar}] {done:>9,}/{self.total:,}  {rate:>10,.0f} msg/s")
        sys.stdout.flush()


def produce(
    store: MessageStore, total: int, rng: random.Random, first_seq: int = 0, quiet: bool = False
) -> Ledger:
    """Single puts for most topics; the click stream is buffered per queue and put in batches,
    as a high-volume producer would."""
    written = Ledger()
    names = list(TOPICS)
    weights = [TOPICS[t][1] for t in names]
    progress = _Progress(total, quiet)
    pending: dict[int, list[bytes]] = {q: [] for q in range(QUEUES)}
    batch_target = {q: rng.randint(16, 128) for q in range(QUEUES)}

    def flush_batch(queue_id: int) -> None:
        bodies = pending[queue_id]
        if not bodies:
            return
        tag = rng.choice(TOPICS[BATCH_TOPIC][0])
        session = f"session-{rng.randrange(10_000)}"
        r = store.put_messages(BATCH_TOPIC, queue_id, bodies, tags=tag, keys=[session])
        assert r.status is PutMessageStatus.PUT_OK, r
        for off, body in zip(r.record_offsets, bodies, strict=True):
            written.add(off, BATCH_TOPIC, body)
        pending[queue_id] = []
        batch_target[queue_id] = rng.randint(16, 128)

    for seq in range(first_seq, first_seq + total):
        topic = rng.choices(names, weights)[0]
        tags, _, (lo, hi) = TOPICS[topic]
        queue_id = rng.randrange(QUEUES)
        body = _body(rng, topic, lo, hi, seq)
        if topic == BATCH_TOPIC:
            pending[queue_id].append(body)
            if len(pending[queue_id]) >= batch_target[queue_id]:
                flush_batch(queue_id)
        else:
            tag = rng.choice(tags)
            keys = [f"{topic.lower()}-{seq}", f"customer-{rng.randrange(50_000)}"]
            props = {"region": rng.choice(["eu-west", "us-east", "ap-south"]), "trace": f"{seq:x}"}
            born_host = "[2001:db8::7]:40123" if seq % 50 == 0 else "10.1.2.3:40123"
            msg = Message(
                topic,
                body,
                tags=tag,
                keys=keys,
                properties=props,
                queue_id=queue_id,
                born_host=born_host,
            )
            r = store.put_message(msg)
            assert r.status is PutMessageStatus.PUT_OK, r
            written.add(r.wrote_offset, topic, body)
            if seq % 20_000 == 0:
                written.sample_keys.append((topic, keys[0], r.wrote_offset))
        progress.update(seq + 1 - first_seq)
    for q in range(QUEUES):
        flush_batch(q)
    progress.update(total, force=True)
    if not quiet:
        print()
    return written


def verify(store: MessageStore, written: Ledger) -> int:
    """Reads every message back by its commitlog offset and compares topic and body CRC."""
    names = list(TOPICS)
    for offset, topic, crc in zip(written.offsets, written.topics, written.crcs, strict=True):
        m = store.look_message_by_offset(offset)
        if m is None:
            raise AssertionError(f"message at {offset} is missing")
        if m.topic != names[topic] or zlib.crc32(m.body) != crc:
            raise AssertionError(f"message at {offset} differs from what was written")
    return len(written)


def consume_tagged(store: MessageStore, topic: str, expression: str) -> tuple[int, int]:
    """Consumes every queue of ``topic`` from its minimum with a tag filter, as a consumer
    would (32 messages per pull); returns (messages delivered, pulls)."""
    wanted = {t.strip() for t in expression.split("||")}
    delivered = pulls = 0
    for q in store.queue_ids(topic):
        offset = store.get_min_offset_in_queue(topic, q)
        end = store.get_max_offset_in_queue(topic, q)
        while offset < end:
            r = store.get_message("demo-consumer", topic, q, offset, 32, subscription=expression)
            pulls += 1
            for m in r.messages:
                if m.tags not in wanted:
                    raise AssertionError(f"tag filter {expression!r} delivered {m.tags!r}")
            delivered += len(r.messages)
            if r.next_begin_offset <= offset:
                break
            offset = r.next_begin_offset
        store.commit_offset("demo-consumer", topic, q, offset)
    return delivered, pulls


def rejected_examples(store: MessageStore) -> list[tuple[str, PutMessageStatus]]:
    cases = [
        ("path trick as a topic", Message("../../etc", b"x")),
        ("empty topic", Message("", b"x")),
        ("body over max_message_size", Message("Orders", bytes(store.config.max_message_size + 1))),
        ("properties over 32767 bytes", Message("Orders", b"x", properties={"big": "v" * 40_000})),
    ]
    return [(what, store.put_message(m).status) for what, m in cases]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("store", nargs="?", default="./demo-store")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--burst", type=int, default=100_000, help="second burst, for streaming")
    ap.add_argument("--report", default=None, help="report folder (default: <store>-report)")
    ap.add_argument("--no-spark", action="store_true", help="skip the Spark pipeline")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    path = Path(args.store)
    report_dir = Path(args.report) if args.report else path.with_name(path.name + "-report")

    print(f"rmqstore demo: store folder {path.resolve()}")
    t0 = time.perf_counter()
    with MessageStore(path) as store:
        open_s = time.perf_counter() - t0
        report = store.recovery_report()
        before = store.get_max_phy_offset()
        print(
            f"  opened in {open_s * 1e3:.0f} ms: {before:,} bytes from earlier runs "
            f"({'after a crash' if report['abnormal'] else 'clean'}; recovery checked "
            f"{report['messages']:,} messages from offset {report['start_offset']:,})"
        )
        print(f"  producing {args.messages:,} messages over {len(TOPICS)} topics x {QUEUES} queues")
        t1 = time.perf_counter()
        written = produce(store, args.messages, rng)
        produce_s = time.perf_counter() - t1
        wrote = store.get_max_phy_offset() - before
        t2 = time.perf_counter()
        checked = verify(store, written)
        verify_s = time.perf_counter() - t2
        assert store.wait_dispatched(60)
        t3 = time.perf_counter()
        tagged, pulls = consume_tagged(store, "Orders", "Paid || Shipped")
        consume_s = time.perf_counter() - t3
        lookups = []
        for topic, key, offset in written.sample_keys[:5]:
            t = time.perf_counter()
            found = store.query_message(topic, key)
            lookups.append((key, time.perf_counter() - t, [m.commit_log_offset for m in found]))
            if offset not in lookups[-1][2]:
                raise AssertionError(f"key {key} did not find the message at {offset}")
        rejected = rejected_examples(store)
        store.flush()
        spark_report = None
        if not args.no_spark:
            from .demo_spark import demo_format, draw_chart, run_pipeline, spark_session

            print("  starting a local Spark session (local[2]) ...")
            shutil.rmtree(report_dir, ignore_errors=True)
            spark = spark_session()
            try:

                def burst() -> int:
                    more = produce(store, args.burst, rng, first_seq=args.messages, quiet=True)
                    assert store.wait_dispatched(60)
                    return len(more)

                spark_report = run_pipeline(spark, path, report_dir, burst, demo_format())
            finally:
                spark.stop()
            chart = draw_chart(spark_report, report_dir / "volume.png")
            spark_report.outputs.append(chart)
        flushed = store.flush()
        segments = store.commitlog_segments()

    with MessageStore(path) as again:
        reopened = again.get_max_phy_offset()
    if reopened != flushed:
        raise AssertionError(f"reopen found {reopened} bytes, expected {flushed}")

    per_topic = Counter(list(TOPICS)[t] for t in written.topics)
    print(
        f"\n  wrote {len(written):,} messages, {wrote / 1e6:.1f} MB of records, "
        f"in {produce_s:.2f} s ({len(written) / produce_s:,.0f} msg/s, "
        f"{wrote / produce_s / 1e6:.0f} MB/s)"
    )
    for topic, n in per_topic.most_common():
        print(f"    {topic:<40} {n:>9,} messages")
    print(
        f"  read back and checked every message by offset in {verify_s:.2f} s"
        f" ({checked / verify_s:,.0f} msg/s)"
    )
    print(
        f"  consumed Orders with tag filter 'Paid || Shipped': {tagged:,} messages in "
        f"{pulls:,} pulls, {consume_s:.2f} s; offsets committed for group demo-consumer"
    )
    for key, secs, offsets in lookups:
        print(f"  key lookup {key!r}: {len(offsets)} message(s) in {secs * 1e6:.0f} us")
    print("  rejected with RocketMQ statuses (nothing written, no queue offset used):")
    for what, status in rejected:
        print(f"    {what:<32} -> {status.name}")
    print(f"  commitlog: {len(segments)} segment(s), {flushed:,} bytes flushed; reopened cleanly")
    if spark_report is not None:
        _print_spark(spark_report)
    return 0


def _print_spark(r: SparkReport) -> None:
    print(
        f"\n  Spark over the store (format {r.fmt!r}): {r.total_messages:,} messages, "
        f"{r.total_bytes / 1e6:.1f} MB of bodies"
    )
    print("    messages and bytes per topic and tag:")
    for topic, tags, n, b in r.by_topic_tag:
        print(f"      {topic:<40} {tags or '-':<12} {n:>9,} {b / 1e6:>9.1f} MB")
    lat = ", ".join(f"{k} {v:.0f} ms" for k, v in r.latency_ms.items())
    print(f"    store - born latency: {lat}")
    print(f"    volume per minute: {', '.join(f'{m} {n:,}' for m, n, _ in r.per_minute)}")
    first, second = r.stream_batches
    print(
        f"    streaming (AvailableNow, maxOffsetsPerTrigger 400000): first run {sum(first):,} "
        f"messages in {len(first)} batch(es) {first}; after a burst of {r.burst:,}, the second "
        f"run from the checkpoint read {sum(second):,} in {len(second)} batch(es)"
    )
    if sum(second) != r.burst:
        raise AssertionError(f"the second streaming run read {sum(second)}, expected {r.burst}")
    for what, secs in r.seconds.items():
        print(f"    {what}: {secs:.1f} s")
    print(f"    written: {', '.join(str(p) for p in r.outputs)}")


if __name__ == "__main__":
    sys.exit(main())
