"""ROI of recomputed days, engine-free: GPU cost linked to conversions through their
journeys' traces, and `udfs.roi.day.day_roi` per day, as the Flink ROI job does it.

The ROI job links a trace's GPU cost to the conversion whose journey carried the trace
(its claim) when the two lie within `roi.link_window_days` of each other; other cost is
reported as unlinked compute of the cost's own day. Linked cost counts on the day of the
conversion. A trace claimed twice (it should not be) goes to the earliest conversion here;
the stream gives it to whichever claim arrived first.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import NamedTuple

import numpy as np
import pandas as pd

from schemas.rows import AD_SPEND, ATTRIBUTION_CREDITS, ROI_DAILY
from udfs.ltv import OrderScore, day_number, tallies_of
from udfs.periods import DAY_MS, day_of
from udfs.roi import CREDIT_COLUMNS as ROI_CREDIT_COLUMNS
from udfs.roi import day_roi, idle_shares
from udfs.settings import ComputeSettings

CLAIM_COLUMNS = ["trace_id", "order_id", "conversion_ts_ms"]
COST_COLUMNS = ["trace_id", "ts_ms", "cost"]
SPEND_COLUMNS = list(AD_SPEND.without("currency").names)  # spend of one currency

# Warehouse column orders (schemas/rows.py, the tables of schemas/sql/warehouse.sql)
CREDIT_ROW = ATTRIBUTION_CREDITS.names
ROI_ROW = ROI_DAILY.names


def _days(ts_ms: pd.Series) -> np.ndarray:
    """UTC day of every time, formatted once per distinct day."""
    if not len(ts_ms):
        return np.array([], dtype=object)
    numbers = ts_ms.to_numpy(np.int64) // DAY_MS
    distinct, inverse = np.unique(numbers, return_inverse=True)
    names = np.array([day_of(int(d) * DAY_MS) for d in distinct], dtype=object)
    return names[inverse]


def exploded_claims(journeys: pd.DataFrame) -> pd.DataFrame:
    """One row per (trace, claiming conversion) of the journeys marked `claims`."""
    rows = journeys[journeys.claims & journeys.converted]
    exploded = rows[["trace_ids", "order_id", "conversion_ts_ms"]].explode("trace_ids")
    exploded = exploded.dropna(subset=["trace_ids"]).rename(columns={"trace_ids": "trace_id"})
    return exploded[CLAIM_COLUMNS].reset_index(drop=True)


def first_claims(claims: pd.DataFrame) -> pd.DataFrame:
    """Each trace's claim: the earliest conversion naming it."""
    ordered = claims.sort_values(["trace_id", "conversion_ts_ms", "order_id"], kind="stable")
    return ordered.drop_duplicates("trace_id")[CLAIM_COLUMNS].reset_index(drop=True)


def loaded_costs(calls: pd.DataFrame, idle: pd.DataFrame | None) -> pd.DataFrame:
    """The costs `link_costs` takes (trace_id, ts_ms, cost, key) from priced calls
    (gpu_uuid, trace_id, ts_ms, cost) and, fully loaded, the GPUs' idle rows (gpu_uuid,
    ts_ms, cost): each call's cost and its share of its GPU-day's idle cost, linked alike,
    and the idle cost of GPU-days without calls under the GPU's key (never linked). None:
    direct compute, the calls alone."""
    costs = calls[COST_COLUMNS].assign(key="")
    if idle is None:
        return costs
    shares, unshared = idle_shares(calls, idle)
    kept = pd.DataFrame({"trace_id": "", "ts_ms": unshared.day_number * DAY_MS + DAY_MS - 1,
                         "cost": unshared.cost, "key": unshared.gpu_uuid})
    return pd.concat([costs, shares.assign(key=""), kept], ignore_index=True)


def link_costs(costs: pd.DataFrame, claims: pd.DataFrame, settings: ComputeSettings,
               days: Collection[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """GPU costs (trace_id, ts_ms = interval end, cost[, key]) -> (compute: day, order_id,
    cost of linked cost by conversion day; unlinked: day, cost, key -- '' for calls outside
    journeys, a GPU's id for idle cost it kept), for `days` only."""
    # (empty frames come without dtypes: make the join keys agree)
    claims = first_claims(claims).astype({"trace_id": object, "order_id": object,
                                          "conversion_ts_ms": np.float64})
    costs = costs if "key" in costs else costs.assign(key="")
    merged = costs[[*COST_COLUMNS, "key"]].astype({"trace_id": object}).merge(
        claims, on="trace_id", how="left")
    claim_ts = merged.conversion_ts_ms.to_numpy(np.float64)
    linked = (merged.trace_id.to_numpy() != "") & ~np.isnan(claim_ts) & (
        np.abs(merged.ts_ms.to_numpy(np.float64) - claim_ts) < settings.link_window_ms)
    compute = merged[linked]
    compute = pd.DataFrame({"day": _days(compute.conversion_ts_ms.astype(np.int64)),
                            "order_id": compute.order_id.to_numpy(),
                            "cost": compute.cost.to_numpy(np.float64)})
    unlinked = merged[~linked]
    unlinked = pd.DataFrame({"day": _days(unlinked.ts_ms),
                             "cost": unlinked.cost.to_numpy(np.float64),
                             "key": unlinked.key.to_numpy(object)})
    wanted = set(days)
    return (compute[compute.day.isin(wanted)].reset_index(drop=True),
            unlinked[unlinked.day.isin(wanted)].reset_index(drop=True))


def _plain(value: object) -> object:
    """A frame's number as the warehouse takes it: a float, NaN (no ratio) as None."""
    if isinstance(value, str):
        return value
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) else number


class DayRows(NamedTuple):
    """One day's rows for the warehouse (its column order)."""

    roi: list[tuple[object, ...]]
    unallocated: list[tuple[object, ...]]
    orders: list[tuple[object, ...]]  # order_costs, of `order_cost_model` only
    # order_segments (costs shared by LTV segment; None: not)
    segments: list[tuple[object, ...]] | None = None


def roi_rows(day: str, credits: pd.DataFrame, spend: pd.DataFrame, compute: pd.DataFrame,
             unlinked: float | Mapping[str, float], settings: ComputeSettings,
             order_cost_model: str = "", scores: Mapping[str, OrderScore] | None = None
             ) -> DayRows:
    """The roi_daily, roi_unallocated, order_costs (and order_segments) rows of one day
    (`unlinked`: compute no order took, by key as udfs.roi.day.day_roi takes it; `scores`: the
    orders' LTV segments and values when costs are shared by them, `order_scores`)."""
    if not len(credits) and not len(spend) and not len(compute) and not (
            any(unlinked.values()) if isinstance(unlinked, Mapping) else unlinked):
        return DayRows([], [], [], None if scores is None else [])  # (no input, no report)
    segments = None if scores is None else {o: score.segment for o, score in scores.items()}
    result = day_roi(credits[ROI_CREDIT_COLUMNS], spend[["platform", "account", "campaign",
                                                          "amount"]],
                     compute[["order_id", "cost"]], settings.models,
                     settings.stage_weights, unlinked, settings.min_cost,
                     settings.gross_margin, settings.by_segment, segments)
    roi = [tuple(_plain(getattr(r, name)) if name not in ("day", "currency") else
                 (day if name == "day" else settings.currency) for name in ROI_ROW)
           for r in result.roi.itertuples(index=False)]
    unallocated = [(r.model, day, r.kind, r.key, float(r.amount), settings.currency)
                   for r in result.unallocated.itertuples(index=False)]
    orders = [(r.model, day, r.order_id, float(r.revenue), float(r.ad_spend),
               float(r.compute_cost), settings.currency)
              for r in result.orders.itertuples(index=False) if r.model == order_cost_model]
    segment_rows = None if scores is None else [
        (day, order, user, scores[order].value, scores[order].segment)
        for order, user in sorted(zip(credits.order_id, credits.user_id, strict=True))
        if order in scores]
    return DayRows(roi, unallocated, orders,
                   None if segment_rows is None else list(dict.fromkeys(segment_rows)))


def order_scores(orders: pd.DataFrame, settings: ComputeSettings,
                 of: pd.DataFrame | None = None) -> dict[str, OrderScore] | None:
    """With costs shared by LTV segment, each order's segment and value as of its day
    (udfs/ltv/allocation.py) from `orders` (order_id, user_id, ts_ms, revenue: the
    customers' whole history, not only the days recomputed), for the orders in `of`
    (default: all; they must be among `orders`); None when costs are shared by lifecycle
    stage."""
    if settings.by_segment is None or settings.segmenter is None:
        return None
    users, wanted = tallies_of(orders), tallies_of(orders if of is None else of)
    days = {user: {day_number(ts) for ts, _ in tally.values()}
            for user, tally in wanted.items()}
    return settings.segmenter.scores({user: users[user] for user in days}, days)


def orders_of_credits(credits: pd.DataFrame) -> pd.DataFrame:
    """One row per order (order_id, user_id, ts_ms, revenue) of credit rows (user_id,
    conversion_ts_ms, revenue): its revenue is the sum of its credit revenue under one
    model (the first by name: every model credits all of it)."""
    columns = ["order_id", "user_id", "ts_ms", "revenue"]
    if not len(credits):
        return pd.DataFrame(columns=columns)
    first = credits[credits.model == credits.groupby("order_id").model.transform("min")]
    return first.groupby("order_id", sort=True, as_index=False).agg(
        user_id=("user_id", "first"), ts_ms=("conversion_ts_ms", "first"),
        revenue=("revenue", "sum"))[columns]


def credit_rows(credits: pd.DataFrame) -> list[tuple[object, ...]]:
    """attribution_credits rows (plain Python values, warehouse column order)."""
    frame = credits.rename(columns={"day": "conversion_date"})
    return list(zip(*(frame[name].tolist() for name in CREDIT_ROW), strict=True))
