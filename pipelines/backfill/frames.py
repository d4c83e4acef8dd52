"""The backfill's computation on pandas frames, engine-free: column layouts, the window of
days, events and journeys; the credits are in `pipelines.backfill.credits`.

The Spark job calls these functions per partition (mapInPandas) and the single-process
engine calls them on all the data, so both compute exactly what the Flink jobs compute,
with the same udfs/ functions:

events -> the events that count (`counted_by_arrival`: those that reached Kafka within
          `journey.correction_days` of their time, as the stream counts them,
          udfs/journeys/arrival.py)
       -> closed journeys (the stream's own `udfs.journeys.book.JourneyBook`, advanced to
          the end of time at once: `closed_journeys`, `journeys_of_batches`) -> credits of
          the days being recomputed (`pipelines.backfill.credits`): per-conversion models
          (`udfs.attribution.models.touch_weights` on one JourneyTable of many conversions) and the
          data-driven ones (the weights `udfs.attribution.data_driven.PathCounts` fits when a refit
          period closes, on the counts of every journey closed up to then).

Which events a window needs: touches from `link_window + lookback` before the first day
(the journeys of conversions that may claim a GPU cost of the first day), orders from
`history_days` before it (lifecycle stage), events up to `link_window` after the last day
(conversions that claim costs of the last day). With `shapley` or `markov` configured, the
counts of every journey since the stream began: the whole archive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from pipelines.codec.otlp import decode_spans
from schemas import rows
from schemas.events import EventColumns, OrderColumns, TouchColumns, object_array
from schemas.records import Conversion, Touchpoint
from udfs.attribution import period_end
from udfs.journeys import NO_ARRIVAL, JourneyBook, JourneyTouches, arrived_in_time
from udfs.periods import DAY_MS, day_end_ms, day_of, day_start_ms
from udfs.settings import ComputeSettings

FAR_FUTURE_MS = 2**62  # the stream at the end of its input: every open journey closes
# between the channel names of a journey row's `path`, the in-memory key the data-driven
# weights are grouped and joined by (never written out): a control character, which no
# channel name holds (schemas/telemetry.py refuses them), so the key splits back into the
# names exactly. Not udfs.journeys.table.PATH_SEPARATOR (" > "), the text of a path in a
# path summary file: a channel name of the stream may hold ">".
PATH_KEY_SEPARATOR = "\x1f"

# Column name -> Spark SQL type; the pandas frames carry the same columns.
EVENT_COLUMNS = {"user_id": "string", "ts_ms": "bigint", "is_conversion": "boolean",
                 "channel": "string", "campaign": "string", "order_id": "string",
                 "revenue": "double", "currency": "string", "trace_id": "string",
                 # the Kafka timestamp of the event's record (NO_ARRIVAL: unknown)
                 "arrival_ms": "bigint"}
# Each user's events in the stream's order (time; a touch before an order at the same ms);
# the rest only makes ties deterministic, where the stream takes arrival order.
SORT_KEY = ["user_id", "ts_ms", "is_conversion", "channel", "campaign", "order_id",
            "trace_id"]
JOURNEY_COLUMNS = {
    "user_id": "string", "converted": "boolean", "close_ts_ms": "bigint",
    "period_end_ms": "bigint", "path": "string",
    "counted": "boolean",  # feeds the data-driven counts
    "in_days": "boolean",  # a conversion on a day being recomputed: credited
    "claims": "boolean",  # a conversion that may claim GPU cost of those days
    "order_id": "string", "conversion_ts_ms": "bigint", "revenue": "double",
    "currency": "string", "stage": "string", "day": "string", "trace_ids": "array<string>",
    "touch_ts": "array<bigint>", "touch_channel": "array<string>",
    "touch_campaign": "array<string>"}
CREDIT_COLUMNS = rows.BACKFILL_CREDIT.spark_types()


def spark_schema(columns: Mapping[str, str]) -> str:
    """A DDL schema string for Spark (`name type, ...`)."""
    return ", ".join(f"{name} {kind}" for name, kind in columns.items())


_DTYPES = {"bigint": np.int64, "double": np.float64, "boolean": bool}


def typed(frame: pd.DataFrame, columns: Mapping[str, str]) -> pd.DataFrame:
    """`frame` with exactly `columns`, numbers as numbers and the rest as objects: a frame
    built from no rows has float columns, which Arrow cannot turn into strings or lists."""
    return frame[list(columns)].astype({name: _DTYPES.get(kind, object)
                                        for name, kind in columns.items()})


@dataclass(frozen=True)
class BackfillWindow:
    """The days to recompute and the event-time bounds of what they need."""

    days: tuple[str, ...]  # sorted YYYY-MM-DD
    settings: ComputeSettings

    @cached_property
    def day_set(self) -> frozenset[str]:
        return frozenset(self.days)

    @property
    def first_ms(self) -> int:
        return day_start_ms(self.days[0])

    @property
    def end_ms(self) -> int:
        """Last millisecond of the last day."""
        return day_end_ms(self.days[-1])

    @property
    def count_until_ms(self) -> int:
        """Journeys closed up to here feed the fits (the end of the last day's period)."""
        return period_end(self.end_ms, self.settings.refit_every_ms)

    @property
    def claims_from_ms(self) -> int:
        return self.first_ms - self.settings.link_window_ms

    @property
    def claims_until_ms(self) -> int:
        return self.end_ms + self.settings.link_window_ms

    @property
    def events_until_ms(self) -> int:
        return max(self.count_until_ms, self.claims_until_ms)

    @property
    def touches_from_ms(self) -> int | None:
        """None: from the archive's start (the data-driven counts need every journey)."""
        if self.settings.data_driven:
            return None
        return self.claims_from_ms - self.settings.journey.lookback_ms - DAY_MS

    @property
    def conversions_from_ms(self) -> int | None:
        touches = self.touches_from_ms
        if touches is None:
            return None
        return min(touches, self.first_ms - self.settings.journey.history_ms - DAY_MS)


@dataclass
class ComputedDays:
    """What an engine computed for a window: each day's credits (read on demand, they can
    be large), and the GPU cost linked to each day's conversions or left unlinked."""

    credits_of: Callable[[str], pd.DataFrame]  # CREDIT_COLUMNS of one day
    compute: pd.DataFrame  # day, order_id, cost
    unlinked: pd.DataFrame  # day, cost
    stats: dict[str, float] = field(default_factory=dict)
    cleanup: Callable[[], None] = lambda: None


# --- events ------------------------------------------------------------------------------

def events_frame(touchpoints: pd.DataFrame, conversions: pd.DataFrame) -> pd.DataFrame:
    """Archive rows of touchpoints and conversions as one frame of EVENT_COLUMNS (rows
    without `arrival_ms`: NO_ARRIVAL)."""
    def arrival(rows: pd.DataFrame) -> object:
        return rows.arrival_ms if "arrival_ms" in rows else NO_ARRIVAL

    touches = pd.DataFrame({
        "user_id": touchpoints.user_id, "ts_ms": touchpoints.ts_ms, "is_conversion": False,
        "channel": touchpoints.channel, "campaign": touchpoints.campaign, "order_id": "",
        "revenue": 0.0, "currency": "", "trace_id": touchpoints.trace_id,
        "arrival_ms": arrival(touchpoints)})
    orders = pd.DataFrame({
        "user_id": conversions.user_id, "ts_ms": conversions.ts_ms, "is_conversion": True,
        "channel": "", "campaign": "", "order_id": conversions.order_id,
        "revenue": conversions.revenue, "currency": conversions.currency,
        "trace_id": conversions.trace_id, "arrival_ms": arrival(conversions)})
    return typed(pd.concat([touches, orders], ignore_index=True), EVENT_COLUMNS)


def events_of_messages(values: Iterable[bytes | None], encoding: str,
                       arrivals: Iterable[int] | None = None) -> pd.DataFrame:
    """Touchpoints and conversions of raw spans-topic messages (decoded as the stream
    decodes them; what it dead-letters is left out here too); `arrivals`: each message's
    Kafka timestamp (ms), which its events keep."""
    rows = []
    stamps = iter(arrivals) if arrivals is not None else None
    for value in values:
        arrival = NO_ARRIVAL if stamps is None else int(next(stamps))
        for record in decode_spans(None if value is None else bytes(value), encoding).records:
            if isinstance(record, Touchpoint):
                rows.append((record.user_id, record.ts_ms, False, record.channel,
                             record.campaign, "", 0.0, "", record.trace_id, arrival))
            elif isinstance(record, Conversion):
                rows.append((record.user_id, record.ts_ms, True, "", "", record.order_id,
                             record.revenue, record.currency, record.trace_id, arrival))
    return typed(pd.DataFrame(rows, columns=list(EVENT_COLUMNS)), EVENT_COLUMNS)


def counted_by_arrival(events: pd.DataFrame, settings: ComputeSettings) -> np.ndarray:
    """Which events count: those that reached Kafka no more than the correction horizon
    after their time, or whose arrival is unknown (udfs/journeys/arrival.py, the stream's rule)."""
    return arrived_in_time(events.ts_ms.to_numpy(np.int64),
                           events.arrival_ms.to_numpy(np.int64),
                           settings.journey.correction_ms)


# --- journeys ----------------------------------------------------------------------------

def _event_columns(events: pd.DataFrame) -> EventColumns:
    """A frame of EVENT_COLUMNS as the stream's event batch (each kind in frame order)."""
    is_order = events.is_conversion.to_numpy(bool)
    touches, orders = events[~is_order], events[is_order]

    def text(frame: pd.DataFrame, column: str) -> np.ndarray:
        return object_array(frame[column].tolist())

    return EventColumns(
        TouchColumns(text(touches, "user_id"), touches.ts_ms.to_numpy(np.int64),
                     text(touches, "channel"), text(touches, "campaign"),
                     text(touches, "trace_id"), object_array([""] * len(touches))),
        OrderColumns(text(orders, "user_id"), orders.ts_ms.to_numpy(np.int64),
                     text(orders, "order_id"), orders.revenue.to_numpy(np.float64),
                     text(orders, "currency"), text(orders, "trace_id"),
                     object_array([""] * len(orders))))


def _lists(values: np.ndarray, offsets: np.ndarray, keep: np.ndarray) -> list[list[object]]:
    """Per journey the slice of `values` its offsets cut, or [] where `keep` is False."""
    bounds, flat = offsets.tolist(), values.tolist()
    return [flat[bounds[i]:bounds[i + 1]] if wanted else []
            for i, wanted in enumerate(keep.tolist())]


def _journey_rows(user_id: np.ndarray, close: np.ndarray, touches: JourneyTouches,
                  settings: ComputeSettings, counted: np.ndarray, in_days: np.ndarray,
                  claims: np.ndarray) -> dict[str, object]:
    """The columns every journey row has, converted or not."""
    with_path = counted | in_days
    return {"user_id": user_id, "close_ts_ms": close,
            "period_end_ms": period_end(close, settings.refit_every_ms),
            "path": [PATH_KEY_SEPARATOR.join(path)  # type: ignore[arg-type]
                     for path in _lists(touches.channel, touches.offsets, with_path)],
            "counted": counted, "in_days": in_days, "claims": claims,
            "touch_ts": _lists(touches.ts_ms, touches.offsets, in_days),
            "touch_channel": _lists(touches.channel, touches.offsets, in_days),
            "touch_campaign": _lists(touches.campaign, touches.offsets, in_days)}


def closed_journeys(events: pd.DataFrame, settings: ComputeSettings,
                    window: BackfillWindow) -> pd.DataFrame:
    """The journeys the window needs, of the users in `events` (ordered by SORT_KEY, so
    each user's events are together and in the stream's order).

    Only the events that count by arrival (`counted_by_arrival`) go in; the stream sets
    the others aside as late. The stream's own journey book does the work: every event
    added at once, then one advance to the end of time closes every journey, as the stream
    closes them whatever its batching (udfs/journeys/book.py)."""
    events = events[counted_by_arrival(events, settings)]
    book = JourneyBook(settings.journey)
    book.add(_event_columns(events), np.iinfo(np.int64).min)  # nothing is late
    closed = book.advance(FAR_FUTURE_MS).closed
    data_driven = bool(settings.data_driven)

    converted = closed.converted
    close = converted.ts_ms
    keys, at = np.unique(close // DAY_MS, return_inverse=True)
    days = object_array([day_of(key * DAY_MS) for key in keys.tolist()])[at]
    in_days = np.isin(days, np.asarray(window.days, dtype=object))
    claims = (window.claims_from_ms <= close) & (close <= window.claims_until_ms)
    counted = np.full(len(close), data_driven) & (close <= window.count_until_ms)
    wanted = in_days | claims | counted
    converted, days = converted.select(wanted), days[wanted]
    in_days, claims, counted = in_days[wanted], claims[wanted], counted[wanted]
    touches = converted.touches
    trace_lists = _lists(touches.trace_id, touches.offsets, claims)
    conv = pd.DataFrame({
        **_journey_rows(converted.user_id, converted.ts_ms, touches, settings, counted,
                        in_days, claims),
        "converted": True, "order_id": converted.order_id,
        "conversion_ts_ms": converted.ts_ms, "revenue": converted.revenue,
        "currency": converted.currency, "stage": converted.stage, "day": days,
        # as the stream's conversions topic lists them (pipelines.flink.attribution.job)
        "trace_ids": [list(dict.fromkeys(t for t in (own, *traces) if t)) if claim else []
                      for own, traces, claim in zip(converted.trace_id.tolist(), trace_lists,
                                                    claims.tolist(), strict=True)]})

    lapsed = closed.lapsed
    counted = np.full(len(lapsed), data_driven) & (lapsed.close_ts_ms <= window.count_until_ms)
    close = lapsed.close_ts_ms[counted]
    nothing = np.zeros(len(close), bool)
    gone = pd.DataFrame({
        **_journey_rows(lapsed.user_id[counted], close, lapsed.touches.select(counted),
                        settings, ~nothing, nothing, nothing),
        "converted": False, "order_id": "", "conversion_ts_ms": close, "revenue": 0.0,
        "currency": "", "stage": "", "day": "", "trace_ids": [[] for _ in close]})
    frame = pd.concat([conv, gone], ignore_index=True)
    return typed(frame.sort_values(["user_id", "close_ts_ms", "converted"], kind="stable",
                                   ignore_index=True), JOURNEY_COLUMNS)


def journeys_of_batches(batches: Iterable[pd.DataFrame], settings: ComputeSettings,
                        window: BackfillWindow) -> Iterator[pd.DataFrame]:
    """`closed_journeys` over consecutive batches of one ordered stream of events (Spark's
    Arrow batches of a partition): a user cut by a batch boundary waits for the next."""
    carry: pd.DataFrame | None = None
    for batch in batches:
        if carry is not None and len(carry):
            batch = pd.concat([carry, batch], ignore_index=True)
        if not len(batch):
            continue
        users = batch.user_id.to_numpy()
        others = np.flatnonzero(users != users[-1])
        cut = int(others[-1]) + 1 if len(others) else 0
        carry = batch.iloc[cut:]
        if cut:
            yield closed_journeys(batch.iloc[:cut], settings, window)
    if carry is not None and len(carry):
        yield closed_journeys(carry, settings, window)
