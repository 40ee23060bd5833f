"""The rows' schema: :func:`source_schema`, the check of a schema a user gives, and its Arrow
form."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .options import _bad_option, _ReadOptions

if TYPE_CHECKING:
    import pyarrow as pa


def source_schema(include_properties: bool = False) -> StructType:
    """The rows' Spark schema (``properties`` only with ``includeProperties``)."""
    fields = [
        StructField("topic", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("commit_log_offset", LongType(), False),
        StructField("store_timestamp", TimestampType(), False),
        StructField("born_timestamp", TimestampType(), False),
        StructField("tags", StringType(), True),
        StructField("keys", ArrayType(StringType(), False), False),
    ]
    if include_properties:
        fields.append(StructField("properties", MapType(StringType(), StringType()), False))
    fields.append(StructField("body", BinaryType(), False))
    return StructType(fields)


def _check_read_schema(schema: StructType, opts: _ReadOptions) -> StructType:
    """``schema`` if a read can fill it: a user's ``.schema(...)`` may leave columns out, but
    each column it has is a source column, once, of the source's type."""
    source = {f.name: f.dataType for f in source_schema(True).fields}
    names = schema.fieldNames()
    unknown = [n for n in names if n not in source]
    if unknown:
        raise _bad_option(f"columns {sorted(unknown)} are not columns of the source")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise _bad_option(f"the schema has the columns {twice} more than once")
    for field in schema.fields:
        have, want = field.dataType.simpleString(), source[field.name].simpleString()
        if have != want:
            raise _bad_option(
                f"the schema gives column {field.name!r} the type {have}; the source reads it "
                f"as {want} (declare it so, and cast it after loading)"
            )
    if "properties" in names and not opts.include_properties:
        raise _bad_option(
            "the schema has a 'properties' column: set includeProperties=true to read it"
        )
    return schema


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")
