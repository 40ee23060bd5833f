"""Issue 19: expired-file deletion judged by Apache RocketMQ's store.

Either side deletes a store's expired files (segments whose modification time is set back
100 hours, ``file_reserved_time`` 72 h), the other opens what is left: both must read exactly the
messages at or after the commitlog's new minimum offset, with the same queue bounds, lookups by
offset and key lookups, and nothing else.

The store holds the mixed messages of ``test_interop``, a topic whose every message lies in
the expired segments (``Expired``: its queue has no message left), and a tail touching every
other queue after them.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import rmqstore
from interop_harness import (
    Dump,
    JavaHarness,
    Sizes,
    assert_same_dump,
    b64,
    expected_queries,
    rmq_dump,
    rmq_write,
)
from rmqwire import segment_files
from test_interop import mixed_messages

pytestmark = pytest.mark.interop

SMALL = Sizes()  # 64 KiB commitlog, 10-unit consume queue, 64-slot/50-entry index files
#: Segments left unexpired: the newest two (the tail lies in them).
KEPT = 2


def _workload(seed: int) -> list[dict[str, Any]]:
    """``Expired`` (15 messages: more than one 10-unit consume queue file), the mixed messages,
    then one small message in every queue of TopicA and ManyQueues."""
    born = 1_700_000_000_000
    head = [
        {
            "topic": "Expired",
            "queueId": 0,
            "tags": "Gone",
            "keys": [f"gone{seed}-{i}", f"shared{seed}-0"],
            "properties": {"seq": f"e{i}"},
            "bornTimestamp": born - 1000 + i,
            "bornHost": "10.9.9.9:9999",
            "body": b64(f"expired {i}".encode() * 40),
        }
        for i in range(15)
    ]
    tail = [
        {
            "topic": topic,
            "queueId": q,
            "tags": "Tail",
            "keys": [f"tail{seed}-{topic}-{q}"],
            "properties": {"seq": f"t{topic}{q}"},
            "bornTimestamp": born + 10_000 + q,
            "bornHost": "10.8.8.8:8888",
            "body": b64(f"tail {topic} {q}".encode()),
        }
        for topic, queues in (("TopicA", 4), ("ManyQueues", 24))
        for q in range(queues)
    ]
    return head + mixed_messages(seed, 400) + tail


def _age(paths: list[Path]) -> None:
    """Modification times 100 hours back: expired for a 72-hour ``file_reserved_time``."""
    old = time.time() - 100 * 3600
    for p in paths:
        os.utime(p, (old, old))


def _files(path: Path, sub: str) -> list[Path]:
    return sorted(p for p in (path / sub).rglob("*") if p.is_file())


def _full_dump(store: Path, scratch: Path) -> Dump:
    """Everything in the store before any deletion, read by rmqstore from a copy."""
    shutil.copytree(store, scratch)
    return rmq_dump(scratch, SMALL)


def _remaining(full: Dump, low: int) -> Dump:
    """What a reader must see once every segment below ``low`` is gone: the messages at or after
    it, each queue from its first remaining message (a queue with none left starts at its end,
    RocketMQ 5.x's ``correctMinOffset``), every key finding exactly the remaining messages."""
    messages = [m for m in full.messages if m["commitLogOffset"] >= low]
    queues: dict[tuple[str, int], tuple[int, int]] = {}
    for q, (_, high) in full.queues.items():
        left = [m["queueOffset"] for m in messages if (m["topic"], m["queueId"]) == q]
        queues[q] = (min(left) if left else high, high)
    dump = Dump(
        max_phy_offset=full.max_phy_offset,
        queues=queues,
        messages=messages,
        looked={m["commitLogOffset"]: m for m in messages},
        queries={},
        stopped=[],
    )
    dump.queries = expected_queries(dump)
    return dump


def _check_remaining(dump: Dump, want: Dump, *, referee: str) -> None:
    """``dump`` read exactly ``want``. RocketMQ 4.9.8's ``correctMinOffset`` only looks at a
    queue's first consume queue file and changes nothing when no unit there is at or after the
    commitlog's minimum: ``Expired`` (every message gone, its first file deleted) keeps the min
    offset 0 in 4.9.8, and ``getMessage`` there finds no consume queue file
    (``OFFSET_FOUND_NULL``), which the dump records as a read that stopped."""
    if referee == "rmq4":
        expired = ("Expired", 0)
        hi = want.queues[expired][1]
        assert want.queues[expired] == (hi, hi)
        assert dump.queues[expired] == (0, hi)
        assert dump.stopped == [
            {"topic": "Expired", "queueId": 0, "offset": 0, "status": "OFFSET_FOUND_NULL"}
        ]
        dump = dataclasses.replace(dump, queues={**dump.queues, expired: (hi, hi)}, stopped=[])
    assert dump.max_phy_offset == want.max_phy_offset
    assert dump.queues == want.queues
    assert len(dump.messages) == len(want.messages)
    for got, expected in zip(dump.messages, want.messages, strict=True):
        assert got == expected
    assert dump.looked == want.looked
    assert dump.queries == want.queries
    assert dump.stopped == []


def _referee_name(request: pytest.FixtureRequest) -> str:
    """``rmq5`` or ``rmq4``: which RocketMQ the ``referee`` fixture gave this test."""
    name: str = request.node.callspec.params["referee"]
    return name


def test_rmqstore_deletes_rocketmq_reads(
    referee: JavaHarness, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """rmqstore writes over many segments and deletes the expired ones with
    ``clean_expired_files``; RocketMQ then opens the store and reads exactly the messages
    left, as rmqstore does."""
    store = tmp_path / "store"
    rmq_write(store, SMALL, _workload(3))
    full = _full_dump(store, tmp_path / "full")
    segments = segment_files(store)
    assert len(segments) >= 6
    cq_before, index_before = _files(store, "consumequeue"), _files(store, "index")
    _age(segments[:-KEPT])
    # Only expiry deletes (a full disk of the machine must not make the round delete at once).
    settings = {"file_reserved_time": 72, "clean_file_forcibly_enable": False}
    with rmqstore.MessageStore(store, **SMALL.rmq(), **settings) as ours:
        report = ours.clean_expired_files()
        low = ours.get_min_phy_offset()
    assert low == int(segments[-KEPT].name)
    assert [Path(p).name for p in report.commit_log_files] == [p.name for p in segments[:-KEPT]]
    assert report.min_commit_log_offset == low
    assert report.clean_immediately is False
    assert segment_files(store) == segments[-KEPT:]
    cq_after, index_after = _files(store, "consumequeue"), _files(store, "index")
    assert report.consume_queue_files == len(set(cq_before) - set(cq_after)) > 0
    assert report.index_files == len(set(index_before) - set(index_after)) > 0
    want = _remaining(full, low)
    assert ("Expired", 0) in want.queues
    assert not [m for m in want.messages if m["topic"] == "Expired"]

    theirs = referee.read(store, SMALL)
    assert theirs.extra["info"]["minPhyOffset"] == low
    _check_remaining(theirs, want, referee=_referee_name(request))
    again = rmq_dump(store, SMALL)
    _check_remaining(again, want, referee="rmqstore")


def test_rocketmq_deletes_rmqstore_reads(
    referee: JavaHarness, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """RocketMQ writes over many segments and deletes the expired ones itself (its cleaners'
    rounds after ``executeDeleteFilesManually``); rmqstore opens what RocketMQ left and reads
    exactly the remaining messages, and RocketMQ reading after rmqstore's open and close
    agrees."""
    store = tmp_path / "store"
    referee.write(store, SMALL, _workload(4), tmp_path / "scratch")
    full = _full_dump(store, tmp_path / "full")
    segments = segment_files(store)
    assert len(segments) >= 6
    cq_before, index_before = _files(store, "consumequeue"), _files(store, "index")
    _age(segments[:-KEPT])
    cleaned = referee.clean(store, SMALL)
    low = int(segments[-KEPT].name)
    assert (cleaned["minPhyOffsetBefore"], cleaned["minPhyOffsetAfter"]) == (0, low), cleaned
    assert segment_files(store) == segments[-KEPT:]
    assert set(_files(store, "consumequeue")) < set(cq_before)
    assert set(_files(store, "index")) < set(index_before)
    want = _remaining(full, low)

    ours = rmq_dump(store, SMALL)
    assert ours.extra["recovery"]["abnormal"] is False
    assert ours.extra["recovery"]["discarded_bytes"] == 0
    _check_remaining(ours, want, referee="rmqstore")
    theirs = referee.read(store, SMALL)
    _check_remaining(theirs, want, referee=_referee_name(request))
    assert_same_dump(ours, rmq_dump(store, SMALL))
