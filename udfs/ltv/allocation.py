"""The LTV segment as the allocation weight's basis (`roi.allocation_weights: ltv_segment`).

Costs are shared over a day's credit rows in proportion to credit x weight (udfs/roi/day.py).
With the lifecycle basis the weight is the order's stage weight; with this one it is the
weight of the order's LTV segment: the segment of the customer's predicted LTV as of the
order's day, from the customer's orders on or before that day (the order's own day
included), under one fixed allocation model (a model message: BG/NBD and Gamma-Gamma
parameters, horizon, discount rate and segment bounds, pipelines/codec/ltv_models.py).

A fixed model, given in the config, not the latest one published: the stream and the
backfill must weigh the same order alike whenever they see it, so the segment of an order
depends on the customer's orders alone. A later order of the customer does not change an
earlier order's segment; an earlier order that arrives late changes the segments of the
customer's orders from its day on (the stream reports them again). An order without a
known user, or one the model gives no finite value, weighs as `unknown`.

Pure numpy/pandas: the Flink ROI job (per user, as orders come) and the backfill (all
orders at once) call `OrderSegmenter.segments`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd

from udfs.ltv.model import LtvModel
from udfs.ltv.segments import SEGMENTS
from udfs.ltv.tally import Orders, check_segments, day_number, segment_of, summaries_of

LIFECYCLE_STAGE, LTV_SEGMENT = "lifecycle_stage", "ltv_segment"
BASES = (LIFECYCLE_STAGE, LTV_SEGMENT)
UNKNOWN = "unknown"  # no known user, or no finite value under the model
VALUE_DECIMALS = 6  # predicted values are segmented rounded to this
# higher predicted value, more of the cost: the customers worth acquiring carry it
DEFAULT_SEGMENT_WEIGHTS = {"low": 0.25, "mid": 0.5, "high": 0.75, "top": 1.0, UNKNOWN: 0.2}


@dataclass(frozen=True)
class SegmentWeights:
    """How much a conversion of each LTV segment weighs when costs are shared; `unknown`
    for orders without a segment. Checked here, whatever the YAML said."""

    weights: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_SEGMENT_WEIGHTS))

    def __post_init__(self) -> None:
        if not isinstance(self.weights, Mapping) or UNKNOWN not in self.weights:
            raise ValueError(f"segment weights must map each segment, and '{UNKNOWN}', to a "
                             f"weight; got {self.weights!r}")
        for name, weight in self.weights.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"segment names must be non-empty strings, got {name!r}")
            if isinstance(weight, bool) or not isinstance(weight, int | float) \
                    or not math.isfinite(weight) or weight < 0:
                raise ValueError(f"{name} must be a non-negative number, got {weight!r}")
        object.__setattr__(self, "weights", {str(k): float(v)
                                             for k, v in self.weights.items()})

    def check_names(self, names: Sequence[str]) -> None:
        """ValueError unless every segment of the model has a weight."""
        missing = [name for name in names if name not in self.weights]
        if missing:
            raise ValueError(f"segment weights give no weight to {', '.join(missing)} (the "
                             f"allocation model's segments: {', '.join(names)})")

    def of(self, segments: pd.Series) -> pd.Series:
        """Each row's weight (a segment without a weight, or none: `unknown`'s)."""
        return segments.map(self.weights).fillna(self.weights[UNKNOWN]).astype(float)


class OrderScore(NamedTuple):
    """An order's LTV segment and its customer's predicted value as of the order's day."""

    segment: str
    value: float | None  # None: no finite value (segment unknown)


@dataclass(frozen=True)
class OrderSegmenter:
    """Segments orders as of their day under one model (the module doc)."""

    model: LtvModel
    horizon_days: int
    discount_rate: float
    bounds: tuple[float, ...]
    names: tuple[str, ...] = SEGMENTS

    def __post_init__(self) -> None:
        if not (isinstance(self.horizon_days, int) and self.horizon_days >= 1):
            raise ValueError(f"horizon_days must be a whole number of days >= 1, got "
                             f"{self.horizon_days!r}")
        if not (math.isfinite(self.discount_rate) and self.discount_rate > -1):
            raise ValueError(f"discount_rate must be above -1, got {self.discount_rate!r}")
        check_segments(self.bounds, self.names)

    def segments(self, users: Mapping[str, Orders],
                 days: Mapping[str, Iterable[int]] | None = None) -> dict[str, str]:
        """Order id -> segment of the orders of these users (each user's tally: order id
        -> (ts_ms, amount)); with `days`, only a user's orders on those days."""
        return {order: scored.segment for order, scored in self.scores(users, days).items()}

    def scores(self, users: Mapping[str, Orders],
               days: Mapping[str, Iterable[int]] | None = None) -> dict[str, OrderScore]:
        """`segments`, with each order's predicted value (None: no finite value)."""
        by_day: dict[int, list[str]] = {}
        for user, orders in users.items():
            wanted = None if days is None else set(days.get(user, ()))
            for day in {day_number(ts) for ts, _ in orders.values()}:
                if wanted is None or day in wanted:
                    by_day.setdefault(day, []).append(user)
        out: dict[str, OrderScore] = {}
        for day, names in sorted(by_day.items()):
            scored = self._as_of(day, {user: users[user] for user in names})
            for user in names:
                for order, (ts, _) in users[user].items():
                    if day_number(ts) == day:
                        out[order] = scored.get(user, OrderScore(UNKNOWN, None))
        return out

    def _as_of(self, day: int, users: Mapping[str, Orders]) -> dict[str, OrderScore]:
        """Each user's segment and value as of the end of `day` (orders after it left
        out)."""
        ids, summaries = summaries_of(users, day, self.model.period_days)
        if not len(ids):
            return {}
        try:
            with np.errstate(all="ignore"):
                value = np.asarray(self.model.lifetime_value(
                    summaries, self.horizon_days / self.model.period_days,
                    self.discount_rate), dtype=np.float64)
        except ValueError:  # the model values no one (e.g. no finite mean order value)
            value = np.full(ids.size, np.nan)
        # compared at a millionth: one user's computation and a batch's differ in the last
        # bits, and a value on a bound (bounds are quantiles of values: often one of them)
        # must fall on the same side in both
        value = np.round(value, VALUE_DECIMALS)
        finite = np.isfinite(value)
        names = np.full(ids.size, UNKNOWN, dtype=object)
        if finite.any():
            names[finite] = segment_of(value[finite], self.bounds, self.names)
        return {user: OrderScore(name, float(v) if ok else None) for user, name, v, ok in
                zip(ids.tolist(), names.tolist(), value.tolist(), finite.tolist(),
                    strict=True)}


def tallies_of(orders: pd.DataFrame) -> dict[str, Orders]:
    """Orders (order_id, user_id, ts_ms, revenue) as tallies by known user."""
    known = orders[orders.user_id.astype(str) != ""]
    users: dict[str, Orders] = {}
    for order, user, ts, revenue in zip(known.order_id.tolist(), known.user_id.tolist(),
                                        known.ts_ms.tolist(), known.revenue.tolist(),
                                        strict=True):
        users.setdefault(str(user), {})[str(order)] = (int(ts), float(revenue))
    return users


def allocation_weight(credits: pd.DataFrame, stage_weights: Mapping[str, float],
                      segment_weights: SegmentWeights | None = None,
                      segments: Mapping[str, str] | None = None) -> pd.Series:
    """Each credit row's weight: its stage's, or with segment weights its order's
    segment's (`segments`: order id -> segment; an order without one is `unknown`)."""
    if segment_weights is None:
        return credits.stage.map(stage_weights).fillna(0.0).astype(float)
    return segment_weights.of(credits.order_id.map(dict(segments or {})))
