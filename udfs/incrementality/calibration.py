"""Attribution calibrated by lift tests: each tested channel's credit scaled to what its
holdout says it caused, the rest of every conversion on a baseline row.

A model shares every conversion among the channels its buyer touched. Over a lift test's
period and population, the channel's credited conversions C (or revenue) and the
holdout's incremental conversions D (holdouts.py) give its factor

    f = max(D, 0) / C,  interval [max(low, 0) / C, max(high, 0) / C]

(C is counted, not estimated). Calibrated, each of the channel's credits is f times
itself; a channel without a test keeps its credit (factor 1); what the calibrated credits
of a conversion leave is the conversion's "(baseline)" row: what would have happened
without the tested channels. So a model's calibrated credits still add up to its
conversions and revenue, row by row. A channel that causes more than it is credited
(f > 1) takes from the baseline, which may go below 0: that says the model under-credits
it, and is shown, not hidden.

Each model gets its own factors (the same D over its own C). Between and after tests the
latest factor applies; its age is the days since its test ended.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from udfs.incrementality.holdouts import Lift

BASELINE = "(baseline)"


@dataclass(frozen=True)
class Factor:
    """A channel's calibration under one model: incremental / credited, with interval."""

    channel: str
    factor: float
    low: float
    high: float
    credited: float
    incremental: float


def factor(channel: str, measured: Lift, credited: float) -> Factor:
    """The factor of a channel credited `credited` (conversions or revenue) over the test
    whose holdout measured `measured`. Nothing credited: ValueError (no scale to apply)."""
    if not credited > 0:
        raise ValueError(f"{channel}: no credit over the test's period to calibrate "
                         f"({credited!r})")
    return Factor(channel, max(measured.incremental, 0.0) / credited,
                  max(measured.low, 0.0) / credited, max(measured.high, 0.0) / credited,
                  credited, measured.incremental)


@dataclass(frozen=True)
class Calibrated:
    """A channel's figure calibrated: `value` with its interval (the factor's, scaled)."""

    value: float
    low: float
    high: float


def calibrated_totals(credited: Mapping[str, float], factors: Mapping[str, Factor]
                      ) -> dict[str, Calibrated]:
    """Per channel its credited figure calibrated, and BASELINE: the rest of the total
    (the intervals of a tested channel are its factor's; an untested channel's are its
    value; the baseline's are what the tested channels' leave)."""
    out: dict[str, Calibrated] = {}
    for channel, value in credited.items():
        f = factors.get(channel)
        out[channel] = Calibrated(value, value, value) if f is None else \
            Calibrated(value * f.factor, value * f.low, value * f.high)
    total = float(sum(credited.values()))
    taken = sum(c.value for c in out.values())
    out[BASELINE] = Calibrated(total - taken, total - sum(c.high for c in out.values()),
                               total - sum(c.low for c in out.values()))
    return out


def calibrated_credits(credits: pd.DataFrame, factors: Mapping[str, Mapping[str, float]]
                       ) -> pd.DataFrame:
    """Credit rows (model, order_id, channel, credit, revenue and the order's other
    columns) calibrated: each row's credit and revenue times its model's factor for its
    channel (factors: model -> channel -> factor; a channel not there keeps its credit),
    and per conversion and model one BASELINE row (touch_index -1) with what they leave,
    so that each conversion's credits still add up to 1 and its revenue."""
    if credits.empty:
        return credits.assign(factor=pd.Series(dtype=float))
    lookup = {(model, channel): f for model, by_channel in factors.items()
              for channel, f in by_channel.items()}
    keys = list(zip(credits["model"], credits["channel"], strict=True))
    scale = np.array([lookup.get(key, 1.0) for key in keys], dtype=float)
    out = credits.assign(credit=credits["credit"] * scale,
                         revenue=credits["revenue"] * scale, factor=scale)
    group = ["model", "order_id"]
    sums = out.groupby(group, sort=False).agg(credit=("credit", "sum"),
                                              revenue=("revenue", "sum"))
    whole = credits.groupby(group, sort=False).agg(credit=("credit", "sum"),
                                                   revenue=("revenue", "sum"))
    first = credits.groupby(group, sort=False).head(1).set_index(group)
    baseline = first.assign(credit=whole["credit"] - sums["credit"],
                            revenue=whole["revenue"] - sums["revenue"], channel=BASELINE,
                            campaign="", touch_index=-1, factor=math.nan)
    if "touch_ts_ms" in baseline.columns:
        baseline["touch_ts_ms"] = baseline.get("conversion_ts_ms", 0)
    baseline = baseline.reset_index()[out.columns]
    return pd.concat([out, baseline], ignore_index=True)
