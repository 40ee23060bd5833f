"""read_batch's ``binary_view`` bodies (the default): they point into the mapped commitlog
segments instead of being copied, equal the ``binary`` column row by row, and never change
after the batch is returned, whatever happens to the store or its files afterwards (close, the
store dropped, ``truncate_files``, the recovery of a store opened again, a forked child)."""

from __future__ import annotations

import gc
import os
import resource
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
import rmqstore
from rmqstore import Message, MessageStore
from rmqwire import SMALL_STORE, append_records, commitlog_dir, encode_properties

KIB = 1024
MIB = 1024 * 1024

#: Body sizes around the view layout's limits: empty, inline (<= 12 bytes), the first size that
#: points into a segment (13), and large ones.
SIZES = [0, 1, 5, 12, 13, 100, KIB, 3 * KIB]


def _body(i: int, size: int) -> bytes:
    return ((b"%08d|" % i) * (size // 9 + 1))[:size]


def _fill(store: MessageStore, topic: str, sizes: list[int]) -> list[bytes]:
    bodies = [_body(i, s) for i, s in enumerate(sizes)]
    run: list[bytes] = []
    for i, b in enumerate(bodies):
        run.append(b)
        if len(run) == 256 or sum(map(len, run)) > 16 * KIB or i == len(bodies) - 1:
            r = store.put_messages(topic, 0, run)
            assert r.ok, r
            run = []
    assert store.wait_dispatched()
    return bodies


def _both(store: MessageStore, topic: str, offset: int, n: int) -> tuple[pa.RecordBatch, ...]:
    view = store.read_batch(topic, 0, offset, n)
    plain = store.read_batch(topic, 0, offset, n, body_type="binary")
    assert view.schema.field("body").type == pa.binary_view()
    assert plain.schema.field("body").type == pa.binary()
    view.validate(full=True)
    return view, plain


def test_views_equal_binary_for_every_size_across_segments(open_store) -> None:
    # 4 MiB segments: 1 MiB bodies, and a run of small ones, across several segments.
    store = open_store(mapped_file_size_commit_log=4 * MIB)
    sizes = [SIZES[i % len(SIZES)] for i in range(400)]
    for at in (3, 50, 51, 200, 333):
        sizes[at] = MIB
    bodies = _fill(store, "Mix", sizes)
    assert len(store.commitlog_segments()) >= 2
    for offset, n in ((0, 400), (1, 399), (49, 5), (200, 1), (390, 100)):
        view, plain = _both(store, "Mix", offset, n)
        want = bodies[offset : offset + n]
        assert view.column("body").to_pylist() == want
        assert plain.column("body").to_pylist() == want
        # Every other column too, row by row.
        assert view.drop_columns(["body"]).equals(plain.drop_columns(["body"]))
        assert view.column("body").cast(pa.binary()).equals(plain.column("body"))


def test_many_segments_and_the_two_thread_path(open_store) -> None:
    # 64 KiB segments and 1 KiB bodies: about 60 messages a segment, 20,000 rows (read on two
    # threads, joined), so one data buffer for each of some 330 segments.
    store = open_store(**SMALL_STORE)
    n = 20_000
    bodies = _fill(store, "Many", [KIB if i % 9 else 7 for i in range(n)])
    segments = len(store.commitlog_segments())
    assert segments > 300
    view, plain = _both(store, "Many", 0, n)
    assert view.num_rows == n
    assert view.column("body").to_pylist() == bodies
    assert view.column("body").cast(pa.binary()).equals(plain.column("body"))
    # One data buffer a segment (the two halves' buffers in the segment where they meet are
    # one; the last buffer is the empty one of decompressed bodies).
    buffers = view.column("body").buffers()  # validity, views, segments..., decompressed
    assert segments - 1 <= len(buffers) - 3 <= segments


def test_compressed_bodies_go_into_an_owned_buffer(store_path: Path) -> None:
    original = b"".join(b"order %06d paid; " % i for i in range(600))
    short = b"tiny!"  # decompresses to an inline view
    specs = [
        {"body": zlib.compress(original), "sys_flag": 0x1},
        {"body": b"stored as is, long enough to point", "sys_flag": 0},
        {"body": zlib.compress(short), "sys_flag": 0x1},
        {"body": zlib.compress(original[:5000]), "sys_flag": 0x1},
    ]
    with MessageStore(store_path, **SMALL_STORE) as store:
        assert store.put_message(Message("Z", b"plain first body")).ok
        end = store.get_max_phy_offset()
    records = [
        {
            "topic": "Z",
            "queue_offset": i + 1,
            "store_timestamp": 1,
            "born_timestamp": 1,
            "properties": encode_properties([("TAGS", "t")]),
            **s,
        }
        for i, s in enumerate(specs)
    ]
    append_records(store_path, end, records)
    with MessageStore(store_path, **SMALL_STORE) as store:
        assert store.wait_dispatched()
        want = [b"plain first body", original, specs[1]["body"], short, original[:5000]]
        view, plain = _both(store, "Z", 0, 10)
        assert view.column("body").to_pylist() == want
        assert plain.column("body").to_pylist() == want
        stored = store.read_batch("Z", 0, 0, 10, decompress=False)
        assert stored.column("body").to_pylist()[1] == specs[0]["body"]


def test_body_type_is_checked(open_store) -> None:
    store = open_store()
    with pytest.raises(rmqstore.errors.InvalidArgumentError, match="body_type"):
        store.read_batch("T", 0, 0, 1, body_type="string")  # type: ignore[arg-type]


# -- the bytes of a returned batch never change ------------------------------------------------


def _snapshot(batch: pa.RecordBatch) -> list[bytes]:
    return batch.column("body").to_pylist()


def test_batch_outlives_close_and_the_store(store_path: Path) -> None:
    store = MessageStore(store_path, **SMALL_STORE)
    bodies = _fill(store, "Life", [KIB] * 300)
    batch = store.read_batch("Life", 0, 0, 300)
    assert _snapshot(batch) == bodies
    store.close()
    assert _snapshot(batch) == bodies
    del store
    gc.collect()
    assert _snapshot(batch) == bodies
    # The files deleted too: the mapping is the batch's.
    for f in commitlog_dir(store_path).iterdir():
        f.unlink()
    assert _snapshot(batch) == bodies


def test_truncate_files_does_not_change_a_live_batch(open_store) -> None:
    store = open_store(**SMALL_STORE)
    bodies = _fill(store, "Cut", [KIB] * 300)
    batch = store.read_batch("Cut", 0, 0, 300)
    before = _snapshot(batch)
    assert before == bodies
    cut = store.get_commit_log_offset_in_queue("Cut", 0, 30)
    assert store.truncate_files(cut)
    assert store.get_max_offset_in_queue("Cut", 0) == 30
    # The cut segment's tail was zeroed and the later segments deleted; the batch kept its
    # bytes (equal, byte for byte, to what it had).
    assert _snapshot(batch) == before
    # New messages where the old ones were: a new read sees them, the old batch does not.
    new = _fill(store, "Cut", [KIB] * 10)
    again = store.read_batch("Cut", 0, 30, 10)
    assert _snapshot(again) == new
    assert _snapshot(batch) == before
    assert store.read_batch("Cut", 0, 0, 30).column("body").to_pylist() == bodies[:30]


def test_recovery_of_a_reopened_store_does_not_change_a_live_batch(store_path: Path) -> None:
    store = MessageStore(store_path, **SMALL_STORE)
    bodies = _fill(store, "Rec", [KIB] * 40)[11:]
    batch = store.read_batch("Rec", 0, 11, 29)  # the rows after the one damaged below
    damaged_at = store.get_commit_log_offset_in_queue("Rec", 0, 10)
    store.close()
    # A flipped byte in message 10's body: the next open's recovery stops there and zeroes
    # everything after it, in the same files the batch maps.
    seg = 64 * 1024
    name = commitlog_dir(store_path) / f"{damaged_at // seg * seg:020d}"
    with open(name, "r+b") as f:
        f.seek(damaged_at % seg + 200)
        b = f.read(1)
        f.seek(damaged_at % seg + 200)
        f.write(bytes([b[0] ^ 0xFF]))
    reopened = MessageStore(store_path, **SMALL_STORE)
    try:
        assert reopened.get_max_phy_offset() == damaged_at
        assert _snapshot(batch) == bodies
    finally:
        reopened.close()
    assert _snapshot(batch) == bodies


def test_get_message_bodies_are_copied_once_and_survive_truncation(open_store) -> None:
    store = open_store(**SMALL_STORE)
    bodies = _fill(store, "One", [KIB] * 100)
    got = store.get_message("g", "One", 0, 60, 32)
    looked = store.look_message_by_offset(store.get_commit_log_offset_in_queue("One", 0, 90))
    assert looked is not None
    # One bytes object a message, made at the first access (the core leaves the body in the
    # segment's mapping until then).
    assert got.messages[0].body is got.messages[0].body
    assert looked.body is looked.body
    assert store.truncate_files(store.get_commit_log_offset_in_queue("One", 0, 10))
    assert [m.body for m in got.messages] == bodies[60:92]
    assert looked.body == looked.stored_body == bodies[90]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_reads_the_batch(open_store) -> None:
    store = open_store(**SMALL_STORE)
    bodies = _fill(store, "Fork", [KIB, 3, 13, 2 * KIB] * 50)
    batch = store.read_batch("Fork", 0, 0, 200)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        ok = _snapshot(batch) == bodies
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _snapshot(batch) == bodies


# -- no page fault per call in steady state ----------------------------------------------------


@pytest.mark.parametrize("rows", [8192, 65536])
def test_read_loop_faults_no_page_per_call(open_store, rows: int) -> None:
    store = open_store(mapped_file_size_commit_log=64 * MIB)
    total = 2 * 65536
    _fill(store, "Pf", [KIB] * total)

    def walk() -> int:
        offset = 0
        calls = 0
        while offset < total:
            b = store.read_batch("Pf", 0, offset, rows)
            offset += b.num_rows
            calls += 1
            del b
        return calls

    walk()
    walk()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    calls = sum(walk() for _ in range(5))
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    # Copying the bodies faulted 16,384 pages per call of 65,536 rows (64 MiB / 4 KiB), and
    # 2,048 per call of 8,192 when the allocator gave fresh pages. What is left is a few
    # pages of the interpreter's and pyarrow's own objects, whatever the batch size.
    assert faults / calls < 64, (faults, calls)
