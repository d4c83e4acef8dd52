"""udfs/ltv/models/identify.py: a fit at the optimiser's bounds, or on too few customers, is told
apart from an estimate."""

from __future__ import annotations

import math

from udfs.ltv.model import BgNbd, GammaGamma, fit_model
from udfs.ltv.models.fit import LOG_BOUND
from udfs.ltv.models.identify import MIN_CUSTOMERS, at_bound, fit_warnings
from udfs.ltv.simulate import simulate_bgnbd

CDNOW_FIT = (0.243, 4.414, 0.793, 2.426)


def test_values_at_or_next_to_the_bounds() -> None:
    huge, tiny = math.exp(LOG_BOUND), math.exp(-LOG_BOUND)
    assert at_bound("rab", [huge, tiny, 1.0]) == ["r", "a"]
    assert at_bound("rab", [huge / 5, tiny * 5, 1e9]) == ["r", "a"]


def test_enough_customers_drawn_from_the_cdnow_fit_fit_without_a_warning() -> None:
    summaries = simulate_bgnbd(*CDNOW_FIT, customers=2000, T=39.0, seed=1,
                               spend=(6.25, 3.74, 15.44))
    model = fit_model(summaries, 7.0, 0.0)
    assert fit_warnings(summaries, model.purchases, model.spend) == []


def test_few_customers_and_bounded_parameters_are_each_a_line() -> None:
    summaries = simulate_bgnbd(*CDNOW_FIT, customers=MIN_CUSTOMERS - 1, T=39.0, seed=1,
                               spend=(6.25, 3.74, 15.44))
    bounded = BgNbd(0.2, 4.0, math.exp(-LOG_BOUND), math.exp(LOG_BOUND))
    lines = fit_warnings(summaries, bounded, GammaGamma(6.0, 4.0, 15.0))
    assert len(lines) == 2
    assert lines[0].startswith("BG/NBD: a 1.39e-11, b 7.2e+10 at the optimiser's bound")
    assert lines[1].startswith(f"{MIN_CUSTOMERS - 1} customers, ")
    assert "too few to identify the models" in lines[1]
    assert fit_warnings(summaries, None, GammaGamma(6.0, 4.0, 15.0))[0].startswith(
        f"{MIN_CUSTOMERS - 1} customers")
