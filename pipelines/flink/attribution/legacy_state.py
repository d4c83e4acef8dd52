"""Keyed state as earlier versions of the attribution job stored it, read once after an
upgrade and moved into the current form (the operators call these; nothing writes them).

Kept apart from the operators so that what they do now reads plainly, and so that the old
forms can be dropped in one place once no savepoint that holds them is left."""

from __future__ import annotations

import pickle
from typing import Any

from pyflink.common import Types
from pyflink.datastream import RuntimeContext
from pyflink.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)

from pipelines.codec.journey_wire import (
    EventsWire,
    PeriodWire,
    events_columns_from_wire,
    period_from_wire,
    snapshot_from_wire,
)
from udfs.attribution import Period
from udfs.journeys import JourneyBook, JourneyConfig, Progress


def stored_events(value: bytes | EventsWire) -> EventsWire:
    """A waiting batch as earlier versions kept it: pickled events (older: the events)."""
    return pickle.loads(value) if isinstance(value, bytes) else value


class LegacyBookState:
    """A bucket's journey book as earlier versions stored it: a map of users' journey
    states, the waiting batches and the progress (udfs.journeys.book's, in wire form)."""

    def __init__(self, runtime_context: RuntimeContext) -> None:
        self.users = runtime_context.get_map_state(
            MapStateDescriptor("users", Types.STRING(), Types.PICKLED_BYTE_ARRAY()))
        self.batches = runtime_context.get_map_state(
            MapStateDescriptor("waiting-batches", Types.LONG(), Types.PICKLED_BYTE_ARRAY()))
        self.progress = runtime_context.get_state(
            ValueStateDescriptor("progress", Types.PICKLED_BYTE_ARRAY()))

    def present(self) -> bool:
        return self.progress.value() is not None

    def book(self, journey: JourneyConfig) -> JourneyBook:
        stored = self.progress.value()
        return JourneyBook.restore(
            journey, Progress(stored[0], tuple(stored[1])),
            snapshot_from_wire(self.users.items()),
            [(key, events_columns_from_wire(stored_events(events)))
             for key, events in self.batches.items()])

    def clear(self) -> None:
        self.users.clear()
        self.batches.clear()
        self.progress.clear()


class LegacyFitState:
    """The fit's state as earlier versions stored it: all path counts as one value, and
    every pending period in one list."""

    def __init__(self, runtime_context: RuntimeContext) -> None:
        self.counts = runtime_context.get_state(
            ValueStateDescriptor("path-counts", Types.PICKLED_BYTE_ARRAY()))
        self.pending = runtime_context.get_list_state(
            ListStateDescriptor("closed-journeys", Types.PICKLED_BYTE_ARRAY()))

    def take_counts(self) -> dict[Any, list[float]] | None:
        """The counts, once (cleared as they are read); None when there are none."""
        counts = self.counts.value()
        if counts:
            self.counts.clear()
        return counts or None

    def take_periods(self) -> list[Period]:
        """The pending periods, once (cleared as they are read)."""
        stored = list(self.pending.get() or [])  # (PyFlink gives a generator)
        if not stored:
            return []
        self.pending.clear()
        return [period_from_wire(period) for period in stored]


def pending_period(stored: bytes | PeriodWire) -> Period:
    """A pending entry: a pickled Period (earlier versions: the period's wire form)."""
    if isinstance(stored, bytes):
        return pickle.loads(stored)  # type: ignore[no-any-return]
    return period_from_wire(stored)
