"""Compact forms of events, journey states and journeys for Flink records and state.

Between Python operators, and in keyed state, values are pickled. Pickling a NamedTuple
or a dataclass calls back into Python for every object (its `__reduce_ex__`, its
`__new__`), a plain tuple is handled in C: about twice as fast both ways on our events.
So what crosses or is stored is plain tuples, and the record types come back with
`tuple.__new__` (also in C) on the other side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas.records import Conversion, Touchpoint
from udfs.journeys import (
    ClosedJourney,
    ConvertedJourney,
    JourneyState,
    close_ts,
)

Event = Touchpoint | Conversion
_new = tuple.__new__

EventsWire = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]


def events_to_wire(events: list[Event]) -> EventsWire:
    """(touches, conversions) as plain tuples. Each kind keeps its arrival order; which
    of a touch and an order at the same time comes first is decided by event time order
    (udfs.journeys.event_order), not by arrival."""
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
