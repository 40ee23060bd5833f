"""Issue 17, timer messages, with Apache RocketMQ 5.5.1's own ``TimerMessageStore`` as the
referee (100 ms precision keeps the tests short).

- ``test_rmqstore_timers_rocketmq551_delivers``: rmqstore delivers a first wave of timer
  messages, puts a second one (``delay_ms``, ``delay_sec``, ``deliver_time_ms``) and closes with
  it pending in its ``timerwheel``, ``timerlog/`` and ``config/timercheck``; the store harness's
  ``timer-deliver`` loads those files with RocketMQ's TimerMessageStore (as the broker sets it
  up) and delivers exactly the second wave, once, into the real queues after the first.
- ``test_broker551_timers_rmqstore_delivers``: a real producer sends timer messages through a
  5.5.1 broker (its put hook, HookUtils.transformTimerMessage, and its TimerMessageStore); the
  broker delivers a first wave and shuts down with the second pending; rmqstore opens the
  broker's files and delivers exactly the second wave, once.
- ``test_rmqstore_timer_delivery_writes_the_properties_rocketmq_writes``: a copy rmqstore
  delivers has the property names RocketMQ's copy of the same kind of message has, in the same
  order (REAL_TOPIC/REAL_QID kept, no WAIT, Java's map order).
"""

from __future__ import annotations

import base64
import shutil
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
import rmqstore
from broker_harness import BrokerHarness, BrokerSizes, build_broker_harness, free_ports
from interop_harness import JavaHarness, Sizes, b64, message_fields, norm_host

pytestmark = pytest.mark.interop

PRECISION = 100
SIZES = Sizes()
TIMER_TOPIC = "rmq_sys_wheel_timer"
SYSTEM = (TIMER_TOPIC, "SCHEDULE_TOPIC_XXXX")
#: What a delivered timer message carries besides what was sent: the transform's deliver time
#: and real topic and queue (RocketMQ's convertMessage clears REAL_* from the map only after it
#: serialised the properties, so the record keeps them), and the dequeue's timestamps.
ADDED = {"TIMER_OUT_MS", "REAL_TOPIC", "REAL_QID", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS"}


def open_rmq(path: Path, sizes: dict[str, Any]) -> rmqstore.MessageStore:
    return rmqstore.MessageStore(path, timer_precision_ms=PRECISION, **sizes)


def real_maxima(store: rmqstore.MessageStore) -> dict[tuple[str, int], int]:
    return {
        (t, q): store.get_max_offset_in_queue(t, q)
        for t in store.topics()
        if t not in SYSTEM
        for q in store.queue_ids(t)
    }


def arrived(store: rmqstore.MessageStore, before: dict[tuple[str, int], int]) -> int:
    return sum(hi - before.get(q, 0) for q, hi in real_maxima(store).items())


def wait_arrived(
    store: rmqstore.MessageStore, before: dict[tuple[str, int], int], n: int, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while arrived(store, before) < n:
        assert time.monotonic() < deadline, (arrived(store, before), n)
        time.sleep(0.01)
    assert store.wait_dispatched(30)


def real_messages(path: Path, sizes: dict[str, Any]) -> list[dict[str, Any]]:
    """Every message of every real queue, read by rmqstore read-only (no service runs)."""
    out = []
    with rmqstore.MessageStore(path, read_only=True, **sizes) as store:
        for topic in sorted(store.topics()):
            if topic in SYSTEM:
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


def timer_wave(name: str, n: int, delay_ms: int, absolute: bool = True) -> list[dict[str, Any]]:
    """``n`` timer messages due about ``delay_ms`` from now, set each of the three ways
    (``absolute=False``: no deliver times, for sends whose moment is not known here)."""
    now = int(time.time() * 1000)
    out = []
    for i in range(n):
        d: dict[str, Any] = {
            "topic": "TimerA" if i % 3 else "TimerB",
            "queueId": i % 2,
            "tags": f"T{i % 4}" if i % 5 else None,
            "keys": [f"k-{name}-{i}"] if i % 2 else [],
            "properties": {"seq": f"{name}-{i}", "note": "zürich 東京"},
            "body": b64((f"{name}:{i}:" + "z" * (i * 29 % 500)).encode()),
            "bornTimestamp": 1_700_000_000_000 + i,
            "bornHost": "10.1.2.3:4567" if i % 4 else "[fd00::9]:4000",
            "flag": i % 3,
        }
        spread = delay_ms + (i % 7) * 150
        if i % 3 == 0 and absolute:
            d["deliverTimeMs"] = now + spread
        elif i % 3 != 2:
            d["delayMs"] = spread
        else:
            d["delaySec"] = max(1, spread // 1000)
        out.append(d)
    return out


#: The harness's field -> rmqstore's Message argument.
TIMER_ARGS = {"deliverTimeMs": "deliver_time_ms", "delayMs": "delay_ms", "delaySec": "delay_sec"}
TIMER_PROPS = {
    "deliverTimeMs": "TIMER_DELIVER_MS",
    "delayMs": "TIMER_DELAY_MS",
    "delaySec": "TIMER_DELAY_SEC",
}


def rmq_put_timer(store: rmqstore.MessageStore, d: dict[str, Any]) -> None:
    r = store.put_message(
        rmqstore.Message(
            d["topic"],
            base64.b64decode(d["body"]),
            queue_id=d["queueId"],
            tags=d.get("tags"),
            keys=d.get("keys") or None,
            properties=d["properties"],
            flag=d["flag"],
            born_timestamp=d["bornTimestamp"],
            born_host=d["bornHost"],
            **{arg: d[k] for k, arg in TIMER_ARGS.items() if k in d},
        )
    )
    assert r.status.name == "PUT_OK", (d, r.status)


def check_timer_delivered(
    got: list[dict[str, Any]],
    want: list[dict[str, Any]],
    store_host: str | None,
) -> None:
    """``got`` holds every message of ``want`` once, in its real queue, with its fields, the
    properties it was sent with and what the timer path adds, delivered no earlier than its
    TIMER_OUT_MS."""
    by_seq: dict[str, dict[str, Any]] = {}
    for m in got:
        seq = m["properties"]["seq"]
        assert seq not in by_seq, f"{seq} delivered twice"
        by_seq[seq] = m
    want_by_seq = {d["properties"]["seq"]: d for d in want}
    assert sorted(by_seq) == sorted(want_by_seq)
    for seq, d in want_by_seq.items():
        m = by_seq[seq]
        assert (m["topic"], m["queueId"]) == (d["topic"], d["queueId"]), seq
        body = base64.b64decode(d["body"])
        assert (m["body"], m["bodyCRC"]) == (d["body"], zlib.crc32(body) & 0x7FFFFFFF)
        assert (m["flag"], m["reconsumeTimes"]) == (d["flag"], 0)
        if store_host is not None:  # written by the test, not sent through a broker
            assert m["bornHost"] == norm_host(d["bornHost"])
            assert m["bornTimestamp"] == d["bornTimestamp"]
            assert m["storeHost"] == norm_host(store_host)
        props = dict(m["properties"])
        real = (props.get("REAL_TOPIC"), props.get("REAL_QID"))
        assert real == (d["topic"], str(d["queueId"])), seq
        out_ms = int(props["TIMER_OUT_MS"])
        assert out_ms % PRECISION == 0
        assert m["storeTimestamp"] >= out_ms, seq
        sent = {TIMER_PROPS[k]: str(d[k]) for k in TIMER_PROPS if k in d}
        if "TIMER_DELIVER_MS" in sent:
            deliver = int(sent["TIMER_DELIVER_MS"])
            # HookUtils.transformTimerMessage: a multiple of the precision moves one slot down.
            want_out = (
                deliver - PRECISION
                if deliver % PRECISION == 0
                else deliver // PRECISION * PRECISION
            )
            assert out_ms == want_out, seq
        for k, v in sent.items():
            assert props.get(k) == v, (seq, k)
        expected_keys = set(d["properties"]) | set(sent) | ADDED
        if d.get("tags"):
            expected_keys.add("TAGS")
        if d.get("keys"):
            expected_keys.add("KEYS")
        extra = set(props) - expected_keys
        missing = expected_keys - set(props)
        assert missing == set(), (seq, missing)
        # A producer adds its own (UNIQ_KEY, CLUSTER, WAIT, ...) to what it sends.
        if store_host is not None:
            assert extra == set(), (seq, extra)
        else:
            assert extra <= {"UNIQ_KEY", "CLUSTER", "WAIT", "MSG_REGION", "TRACE_ON"}, (seq, extra)


def check_queues_gapless(messages: list[dict[str, Any]]) -> None:
    per_queue: dict[tuple[str, int], list[int]] = {}
    for m in messages:
        per_queue.setdefault((m["topic"], m["queueId"]), []).append(m["queueOffset"])
    for q, offsets in per_queue.items():
        assert offsets == list(range(len(offsets))), q


def test_rmqstore_timers_rocketmq551_delivers(rocketmq: JavaHarness, tmp_path: Path) -> None:
    path = tmp_path / "store"
    with open_rmq(path, SIZES.rmq()) as store:
        before = real_maxima(store)
        first = timer_wave("w1", 24, 300)
        for d in first:
            rmq_put_timer(store, d)
        wait_arrived(store, before, len(first), 30)  # delivered by rmqstore
        second = timer_wave("w2", 36, 6000)
        for d in second:
            rmq_put_timer(store, d)
        assert store.wait_dispatched(30)
        # Closed once rmqstore's enqueue put the second wave in its wheel and log.
        deadline = time.monotonic() + 30
        while (st := store.timer_stats())["enqueue_offset"] < st["queue_max_offset"]:
            assert time.monotonic() < deadline, st
            time.sleep(0.01)
        assert store.timer_stats()["pending"] == len(second)
    # RocketMQ's TimerMessageStore on rmqstore's timerwheel, timerlog and timercheck; it gets a
    # moment past the last arrival to show any duplicate.
    run = rocketmq.timer_deliver(
        path, SIZES, len(second), "--timer-precision-ms", str(PRECISION), "--linger-ms", "1500",
        "--timeout-ms", "60000",
    )  # fmt: skip
    check_timer_delivered(run.delivered, second, SIZES.store_host)
    everything = real_messages(path, SIZES.rmq())
    check_queues_gapless(everything)
    check_timer_delivered(everything, first + second, SIZES.store_host)
    check = run.of("timerCheckpoint")[-1]
    assert (
        check["lastTimerQueueOffset"] == check["masterTimerQueueOffset"] == len(first) + len(second)
    )


@pytest.fixture(scope="module")
def broker551(tmp_path_factory: pytest.TempPathFactory) -> BrokerHarness:
    java = shutil.which("java")
    if java is None or shutil.which("mvn") is None:
        pytest.skip("BROKER INTEROP TESTS SKIPPED: java or mvn not on PATH")
    return BrokerHarness(
        java=java,
        classpath=build_broker_harness("rmq551"),
        home=tmp_path_factory.mktemp("broker-home-timer"),
        version="5.5.1",
    )


def test_broker551_timers_rmqstore_delivers(broker551: BrokerHarness, tmp_path: Path) -> None:
    path = tmp_path / "broker"
    path.mkdir()
    ports = free_ports()
    # Relative delays only (the sends happen once the broker is up): the first wave falls due
    # at once, the second well after the broker's shutdown.
    first = timer_wave("w1", 12, 300, absolute=False)
    second = timer_wave("w2", 18, 20_000, absolute=False)
    sizes = BrokerSizes()
    run = broker551.send(
        path, ports, sizes, first + second, "--timer-precision-ms", str(PRECISION),
        "--await", str(len(first)),
    )  # fmt: skip
    assert [s["status"] for s in run.of("sent")] == ["SEND_OK"] * (len(first) + len(second))
    store_host = run.of("started")[0]["storeHost"]
    pending = run.of("pending")[0]
    assert pending["timerCommitQueueOffset"] == pending["timerQueueMax"] == len(first) + len(second)
    rmq_sizes = sizes.rmq(store_host)
    with open_rmq(path, rmq_sizes) as store:
        wait_arrived(store, {}, len(first) + len(second), 60)
        time.sleep(1.5)  # any duplicate would show now
    everything = real_messages(path, rmq_sizes)
    check_queues_gapless(everything)
    # The broker delivered the first wave before it stopped, rmqstore the second after.
    by_broker = {
        m["properties"]["seq"] for m in everything if m["storeTimestamp"] <= pending["nowMs"]
    }
    assert by_broker == {d["properties"]["seq"] for d in first}
    check_timer_delivered(everything, first + second, None)


def test_rmqstore_timer_delivery_writes_the_properties_rocketmq_writes(
    rocketmq: JavaHarness, tmp_path: Path
) -> None:
    """The same kind of timer message delivered once by rmqstore and once by RocketMQ's
    TimerMessageStore on the same store: the delivered records have the same property names."""
    path = tmp_path / "store"
    ours, theirs = timer_wave("o", 6, 300), timer_wave("t", 6, 5000)
    with open_rmq(path, SIZES.rmq()) as store:
        before = real_maxima(store)
        for d in ours + theirs:
            rmq_put_timer(store, d)
        wait_arrived(store, before, len(ours), 30)
    run = rocketmq.timer_deliver(
        path, SIZES, len(theirs), "--timer-precision-ms", str(PRECISION), "--timeout-ms", "60000"
    )
    ours_read = real_messages(path, SIZES.rmq())
    names = {m["properties"]["seq"]: list(m["properties"]) for m in ours_read}
    java = {m["properties"]["seq"]: list(m["properties"]) for m in run.delivered}
    assert sorted(java) == sorted(d["properties"]["seq"] for d in theirs)
    for i in range(6):
        assert names[f"o-{i}"] == java[f"t-{i}"], i
