"""The credits topic's message: credit rows as a JSON table.

    {"fields": ["model", "order_id", ..., "stage"], "rows": [["linear", "o-1", ...], ...]}

`fields` are those of schemas.records.Credit, in that order; each row is self-contained
and keyed by (model, order_id, touch_index). A message carries the rows that one step of
the job produced (the per-conversion models of the orders one watermark closed, or one
refit period's data-driven credits), at most MAX_ROWS of them: a Kafka record per batch
of rows rather than per row is what lets the job keep up (the field names once per
message, not once per row, also keeps the topic small). `decode` also reads the earlier
forms: a JSON array of row objects, or a lone row object.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from schemas.records import Credit

FIELDS = Credit._fields
MAX_ROWS = 2_000  # ~260 KB: well under the broker's default 1 MB message limit


def encode(credits: Sequence[Credit]) -> str:
    return orjson.dumps({"fields": FIELDS, "rows": credits}, default=tuple).decode()


def encode_chunks(credits: Sequence[Credit], max_rows: int = MAX_ROWS) -> Iterator[str]:
    """Messages of at most `max_rows` rows each (none for no credits)."""
    for start in range(0, len(credits), max_rows):
        yield encode(credits[start:start + max_rows])


def decode(value: bytes | str) -> list[dict[str, Any]]:
    """The rows of one message, as dicts keyed by field name."""
    data = orjson.loads(value)
    if isinstance(data, dict) and "rows" in data:
        fields = data["fields"]
        return [dict(zip(fields, row, strict=True)) for row in data["rows"]]
    return data if isinstance(data, list) else [data]
