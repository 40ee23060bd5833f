"""truncate_files and is_offset_aligned (docs/architecture.md#truncation)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rmqstore import GetMessageStatus, InvalidArgumentError, Message, MessageStore

SMALL = {
    "mapped_file_size_commit_log": 16 * 1024,
    "mapped_file_size_consume_queue": 20 * 50,
    "max_hash_slot_num": 64,
    "max_index_num": 40,
}


def _fill(store: MessageStore, n: int) -> list:
    rs = []
    for i in range(n):
        r = store.put_message(Message("T", b"m%03d" % i * 20, keys=f"k{i}", queue_id=i % 2))
        assert r.ok
        rs.append(r)
    assert store.wait_dispatched()
    return rs


def test_truncate_cuts_everything_from_the_offset(open_store, store_path: Path) -> None:
    store = open_store(**SMALL)
    rs = _fill(store, 200)
    assert len(store.commitlog_segments()) >= 3
    cut = rs[120]
    assert store.is_offset_aligned(cut.wrote_offset)
    assert not store.is_offset_aligned(cut.wrote_offset + 1)
    assert store.truncate_files(cut.wrote_offset) is True
    assert store.get_max_phy_offset() == cut.wrote_offset
    assert store.look_message_by_offset(rs[119].wrote_offset).keys == ["k119"]
    assert store.look_message_by_offset(cut.wrote_offset) is None
    for q in (0, 1):
        assert store.get_max_offset_in_queue("T", q) == 60
    assert [m.keys for m in store.query_message("T", "k119")] == [["k119"]]
    assert store.query_message("T", "k150") == []
    assert store.query_message("T", "k120") == []
    # Writing continues at the cut with the queue offsets that held there.
    r = store.put_message(Message("T", b"after", keys="after", queue_id=0))
    assert (r.wrote_offset, r.queue_offset) == (cut.wrote_offset, 60)
    assert store.wait_dispatched()
    g = store.get_message("g", "T", 0, 60, 4)
    assert g.status is GetMessageStatus.FOUND
    assert [m.body for m in g.messages] == [b"after"]
    store.close()
    # The cut holds across a reopen, and no segment is left past it.
    names = sorted(p.name for p in (store_path / "commitlog").iterdir())
    last = (r.wrote_offset + r.wrote_bytes - 1) // SMALL["mapped_file_size_commit_log"]
    assert names == [f"{k * SMALL['mapped_file_size_commit_log']:020d}" for k in range(last + 1)]
    with MessageStore(store_path, **SMALL) as again:
        assert again.get_max_phy_offset() == r.wrote_offset + r.wrote_bytes
        assert again.get_max_offset_in_queue("T", 0) == 61
        assert [m.body for m in again.query_message("T", "after")] == [b"after"]


def test_truncate_refuses_a_misaligned_offset_and_ignores_the_end(open_store) -> None:
    store = open_store(**SMALL)
    rs = _fill(store, 30)
    end = store.get_max_phy_offset()
    with pytest.raises(InvalidArgumentError):
        store.truncate_files(rs[10].wrote_offset + 7)
    assert store.get_max_phy_offset() == end
    assert store.truncate_files(end) is False
    assert store.truncate_files(end + 1000) is False
    assert store.get_max_phy_offset() == end
    assert store.truncate_files(0) is True
    assert store.get_max_phy_offset() == 0
    assert store.get_max_offset_in_queue("T", 0) == 0
    assert store.put_message(Message("T", b"fresh")).queue_offset == 0
