"""Issue 18, exactly once beyond RocketMQ: transactions survive SIGKILL at any moment, and no
transaction is ever committed twice.

A child process works on the store and the parent kills it with SIGKILL at a random moment,
round after round, in three ways:

* ``produce``: the child prepares transactions and ends them (commit or rollback, decided by
  ``decide(seq)`` of the sequence number the message carries), leaving some pending as a
  producer that crashed mid-transaction would; after each ``end_transaction`` returns it
  appends ``C seq`` or ``R seq`` to an acknowledgement file and forces it.
* ``check``: the child prepares halves (a backlog of 1,000, then a trickle) and never ends
  them; its transaction check service
  (small ``transaction_timeout`` and interval) resolves them through a checker answering
  ``decide(seq)`` (or, now and then, UNKNOWN: the half is copied and asked about again later).
* ``queued``: as ``produce`` with a check service too, but op messages stay queued in memory
  (huge ``transaction_op_batch_interval`` and ``transaction_op_msg_max_size``), so at the kill
  every commit of the round has its real message on disk and no op: the state in which
  RocketMQ's check-back commits a second time.

After each kill the parent reopens the store, resolves everything (``check_transactions`` with
the same checker until ``pending_transactions()`` is empty), checks that ending some of them
again is refused, and counts, per sequence number,
the messages of the real topic: one for a transaction ``decide`` commits, none for one it rolls
back, and every acknowledged commit is there. The parent trusts nothing the child says beyond
the forced acknowledgement file: the transactions that exist are the halves the store holds.

The same census is shown to fail on a second commit written the way RocketMQ's check-back
writes it (``test_the_census_catches_a_second_commit``).

The rounds found one store bug outside the transaction code: a kill during the page fault of a
record's second page left the record's tail zero, and recovery kept it (only the body has a
CRC): a half without REAL_TOPIC that no check can resolve. Appends now write a record's size
after every other byte of it, so a kill leaves a size of 0 there (the end of the data); the
census fails on any torn half it finds, and ``test_a_record_cut_by_a_kill_is_not_kept``
checks what recovery does with what such a kill leaves.
"""

from __future__ import annotations

import collections
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rmqstore import GetMessageStatus, Message, MessageExt, MessageStore, TransactionState
from rmqstore.errors import TransactionEndedError, TransactionNotFoundError

REAL = "TxReal"
REAL_QUEUES = 4
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
DISCARD_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: Transaction type bits of the sysflag (MessageSysFlag): COMMIT is 0x8.
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_COMMIT = 0x8

STORE: dict[str, Any] = {
    "mapped_file_size_commit_log": 1024 * 1024,
    "mapped_file_size_consume_queue": 20 * 4000,
    "max_hash_slot_num": 4096,
    "max_index_num": 16000,
    # Copies and discards: a half asked about UNKNOWN many times over the rounds stays pending.
    "transaction_check_max": 1000,
}

#: Each child kind's own settings on top of STORE.
KINDS: dict[str, dict[str, Any]] = {
    # Ops written soon after each end (not at every one): kills fall before and after them.
    "produce": {"transaction_op_batch_interval": 5, "transaction_check_interval": 3_600_000},
    # Ops of the check's answers written every 100 ms: kills fall between answers and ops too.
    "check": {
        "transaction_timeout": 100,
        "transaction_check_interval": 20,
        "transaction_op_batch_interval": 100,
    },
    # Every op of a round stays queued until the kill.
    "queued": {
        "transaction_timeout": 100,
        "transaction_check_interval": 20,
        "transaction_op_batch_interval": 3_600_000,
        "transaction_op_msg_max_size": 1 << 30,
    },
}

#: The parent drives the check itself (check_transactions), its service stays idle.
PARENT: dict[str, Any] = {
    "transaction_timeout": 50,
    "transaction_check_interval": 3_600_000,
}

COMMON = textwrap.dedent(
    """
    def decide(seq):
        '''True: commit; False: roll back (a fixed function of the sequence number).'''
        return (seq * 2654435761) % 7 < 4

    def left_pending(seq):
        '''The producer "crashes" before ending these: the check resolves them.'''
        return seq % 5 == 3

    def body(seq):
        return f"tx-{seq}-".encode().ljust(96, b".")

    def seq_of(msg):
        return int(msg.body.split(b"-")[1])
    """
)

CHILD = COMMON + textwrap.dedent(
    """
    import json, os, random, sys, time
    import rmqstore
    from rmqstore import Message, PutMessageStatus, TransactionState

    path, kind, start, seed, acks = sys.argv[1:6]
    settings = json.loads(sys.argv[6])
    start, rng = int(start), random.Random(int(seed))
    store = rmqstore.MessageStore(path, **settings)

    def checker(msg):
        if rng.random() < 0.15:
            return TransactionState.UNKNOWN
        if rng.random() < 0.05:
            raise RuntimeError("the checker failed (counts as UNKNOWN)")
        return TransactionState.COMMIT if decide(seq_of(msg)) else TransactionState.ROLLBACK

    seq = start
    if kind == "check":
        # A backlog that falls due at once, then a trickle.
        for seq in range(start, start + 1000):
            msg = Message("TxReal", body(seq), keys=[f"s{seq}"], queue_id=seq % 4)
            assert store.prepare_message(msg).status is PutMessageStatus.PUT_OK
        seq += 1
    if kind != "produce":
        store.set_transaction_checker(checker)
    ack = open(acks, "a")
    print("READY", flush=True)
    while True:
        msg = Message("TxReal", body(seq), keys=[f"s{seq}"], queue_id=seq % 4)
        r = store.prepare_message(msg)
        if r.status is not PutMessageStatus.PUT_OK:
            print("BAD", r.status.name, flush=True)
            break
        if kind == "check":
            time.sleep(0.0005)  # a steady trickle of halves for the service to check
        elif not left_pending(seq):
            commit = decide(seq)
            target = r.wrote_offset if seq % 2 else r.transaction_id
            res = store.end_transaction(target, commit)
            if not res.ended:
                print("NOT_ENDED", seq, flush=True)
                break
            ack.write(f"{'C' if commit else 'R'} {seq}\\n")
            ack.flush()
            os.fsync(ack.fileno())
        seq += 1
    """
)

ns: dict[str, Any] = {}
exec(COMMON, ns)  # the parent's decide / body / seq_of are the child's own
decide = ns["decide"]
body = ns["body"]
seq_of = ns["seq_of"]


def checker(msg: MessageExt) -> TransactionState:
    return TransactionState.COMMIT if decide(seq_of(msg)) else TransactionState.ROLLBACK


@dataclass
class Tally:
    """What the rounds of one test saw, for its closing line and its assertions."""

    kills: int = 0
    halves: int = 0
    committed: int = 0
    rolled_back: int = 0
    acked: int = 0
    #: Halves still pending at a reopen whose real message was already stored: the window
    #: between a commit's real put and its op (where RocketMQ commits twice).
    real_without_op: int = 0
    pending_at_reopen: int = 0
    check_rounds: int = 0
    #: Halves torn by a kill and kept by recovery (none since appends write the size last).
    torn: int = 0
    stats: collections.Counter[str] = field(default_factory=collections.Counter)


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[MessageExt]:
    out: list[MessageExt] = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    end = store.get_max_offset_in_queue(topic, queue_id)
    while offset < end:
        r = store.get_message("census", topic, queue_id, offset, 64)
        assert r.status is GetMessageStatus.FOUND, (topic, queue_id, offset, r.status)
        out += r.messages
        offset = r.next_begin_offset
    return out


def read_topic(store: MessageStore, topic: str) -> list[MessageExt]:
    return [m for q in store.queue_ids(topic) for m in read_queue(store, topic, q)]


def is_torn(m: MessageExt) -> bool:
    """A half record cut by the kill inside its properties (their tail never written: NUL
    bytes, no REAL_TOPIC) that recovery kept: see test_a_record_cut_by_a_kill_is_not_kept."""
    return "REAL_TOPIC" not in m.properties and any(
        "\x00" in k or "\x00" in v for k, v in m.properties.items()
    )


def torn_ids(store: MessageStore) -> tuple[set[str], set[int]]:
    """The transaction ids (UNIQ_KEY and what is left of ``__transactionId__``) and sequence
    numbers of the torn halves and their copies."""
    ids: set[str] = set()
    seqs: set[int] = set()
    for m in read_queue(store, HALF_TOPIC, 0):
        if is_torn(m):
            ids |= {m.properties.get("UNIQ_KEY", ""), m.properties.get("__transactionId__", "")}
            seqs.add(seq_of(m))
    return ids - {""}, seqs


def read_acks(path: Path) -> dict[int, str]:
    """The acknowledged ends: seq -> "C" or "R". A line cut by the kill is no acknowledgement
    (the child forces each line after end_transaction returned, before the next one)."""
    acks: dict[int, str] = {}
    if not path.exists():
        return acks
    for line in path.read_text().split("\n")[:-1]:
        what, seq = line.split()
        assert what in ("C", "R"), line
        assert int(seq) not in acks, f"acknowledged twice: {line}"
        acks[int(seq)] = what
    return acks


def census(store: MessageStore, acks: dict[int, str]) -> tuple[int, int]:
    """Checks every transaction the store holds is resolved exactly as ``decide`` says, once;
    returns (committed, rolled back)."""
    assert store.wait_dispatched(30)
    halves: dict[int, set[str]] = collections.defaultdict(set)
    half_offsets: dict[int, set[int]] = collections.defaultdict(set)  # the half and its copies
    torn: set[int] = set()
    for m in read_queue(store, HALF_TOPIC, 0):
        if is_torn(m):
            torn.add(seq_of(m))
            continue
        assert m.properties["REAL_TOPIC"] == REAL
        halves[seq_of(m)].add(m.properties["__transactionId__"])
        half_offsets[seq_of(m)].add(m.commit_log_offset)
    real = read_topic(store, REAL)
    counts = collections.Counter(seq_of(m) for m in real)
    duplicated = {s: n for s, n in counts.items() if n > 1}
    assert not duplicated, (
        f"{len(duplicated)} transactions committed twice: {sorted(duplicated.items())[:10]}"
    )
    for m in real:
        seq = seq_of(m)
        assert seq in halves, f"real message of seq {seq} without a half"
        assert m.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT, (seq, m.sys_flag)
        assert m.prepared_transaction_offset in half_offsets[seq], seq
        assert m.properties["UNIQ_KEY"] in halves[seq], (seq, m.properties, halves[seq])
        assert m.queue_id == seq % REAL_QUEUES
        assert m.body == body(seq)
    assert all(len(ids) == 1 for ids in halves.values()), "one transaction id per seq"
    lost = [s for s in halves if decide(s) and counts[s] == 0]
    assert not lost, f"{len(lost)} transactions never committed: {lost[:10]}"
    wrong = [s for s in halves if not decide(s) and counts[s]]
    assert not wrong, f"{len(wrong)} rolled-back transactions committed: {wrong[:10]}"
    # A torn half is the prepare in flight at a kill: never ended, so never acknowledged.
    assert not torn & set(acks), sorted(torn & set(acks))
    assert not torn & set(halves), sorted(torn & set(halves))
    for seq, what in acks.items():
        assert seq in halves, f"acknowledged {what} {seq} without a half"
        assert (what == "C") == decide(seq), (seq, what)
        assert counts[seq] == (1 if what == "C" else 0), (seq, what, counts[seq])
    discarded = sum(store.get_max_offset_in_queue(DISCARD_TOPIC, q) for q in (0,))
    assert discarded == 0, "a half was discarded"
    committed = sum(1 for s in halves if decide(s))
    return committed, len(halves) - committed


def resolve(store: MessageStore, tally: Tally, timeout: float = 60.0) -> None:
    """Check rounds with ``checker`` until nothing is pending."""
    store.set_transaction_checker(checker)
    deadline = time.monotonic() + timeout
    torn, seqs = torn_ids(store)
    tally.torn = len(seqs)
    # Appends write a record's size after the rest of it: a kill cannot leave a torn record.
    assert not seqs, f"records torn by the kill were kept by recovery: {sorted(seqs)}"

    def unresolved() -> list[Any]:
        return [p for p in store.pending_transactions() if p.transaction_id not in torn]

    while unresolved():
        assert time.monotonic() < deadline, unresolved()[:5]
        # Halves must be older than transaction_timeout, and a round stops at what it stored
        # itself (copies): the next round starts a little later.
        time.sleep(PARENT["transaction_timeout"] / 1000 + 0.002)
        store.check_transactions()
        tally.check_rounds += 1


def end_again(store: MessageStore, rng: random.Random, sample: int = 20) -> None:
    """Ending resolved transactions again (by id or by the half's offset, commit or rollback)
    after the reopen raises TransactionEndedError and writes nothing: the store knows them
    from its records only. Without the index, an id whose halves all lie below the check's
    progress is not looked for (the half queue is scanned from the progress only): that is
    TransactionNotFoundError, and nothing is written either."""
    halves = {seq_of(m): m for m in read_queue(store, HALF_TOPIC, 0) if not is_torn(m)}
    end = store.get_max_phy_offset()
    indexed = store.config.message_index_enable
    for seq in rng.sample(sorted(halves), min(sample, len(halves))):
        m = halves[seq]
        by_id = seq % 2 == 1
        target = m.properties["__transactionId__"] if by_id else m.commit_log_offset
        refused = (
            TransactionEndedError
            if indexed or not by_id
            else (TransactionEndedError, TransactionNotFoundError)
        )
        with pytest.raises(refused):
            store.end_transaction(target, rng.random() < 0.5)
    assert store.get_max_phy_offset() == end


def before_resolution(store: MessageStore, tally: Tally) -> None:
    """Counts the pending halves whose real message is already stored (no op yet)."""
    assert store.wait_dispatched(30)
    pending = {p.transaction_id for p in store.pending_transactions(limit=1 << 30)}
    tally.pending_at_reopen += len(pending)
    stored = {m.properties["UNIQ_KEY"] for m in read_topic(store, REAL)}
    tally.real_without_op += len(pending & stored)


def run_and_kill(
    path: Path, kind: str, *, start: int, rng: random.Random, acks: Path, settings: dict[str, Any]
) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(path),
            kind,
            str(start),
            str(rng.randint(0, 1 << 30)),
            str(acks),
            json.dumps(settings),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "READY", (line, proc.stderr.read() if proc.stderr else "")
        # The check kinds need the halves to age past transaction_timeout (100 ms) first.
        lo, hi = (0.0, 0.6) if kind == "produce" else (0.1, 1.2)
        deadline = time.monotonic() + rng.uniform(lo, hi)
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.01)
            if ready:
                line = proc.stdout.readline()
                assert not line, line  # the child prints nothing unless it fails
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        err = proc.stderr.read() if proc.stderr else ""
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
    assert proc.returncode == -signal.SIGKILL, err


def rounds(tmp_path: Path, kind: str, n: int, seed: int, **overrides: Any) -> Tally:
    rng = random.Random(seed)
    path, acks = tmp_path / "store", tmp_path / "acks"
    child = {**STORE, **KINDS[kind], **overrides}
    parent = {**STORE, **PARENT, **overrides}
    tally = Tally()
    for r in range(n):
        run_and_kill(path, kind, start=r * 10_000_000, rng=rng, acks=acks, settings=child)
        tally.kills += 1
        with MessageStore(path, **parent) as store:
            assert store.recovery_report()["abnormal"] is True
            before_resolution(store, tally)
            resolve(store, tally)
            end_again(store, rng)
            committed, rolled_back = census(store, read_acks(acks))
            tally.stats.update(store.transaction_stats())
    # Once more after a clean close: the resolution's ops were flushed, nothing is pending,
    # nothing changed.
    with MessageStore(path, **parent) as store:
        torn, _ = torn_ids(store)
        assert not [p for p in store.pending_transactions() if p.transaction_id not in torn]
        acked = read_acks(acks)
        assert census(store, acked) == (committed, rolled_back)
    # A kill cuts no key from the index: the message at its end, dispatched again at the
    # reopen, gets the keys it lacks then, so no open finds keys missing between files and
    # makes a gap file (named with an 18th digit) for them.
    index = path / "index"
    gap_files = (
        sorted(p.name for p in index.iterdir() if len(p.name) == 18) if index.exists() else []
    )
    assert not gap_files, gap_files
    tally.committed, tally.rolled_back, tally.acked = committed, rolled_back, len(acked)
    tally.halves = committed + rolled_back
    print(
        f"\n{kind}: {tally.kills} kills, {tally.halves} transactions ({tally.committed} "
        f"committed once, {tally.rolled_back} rolled back, {tally.acked} acknowledged by the "
        f"child), {tally.pending_at_reopen} pending at the reopens of which "
        f"{tally.real_without_op} already had their real message, {tally.check_rounds} check "
        f"rounds to resolve; {tally.torn} torn halves kept by recovery (left pending); parent "
        f"stats {dict(tally.stats)}"
    )
    assert tally.halves > 0
    return tally


def seed(default: int) -> int:
    return int(os.environ.get("RMQSTORE_CRASH_SEED", default))


def test_sigkill_while_producing(tmp_path: Path) -> None:
    tally = rounds(tmp_path, "produce", 8, seed(181))
    assert tally.acked > 0


def test_sigkill_while_checking(tmp_path: Path) -> None:
    tally = rounds(tmp_path, "check", 8, seed(182))
    assert tally.stats["checked"] > 0


def test_sigkill_between_real_put_and_op(tmp_path: Path) -> None:
    tally = rounds(tmp_path, "queued", 8, seed(183))
    # The window RocketMQ commits twice in was hit, and resolved once.
    assert tally.real_without_op > 0


def test_sigkill_between_real_put_and_op_without_index(tmp_path: Path) -> None:
    """The commit lookup without the index (the real queue is scanned instead)."""
    tally = rounds(tmp_path, "queued", 6, seed(184), message_index_enable=False)
    assert tally.real_without_op > 0


def test_the_census_catches_a_second_commit(tmp_path: Path) -> None:
    """The census fails on what RocketMQ 5.5.1 does at a check-back COMMIT of a half whose
    commit is stored and its op not (EndTransactionProcessor puts the real message again, with
    no lookup), and on an acknowledged commit that is missing; the same store resolved by
    rmqstore passes it."""
    rng = random.Random(seed(185))
    path, acks = tmp_path / "store", tmp_path / "acks"
    child = {**STORE, **KINDS["queued"]}
    tally = Tally()
    for _ in range(10):
        run_and_kill(
            path, "queued", start=tally.kills * 10_000_000, rng=rng, acks=acks, settings=child
        )
        tally.kills += 1
        with MessageStore(path, **STORE, **PARENT) as store:
            before_resolution(store, tally)
            if tally.real_without_op:
                break
            resolve(store, tally)
    assert tally.real_without_op > 0
    shutil.copytree(path, tmp_path / "copy")
    with MessageStore(path, **STORE, **PARENT) as store:
        assert store.wait_dispatched(30)
        stored = {m.properties["UNIQ_KEY"]: m for m in read_topic(store, REAL)}
        again = [p for p in store.pending_transactions(limit=1 << 30) if p.transaction_id in stored]
        assert len(again) == tally.real_without_op
        for p in again:
            first = stored[p.transaction_id]
            r = store.put_message(
                Message(
                    REAL,
                    first.body,
                    keys=first.keys,
                    queue_id=first.queue_id,
                    properties={"UNIQ_KEY": p.transaction_id},
                )
            )
            assert r.ok
        with pytest.raises(AssertionError, match=f"{len(again)} transactions committed twice"):
            census(store, read_acks(acks))
    with MessageStore(tmp_path / "copy", **STORE, **PARENT) as store:
        resolve(store, tally)
        census(store, read_acks(acks))
        seqs = {seq_of(m) for m in read_queue(store, HALF_TOPIC, 0)}
        rolled_back = next(s for s in sorted(seqs) if not decide(s))
        with pytest.raises(AssertionError, match=f"{rolled_back}"):
            census(store, {**read_acks(acks), rolled_back: "C"})


TORN_CHILD = textwrap.dedent(
    """
    import sys, time
    import rmqstore

    store = rmqstore.MessageStore(sys.argv[1], mapped_file_size_commit_log=1024 * 1024)
    for i in range(50):
        r = store.prepare_message(rmqstore.Message("TxReal", b"torn-%d" % i, queue_id=i % 4))
        assert r.ok
    print(r.wrote_offset, r.wrote_bytes, flush=True)
    time.sleep(60)
    """
)


def test_a_record_cut_by_a_kill_is_not_kept(tmp_path: Path) -> None:
    """What a kill during the copy of the last record leaves (appends write its total size
    last, after a fence: the size still 0, part of the tail not written) is not a record:
    recovery cuts the commitlog before it, and the half is not pending. A prepare in flight at
    a kill was never acknowledged, so losing it is right; keeping it would leave a transaction
    without a real topic that no check can resolve (and a commit cut the same way would lose
    the UNIQ_KEY the exactly-once lookup looks for)."""
    path = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-c", TORN_CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        offset, size = map(int, proc.stdout.readline().split())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    segment = path / "commitlog" / f"{offset // (1024 * 1024) * (1024 * 1024):020d}"
    with open(segment, "r+b") as f:
        # The size not yet written, and the last 40 bytes of the record (inside its
        # properties: REAL_QID and the flags) not either.
        f.seek(offset % (1024 * 1024))
        f.write(b"\0" * 4)
        f.seek(offset % (1024 * 1024) + size - 40)
        f.write(b"\0" * 40)
    with MessageStore(path, mapped_file_size_commit_log=1024 * 1024) as store:
        assert store.recovery_report()["abnormal"] is True
        assert store.wait_dispatched(30)
        pending = store.pending_transactions()
        assert all(p.topic == REAL for p in pending), [p for p in pending if p.topic != REAL]
        assert store.get_max_phy_offset() == offset


# Sixty kill rounds take 2-3 minutes on a free machine and nearly 6 under a load of 8-10 (each
# round starts a Python child and reopens the store after a crash): the suite's 300 s
# timeout failed the check kind under load, not a hang (measured 2026-11-25: 347 s, passed).
@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize(
    ("kind", "n", "overrides"),
    [
        ("produce", 60, {}),
        ("check", 60, {}),
        ("queued", 60, {}),
        ("queued", 40, {"message_index_enable": False}),
    ],
    ids=["produce", "check", "queued", "queued-no-index"],
)
def test_sigkill_many_rounds(tmp_path: Path, kind: str, n: int, overrides: dict[str, Any]) -> None:
    tally = rounds(tmp_path, kind, n, seed(1810 + n + len(kind)), **overrides)
    assert tally.real_without_op > 0
