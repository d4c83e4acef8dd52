"""Compact forms of events, journey states and journeys for Flink records and state.

Between Python operators, and in keyed state, values are pickled. Pickling a NamedTuple
or a dataclass calls back into Python for every object (its `__reduce_ex__`, its
`__new__`), a plain tuple is handled in C: about twice as fast both ways on our events.
So what crosses or is stored is plain tuples, and the record types come back with
`tuple.__new__` (also in C) on the other side.
"""

from __future__ import annotations

from typing import Any

from schemas.records import Conversion, Touchpoint
from udfs.journeys import ClosedJourney, ConvertedJourney, JourneyState, NonConvertingJourney

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


def journeys_to_wire(journeys: list[ClosedJourney]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for journey in journeys:
        touches = [tuple(t) for t in journey.touches]
        if isinstance(journey, ConvertedJourney):
            out.append((tuple(journey.conversion), touches, journey.stage))
        else:
            out.append((journey.user_id, touches, journey.close_ts_ms))
    return out


def journeys_from_wire(wire: list[tuple[Any, ...]]) -> list[ClosedJourney]:
    out: list[ClosedJourney] = []
    for head, touches, last in wire:
        restored = tuple(_new(Touchpoint, t) for t in touches)
        if isinstance(head, tuple):
            out.append(ConvertedJourney(_new(Conversion, head), restored, last))
        else:
            out.append(NonConvertingJourney(head, restored, last))
    return out


def close_ts_of_wire(journey: tuple[Any, ...]) -> int:
    """`udfs.journeys.close_ts` of a journey in its compact form."""
    head, _, last = journey
    return head[1] if isinstance(head, tuple) else last  # the order's ts_ms, or close_ts_ms
