"""The row schema of Spark's Kafka source, as Spark DDL and as the exact Arrow schema readers yield.

Invariants:

- Columns, in order: key binary, value binary, topic string, partition int, offset bigint,
  timestamp timestamp, timestampType int, and headers array<struct<key string, value binary>> only when
  ``includeHeaders`` is true. Every column is nullable, as in Spark's Kafka source.
- :func:`arrow_schema` is field for field what PySpark expects for that Spark schema
  (``to_arrow_schema(schema, timezone="UTC")``: microsecond timestamps in UTC, list items named
  ``element``); PySpark rejects a batch whose schema differs in any type.
- ``timestampType`` follows Kafka's ids: 0 CreateTime, 1 LogAppendTime, -1 none.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["HEADER_TYPE", "arrow_schema", "ddl"]

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]
_SCHEMA = pa.schema(_BASE_FIELDS)
_SCHEMA_WITH_HEADERS = pa.schema([*_BASE_FIELDS, pa.field("headers", HEADERS_TYPE)])

_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
    "timestampType int"
)


def ddl(include_headers: bool) -> str:
    """The Spark schema as a DDL string (what ``DataSource.schema()`` returns)."""
    return _DDL + (", headers array<struct<key: string, value: binary>>" if include_headers else "")


def arrow_schema(include_headers: bool) -> pa.Schema:
    return _SCHEMA_WITH_HEADERS if include_headers else _SCHEMA
