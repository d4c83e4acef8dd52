"""The credits topic's message: credit rows as a JSON table (pipelines/codec/table_messages.py).

`fields` are those of the credit row (schemas.rows.CREDIT, the fields of
schemas.records.Credit), in that order; each row is keyed by (model, order_id, touch_index).
A message carries rows that one step of the job produced: the per-conversion models of the
orders one watermark closed, or one refit period's data-driven credits (at most
table_messages.MAX_ROWS rows a message, unless one conversion has more).

A conversion's rows under one model travel together, in one message, and are its whole
credit under that model: a later message with rows of the same (model, order_id) replaces
them all (late events corrected the journey, or a refit restated the period). A reader
keeps, per (model, order_id), the rows of the last message that had any; touches with no
credit have no row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pipelines.codec import table_messages
from schemas import rows

FIELDS = rows.CREDIT.names


def encode(credits: Sequence[Sequence[Any]]) -> str:
    return table_messages.encode(FIELDS, credits)


def encode_chunks(credits: Sequence[Sequence[Any]]) -> Iterator[str]:
    for chunk in _whole_conversions(credits):
        yield table_messages.encode(FIELDS, chunk)


def encode_chunks_bytes(credits: Sequence[Sequence[Any]]) -> Iterator[bytes]:
    for chunk in _whole_conversions(credits):
        yield table_messages.encode_bytes(FIELDS, chunk)


def _whole_conversions(credits: Sequence[Sequence[Any]],
                       max_rows: int = table_messages.MAX_ROWS
                       ) -> Iterator[Sequence[Sequence[Any]]]:
    """Chunks of at most `max_rows` rows that never split a (model, order_id)'s run of rows
    (one longer than that is a chunk of its own)."""
    start = 0
    while start < len(credits):
        end = min(start + max_rows, len(credits))
        if end < len(credits):
            cut = end  # back to where the run that `end` falls in began
            while cut > start and credits[cut][:2] == credits[cut - 1][:2]:
                cut -= 1
            if cut > start:
                end = cut
            else:  # one run longer than max_rows: all of it
                while end < len(credits) and credits[end][:2] == credits[end - 1][:2]:
                    end += 1
        yield credits[start:end]
        start = end


def decode(value: bytes | str) -> list[dict[str, Any]]:
    return table_messages.decode(value)


def conversion_groups(message: bytes | str) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """A message's rows by (model, order_id): each group is that conversion's whole credit
    under that model, replacing what it had."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in decode(message):
        groups.setdefault((row["model"], row["order_id"]), []).append(row)
    return groups


def latest_groups(messages: Iterable[bytes | str]
                  ) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Per (model, order_id), the rows of the last of these messages that had any (in the
    order one key's messages were written)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for message in messages:
        groups.update(conversion_groups(message))
    return groups


def latest(messages: Iterable[bytes | str]) -> list[dict[str, Any]]:
    """The credit rows that hold after these messages (`latest_groups`, flattened)."""
    return [row for rows in latest_groups(messages).values() for row in rows]
