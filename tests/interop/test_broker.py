"""Issue 15 item 17: a real RocketMQ broker serves a store rmqstore wrote, and rmqstore reads
what real producers sent through that broker.

One broker run per RocketMQ version (``broker`` fixture: 5.5.1 broker and store with the 5.5.0
name server and clients, and 5.3.3 throughout), in one JVM on 127.0.0.1:

1. rmqstore writes (``store_host`` = the broker's ``127.0.0.1:port``, the broker's segment
   sizes), closes; ``config/topics.json`` lists its topics;
2. the broker starts on the folder; a ``DefaultLitePullConsumer`` reads every queue from offset
   0 and commits, ``DefaultMQAdminExt`` gives the topic stats and looks every message up by its
   offset message id, every key and every UNIQ_KEY; all of it must be what rmqstore wrote;
3. a ``DefaultMQProducer`` sends through the broker: single messages (bodies over 4 KiB, which
   the producer zlib-compresses), batches, to a topic rmqstore made and to one the admin
   creates; the broker shuts down;
4. rmqstore opens the folder and reads everything: its own part unchanged, every sent message
   at the queue offset the broker acknowledged, bodies decompressed, each found by its message
   id (batch members too) and by its offset message id; the consumer offsets the broker
   persisted, and the broker's topics.json entries kept.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import pytest
import rmqstore
import rmqstore.offsets
from broker_harness import BrokerHarness, BrokerRun, BrokerSizes, free_ports
from interop_harness import b64, message_fields, norm_host

pytestmark = pytest.mark.interop

SIZES = BrokerSizes()
#: Properties RocketMQ's pull consumer adds to what it hands out (PullAPIWrapper).
CLIENT_ADDED = ("MIN_OFFSET", "MAX_OFFSET")


# -- what rmqstore writes ---------------------------------------------------------------------


def rmqstore_part(rng: random.Random) -> list[dict[str, Any]]:
    """Puts of every shape: keys (some shared), tags (one non-ASCII), UNIQ_KEYs like a
    client's, non-ASCII property values, empty and 6 KiB bodies, IPv6 born hosts, batches, a
    topic with 20 queues and a queue id past the others (TopicA's queue 5)."""
    out: list[dict[str, Any]] = []
    for i in range(120):
        topic = "ManyQueues" if i % 5 == 2 else "TopicA"
        queue = rng.randrange(20) if topic == "ManyQueues" else (5 if i % 17 == 0 else i % 4)
        props = {"seq": str(i)}
        if i % 3 == 0:
            props["note"] = "zürich 東京 🙂"
        if i % 4 == 0:
            props["UNIQ_KEY"] = f"{0x7F0000010000ABCD + i:032X}"
        d: dict[str, Any] = {
            "topic": topic,
            "queue_id": queue,
            "tags": ["TagA", "标签", None][i % 3],
            "keys": [f"p1-{i}", f"shared-{i % 6}"],
            "properties": props,
            "born_host": "[2001:db8::9]:7000" if i % 7 == 0 else f"10.0.0.{i % 200}:{4000 + i}",
            "flag": i % 4,
        }
        if i % 11 == 5:
            d["bodies"] = [rng.randbytes(rng.randrange(0, 400)) for _ in range(rng.randint(2, 4))]
        else:
            d["body"] = b"" if i % 13 == 0 else rng.randbytes(rng.choice([10, 300, 6000]))
        out.append(d)
    return out


def rmq_write_part(store: Path, store_host: str, described: list[dict[str, Any]]) -> None:
    with rmqstore.MessageStore(store, **SIZES.rmq(store_host)) as s:
        for d in described:
            common = {
                "tags": d["tags"],
                "keys": d["keys"],
                "properties": d["properties"],
                "flag": d["flag"],
                "born_host": d["born_host"],
            }
            if "bodies" in d:
                r = s.put_messages(d["topic"], d["queue_id"], d["bodies"], **common)
            else:
                r = s.put_message(
                    rmqstore.Message(d["topic"], d["body"], queue_id=d["queue_id"], **common)
                )
            assert r.ok, r.status
        assert s.wait_dispatched(60)


def describe(m: rmqstore.MessageExt) -> dict[str, Any]:
    """An rmqstore message in the broker harness's field names: what a client hands out has
    the record's UNIQ_KEY as its message id and the offset message id beside it."""
    return {
        **message_fields(m),
        "offsetMsgId": m.msg_id,
        "msgId": m.properties.get("UNIQ_KEY") or m.msg_id,
    }


def rmq_read_all(store: Path, store_host: str) -> dict[tuple[str, int, int], rmqstore.MessageExt]:
    """Every message of the store by (topic, queue id, queue offset), read with get_message."""
    out: dict[tuple[str, int, int], rmqstore.MessageExt] = {}
    with rmqstore.MessageStore(store, **SIZES.rmq(store_host)) as s:
        assert s.wait_dispatched(60)
        for topic in s.topics():
            for qid in s.queue_ids(topic):
                offset = s.get_min_offset_in_queue(topic, qid)
                end = s.get_max_offset_in_queue(topic, qid)
                while offset < end:
                    res = s.get_message("check", topic, qid, offset, 32, None)
                    assert res.messages, (topic, qid, offset, res.status)
                    for m in res.messages:
                        out[(topic, qid, m.queue_offset)] = m
                    offset = res.next_begin_offset
    return out


def java_message(line: dict[str, Any]) -> dict[str, Any]:
    d = {k: v for k, v in line.items() if k != "kind"}
    d["bornHost"] = norm_host(d["bornHost"])
    d["storeHost"] = norm_host(d["storeHost"])
    d["properties"] = {k: v for k, v in sorted(d["properties"].items()) if k not in CLIENT_ADDED}
    return d


def expected_key_lookups(
    messages: dict[tuple[str, int, int], rmqstore.MessageExt],
) -> tuple[dict[tuple[str, str], list[int]], dict[tuple[str, str], list[int]]]:
    """(KEYS lookups, UNIQ_KEY lookups): (topic, key) -> commitlog offsets, ascending."""
    keys: dict[tuple[str, str], list[int]] = {}
    uniq: dict[tuple[str, str], list[int]] = {}
    for (topic, _, _), m in sorted(messages.items()):
        for k in m.keys:
            keys.setdefault((topic, k), []).append(m.commit_log_offset)
        if m.properties.get("UNIQ_KEY"):
            uniq.setdefault((topic, m.properties["UNIQ_KEY"]), []).append(m.commit_log_offset)
    return (
        {k: sorted(v) for k, v in keys.items()},
        {k: sorted(v) for k, v in uniq.items()},
    )


# -- what real producers send -------------------------------------------------------------------


def producer_part(rng: random.Random) -> list[dict[str, Any]]:
    """Sends of every shape: bodies just under, at and over 4 KiB (the producer compresses
    bodies of 4096 bytes and more), text and random bodies up to 20 KiB, batches (never
    compressed), to TopicA (rmqstore's) and Produced (created through the admin)."""
    out: list[dict[str, Any]] = []
    text = ("rmqstore talks to RocketMQ " * 1000).encode()
    sizes = [1, 17, 4095, 4096, 4097, 8826, 20_000]  # the producer refuses empty bodies
    for i in range(40):
        topic = "Produced" if i % 3 == 0 else "TopicA"
        d: dict[str, Any] = {
            "topic": topic,
            "queueId": (i // 3) % 3 if topic == "Produced" else i % 4,
            "tags": ["Sent", "发送", None][i % 3],
            "keys": [f"p2-{i}", f"sent-shared-{i % 5}"],
            "properties": {"n": str(i), "note": "ünïcødé 🚀"},
            "flag": i % 2,
        }
        if i % 6 == 5:
            d["bodies"] = [
                b64(rng.randbytes(rng.randrange(1, 600))) for _ in range(rng.randint(2, 5))
            ]
        else:
            size = sizes[i % len(sizes)]
            body = text[:size] if i % 2 else rng.randbytes(size)
            d["body"] = b64(body)
        out.append(d)
    return out


def sent_records(
    described: list[dict[str, Any]], sent: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One entry per stored record the sends made: where the broker acknowledged it, its
    message id (UNIQ_KEY), offset message id and the body the producer was given."""
    assert len(sent) == len(described)
    out = []
    for d, s in zip(described, sent, strict=True):
        assert s["status"] == "SEND_OK", s
        bodies = d["bodies"] if "bodies" in d else [d["body"]]
        ids = s["msgId"].split(",")
        offset_ids = s["offsetMsgId"].split(",")
        assert len(ids) == len(offset_ids) == len(bodies)
        for i, (body, msg_id, offset_id) in enumerate(zip(bodies, ids, offset_ids, strict=True)):
            out.append(
                {
                    "described": d,
                    "batch": "bodies" in d,
                    "queueId": s["queueId"],
                    "queueOffset": s["queueOffset"] + i,
                    "msgId": msg_id,
                    "offsetMsgId": offset_id,
                    "body": base64.b64decode(body),
                }
            )
    return out


# -- the round trip -----------------------------------------------------------------------------


def check_broker_read(
    run: BrokerRun, ours: dict[tuple[str, int, int], rmqstore.MessageExt], ports: tuple
) -> None:
    """What the broker's clients read is exactly what rmqstore wrote and reads."""
    namesrv, broker_port, ha = ports
    assert run.listening, "no listening socket found for the JVM"
    assert {addr for addr, _ in run.listening} == {"127.0.0.1"}, run.listening
    assert {namesrv, broker_port, broker_port - 2, ha} <= {p for _, p in run.listening}
    started = run.of("started")[0]
    assert norm_host(started["storeHost"]) == f"127.0.0.1:{broker_port}"
    # Admin stats: every queue rmqstore has, with its offsets.
    stats = {(x["topic"], x["queueId"]): (x["minOffset"], x["maxOffset"]) for x in run.of("stats")}
    want_stats: dict[tuple[str, int], tuple[int, int]] = {}
    for topic, qid, offset in ours:
        _, hi = want_stats.get((topic, qid), (0, 0))
        want_stats[(topic, qid)] = (0, max(hi, offset + 1))
    assert {k: v for k, v in stats.items() if v != (0, 0)} == want_stats
    # The pull consumer: every message once, field by field.
    got = {(x["topic"], x["queueId"], x["queueOffset"]): java_message(x) for x in run.of("msg")}
    assert len(run.of("msg")) == len(ours)
    assert sorted(got) == sorted(ours)
    for k, m in ours.items():
        assert got[k] == describe(m), k
    # The admin's viewMessage by offset message id: the same messages.
    views = run.of("view")
    assert len(views) == len(ours)
    for v in views:
        d = java_message(v)
        assert d == describe(ours[(d["topic"], d["queueId"], d["queueOffset"])])
    # The admin's key and UNIQ_KEY lookups through the broker's index: exactly the carriers.
    keys, uniq = expected_key_lookups(ours)
    assert {(x["topic"], x["key"]): sorted(x["offsets"]) for x in run.of("query")} == keys
    assert {(x["topic"], x["key"]): sorted(x["offsets"]) for x in run.of("uniqQuery")} == uniq


def check_rmqstore_reads_sends(
    store: Path,
    store_host: str,
    records: list[dict[str, Any]],
    before: dict[tuple[str, int, int], rmqstore.MessageExt],
    run: BrokerRun,
) -> None:
    """rmqstore reads every sent message where the broker acknowledged it, as the broker's
    own viewMessage does, decompressed, by message id (answering each id exactly as the
    broker's index lookup) and by offset message id, and its own part unchanged."""
    views = {v["offsetMsgId"]: java_message(v) for v in run.of("sentView")}
    broker_lookups = {(x["topic"], x["key"]): sorted(x["offsets"]) for x in run.of("sentQuery")}
    after = rmq_read_all(store, store_host)
    assert len(after) == len(before) + len(records)
    for k, m in before.items():
        assert describe(after[k]) == describe(m)
    flag_differences: list[tuple[str, int, int]] = []
    with rmqstore.MessageStore(store, **SIZES.rmq(store_host)) as s:
        compressed = 0
        for r in records:
            d = r["described"]
            m = after[(d["topic"], r["queueId"], r["queueOffset"])]
            assert m.body == r["body"], (d["topic"], r["queueOffset"], len(r["body"]))
            assert m.msg_id == r["offsetMsgId"]
            # RocketMQ's decoder clears the COMPRESSED flag of a body it decompresses
            # (MessageDecoder.decode): rmqstore's decompressed messages must look the same.
            # Compared last, so that everything else is checked first.
            mine, theirs = describe(m), views[r["offsetMsgId"]]
            if mine["sysFlag"] != theirs["sysFlag"]:
                flag_differences.append((r["offsetMsgId"], mine["sysFlag"], theirs["sysFlag"]))
            assert {**mine, "sysFlag": 0} == {**theirs, "sysFlag": 0}
            # The message id the send returned is the record's UNIQ_KEY; RocketMQ 5.3.3's batch
            # members also hold the batch's id after their own, and (the last value winning,
            # as in RocketMQ's property map) that is the one they are stored and indexed under.
            uniq = m.properties["UNIQ_KEY"]
            if not r["batch"]:
                assert uniq == r["msgId"]
            for key in {uniq, r["msgId"]}:
                ours = sorted(x.commit_log_offset for x in s.query_message(d["topic"], key, 64))
                assert ours == broker_lookups[(d["topic"], key)], (key, r["msgId"])
            assert m.commit_log_offset in broker_lookups[(d["topic"], uniq)]
            assert m.keys == d["keys"]
            assert m.tags == d["tags"]
            assert {k: m.properties[k] for k in d["properties"]} == d["properties"]
            assert m.flag == d["flag"]
            assert norm_host(m.store_host) == store_host
            if m.compression is not None:
                compressed += 1
                assert m.compression.upper() == "ZLIB"
                assert m.stored_body != m.body
            else:
                assert m.stored_body == m.body
            # The producer compresses single messages of 4096 bytes and more, never batches.
            assert (m.compression is not None) == (not r["batch"] and len(r["body"]) >= 4096)
            if uniq == r["msgId"]:  # a member found by its own id: that member only
                found = s.query_message(d["topic"], r["msgId"])
                assert [(x.commit_log_offset, x.body) for x in found] == [
                    (m.commit_log_offset, r["body"])
                ]
            looked = s.look_message_by_offset(int(r["offsetMsgId"][-16:], 16))
            assert looked is not None
            assert (looked.msg_id, looked.body) == (r["offsetMsgId"], r["body"])
            for k in d["keys"]:
                assert m.commit_log_offset in {
                    x.commit_log_offset for x in s.query_message(d["topic"], k, 64)
                }
        assert compressed >= 5
        # read_batch hands out the bodies the producers sent too.
        sent_bodies = {
            (r["described"]["topic"], r["queueId"], r["queueOffset"]): r["body"] for r in records
        }
        for topic, qid in {(t, q) for t, q, _ in sent_bodies}:
            batch = s.read_batch(topic, qid, 0, 10_000)
            offsets = batch.column("queue_offset").to_pylist()
            bodies = batch.column("body").to_pylist()
            for off, body in zip(offsets, bodies, strict=True):
                if (topic, qid, off) in sent_bodies:
                    assert body == sent_bodies[(topic, qid, off)]
    assert flag_differences == [], "sys_flag of decompressed messages differs from RocketMQ's"


def test_broker_serves_rmqstore_and_rmqstore_reads_the_broker(
    broker: BrokerHarness, tmp_path: Path
) -> None:
    rng = random.Random(17)
    ports = free_ports()
    store_host = f"127.0.0.1:{ports[1]}"
    store = tmp_path / "store"
    # 1. rmqstore writes; topics.json lists its topics (TopicA with 6 queues: queue 5 is used).
    rmq_write_part(store, store_host, rmqstore_part(rng))
    topics_doc = json.loads((store / "config" / "topics.json").read_text())
    assert topics_doc["topicConfigTable"]["TopicA"]["readQueueNums"] == 6
    ours = rmq_read_all(store, store_host)
    # 2 + 3. The broker serves it to a consumer and an admin, then producers send through it.
    produce = producer_part(rng)
    run = broker.serve(store, ports, SIZES, ["TopicA", "ManyQueues"], produce)
    check_broker_read(run, ours, ports)
    committed = run.of("committed")[0]["offsets"]
    many = 1 + max(q for t, q, _ in ours if t == "ManyQueues")
    assert len(committed) == 6 + many
    # 4. rmqstore reads everything.
    records = sent_records(produce, run.of("sent"))
    check_rmqstore_reads_sends(store, store_host, records, ours, run)
    # The offsets the consumer committed, persisted by the broker (its own fastjson file).
    with rmqstore.MessageStore(store, **SIZES.rmq(store_host)) as s:
        for key, offset in committed.items():
            topic, _, qid = key.rpartition("/")
            assert s.query_offset("interop-reader", topic, int(qid)) == offset
    # topics.json: the broker's entries (system topics, the admin-created Produced) are kept
    # through rmqstore's opens; rmqstore only added or grew.
    table = json.loads((store / "config" / "topics.json").read_text())["topicConfigTable"]
    assert {"SCHEDULE_TOPIC_XXXX", "TopicA", "ManyQueues", "Produced"} <= set(table)
    assert table["TopicA"]["readQueueNums"] == table["TopicA"]["writeQueueNums"] == 6
    assert table["ManyQueues"]["readQueueNums"] == many
    assert table["Produced"]["readQueueNums"] == 3


# -- consumerOffset.json as RocketMQ's ConfigManager reads it (issue 15 item 14) -----------------

#: Files RocketMQ's decoder (fastjson2) reads by guessing, in 5.5.1 or 5.3.3 (measured; the
#: reading in the comment): rmqstore refuses every one of them (falling back to the .bak).
#: Every other file of store/test_offsets.BAD_CONTENT RocketMQ refuses too.
ROCKETMQ_GUESSES = {
    "queue_id_0_0",  # 5.5.1: "0_0" is queue 0, replacing its offset (5.3.3 refuses)
    "queue_id_plus",  # "+1" is queue 1
    "queue_id_leading_zero",  # "01" is queue 1
    "queue_id_minus_zero",  # "-0" is queue 0
    "queue_id_decimal_point",  # "1.0" is queue 1
    "queue_id_hex",  # 5.5.1: "0x1" is queue 0
    "offset_is_string",  # "5" is 5
    "offset_string_number",
    "offset_is_float",  # 5.0 is 5
    "offset_fraction",  # 12.5 is 12
    "offset_exponent",  # 1e3 is 1000
    "offset_huge_exponent",  # 5.5.1: 1e400 is Long.MAX_VALUE
    "offset_is_bool",  # true is 1
    "offset_list",  # 5.5.1: [12] is 12
    "duplicate_queue",  # the last of two equal keys wins
    "duplicate_queue_bare_and_quoted",
    "duplicate_group",
    "duplicate_top_level_key",
    "comment",
    "single_quotes",
    "byte_order_mark",
    "nul_byte",  # a NUL before the closing brace is skipped
    "not_utf8",  # bad bytes become U+FFFD in a key
    "utf8_encoded_surrogate",
    "top_null",  # no table at all (a broker would fail on its first query)
    "top_level_list",  # 5.3.3: an empty table
}
#: Files on which RocketMQ's load does not return: 5.5.1 overflows its stack on deep nesting
#: (a StackOverflowError escapes ConfigManager.load's catch of Exception).
ROCKETMQ_FAILS = {"deep_nesting"}


#: Well-formed entries both keep (rmqstore answers -1 for the negative offsets).
BOTH_KEEP = {
    "negative_offsets": b'{"offsetTable": {"T@G": {"0": -5, "-1": 3, "1": 7}, "NoAt": {"0": 1}}}',
    "fastjson_output": b'{"offsetTable":{"T@G":{0:12,1:7}},"dataVersion":{"counter":2}}',
}


def test_consumer_offset_files_decoded_as_rocketmq_decides(
    broker: BrokerHarness, tmp_path: Path
) -> None:
    """Every malformed consumerOffset.json of store/test_offsets, loaded by RocketMQ's own
    ConsumerOffsetManager (ConfigManager.load) and by rmqstore, each with a good .bak:
    rmqstore refuses every one (and loads the .bak); RocketMQ refuses each too, except the
    ones it reads by guessing (ROCKETMQ_GUESSES) or cannot load at all (ROCKETMQ_FAILS).
    Files with well-formed entries load to the same table on both sides."""
    from store.test_offsets import BAD_CONTENT

    bak = {"offsetTable": {"BAK@G": {"0": 1}}}
    cases = {**BAD_CONTENT, **BOTH_KEEP}
    dirs = {}
    for name, content in cases.items():
        d = tmp_path / "rocketmq" / name
        d.mkdir(parents=True)
        (d / "consumerOffset.json").write_bytes(content)
        (d / "consumerOffset.json.bak").write_text(json.dumps(bak))
        dirs[name] = d
    theirs = {Path(x["dir"]).name: x for x in broker.load_offsets(list(dirs.values()))}
    assert set(theirs) == set(cases)
    for name, content in cases.items():
        t = theirs[name]
        d = tmp_path / "rmqstore" / name
        d.mkdir(parents=True)
        (d / "consumerOffset.json").write_bytes(content)
        (d / "consumerOffset.json.bak").write_text(json.dumps(bak))
        with rmqstore.offsets.ConsumerOffsetManager(d) as m:
            ours = m.offset_table()
        if "error" in t:
            assert name in ROCKETMQ_FAILS, (name, t)
            continue
        rocketmq_refused = t["table"] == {"BAK@G": {"0": 1}}
        if name in BOTH_KEEP:
            assert not rocketmq_refused, (name, t)
            want = {k: {int(q): o for q, o in v.items()} for k, v in t["table"].items()}
            assert ours == want, name
            continue
        # rmqstore refuses every malformed file: the .bak is loaded, the bad file deleted.
        assert ours == {"BAK@G": {0: 1}}, name
        assert not (d / "consumerOffset.json").exists()
        if not rocketmq_refused:
            assert name in ROCKETMQ_GUESSES, (name, t)
