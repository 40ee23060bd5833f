"""Assembles the pyarrow RecordBatch of :meth:`rmqstore.MessageStore.read_batch` from the column
buffers the Rust core builds (no Python object per message)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SCHEMA_FIELDS", "batch_from_buffers", "require_pyarrow", "resolve_columns", "schema"]

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


def resolve_columns(columns: Any, include_properties: bool) -> tuple[str, ...]:
    """The column names a read gives, in order: ``columns`` checked (a sequence of known names,
    each once), or every column (without ``properties`` unless ``include_properties``)."""
    from .errors import ArgumentTypeError, InvalidArgumentError

    if columns is None:
        if include_properties:
            return SCHEMA_FIELDS
        return tuple(c for c in SCHEMA_FIELDS if c != "properties")
    wanted = "None or a sequence of column names"
    if isinstance(columns, (str, bytes)):
        raise ArgumentTypeError(f"columns must be {wanted}, not {type(columns).__name__}")
    try:
        names = list(columns)
    except TypeError:
        raise ArgumentTypeError(f"columns must be {wanted}, not {type(columns).__name__}") from None
    for name in names:
        if not isinstance(name, str):
            raise ArgumentTypeError(
                f"columns must hold str column names, not {type(name).__name__} ({name!r})"
            )
    problems = []
    unknown = [n for n in names if n not in SCHEMA_FIELDS]
    if unknown:
        problems.append(
            f"unknown columns {', '.join(map(repr, unknown))} "
            f"(the columns are {', '.join(SCHEMA_FIELDS)})"
        )
    twice = sorted({n for n in names if names.count(n) > 1}, key=names.index)
    if twice:
        problems.append(f"columns given more than once: {', '.join(map(repr, twice))}")
    if "properties" in names and not include_properties:
        problems.append("'properties' is asked for but include_properties is False")
    if problems:
        raise InvalidArgumentError("columns: " + "; ".join(problems))
    return tuple(names)


#: The Arrow type and nullability of each column by body type, built once (building pyarrow
#: types and fields costs microseconds each, and a read would otherwise build them every call).
_FIELDS: dict[str, dict[str, pa.Field]] = {}

#: Schemas already built, by (body type, columns): a schema is immutable, so one serves every
#: read of the same columns.
_SCHEMAS: dict[tuple[str, tuple[str, ...]], pa.Schema] = {}


def _fields(body_type: str) -> dict[str, pa.Field]:
    fields = _FIELDS.get(body_type)
    if fields is None:
        pa = require_pyarrow()
        types = {
            "topic": (pa.string(), False),
            "queue_id": (pa.int32(), False),
            "queue_offset": (pa.int64(), False),
            "commit_log_offset": (pa.int64(), False),
            "store_timestamp": (pa.timestamp("ms"), False),
            "born_timestamp": (pa.timestamp("ms"), False),
            "tags": (pa.string(), True),
            "keys": (pa.list_(pa.string()), False),
            "properties": (pa.map_(pa.string(), pa.string()), False),
            "body": (pa.binary_view() if body_type == "binary_view" else pa.binary(), False),
        }
        fields = {
            name: pa.field(name, typ, nullable=nullable) for name, (typ, nullable) in types.items()
        }
        _FIELDS[body_type] = fields
    return fields


def schema(
    include_properties: bool = True,
    body_type: str = "binary",
    columns: tuple[str, ...] | None = None,
) -> pa.Schema:
    """The schema of a read of ``columns`` (every column when None, see
    :func:`resolve_columns`)."""
    if columns is None:
        columns = resolve_columns(None, include_properties)
    key = (body_type, tuple(columns))
    found = _SCHEMAS.get(key)
    if found is None:
        pa = require_pyarrow()
        fields = _fields(body_type)
        found = pa.schema([fields[c] for c in key[1]])
        _SCHEMAS[key] = found
    return found


def batch_from_buffers(
    rows: int,
    buffers: dict[str, Any],
    include_properties: bool = True,
    body_type: str = "binary",
    columns: tuple[str, ...] | None = None,
) -> pa.RecordBatch:
    """The RecordBatch of ``columns`` (in that order; every column when None) from the vectors
    the core built for them. No columns: a batch of ``rows`` rows and no column."""
    pa = require_pyarrow()
    if columns is None:
        columns = resolve_columns(None, include_properties)
    fields = _fields(body_type)
    segments = [pa.py_buffer(buf) for buf in buffers.pop("body_buffers", ())]
    b = {name: pa.py_buffer(buf) for name, buf in buffers.items()}
    string = fields["topic"].type

    def strings(offsets: str, data: str, n: int, validity: Any = None) -> Any:
        return pa.Array.from_buffers(string, n, [validity, b[offsets], b[data]])

    def fixed(name: str) -> Any:
        return pa.Array.from_buffers(fields[name].type, rows, [None, b[name]])

    def list_offsets(name: str) -> Any:
        return pa.Array.from_buffers(fields["queue_id"].type, rows + 1, [None, b[name]])

    def keys() -> Any:
        n_keys = len(buffers["keys_offsets"]) // 4 - 1
        return pa.ListArray.from_arrays(
            list_offsets("keys_list_offsets"), strings("keys_offsets", "keys_data", n_keys)
        )

    def properties() -> Any:
        n_props = len(buffers["props_key_offsets"]) // 4 - 1
        return pa.MapArray.from_arrays(
            list_offsets("props_map_offsets"),
            strings("props_key_offsets", "props_key_data", n_props),
            strings("props_value_offsets", "props_value_data", n_props),
        )

    def body() -> Any:
        if body_type == "binary_view":
            # Arrow's view layout: the views, then the data buffers they index (the mapped
            # segment ranges, then the decompressed bodies).
            return pa.Array.from_buffers(
                fields["body"].type, rows, [None, b["body_views"], *segments, b["body_data"]]
            )
        return pa.Array.from_buffers(
            fields["body"].type, rows, [None, b["body_offsets"], b["body_data"]]
        )

    def column(name: str) -> Any:
        if name == "topic":
            return strings("topic_offsets", "topic_data", rows)
        if name == "tags":
            return strings("tags_offsets", "tags_data", rows, b["tags_valid"] if rows else None)
        if name == "keys":
            return keys()
        if name == "properties":
            return properties()
        if name == "body":
            return body()
        return fixed(name)

    if not columns:
        # Arrow allows a batch with rows and no column: a struct array of no field has a length.
        empty = pa.StructArray.from_buffers(pa.struct([]), rows, [None], children=[])
        return pa.RecordBatch.from_struct_array(empty)
    arrays = [column(c) for c in columns]
    return pa.RecordBatch.from_arrays(arrays, schema=schema(body_type=body_type, columns=columns))
