"""What one call of the attribution job's decoder sends on (pipelines/flink/attribution/
decode.py): a group's outputs gathered, one batch per user bucket, and what the group scan
left out of a message's buckets."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any, NamedTuple

from pipelines.flink.attribution.support import ACCOUNTING, COUNTS, ORDERS, PICKLE_PROTOCOL
from schemas.events import PackedParts, merged_parts


class GroupOutput:
    """What one call sends on: the outputs of a group's records, one batch per user bucket
    and one list of orders per order bucket for the whole group (so the records crossing
    to the journeys do not multiply with the records of a group), one accounting record;
    dead letters and late events as they come."""

    def __init__(self) -> None:
        self.items: list[Any] = []  # dead letters, late events
        self.buckets: dict[int, tuple[int, list[PackedParts]]] = {}
        self.orders: dict[tuple[int, int], list[tuple]] = {}
        self.counts = [0] * len(COUNTS)

    def batch(self, bucket: int, batch_newest: int, parts: PackedParts) -> None:
        if bucket in self.buckets:
            known, kept = self.buckets[bucket]
            kept.append(parts)
            self.buckets[bucket] = (max(known, batch_newest), kept)
        else:
            self.buckets[bucket] = (batch_newest, [parts])

    def count(self, counts: tuple[int, ...]) -> None:
        self.counts = [a + b for a, b in zip(self.counts, counts, strict=True)]

    def absorb(self, other: GroupOutput) -> None:
        """`other`'s outputs (one record's, whole) after those taken so far."""
        self.items += other.items
        for bucket, (batch_newest, parts) in other.buckets.items():
            for part in parts:
                self.batch(bucket, batch_newest, part)
        for key, rows in other.orders.items():
            self.orders.setdefault(key, []).extend(rows)
        self.count(tuple(other.counts))

    def emit(self) -> Iterator[Any]:
        yield from self.items
        for bucket, (batch_newest, parts) in self.buckets.items():
            yield bucket, batch_newest, pickle.dumps(merged_parts(parts), PICKLE_PROTOCOL)
        for (key, held), rows in self.orders.items():
            yield ORDERS, (key, held, rows)
        if any(self.counts):
            yield ACCOUNTING, tuple(self.counts)


class Extras(NamedTuple):
    """What the group scan left out of a message's buckets: the message's dead letters
    and late-events rows (in its order), and the counts of its spans the general rules
    took (dead letters, plain tracing, GPU calls)."""

    items: list[Any]
    dead: int
    ignored: int
    unbuilt: int


NO_EXTRAS = Extras([], 0, 0, 0)
