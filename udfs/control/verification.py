"""Whether an executed control action moved its target: the verification the loop runs
after a rule's settle time, through the same metrics the rule fired on."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import pandas as pd

from udfs.control.rules import Rule, Verify, condition_rows
from udfs.periods import day_of


class Verification(NamedTuple):
    status: str  # "success", "failure", "pending" (settle time not over) or "no_data"
    baseline: float
    observed: float
    change_percent: float  # observed vs baseline, signed
    reason: str


def verify(rule: Rule, executed_ms: int, baseline: float, observed: float,
           now_ms: int) -> Verification:
    """Whether the target's metric moved as the rule's `verify` asks, `settle_s` after the
    action executed at `executed_ms` (baseline: the metric then; observed: after settling,
    NaN if there are no data). A rule without `verify` succeeds once settled."""
    change = (observed - baseline) / abs(baseline) * 100 if baseline else math.nan
    settled = now_ms >= executed_ms + rule.settle_s * 1000
    if not settled or math.isnan(observed):
        status = "no_data" if settled else "pending"
        return Verification(status, baseline, observed, change, f"{rule.name}: {status}")
    spec = rule.verify or Verify(rule.when.metric)
    wanted = spec.min_change_percent
    failures = [text for failed, text in [
        # a NaN change (baseline 0) never counts as moved
        (wanted is not None and not (change >= wanted if wanted >= 0 else change <= wanted),
         f"change {change:+.1f} % short of {wanted} %"),
        (spec.above is not None and not observed > spec.above,
         f"{spec.metric} {observed:.3g} not above {spec.above}"),
        (spec.below is not None and not observed < spec.below,
         f"{spec.metric} {observed:.3g} not below {spec.below}")] if failed]
    return Verification("failure" if failures else "success", baseline, observed, change,
                        "; ".join(failures) or f"{rule.name}: verified")


def observed_after(rule: Rule, target: str, daily: pd.DataFrame, pools: Mapping[str, float],
                   executed_ms: int) -> float:
    """The verified metric of `target` after an action: the pool's reading now, or over the
    data days after the day of execution (ROI of their sums, else a mean); NaN: no data."""
    metric = rule.verify.metric if rule.verify else rule.when.metric
    if rule.when.dimension == "pool":
        return float(pools.get(target, math.nan))
    rows = condition_rows(daily, rule.when)
    rows = rows[(rows.key == target) & (rows.day > pd.Timestamp(day_of(executed_ms)))]
    if metric == "roi" and {"revenue", "ad_spend", "compute_cost"} <= set(rows.columns):
        cost = float(rows.ad_spend.sum() + rows.compute_cost.sum())
        return float(rows.revenue.sum()) / cost if cost > 0 else math.nan
    return float(rows[metric].mean()) if len(rows) else math.nan
