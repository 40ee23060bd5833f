"""Issue 17, delay levels, with Apache RocketMQ's own code as the referee.

RocketMQ 4.9.8 keeps its ``ScheduleMessageService`` in the store jar (the store harness's
``deliver`` command runs it); 5.5.1 moved it into the broker (the broker harness). Every test
uses a small level table (``LEVELS``) so that messages fall due within seconds, and a store
whose delivery is *partly* done: the second side must continue from the first side's
``config/delayOffset.json``, deliver exactly the messages still pending, once, into the real
queues they were sent to, after the messages already there.

- ``test_rmqstore_schedules_rocketmq498_delivers``: rmqstore delivers a first wave, puts a
  second one and closes; 4.9.8's service delivers exactly the second wave; rmqstore reopening
  reads 4.9.8's ``delayOffset.json`` (bare integer keys) and delivers nothing more.
- ``test_rocketmq498_schedules_rmqstore_delivers``: the reverse.
- ``test_broker551_schedule_records_equal_rmqstore``: 5.5.1's put hook and dispatch (a real
  producer through the broker) against rmqstore's transform for the same input: the
  ``SCHEDULE_TOPIC_XXXX`` records byte for byte (store timestamp aside) and the consume queue
  units (deliver time = store time + the level's delay); then rmqstore delivers what the broker
  left pending, continuing from the broker's ``delayOffset.json`` (with ``dataVersion``).
- ``test_rmqstore_schedules_broker551_delivers``: the broker's ScheduleMessageService delivers
  what rmqstore left pending, continuing from rmqstore's ``delayOffset.json``.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
import rmqstore
from broker_harness import BrokerHarness, BrokerSizes, free_ports
from interop_harness import JavaHarness, Sizes, b64, message_fields, norm_host

pytestmark = pytest.mark.interop

#: Delays of levels 1-3 (a level above 3 is clamped to 3 on put, by both).
LEVELS = "2s 3s 4s"
LEVEL_MS = {1: 2000, 2: 3000, 3: 4000}
SIZES = Sizes()
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: What both sides add to a delivered message: the real topic and queue kept from the transform
#: (RocketMQ's messageTimeup clears DELAY from the property map *after* it serialised the
#: properties, so the stored record keeps DELAY, REAL_TOPIC and REAL_QID).
ADDED = ("REAL_TOPIC", "REAL_QID")


# -- rmqstore side ----------------------------------------------------------------------------


def open_rmq(path: Path, sizes: dict[str, Any]) -> rmqstore.MessageStore:
    """rmqstore on ``path`` with the test's level table (its schedule service running)."""
    return rmqstore.MessageStore(path, message_delay_level=LEVELS, **sizes)


def pending(store: rmqstore.MessageStore) -> int:
    return sum(s.pending for s in store.schedule_stats())


def wait_no_pending(store: rmqstore.MessageStore, timeout: float = 30) -> None:
    """Until every delayed message put so far is delivered and dispatched (dispatch first:
    a put not yet in its schedule queue does not count as pending)."""
    assert store.wait_dispatched(30)
    deadline = time.monotonic() + timeout
    while pending(store):
        assert time.monotonic() < deadline, store.schedule_stats()
        time.sleep(0.02)
    assert store.wait_dispatched(30)


def rmq_put(store: rmqstore.MessageStore, d: dict[str, Any]) -> None:
    props = dict(d.get("properties") or {})
    level = props.pop("DELAY", None)
    r = store.put_message(
        rmqstore.Message(
            d["topic"],
            base64.b64decode(d["body"]),
            queue_id=d["queueId"],
            tags=d.get("tags"),
            keys=d.get("keys") or None,
            properties=props or None,
            flag=d.get("flag", 0),
            born_timestamp=d["bornTimestamp"],
            born_host=d["bornHost"],
            **({} if level is None else {"delay_level": int(level)}),
        )
    )
    assert r.status.name == "PUT_OK", (d, r.status)


def real_messages(path: Path, sizes: dict[str, Any]) -> list[dict[str, Any]]:
    """Every message of every real queue (not the schedule topic), read by rmqstore read-only
    (no service runs, nothing is delivered while reading)."""
    out = []
    with rmqstore.MessageStore(path, read_only=True, **sizes) as store:
        for topic in sorted(store.topics()):
            if topic == SCHEDULE_TOPIC:
                continue
            for qid in store.queue_ids(topic):
                offset = store.get_min_offset_in_queue(topic, qid)
                hi = store.get_max_offset_in_queue(topic, qid)
                while offset < hi:
                    res = store.get_message("interop", topic, qid, offset, 64, None)
                    assert res.messages, (topic, qid, offset, res.status)
                    out.extend(message_fields(m) for m in res.messages)
                    offset = res.next_begin_offset
    return out


def delay_offsets(path: Path) -> dict[int, int]:
    """config/delayOffset.json's offsetTable, in either form (RocketMQ writes bare integer
    keys, ``{1:2}``, which is not JSON)."""
    text = (path / "config" / "delayOffset.json").read_text()
    doc = json.loads(re.sub(r"([{,]\s*)(\d+)\s*:", r'\1"\2":', text))
    return {int(k): v for k, v in doc["offsetTable"].items()}


# -- the messages -----------------------------------------------------------------------------


def wave(name: str, n: int) -> list[dict[str, Any]]:
    """``n`` puts: delayed ones on every level (and level 7, clamped to 3), plain ones between
    them in the same queues; each with a unique ``seq``."""
    out = []
    for i in range(n):
        topic = "DelayA" if i % 3 else "DelayB"
        props = {"seq": f"{name}-{i}", "note": "zürich 東京"}
        if i % 4 != 3:
            props["DELAY"] = str(7 if i % 11 == 5 else 1 + i % 3)
        d: dict[str, Any] = {
            "topic": topic,
            "queueId": i % (4 if topic == "DelayA" else 2),
            "tags": f"T{i % 5}" if i % 6 else None,
            "keys": [f"k-{name}-{i}"] if i % 2 else [],
            "properties": props,
            "body": b64((f"{name}:{i}:" + "x" * (i * 13 % 300)).encode()),
            "bornTimestamp": 1_700_000_000_000 + i,
            "bornHost": "10.1.2.3:4567" if i % 5 else "[fd00::7]:4000",
            "flag": i % 3,
        }
        out.append(d)
    return out


def delayed(described: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in described if "DELAY" in d["properties"]]


def expected_delivery(d: dict[str, Any], store_host: str) -> dict[str, Any]:
    """The fields a delivered copy of ``d`` has, whoever delivered it."""
    props = {k: v for k, v in d["properties"].items() if k != "DELAY"}
    if d.get("tags"):
        props["TAGS"] = d["tags"]
    if d.get("keys"):
        props["KEYS"] = " ".join(d["keys"])
    props["DELAY"] = str(min(int(d["properties"]["DELAY"]), 3))
    props["REAL_TOPIC"] = d["topic"]
    props["REAL_QID"] = str(d["queueId"])
    body = base64.b64decode(d["body"])
    return {
        "topic": d["topic"],
        "queueId": d["queueId"],
        "body": d["body"],
        "bodyCRC": zlib.crc32(body) & 0x7FFFFFFF,
        "bornTimestamp": d["bornTimestamp"],
        "bornHost": norm_host(d["bornHost"]),
        "storeHost": norm_host(store_host),
        "flag": d["flag"],
        "reconsumeTimes": 0,
        "properties": dict(sorted(props.items())),
    }


def check_delivered(got: list[dict[str, Any]], want: list[dict[str, Any]], store_host: str) -> None:
    """``got`` (delivered copies) are exactly ``want``'s delayed messages, once each."""
    by_seq: dict[str, dict[str, Any]] = {}
    for m in got:
        seq = m["properties"]["seq"]
        assert seq not in by_seq, f"{seq} delivered twice"
        by_seq[seq] = m
    want_by_seq = {d["properties"]["seq"]: d for d in want}
    assert sorted(by_seq) == sorted(want_by_seq)
    for seq, d in want_by_seq.items():
        exp = expected_delivery(d, store_host)
        assert {k: by_seq[seq][k] for k in exp} == exp, seq


def check_real_queues(messages: list[dict[str, Any]], all_described: list[dict[str, Any]]) -> None:
    """Every put is in its real queue exactly once (plain puts where they were put, delayed
    ones delivered there), each queue numbered 0.. without gaps."""
    seqs = [m["properties"]["seq"] for m in messages]
    assert sorted(seqs) == sorted(d["properties"]["seq"] for d in all_described)
    per_queue: dict[tuple[str, int], list[int]] = {}
    for m in messages:
        per_queue.setdefault((m["topic"], m["queueId"]), []).append(m["queueOffset"])
    for q, offsets in per_queue.items():
        assert offsets == list(range(len(offsets))), q


def levels_of(described: list[dict[str, Any]]) -> dict[int, int]:
    """Delayed messages per level (after the clamp to 3)."""
    out: dict[int, int] = {}
    for d in described:
        level = min(int(d["properties"]["DELAY"]), 3)
        out[level] = out.get(level, 0) + 1
    return out


def java_write(
    harness: JavaHarness, path: Path, described: list[dict[str, Any]], jsonl: Path
) -> None:
    """4.9.8 puts ``described`` with its schedule service stopped from the start."""
    jsonl.write_text("".join(json.dumps(d) + "\n" for d in described))
    out = harness.run(
        SIZES, "--delay-levels", LEVELS, "--no-deliver", "1", "write", str(path), str(jsonl)
    )
    puts = [json.loads(x) for x in out.splitlines() if '"put"' in x]
    assert [p["status"] for p in puts] == ["PUT_OK"] * len(described)


# -- 4.9.8 ------------------------------------------------------------------------------------


def test_rmqstore_schedules_rocketmq498_delivers(rocketmq4: JavaHarness, tmp_path: Path) -> None:
    path = tmp_path / "store"
    first, second = wave("w1", 40), wave("w2", 40)
    with open_rmq(path, SIZES.rmq()) as store:
        for d in first:
            rmq_put(store, d)
        wait_no_pending(store)  # the first wave delivered by rmqstore
        for d in second:
            rmq_put(store, d)
        assert store.wait_dispatched(30)
    # Closed within well under a level-1 delay: the second wave is all pending.
    per_level = levels_of(delayed(first))
    assert delay_offsets(path) == per_level

    run = rocketmq4.deliver(path, SIZES, "--delay-levels", LEVELS)
    loaded = run.of("scheduleProgress")[0]["levels"]
    assert {int(k): v["offset"] for k, v in loaded.items()} == per_level
    done = run.of("scheduleProgress")[1]
    assert done["when"] == "delivered"
    check_delivered(run.delivered, delayed(second), SIZES.store_host)

    everything = real_messages(path, SIZES.rmq())
    check_real_queues(everything, first + second)
    # rmqstore reads 4.9.8's file (bare integer keys): every level at its queue's end.
    assert delay_offsets(path) == levels_of(delayed(first + second))
    with open_rmq(path, SIZES.rmq()) as store:
        assert store.schedule_offsets() == levels_of(delayed(first + second))
        assert pending(store) == 0


def test_rocketmq498_schedules_rmqstore_delivers(rocketmq4: JavaHarness, tmp_path: Path) -> None:
    path = tmp_path / "store"
    first, second = wave("w1", 40), wave("w2", 40)
    # Both waves are written with 4.9.8's service stopped (nothing delivered while writing);
    # its service delivers the first one.
    java_write(rocketmq4, path, first, tmp_path / "first.jsonl")
    run = rocketmq4.deliver(path, SIZES, "--delay-levels", LEVELS)
    check_delivered(run.delivered, delayed(first), SIZES.store_host)
    java_delivered = {m["properties"]["seq"]: m for m in run.delivered}
    java_write(rocketmq4, path, second, tmp_path / "second.jsonl")
    # 4.9.8's file: the first wave's counts per level, bare integer keys.
    assert delay_offsets(path) == levels_of(delayed(first))

    with open_rmq(path, SIZES.rmq()) as store:
        time.sleep(max(LEVEL_MS.values()) / 1000)
        wait_no_pending(store)

    everything = real_messages(path, SIZES.rmq())
    check_real_queues(everything, first + second)
    by_seq = {m["properties"]["seq"]: m for m in everything}
    # What 4.9.8 delivered is untouched; rmqstore delivered exactly the second wave.
    for seq, m in java_delivered.items():
        assert by_seq[seq] == {k: m[k] for k in by_seq[seq]}
    check_delivered(
        [by_seq[d["properties"]["seq"]] for d in delayed(second)], delayed(second), SIZES.store_host
    )
    # 4.9.8 reads rmqstore's delayOffset.json: nothing left to deliver.
    again = rocketmq4.deliver(path, SIZES, "--delay-levels", LEVELS)
    assert again.delivered == []
    levels = again.of("scheduleProgress")[0]["levels"]
    assert all(v["offset"] == v["maxOffset"] for v in levels.values()), levels


# -- 5.5.1 broker -----------------------------------------------------------------------------

BROKER_SIZES = BrokerSizes()


def broker_wave(name: str, n: int) -> list[dict[str, Any]]:
    """What the producer sends: every message with a delay level (level 7 clamped)."""
    out = []
    for i in range(n):
        out.append(
            {
                "topic": "DelayA" if i % 3 else "DelayB",
                "queueId": i % 2,
                "tags": f"T{i % 5}" if i % 6 else None,
                "keys": [f"k-{name}-{i}"] if i % 2 else [],
                "properties": {"seq": f"{name}-{i}", "note": "zürich 東京"},
                "delayLevel": 7 if i % 11 == 5 else 1 + i % 3,
                "body": b64((f"{name}:{i}:" + "y" * (i * 17 % 400)).encode()),
                "bornTimestamp": 0,
                "bornHost": "0.0.0.0:0",
                "flag": i % 3,
            }
        )
    return out


def commitlog_record(path: Path, offset: int, size: int, segment: int) -> bytes:
    """A record's bytes from the commitlog segment holding ``offset``."""
    name = path / "commitlog" / f"{offset // segment * segment:020d}"
    with open(name, "rb") as f:
        f.seek(offset % segment)
        return f.read(size)


def cq_units(path: Path, topic: str, qid: int) -> list[tuple[int, int, int]]:
    """A consume queue's units (commitlog offset, size, tag code) from its files, up to the
    first empty unit."""
    out = []
    folder = path / "consumequeue" / topic / str(qid)
    for f in sorted(folder.iterdir()) if folder.is_dir() else []:
        data = f.read_bytes()
        for at in range(0, len(data) - 19, 20):
            off, size, tag = struct.unpack_from(">qiq", data, at)
            if size == 0 and off == 0 and tag == 0:
                return out
            out.append((off, size, tag))
    return out


def masked(record: bytes, sys_flag: int) -> bytes:
    """A commitlog record without its store timestamp (RocketMQ's layout: size, magic, body
    crc, queue id, flag, queue offset, physical offset, sysflag, born timestamp, born host,
    store timestamp, ...)."""
    born_host = 20 if sys_flag & 0x10 else 8
    at = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born_host
    return record[:at] + b"\0" * 8 + record[at + 8 :]


@pytest.fixture(scope="module")
def broker551(tmp_path_factory: pytest.TempPathFactory) -> BrokerHarness:
    import shutil

    from broker_harness import build_broker_harness

    java = shutil.which("java")
    if java is None or shutil.which("mvn") is None:
        pytest.skip("BROKER INTEROP TESTS SKIPPED: java or mvn not on PATH")
    return BrokerHarness(
        java=java,
        classpath=build_broker_harness("rmq551"),
        home=tmp_path_factory.mktemp("broker-home-sched"),
        version="5.5.1",
    )


def test_broker551_schedule_records_equal_rmqstore(
    broker551: BrokerHarness, tmp_path: Path
) -> None:
    path = tmp_path / "broker"
    path.mkdir()
    ports = free_ports()
    sent = broker_wave("b", 30)
    run = broker551.send(
        path, ports, BROKER_SIZES, sent, "--delay-levels", LEVELS, "--no-deliver", "1"
    )
    store_host = run.of("started")[0]["storeHost"]
    assert [s["status"] for s in run.of("sent")] == ["SEND_OK"] * len(sent)
    files = run.of("files")[0]
    assert '"dataVersion"' in files["delayOffset"]

    # The broker's schedule records, read by rmqstore with the broker's sizes (the schedule
    # service is not started: nothing may be delivered while reading).
    # (by the consume queue files and look_message_by_offset, independently of rmqstore's
    # reading of schedule queues, which the last test checks).
    records = []
    with rmqstore.MessageStore(path, read_only=True, **BROKER_SIZES.rmq(store_host)) as store:
        for qid in range(3):
            for off, size, _ in cq_units(path, SCHEDULE_TOPIC, qid):
                m = store.look_message_by_offset(off)
                assert m is not None, (qid, off)
                assert m.store_size == size, (qid, off)
                records.append(m)
    records.sort(key=lambda m: m.commit_log_offset)
    assert len(records) == len(sent)

    # The same input through rmqstore's transform: topic, queue, body, properties (everything
    # the producer and broker set except what the transform adds), born time and host, flag.
    mine = tmp_path / "rmqstore"
    with rmqstore.MessageStore(
        mine, message_delay_level=LEVELS, **BROKER_SIZES.rmq(store_host)
    ) as store:
        for m in records:
            props = {k: v for k, v in m.properties.items() if k not in ("REAL_TOPIC", "REAL_QID")}
            level = int(props.pop("DELAY"))
            tags = props.pop("TAGS", None)
            keys = props.pop("KEYS", None)
            r = store.put_message(
                rmqstore.Message(
                    m.properties["REAL_TOPIC"],
                    m.body,
                    queue_id=int(m.properties["REAL_QID"]),
                    tags=tags,
                    keys=keys.split(" ") if keys else None,
                    properties=props,
                    flag=m.flag,
                    born_timestamp=m.born_timestamp,
                    born_host=m.born_host,
                    delay_level=level,
                )
            )
            assert r.status.name == "PUT_OK"
        assert store.wait_dispatched(30)
        ours = []
        for qid in store.queue_ids(SCHEDULE_TOPIC):
            ours.extend(store.get_message("interop", SCHEDULE_TOPIC, qid, 0, 64, None).messages)
    ours.sort(key=lambda m: m.commit_log_offset)
    for theirs, m in zip(records, ours, strict=True):
        a = commitlog_record(
            path, theirs.commit_log_offset, theirs.store_size, BROKER_SIZES.commitlog
        )
        b = commitlog_record(mine, m.commit_log_offset, m.store_size, BROKER_SIZES.commitlog)
        assert masked(a, theirs.sys_flag) == masked(b, m.sys_flag), theirs.properties["seq"]
    # Consume queue units: same (offset, size), tag code = store time + the level's delay.
    theirs_at = {m.commit_log_offset: m.store_timestamp for m in records}
    ours_at = {m.commit_log_offset: m.store_timestamp for m in ours}
    for qid in range(3):
        theirs_cq = cq_units(path, SCHEDULE_TOPIC, qid)
        ours_cq = cq_units(mine, SCHEDULE_TOPIC, qid)
        assert [u[:2] for u in theirs_cq] == [u[:2] for u in ours_cq]
        assert [tag - theirs_at[off] for off, _, tag in theirs_cq] == [LEVEL_MS[qid + 1]] * len(
            theirs_cq
        )
        assert [tag - ours_at[off] for off, _, tag in ours_cq] == [LEVEL_MS[qid + 1]] * len(ours_cq)

    # rmqstore delivers what the broker left pending, from the broker's delayOffset.json.
    with rmqstore.MessageStore(
        path, message_delay_level=LEVELS, **BROKER_SIZES.rmq(store_host)
    ) as store:
        time.sleep(max(LEVEL_MS.values()) / 1000)
        wait_no_pending(store)
    delivered = real_messages(path, BROKER_SIZES.rmq(store_host))
    assert sorted(m["properties"]["seq"] for m in delivered) == sorted(
        d["properties"]["seq"] for d in sent
    )


def test_rmqstore_schedules_broker551_delivers(broker551: BrokerHarness, tmp_path: Path) -> None:
    """The broker's own ScheduleMessageService (5.5.1) continues rmqstore's partly delivered
    levels from rmqstore's delayOffset.json."""
    ports = free_ports()
    store_host = f"127.0.0.1:{ports[1]}"
    sizes = BROKER_SIZES.rmq(store_host)
    path = tmp_path / "store"
    first, second = wave("w1", 30), wave("w2", 30)
    with open_rmq(path, sizes) as store:
        for d in first:
            rmq_put(store, d)
        wait_no_pending(store)
        for d in second:
            rmq_put(store, d)
        assert store.wait_dispatched(30)
    run = broker551.await_delivery(
        path, ports, BROKER_SIZES, len(delayed(second)), "--delay-levels", LEVELS,
        "--linger-ms", "1500",
    )  # fmt: skip
    got = [
        {**x, "bornHost": norm_host(x["bornHost"]), "storeHost": norm_host(x["storeHost"])}
        for x in run.of("delivered")
    ]
    check_delivered(got, delayed(second), store_host)
    everything = real_messages(path, sizes)
    check_real_queues(everything, first + second)
    assert delay_offsets(path) == levels_of(delayed(first + second))


def test_scheduled_benchmark_runs(tmp_path: Path) -> None:
    """benches/interop_scheduled.py (issue 17's side-by-side figures) runs in its quick mode:
    both sides of both benches measured, the ratios printed (figures: benches/README)."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benches" / "interop_scheduled.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--quick", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.splitlines()[-1])
    assert [r["bench"] for r in results] == ["deliver", "timer_enqueue"]
    for r in results:
        assert r["rocketmq_msgs_per_s"] > 0
        assert r["rmqstore_msgs_per_s"] > 0


def test_read_only_store_reads_rocketmq498_schedule_queues(
    rocketmq4: JavaHarness, tmp_path: Path
) -> None:
    path = tmp_path / "store"
    described = wave("r", 12)
    java_write(rocketmq4, path, described, tmp_path / "w.jsonl")
    want = {lv - 1: n for lv, n in levels_of(delayed(described)).items()}
    # The writer's level table, as its segment sizes: a read-only store checks each schedule
    # unit's tag code against the deliver time the table gives (store time + the level's delay).
    with rmqstore.MessageStore(
        path, read_only=True, message_delay_level=LEVELS, **SIZES.rmq()
    ) as store:
        got = {
            qid: len(store.get_message("g", SCHEDULE_TOPIC, qid, 0, 64, None).messages)
            for qid in want
        }
    assert got == want
