"""What keeps the experiment statistics (udfs/experiments.py) from over-claiming: an arm
with too few converting users gets no interval and no verdict, nor does a comparison with
it, and revenue that a handful of users hold is flagged."""

from __future__ import annotations

import numpy as np
import pandas as pd

# An arm with fewer converting users than this gets no interval and no verdict: with a
# handful of buyers the spread of revenue is not estimated, and one buyer can make any
# difference look significant (30 is the usual floor for a normal approximation).
MIN_CONVERTERS = 30
# Revenue is flagged heavy-tailed when the top 1 % of an arm's users hold more than half
# of it: its interval then rests on very few people, whatever the method says.
HEAVY_TAIL_TOP = 0.01
HEAVY_TAIL_SHARE = 0.5
_KEY = ["flag_key", "variant"]


def withhold_small_arms(table: pd.DataFrame, min_converters: int) -> pd.DataFrame:
    """No interval for an arm with too few converting users, and no verdict for a
    comparison in which either arm has too few."""
    few = table.converters < min_converters
    control_few = table.flag_key.map(table[table.is_control].set_index("flag_key").converters
                                     < min_converters).fillna(False).astype(bool)
    table.loc[few, ["roi_low", "roi_high"]] = np.nan
    table.loc[few & (table.roi_method != "none"), "roi_method"] = "too_few_converters"
    pair = (few | control_few) & table.roi_diff.notna()
    table.loc[pair, ["diff_low", "diff_high", "p_value"]] = np.nan
    table.loc[pair, "diff_method"] = "too_few_converters"
    table["significant"] = (table.p_value < table.confidence.rsub(1)).fillna(False)
    table["note"] = np.where(few, [f"too few converters ({c} < {min_converters})"
                                   for c in table.converters], "")
    table.loc[pair & ~few, "note"] = f"control has too few converters (< {min_converters})"
    return table


def heavy_tails(table: pd.DataFrame, buyers: pd.DataFrame) -> pd.DataFrame:
    """heavy_tail: the top 1 % of an arm's users (at least one) hold over half its
    revenue."""
    top_share = {}
    for (flag_key, variant), mine in buyers.groupby(_KEY, sort=False):
        top_share[flag_key, variant] = mine.revenue.to_numpy(float)
    shares = []
    for flag_key, variant, users, revenue in zip(table.flag_key, table.variant, table.users,
                                                 table.revenue, strict=True):
        values = np.sort(top_share.get((flag_key, variant), np.zeros(0)))[::-1]
        top = max(1, int(np.ceil(HEAVY_TAIL_TOP * users)))
        shares.append(float(values[:top].sum() / revenue) if revenue > 0 else 0.0)
    share = pd.Series(shares, index=table.index)
    table["heavy_tail"] = share > HEAVY_TAIL_SHARE
    warning = [f"heavy-tailed revenue (top 1 % of users: {100 * s:.0f} %)" for s in share]
    table["note"] = [("; ".join(filter(None, (note, w))) if heavy else note)
                     for note, w, heavy in zip(table.note, warning, table.heavy_tail,
                                               strict=True)]
    return table
