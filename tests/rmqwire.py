"""An independent reader (and writer) of RocketMQ commitlog bytes, written from
docs/format.md#commitlog-records.

The tests use it to check the files the store writes without going through the store: every
integer is big-endian, every field is read at the position the spec gives it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194

BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20

#: Small commitlog segments (the tests' default) so that segments roll after a few dozen puts.
SEGMENT = 64 * 1024

#: Small consume queue segments (50 units) and index files (64 slots, 49 entries), with
#: SEGMENT commitlog segments: what the read-path tests open stores with, so that every kind of
#: file rolls after a few dozen messages.
CQ_FILE_SIZE = 20 * 50
SMALL_STORE = {
    "mapped_file_size_commit_log": SEGMENT,
    "mapped_file_size_consume_queue": CQ_FILE_SIZE,
    "max_hash_slot_num": 64,
    "max_index_num": 50,
}

#: Fixed bytes of a V1 record with IPv4 born and store hosts (empty body, topic, properties).
FIXED_OVERHEAD_V1 = 91


def masked_crc32(data: bytes) -> int:
    """``UtilAll.crc32``: zlib CRC32 masked to a non-negative int."""
    return zlib.crc32(data) & 0x7FFFFFFF


def segment_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: 20 zero-padded decimal digits."""
    return f"{offset:020d}"


def record_length(
    body_len: int,
    topic_len: int,
    props_len: int,
    *,
    born_v6: bool = False,
    store_v6: bool = False,
) -> int:
    """``calMsgLength``: V2 (2-byte topic length) when the topic is longer than 127 bytes."""
    topic_len_size = 2 if topic_len > 127 else 1
    born = 20 if born_v6 else 8
    store = 20 if store_v6 else 8
    return (
        4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8
        + 4 + body_len + topic_len_size + topic_len + 2 + props_len
    )  # fmt: skip


def encode_properties(props: list[tuple[str, str]]) -> bytes:
    """``messageProperties2String``: ``name \\x01 value \\x02`` per entry, UTF-8."""
    return "".join(f"{k}\x01{v}\x02" for k, v in props).encode()


def parse_properties(raw: bytes) -> dict[str, str]:
    """``string2messageProperties``."""
    out: dict[str, str] = {}
    for item in raw.decode().split("\x02"):
        name, sep, value = item.partition("\x01")
        if sep and name and value:
            out[name] = value
    return out


def host_bytes(host: str) -> tuple[bytes, int]:
    """``"1.2.3.4:5"`` / ``"[::1]:5"`` -> (4 or 16 address bytes, port)."""
    addr, _, port = host.rpartition(":")
    ip = ipaddress.ip_address(addr.strip("[]"))
    return ip.packed, int(port)


def host_text(ip: bytes, port: int) -> str:
    addr = ipaddress.ip_address(ip)
    return f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"


def msg_id(store_host: str, offset: int) -> str:
    """Offset message id: upper-case hex of store ip, port (int) and offset (long)."""
    ip, port = host_bytes(store_host)
    return (ip + struct.pack(">iq", port, offset)).hex().upper()


@dataclasses.dataclass(frozen=True)
class Record:
    """One commitlog record as laid down in a segment."""

    position: int  # where it starts in its segment file
    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_ip: bytes
    born_port: int
    store_timestamp: int
    store_ip: bytes
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic_len_size: int
    topic: str
    properties_raw: bytes
    # Position of some fields inside the record, for tests that damage or check layout.
    body_at: int
    store_timestamp_at: int

    @property
    def properties(self) -> dict[str, str]:
        return parse_properties(self.properties_raw)

    @property
    def born_host(self) -> str:
        return host_text(self.born_ip, self.born_port)

    @property
    def store_host(self) -> str:
        return host_text(self.store_ip, self.store_port)

    @property
    def end(self) -> int:
        return self.position + self.total_size


@dataclasses.dataclass(frozen=True)
class Blank:
    """The end-of-file blank record: remaining size + BLANK magic."""

    position: int
    size: int


def parse_record(data: bytes, pos: int) -> Record:
    """Parses the record at ``pos``; raises ``ValueError`` if it is not a well-formed one."""
    total, magic = struct.unpack_from(">iI", data, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise ValueError(f"bad magic {magic:#x} at {pos}")
    body_crc, queue_id, flag, queue_offset, phy, sys_flag, born_ts = struct.unpack_from(
        ">iiiqqiq", data, pos + 8
    )
    at = pos + 48
    born_len = 16 if sys_flag & BORNHOST_V6_FLAG else 4
    born_ip = data[at : at + born_len]
    (born_port,) = struct.unpack_from(">i", data, at + born_len)
    at += born_len + 4
    store_ts_at = at - pos
    (store_ts,) = struct.unpack_from(">q", data, at)
    at += 8
    store_len = 16 if sys_flag & STOREHOST_V6_FLAG else 4
    store_ip = data[at : at + store_len]
    (store_port,) = struct.unpack_from(">i", data, at + store_len)
    at += store_len + 4
    reconsume, ptx, body_len = struct.unpack_from(">iqi", data, at)
    at += 16
    body_at = at - pos
    body = data[at : at + body_len]
    at += body_len
    if magic == MAGIC_V1:
        (topic_len,) = struct.unpack_from(">b", data, at)
        topic_len_size = 1
    else:
        (topic_len,) = struct.unpack_from(">h", data, at)
        topic_len_size = 2
    at += topic_len_size
    topic = data[at : at + topic_len].decode()
    at += topic_len
    (props_len,) = struct.unpack_from(">h", data, at)
    at += 2
    props = data[at : at + props_len]
    at += props_len
    if at - pos != total:
        raise ValueError(f"record at {pos}: fields end at {at - pos}, TOTALSIZE says {total}")
    return Record(
        position=pos,
        total_size=total,
        magic=magic,
        body_crc=body_crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        physical_offset=phy,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_ip=born_ip,
        born_port=born_port,
        store_timestamp=store_ts,
        store_ip=store_ip,
        store_port=store_port,
        reconsume_times=reconsume,
        prepared_transaction_offset=ptx,
        body=body,
        topic_len_size=topic_len_size,
        topic=topic,
        properties_raw=props,
        body_at=body_at,
        store_timestamp_at=store_ts_at,
    )


def scan_segment(data: bytes) -> tuple[list[Record], Blank | None, int]:
    """Every record of a segment from its start: (records, blank record or None, end).

    ``end`` is where the records stop (the blank record's position, or the first byte that does
    not start a record).
    """
    records: list[Record] = []
    pos = 0
    while pos + 8 <= len(data):
        size, magic = struct.unpack_from(">iI", data, pos)
        if magic == BLANK_MAGIC:
            return records, Blank(pos, size), pos
        if magic not in (MAGIC_V1, MAGIC_V2) or size <= 0:
            break
        rec = parse_record(data, pos)
        records.append(rec)
        pos = rec.end
    return records, None, pos


def encode_record(
    *,
    topic: str,
    body: bytes,
    properties: bytes = b"",
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    born_timestamp: int = 0,
    store_timestamp: int = 0,
    born_host: str = "127.0.0.1:1",
    store_host: str = "127.0.0.1:10911",
    sys_flag: int = 0,
    topic_bytes: bytes | None = None,
) -> bytes:
    """A well-formed V1/V2 record, built by hand (used to forge records inside bodies, and
    records the store API cannot write: compressed bodies, hostile topics). ``sys_flag`` adds
    bits to the host bits; ``topic_bytes`` replaces the topic's UTF-8 bytes."""
    topic_b = topic.encode() if topic_bytes is None else topic_bytes
    born_ip, born_port = host_bytes(born_host)
    store_ip, store_port = host_bytes(store_host)
    sys_flag |= (BORNHOST_V6_FLAG if len(born_ip) == 16 else 0) | (
        STOREHOST_V6_FLAG if len(store_ip) == 16 else 0
    )
    v2 = len(topic_b) > 127
    total = record_length(
        len(body),
        len(topic_b),
        len(properties),
        born_v6=len(born_ip) == 16,
        store_v6=len(store_ip) == 16,
    )
    out = struct.pack(
        ">iIiiiqqiq",
        total,
        MAGIC_V2 if v2 else MAGIC_V1,
        masked_crc32(body),
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
    )
    out += born_ip + struct.pack(">iq", born_port, store_timestamp)
    out += store_ip + struct.pack(">iiqi", store_port, 0, 0, len(body)) + body
    out += struct.pack(">h" if v2 else ">b", len(topic_b)) + topic_b
    out += struct.pack(">h", len(properties)) + properties
    assert len(out) == total
    return out


def append_records(
    store_path: Path, end: int, records: list[dict[str, object]], segment: int = SEGMENT
) -> list[int]:
    """Writes records (``encode_record`` keyword arguments) into the commitlog of a closed
    store, one after another from its end ``end`` (all in the segment holding ``end``), with
    their PHYSICALOFFSET filled in; recovery at the next open keeps them and dispatch indexes
    them as if the store had written them. Returns their offsets."""
    path = commitlog_dir(store_path) / segment_name(end - end % segment)
    data = bytearray(path.read_bytes())
    offsets = []
    at = end
    for spec in records:
        rec = encode_record(physical_offset=at, **spec)  # type: ignore[arg-type]
        pos = at % segment
        assert pos + len(rec) + 8 <= segment, "the records must fit in the last segment"
        data[pos : pos + len(rec)] = rec
        offsets.append(at)
        at += len(rec)
    path.write_bytes(bytes(data))
    return offsets


def commitlog_dir(store_path: Path) -> Path:
    return store_path / "commitlog"


def segment_files(store_path: Path) -> list[Path]:
    return sorted(commitlog_dir(store_path).iterdir())


def read_segment(store_path: Path, offset: int) -> bytes:
    return (commitlog_dir(store_path) / segment_name(offset)).read_bytes()


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file and folder under ``root``: relative path -> (size, mtime_ns, content digest).

    Digests, not contents: a failed comparison of two snapshots stays short to print (a
    store's files run to hundreds of MiB)."""
    out: dict[str, tuple[int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath, name)
            st = p.lstat()
            digest = ""
            if p.is_file() and name != "lock":
                with p.open("rb") as f:
                    digest = hashlib.file_digest(f, "blake2b").hexdigest()[:32]
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, digest)
    return out


def settled_snapshot(
    root: Path, quiet: float = 1.5, timeout: float = 30.0
) -> dict[str, tuple[int, int, str]]:
    """:func:`snapshot` of a live store's folder once nothing in it changed for ``quiet``
    seconds: its services (consume queue flush, checkpoint) write on their own clock, once
    a second at most."""
    deadline = time.monotonic() + timeout
    last = snapshot(root)
    since = time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, f"{root} kept changing for {timeout} s"
        time.sleep(0.1)
        now = snapshot(root)
        if now != last:
            last, since = now, time.monotonic()
    return last


def read_commitlog(store_path: Path) -> dict[int, Record]:
    """Every record of every commitlog segment, by commitlog (physical) offset."""
    out: dict[int, Record] = {}
    for seg in segment_files(store_path):
        base = int(seg.name)
        records, _, _ = scan_segment(seg.read_bytes())
        for rec in records:
            out[base + rec.position] = rec
    return out


# -- Java hashing (docs/format.md#tag-codes, #index-keys) ------------------------------------------

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1


def java_hash(s: str) -> int:
    """Java ``String.hashCode``: ``h = 31*h + unit`` over UTF-16 code units, as a signed int32."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h > INT_MAX else h


def tags_code(tags: str | None) -> int:
    """``tagsString2tagsCode``: the TAGS hash sign-extended to a long; 0 without tags."""
    return java_hash(tags) if tags else 0


def index_key_hash(key: str) -> int:
    """``indexKeyHashMethod``: ``Math.abs(hashCode)``, and 0 when that is still negative
    (only for ``Integer.MIN_VALUE``, whose abs is itself in Java)."""
    h = abs(java_hash(key))
    return 0 if h > INT_MAX else h


def string_with_java_hash(prefix: str, target: int, length: int = 8) -> str:
    """A suffix of ``length`` characters in ``'0'..'z'`` such that
    ``java_hash(prefix + suffix) == target`` (solved exactly, base-31 digits)."""
    lo, span = ord("0"), ord("z") - ord("0")
    weights = [31**j for j in range(length - 1, -1, -1)]
    base = (java_hash(prefix) * 31**length + lo * sum(weights)) & 0xFFFFFFFF
    need = (target - base) & 0xFFFFFFFF
    cap = span * sum(weights)
    assert need <= cap, "suffix too short"
    digits = []
    for w in weights:
        d = min(span, need // w)
        digits.append(d)
        need -= d * w
    assert need == 0
    suffix = "".join(chr(lo + d) for d in digits)
    assert java_hash(prefix + suffix) == target
    return suffix


# -- Consume queues (docs/format.md#consume-queues) ------------------------------------------------

CQ_UNIT_SIZE = 20


@dataclasses.dataclass(frozen=True)
class CqUnit:
    """One 20-byte consume queue unit."""

    phy_offset: int
    size: int
    tags_code: int

    @property
    def is_pre_blank(self) -> bool:
        return (self.phy_offset, self.size, self.tags_code) == (0, INT_MAX, 0)


def parse_cq_units(data: bytes) -> list[CqUnit]:
    """The valid units of a consume queue file from its start: ``phy >= 0 and size > 0``
    (the recovery rule of docs/architecture.md#recovery; pre-blank units count)."""
    units: list[CqUnit] = []
    for pos in range(0, len(data) - CQ_UNIT_SIZE + 1, CQ_UNIT_SIZE):
        phy, size, code = struct.unpack_from(">qiq", data, pos)
        if phy < 0 or size <= 0:
            break
        units.append(CqUnit(phy, size, code))
    return units


def cq_dir(store_path: Path, topic: str, queue_id: int) -> Path:
    return store_path / "consumequeue" / topic / str(queue_id)


def cq_files(store_path: Path, topic: str, queue_id: int) -> list[Path]:
    return sorted(cq_dir(store_path, topic, queue_id).iterdir())


def read_consume_queue(
    store_path: Path, topic: str, queue_id: int, file_size: int
) -> tuple[int, list[CqUnit]]:
    """(queue offset of the first unit on disk, the units in order) of one queue.

    Checks what docs/format.md#commitlog-segments and #consume-queue-files require of the files:
    20-digit names giving their logical byte offset, each ``file_size`` bytes, contiguous, and
    every file but the last completely filled.
    """
    files = cq_files(store_path, topic, queue_id)
    if not files:
        return 0, []
    first = int(files[0].name)
    units: list[CqUnit] = []
    for i, f in enumerate(files):
        if len(f.name) != 20 or not f.name.isdigit():
            raise ValueError(f"bad consume queue file name {f}")
        if int(f.name) != first + i * file_size:
            raise ValueError(f"consume queue files not contiguous at {f}")
        data = f.read_bytes()
        if len(data) != file_size:
            raise ValueError(f"{f} is {len(data)} bytes, expected {file_size}")
        got = parse_cq_units(data)
        if i < len(files) - 1 and len(got) != file_size // CQ_UNIT_SIZE:
            raise ValueError(f"{f} is not full but is not the last file")
        units.extend(got)
    return first // CQ_UNIT_SIZE, units


# -- Index files (docs/format.md#index-files) ------------------------------------------------------

INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


@dataclasses.dataclass(frozen=True)
class IndexHeader:
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


@dataclasses.dataclass(frozen=True)
class IndexEntry:
    key_hash: int
    phy_offset: int
    time_diff: int
    prev_index: int


@dataclasses.dataclass(frozen=True)
class IndexFileData:
    """A decoded index file: header, slot table, and entries ``1 .. index_count-1``."""

    name: str
    header: IndexHeader
    slots: list[int]
    #: ``entries[n]`` is entry number ``n``; entry 0 is never used and is ``None``.
    entries: list[IndexEntry | None]

    def lookup(self, key: str) -> list[int]:
        """``selectPhyOffset`` without a time window: phy offsets of the entries in ``key``'s
        bucket whose hash equals ``key``'s, newest first."""
        h = index_key_hash(key)
        n = self.slots[h % len(self.slots)]
        count = self.header.index_count
        out: list[int] = []
        seen = 0
        while 0 < n < count and seen < count:
            e = self.entries[n]
            assert e is not None
            if e.key_hash == h:
                out.append(e.phy_offset)
            n = e.prev_index
            seen += 1
        return out


def parse_index_file(name: str, data: bytes, hash_slot_num: int, index_num: int) -> IndexFileData:
    if len(data) != index_file_size(hash_slot_num, index_num):
        raise ValueError(f"index file {name} is {len(data)} bytes")
    header = IndexHeader(*struct.unpack_from(">qqqqii", data, 0))
    slots = list(struct.unpack_from(f">{hash_slot_num}i", data, INDEX_HEADER_SIZE))
    entries_at = INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE
    entries: list[IndexEntry | None] = [None]
    for n in range(1, max(header.index_count, 1)):
        entries.append(IndexEntry(*struct.unpack_from(">iqii", data, entries_at + n * 20)))
    return IndexFileData(name, header, slots, entries)


def index_dir(store_path: Path) -> Path:
    return store_path / "index"


def read_index_files(store_path: Path, hash_slot_num: int, index_num: int) -> list[IndexFileData]:
    """Every index file, in name order (= creation order)."""
    d = index_dir(store_path)
    if not d.exists():
        return []
    return [
        parse_index_file(p.name, p.read_bytes(), hash_slot_num, index_num)
        for p in sorted(d.iterdir())
    ]


def same_millisecond_index_file(older: Path, newer: Path, slots: int, entries: int) -> None:
    """What RocketMQ leaves when it made ``newer`` in the millisecond ``older`` was made in: one
    file, named ``older``, holding ``older``'s bytes overwritten by ``newer``'s putKey calls
    (slot values read from the shared bytes, ``> indexCount`` taken as empty) and ``newer``'s
    header."""
    _one_file_for_two(older, newer, slots, entries, None)


def header_race_index_file(
    older: Path, newer: Path, slots: int, entries: int, flushed_after: int
) -> None:
    """:func:`same_millisecond_index_file`, with the previous file's flush racing the new
    file's puts, as RocketMQ 4.9.8 leaves it. ``getAndCreateLastIndexFile`` hands the full file
    to a new ``FlushIndexFileThread`` right after making the next one, and ``IndexFile.flush``
    copies that file's in-memory header into the mapping (``IndexHeader.updateByteBuffer``):
    when both objects map one file, ``older``'s header lands on ``newer``'s. Here it lands
    after ``flushed_after`` (at least 1) of ``newer``'s puts. Each later put writes its end
    offset and time, count and (for an empty slot) slot count again, but never the begin
    offset and time (``putKey`` sets them only for entry 1), so the file keeps ``older``'s
    begin offset and time: its header claims ``older``'s messages while its entries hold only
    ``newer``'s. With ``flushed_after`` = all of ``newer``'s entries, the whole header is
    ``older``'s."""
    _one_file_for_two(older, newer, slots, entries, flushed_after)


def _one_file_for_two(
    older: Path, newer: Path, slots: int, entries: int, flushed_after: int | None
) -> None:
    data = bytearray(older.read_bytes())
    old = parse_index_file(older.name, bytes(data), slots, entries).header
    new = parse_index_file(newer.name, newer.read_bytes(), slots, entries)
    if flushed_after is not None:
        assert 1 <= flushed_after < new.header.index_count
    entries_at = INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE
    count = 1
    slot_count = 0
    # The header fields as the mapping holds them (begin time, end time, begin offset, end
    # offset, slot count, count), once the new file's puts (and the old file's flush) are done.
    header = list(dataclasses.astuple(new.header))
    for n in range(1, new.header.index_count):
        e = new.entries[n]
        assert e is not None
        slot_pos = INDEX_HEADER_SIZE + (e.key_hash % slots) * INDEX_SLOT_SIZE
        (slot,) = struct.unpack_from(">i", data, slot_pos)
        if slot <= 0 or slot > count:
            slot = 0
            slot_count += 1
            header[4] = slot_count
        struct.pack_into(
            ">iqii",
            data,
            entries_at + count * INDEX_ENTRY_SIZE,
            e.key_hash,
            e.phy_offset,
            e.time_diff,
            slot,
        )
        struct.pack_into(">i", data, slot_pos, count)
        count += 1
        header[5] = count
        if n == flushed_after:
            header = list(dataclasses.astuple(old))
    if flushed_after is None:
        header[4], header[5] = slot_count, count
    elif flushed_after < new.header.index_count - 1:
        # The puts after the flush wrote their end time and offset: the last one's stay.
        header[1], header[3] = new.header.end_timestamp, new.header.end_phy_offset
    struct.pack_into(">qqqqii", data, 0, *header)
    older.write_bytes(bytes(data))
    newer.unlink()


def index_keys(rec: Record, with_tags: bool = False) -> list[str]:
    """``IndexService.buildIndex``: the keys one record is indexed under, in order:
    ``topic#UNIQ_KEY`` then ``topic#k`` for every non-empty ``k`` of ``KEYS.split(" ")``, then
    (RocketMQ 5.4+, ``with_tags``) ``topic#T#TAGS`` for a non-empty TAGS value."""
    props = rec.properties
    keys: list[str] = []
    if props.get("UNIQ_KEY"):
        keys.append(f"{rec.topic}#{props['UNIQ_KEY']}")
    keys += [f"{rec.topic}#{k}" for k in props.get("KEYS", "").split(" ") if k]
    if with_tags and props.get("TAGS"):
        keys.append(f"{rec.topic}#T#{props['TAGS']}")
    return keys


#: Time at each end of a call in which a thread holding the GIL can still be made to hand it over
#: between bytecodes (the default switch interval is 5 ms), with room for scheduling.
GIL_EDGE_SECONDS = 0.010


def other_thread_ran_inside(call: Callable[[], T]) -> tuple[T, int]:
    """Runs ``call`` while a second Python thread loops and notes the time every 256 rounds;
    returns the result and how many notes fall inside the call, away from its edges (see
    :data:`GIL_EDGE_SECONDS`).

    A native call that holds the GIL throughout lets no bytecode of the other thread run
    between its first and last instant, so it gives 0; one that releases the GIL gives many.
    The call must last at least three edges for the answer to mean anything."""
    notes: list[float] = []
    started = threading.Event()
    stop = threading.Event()

    def spin() -> None:
        n = 0
        started.set()
        while not stop.is_set():
            n += 1
            if n % 256 == 0:
                notes.append(time.perf_counter())

    spinner = threading.Thread(target=spin)
    spinner.start()
    started.wait()
    try:
        t0 = time.perf_counter()
        result = call()
        t1 = time.perf_counter()
    finally:
        stop.set()
        spinner.join()
    assert t1 - t0 >= 3 * GIL_EDGE_SECONDS, f"the call took {t1 - t0:.3f} s: too short to judge"
    inside = sum(1 for t in notes if t0 + GIL_EDGE_SECONDS < t < t1 - GIL_EDGE_SECONDS)
    return result, inside
