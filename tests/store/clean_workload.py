"""The workload of ``test_clean_concurrency``: message bodies derived from where they are stored,
the checks every reader applies, and (run as a script) a read-only reader process.

Every message of queue ``q`` of ``topic`` at queue offset ``o`` has the body ``body_for(topic, q,
o)`` and first key ``key_for(topic, q, o)`` (one writer puts into each queue in order, so it
knows the offset each put gets). A reader therefore knows, for any message it is handed, every
byte it must hold.

A consumer may meet a gap in a queue (messages that expired and were deleted) only as RocketMQ's
``OFFSET_TOO_SMALL``: no message, ``next_begin_offset`` past the offset asked for and at most
the queue's min offset read right after the call (the min only grows). Every other answer either
starts exactly at the offset asked for, with consecutive offsets, or returns nothing and stays
where it is.

Script: ``clean_workload.py STORE SECONDS SIZES_JSON QUEUES_JSON``: opens ``STORE`` read-only (the
writer's segment sizes), reads every queue with ``get_message`` for ``SECONDS`` (pausing now and
then, so that deletions overtake it), looks each message it gets up again by commitlog offset
and reads some ranges with ``read_batch``; prints one JSON line of counts and exits 0, or prints
the failure and exits 1. Killed by a signal (SIGBUS on a mapping whose file shrank), its exit
code says which.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import traceback
import zlib
from typing import Any

import pyarrow as pa
import rmqstore
from rmqstore import GetMessageStatus, MessageStore

GROUP = "clean-readers"


def body_for(topic: str, queue_id: int, offset: int) -> bytes:
    """40 to 700 bytes, all of them a function of the message's place."""
    head = f"{topic}|{queue_id}|{offset}|".encode()
    size = 40 + zlib.crc32(head) % 661
    block = hashlib.blake2b(head, digest_size=64).digest()
    return (head + block * (size // 64 + 1))[:size]


def key_for(topic: str, queue_id: int, offset: int) -> str:
    return f"key-{topic}-{queue_id}-{offset}"


def check_message(m: rmqstore.MessageExt, topic: str, queue_id: int, offset: int) -> None:
    """``m`` is exactly the message written at (topic, queue, offset)."""
    where = (topic, queue_id, offset)
    got = (m.topic, m.queue_id, m.queue_offset)
    assert got == where, (got, where)
    assert m.body == body_for(*where), f"wrong body at {where} (commitlog {m.commit_log_offset})"
    assert m.properties.get("KEYS", "").split(" ")[0] == key_for(*where), (where, m.properties)
    assert m.body_crc == zlib.crc32(m.body) & 0x7FFFFFFF, where


def get_step(
    store: MessageStore, topic: str, queue_id: int, offset: int, max_msgs: int = 32
) -> tuple[int, list[rmqstore.MessageExt], int]:
    """One ``get_message`` of a consumer at ``offset``, checked: (next offset, the messages,
    the size of the gap it reported: 0 unless OFFSET_TOO_SMALL)."""
    r = store.get_message(GROUP, topic, queue_id, offset, max_msgs, None)
    min_after = store.get_min_offset_in_queue(topic, queue_id)
    where = (topic, queue_id, offset, r.status.name, r.next_begin_offset, min_after)
    if r.status is GetMessageStatus.FOUND:
        got = [m.queue_offset for m in r.messages]
        assert got, where
        assert got == list(range(offset, offset + len(got))), (where, got)
        for m in r.messages:
            check_message(m, topic, queue_id, m.queue_offset)
        assert r.next_begin_offset == offset + len(got), (where, got)
        return r.next_begin_offset, r.messages, 0
    assert not r.messages, where
    if r.status is GetMessageStatus.OFFSET_TOO_SMALL:
        # A gap: only messages that expired, reported at the queue's min offset.
        assert offset < r.next_begin_offset <= min_after, where
        assert r.next_begin_offset == r.min_offset, (where, r.min_offset)
        return r.next_begin_offset, [], r.next_begin_offset - offset
    # Nothing to read here (yet): the consumer stays where it is.
    assert r.next_begin_offset == offset, where
    return offset, [], 0


def batch_rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    return batch.select(["topic", "queue_id", "queue_offset", "keys", "body"]).to_pylist()


def check_batch(batch: pa.RecordBatch) -> None:
    """Every row of a ``read_batch`` batch holds the bytes written at its place."""
    for row in batch_rows(batch):
        where = (row["topic"], row["queue_id"], row["queue_offset"])
        assert row["body"] == body_for(*where), f"wrong body in a batch at {where}"
        assert row["keys"][:1] == [key_for(*where)], (where, row["keys"])


def batch_step(
    store: MessageStore, topic: str, queue_id: int, offset: int, max_msgs: int = 64
) -> tuple[int, pa.RecordBatch | None, int]:
    """One ``read_batch`` at ``offset``, checked: (next offset, the batch if it had rows, the
    gap skipped). Rows start at ``offset``, or later only over offsets below the queue's min
    offset read right after the call; an empty batch below the min moves the reader to it."""
    batch = store.read_batch(topic, queue_id, offset, max_msgs)
    min_after = store.get_min_offset_in_queue(topic, queue_id)
    offsets = batch.column("queue_offset").to_pylist()
    where = (topic, queue_id, offset, min_after)
    if not offsets:
        if offset < min_after:
            return min_after, None, min_after - offset
        return offset, None, 0
    first = offsets[0]
    assert offsets == list(range(first, first + len(offsets))), (where, offsets)
    assert offset <= first, (where, first)
    assert first == offset or first <= min_after, (where, first)
    check_batch(batch)
    return offsets[-1] + 1, batch, first - offset


def _read_only_main(path: str, seconds: float, sizes: dict[str, Any], queues: list[Any]) -> int:
    counts = {"messages": 0, "gaps": 0, "gap_messages": 0, "looked": 0, "batches": 0, "passes": 0}
    with MessageStore(path, read_only=True, **sizes) as store:
        offsets = {(t, q): 0 for t, q in queues}  # noqa: C420 - JSON pairs
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            counts["passes"] += 1
            for (topic, q), offset in list(offsets.items()):
                if counts["passes"] % 5 == 0:
                    nxt, batch, gap = batch_step(store, topic, q, offset)
                    counts["batches"] += batch is not None
                else:
                    nxt, msgs, gap = get_step(store, topic, q, offset)
                    counts["messages"] += len(msgs)
                    for m in msgs[:3]:
                        looked = store.look_message_by_offset(m.commit_log_offset)
                        if looked is not None:
                            check_message(looked, topic, q, m.queue_offset)
                            counts["looked"] += 1
                if gap:
                    counts["gaps"] += 1
                    counts["gap_messages"] += gap
                offsets[(topic, q)] = nxt
            # Now and then fall behind the deletions (longer than the cleaner's window).
            time.sleep(4.0 if counts["passes"] % 30 == 0 else 0.01)
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    try:
        code = _read_only_main(
            sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
        )
    except Exception:
        traceback.print_exc()
        code = 1
    sys.exit(code)
