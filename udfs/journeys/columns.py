"""The journey rules over whole columns: many users' events stepped in one vectorised call.

`step_users` is `udfs.journeys.rules.advance_user` for any number of users at once: given each
user's open touches and new events (all at or before a watermark), it finds the journeys
they close and what each user keeps, with a sort and a few passes over flat arrays instead
of a Python loop per event. The rules are those of `udfs/journeys/rules.py` (which stays the
readable, event-by-event statement of them; tests hold the two to the same journeys):

* a user's events are taken in time order, a touch before an order of the same time, and
  otherwise in the order given (`seq`);
* an order closes a journey: the open touches inside its lookback (the last N of them);
* a touch whose lookback passes before the user's next event, or before the watermark,
  closes the open touches unconverted: those within the lookback of the last one (the
  last N), closed at last touch + lookback + 1;
* what stays open are the touches within the lookback of the last one.

Every journey is a contiguous run of the sorted rows, so it comes out as a (start, end)
range; `ranges_to_rows` turns ranges into the rows they cover.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from schemas.events import object_array
from schemas.records import Conversion, Touchpoint
from udfs.journeys.rules import ConvertedJourney, JourneyConfig, NonConvertingJourney

NONE = np.iinfo(np.int64).min
"""A missing time (no previous order) in int64 columns."""


@dataclass(frozen=True)
class Stepped:
    """What `step_users` found. Row numbers are into the rows it was given."""

    order_rows: np.ndarray  # each converting order's row, by (user, time)
    order_touches: tuple[np.ndarray, np.ndarray]  # (row starts, row ends) of its journey
    previous_order: np.ndarray  # time of the user's order before it (NONE: none)
    lapsed_users: np.ndarray  # per journey closed unconverted: its user
    lapsed_close: np.ndarray  # ... its close time (last touch + lookback + 1)
    lapsed_touches: tuple[np.ndarray, np.ndarray]
    open_users: np.ndarray  # users with touches still open, and those touches' rows
    open_touches: tuple[np.ndarray, np.ndarray]
    users: np.ndarray  # every user with rows, ascending
    last_order: np.ndarray  # per such user: their newest order in the rows (NONE: none)
    sorted_rows: np.ndarray  # rows by (user, time, kind, seq): the ranges index into it


def step_users(user: np.ndarray, ts: np.ndarray, is_order: np.ndarray, seq: np.ndarray,
               last_order_before: np.ndarray, watermark: int,
               config: JourneyConfig) -> Stepped:
    """Step many users' events at once (see the module's docstring).

    The rows are every user's open touches plus their new events (touches and orders),
    all at or before `watermark`, in any order; `user` holds small non-negative ints;
    `seq` orders the rows of a user that share a time and kind (open touches first);
    `last_order_before[u]` is user u's previous order time (NONE: none).

    Ranges (start, end) index `sorted_rows`: rows `sorted_rows[start:end]` are one
    journey's touches, in time order."""
    lookback = config.lookback_ms
    order = np.lexsort((seq, is_order, ts, user))
    u, t, o = user[order], ts[order], is_order[order].astype(bool)
    n = len(u)
    same_user = u[1:] == u[:-1]
    # a run (a journey in the making) starts at a user's first row, after an order, and
    # at a row more than a lookback after the touch before it (that touch went stale)
    starts = np.ones(n, bool)
    starts[1:] = ~same_user | o[:-1] | (t[1:] - t[:-1] > lookback)
    first = np.flatnonzero(starts)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    if len(last):
        last[-1] = n - 1
    ends_with_order = o[last]
    touch_end = last + 1 - ends_with_order  # the run's touches are rows first:touch_end
    users_last_run = np.ones(len(first), bool)
    users_last_run[:-1] = u[first[1:]] != u[first[:-1]]
    # each run's anchor: its order's time, or its last touch's; only touches within a
    # lookback of it count (a suffix of the run, as times ascend)
    anchor = t[last]
    run_of_row = np.cumsum(starts) - 1
    too_old = ~o & (t < anchor[run_of_row] - lookback)
    too_old_before = np.zeros(n + 1, np.int64)  # too-old rows before each row
    np.cumsum(too_old, out=too_old_before[1:])
    kept_from = first + too_old_before[touch_end] - too_old_before[first]
    capped_from = kept_from if config.max_touches is None \
        else np.maximum(kept_from, touch_end - config.max_touches)
    has_touches = touch_end > first
    lapsed = ~ends_with_order & has_touches & (~users_last_run
                                               | (anchor + lookback < watermark))
    still_open = ~ends_with_order & has_touches & ~lapsed

    order_rows = last[ends_with_order]
    order_users = u[order_rows]
    previous = last_order_before[order_users] if len(order_users) else np.zeros(0, np.int64)
    if len(order_rows) > 1:
        repeat = order_users[1:] == order_users[:-1]
        previous = previous.copy()
        previous[1:][repeat] = t[order_rows[:-1]][repeat]
    # an order more than the history (+ 1 ms, when the stream's timer expires it) before
    # this one is forgotten, whether or not an advance between the two expired it
    forgotten = (previous != NONE) & (t[order_rows] - np.maximum(previous, 0)
                                      > config.history_ms + 1)
    if forgotten.any():
        previous = np.where(forgotten, NONE, previous)

    users = u[first[users_last_run]] if n else np.zeros(0, u.dtype)
    last_order = np.full(len(users), NONE, np.int64)
    if len(order_rows):
        newest = np.ones(len(order_rows), bool)
        newest[:-1] = order_users[1:] != order_users[:-1]
        last_order[np.searchsorted(users, order_users[newest])] = t[order_rows[newest]]
    return Stepped(
        order_rows=order[order_rows],
        order_touches=(capped_from[ends_with_order], touch_end[ends_with_order]),
        previous_order=previous,
        lapsed_users=u[first[lapsed]], lapsed_close=anchor[lapsed] + lookback + 1,
        lapsed_touches=(capped_from[lapsed], touch_end[lapsed]),
        open_users=u[first[still_open]],
        open_touches=(kept_from[still_open], touch_end[still_open]),
        users=users, last_order=last_order, sorted_rows=order)


def key_runs(keys: np.ndarray) -> tuple[np.ndarray, dict[int, tuple[int, int]]]:
    """The rows in key order (stable: each key's rows keep their order) and each key's
    (start, end) in it: one sort for all keys, not a mask per key."""
    order = np.argsort(keys, kind="stable")
    if not len(order):
        return order, {}
    values, starts = np.unique(keys[order], return_index=True)
    ends = [*starts[1:].tolist(), len(order)]
    return order, {value: (start, end) for value, start, end in zip(
        values.tolist(), starts.tolist(), ends, strict=True)}


def ranges_to_rows(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(flat positions covered by the ranges, in order; offsets cutting them per range)."""
    lengths = ends - starts
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return flat, offsets


@dataclass(frozen=True)
class JourneyTouches:
    """The touches of many journeys, flat and in time order, cut by `offsets`."""

    offsets: np.ndarray  # int64, one more than there are journeys
    ts_ms: np.ndarray  # int64
    channel: np.ndarray  # object
    campaign: np.ndarray  # object
    trace_id: np.ndarray  # object

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def select(self, mask: np.ndarray) -> JourneyTouches:
        """The touches of the journeys `mask` picks."""
        starts = self.offsets[:-1][mask]
        flat, offsets = ranges_to_rows(starts, self.offsets[1:][mask])
        return JourneyTouches(offsets, self.ts_ms[flat], self.channel[flat],
                              self.campaign[flat], self.trace_id[flat])

    def rows(self, start: int, stop: int) -> JourneyTouches:
        """The touches of journeys start..stop (views of these columns, not copies)."""
        first, last = int(self.offsets[start]), int(self.offsets[stop])
        return JourneyTouches(self.offsets[start:stop + 1] - first, self.ts_ms[first:last],
                              self.channel[first:last], self.campaign[first:last],
                              self.trace_id[first:last])


@dataclass(frozen=True)
class ConvertedJourneys:
    """Orders and their journeys, one row per order."""

    user_id: np.ndarray  # object
    ts_ms: np.ndarray  # int64
    order_id: np.ndarray  # object
    revenue: np.ndarray  # float64
    currency: np.ndarray  # object
    trace_id: np.ndarray  # object: the order's own trace
    stage: np.ndarray  # object: lifecycle stage (udfs.lifecycle)
    touches: JourneyTouches

    def __len__(self) -> int:
        return len(self.ts_ms)

    def without_traces(self) -> ConvertedJourneys:
        """The same journeys with empty trace ids (for readers that need none)."""
        return replace(self, trace_id=np.full(len(self), "", object),
                       touches=replace(self.touches, trace_id=np.full(
                           len(self.touches.ts_ms), "", object)))

    def select(self, mask: np.ndarray) -> ConvertedJourneys:
        """The journeys `mask` picks."""
        return ConvertedJourneys(self.user_id[mask], self.ts_ms[mask], self.order_id[mask],
                                 self.revenue[mask], self.currency[mask],
                                 self.trace_id[mask], self.stage[mask],
                                 self.touches.select(mask))

    def rows(self, start: int, stop: int) -> ConvertedJourneys:
        """Journeys start..stop (views of these columns, not copies)."""
        return ConvertedJourneys(self.user_id[start:stop], self.ts_ms[start:stop],
                                 self.order_id[start:stop], self.revenue[start:stop],
                                 self.currency[start:stop], self.trace_id[start:stop],
                                 self.stage[start:stop], self.touches.rows(start, stop))


@dataclass(frozen=True)
class LapsedJourneys:
    """Journeys closed without an order, one row each."""

    user_id: np.ndarray  # object
    close_ts_ms: np.ndarray  # int64: last touch + lookback + 1
    touches: JourneyTouches

    def __len__(self) -> int:
        return len(self.close_ts_ms)


@dataclass(frozen=True)
class ClosedJourneys:
    """What one step closed."""

    converted: ConvertedJourneys
    lapsed: LapsedJourneys

    def __len__(self) -> int:
        return len(self.converted) + len(self.lapsed)

    def converted_objects(self) -> list[ConvertedJourney]:
        """The converted journeys as records (trace and span ids of touches and the order's
        span id are not kept: ""), for readers that want them one by one."""
        c = self.converted
        touches = self._touch_records(c.touches, c.user_id)
        return [tuple.__new__(ConvertedJourney, (
            tuple.__new__(Conversion, (user, ts, order, revenue, currency, trace, "")),
            journey, stage)) for user, ts, order, revenue, currency, trace, stage, journey
            in zip(c.user_id.tolist(), c.ts_ms.tolist(), c.order_id.tolist(),
                   c.revenue.tolist(), c.currency.tolist(), c.trace_id.tolist(),
                   c.stage.tolist(), touches, strict=True)]

    def lapsed_objects(self) -> list[NonConvertingJourney]:
        lapsed = self.lapsed
        touches = self._touch_records(lapsed.touches, lapsed.user_id)
        return [tuple.__new__(NonConvertingJourney, (user, journey, close))
                for user, journey, close in zip(lapsed.user_id.tolist(), touches,
                                                lapsed.close_ts_ms.tolist(), strict=True)]

    @staticmethod
    def _touch_records(touches: JourneyTouches,
                       users: np.ndarray) -> list[tuple[Touchpoint, ...]]:
        owner = np.repeat(users, touches.lengths)
        rows = [tuple.__new__(Touchpoint, (user, ts, channel, campaign, trace, ""))
                for user, ts, channel, campaign, trace in zip(
                    owner.tolist(), touches.ts_ms.tolist(), touches.channel.tolist(),
                    touches.campaign.tolist(), touches.trace_id.tolist(), strict=True)]
        bounds = touches.offsets.tolist()
        return [tuple(rows[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def converted_columns(journeys: Sequence[ConvertedJourney]) -> ConvertedJourneys:
    """Converted journeys (records) as columns."""
    touches = [touch for journey in journeys for touch in journey.touches]
    lengths = np.fromiter((len(journey.touches) for journey in journeys), np.int64,
                          len(journeys))
    offsets = np.zeros(len(journeys) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    orders = [journey.conversion for journey in journeys]
    return ConvertedJourneys(
        object_array([o.user_id for o in orders]),
        np.fromiter((o.ts_ms for o in orders), np.int64, len(orders)),
        object_array([o.order_id for o in orders]),
        np.fromiter((o.revenue for o in orders), np.float64, len(orders)),
        object_array([o.currency for o in orders]), object_array([o.trace_id for o in orders]),
        object_array([journey.stage for journey in journeys]),
        JourneyTouches(offsets, np.fromiter((t.ts_ms for t in touches), np.int64,
                                            len(touches)),
                       object_array([t.channel for t in touches]),
                       object_array([t.campaign for t in touches]),
                       object_array([t.trace_id for t in touches])))


def paths_of(touches: JourneyTouches) -> list[tuple[str, ...]]:
    """Each journey's channels in order: what the data-driven models count."""
    names = touches.channel.tolist()
    bounds = touches.offsets.tolist()
    return [tuple(names[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def concat_converted(parts: Sequence[ConvertedJourneys]) -> ConvertedJourneys:
    """The journeys of several tables, one after the other."""
    if len(parts) == 1:
        return parts[0]
    lengths = np.concatenate([part.touches.lengths for part in parts])
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])

    def joined(get) -> np.ndarray:  # type: ignore[no-untyped-def]
        return np.concatenate([get(part) for part in parts])

    return ConvertedJourneys(
        joined(lambda p: p.user_id), joined(lambda p: p.ts_ms), joined(lambda p: p.order_id),
        joined(lambda p: p.revenue), joined(lambda p: p.currency),
        joined(lambda p: p.trace_id), joined(lambda p: p.stage),
        JourneyTouches(offsets, joined(lambda p: p.touches.ts_ms),
                       joined(lambda p: p.touches.channel),
                       joined(lambda p: p.touches.campaign),
                       joined(lambda p: p.touches.trace_id)))


# Both go into keyed state pickled, and a pickle names a class by its module: they keep
# the path they were stored under before this module moved (udfs/pickle_paths.py).
JourneyTouches.__module__ = ConvertedJourneys.__module__ = "udfs.journey_columns"
