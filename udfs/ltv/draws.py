"""The bootstrap's refitted models themselves: what an interval on a figure computed from
a model (a channel's predicted value) is taken over.

`udfs.ltv.model.bootstrap_draws` refits BG/NBD and Gamma-Gamma on customers resampled with
replacement (a multinomial draw over the collapsed rows) and gives each round's parameters;
here each round becomes an LtvModel. A round whose spend could not be refitted (it drew no
repeat buyer) or has no finite mean value (q <= 1) keeps the point fit's spend model.
"""

from __future__ import annotations

import numpy as np

from udfs.ltv.model import BgNbd, CustomerSummaries, GammaGamma, LtvModel, bootstrap_draws


def bootstrap_models(summaries: CustomerSummaries, rounds: int, seed: int = 0,
                     point: LtvModel | None = None, period_days: float = 7.0,
                     fitted_through_day: float = 0.0) -> list[LtvModel]:
    """`rounds` models refitted on resampled customers (seeded: the same list for the same
    input). `point`, when given, supplies the period, the fitting day and the spend model
    of rounds without one of their own."""
    if rounds < 1:
        return []
    draws = bootstrap_draws(summaries, rounds, seed)
    if point is not None:
        period_days, fitted_through_day = point.period_days, point.fitted_through_day
    customers = summaries.customers()
    models = []
    for k in range(rounds):
        purchases = BgNbd(*(float(draws[name][k]) for name in ("r", "alpha", "a", "b")))
        spend_params = [float(draws[name][k]) for name in ("p", "q", "v")]
        if all(np.isfinite(spend_params)) and spend_params[1] > 1.0:
            spend = GammaGamma(*spend_params)
        elif point is not None:
            spend = point.spend
        else:
            continue
        models.append(LtvModel(purchases, spend, float(period_days), customers,
                               float(fitted_through_day)))
    return models
