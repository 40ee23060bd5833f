"""An independent reader (and writer) of RocketMQ commitlog bytes, written from STORE_SPEC §1.

The tests use it to check the files the store writes without going through the store: every
integer is big-endian, every field is read at the position the spec gives it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import struct
import zlib
from pathlib import Path

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194

BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20

#: Small commitlog segments (the tests' default) so that segments roll after a few dozen puts.
SEGMENT = 64 * 1024

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
) -> bytes:
    """A well-formed V1/V2 record, built by hand (used to forge records inside bodies)."""
    topic_b = topic.encode()
    born_ip, born_port = host_bytes(born_host)
    store_ip, store_port = host_bytes(store_host)
    sys_flag = (BORNHOST_V6_FLAG if len(born_ip) == 16 else 0) | (
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


def commitlog_dir(store_path: Path) -> Path:
    return store_path / "commitlog"


def segment_files(store_path: Path) -> list[Path]:
    return sorted(commitlog_dir(store_path).iterdir())


def read_segment(store_path: Path, offset: int) -> bytes:
    return (commitlog_dir(store_path) / segment_name(offset)).read_bytes()


def snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file and folder under ``root``: relative path -> (size, mtime_ns, content)."""
    out: dict[str, tuple[int, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath, name)
            st = p.lstat()
            content = p.read_bytes() if p.is_file() and name != "lock" else b""
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, content)
    return out
