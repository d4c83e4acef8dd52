"""The journey book tests' events and engine state: touches and orders of a user, a store
that keeps a book's changes as an engine would (pickled), and comparable keys of the
journeys it closes."""

from __future__ import annotations

import pickle

from schemas.records import Conversion, Touchpoint
from udfs.journeys.book import Changes, JourneyBook
from udfs.journeys.rules import ConvertedJourney, JourneyConfig

# history long enough never to run out inside the data (the batch reference never forgets)
CFG = JourneyConfig(lookback_days=30, history_days=5000, winback_days=90)
CAPPED = JourneyConfig(lookback_days=30, history_days=5000, winback_days=90, max_touches=2)
# a visit's touches are one (journey.visit_minutes): the populations' steps of 0 ms, 1 ms
# and 20 minutes repeat a touch within it
VISITS = JourneyConfig(lookback_days=30, history_days=5000, winback_days=90, visit_minutes=30)
MINUTE = 60_000


def touch(user: str, ts: int, channel: str = "email") -> Touchpoint:
    return Touchpoint(user, ts, channel, f"{channel}-c", "", "")


def order(user: str, ts: int, order_id: str) -> Conversion:
    return Conversion(user, ts, order_id, 10.0, "USD", "", "")


class Store:
    """What an engine keeps: the book's changes applied to plain values (pickled, as a
    state backend would)."""

    def __init__(self) -> None:
        self.snapshot: bytes | None = None
        self.overlays: dict[int, bytes] = {}
        self.batches: dict[int, bytes] = {}
        self.progress = None

    def apply(self, changes: Changes) -> None:
        if changes.snapshot is not None:
            self.snapshot = pickle.dumps(changes.snapshot)
            self.overlays.clear()
        if changes.overlay is not None:
            self.overlays[changes.overlay.seq] = pickle.dumps(changes.overlay)
        self.batches.update({k: pickle.dumps(v) for k, v in changes.batches.items()})
        for batch in changes.removed_batches:
            del self.batches[batch]
        if changes.progress is not None:
            self.progress = changes.progress

    def restore(self, compact_every: int = 2, log_ratio: float = 0.0,
                config: JourneyConfig = CFG) -> JourneyBook:
        return JourneyBook.restore(
            config, self.progress, pickle.loads(self.snapshot) if self.snapshot else None,
            [(k, pickle.loads(v)) for k, v in self.batches.items()], compact_every, log_ratio,
            overlays=[pickle.loads(v) for v in self.overlays.values()])


def closed_of(advanced) -> list:
    return [*advanced.closed.converted_objects(), *advanced.closed.lapsed_objects()]


def plain(record) -> tuple:
    """What the book keeps of an event (no span ids)."""
    return tuple(record)[:5] if isinstance(record, Conversion) else tuple(record)[:5]


def key(journey) -> tuple:
    return (type(journey).__name__, tuple(map(plain, journey.touches)),
            plain(journey.conversion) if isinstance(journey, ConvertedJourney)
            else journey.close_ts_ms, getattr(journey, "stage", ""))
