"""From lift tests to calibrated ROI, over frames a warehouse gives (engine-free):

- `holdout_measures`: a holdout flag's exposures and its exposed users' orders -> the
  channel's incremental conversions and revenue (holdouts.py), the test's days;
- `factors_frame`: per model and channel the latest test's factor (calibration.py) over
  what the model credited in the test's users and days;
- `calibrated_roi`: ROI per model and channel beside its calibrated figures, the
  "(baseline)" row holding the rest, so that each model's calibrated conversions and
  revenue add up to its uncalibrated ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from udfs.incrementality.calibration import BASELINE
from udfs.incrementality.holdouts import DEFAULT_ALPHA, Arm, Lift, lift
from udfs.periods import DAY_MS, day_of

METRICS = ("conversions", "revenue")
FACTOR_COLUMNS = ["model", "channel", "metric", "test_id", "credited", "incremental",
                  "factor", "low", "high", "end_day", "age_days"]


@dataclass(frozen=True)
class Measure:
    """One lift test's measure of a channel."""

    test_id: str
    channel: str
    source: str
    start_day: str
    end_day: str
    exposed_users: int | None
    held_out_users: int | None
    conversions: tuple[float, float, float]  # incremental, low, high
    revenue: tuple[float, float, float] | None


def holdout_measures(flag: str, channel: str, exposures: pd.DataFrame, orders: pd.DataFrame,
                     exposed: str, held_out: str, alpha: float = DEFAULT_ALPHA) -> Measure:
    """exposures: user_id, variant, first_exposure_ms (one row per user); orders: user_id,
    variant, conversion_ts_ms, revenue (the exposed users' orders after their exposure).
    A variant other than the two is an error naming it."""
    other = set(exposures.variant) - {exposed, held_out}
    if other:
        raise ValueError(f"{flag}: variant {sorted(other)[0]!r} is neither {exposed!r} nor "
                         f"{held_out!r} (incrementality.exposed_variant / held_out_variant)")
    per_user = orders.groupby(["variant", "user_id"]).agg(
        orders=("revenue", "size"), revenue=("revenue", "sum")).reset_index()
    measured = {}
    for variant in (exposed, held_out):
        users = int((exposures.variant == variant).sum())
        if users < 2:
            raise ValueError(f"{flag}: {users} users in {variant!r}: a holdout needs at least "
                             "2 in each arm (not measured)")
    for metric, column in (("conversions", "orders"), ("revenue", "revenue")):
        arms = []
        for variant in (exposed, held_out):
            users = int((exposures.variant == variant).sum())
            values = per_user.loc[per_user.variant == variant, column].to_numpy(float)
            arms.append(Arm(users, float(values.sum()), float((values * values).sum())))
        measured[metric] = _triple(lift(arms[0], arms[1], alpha))
    times = np.concatenate([exposures.first_exposure_ms.to_numpy(np.int64),
                            orders.conversion_ts_ms.to_numpy(np.int64)])
    return Measure(flag, channel, "holdout", day_of(int(times.min())),
                   day_of(int(times.max())), int((exposures.variant == exposed).sum()),
                   int((exposures.variant == held_out).sum()), measured["conversions"],
                   measured["revenue"])


def _triple(measured: Lift) -> tuple[float, float, float]:
    return measured.incremental, measured.low, measured.high


def factors_frame(measures: list[Measure], credited: pd.DataFrame, last_day: str
                  ) -> pd.DataFrame:
    """credited: test_id, model, conversions, revenue (what each model credited the test's
    channel in its users and days). Per model and channel, the latest test's factors
    (FACTOR_COLUMNS); a model that credited the channel nothing in the test gets none."""
    latest: dict[str, Measure] = {}
    for measure in sorted(measures, key=lambda m: (m.end_day, m.test_id)):
        latest[measure.channel] = measure
    rows = []
    for measure in latest.values():
        age = (_epoch_day(last_day) - _epoch_day(measure.end_day))
        for _, c in credited[credited.test_id == measure.test_id].iterrows():
            for metric in METRICS:
                figure = measure.conversions if metric == "conversions" else (
                    measure.revenue or measure.conversions)
                base = float(c[metric]) if measure.revenue or metric == "conversions" \
                    else float(c["conversions"])
                if not base > 0:
                    continue
                incremental, low, high = figure
                rows.append((c["model"], measure.channel, metric, measure.test_id, base,
                             incremental, max(incremental, 0.0) / base, max(low, 0.0) / base,
                             max(high, 0.0) / base, measure.end_day, age))
    return pd.DataFrame(rows, columns=FACTOR_COLUMNS)


def _epoch_day(day: str) -> int:
    return int(pd.Timestamp(day, tz="UTC").value // 1_000_000 // DAY_MS)


def calibrated_roi(roi: pd.DataFrame, factors: pd.DataFrame, min_cost: float) -> pd.DataFrame:
    """roi: model, channel, conversions, revenue, cost, ad_spend (over the report's window). Each
    channel's figures times its factors (untested: 1), a BASELINE row per model with the
    rest; ROI = revenue / cost where the cost is at least `min_cost`."""
    frame = roi.copy()
    for metric in METRICS:
        f = factors[factors.metric == metric].set_index(["model", "channel"])
        key = pd.MultiIndex.from_frame(frame[["model", "channel"]])
        for bound in ("factor", "low", "high"):  # untested: 1
            frame[f"{metric}_{bound}"] = f[bound].reindex(key).fillna(1.0).to_numpy()
        frame[f"calibrated_{metric}"] = frame[metric] * frame[f"{metric}_factor"]
        frame[f"calibrated_{metric}_low"] = frame[metric] * frame[f"{metric}_low"]
        frame[f"calibrated_{metric}_high"] = frame[metric] * frame[f"{metric}_high"]
    tested = factors.drop_duplicates(["model", "channel"]).set_index(["model", "channel"])
    key = pd.MultiIndex.from_frame(frame[["model", "channel"]])
    frame["test_id"] = tested["test_id"].reindex(key).fillna("").to_numpy()
    frame["age_days"] = tested["age_days"].reindex(key).to_numpy()
    baseline = []
    for model, part in frame.groupby("model", sort=True):
        row = {"model": model, "channel": BASELINE, "cost": 0.0, "ad_spend": 0.0,
               "test_id": "", "age_days": np.nan}
        for metric in METRICS:
            total = float(part[metric].sum())
            row[metric] = 0.0
            row[f"calibrated_{metric}"] = total - float(part[f"calibrated_{metric}"].sum())
            # the rest is widest where the channels' intervals are
            row[f"calibrated_{metric}_low"] = total - float(
                part[f"calibrated_{metric}_high"].sum())
            row[f"calibrated_{metric}_high"] = total - float(
                part[f"calibrated_{metric}_low"].sum())
        baseline.append(row)
    frame = pd.concat([frame, pd.DataFrame(baseline)], ignore_index=True)
    enough = frame.cost >= max(min_cost, 1e-12)
    cost = frame.cost.where(enough)
    frame["roi"] = frame.revenue / cost
    frame["calibrated_roi"] = frame.calibrated_revenue / cost
    frame["calibrated_roi_low"] = frame.calibrated_revenue_low / cost
    frame["calibrated_roi_high"] = frame.calibrated_revenue_high / cost
    spend = frame.ad_spend.where(frame.ad_spend > 0)
    frame["roas"] = frame.revenue / spend
    frame["calibrated_roas"] = frame.calibrated_revenue / spend
    return frame
