"""How sure are the LTV parameters: a nonparametric bootstrap over customers.

Each round draws as many customers as the data holds, with replacement: one multinomial
draw of counts over the collapsed rows (a row standing for w customers is picked with
probability w / total), which is the classic resample at the cost of the distinct rows.
Both models are refitted on every round, warm-started from the point fit; the purchase model
on the distinct (x, t_x, T) rows, fewer than the distinct (x, t_x, T, m) rows. Intervals are
percentile intervals.
"""

from __future__ import annotations

import numpy as np

from udfs.ltv.models.bgnbd import BgNbd
from udfs.ltv.models.gamma import GammaGamma, spenders
from udfs.ltv.summaries import CustomerSummaries

PARAMETERS = ("r", "alpha", "a", "b", "p", "q", "v")


def bootstrap_draws(summaries: CustomerSummaries, rounds: int = 200,
                    seed: int = 0) -> dict[str, np.ndarray]:
    """Each parameter's value in each round (NaN for the spend parameters in a round that
    drew no repeat buyer)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    rows = summaries.collapsed()
    total = rows.customers()
    if total <= 0:
        raise ValueError("bootstrap_intervals needs at least one customer")
    purchase_rows, purchase_group = rows.by_purchases()
    purchases = BgNbd.fit(purchase_rows)
    has_spend = spenders(rows).customers() > 0
    spend = GammaGamma.fit(rows) if has_spend else None
    rng = np.random.default_rng(seed)
    size = max(1, round(total))
    draws = np.full((rounds, len(PARAMETERS)), np.nan)
    for k in range(rounds):
        counts = rng.multinomial(size, rows.weight / total).astype(np.float64)
        drawn = rows.with_weight(counts).take(counts > 0)
        purchase_counts = np.bincount(purchase_group, weights=counts,
                                      minlength=len(purchase_rows))
        drawn_purchases = purchase_rows.with_weight(purchase_counts).take(purchase_counts > 0)
        draws[k, :4] = BgNbd.fit(drawn_purchases, start=purchases).params()
        if spend is not None and spenders(drawn).customers() > 0:
            draws[k, 4:] = GammaGamma.fit(drawn, start=spend).params()
    return {name: draws[:, i] for i, name in enumerate(PARAMETERS)}


def bootstrap_intervals(summaries: CustomerSummaries, rounds: int = 200, level: float = 0.9,
                        seed: int = 0) -> dict[str, tuple[float, float]]:
    """Percentile intervals at `level` of r, alpha, a, b (BG/NBD) and p, q, v (Gamma-Gamma)
    over `rounds` bootstrap refits; (nan, nan) for spend when no round had repeat buyers."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    draws = bootstrap_draws(summaries, rounds, seed)
    tails = [(1.0 - level) / 2.0, (1.0 + level) / 2.0]
    intervals = {}
    for name, values in draws.items():
        values = values[np.isfinite(values)]
        if values.size == 0:
            intervals[name] = (float("nan"), float("nan"))
        else:
            low, high = np.quantile(values, tails)
            intervals[name] = (float(low), float(high))
    return intervals
