"""Assembles the pyarrow RecordBatch of :meth:`rmqstore.MessageStore.read_batch` from the column
buffers the Rust core builds (no Python object per message)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SCHEMA_FIELDS", "batch_from_buffers", "require_pyarrow", "schema"]

#: Column names, in order.
SCHEMA_FIELDS = (
    "topic",
    "queue_id",
    "queue_offset",
    "commit_log_offset",
    "store_timestamp",
    "born_timestamp",
    "tags",
    "keys",
    "properties",
    "body",
)


def require_pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "read_batch needs pyarrow: pip install 'rmqstore[arrow]' (or pyarrow)"
        ) from exc
    return pyarrow


#: Body column layouts :meth:`rmqstore.MessageStore.read_batch` gives.
BODY_TYPES = ("binary_view", "binary")


def schema(include_properties: bool = True, body_type: str = "binary") -> pa.Schema:
    pa = require_pyarrow()
    fields = [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("queue_id", pa.int32(), nullable=False),
        pa.field("queue_offset", pa.int64(), nullable=False),
        pa.field("commit_log_offset", pa.int64(), nullable=False),
        pa.field("store_timestamp", pa.timestamp("ms"), nullable=False),
        pa.field("born_timestamp", pa.timestamp("ms"), nullable=False),
        pa.field("tags", pa.string()),
        pa.field("keys", pa.list_(pa.string()), nullable=False),
    ]
    if include_properties:
        fields.append(pa.field("properties", pa.map_(pa.string(), pa.string()), nullable=False))
    body = pa.binary_view() if body_type == "binary_view" else pa.binary()
    fields.append(pa.field("body", body, nullable=False))
    return pa.schema(fields)


def batch_from_buffers(
    rows: int, buffers: dict[str, Any], include_properties: bool = True, body_type: str = "binary"
) -> pa.RecordBatch:
    pa = require_pyarrow()
    segments = [pa.py_buffer(buf) for buf in buffers.pop("body_buffers", ())]
    b = {name: pa.py_buffer(buf) for name, buf in buffers.items()}

    def strings(offsets: str, data: str, n: int, validity: Any = None) -> Any:
        return pa.Array.from_buffers(pa.string(), n, [validity, b[offsets], b[data]])

    def fixed(typ: Any, name: str) -> Any:
        return pa.Array.from_buffers(typ, rows, [None, b[name]])

    n_keys = len(buffers["keys_offsets"]) // 4 - 1
    keys = pa.ListArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), rows + 1, [None, b["keys_list_offsets"]]),
        strings("keys_offsets", "keys_data", n_keys),
    )
    columns = [
        strings("topic_offsets", "topic_data", rows),
        fixed(pa.int32(), "queue_id"),
        fixed(pa.int64(), "queue_offset"),
        fixed(pa.int64(), "commit_log_offset"),
        fixed(pa.timestamp("ms"), "store_timestamp"),
        fixed(pa.timestamp("ms"), "born_timestamp"),
        strings("tags_offsets", "tags_data", rows, b["tags_valid"] if rows else None),
        keys,
    ]
    if include_properties:
        n_props = len(buffers["props_key_offsets"]) // 4 - 1
        columns.append(
            pa.MapArray.from_arrays(
                pa.Array.from_buffers(pa.int32(), rows + 1, [None, b["props_map_offsets"]]),
                strings("props_key_offsets", "props_key_data", n_props),
                strings("props_value_offsets", "props_value_data", n_props),
            )
        )
    if body_type == "binary_view":
        # Arrow's view layout: the views, then the data buffers they index (the mapped segment
        # ranges, then the decompressed bodies).
        body = pa.Array.from_buffers(
            pa.binary_view(), rows, [None, b["body_views"], *segments, b["body_data"]]
        )
    else:
        body = pa.Array.from_buffers(pa.binary(), rows, [None, b["body_offsets"], b["body_data"]])
    columns.append(body)
    return pa.RecordBatch.from_arrays(columns, schema=schema(include_properties, body_type))
