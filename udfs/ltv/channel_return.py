"""LTV-based return per channel and campaign: what the customers a channel acquired are
worth over a horizon, against what acquiring them cost.

Per attribution model and dimension (channel, campaign), over the customers whose first
order (lifecycle stage `new`) is in the data:

- customers acquired = the credit their first orders gave the key (a first order's credits
  sum to 1, so the keys' customers add up to the customers acquired);
- acquisition cost = the ad spend and compute allocated to those first orders (order_costs,
  that model's), each order's split over its credit rows as udfs/roi/day.py allocates:
  compute by credit, ad spend by credit x the campaign's spend per stage-weighted credit
  that day (so a touch of a campaign without spend takes none; with segment weights, the
  LTV segment's weight instead of the stage's, as the ROI job then allocates); the keys'
  costs add up to the first orders' cost;
- first-order revenue = the first orders' credited revenue;
- predicted value = per customer, its revenue from the acquisition day through the
  horizon: realised up to as_of, and E[Y(rest) | x, t_x, T] x E[M | x, m] for the part of
  the horizon after as_of, weighted by the credit;
- CAC = cost / customers; LTV ROI = predicted value / cost (= LTV:CAC); first-order ROI =
  first-order revenue / cost (ratios under min_cost are None, udfs/ratios.py);
- payback = the first day t of a weekly grid (0, 7, ..., the horizon) where the customers'
  expected value through t x gross margin reaches the cost; None if not within the horizon;
- intervals: percentiles of the predicted value over bootstrap models (udfs/ltv/draws.py),
  the realised part fixed, the cost fixed.

Days are whole-day numbers (e.g. days since the epoch); pure pandas/numpy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from udfs.lifecycle import StageWeights
from udfs.ltv.allocation import SegmentWeights, allocation_weight
from udfs.ltv.model import LtvModel, summaries_from_transactions
from udfs.ltv.segments import future_value
from udfs.ratios import GROSS_MARGIN, MIN_COST, revenue_per_cost

DIMENSIONS = ("channel", "campaign")
NEW = "new"
# the inputs' columns: credit rows, each order's allocated cost, ad spend per campaign-day
CREDIT_COLUMNS = ("model", "order_id", "user_id", "day", "stage", "channel", "campaign",
                  "credit", "revenue", "currency")
COST_COLUMNS = ("model", "order_id", "ad_spend", "compute_cost")
SPEND_COLUMNS = ("day", "campaign", "amount")
RETURN_COLUMNS = ("model", "dimension", "key", "customers", "acquisition_cost",
                  "first_order_revenue", "predicted_value", "predicted_value_low",
                  "predicted_value_high", "cac", "ltv_roi", "ltv_roi_low", "ltv_roi_high",
                  "first_order_roi", "payback_days")
CHUNK = 1 << 16  # customers whose value curves are computed at once


class LtvReturn(NamedTuple):
    rows: pd.DataFrame  # RETURN_COLUMNS, sorted by model, dimension, key
    customers: pd.DataFrame  # per acquired customer: its first order and value
    currency: str  # the orders' currency (the most frequent, if several)


def orders_of(credits: pd.DataFrame) -> pd.DataFrame:
    """One row per order: user_id, day, stage, revenue, currency. The revenue is the credited
    revenue under one model (the first by name: every model credits all of it)."""
    if credits.empty:
        return pd.DataFrame(columns=["order_id", "user_id", "day", "stage", "revenue",
                                     "currency"])
    first_model = credits[["order_id", "model"]].sort_values(["order_id", "model"]) \
        .drop_duplicates("order_id")
    mine = credits.merge(first_model, on=["order_id", "model"])
    return mine.groupby("order_id", sort=True).agg(
        user_id=("user_id", "first"), day=("day", "first"), stage=("stage", "first"),
        revenue=("revenue", "sum"), currency=("currency", "first")).reset_index()


def acquisitions(orders: pd.DataFrame, as_of_day: int) -> pd.DataFrame:
    """Each known user's first order (the earliest of stage `new`, by day then id) on or
    before as_of: user_id, order_id, day, revenue. Users whose first order is older than
    the data (no `new` order) were acquired before it and are not counted."""
    new = orders[(orders.stage == NEW) & (orders.user_id != "") & (orders.day <= as_of_day)]
    first = new.sort_values(["user_id", "day", "order_id"]).drop_duplicates("user_id")
    return first[["user_id", "order_id", "day", "revenue"]].reset_index(drop=True)


def cost_shares(credits: pd.DataFrame, spend: pd.DataFrame | None,
                stage_weights: StageWeights, segment_weights: SegmentWeights | None = None,
                segments: Mapping[str, str] | None = None) -> pd.Series:
    """Each credit row's share of its order's allocated ad spend (per model and order they
    sum to 1): credit x rate, rate = the campaign's spend that day x the row's stage weight
    / the day's stage-weighted credit of that campaign under the model (by plain credit
    where that is 0), as udfs/roi/day.py allocates; by credit alone when the order's rows have
    no rate (no spend known)."""
    credit = credits.credit.astype(float)
    rate = pd.Series(0.0, index=credits.index)
    if spend is not None and len(spend):
        by_campaign = spend.groupby(["day", "campaign"]).amount.sum()
        amount = pd.Series(list(zip(credits.day, credits.campaign, strict=True)),
                           index=credits.index).map(by_campaign).fillna(0.0).astype(float)
        weight = allocation_weight(credits, stage_weights.as_mapping(), segment_weights,
                                   segments)
        group = [credits.model, credits.day, credits.campaign]
        weighted = (credit * weight).groupby(group).transform("sum")
        plain = credit.groupby(group).transform("sum")
        rate = pd.Series(np.where(
            weighted > 0, amount * weight / weighted.where(weighted > 0, 1.0),
            np.where(plain > 0, amount / plain.where(plain > 0, 1.0), 0.0)),
            index=credits.index)
    raw = credit * rate
    order = [credits.model, credits.order_id]
    raw_total = raw.groupby(order).transform("sum")
    credit_total = credit.groupby(order).transform("sum")
    by_rate = raw / raw_total.where(raw_total > 0, 1.0)
    by_credit = credit / credit_total.where(credit_total > 0, 1.0)
    return pd.Series(np.where(raw_total > 0, by_rate, by_credit), index=credits.index)


def acquisition_rows(credits: pd.DataFrame, order_costs: pd.DataFrame,
                     first: pd.DataFrame, spend: pd.DataFrame | None = None,
                     stage_weights: StageWeights | None = None,
                     segment_weights: SegmentWeights | None = None,
                     segments: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The credit rows of the first orders with their cost: model, order_id, user_id,
    channel, campaign, credit, revenue, cost (the order's ad spend x its ad-spend share +
    its compute x its share of the order's credit)."""
    weights = stage_weights or StageWeights()
    shares = cost_shares(credits, spend, weights, segment_weights, segments)
    rows = credits.assign(ad_share=shares)
    rows = rows[rows.order_id.isin(first.order_id)]
    rows = rows.merge(first[["order_id", "user_id"]], on=["order_id", "user_id"])
    costs = order_costs.groupby(["model", "order_id"])[["ad_spend", "compute_cost"]].sum()
    rows = rows.join(costs, on=["model", "order_id"])
    credit_total = rows.groupby(["model", "order_id"]).credit.transform("sum")
    compute_share = rows.credit / credit_total.where(credit_total > 0, 1.0)
    cost = (rows.ad_spend.fillna(0.0) * rows.ad_share
            + rows.compute_cost.fillna(0.0) * compute_share)
    return rows.assign(cost=cost.astype(float))[
        ["model", "order_id", "user_id", "channel", "campaign", "credit", "revenue", "cost"]
    ].reset_index(drop=True)


def value_grid(horizon_days: int, step_days: int = 7) -> np.ndarray:
    """Days after acquisition at which value is measured: 0, step, 2 step, ... and the
    horizon itself."""
    if horizon_days < 0 or step_days < 1:
        raise ValueError(f"need horizon_days >= 0 and step_days >= 1, got {horizon_days}, "
                         f"{step_days}")
    grid = np.arange(0, horizon_days + 1, step_days, dtype=np.int64)
    return grid if grid[-1] == horizon_days else np.append(grid, horizon_days)


def ltv_return(credits: pd.DataFrame, order_costs: pd.DataFrame, model: LtvModel,
               as_of_day: int, horizon_days: int = 365, spend: pd.DataFrame | None = None,
               stage_weights: StageWeights | None = None,
               segment_weights: SegmentWeights | None = None,
               segments: Mapping[str, str] | None = None,
               gross_margin: float = GROSS_MARGIN, draws: Sequence[LtvModel] = (),
               level: float = 0.9, step_days: int = 7,
               min_cost: float = MIN_COST) -> LtvReturn:
    """The LTV-based return of every model and key (module doc). `credits`: CREDIT_COLUMNS
    (days as whole numbers), `order_costs`: COST_COLUMNS, `spend`: SPEND_COLUMNS or None;
    `draws`: bootstrap models for the intervals (none: no intervals)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    credits = credits[credits.day <= as_of_day]
    orders = orders_of(credits)
    first = acquisitions(orders, as_of_day)
    grid = value_grid(int(horizon_days), step_days)
    values = _customer_values(orders, first, model, as_of_day, grid, draws)
    rows = acquisition_rows(credits, order_costs, first, spend, stage_weights,
                            segment_weights, segments)
    frames = []
    position = pd.Series(np.arange(len(first)), index=first.user_id.to_numpy())
    at = position.reindex(rows.user_id).to_numpy(dtype=np.int64)
    for dimension in DIMENSIONS:
        keys = rows[["model", dimension]].drop_duplicates().sort_values(
            ["model", dimension]).reset_index(drop=True)
        group = rows.groupby(["model", dimension], sort=True).ngroup().to_numpy(np.int64)
        frames.append(_summarise(keys.rename(columns={dimension: "key"}).assign(
            dimension=dimension), rows, group, at, values, grid, gross_margin, level,
            min_cost))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    table = table.sort_values(["model", "dimension", "key"]).reset_index(drop=True)
    currency = orders.currency.value_counts().sort_index().idxmax() if len(orders) else ""
    customers = first.rename(columns={"day": "acquisition_day",
                                      "revenue": "first_order_revenue"}).assign(
        realised_value=values.realised, predicted_value=values.curve[:, -1])
    return LtvReturn(table[list(RETURN_COLUMNS)], customers, str(currency))


class _Values(NamedTuple):
    curve: np.ndarray  # customers x grid: expected value from acquisition through grid[k]
    realised: np.ndarray  # revenue from acquisition through the horizon, up to as_of
    draws: np.ndarray  # customers x draws: the value through the horizon under each draw


def _customer_values(orders: pd.DataFrame, first: pd.DataFrame, model: LtvModel,
                     as_of_day: int, grid: np.ndarray, draws: Sequence[LtvModel]) -> _Values:
    n, period = len(first), model.period_days
    if n == 0:
        return _Values(np.zeros((0, grid.size)), np.zeros(0), np.zeros((0, len(draws))))
    known = orders[orders.user_id != ""]
    ids, summaries = summaries_from_transactions(
        known.user_id.to_numpy(dtype=object), known.day.to_numpy(dtype=np.float64),
        known.revenue.to_numpy(dtype=np.float64), float(as_of_day), period)
    summaries = summaries.take(np.searchsorted(ids, first.user_id.to_numpy(dtype=object)))
    start = first.day.to_numpy(dtype=np.int64)
    age = as_of_day - start  # days from acquisition to as_of
    # realised: each order of an acquired customer, from its acquisition day on, counts from
    # the first grid day at or after it (curve) and, within the horizon, in `realised`
    index = pd.Series(np.arange(n), index=first.user_id.to_numpy())
    mine = known[known.user_id.isin(index.index)]
    who = index.reindex(mine.user_id).to_numpy(dtype=np.int64)
    offset = mine.day.to_numpy(dtype=np.int64) - start[who]
    keep = (offset >= 0) & (offset <= grid[-1])
    who, offset, revenue = who[keep], offset[keep], mine.revenue.to_numpy(np.float64)[keep]
    step = np.searchsorted(grid, offset, side="left")
    curve = np.zeros((n, grid.size))
    np.add.at(curve, (who, step), revenue)
    curve = np.cumsum(curve, axis=1)
    realised = curve[:, -1].copy()
    # expected: for each grid day past as_of, the purchases of the days in between
    for lo in range(0, n, CHUNK):
        hi = min(n, lo + CHUNK)
        rest = grid[None, :] - age[lo:hi, None]
        cust, k = np.nonzero(rest > 0)
        if cust.size:
            curve[lo + cust, k] += future_value(model, summaries.take(lo + cust),
                                                rest[cust, k] / period)
    rest = np.maximum(grid[-1] - age, 0) / period
    drawn = np.column_stack([realised + future_value(d, summaries, rest) for d in draws]) \
        if draws else np.zeros((n, 0))
    return _Values(curve, realised, drawn)


def _summarise(keys: pd.DataFrame, rows: pd.DataFrame, group: np.ndarray, at: np.ndarray,
               values: _Values, grid: np.ndarray, gross_margin: float, level: float,
               min_cost: float) -> pd.DataFrame:
    g = len(keys)
    credit = rows.credit.to_numpy(dtype=np.float64)

    def total(weights: np.ndarray) -> np.ndarray:
        return np.bincount(group, weights=weights, minlength=g)

    customers = total(credit)
    cost = total(rows.cost.to_numpy(dtype=np.float64))
    revenue = total(rows.revenue.to_numpy(dtype=np.float64))
    curve = np.column_stack([total(credit * values.curve[at, k]) for k in range(grid.size)]) \
        if g else np.zeros((0, grid.size))
    predicted = curve[:, -1] if g else np.zeros(0)
    low = high = np.full(g, np.nan)
    if values.draws.shape[1] and g:
        drawn = np.column_stack([total(credit * values.draws[at, d])
                                 for d in range(values.draws.shape[1])])
        low, high = np.quantile(drawn, [(1 - level) / 2, (1 + level) / 2], axis=1)
    reached = curve * gross_margin >= cost[:, None] * (1 - 1e-12)
    first_day = np.where(reached.any(axis=1), grid[np.argmax(reached, axis=1)], -1)

    def ratio(numerators: np.ndarray) -> list[float | None]:
        return [None if not np.isfinite(v) else revenue_per_cost(float(v), float(c), min_cost)
                for v, c in zip(numerators, cost, strict=True)]

    def column(values: list[float | None] | list[int | None]) -> pd.Series:
        return pd.Series(values, index=keys.index, dtype=object)

    return keys.assign(
        customers=customers, acquisition_cost=cost, first_order_revenue=revenue,
        predicted_value=predicted,
        predicted_value_low=column([None if np.isnan(v) else float(v) for v in low]),
        predicted_value_high=column([None if np.isnan(v) else float(v) for v in high]),
        cac=column([float(c / n) if n > 0 else None
                    for c, n in zip(cost, customers, strict=True)]),
        ltv_roi=column(ratio(predicted)), ltv_roi_low=column(ratio(low)),
        ltv_roi_high=column(ratio(high)), first_order_roi=column(ratio(revenue)),
        payback_days=column([int(d) if d >= 0 else None for d in first_day]))
