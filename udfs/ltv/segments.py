"""Customers scored by a fitted LTV model: the scoring frame, LTV segments (quantile bands of
predicted value) and the expected value of each customer's next days.

Pure numpy/pandas on `udfs.ltv.model` models; the warehouse refresh (pipelines/ltv/report.py),
the CLI and the tests share it. Definitions: docs/ltv-return.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from udfs.ltv.model import CustomerSummaries, LtvModel

CUTS = (0.5, 0.8, 0.95)
SEGMENTS = ("low", "mid", "high", "top")
HORIZON_DAYS = 365
# the scoring frame's columns (schemas.ltv_rows.CUSTOMER_LTV less its as-of columns)
SCORE_COLUMNS = ("user_id", "frequency", "recency_days", "age_days", "monetary", "p_alive",
                 "expected_purchases", "expected_order_value", "predicted_ltv", "segment")


def segment_thresholds(values: np.ndarray, cuts: Sequence[float] = CUTS) -> np.ndarray:
    """The value at each cut's quantile of `values` (numpy's default, linear
    interpolation): the upper edges of all bands but the last."""
    cuts = tuple(float(c) for c in cuts)
    if any(not 0.0 < c < 1.0 for c in cuts) or list(cuts) != sorted(set(cuts)):
        raise ValueError(f"cuts must be increasing quantiles strictly between 0 and 1, "
                         f"got {cuts}")
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return np.full(len(cuts), np.nan)
    if not np.all(np.isfinite(values)):
        raise ValueError("segment values must be finite")
    return np.quantile(values, cuts)


def assign_segments(values: np.ndarray, thresholds: np.ndarray,
                    names: Sequence[str] = SEGMENTS) -> np.ndarray:
    """Each value's band: the number of thresholds it is strictly above picks the name, so
    equal values always share a band and a value on a threshold stays below it."""
    thresholds = np.asarray(thresholds, dtype=np.float64)
    if len(names) != thresholds.size + 1:
        raise ValueError(f"{thresholds.size} cuts make {thresholds.size + 1} segments, "
                         f"got {len(names)} names")
    band = np.searchsorted(thresholds, np.asarray(values, dtype=np.float64), side="left")
    return np.asarray(names, dtype=object)[band]


def ltv_segments(values: np.ndarray, cuts: Sequence[float] = CUTS,
                 names: Sequence[str] = SEGMENTS) -> np.ndarray:
    """Quantile bands of predicted LTV among these customers: with the default cuts the
    bottom half is 'low', the next 30 % 'mid', the next 15 % 'high', the top 5 % 'top'
    (ties share the lower band; the cut values are segment_thresholds')."""
    if len(names) != len(tuple(cuts)) + 1:
        raise ValueError(f"{len(tuple(cuts))} cuts make {len(tuple(cuts)) + 1} segments, "
                         f"got {len(names)} names")
    return assign_segments(values, segment_thresholds(values, cuts), names)


def future_value(model: LtvModel, summaries: CustomerSummaries,
                 periods: np.ndarray) -> np.ndarray:
    """Per customer E[Y(periods_i) | x, t_x, T] x E[M | x, m]: the expected value of its
    purchases in the next `periods_i` periods (0 where periods_i <= 0). One model call per
    distinct length, so lengths in whole days cost at most one call per day."""
    periods = np.asarray(periods, dtype=np.float64)
    if periods.shape != (len(summaries),):
        raise ValueError(f"periods must have one value per customer ({len(summaries)}), got "
                         f"shape {periods.shape}")
    out = np.zeros(len(summaries))
    ahead = np.flatnonzero(periods > 0)
    if ahead.size == 0:
        return out
    rows = summaries.take(ahead)
    order_value = model.spend.expected_order_value(rows)
    lengths, which = np.unique(periods[ahead], return_inverse=True)
    purchases = np.empty(ahead.size)
    for k, length in enumerate(lengths):
        at = np.flatnonzero(which.ravel() == k)
        purchases[at] = model.purchases.expected_purchases(float(length), rows.take(at))
    out[ahead] = purchases * order_value
    return out


def score_customers(model: LtvModel, ids: np.ndarray, summaries: CustomerSummaries,
                    horizon_days: float = HORIZON_DAYS, cuts: Sequence[float] = CUTS,
                    names: Sequence[str] = SEGMENTS, discount_rate: float = 0.0,
                    ) -> pd.DataFrame:
    """The scoring frame (SCORE_COLUMNS), one row per customer in the order given: its
    summary in days, P(alive), the purchase days expected in the horizon, the expected
    value of a purchase day, predicted LTV over the horizon (discounted per period at
    `discount_rate`, step one period) and its segment among these customers.

    Summaries are in periods of model.period_days, as the model was fitted."""
    if len(ids) != len(summaries):
        raise ValueError(f"{len(ids)} ids for {len(summaries)} summaries")
    if not horizon_days >= 0:
        raise ValueError(f"horizon_days must be >= 0, got {horizon_days}")
    horizon = float(horizon_days) / model.period_days
    period = model.period_days
    if len(summaries):
        purchases = model.purchases.expected_purchases(horizon, summaries)
        order_value = model.spend.expected_order_value(summaries)
        value = model.lifetime_value(summaries, horizon, discount_rate)
        alive = model.purchases.probability_alive(summaries)
        if not np.all(np.isfinite(value)):
            bad = int(np.flatnonzero(~np.isfinite(value))[0])
            raise ValueError(
                f"the model gives customer {str(ids[bad])!r} (x={summaries.frequency[bad]:g}, "
                f"t_x={summaries.recency[bad]:g}, T={summaries.age[bad]:g}) no finite value: "
                f"{model.purchases}, {model.spend}")
    else:
        purchases = order_value = value = alive = np.zeros(0)
    return pd.DataFrame({
        "user_id": np.asarray(ids, dtype=object),
        "frequency": summaries.frequency,
        "recency_days": summaries.recency * period,
        "age_days": summaries.age * period,
        "monetary": summaries.monetary,
        "p_alive": alive,
        "expected_purchases": purchases,
        "expected_order_value": order_value,
        "predicted_ltv": value,
        "segment": ltv_segments(value, cuts, names) if len(summaries)
        else np.zeros(0, dtype=object),
    }, columns=list(SCORE_COLUMNS))

