"""The seeded Poisson bootstrap of the experiment statistics (udfs/experiments/statistics.py), used
where the delta method is undefined: replicates of a variant's ROI, their percentile
interval and the p-value of a difference."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

BOOTSTRAP_REPLICATES = 2000
# Fewer give percentile intervals whose ends move with the seed more than the data move
# them, and at alpha 0.05 under 40 could never reach p < alpha (p >= 2 / (replicates + 1)).
MIN_REPLICATES = 100
# weights matrix of one bootstrap chunk (replicates x converters) stays under this
_BOOTSTRAP_CELLS = 20_000_000


def check_replicates(replicates: int) -> None:
    if replicates < MIN_REPLICATES:
        raise ValueError(f"bootstrap_replicates must be at least {MIN_REPLICATES}, got "
                         f"{replicates}")


def replicates_of(buyers: pd.DataFrame, flag_key: str, variant: str, seed: int,
                  replicates: int) -> np.ndarray:
    """Poisson-bootstrap replicates of one variant's ROI (NaN where a replicate has no
    cost); seeded by (seed, flag, variant), so they are the same wherever they are drawn."""
    mine = buyers[(buyers.flag_key == flag_key) & (buyers.variant == variant)]
    revenue, cost = mine.revenue.to_numpy(float), mine.cost.to_numpy(float)
    rng = np.random.default_rng([seed, zlib.crc32(flag_key.encode()),
                                 zlib.crc32(variant.encode())])
    chunk = max(1, _BOOTSTRAP_CELLS // max(1, len(mine)))
    parts = []
    for start in range(0, replicates, chunk):  # a chunk of replicates at a time, not users
        weights = rng.poisson(1.0, size=(min(chunk, replicates - start), len(mine)))
        numerator, denominator = weights @ revenue, weights @ cost
        parts.append(np.divide(numerator, denominator, out=np.full(len(numerator), np.nan),
                               where=denominator > 0))
    return np.concatenate(parts)


def percentiles(draws: np.ndarray, alpha: float) -> tuple[float, float]:
    kept = draws[~np.isnan(draws)]
    if not len(kept):
        return np.nan, np.nan
    low, high = np.quantile(kept, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def bootstrap_p(differences: np.ndarray) -> float:
    """Two-sided bootstrap p of a difference of 0 (add-one, so never exactly 0)."""
    kept = differences[~np.isnan(differences)]
    below, above = int((kept <= 0).sum()), int((kept >= 0).sum())
    return min(1.0, 2 * (min(below, above) + 1) / (len(kept) + 1))
