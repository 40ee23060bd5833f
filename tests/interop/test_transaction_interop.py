"""Issue 18, transactional messages, with a real Apache RocketMQ 5.5.1 broker and its
``TransactionMQProducer`` as the referee (``broker/``, ``TransactionCommands``).

- ``test_broker551_transaction_records_equal_rmqstore``: a producer sends transactions through
  the broker (local COMMIT, ROLLBACK, UNKNOW), then three rounds of the broker's own check
  answer COMMIT, ROLLBACK, UNKNOW (``transactionCheckMax`` 2: copies with
  ``TRANSACTION_CHECK_TIMES`` 1 and 2, then discards to ``TRANS_CHECK_MAX_TIME_TOPIC``).
  rmqstore replays the same sequence on an empty store in the broker's record order (prepare
  with the client's ``UNIQ_KEY`` read back from the broker's half, commit, rollback, its check
  rounds, op writes where the broker wrote its op messages): every record is byte-equal,
  store timestamps and the op messages' born timestamps aside (``Record.masked``).
- ``test_broker551_pending_halves_resolved_by_rmqstore``: halves the broker left pending are
  ended by rmqstore (``end_transaction`` by transaction id, and its check service with a
  checker); rmqstore's consumer and then the broker's own (restarted on the store, its check
  service running) see exactly the committed messages once; the broker asks nothing.
- ``test_rmqstore_pending_halves_resolved_by_broker551``: halves rmqstore prepared and left
  pending (producer group = the Java producer's) are resolved by the broker's check-back asking
  the real producer; committed ones are consumed once, rolled back ones never; rmqstore then
  reads the broker's op and commit records: nothing pending, a second commit refused.
"""

from __future__ import annotations

import base64
import dataclasses
import shutil
import struct
import time
from pathlib import Path
from typing import Any

import pytest
import rmqstore
from broker_harness import (
    BrokerHarness,
    BrokerRun,
    BrokerSizes,
    build_broker_harness,
    free_ports,
    rocketmq_log_tails,
)
from interop_harness import b64, norm_host

pytestmark = pytest.mark.interop

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX = "TRANS_CHECK_MAX_TIME_TOPIC"
GROUP = "interop-tx-producer"
TOPICS = ["TxTopicA", "TxTopicB"]
SIZES = BrokerSizes()
#: Broker settings of the record test: checks in rounds run by the harness (the service's own
#: interval is an hour there), a half is old enough after 100 ms, discarded at the third check,
#: op messages of at least 10 characters or after 1 s.
CHECK_MAX_TIMES = 2
OP_MAX_SIZE = 10
TX_OPTIONS = (
    "--tx-timeout-ms", "100",
    "--tx-check-max", str(CHECK_MAX_TIMES),
    "--tx-op-max-size", str(OP_MAX_SIZE),
    "--tx-op-interval-ms", "1000",
)  # fmt: skip
#: The broker's own check service when it runs on a store: a round every 2 s, halves older
#: than 500 ms, op messages written within 100 ms (so a round sees the ops of the answers to
#: the last one). Every round re-appends each pending half even while no producer of its group
#: is connected (nobody is asked; TRANSACTION_CHECK_TIMES grows): a high transactionCheckMax
#: keeps the halves from being discarded before the producer registers.
BROKER_CHECKS = (
    "--tx-check-interval-ms", "2000",
    "--tx-timeout-ms", "500",
    "--tx-op-interval-ms", "100",
    "--tx-check-max", "1000",
)  # fmt: skip
PROP_SEP, NAME_SEP = "\x02", "\x01"


# -- the broker -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker551(tmp_path_factory: pytest.TempPathFactory) -> BrokerHarness:
    """The 5.5.1 broker harness (built once). Skipped, as every broker interop test is, when
    java or mvn is not on PATH; a failing build fails."""
    java, mvn = shutil.which("java"), shutil.which("mvn")
    missing = [name for name, path in (("java", java), ("mvn", mvn)) if path is None]
    if missing:
        pytest.skip(
            f"BROKER INTEROP TESTS SKIPPED: {' and '.join(missing)} not found on PATH; the "
            "transaction round trips need Java 17 and Maven"
        )
    assert java is not None
    return BrokerHarness(
        java=java,
        classpath=build_broker_harness("rmq551"),
        home=tmp_path_factory.mktemp("broker-home-tx"),
        version="5.5.1",
    )


def plan_line(seq: str, i: int, local: str, checks: list[str] | None = None, **extra: Any) -> dict:
    """One planned transaction: the message (bodies below the client's 4 KiB compression
    threshold), its local state and the answers to the broker's successive checks."""
    d: dict[str, Any] = {
        "topic": TOPICS[i % 2],
        "queueId": 0,
        "tags": f"Tag{i % 3}" if i % 4 else None,
        "keys": [f"key-{seq}", f"k{i % 2}"] if i % 3 == 0 else [],
        "properties": {"seq": seq, "note": "zürich 東京"},
        "body": b64((f"{seq}:" + "x" * (i * 37 % 300)).encode()),
        "flag": i % 4,
        "local": local,
    }
    if checks is not None:
        d["checks"] = checks
    d.update(extra)
    return d


def with_logs(broker: BrokerHarness, run: BrokerRun, started: float) -> str:
    """The run's last lines and RocketMQ's logs, for a failure message."""
    tail = "\n".join(str(x)[:400] for x in run.lines[-30:])
    return f"harness lines:\n{tail}\n{rocketmq_log_tails(broker.home, started)}"


# -- records ----------------------------------------------------------------------------------

MAGIC_V1, MAGIC_V2 = -626843481, -626843477


@dataclasses.dataclass
class Record:
    """One commitlog record: its bytes and the fields the tests look at."""

    raw: bytes
    offset: int
    queue_id: int
    flag: int
    queue_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    prepared_offset: int
    body: bytes
    topic: str
    props_string: str
    #: where the born and store timestamps are in ``raw``
    born_at: int
    store_at: int

    @property
    def props(self) -> dict[str, str]:
        out = {}
        for pair in self.props_string.split(PROP_SEP):
            if pair:
                name, _, value = pair.partition(NAME_SEP)
                out[name] = value
        return out

    @property
    def prop_names(self) -> list[str]:
        return [p.partition(NAME_SEP)[0] for p in self.props_string.split(PROP_SEP) if p]

    def masked(self, kind: str) -> bytes:
        """The bytes compared: the store timestamp zeroed (every record), and the born
        timestamp of an op message (born when the batch service writes it). Nothing else: the
        hosts, the commitlog, queue and prepared offsets, the body and the properties are all
        compared."""
        raw = bytearray(self.raw)
        raw[self.store_at : self.store_at + 8] = b"\0" * 8
        if kind == "op":
            raw[self.born_at : self.born_at + 8] = b"\0" * 8
        return bytes(raw)


def _host(raw: bytes, at: int, v6: bool) -> tuple[str, int]:
    n = 16 if v6 else 4
    ip = raw[at : at + n]
    (port,) = struct.unpack_from(">i", raw, at + n)
    text = ":".join(ip[i : i + 2].hex() for i in range(0, 16, 2)) if v6 else ".".join(map(str, ip))
    return (f"[{text}]:{port}" if v6 else f"{text}:{port}"), at + n + 4


def parse(raw: bytes) -> Record:
    """A record in RocketMQ's commitlog layout (magic V1 or V2)."""
    size, magic, _crc, qid, flag, qoff, phys, sys_flag, born_ts = struct.unpack_from(
        ">iiiiiqqiq", raw, 0
    )
    assert size == len(raw), (size, len(raw))
    assert magic in (MAGIC_V1, MAGIC_V2), magic
    born_at = 40
    born_host, at = _host(raw, 48, bool(sys_flag & 0x10))
    store_at = at
    at += 8
    store_host, at = _host(raw, at, bool(sys_flag & 0x20))
    reconsume, prepared, body_len = struct.unpack_from(">iqi", raw, at)
    at += 16
    body = raw[at : at + body_len]
    at += body_len
    if magic == MAGIC_V1:
        topic_len = raw[at]
        at += 1
    else:
        (topic_len,) = struct.unpack_from(">h", raw, at)
        at += 2
    topic = raw[at : at + topic_len].decode()
    at += topic_len
    (props_len,) = struct.unpack_from(">h", raw, at)
    at += 2
    props = raw[at : at + props_len].decode()
    return Record(
        raw=raw, offset=phys, queue_id=qid, flag=flag, queue_offset=qoff, sys_flag=sys_flag,
        born_timestamp=born_ts, born_host=born_host, store_host=store_host,
        reconsume_times=reconsume, prepared_offset=prepared, body=body, topic=topic,
        props_string=props, born_at=born_at, store_at=store_at,
    )  # fmt: skip


def cq_units(path: Path, topic: str, qid: int) -> list[tuple[int, int]]:
    """A consume queue's (commitlog offset, size) units, from its files."""
    out = []
    folder = path / "consumequeue" / topic / str(qid)
    for f in sorted(folder.iterdir()) if folder.is_dir() else []:
        data = f.read_bytes()
        for at in range(0, len(data) - 19, 20):
            off, size, tag = struct.unpack_from(">qiq", data, at)
            if size == 0 and off == 0 and tag == 0:
                return out
            out.append((off, size))
    return out


def queue_records(path: Path, topic: str, qid: int) -> list[Record]:
    """A queue's records, read from the commitlog files at its consume queue's units."""
    out = []
    for off, size in cq_units(path, topic, qid):
        name = path / "commitlog" / f"{off // SIZES.commitlog * SIZES.commitlog:020d}"
        with open(name, "rb") as f:
            f.seek(off % SIZES.commitlog)
            rec = parse(f.read(size))
        assert (rec.offset, rec.topic, rec.queue_id) == (off, topic, qid), (topic, qid, off)
        out.append(rec)
    return out


def tx_records(path: Path) -> dict[str, list[Record]]:
    """Every transaction record of a store by kind: ``half`` (the half queue: halves and
    their check copies), ``op``, ``real`` (the real topics' queues 0 and 1), ``discard``."""
    return {
        "half": queue_records(path, HALF, 0),
        "op": queue_records(path, OP, 0),
        "real": [r for t in TOPICS for q in (0, 1) for r in queue_records(path, t, q)],
        "discard": queue_records(path, CHECK_MAX, 0),
    }


def tx_id(r: Record) -> str:
    return r.props["UNIQ_KEY"]


def identity(kind: str, r: Record, op_index: int = 0) -> tuple[str, str]:
    """What a record is, on either side: a half or its n-th check copy, a commit, a discard of
    one transaction, or the n-th op message."""
    if kind == "half":
        return (f"half#{r.props.get('TRANSACTION_CHECK_TIMES', '0')}", tx_id(r))
    if kind == "op":
        return ("op", str(op_index))
    return (kind, tx_id(r))


def op_entries(r: Record) -> list[int]:
    return [int(x) for x in r.body.decode().split(",") if x]


# -- rmqstore ---------------------------------------------------------------------------------


def open_rmq(path: Path, store_host: str, **settings: Any) -> rmqstore.MessageStore:
    """rmqstore with the broker's sizes and store host; its own check and op services wait an
    hour unless told (the tests drive both)."""
    base: dict[str, Any] = {
        "transaction_timeout": 100,
        "transaction_check_max": CHECK_MAX_TIMES,
        "transaction_check_interval": 3_600_000,
        "transaction_op_batch_interval": 3_600_000,
        "transaction_op_msg_max_size": 1 << 20,
    }
    base.update(settings)
    return rmqstore.MessageStore(path, **SIZES.rmq(store_host), **base)


def half_message(r: Record) -> tuple[rmqstore.Message, str]:
    """The message the producer sent, from the broker's half record (what
    parseHalfMessageInner and the client's sendMessageInTransaction added taken off again;
    ``UNIQ_KEY`` kept: rmqstore is given the client's id), and its producer group."""
    props = dict(r.props)
    for added in ("REAL_TOPIC", "REAL_QID", "__transactionId__", "TRAN_MSG"):
        props.pop(added)
    group = props.pop("PGROUP")
    tags = props.pop("TAGS", None)
    keys = props.pop("KEYS", None)
    return (
        rmqstore.Message(
            r.props["REAL_TOPIC"],
            r.body,
            queue_id=int(r.props["REAL_QID"]),
            tags=tags,
            keys=keys.split(" ") if keys else None,
            properties=props,
            flag=r.flag,
            born_timestamp=r.born_timestamp,
            born_host=r.born_host,
        ),
        group,
    )


def flush_ops(store: rmqstore.MessageStore, max_size: int) -> None:
    """One op message now, as one TransactionalOpBatchService run writes it once its interval
    passed: queued entries until the text reaches ``max_size`` characters (more messages only
    while what is left still reaches it)."""
    time.sleep(0.002)
    store._core.transaction_flush_ops(int(time.time() * 1000), max_size, 1, False)


def read_queue(store: rmqstore.MessageStore, topic: str, qid: int) -> list[Any]:
    out: list[Any] = []
    offset = 0
    while True:
        got = store.get_message("interop-tx", topic, qid, offset, 64, None)
        if not got.messages:
            return out
        out.extend(got.messages)
        offset = got.next_begin_offset


def replay(theirs: dict[str, list[Record]], mine: Path, store_host: str) -> list[str]:
    """rmqstore does what the broker did, in the broker's record order: a half is prepared
    (the producer's message, its group), a commit ends the half or copy the broker's commit
    names, the entries of an op message the broker wrote are ended (rollbacks: they have no
    record of their own) in the order of its body and written, a run of copies and discards is
    one check round (the checker answers UNKNOW: the answers are replayed as the ends that
    follow). Returns what it did, for a failure message."""
    by_offset = {r.offset: ("half", r) for r in theirs["half"]}
    by_offset.update({r.offset: ("real", r) for r in theirs["real"]})
    by_offset.update({r.offset: ("discard", r) for r in theirs["discard"]})
    ops = {r.offset: i for i, r in enumerate(theirs["op"])}
    by_offset.update({r.offset: ("op", r) for r in theirs["op"]})
    half_by_qoff = {r.queue_offset: r for r in theirs["half"]}
    stream = [q for r in theirs["op"] for q in op_entries(r)]
    bounds: list[int] = []
    for r in theirs["op"]:
        bounds.append((bounds[-1] if bounds else 0) + len(op_entries(r)))
    ours: dict[tuple[str, str], int] = {}  # identity of a half or copy -> our commitlog offset
    done: list[str] = []
    cursor = 0

    def end(store: rmqstore.MessageStore, qoff: int, commit: bool) -> None:
        half = half_by_qoff[qoff]
        target = ours[identity("half", half)]
        res = store.end_transaction(target, commit)
        assert (res.ended, res.transaction_id) == (True, tx_id(half)), res
        done.append(f"{'commit' if commit else 'rollback'} {identity('half', half)}")

    def copies_since(store: rmqstore.MessageStore) -> None:
        assert store.wait_dispatched(30)
        for m in read_queue(store, HALF, 0):
            times = m.properties.get("TRANSACTION_CHECK_TIMES", "0")
            ours.setdefault((f"half#{times}", m.properties["UNIQ_KEY"]), m.commit_log_offset)

    ordered = sorted(by_offset.items())
    with open_rmq(mine, store_host) as store:
        store.set_transaction_checker(lambda m: rmqstore.TransactionState.UNKNOWN)
        i = 0
        while i < len(ordered):
            _, (kind, r) = ordered[i]
            if kind == "half" and "TRANSACTION_CHECK_TIMES" not in r.props:
                msg, group = half_message(r)
                res = store.prepare_message(msg, producer_group=group)
                assert res.status.name == "PUT_OK", res
                assert res.transaction_id == tx_id(r)
                ours[identity("half", r)] = res.wrote_offset
                done.append(f"prepare {tx_id(r)}")
            elif kind in ("half", "discard"):  # check rounds: copies and discards
                while i + 1 < len(ordered) and (
                    ordered[i + 1][1][0] == "discard"
                    or (
                        ordered[i + 1][1][0] == "half"
                        and "TRANSACTION_CHECK_TIMES" in ordered[i + 1][1][1].props
                    )
                ):
                    i += 1
                # A copy whose count reached the maximum is discarded by the round that wrote
                # it when the broker dispatched it before the walk got there, else by the next
                # round (nothing is written in between: the answers to it are UNKNOW): rounds
                # until rmqstore holds as many halves and discards as the broker did here.
                upto = ordered[i][0]
                want = [sum(r.offset <= upto for r in theirs[k]) for k in ("half", "discard")]
                for _ in range(CHECK_MAX_TIMES + 1):
                    time.sleep(0.005)  # the copies of the last round are older than this one
                    store.check_transactions()
                    copies_since(store)
                    done.append("check round")
                    assert store.wait_dispatched(30)
                    have = [len(read_queue(store, k, 0)) for k in (HALF, CHECK_MAX)]
                    if have >= want:
                        break
                assert have == want, (have, want, done)
            elif kind == "real":
                target = by_offset[r.prepared_offset][1]
                while stream[cursor] != target.queue_offset:
                    end(store, stream[cursor], False)
                    cursor += 1
                end(store, target.queue_offset, True)
                cursor += 1
            else:  # an op message the broker wrote
                while cursor < bounds[ops[r.offset]]:
                    end(store, stream[cursor], False)
                    cursor += 1
                flush_ops(store, OP_MAX_SIZE)
                done.append(f"op {r.body.decode()}")
            i += 1
        assert store.wait_dispatched(30)
    return done


# -- 1. byte equality -------------------------------------------------------------------------


def record_plan() -> list[dict[str, Any]]:
    return [
        plan_line("c0", 0, "COMMIT"),
        plan_line("r1", 1, "ROLLBACK"),
        plan_line("c2", 2, "COMMIT"),
        plan_line("u3", 3, "UNKNOW", ["COMMIT"]),  # committed by the first check (flag 3)
        plan_line("u4", 4, "UNKNOW", ["ROLLBACK"]),
        # Never known: two copies, then discarded (an answer other than UNKNOW to the last
        # check races with the discard of its copy: see below).
        plan_line("u5", 5, "UNKNOW", []),
        plan_line("u6", 6, "UNKNOW", ["UNKNOW"]),
        plan_line("c7", 7, "COMMIT"),
        plan_line("r8", 8, "ROLLBACK"),
        plan_line("c9", 9, "COMMIT"),
        plan_line("c10", 10, "COMMIT"),
        plan_line("u11", 11, "UNKNOW", ["ROLLBACK"]),
    ]


def test_broker551_transaction_records_equal_rmqstore(
    broker551: BrokerHarness, tmp_path: Path
) -> None:
    path = tmp_path / "broker"
    path.mkdir()
    ports = free_ports()
    plan = record_plan()
    started = time.time()
    run = broker551.tx_run(path, ports, SIZES, plan, *TX_OPTIONS, "--check-rounds", "3")
    logs = with_logs(broker551, run, started)
    store_host = run.of("started")[0]["storeHost"]
    sent = {x["seq"]: x for x in run.of("txSent")}
    assert [x["status"] for x in sent.values()] == ["SEND_OK"] * len(plan), logs
    assert [x["copies"] for x in run.of("txRound")] == [5, 2, 0], logs
    # The two discards, in round 2 or 3 (see the replay).
    assert sum(x["discards"] for x in run.of("txRound")) == 2, logs

    theirs = tx_records(path)
    by_seq = {r.props["seq"]: r for r in theirs["half"] if "TRANSACTION_CHECK_TIMES" not in r.props}
    # The transaction id is the client's UNIQ_KEY (56 hex digits here: the client's address
    # is IPv6), which SendResult reports as the message id.
    for seq, half in by_seq.items():
        assert tx_id(half) == half.props["__transactionId__"] == sent[seq]["msgId"], seq

    # -- what the broker's bytes settle (CONTRACT18 "Records") --
    reals = {r.props["seq"]: r for r in theirs["real"]}
    assert sorted(reals) == ["c0", "c10", "c2", "c7", "c9", "u3"], logs
    for seq, real in reals.items():
        # The commit's stored properties keep TRAN_MSG (endMessageTransaction renders the
        # string before EndTransactionProcessor clears the property from the map) and PGROUP.
        assert (real.props["TRAN_MSG"], real.props["PGROUP"]) == ("true", GROUP), seq
        assert not {"REAL_TOPIC", "REAL_QID"} & set(real.props), seq
        assert real.sys_flag & 0x0C == 0x08, (seq, real.sys_flag)  # TRANSACTION_COMMIT_TYPE
    for op in theirs["op"]:
        # The op's string is {TAGS=d, WAIT=true} alone: makeOpMessageInner renders it before
        # MessageClientIDSetter.setUniqID adds UNIQ_KEY to the map.
        assert sorted(op.prop_names) == ["TAGS", "WAIT"], op.props
        assert op.props["TAGS"] == "d", op.props
        assert op.born_host == op.store_host == store_host, (op.born_host, store_host)
        assert op.sys_flag == 0
    # A check copy does not keep the half's flag (renewHalfMessageInner sets none), so a
    # message committed through the check-back reaches its topic with flag 0, and with
    # TRANSACTION_CHECK_TIMES.
    copies = [r for r in theirs["half"] if "TRANSACTION_CHECK_TIMES" in r.props]
    assert {r.flag for r in copies} == {0}, [(r.props["seq"], r.flag) for r in copies]
    assert by_seq["u3"].flag == 3
    assert (reals["u3"].props["TRANSACTION_CHECK_TIMES"], reals["u3"].flag) == ("1", 0)
    assert reals["c2"].flag == 2
    # transactionCheckMax 2: the second copy is discarded with TRANSACTION_CHECK_TIMES 2, by
    # the round that wrote it when the broker's dispatch made it visible before the walk got
    # there (TransactionalMessageServiceImpl.check runs needDiscard before its "fresh stored"
    # stop), else by the next round. Meanwhile the producer's answer to that same check is on
    # its way: a COMMIT then commits a message that was discarded as well (seen in a run
    # with answers ["UNKNOW", "COMMIT"]; not planned here, its outcome is a race).
    assert sorted(r.props["seq"] for r in theirs["discard"]) == ["u5", "u6"]
    assert all(r.props["TRANSACTION_CHECK_TIMES"] == "2" for r in theirs["discard"])

    # -- rmqstore does the same --
    mine = tmp_path / "rmqstore"
    done = replay(theirs, mine, store_host)
    ours = tx_records(mine)
    why = "\n".join(done[-40:]) + "\n" + logs
    # Beyond RocketMQ, rmqstore marks a discarded half resolved with an op entry as well
    # (RocketMQ's resolveDiscardMsg writes none): here the last op message, after everything
    # the broker wrote, naming exactly the discarded copies.
    extra = ours["op"][len(theirs["op"]) :]
    discarded = sorted(
        r.queue_offset
        for r in ours["half"]
        if identity("half", r)[1] in map(tx_id, ours["discard"])
        and r.props.get("TRANSACTION_CHECK_TIMES") == str(CHECK_MAX_TIMES)
    )
    assert sorted(q for r in extra for q in op_entries(r)) == discarded, (extra, discarded, why)
    ours["op"] = ours["op"][: len(theirs["op"])]
    for kind in ("half", "real", "discard", "op"):
        assert len(ours[kind]) == len(theirs[kind]), (kind, len(ours[kind]), len(theirs[kind]), why)
        mine_by_id = {identity(kind, r, i): r for i, r in enumerate(ours[kind])}
        for i, t in enumerate(theirs[kind]):
            o = mine_by_id.get(identity(kind, t, i))
            assert o is not None, (identity(kind, t, i), why)
            what = (kind, identity(kind, t, i))
            # Field by field first (a clearer message than the bytes), then every byte.
            assert o.props_string == t.props_string, (*what, o.props_string, t.props_string)
            assert (o.offset, o.queue_offset, o.prepared_offset) == (
                t.offset,
                t.queue_offset,
                t.prepared_offset,
            ), what
            assert (o.sys_flag, o.flag, o.body) == (t.sys_flag, t.flag, t.body), what
            assert (o.born_host, o.store_host) == (t.born_host, t.store_host), what
            assert o.masked(kind) == t.masked(kind), what


# -- 2. broker -> rmqstore ----------------------------------------------------------------------


def pending_plan() -> list[dict[str, Any]]:
    """Ten transactions the producer never settles (no check: the broker's service waits an
    hour): rmqstore ends p0-p3 by transaction id, its checker the rest by seq."""
    plan = [plan_line(f"p{i}", i, "UNKNOW") for i in range(10)]
    # Over the client's 4 KiB threshold: the broker stores the half zlib-compressed.
    plan.append(plan_line("p10", 10, "UNKNOW", body=b64(BIG_BODY)))
    return plan


#: A body the client compresses (compressMsgBodyOverHowmuch is 4096).
BIG_BODY = b"".join(b"line %05d of a long transactional body\n" % i for i in range(200))
#: p0-p3 and p10: end_transaction by id; p4-p9: the checker.
BY_ID = {"p0": True, "p1": False, "p2": True, "p3": False, "p10": True}
BY_CHECKER = {"p4": True, "p5": False, "p6": True, "p7": True, "p8": False, "p9": True}


def real_seqs(store: rmqstore.MessageStore) -> list[str]:
    return sorted(
        m.properties["seq"] for t in TOPICS for q in (0, 1) for m in read_queue(store, t, q)
    )


def test_broker551_pending_halves_resolved_by_rmqstore(
    broker551: BrokerHarness, tmp_path: Path
) -> None:
    path = tmp_path / "store"
    path.mkdir()
    ports = free_ports()
    plan = pending_plan()
    started = time.time()
    run = broker551.tx_run(path, ports, SIZES, plan, *TX_OPTIONS)
    logs = with_logs(broker551, run, started)
    store_host = run.of("started")[0]["storeHost"]
    ids = {x["seq"]: x["msgId"] for x in run.of("txSent")}
    assert len(ids) == len(plan), logs
    assert not run.of("txCheck"), logs

    asked: list[str] = []

    def checker(m: Any) -> rmqstore.TransactionState:
        asked.append(m.properties["seq"])
        assert m.topic in TOPICS  # the half as the producer sees it: the real topic
        commit = BY_CHECKER[m.properties["seq"]]
        return rmqstore.TransactionState.COMMIT if commit else rmqstore.TransactionState.ROLLBACK

    with open_rmq(path, store_host) as store:
        pending = store.pending_transactions()
        assert sorted(p.transaction_id for p in pending) == sorted(ids.values()), pending
        assert {p.producer_group for p in pending} == {GROUP}
        for seq, commit in BY_ID.items():
            res = store.end_transaction(ids[seq], commit)
            assert (res.ended, res.transaction_id) == (True, ids[seq]), res
        store.set_transaction_checker(checker)
        time.sleep(0.2)  # older than transaction_timeout
        report = store.check_transactions()
        assert sorted(asked) == sorted(BY_CHECKER), asked
        assert (report.checked, report.committed, report.rolled_back) == (6, 4, 2), report
        assert store.pending_transactions() == []
        with pytest.raises(rmqstore.errors.TransactionEndedError):
            store.end_transaction(ids["p0"], True)
        assert store.wait_dispatched(30)
        committed = sorted(s for s, c in {**BY_ID, **BY_CHECKER}.items() if c)
        assert real_seqs(store) == committed
        big = [m for t in TOPICS for q in (0, 1) for m in read_queue(store, t, q)]
        assert [m.body for m in big if m.properties["seq"] == "p10"] == [BIG_BODY]
    # The commit keeps the body as the half stored it: compressed, with the COMPRESSED bit.
    records = tx_records(path)
    half = [r for r in records["half"] if r.props["seq"] == "p10"][-1]
    real = next(r for r in records["real"] if r.props["seq"] == "p10")
    assert half.sys_flag & 1, half.sys_flag
    assert (real.body, real.sys_flag) == (half.body, (half.sys_flag & ~0x0C) | 0x08)
    assert real.prepared_offset == half.offset

    # The broker on the store rmqstore left: its check service runs every second (a half
    # still pending would be asked within the linger, and every answer is COMMIT: a second
    # message), its consumer reads the real topics.
    answer_all = [{**d, "checks": ["COMMIT"] * 5} for d in plan]
    started = time.time()
    run = broker551.tx_await(
        path, ports, SIZES, answer_all, TOPICS,
        *BROKER_CHECKS, "--default-check", "COMMIT", "--expect-ends", "0", "--linger-ms", "4500",
    )  # fmt: skip
    logs = with_logs(broker551, run, started)
    assert run.of("txCheck") == [], logs
    consumed = sorted(m["properties"]["seq"] for m in run.of("consumed"))
    assert consumed == committed, logs
    for m in run.of("consumed"):
        if m["properties"]["seq"] == "p10":  # decompressed by the client
            assert base64.b64decode(m["body"]) == BIG_BODY
        assert m["properties"]["UNIQ_KEY"] == ids[m["properties"]["seq"]]
        assert norm_host(m["storeHost"]) == norm_host(store_host)


# -- 3. rmqstore -> broker ----------------------------------------------------------------------


def test_rmqstore_pending_halves_resolved_by_broker551(
    broker551: BrokerHarness, tmp_path: Path
) -> None:
    ports = free_ports()
    store_host = f"127.0.0.1:{ports[1]}"
    path = tmp_path / "store"
    # rmqstore ends e0-e2 itself, leaves q0-q6 pending for the broker's check-back.
    ended = {"e0": True, "e1": False, "e2": True}
    answers = {"q0": True, "q1": False, "q2": True, "q3": True, "q4": False, "q5": True, "q6": True}
    ids: dict[str, str] = {}
    with open_rmq(path, store_host) as store:
        for i, seq in enumerate([*ended, *answers]):
            d = plan_line(seq, i, "UNKNOW")
            res = store.prepare_message(
                rmqstore.Message(
                    d["topic"],
                    base64.b64decode(d["body"]),
                    queue_id=i % 2,
                    tags=d["tags"],
                    keys=d["keys"] or None,
                    properties=d["properties"],
                    flag=d["flag"],
                ),
                producer_group=GROUP,
            )
            assert res.status.name == "PUT_OK", res
            assert res.transaction_id, res
            ids[seq] = res.transaction_id
        for seq, commit in ended.items():
            assert store.end_transaction(ids[seq], commit).ended
        # The real topics exist for the broker (its route) even before a commit lands there.
        assert store.wait_dispatched(30)
    plan = [
        {"properties": {"seq": s}, "checks": ["COMMIT" if c else "ROLLBACK"]}
        for s, c in answers.items()
    ]
    plan += [{"properties": {"seq": s}, "checks": ["COMMIT"]} for s in ended]  # asked: a bug
    started = time.time()
    run = broker551.tx_await(
        path, ports, SIZES, plan, TOPICS,
        *BROKER_CHECKS, "--default-check", "COMMIT", "--expect-ends", str(len(answers)),
        "--linger-ms", "3000",
    )  # fmt: skip
    logs = with_logs(broker551, run, started)
    checks = run.of("txCheck")
    # Every pending half asked, through the group rmqstore wrote, and nothing else; the
    # first answer settles it (a later ask, if the broker's op message was not written before
    # its next round, is answered UNKNOW by the plan).
    assert sorted({c["seq"] for c in checks}) == sorted(answers), logs
    for c in checks:
        assert (c["producerGroup"], c["transactionId"]) == (GROUP, ids[c["seq"]]), c
        assert int(c["checkTimes"]) >= 1, c
    assert sorted(c["seq"] for c in checks if c["asked"] == 0) == sorted(answers), logs
    committed = sorted([s for s, c in {**ended, **answers}.items() if c])
    consumed = sorted(m["properties"]["seq"] for m in run.of("consumed"))
    assert consumed == committed, logs
    assert {norm_host(m["storeHost"]) for m in run.of("consumed")} == {store_host}

    # rmqstore reads the broker's commits and op messages: nothing pending, the same real
    # messages, and a commit of a transaction the broker committed is refused.
    with open_rmq(path, store_host) as store:
        assert store.pending_transactions() == [], store.pending_transactions()
        assert real_seqs(store) == committed
        with pytest.raises(rmqstore.errors.TransactionEndedError):
            store.end_transaction(ids["q0"], True)
        with pytest.raises(rmqstore.errors.TransactionEndedError):
            store.end_transaction(ids["q1"], True)
        assert real_seqs(store) == committed
