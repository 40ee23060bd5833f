"""Both sides of the interop tests: Apache RocketMQ's ``DefaultMessageStore`` (through the Java
harness in ``java/``) and rmqstore, driven with the same messages and segment sizes and dumped
into the same shape, so that a test compares two plain Python structures.

A message is described as the JSON object the harness reads (one per put)::

    {"topic": "T", "queueId": 0, "tags": "TagA" | None, "keys": ["k1", ...],
     "properties": {"name": "value", ...}, "body": base64 | "bodies": [base64, ...] (a batch),
     "bornTimestamp": ms, "bornHost": "ip:port" | "[ip6]:port", "flag": int}

Both writers store exactly the properties TAGS (if any), KEYS (space-joined, if any) and the
given ones: nothing is added on either side (the client-side UNIQ_KEY/WAIT are not set).
"""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import json
import os
import subprocess
import zlib
from pathlib import Path
from typing import Any

import rmqstore
from maven_build import MavenProject

#: The harness's Maven project: the current 5.x release (default profile) and 4.9.x.
JAVA_DIR = Path(__file__).resolve().parent / "java"
PROJECT = MavenProject(
    name="RocketMQ interop harness",
    directory=JAVA_DIR,
    jar="rmq-interop-harness-1.0.jar",
    default_profile="rmq5",
    profiles={"rmq5": JAVA_DIR / "target", "rmq4": JAVA_DIR / "target" / "rmq4"},
    needs="rocketmq-store",
)


def build_harness(profile: str = "rmq5") -> str:
    """Builds the harness for a profile if needed; returns its classpath (``java -cp``)."""
    return PROJECT.build(profile)


@dataclasses.dataclass(frozen=True)
class SegmentSizes:
    """Commitlog segment and consume queue file sizes, index hash slots and entries per file:
    what RocketMQ (both harnesses' options) and rmqstore must be given alike."""

    commitlog: int
    cq: int
    hash_slots: int
    index_num: int

    def java_args(self) -> list[str]:
        return [
            "--commitlog-size", str(self.commitlog),
            "--cq-size", str(self.cq),
            "--hash-slots", str(self.hash_slots),
            "--index-num", str(self.index_num),
        ]  # fmt: skip

    def rmq_sizes(self) -> dict[str, Any]:
        return {
            "mapped_file_size_commit_log": self.commitlog,
            "mapped_file_size_consume_queue": self.cq,
            "max_hash_slot_num": self.hash_slots,
            "max_index_num": self.index_num,
        }


@dataclasses.dataclass(frozen=True)
class Sizes(SegmentSizes):
    """Segment sizes, store host and flush, given identically to both stores."""

    commitlog: int = 64 * 1024
    cq: int = 20 * 10
    hash_slots: int = 64
    index_num: int = 50
    store_host: str = "127.0.0.1:10911"
    flush: str = "ASYNC_FLUSH"

    def java_args(self) -> list[str]:
        return [*super().java_args(), "--store-host", self.store_host, "--flush", self.flush]

    def rmq(self) -> dict[str, Any]:
        return {**self.rmq_sizes(), "store_host": self.store_host, "flush_disk_type": self.flush}


def norm_host(host: str) -> str:
    """``ip:port`` with the address in Python's canonical form (Java prints IPv6 uncompressed)."""
    addr, _, port = host.rpartition(":")
    ip = ipaddress.ip_address(addr.strip("[]"))
    return f"[{ip.compressed}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def expected_properties(d: dict[str, Any]) -> dict[str, str]:
    props: dict[str, str] = {}
    if d.get("tags"):
        props["TAGS"] = d["tags"]
    if d.get("keys"):
        props["KEYS"] = " ".join(d["keys"])
    props.update(d.get("properties") or {})
    return props


def expand(described: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per stored record (a batch gives one per body), in put order."""
    out: list[dict[str, Any]] = []
    for d in described:
        bodies = d["bodies"] if "bodies" in d else [d["body"]]
        out.extend({**d, "body": body} for body in bodies)
    return out


# -- dumps ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Dump:
    """Everything one store reader saw in a store."""

    max_phy_offset: int
    #: (topic, queue id) -> (min offset, max offset)
    queues: dict[tuple[str, int], tuple[int, int]]
    #: every message read by queue, in (topic, queue, offset) order
    messages: list[dict[str, Any]]
    #: lookMessageByOffset of every message's commitlog offset
    looked: dict[int, dict[str, Any] | None]
    #: (topic, key) -> commitlog offsets queryMessage returned, ascending
    queries: dict[tuple[str, str], list[int]]
    #: reads by queue that stopped before the queue's max offset
    stopped: list[dict[str, Any]]
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def comparable(self) -> dict[str, Any]:
        return {
            "max_phy_offset": self.max_phy_offset,
            "queues": self.queues,
            "messages": self.messages,
            "looked": self.looked,
            "queries": self.queries,
            "stopped": self.stopped,
        }

    def keys(self) -> list[tuple[str, str]]:
        return sorted(self.queries)


def _message_keys(topic: str, props: dict[str, str]) -> list[tuple[str, str]]:
    keys = []
    if props.get("UNIQ_KEY"):
        keys.append((topic, props["UNIQ_KEY"]))
    keys += [(topic, k) for k in props.get("KEYS", "").split(" ") if k]
    return keys


def message_fields(m: rmqstore.MessageExt) -> dict[str, Any]:
    """An rmqstore message in the fields both Java harnesses print (``HarnessSupport.describe``
    in ``shared-java/``): each harness adds its own."""
    return {
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "commitLogOffset": m.commit_log_offset,
        "storeSize": m.store_size,
        "storeTimestamp": m.store_timestamp,
        "bornTimestamp": m.born_timestamp,
        "sysFlag": m.sys_flag,
        "flag": m.flag,
        "bodyCRC": m.body_crc,
        "reconsumeTimes": m.reconsume_times,
        "bornHost": norm_host(m.born_host),
        "storeHost": norm_host(m.store_host),
        "msgId": m.msg_id,
        "properties": dict(sorted(m.properties.items())),
        "body": b64(m.body),
    }


def describe_rmq(m: rmqstore.MessageExt) -> dict[str, Any]:
    """An rmqstore message in the store harness's field names."""
    return {**message_fields(m), "preparedTransactionOffset": m.prepared_transaction_offset}


def rmq_dump(path: Path, sizes: Sizes) -> Dump:
    """Opens the store with rmqstore (recovering it as it finds it) and reads everything."""
    with rmqstore.MessageStore(path, **sizes.rmq()) as store:
        assert store.wait_dispatched(60), "rmqstore dispatch did not catch up"
        queues: dict[tuple[str, int], tuple[int, int]] = {}
        messages: list[dict[str, Any]] = []
        looked: dict[int, dict[str, Any] | None] = {}
        stopped: list[dict[str, Any]] = []
        keys: dict[tuple[str, str], None] = {}
        for topic in sorted(store.topics()):
            for qid in store.queue_ids(topic):
                lo = store.get_min_offset_in_queue(topic, qid)
                hi = store.get_max_offset_in_queue(topic, qid)
                if hi > 0:
                    queues[(topic, qid)] = (lo, hi)
                offset = lo
                while offset < hi:
                    res = store.get_message("interop", topic, qid, offset, 32, None)
                    if not res.messages:
                        stopped.append(
                            {
                                "topic": topic,
                                "queueId": qid,
                                "offset": offset,
                                "status": res.status.name,
                            }
                        )
                        break
                    for m in res.messages:
                        d = describe_rmq(m)
                        messages.append(d)
                        for k in _message_keys(topic, m.properties):
                            keys[k] = None
                        lm = store.look_message_by_offset(m.commit_log_offset)
                        looked[m.commit_log_offset] = None if lm is None else describe_rmq(lm)
                    offset = res.next_begin_offset
        queries = {
            (topic, key): sorted(
                m.commit_log_offset for m in store.query_message(topic, key, 64, 0, None)
            )
            for topic, key in keys
        }
        return Dump(
            max_phy_offset=store.get_max_phy_offset(),
            queues=queues,
            messages=messages,
            looked=looked,
            queries=queries,
            stopped=stopped,
            extra={"recovery": store.recovery_report()},
        )


def _java_message(line: dict[str, Any]) -> dict[str, Any]:
    d = {k: v for k, v in line.items() if k not in ("kind", "offset")}
    d["bornHost"] = norm_host(d["bornHost"])
    d["storeHost"] = norm_host(d["storeHost"])
    d["properties"] = dict(sorted(d["properties"].items()))
    return d


def parse_java_dump(out: str) -> Dump:
    queues: dict[tuple[str, int], tuple[int, int]] = {}
    messages: list[dict[str, Any]] = []
    looked: dict[int, dict[str, Any] | None] = {}
    queries: dict[tuple[str, str], list[int]] = {}
    tag_queries: dict[tuple[str, str], list[int]] = {}
    stopped: list[dict[str, Any]] = []
    info: dict[str, Any] = {}
    closed: dict[str, Any] = {}
    for raw in out.splitlines():
        line = json.loads(raw)
        kind = line["kind"]
        if kind == "info":
            info = line
        elif kind == "queue":
            # Empty queues are left out on both sides (4.9.x always lists its 18 empty
            # SCHEDULE_TOPIC_XXXX queues).
            if line["maxOffset"] > 0:
                queues[(line["topic"], line["queueId"])] = (line["minOffset"], line["maxOffset"])
        elif kind == "msg":
            messages.append(_java_message(line))
        elif kind == "look":
            looked[line["offset"]] = _java_message(line) if "topic" in line else None
        elif kind == "query":
            queries[(line["topic"], line["key"])] = sorted(line["offsets"])
        elif kind == "tagQuery":
            # RocketMQ 5.4+ only (queryMessage with index type "T").
            tag_queries[(line["topic"], line["tag"])] = sorted(line["offsets"])
        elif kind == "getMessageStopped":
            stopped.append({k: line[k] for k in ("topic", "queueId", "offset", "status")})
        elif kind == "closed":
            closed = line
        else:
            raise AssertionError(f"unexpected harness line {raw[:200]}")
    assert info, f"no info line in the harness output: {out[:2000]}"
    assert closed, "the harness did not report its shutdown"
    # Queues RocketMQ knows but holds nothing in (none expected) would show as (0, 0).
    return Dump(
        max_phy_offset=info["maxPhyOffset"],
        queues=queues,
        messages=messages,
        looked=looked,
        queries=queries,
        stopped=stopped,
        extra={"info": info, "closed": closed, "tag_queries": tag_queries},
    )


# -- writers -------------------------------------------------------------------------------


def rmq_put(store: rmqstore.MessageStore, d: dict[str, Any]) -> dict[str, Any]:
    """Puts one described message (or batch) with rmqstore; the result in the harness's shape."""
    common: dict[str, Any] = {
        "tags": d.get("tags"),
        "keys": d.get("keys") or None,
        "properties": d.get("properties") or None,
        "flag": d.get("flag", 0),
        "born_timestamp": d["bornTimestamp"],
        "born_host": d["bornHost"],
    }
    if "bodies" in d:
        bodies = [base64.b64decode(b) for b in d["bodies"]]
        r = store.put_messages(d["topic"], d["queueId"], bodies, **common)
    else:
        r = store.put_message(
            rmqstore.Message(
                d["topic"], base64.b64decode(d["body"]), queue_id=d["queueId"], **common
            )
        )
    return {
        "status": r.status.name,
        "wroteOffset": r.wrote_offset,
        "queueOffset": r.queue_offset,
        "msgNum": r.msg_num,
    }


def rmq_write(
    path: Path, sizes: Sizes, described: list[dict[str, Any]], **settings: Any
) -> list[dict[str, Any]]:
    with rmqstore.MessageStore(path, **{**sizes.rmq(), **settings}) as store:
        results = [rmq_put(store, d) for d in described]
        assert store.wait_dispatched(60)
    return results


#: RocketMQ unmaps segments through JDK internals (4.9.x needs all of these on Java 17).
JDK_INTERNALS = (
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
)


def jvm_command(
    java: str, home: Path, classpath: str, main: str, *args: str, jvm: tuple[str, ...] = ()
) -> list[str]:
    """The command line of a harness JVM (either project): the JDK internals RocketMQ needs,
    ``jvm`` options, ``user.home`` (RocketMQ writes its logs under it), the class and its
    arguments."""
    return [java, *JDK_INTERNALS, *jvm, f"-Duser.home={home}", "-cp", classpath, main, *args]


@dataclasses.dataclass
class JavaHarness:
    """Runs ``rmqinterop.Harness`` (Apache RocketMQ's store) in a fresh JVM per command."""

    java: str
    classpath: str
    home: Path  # user.home of the JVMs: RocketMQ writes its logs under it

    def command(self, sizes: Sizes, *args: str) -> list[str]:
        return jvm_command(
            self.java, self.home, self.classpath, "rmqinterop.Harness", *sizes.java_args(), *args
        )

    def run(self, sizes: Sizes, *args: str, timeout: float = 180) -> str:
        proc = subprocess.run(
            self.command(sizes, *args),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert proc.returncode == 0, (
            f"harness {args[0]} exited {proc.returncode}\nstdout: {proc.stdout[-3000:]}\n"
            f"stderr: {proc.stderr[-5000:]}"
        )
        return proc.stdout

    def write(
        self, path: Path, sizes: Sizes, described: list[dict[str, Any]], scratch: Path
    ) -> list[dict[str, Any]]:
        """Puts the messages with RocketMQ; the put results (status, offsets) in order."""
        scratch.mkdir(parents=True, exist_ok=True)
        jsonl = scratch / f"messages-{os.getpid()}-{len(list(scratch.iterdir()))}.jsonl"
        jsonl.write_text("".join(json.dumps(d) + "\n" for d in described))
        out = self.run(sizes, "write", str(path), str(jsonl))
        lines = [json.loads(x) for x in out.splitlines()]
        puts = [x for x in lines if x["kind"] == "put"]
        closed = [x for x in lines if x["kind"] == "closed"]
        assert len(puts) == len(described)
        assert closed == [{"kind": "closed", "abortFileLeft": False}], closed
        return [{k: p[k] for k in ("status", "wroteOffset", "queueOffset", "msgNum")} for p in puts]

    def read(self, path: Path, sizes: Sizes) -> Dump:
        return parse_java_dump(self.run(sizes, "read", str(path)))

    def clean(self, path: Path, sizes: Sizes, *options: str) -> dict[str, Any]:
        """``clean``: RocketMQ's own expired-file deletion on the store
        (``executeDeleteFilesManually`` and the clean services' rounds until one removes
        nothing; ``--file-reserved-hours`` among ``options``, 72 by default); its ``cleaned``
        line (the commitlog's min offset before and after, the rounds run)."""
        lines = [json.loads(x) for x in self.run(sizes, *options, "clean", str(path)).splitlines()]
        cleaned = [x for x in lines if x["kind"] == "cleaned"]
        closed = [x for x in lines if x["kind"] == "closed"]
        assert len(cleaned) == 1, lines
        assert closed == [{"kind": "closed", "abortFileLeft": False}], closed
        return cleaned[0]

    def deliver(self, path: Path, sizes: Sizes, *options: str, timeout: float = 120) -> Delivery:
        """4.9.x: ``deliver`` (RocketMQ's ScheduleMessageService on the store until every level's
        progress is at its queue's end, or ``--deliver-count N``); what it delivered."""
        return Delivery.parse(self.run(sizes, *options, "deliver", str(path), timeout=timeout))

    def timer_deliver(
        self, path: Path, sizes: Sizes, expect: int, *options: str, timeout: float = 120
    ) -> Delivery:
        """5.x: ``timer-deliver`` (RocketMQ's TimerMessageStore on the store's timerwheel,
        timerlog and timercheck until ``expect`` messages arrived in real queues)."""
        out = self.run(
            sizes, *options, "--expect", str(expect), "timer-deliver", str(path), timeout=timeout
        )
        return Delivery.parse(out)


@dataclasses.dataclass
class Delivery:
    """What a harness's delivery command printed: the messages that arrived in real queues
    (in the shared field names, by topic, queue and offset) and its other lines by kind."""

    delivered: list[dict[str, Any]]
    lines: list[dict[str, Any]]

    @classmethod
    def parse(cls, out: str) -> Delivery:
        lines = [json.loads(x) for x in out.splitlines()]
        delivered = [_java_message(x) for x in lines if x["kind"] == "delivered"]
        return cls(delivered=delivered, lines=[x for x in lines if x["kind"] != "delivered"])

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [x for x in self.lines if x["kind"] == kind]


# -- checks --------------------------------------------------------------------------------


def check_matches_described(
    dump: Dump, described: list[dict[str, Any]], puts: list[dict[str, Any]], sizes: Sizes
) -> None:
    """The dump holds exactly the described messages, where the puts said they went."""
    assert [p["status"] for p in puts] == ["PUT_OK"] * len(puts)
    records = expand(described)
    by_offset = sorted(dump.messages, key=lambda m: m["commitLogOffset"])
    assert len(by_offset) == len(records)
    # Put results: the first record of each put at its wroteOffset with its queueOffset.
    at = 0
    for d, p in zip(described, puts, strict=True):
        n = len(d["bodies"]) if "bodies" in d else 1
        assert p["msgNum"] == n
        first = by_offset[at]
        assert (first["commitLogOffset"], first["queueOffset"]) == (
            p["wroteOffset"],
            p["queueOffset"],
        ), d
        for i in range(1, n):  # a batch: consecutive queue offsets, contiguous records
            prev, cur = by_offset[at + i - 1], by_offset[at + i]
            assert cur["queueOffset"] == prev["queueOffset"] + 1
            assert cur["commitLogOffset"] == prev["commitLogOffset"] + prev["storeSize"]
        at += n
    for rec, got in zip(records, by_offset, strict=True):
        want = {
            "topic": rec["topic"],
            "queueId": rec["queueId"],
            "body": rec["body"],
            "bornTimestamp": rec["bornTimestamp"],
            "bornHost": norm_host(rec["bornHost"]),
            "storeHost": norm_host(sizes.store_host),
            "flag": rec.get("flag", 0),
            "properties": dict(sorted(expected_properties(rec).items())),
            "reconsumeTimes": 0,
            "preparedTransactionOffset": 0,
            "bodyCRC": zlib.crc32(base64.b64decode(rec["body"])) & 0x7FFFFFFF,
        }
        assert {k: got[k] for k in want} == want
    # Queue offsets: every queue numbered 0.. without gaps, in commitlog order.
    per_queue: dict[tuple[str, int], list[int]] = {}
    for m in by_offset:
        per_queue.setdefault((m["topic"], m["queueId"]), []).append(m["queueOffset"])
    for q, offsets in per_queue.items():
        assert offsets == list(range(len(offsets))), q
        assert dump.queues[q] == (0, len(offsets))
    assert set(dump.queues) == set(per_queue)
    # Every message is found again by its commitlog offset, identical.
    for m in dump.messages:
        assert dump.looked[m["commitLogOffset"]] == m
    # Every key finds exactly the messages that carry it.
    assert dump.queries == expected_queries(dump)
    assert dump.stopped == []


def expected_tag_queries(dump: Dump) -> dict[tuple[str, str], list[int]]:
    """What a tag query should answer for every (topic, TAGS value): the offsets of the
    messages carrying exactly that value (at most 64, the harness's query size)."""
    want: dict[tuple[str, str], set[int]] = {}
    for m in dump.messages:
        if m["properties"].get("TAGS"):
            want.setdefault((m["topic"], m["properties"]["TAGS"]), set()).add(m["commitLogOffset"])
    return {k: sorted(v) for k, v in want.items()}


def rmq_tag_queries(path: Path, sizes: Sizes, tags: list[tuple[str, str]]) -> dict[Any, Any]:
    """rmqstore's ``query_message_by_tag`` for every (topic, tag), offsets ascending."""
    with rmqstore.MessageStore(path, **sizes.rmq()) as store:
        return {
            (topic, tag): sorted(
                m.commit_log_offset for m in store.query_message_by_tag(topic, tag, 64, 0, None)
            )
            for topic, tag in tags
        }


def expected_queries(dump: Dump) -> dict[tuple[str, str], list[int]]:
    """What queryMessage should answer for every key: the offsets of the messages carrying it."""
    want: dict[tuple[str, str], set[int]] = {}
    for m in dump.messages:
        for k in _message_keys(m["topic"], m["properties"]):
            want.setdefault(k, set()).add(m["commitLogOffset"])
    return {k: sorted(v) for k, v in want.items()}


def assert_same_dump(a: Dump, b: Dump, *, skip: tuple[str, ...] = ()) -> None:
    """Two readers saw the same store: every field equal (store timestamps too)."""
    ca, cb = a.comparable(), b.comparable()
    for key in ca:
        if key in skip:
            continue
        if key == "messages":
            assert len(ca[key]) == len(cb[key])
            for ma, mb in zip(ca[key], cb[key], strict=True):
                assert ma == mb
        else:
            assert ca[key] == cb[key], key
