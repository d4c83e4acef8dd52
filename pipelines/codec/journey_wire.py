"""Compact forms of events, journey states and journeys for Flink records and state, as
kept by earlier versions of the attribution job (the job now moves columns:
`schemas.events`, `udfs.journeys.columns`), and their conversion to the columns, so that
state stored by an earlier version is read on restore.

Between Python operators, and in keyed state, values are pickled. Pickling a NamedTuple
or a dataclass calls back into Python for every object (its `__reduce_ex__`, its
`__new__`), a plain tuple is handled in C: about twice as fast both ways on our events.
So what crosses or is stored is plain tuples, and the record types come back with
`tuple.__new__` (also in C) on the other side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from schemas.events import EventColumns, events_of
from schemas.records import Conversion, Touchpoint
from udfs.attribution import Period
from udfs.journeys import (
    NONE,
    ClosedJourney,
    ConvertedJourney,
    JourneyState,
    Snapshot,
    close_ts,
    converted_columns,
)

Event = Touchpoint | Conversion
_new = tuple.__new__

EventsWire = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]


def events_to_wire(events: list[Event]) -> EventsWire:
    """(touches, conversions) as plain tuples. Each kind keeps its arrival order; which
    of a touch and an order at the same time comes first is decided by event time order
    (udfs.journeys.rules.event_order), not by arrival."""
    touches = [tuple(e) for e in events if type(e) is Touchpoint]
    conversions = [tuple(e) for e in events if type(e) is Conversion]
    return touches, conversions


def events_from_wire(wire: EventsWire) -> list[Event]:
    touches, conversions = wire
    return [*(_new(Touchpoint, t) for t in touches), *(_new(Conversion, c) for c in conversions)]


def state_to_wire(state: JourneyState) -> tuple[int | None, list[tuple[Any, ...]]]:
    return state.last_order_ts_ms, [tuple(t) for t in state.touches]


def state_from_wire(wire: tuple[int | None, list[tuple[Any, ...]]]) -> JourneyState:
    last_order, touches = wire
    return JourneyState([_new(Touchpoint, t) for t in touches], last_order)


PeriodWire = tuple[int, list[tuple[Any, ...]], dict[tuple[str, ...], float]]
"""Closed journeys of one refit period, as the data-driven fit needs them: (period end,
converted journeys without trace and span ids, non-converting paths with their counts)."""


def periods_to_wire(journeys: list[ClosedJourney],
                    period_end: Callable[[int], int]) -> list[PeriodWire]:
    """Closed journeys grouped by refit period. A fit needs only the path of a journey that
    did not convert (so those travel as counts) and no trace ids at all."""
    periods: dict[int, PeriodWire] = {}
    for journey in journeys:
        end = period_end(close_ts(journey))
        group = periods.get(end)
        if group is None:
            group = periods[end] = (end, [], {})
        if isinstance(journey, ConvertedJourney):
            c = journey.conversion
            group[1].append(((c.user_id, c.ts_ms, c.order_id, c.revenue, c.currency),
                             [(t.ts_ms, t.channel, t.campaign) for t in journey.touches],
                             journey.stage))
        else:
            path = tuple(t.channel for t in journey.touches)
            group[2][path] = group[2].get(path, 0.0) + 1.0
    return list(periods.values())


def converted_from_wire(wire: list[tuple[Any, ...]]) -> list[ConvertedJourney]:
    out = []
    for (user, ts, order, revenue, currency), touches, stage in wire:
        out.append(_new(ConvertedJourney, (
            _new(Conversion, (user, ts, order, revenue, currency, "", "")),
            tuple([_new(Touchpoint, (user, t, channel, campaign, "", ""))
                   for t, channel, campaign in touches]), stage)))
    return out


def events_columns_from_wire(wire: EventsWire) -> EventColumns:
    return events_of(events_from_wire(wire))


def period_from_wire(period: PeriodWire) -> Period:
    end, converted, paths = period
    return end, converted_columns(converted_from_wire(converted)), paths


StateWire = tuple[int | None, list[tuple[Any, ...]]]


def snapshot_from_wire(users: Iterable[tuple[str, StateWire]]) -> Snapshot:
    """Users' journey states (one entry per user, as earlier versions stored them) as a
    book's snapshot."""
    names: list[str] = []
    last_order: list[int] = []
    counts: list[int] = []
    touches: list[tuple[Any, ...]] = []
    for user, (last, held) in users:
        names.append(user)
        last_order.append(NONE if last is None else last)
        counts.append(len(held))
        touches.extend(held)
    channels: dict[str, int] = {}
    campaigns: dict[str, int] = {}
    trace = np.empty(len(touches), object)
    trace[:] = [t[4] for t in touches]
    return Snapshot(
        names, np.arange(len(names), dtype=np.int64), np.asarray(last_order, np.int64),
        np.asarray(counts, np.int64), np.asarray([t[1] for t in touches], np.int64),
        np.asarray([channels.setdefault(t[2], len(channels)) for t in touches], np.int64),
        np.asarray([campaigns.setdefault(t[3], len(campaigns)) for t in touches], np.int64),
        trace, list(channels), list(campaigns))
