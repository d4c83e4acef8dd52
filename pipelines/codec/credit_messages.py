"""The credits topic's message: credit rows as a JSON table (pipelines/codec/table_messages.py).

`fields` are those of the credit row (schemas.rows.CREDIT, the fields of
schemas.records.Credit), in that order; each row is keyed by (model, order_id, touch_index).
A message carries rows that one step of the job produced: the per-conversion models of the
orders one watermark closed, or one refit period's data-driven credits (at most
table_messages.MAX_ROWS rows a message).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pipelines.codec import table_messages
from schemas import rows

FIELDS = rows.CREDIT.names


def encode(credits: Sequence[Sequence[Any]]) -> str:
    return table_messages.encode(FIELDS, credits)


def encode_chunks(credits: Sequence[Sequence[Any]]) -> Iterator[str]:
    return table_messages.encode_chunks(FIELDS, credits)


def encode_chunks_bytes(credits: Sequence[Sequence[Any]]) -> Iterator[bytes]:
    return table_messages.encode_chunks_bytes(FIELDS, credits)


def decode(value: bytes | str) -> list[dict[str, Any]]:
    return table_messages.decode(value)
