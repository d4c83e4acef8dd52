"""ROI of one day: ad spend and compute cost allocated to the day's credited conversions.

Ad spend: each campaign's spend that day is split over that day's credit rows of the
campaign (per model) in proportion to credit x stage weight (udfs.allocation.shares), or
credit x the order's LTV segment weight (`roi.allocation_weights: ltv_segment`,
udfs/ltv/allocation.py).
Compute: the GPU cost of the traces in a conversion's journey (linked upstream) is split
over that conversion's credit rows by credit. ROI per channel, campaign and lifecycle
stage = attributed revenue / (allocated ad spend + allocated compute), per model.

What cannot be allocated -- spend of a campaign with no credited conversion that day,
compute of traces no conversion's journey carried -- is reported as unallocated, so
allocated + unallocated always equals what came in.

Pure pandas: the Flink ROI job and the Spark backfill call `day_roi` on a day's rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from schemas import rows
from udfs.lifecycle import StageWeights
from udfs.ltv import SegmentWeights, allocation_weight
from udfs.ratios import GROSS_MARGIN, MIN_COST

# the frames of one day: views of the result rows (schemas/rows.py) without day and currency
CREDIT_COLUMNS = list(rows.CREDIT.select("model", "order_id", "touch_index", "channel",
                                         "campaign", "stage", "credit", "revenue").names)
SPEND_COLUMNS = list(rows.AD_SPEND.select("platform", "account", "campaign", "amount").names)
COMPUTE_COLUMNS = ["order_id", "cost"]  # per-order compute cost, an input of the day only
ROI_COLUMNS = list(rows.ROI_DAILY.without("day", "currency").names)
# roi_unallocated's cost_kind is `kind` in the day's frame
UNALLOCATED_COLUMNS = list(rows.ROI_UNALLOCATED.select("model", "cost_kind", "key", "amount")
                           .renamed(cost_kind="kind").names)
ORDER_COLUMNS = list(rows.ORDER_COST.without("day", "currency").names)
DIMENSIONS = ("channel", "campaign", "stage")


class DayRoi(NamedTuple):
    roi: pd.DataFrame  # ROI_COLUMNS, one row per (model, dimension, key)
    unallocated: pd.DataFrame  # UNALLOCATED_COLUMNS: kind ad_spend|compute, key campaign|''
    orders: pd.DataFrame  # ORDER_COLUMNS: each credited order's revenue and allocated cost


def _weighted_shares(frame: pd.DataFrame, group: list[str], weight: pd.Series) -> pd.Series:
    """Each row's fraction of its group by credit x weight; by credit alone where a group's
    weighted total is 0 (as udfs.allocation.shares); 0 where nothing is credited."""
    weighted = frame.credit * weight
    total = weighted.groupby([frame[g] for g in group]).transform("sum")
    plain_total = frame.credit.groupby([frame[g] for g in group]).transform("sum")
    use_plain = total <= 0
    numerator = np.where(use_plain, frame.credit, weighted)
    denominator = np.where(use_plain, plain_total, total)
    return pd.Series(np.divide(numerator, denominator, out=np.zeros(len(frame)),
                               where=denominator > 0), index=frame.index)


def day_roi(credits: pd.DataFrame, spend: pd.DataFrame, compute: pd.DataFrame,
            models: Sequence[str], stage_weights: StageWeights,
            unlinked_compute: float | Mapping[str, float] = 0.0,
            min_cost: float = MIN_COST, gross_margin: float = GROSS_MARGIN,
            segment_weights: SegmentWeights | None = None,
            segments: Mapping[str, str] | None = None) -> DayRoi:
    """ROI rows of one day from its credit rows, its spend rows and per-order compute
    (`models`: every model the day is reported for, credited or not). `unlinked_compute`:
    compute no order took, by key ('' for calls outside journeys, a GPU's id for the idle
    cost of a GPU-day without calls); a number is the '' key's. With `segment_weights`
    spend is shared by the orders' LTV segments (`segments`: order id -> segment,
    udfs/ltv/allocation.py) instead of their stages."""
    unlinked = dict(unlinked_compute) if isinstance(unlinked_compute, Mapping) \
        else {"": float(unlinked_compute)}
    outside = float(unlinked.pop("", 0.0))
    weights = stage_weights.as_mapping()
    # frames built from rows (possibly none) carry no dtypes: make the numbers numbers
    credits = credits[CREDIT_COLUMNS].reset_index(drop=True) \
        .astype({"credit": float, "revenue": float, "touch_index": int})
    spend = spend.astype({"amount": float})
    compute = compute.astype({"cost": float})
    spend_by_campaign = spend.groupby("campaign").amount.sum() if len(spend) \
        else pd.Series(dtype=float)
    compute_by_order = compute.groupby("order_id").cost.sum() if len(compute) \
        else pd.Series(dtype=float)

    weight = allocation_weight(credits, weights, segment_weights, segments)
    campaign_amount = credits.campaign.map(spend_by_campaign).fillna(0.0).astype(float)
    credits["ad_spend"] = campaign_amount * _weighted_shares(credits, ["model", "campaign"],
                                                             weight)
    credits["compute_cost"] = credits.order_id.map(compute_by_order).fillna(0.0) \
        .astype(float) * credits.credit

    frames = []
    for dimension in DIMENSIONS:
        grouped = credits.groupby(["model", dimension], sort=True).agg(
            conversions=("credit", "sum"), revenue=("revenue", "sum"),
            ad_spend=("ad_spend", "sum"), compute_cost=("compute_cost", "sum")).reset_index()
        frames.append(grouped.rename(columns={dimension: "key"}).assign(dimension=dimension))
    roi = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    roi = with_ratios(roi, min_cost, gross_margin)[ROI_COLUMNS]

    # per model: spend of a campaign the model credited nothing to that day (e.g. its last
    # clicks went elsewhere), compute of orders the model did not credit, unlinked compute
    unallocated = []
    taken = credits[credits.credit > 0]
    for model in models:
        mine = taken[taken.model == model]
        for campaign, amount in spend_by_campaign.items():
            if amount and campaign not in set(mine.campaign):
                unallocated.append((model, "ad_spend", str(campaign), float(amount)))
        orphan = float(compute_by_order[~compute_by_order.index.isin(mine.order_id)].sum()) \
            if len(compute_by_order) else 0.0
        if orphan or outside:
            unallocated.append((model, "compute", "", orphan + outside))
        for key, amount in sorted(unlinked.items()):
            if amount:
                unallocated.append((model, "compute", str(key), float(amount)))
    orders = credits.groupby(["model", "order_id"], sort=True, as_index=False).agg(
        revenue=("revenue", "sum"), ad_spend=("ad_spend", "sum"),
        compute_cost=("compute_cost", "sum"))[list(ORDER_COLUMNS)]
    return DayRoi(roi.reset_index(drop=True),
                  pd.DataFrame(unallocated, columns=UNALLOCATED_COLUMNS), orders)


def with_ratios(frame: pd.DataFrame, min_cost: float = MIN_COST,
                gross_margin: float = GROSS_MARGIN) -> pd.DataFrame:
    """roi (revenue / cost), roas (revenue / ad spend) and margin_roi ((revenue x margin -
    cost) / cost) of rows with revenue, ad_spend and compute_cost; NaN where the cost (or
    the ad spend, for roas) is under `min_cost` (udfs/ratios.py)."""
    cost = frame.ad_spend + frame.compute_cost
    floor = max(min_cost, 1e-12)
    enough, spent = cost >= floor, frame.ad_spend >= floor
    safe_cost, safe_spend = cost.where(enough, 1.0), frame.ad_spend.where(spent, 1.0)
    return frame.assign(
        roi=np.where(enough, frame.revenue / safe_cost, np.nan),
        roas=np.where(spent, frame.revenue / safe_spend, np.nan),
        margin_roi=np.where(enough, (frame.revenue * gross_margin - cost) / safe_cost, np.nan))


def with_withdrawn(previous: object, rows: list[tuple[str, str, str, float]]
                   ) -> list[tuple[str, str, str, float]]:
    """Unallocated rows of a report, plus a zero row for each key of the previous report
    (a list of keys; True or None from before keys were kept) that is no longer there."""
    current = {row[:3] for row in rows}
    gone = [key for key in (previous if isinstance(previous, list) else [])
            if tuple(key) not in current]
    return rows + [(*key, 0.0) for key in gone]
