"""Result messages as JSON tables: many rows per Kafka record, field names once.

    {"fields": ["order_id", "user_id", ...], "rows": [["o-1", "u-7", ...], ...]}

Each row is self-contained (a consumer needs nothing but the message to read it). A
record per batch of rows rather than per row is what lets a PyFlink job keep up: every
record handed from Python to Flink costs a hop, whatever its size. `decode` also reads a
JSON array of row objects and a lone row object (the forms these topics used to carry).

`fields` is a row's column names, or the row declaration itself (schemas/rows.py: e.g.
rows.CONVERSION for the conversions topic, rows.CREDIT through credit_messages).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from schemas.rows import Row

Fields = Sequence[str] | Row  # column names, or the row declaration they come from
MAX_ROWS = 2_000  # a few hundred KB: well under the broker's default 1 MB message limit


def encode(fields: Fields, rows: Sequence[Sequence[Any]]) -> str:
    return encode_bytes(fields, rows).decode()


def encode_bytes(fields: Fields, rows: Sequence[Sequence[Any]]) -> bytes:
    """The message as UTF-8 bytes: what a job hands Flink as a byte array, which Flink
    copies whole (a str is serialized character by character, several times over between
    the operator and the sink: for the attribution job's credits, about half of the JVM's
    samples in a profile)."""
    if isinstance(fields, Row):
        fields = fields.names
    # `default=tuple` writes NamedTuple rows as arrays, in C but for one call per row
    return orjson.dumps({"fields": fields, "rows": rows}, default=tuple)


def encode_chunks(fields: Fields, rows: Sequence[Sequence[Any]],
                  max_rows: int = MAX_ROWS) -> Iterator[str]:
    """Messages of at most `max_rows` rows each (none for no rows)."""
    for start in range(0, len(rows), max_rows):
        yield encode(fields, rows[start:start + max_rows])


def encode_chunks_bytes(fields: Fields, rows: Sequence[Sequence[Any]],
                        max_rows: int = MAX_ROWS) -> Iterator[bytes]:
    """`encode_chunks` as UTF-8 bytes."""
    for start in range(0, len(rows), max_rows):
        yield encode_bytes(fields, rows[start:start + max_rows])


def decode(value: bytes | str) -> list[dict[str, Any]]:
    """The rows of one message, as dicts keyed by field name."""
    data = orjson.loads(value)
    if isinstance(data, dict) and "rows" in data and "fields" in data:
        fields = data["fields"]
        return [dict(zip(fields, row, strict=True)) for row in data["rows"]]
    return data if isinstance(data, list) else [data]


def keyed(key: tuple[object, ...], value: bytes) -> bytes:
    """A message for a keyed raw sink (pipelines/flink/runtime/kafka.py build_sink): its Kafka key
    (a JSON array), a line break, the message (JSON: no line break in it)."""
    return orjson.dumps(key) + b"\n" + value


def unkeyed(record: bytes) -> bytes:
    """The message of a `keyed` record (what the sink writes as the value)."""
    at = record.find(b"\n")
    return record if at < 0 else record[at + 1:]
