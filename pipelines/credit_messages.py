"""The credits topic's message: a JSON array of credit rows.

One message carries the rows of one order under the models computed together (the
per-conversion models when the order is credited, the data-driven ones when its refit
period closes) -- one Kafka record per order instead of one per (model, touch), which is
most of what the job used to spend its time on. Each row is self-contained (the fields of
schemas.records.Credit), keyed by (model, order_id, touch_index).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from schemas.records import Credit


def encode(credits: Iterable[Credit]) -> str:
    return json.dumps([c._asdict() for c in credits], separators=(",", ":"))


def decode(value: bytes) -> list[dict[str, Any]]:
    """The rows of one message (a lone JSON object is read as one row)."""
    data = json.loads(value)
    return data if isinstance(data, list) else [data]
