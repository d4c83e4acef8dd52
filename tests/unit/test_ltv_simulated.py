"""udfs/ltv on customers drawn from known BG/NBD and Gamma-Gamma parameters: the fit finds
them, its forecasts meet what the simulated customers then do, the bootstrap covers them."""

from __future__ import annotations

import numpy as np
import pytest

from udfs.ltv.bootstrap import PARAMETERS
from udfs.ltv.model import BgNbd, GammaGamma, bootstrap_draws, bootstrap_intervals, fit_model
from udfs.ltv.simulate import simulate_bgnbd, simulate_bgnbd_holdout
from udfs.ltv.summaries import CustomerSummaries

TRUE = {"r": 0.25, "alpha": 4.0, "a": 0.8, "b": 2.5, "p": 6.0, "q": 4.0, "v": 15.0}
PURCHASES = (TRUE["r"], TRUE["alpha"], TRUE["a"], TRUE["b"])
SPEND = (TRUE["p"], TRUE["q"], TRUE["v"])


def cohort_ages(customers: int, seed: int) -> np.ndarray:
    """T of customers acquired over 12 weeks, observed to the end of week 39 (in days)."""
    return 39.0 - np.random.default_rng(seed).integers(0, 84, customers) / 7.0


def test_the_simulator_buys_as_often_as_the_model_expects() -> None:
    customers = 40_000
    summaries = simulate_bgnbd(*PURCHASES, customers=customers, T=39.0, seed=11)
    expected = float(BgNbd(*PURCHASES).expected_purchases_new(39.0))
    spread = summaries.frequency.std() / np.sqrt(customers)
    assert abs(summaries.frequency.mean() - expected) < 4 * spread
    assert np.all(summaries.recency <= summaries.age)
    assert np.all((summaries.frequency > 0) | (summaries.recency == 0))
    assert np.all(summaries.monetary == 0)


def test_fit_on_simulated_customers_is_covered_by_the_bootstrap_intervals() -> None:
    summaries = simulate_bgnbd(*PURCHASES, customers=5000, T=cohort_ages(5000, 1), seed=1,
                               spend=SPEND).rounded(1 / 7)
    intervals = bootstrap_intervals(summaries, rounds=40, level=0.99, seed=1)
    assert set(intervals) == set(TRUE)
    model = fit_model(summaries, period_days=7.0, fitted_through_day=272.0)
    point = dict(zip(PARAMETERS, [*model.purchases.params(), *model.spend.params()],
                     strict=True))
    for name, (low, high) in intervals.items():
        assert low < point[name] < high, name
        assert low <= TRUE[name] <= high, (name, low, high)
        assert high - low < 1.5 * point[name], name  # informative, not everything


def test_bootstrap_is_reproducible_and_draws_the_data_size() -> None:
    summaries = simulate_bgnbd(*PURCHASES, customers=800, T=cohort_ages(800, 2), seed=2,
                               spend=SPEND).rounded(1 / 7)
    first = bootstrap_draws(summaries, rounds=5, seed=7)
    again = bootstrap_draws(summaries.collapsed(), rounds=5, seed=7)
    for name in TRUE:
        np.testing.assert_array_equal(first[name], again[name])
        assert np.unique(first[name]).size == 5  # every round a different resample
    with pytest.raises(ValueError, match="level"):
        bootstrap_intervals(summaries, rounds=2, level=1.0)


def agrees(expected: np.ndarray, actual: np.ndarray) -> bool:
    """Mean forecast within 4 standard errors of the simulated mean (plus 3 % for the fit)."""
    error = actual.std() / np.sqrt(actual.size)
    return bool(abs(expected.mean() - actual.mean()) < 4 * error + 0.03 * expected.mean())


def test_forecasts_meet_the_simulated_holdout() -> None:
    customers = 20_000
    summaries, holdout = simulate_bgnbd_holdout(*PURCHASES, customers=customers,
                                                T=cohort_ages(customers, 3), holdout=39.0,
                                                seed=3)
    rounded = summaries.rounded(1 / 7)
    fitted = BgNbd.fit(rounded.collapsed())
    expected = fitted.expected_purchases(39.0, rounded)
    assert agrees(expected, holdout)
    # with the true parameters the forecast is within the simulation's own noise
    exact = BgNbd(*PURCHASES).expected_purchases(39.0, summaries)
    assert abs(exact.mean() - holdout.mean()) < 4 * holdout.std() / np.sqrt(customers)
    # conditional on the calibration: by repeat purchases (FHL 2005, fig. 4) and by how
    # likely the model thinks a customer is still active
    alive = fitted.probability_alive(rounded)
    groups = [(summaries.frequency >= low) & (summaries.frequency <= high)
              for low, high in ((0, 0), (1, 1), (2, 3), (4, 6), (7, np.inf))]
    groups += [(alive > low) & (alive <= high)
               for low, high in ((0.0, 0.3), (0.3, 0.7), (0.7, 0.999))]
    for k, group in enumerate(groups):
        assert group.sum() > 500
        assert agrees(expected[group], holdout[group]), k
    assert holdout[alive < 0.3].mean() < 0.15 * holdout[(alive > 0.7) & (alive < 0.999)].mean()


def test_gamma_gamma_fit_recovers_spend_and_forecasts_future_order_values() -> None:
    customers = 30_000
    summaries = simulate_bgnbd(*PURCHASES, customers=customers, T=39.0, seed=4, spend=SPEND)
    spend = GammaGamma.fit(summaries)
    np.testing.assert_allclose(spend.params(), SPEND, rtol=0.15)
    # the population mean p v / (q - 1) is much better determined than p, q, v apart
    assert spend.population_mean() == pytest.approx(6.0 * 15.0 / 3.0, rel=0.03)
    empty = CustomerSummaries.of(np.zeros(2), np.zeros(2), np.ones(2))
    with pytest.raises(ValueError, match="x > 0"):
        GammaGamma.fit(empty)
