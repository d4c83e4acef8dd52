"""What keeps the experiment statistics (udfs/experiments/statistics.py) from over-claiming: an arm
with too few converting users gets no interval and no verdict, nor does a comparison with
it, revenue that a handful of buyers hold is flagged, and differences of rounding are 0."""

from __future__ import annotations

import numpy as np
import pandas as pd

# An arm with fewer converting users than this gets no interval and no verdict: with a
# handful of buyers the spread of revenue is not estimated, and one buyer can make any
# difference look significant (30 is the usual floor for a normal approximation). Both
# sides of the ratio need them: 40 buyers of whom one has a cost rest the ROI on one cost.
MIN_CONVERTERS = 30
# Revenue is flagged heavy-tailed when the top 1 % of an arm's buyers hold more than half
# of it: its interval then rests on very few people, whatever the method says. Among
# buyers, not exposed users: at 1 % conversion the top 1 % of users are all the buyers.
HEAVY_TAIL_TOP = 0.01
HEAVY_TAIL_SHARE = 0.5
# Relative size below which a difference of ROIs, or the residual spread of revenue about
# ROI x cost, is rounding: sums over millions of users keep about 1e-13 (relative) of it,
# and no experiment measures an ROI to ten digits.
ROUNDING = 1e-10
_KEY = ["flag_key", "variant"]


def at_rounding_level(difference: pd.Series | np.ndarray, *of: pd.Series | np.ndarray
                      ) -> np.ndarray:
    """Where `difference` (of the values `of`) is rounding rather than a difference."""
    scale = np.max(np.abs(np.vstack([np.asarray(v, float) for v in of])), axis=0)
    return np.asarray(np.abs(np.asarray(difference, float)) <= ROUNDING * scale)


def withhold_small_arms(table: pd.DataFrame, min_converters: int) -> pd.DataFrame:
    """No interval for an arm with too few converting users (or too few of them with a
    cost or with revenue: `paying`, `earning`), and no verdict for a comparison in which
    either arm has too few."""
    rests_on = table[["converters", "paying", "earning"]].min(axis=1)
    few = rests_on < min_converters
    control_few = table.flag_key.isin(table.flag_key[table.is_control & few])
    table.loc[few, ["roi_low", "roi_high"]] = np.nan
    table.loc[few & (table.roi_method != "none"), "roi_method"] = "too_few_converters"
    pair = (few | control_few) & table.roi_diff.notna()
    table.loc[pair, ["diff_low", "diff_high", "p_value"]] = np.nan
    table.loc[pair, "diff_method"] = "too_few_converters"
    table["significant"] = (table.p_value < table.confidence.rsub(1)).fillna(False)
    table["note"] = [_too_few(c, p, e, min_converters) if is_few else "" for c, p, e, is_few
                     in zip(table.converters, table.paying, table.earning, few, strict=True)]
    table.loc[pair & ~few, "note"] = f"control has too few converters (< {min_converters})"
    return table


def _too_few(converters: int, paying: int, earning: int, floor: int) -> str:
    """The note of an arm withheld: what it has too few of."""
    counts = {"converters": converters, "converters with a cost": paying,
              "converters with revenue": earning}
    return next(f"too few {what} ({count} < {floor})" for what, count in counts.items()
                if count < floor)


def heavy_tails(table: pd.DataFrame, buyers: pd.DataFrame) -> pd.DataFrame:
    """heavy_tail: the top 1 % of an arm's buyers (at least one) hold over half its
    revenue."""
    by_arm = {key: mine.revenue.to_numpy(float)
              for key, mine in buyers.groupby(_KEY, sort=False)}
    shares = []
    for flag_key, variant, revenue in zip(table.flag_key, table.variant, table.revenue,
                                          strict=True):
        values = np.sort(by_arm.get((flag_key, variant), np.zeros(0)))[::-1]
        top = max(1, int(np.ceil(HEAVY_TAIL_TOP * len(values))))
        shares.append(float(values[:top].sum() / revenue) if revenue > 0 else 0.0)
    share = pd.Series(shares, index=table.index)
    table["heavy_tail"] = share > HEAVY_TAIL_SHARE
    warning = [f"heavy-tailed revenue (top 1 % of buyers: {100 * s:.0f} %)" for s in share]
    table["note"] = [("; ".join(filter(None, (note, w))) if heavy else note)
                     for note, w, heavy in zip(table.note, warning, table.heavy_tail,
                                               strict=True)]
    return table
