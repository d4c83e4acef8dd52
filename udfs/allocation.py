"""Cost allocation: a cost shared over conversions by attribution credit x stage weight.

Used for a campaign-day's ad spend over that day's conversions of the campaign, and for
compute cost over the conversions whose journeys carried the traces. Totals are preserved:
the shares of a cost always add up to it. When no conversion can take a cost (no credit
that day), it is returned as unallocated instead of being dropped.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from udfs.lifecycle import DEFAULT_WEIGHTS


def shares(cost: float, credits: np.ndarray, stage_weights: np.ndarray) -> np.ndarray:
    """Split `cost` in proportion to credit x weight (falls back to credit alone when every
    weighted credit is 0, e.g. all weights 0); zeros if nothing is credited."""
    weighted = np.asarray(credits, float) * np.asarray(stage_weights, float)
    total = weighted.sum()
    if total <= 0:
        weighted = np.asarray(credits, float)
        total = weighted.sum()
    if total <= 0:
        return np.zeros(len(weighted))
    return cost * (weighted / total)  # fraction first: tiny credits must not underflow


def allocate_spend(spend: pd.DataFrame, credits: pd.DataFrame,
                   weights: dict[str, float] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Spend rows (campaign, day, amount) over credit rows (model, order_id, campaign, day,
    credit, stage), per model. Returns (allocations, unallocated spend)."""
    stage_weight = weights or DEFAULT_WEIGHTS
    credits = credits.assign(weight=credits.stage.map(stage_weight).fillna(0.0))
    per_campaign_day = spend.groupby(["campaign", "day"], as_index=False).amount.sum()
    allocations, unallocated = [], []
    for model, rows in credits.groupby("model"):
        merged = rows.merge(per_campaign_day, on=["campaign", "day"], how="inner")
        for (campaign, day), group in merged.groupby(["campaign", "day"]):
            amount = float(group.amount.iloc[0])
            part = shares(amount, group.credit.to_numpy(), group.weight.to_numpy())
            if part.sum() == 0:
                unallocated.append((model, campaign, day, amount))
                continue
            allocations.append(group.assign(allocated=part)[
                ["model", "order_id", "campaign", "day", "stage", "credit", "allocated"]])
        taken = set(map(tuple, merged[["campaign", "day"]].drop_duplicates().to_numpy()))
        for campaign, day, amount in per_campaign_day.itertuples(index=False):
            if (campaign, day) not in taken:
                unallocated.append((model, campaign, day, float(amount)))
    columns = ["model", "order_id", "campaign", "day", "stage", "credit", "allocated"]
    return (pd.concat(allocations, ignore_index=True) if allocations
            else pd.DataFrame(columns=columns),
            pd.DataFrame(unallocated, columns=["model", "campaign", "day", "amount"]))
