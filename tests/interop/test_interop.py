"""Issue 6: byte compatibility with Apache RocketMQ's store, judged by RocketMQ itself.

Every test drives the published ``org.apache.rocketmq:rocketmq-store`` (the Java harness) and
rmqstore on the same folders with the same segment sizes, then compares what each reads back,
field by field, and against what was written.
"""

from __future__ import annotations

import base64
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from interop_harness import (
    Dump,
    JavaHarness,
    Sizes,
    assert_same_dump,
    b64,
    check_matches_described,
    expand,
    expected_queries,
    expected_tag_queries,
    rmq_dump,
    rmq_tag_queries,
    rmq_write,
)
from rmqwire import (
    header_race_index_file,
    parse_index_file,
    read_commitlog,
    same_millisecond_index_file,
    segment_files,
)

pytestmark = pytest.mark.interop

SMALL = Sizes()  # 64 KiB commitlog, 10-unit consume queue, 64-slot/50-entry index files


def mixed_messages(seed: int, n: int, *, born: int = 1_700_000_000_000) -> list[dict[str, Any]]:
    """Puts of every kind the issue lists: empty bodies, non-ASCII property values and tags,
    many keys, IPv6 born hosts, batches, a topic with many queues."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        kind = i % 7
        topic = "ManyQueues" if kind in (2, 5) else "TopicA"
        queue = rng.randrange(24) if topic == "ManyQueues" else rng.randrange(4)
        keys = [f"k{seed}-{i}"]
        if kind == 3:
            keys += [f"many{seed}-{i}-{j}" for j in range(30)]
        if i % 10 == 0:
            keys.append(f"shared{seed}-{(i // 10) % 5}")
        props = {"seq": str(i)}
        if kind in (1, 4):
            props["note"] = "zürich 東京 🙂 ĳ"
        d: dict[str, Any] = {
            "topic": topic,
            "queueId": queue,
            "tags": ["TagA", "TagB", "标签", None][i % 4],
            "keys": keys,
            "properties": props,
            "bornTimestamp": born + i,
            "bornHost": "[2001:db8::7]:4321" if kind == 6 else f"10.1.2.{i % 250}:{5000 + i}",
            "flag": i % 3,
        }
        if kind == 5:
            d["bodies"] = [
                b64(rng.randbytes(rng.randrange(0, 300))) for _ in range(rng.randint(2, 5))
            ]
        else:
            d["body"] = "" if kind == 0 else b64(rng.randbytes(rng.randrange(1, 1500)))
        out.append(d)
    return out


def _files(path: Path, sub: str) -> list[Path]:
    return sorted(p for p in (path / sub).rglob("*") if p.is_file())


def _commitlog_bytes(path: Path, end: int, segment: int) -> bytes:
    data = b"".join(p.read_bytes() for p in segment_files(path))
    assert len(data) >= end
    assert int(segment_files(path)[0].name) == 0
    assert len(data) % segment == 0
    return data[:end]


def test_rocketmq_writes_rmqstore_reads(referee: JavaHarness, tmp_path: Path) -> None:
    """RocketMQ writes; rmqstore reads the same messages at the same queue and commitlog
    offsets with the same properties and key lookups, and RocketMQ reading the store after
    rmqstore has opened and closed it sees exactly what rmqstore saw."""
    store = tmp_path / "store"
    described = mixed_messages(1, 200)
    puts = referee.write(store, SMALL, described, tmp_path / "scratch")
    assert len(segment_files(store)) >= 3
    assert len(_files(store, "index")) >= 3
    theirs_before = _commitlog_bytes(store, puts[-1]["wroteOffset"], SMALL.commitlog)
    ours = rmq_dump(store, SMALL)
    assert ours.extra["recovery"]["abnormal"] is False
    check_matches_described(ours, described, puts, SMALL)
    # rmqstore's open and close did not change a byte of RocketMQ's records.
    assert _commitlog_bytes(store, len(theirs_before), SMALL.commitlog) == theirs_before
    theirs = referee.read(store, SMALL)
    assert_same_dump(ours, theirs)


def _written_with_natural_refills(
    referee: JavaHarness, tmp_path: Path, untouched: Callable[[list[str]], int] | None = None
) -> tuple[Path, list[dict[str, Any]], list[dict[str, Any]], list[str], list[str]]:
    """RocketMQ writes the mixed messages with at least 12 index files; the store, the
    messages, RocketMQ's put results, the index file names, and the files rmqstore's open adds
    to an untouched copy. RocketMQ's write may itself lose a file (two files filled in one
    millisecond, the bug the callers build by hand): what rmqstore adds for those is expected
    too. With ``untouched`` (the names -> the position ``at`` of the pair a caller damages),
    a natural loss next to that pair would merge with the damage, and the gap files then
    depend on both: such a write is made again (up to five times) so that the pair's
    neighbourhood, from ``names[at - 1]`` to ``names[at + 1]`` (or on, when that is the last
    file), has no natural loss."""
    for attempt in range(5):
        base = tmp_path / f"write{attempt}"
        store = base / "store"
        described = mixed_messages(1, 200)
        puts = referee.write(store, SMALL, described, base / "scratch")
        names = sorted(p.name for p in (store / "index").iterdir())
        assert len(names) >= 12
        natural = base / "natural"
        shutil.copytree(store, natural)
        rmq_dump(natural, SMALL)
        refilled = sorted({p.name for p in (natural / "index").iterdir()} - set(names))
        if untouched is None:
            break
        at = untouched(names)
        # When the pair ends the index, a new last file (the last header raced too) is next
        # to it as well.
        last = at + 1 == len(names) - 1
        if not any(names[at - 1] < r and (last or r < names[at + 1]) for r in refilled):
            break
    else:
        raise AssertionError(f"five writes all lost an index file next to the pair: {refilled}")
    return store, described, puts, names, refilled


def _named_by_time(added: list[str], names: list[str]) -> list[str]:
    """``added`` with each new last file (17 digits, after every name RocketMQ wrote) as
    ``"<new last file>"``. A gap file's name comes from its neighbours; a new last file's comes
    from the clock of the open that made it (``getAndCreateLastIndexFile``: the last file was
    full when keys after it were indexed again), so two opens of copies of one store name it
    differently (one CI run: ``...326671`` for the natural copy, ``...328528`` for the damaged
    one)."""
    last = max(names)
    return sorted("<new last file>" if len(a) == len(last) and a > last else a for a in added)


def _check_repaired(
    referee: JavaHarness,
    tmp_path: Path,
    store: Path,
    *,
    described: list[dict[str, Any]],
    puts: list[dict[str, Any]],
    names: list[str],
    expected_added: list[str],
) -> None:
    """The damaged index really loses keys for RocketMQ; rmqstore's open adds exactly the files
    ``expected_added`` and finds every key once, and RocketMQ reading afterwards agrees."""
    damaged = tmp_path / "damaged"
    shutil.copytree(store, damaged)
    as_left = referee.read(damaged, SMALL)
    assert as_left.queries != expected_queries(as_left)  # keys really are lost
    ours = rmq_dump(store, SMALL)
    check_matches_described(ours, described, puts, SMALL)
    added = sorted({p.name for p in (store / "index").iterdir()} - set(names))
    assert _named_by_time(added, names) == _named_by_time(expected_added, names)
    theirs = referee.read(store, SMALL)
    assert_same_dump(ours, theirs)


def test_index_file_lost_to_a_same_millisecond_name(referee: JavaHarness, tmp_path: Path) -> None:
    """Issue 15 item 2: RocketMQ names a new index file after the current millisecond and opens
    an existing file of that name, so a file made in the millisecond of the one before
    overwrites it (under load, 2 of 20 runs of ``test_rocketmq_writes_rmqstore_reads`` lost a
    file this way). Built here deterministically: RocketMQ writes, then its ninth and tenth
    index files are made one, as RocketMQ leaves them. RocketMQ itself then misses keys;
    rmqstore's open indexes them again (in a file between the two neighbours), and afterwards
    both find every key, exactly once."""
    store, described, puts, names, refilled = _written_with_natural_refills(
        referee, tmp_path, lambda names: 8
    )
    index = store / "index"
    assert names[7] + "1" not in refilled
    same_millisecond_index_file(
        index / names[8], index / names[9], SMALL.hash_slots, SMALL.index_num
    )
    _check_repaired(
        referee,
        tmp_path,
        store,
        described=described,
        puts=puts,
        names=names,
        expected_added=[names[7] + "1", *refilled],
    )


@pytest.mark.parametrize(
    ("files", "flushed"),
    [
        ("ninth-and-tenth", "after-first-put"),
        ("ninth-and-tenth", "after-last-put"),
        ("last-two", "after-first-put"),
        ("last-two", "after-last-put"),
    ],
)
def test_index_file_lost_to_a_same_millisecond_name_and_a_header_race(
    referee: JavaHarness, tmp_path: Path, files: str, flushed: str
) -> None:
    """Issue 16: the same-millisecond loss of issue 15, with the full file's flush racing the
    new file's puts, as RocketMQ 4.9.8 leaves it (1 of about 30 runs of
    ``test_rocketmq_writes_rmqstore_reads[rmq4]`` lost keys of the last files' messages this
    way). ``getAndCreateLastIndexFile`` flushes the full file in a new thread, which copies its
    in-memory header over the new file's in the shared mapping; the new file's later puts
    never write the begin offset again. The file then claims the lost file's messages (no gap
    before it) while holding only the new file's entries. Built here deterministically: the
    ninth and tenth files (or the last two, as in the failed run) are made one, with the
    older's header landing after the newer's first put (begin offset and time stay the
    older's) or after its last (the whole header is the older's; a CI run's own RocketMQ write
    once left the last two files so). rmqstore's open sees that
    the header does not describe the entries, indexes the lost messages again (in a file
    between the two neighbours) without doubling what the file holds, and afterwards rmqstore
    and RocketMQ both find every key, exactly once."""

    def pair(names: list[str]) -> int:
        return 8 if files == "ninth-and-tenth" else len(names) - 2

    store, described, puts, names, refilled = _written_with_natural_refills(referee, tmp_path, pair)
    index = store / "index"
    at = pair(names)
    assert names[at - 1] + "1" not in refilled
    older, newer = (
        parse_index_file(n, (index / n).read_bytes(), SMALL.hash_slots, SMALL.index_num)
        for n in names[at : at + 2]
    )
    # The newer file starts after the older's messages: those are what the race loses.
    assert older.header.begin_phy_offset < older.header.end_phy_offset
    assert newer.header.begin_phy_offset >= older.header.end_phy_offset
    header_race_index_file(
        index / names[at],
        index / names[at + 1],
        SMALL.hash_slots,
        SMALL.index_num,
        1 if flushed == "after-first-put" else newer.header.index_count - 1,
    )
    raced = parse_index_file(
        names[at], (index / names[at]).read_bytes(), SMALL.hash_slots, SMALL.index_num
    )
    # The header claims the older file's first message; the entries begin with the newer's.
    assert raced.header.begin_phy_offset == older.header.begin_phy_offset
    first, new_first = raced.entries[1], newer.entries[1]
    assert first is not None
    assert new_first is not None
    assert first.phy_offset == new_first.phy_offset
    # At the end of the index with the whole header the older's, the file claims to end where
    # the older ended and is full: the open indexes the newer's messages again, into a new last
    # file (named after the open's clock).
    tail = ["<new last file>"] if (files, flushed) == ("last-two", "after-last-put") else []
    _check_repaired(
        referee,
        tmp_path,
        store,
        described=described,
        puts=puts,
        names=names,
        expected_added=[names[at - 1] + "1", *refilled, *tail],
    )


def test_rmqstore_writes_rocketmq_reads(referee: JavaHarness, tmp_path: Path) -> None:
    """rmqstore writes across several commitlog, consume queue and index files; RocketMQ's
    recovery keeps every byte (no truncation) and its getMessage, lookMessageByOffset and
    queryMessage return exactly what was written."""
    store = tmp_path / "store"
    described = mixed_messages(2, 200)
    puts = rmq_write(store, SMALL, described)
    assert len(segment_files(store)) >= 3
    assert len(_files(store, "index")) >= 3
    assert max(len(list(d.iterdir())) for d in (store / "consumequeue" / "TopicA").iterdir()) >= 2
    records = read_commitlog(store)
    end = max(r.physical_offset + r.total_size for r in records.values())
    ours_bytes = _commitlog_bytes(store, end, SMALL.commitlog)
    theirs = referee.read(store, SMALL)
    assert theirs.max_phy_offset == end
    check_matches_described(theirs, described, puts, SMALL)
    # RocketMQ's recovery and shutdown left every record byte where it was.
    assert _commitlog_bytes(store, end, SMALL.commitlog) == ours_bytes
    ours = rmq_dump(store, SMALL)
    assert ours.extra["recovery"]["discarded_bytes"] == 0
    assert_same_dump(ours, theirs)


def test_tag_index_entries_both_ways(
    rocketmq: JavaHarness, rocketmq4: JavaHarness, tmp_path: Path
) -> None:
    """RocketMQ 5.5.1 also indexes each TAGS value (``topic#T#tags``) and answers tag queries
    (``queryMessage`` with index type ``T``) from those entries. rmqstore writes them with
    ``index_tags=True``: RocketMQ's tag queries on rmqstore's store find exactly the tagged
    messages, rmqstore's ``query_message_by_tag`` on RocketMQ's store answers as RocketMQ
    does, and RocketMQ 4.9.8 still reads the store (the extra entries are only chain links)."""
    described = mixed_messages(5, 100)
    ours = tmp_path / "ours"
    puts = rmq_write(ours, SMALL, described, index_tags=True)
    theirs = rocketmq.read(ours, SMALL)
    check_matches_described(theirs, described, puts, SMALL)
    want = expected_tag_queries(theirs)
    assert len(want) == 6  # 2 topics x 3 tags (one of them non-ASCII)
    assert theirs.extra["tag_queries"] == want
    old = rocketmq4.read(ours, SMALL)
    assert old.queries == expected_queries(old)
    assert old.extra["tag_queries"] == {}  # 4.9.8 has no typed query
    # Without the setting, 5.5.1's tag queries find nothing on rmqstore's store.
    plain = tmp_path / "plain"
    rmq_write(plain, SMALL, described)
    plain_tags = rocketmq.read(plain, SMALL).extra["tag_queries"]
    assert sorted(plain_tags) == sorted(want)
    assert all(offsets == [] for offsets in plain_tags.values())
    # RocketMQ writes: rmqstore's tag lookups answer as RocketMQ's own.
    store = tmp_path / "theirs"
    rocketmq.write(store, SMALL, described, tmp_path / "scratch")
    read = rocketmq.read(store, SMALL)
    assert read.extra["tag_queries"] == expected_tag_queries(read)
    assert (
        rmq_tag_queries(store, SMALL, sorted(read.extra["tag_queries"]))
        == (read.extra["tag_queries"])
    )


@pytest.mark.parametrize("first", ["rocketmq", "rmqstore"])
def test_one_writes_other_appends_both_read(
    referee: JavaHarness, tmp_path: Path, first: str
) -> None:
    """A store written by one, appended to by the other, then by the first again: both read
    the whole of it identically, and as written."""
    store = tmp_path / "store"
    scratch = tmp_path / "scratch"
    parts = [mixed_messages(10 + i, 60, born=1_700_000_000_000 + 1000 * i) for i in range(3)]
    order = (
        ["rocketmq", "rmqstore", "rocketmq"]
        if first == "rocketmq"
        else ["rmqstore", "rocketmq", "rmqstore"]
    )
    puts: list[dict[str, Any]] = []
    for who, part in zip(order, parts, strict=True):
        if who == "rocketmq":
            puts += referee.write(store, SMALL, part, scratch)
        else:
            puts += rmq_write(store, SMALL, part)
    described = [d for part in parts for d in part]
    ours = rmq_dump(store, SMALL)
    check_matches_described(ours, described, puts, SMALL)
    theirs = referee.read(store, SMALL)
    assert_same_dump(ours, theirs)


BIG = Sizes(commitlog=8 * 1024 * 1024, cq=20 * 50, hash_slots=64, index_num=50)


def _big_bodies() -> list[dict[str, Any]]:
    rng = random.Random(7)
    out = []
    for i, size in enumerate([10, 4 * 1024 * 1024, 0, 4 * 1024 * 1024, 100, 3 * 1024 * 1024]):
        out.append(
            {
                "topic": "Big",
                "queueId": i % 2,
                "tags": "Large",
                "keys": [f"big-{i}"],
                "properties": {"size": str(size)},
                "body": b64(rng.randbytes(size)),
                "bornTimestamp": 1_700_000_000_000 + i,
                "bornHost": "10.0.0.9:9",
                "flag": 0,
            }
        )
    return out


def _write_then_both_read(
    rocketmq: JavaHarness,
    tmp_path: Path,
    writer: str,
    sizes: Sizes,
    described: list[dict[str, Any]],
) -> Dump:
    """``writer`` puts the messages into a new store; rmqstore's reading must match them and
    RocketMQ's reading must equal rmqstore's. Returns rmqstore's dump."""
    store = tmp_path / "store"
    if writer == "rocketmq":
        puts = rocketmq.write(store, sizes, described, tmp_path / "scratch")
    else:
        puts = rmq_write(store, sizes, described)
    ours = rmq_dump(store, sizes)
    check_matches_described(ours, described, puts, sizes)
    assert_same_dump(ours, rocketmq.read(store, sizes))
    return ours


@pytest.mark.parametrize("writer", ["rocketmq", "rmqstore"])
def test_four_mib_bodies(rocketmq: JavaHarness, tmp_path: Path, writer: str) -> None:
    """4 MiB bodies (RocketMQ's maxMessageSize) roll 8 MiB segments; both read them back."""
    _write_then_both_read(rocketmq, tmp_path, writer, BIG, _big_bodies())
    assert len(segment_files(tmp_path / "store")) >= 2


IPV6_STORE = Sizes(store_host="[fd00::1:2]:10911")


@pytest.mark.parametrize("writer", ["rocketmq", "rmqstore"])
def test_ipv6_store_host(rocketmq: JavaHarness, tmp_path: Path, writer: str) -> None:
    """An IPv6 store host (20-byte STOREHOST, sysflag bit 5, 56-character message ids)."""
    ours = _write_then_both_read(rocketmq, tmp_path, writer, IPV6_STORE, mixed_messages(3, 40))
    assert all(m["sysFlag"] & 0x20 and len(m["msgId"]) == 56 for m in ours.messages)


SYNC = Sizes(flush="SYNC_FLUSH")


@pytest.mark.parametrize("writer", ["rocketmq", "rmqstore"])
def test_sync_flush_both_ways(rocketmq: JavaHarness, tmp_path: Path, writer: str) -> None:
    """SYNC_FLUSH on both sides (dispatch bounded by the flushed offset): the same store."""
    _write_then_both_read(rocketmq, tmp_path, writer, SYNC, mixed_messages(6, 40))


def test_sigkill_of_the_rocketmq_writer(rocketmq: JavaHarness, tmp_path: Path) -> None:
    """RocketMQ writes until SIGKILL; rmqstore's abnormal recovery keeps exactly the messages
    RocketMQ's own recovery keeps (each on its own copy of the killed store: same queues,
    offsets, fields), and both keep every put RocketMQ acknowledged (the page cache survives
    the process).

    Key lookups are where the two differ, and RocketMQ is the one that is wrong: its abnormal
    recovery deletes the index files written after the checkpoint's index timestamp and
    re-indexes only from the commitlog segment it restarts dispatch at, so keys of messages in
    between can be lost and keys of messages after it are indexed twice (queryMessage returns
    the same offset twice). rmqstore's lookups must equal the truth (every key finds the
    messages carrying it), and RocketMQ's must be a subset of them."""
    import subprocess
    import time

    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    store = tmp_path / "store"
    want = rng.randrange(300, 3000)
    acked: list[str] = []
    stderr = tmp_path / "writer.stderr"
    with (
        open(stderr, "w") as err,
        subprocess.Popen(
            rocketmq.command(SMALL, "write-forever", str(store)),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        ) as proc,
    ):
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                acked.append(line)
                if len(acked) >= want:
                    break
            time.sleep(rng.random() * 0.05)
        finally:
            proc.kill()
            proc.wait(30)
    assert len(acked) >= want, f"writer stopped early: {stderr.read_text()[-3000:]}"
    assert (store / "abort").exists()
    copies = {who: tmp_path / who for who in ("rmqstore", "rocketmq")}
    for dst in copies.values():
        shutil.copytree(store, dst)
    ours = rmq_dump(copies["rmqstore"], SMALL)
    assert ours.extra["recovery"]["abnormal"] is True, seed
    theirs = rocketmq.read(copies["rocketmq"], SMALL)
    assert_same_dump(ours, theirs, skip=("queries",))
    truth = expected_queries(ours)
    assert ours.queries == truth, seed
    assert set(theirs.queries) == set(truth)
    lost = duplicated = 0
    for key, offsets in theirs.queries.items():
        assert set(offsets) <= set(truth[key]), (seed, key)
        lost += len(set(truth[key]) - set(offsets))
        duplicated += len(offsets) - len(set(offsets))
    print(
        f"seed {seed}: {len(acked)} acked; RocketMQ's recovered index lost {lost} and "
        f"duplicated {duplicated} of {sum(map(len, truth.values()))} key entries"
    )
    kept = {m["commitLogOffset"] for m in ours.messages}
    import json

    acked_offsets = {json.loads(x)["wroteOffset"] for x in acked}
    assert acked_offsets <= kept, seed
    assert len(ours.messages) >= want


def test_expand_counts_batches() -> None:
    """The helper the checks rely on: a batch gives one record per body."""
    d = mixed_messages(4, 14)
    n = sum(len(x["bodies"]) if "bodies" in x else 1 for x in d)
    assert len(expand(d)) == n > 14
    assert base64.b64decode(expand(d)[0]["body"]) == b""


def test_zero_byte_index_file_left_by_a_crash(rocketmq: JavaHarness, tmp_path: Path) -> None:
    """A crash between creating an index file and sizing it leaves it empty. RocketMQ opens
    such a store, and so does rmqstore (it removes the empty file), with the same messages."""
    store = tmp_path / "store"
    described = mixed_messages(5, 60)
    puts = rocketmq.write(store, SMALL, described, tmp_path / "scratch")
    newest = max(int(p.name) for p in (store / "index").iterdir())
    (store / "index" / str(newest + 1)).touch()
    (store / "abort").write_text("12345")
    copies = {who: tmp_path / who for who in ("rmqstore", "rocketmq")}
    for dst in copies.values():
        shutil.copytree(store, dst)
    theirs = rocketmq.read(copies["rocketmq"], SMALL)
    assert theirs.max_phy_offset == max(
        m["commitLogOffset"] + m["storeSize"] for m in theirs.messages
    )
    assert theirs.max_phy_offset > puts[-1]["wroteOffset"]
    assert len(theirs.messages) == len(expand(described))
    ours = rmq_dump(copies["rmqstore"], SMALL)
    assert not (copies["rmqstore"] / "index" / str(newest + 1)).exists()
    assert_same_dump(ours, theirs, skip=("queries",))


def test_side_by_side_benchmark_runs(rocketmq: JavaHarness, tmp_path: Path) -> None:
    """benches/interop_side_by_side.py (the issue's side-by-side figure) still runs: a tiny
    round of each side, both rates measured and the ratio printed (figures: benches/README)."""
    import json
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benches" / "interop_side_by_side.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--n", "2000", "--warmup", "200", "--size", "128",
         "--rounds", "1", "--segment", str(4 * 1024 * 1024), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "ratio" in lines[0]
    (res,) = json.loads(lines[-1])
    java, ours = res["rocketmq_msgs_per_s"], res["rmqstore_msgs_per_s"]
    assert java > 0
    assert ours > 0
    # The script rounds the rates to whole messages a second and the ratio to 0.01, so the ratio
    # of the rounded rates agrees with the printed one only to within those roundings: when a
    # loaded machine slows RocketMQ's round to 1,000 msg/s and the ratio is 80, half a message
    # a second is 0.04 of it.
    ratio = ours / java
    assert abs(res["ratio"] - ratio) <= 0.005 + 2 * ratio * (0.5 / java + 0.5 / ours)
