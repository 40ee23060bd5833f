"""The main job (``make demo``): write a realistic mix of messages into a store, read every one
back, reopen the store, and report what happened.

Run it as ``python -m rmqstore.demo [STORE_FOLDER] [--messages N]``; the folder defaults to
``./demo-store`` and is appended to on every run (the store recovers what earlier runs wrote).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import Message, MessageStore, PutMessageStatus

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
class Written:
    offset: int
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    tags: str | None
    keys: list[str]
    properties: dict[str, str] = field(default_factory=dict)


def _body(rng: random.Random, topic: str, lo: int, hi: int, seq: int) -> bytes:
    doc = {"seq": seq, "topic": topic, "ts": int(time.time() * 1000), "note": "ünïcødé ✓"}
    text = json.dumps(doc, ensure_ascii=False).encode()
    pad = rng.randint(lo, hi) - len(text)
    return text + b" " * max(pad, 0)


class _Progress:
    """A one-line progress bar, redrawn at most ten times a second."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.started = time.perf_counter()
        self.drawn = 0.0

    def update(self, done: int, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.drawn < 0.1:
            return
        self.drawn = now
        width = 30
        filled = width * done // max(self.total, 1)
        rate = done / max(now - self.started, 1e-9)
        bar = "#" * filled + "." * (width - filled)
        sys.stdout.write(f"\r  [{bar}] {done:>9,}/{self.total:,}  {rate:>10,.0f} msg/s")
        sys.stdout.flush()


def produce(store: MessageStore, total: int, rng: random.Random) -> list[Written]:
    """Single puts for most topics; the click stream is buffered per queue and put in batches,
    as a high-volume producer would."""
    written: list[Written] = []
    names = list(TOPICS)
    weights = [TOPICS[t][1] for t in names]
    progress = _Progress(total)
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
        for i, (off, body) in enumerate(zip(r.record_offsets, bodies, strict=True)):
            written.append(
                Written(off, BATCH_TOPIC, queue_id, r.queue_offset + i, body, tag, [session])
            )
        pending[queue_id] = []
        batch_target[queue_id] = rng.randint(16, 128)

    for seq in range(total):
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
            written.append(
                Written(r.wrote_offset, topic, queue_id, r.queue_offset, body, tag, keys, props)
            )
        progress.update(seq + 1)
    for q in range(QUEUES):
        flush_batch(q)
    progress.update(total, force=True)
    print()
    return written


def verify(store: MessageStore, written: list[Written]) -> int:
    checked = 0
    for w in written:
        m = store.look_message_by_offset(w.offset)
        if m is None:
            raise AssertionError(f"message at {w.offset} is missing")
        if (m.topic, m.queue_id, m.queue_offset, m.body, m.tags, m.keys) != (
            w.topic,
            w.queue_id,
            w.queue_offset,
            w.body,
            w.tags,
            w.keys,
        ):
            raise AssertionError(f"message at {w.offset} differs from what was written")
        for k, v in w.properties.items():
            if m.properties.get(k) != v:
                raise AssertionError(f"property {k} of the message at {w.offset} differs")
        checked += 1
    return checked


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
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    path = Path(args.store)

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
        rejected = rejected_examples(store)
        flushed = store.flush()
        segments = store.commitlog_segments()

    with MessageStore(path) as again:
        reopened = again.get_max_phy_offset()
    if reopened != flushed:
        raise AssertionError(f"reopen found {reopened} bytes, expected {flushed}")

    per_topic = Counter(w.topic for w in written)
    sizes = sorted(len(w.body) for w in written)
    print(
        f"\n  wrote {len(written):,} messages, {wrote / 1e6:.1f} MB of records, "
        f"in {produce_s:.2f} s ({len(written) / produce_s:,.0f} msg/s, "
        f"{wrote / produce_s / 1e6:.0f} MB/s)"
    )
    print(f"  body sizes: min {sizes[0]} B, median {sizes[len(sizes) // 2]} B, max {sizes[-1]} B")
    for topic, n in per_topic.most_common():
        print(f"    {topic:<40} {n:>9,} messages")
    print(
        f"  read back and checked every message by offset in {verify_s:.2f} s"
        f" ({checked / verify_s:,.0f} msg/s)"
    )
    print("  rejected with RocketMQ statuses (nothing written, no queue offset used):")
    for what, status in rejected:
        print(f"    {what:<32} -> {status.name}")
    print(f"  commitlog: {len(segments)} segment(s), {flushed:,} bytes flushed; reopened cleanly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
