"""udfs/ltv: the published CDNOW fits reproduced, summaries from transactions, scoring and
the stored model (simulated data: test_ltv_simulated.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from udfs.ltv.model import (
    BgNbd,
    CustomerSummaries,
    GammaGamma,
    LtvModel,
    ParetoNbd,
    fit_model,
    lifetime_value,
    summaries_from_transactions,
)

CDNOW = Path(__file__).resolve().parents[1] / "fixtures" / "cdnow" / "CDNOW_sample.txt"
CDNOW_SHA256 = "6fae10155c0b0ba363c2c386e30f77990d22328220efd862a5edd1443420d94a"
EPOCH = np.datetime64("1997-01-01")
CALIBRATION_END = float((np.datetime64("1997-09-30") - EPOCH).astype(int))  # week 39's last day


def cdnow_transactions() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sample customer id, day since 1997-01-01, dollars) of every line of the sample."""
    columns = np.loadtxt(CDNOW, dtype=str)
    dates = np.array([f"{d[:4]}-{d[4:6]}-{d[6:]}" for d in columns[:, 2]], dtype="datetime64[D]")
    return (columns[:, 1].astype(np.int64), (dates - EPOCH).astype(np.float64),
            columns[:, 4].astype(np.float64))


@pytest.fixture(scope="module")
def cdnow() -> tuple[np.ndarray, CustomerSummaries]:
    return summaries_from_transactions(*cdnow_transactions(), end_day=CALIBRATION_END)


@pytest.fixture(scope="module")
def cdnow_model(cdnow: tuple[np.ndarray, CustomerSummaries]) -> LtvModel:
    return fit_model(cdnow[1], period_days=7.0, fitted_through_day=CALIBRATION_END)


def test_the_fixture_is_the_published_sample() -> None:
    assert hashlib.sha256(CDNOW.read_bytes()).hexdigest() == CDNOW_SHA256


def test_cdnow_calibration_summaries_match_the_papers(
        cdnow: tuple[np.ndarray, CustomerSummaries]) -> None:
    ids, summaries = cdnow
    assert len(summaries) == 2357 and summaries.customers() == 2357.0
    assert ids.tolist() == list(range(1, 2358))
    assert summaries.frequency.sum() == 2457  # repeat purchase days in weeks 1-39
    assert int((summaries.frequency > 0).sum()) == 946
    # customer 1 is the papers' worked example: x = 2, t_x = 30.43, T = 38.86
    first = summaries.take(np.array([0]))
    assert (first.frequency[0], round(first.recency[0], 2), round(first.age[0], 2)) == (
        2.0, 30.43, 38.86)
    assert first.monetary[0] == pytest.approx((29.73 + 14.96) / 2)  # repeats only
    assert summaries.age.min() == pytest.approx((CALIBRATION_END - 83) / 7)  # March 25


def test_bgnbd_reproduces_fader_hardie_lee_2005(
        cdnow: tuple[np.ndarray, CustomerSummaries], cdnow_model: LtvModel) -> None:
    fit = cdnow_model.purchases
    published = {"r": 0.243, "alpha": 4.414, "a": 0.793, "b": 2.426}
    assert {name: round(getattr(fit, name), 3) for name in published} == published
    assert fit.log_likelihood(cdnow[1]) == pytest.approx(-9582.4, abs=0.05)
    example = CustomerSummaries.of(np.array([2.0]), np.array([30.43]), np.array([38.86]))
    assert round(float(fit.expected_purchases(39.0, example)[0]), 3) == 1.226


def test_gamma_gamma_reproduces_fader_hardie_2013(cdnow_model: LtvModel) -> None:
    spend = cdnow_model.spend
    assert (round(spend.p, 2), round(spend.q, 2), round(spend.v, 2)) == (6.25, 3.74, 15.44)


def test_pareto_nbd_reproduces_the_published_cdnow_fit(
        cdnow: tuple[np.ndarray, CustomerSummaries], cdnow_model: LtvModel) -> None:
    summaries = cdnow[1]
    fit = ParetoNbd.fit(summaries.collapsed())
    published = {"r": 0.553, "alpha": 10.578, "s": 0.606, "beta": 11.669}
    assert {name: round(getattr(fit, name), 3) for name in published} == published
    assert fit.log_likelihood(summaries) == pytest.approx(-9595.0, abs=0.05)
    # the formulas agree across the two forms of A0 (alpha >= beta and alpha < beta)
    below, above = ParetoNbd(0.5, 10.0 - 1e-9, 0.6, 10.0), ParetoNbd(0.5, 10.0 + 1e-9, 0.6, 10.0)
    assert below.log_likelihood(summaries) == pytest.approx(above.log_likelihood(summaries),
                                                            abs=1e-6)
    np.testing.assert_allclose(below.probability_alive(summaries),
                               above.probability_alive(summaries), rtol=1e-7)
    # a new customer: E[Y(t) | 0, 0, 0] = E[X(t)]; with no repeat since T, alive < 1
    fresh = CustomerSummaries.of(np.zeros(2), np.zeros(2), np.array([0.0, 20.0]))
    assert fit.expected_purchases(39.0, fresh)[0] == pytest.approx(
        float(fit.expected_purchases_new(39.0)), rel=1e-9)
    assert fit.probability_alive(fresh)[0] == pytest.approx(1.0)
    assert fit.probability_alive(fresh)[1] < 1.0
    # its lifetime value plugs into the same spend model
    value = lifetime_value(fit, cdnow_model.spend, summaries, horizon=52.0)
    np.testing.assert_allclose(value, fit.expected_purchases(52.0, summaries)
                               * cdnow_model.spend.expected_order_value(summaries), rtol=1e-10)


def test_collapsed_summaries_give_the_same_fit_and_likelihood(
        cdnow: tuple[np.ndarray, CustomerSummaries]) -> None:
    summaries = cdnow[1]
    collapsed = summaries.collapsed()
    assert len(collapsed) < len(summaries) / 2
    assert collapsed.customers() == summaries.customers()
    full, merged = BgNbd.fit(summaries), BgNbd.fit(collapsed)
    np.testing.assert_allclose(merged.params(), full.params(), rtol=1e-5)
    assert full.log_likelihood(collapsed) == pytest.approx(full.log_likelihood(summaries),
                                                           rel=1e-12)
    np.testing.assert_allclose(GammaGamma.fit(collapsed).params(),
                               GammaGamma.fit(summaries).params(), rtol=1e-5)
    # weights count: a row of weight 2 is two identical customers
    doubled = CustomerSummaries(*(np.tile(c, 2) for c in (
        summaries.frequency, summaries.recency, summaries.age, summaries.monetary)),
        weight=np.ones(2 * len(summaries)))
    assert full.log_likelihood(summaries.with_weight(2 * summaries.weight)) == pytest.approx(
        full.log_likelihood(doubled), rel=1e-12)


def test_collapse_merges_identical_rows_and_sums_their_weights() -> None:
    rows = CustomerSummaries.of(np.array([1.0, 1.0, 0.0, 1.0, 1.0]),
                                np.array([2.0, 2.0, 0.0, 2.0, 2.0]), np.full(5, 5.0),
                                monetary=np.array([3.0, 4.0, 0.0, 3.0, 3.0]),
                                weight=np.array([1.0, 2.0, 1.0, 0.0, 0.5]))
    merged = rows.collapsed()
    assert sorted(zip(merged.frequency, merged.monetary, merged.weight, strict=True)) == [
        (0.0, 0.0, 1.0), (1.0, 3.0, 1.5), (1.0, 4.0, 2.0)]  # weight 0: dropped
    purchases, group = rows.by_purchases()
    np.testing.assert_array_equal(purchases.monetary, 0.0)
    assert sorted(zip(purchases.frequency, purchases.weight, strict=True)) == [
        (0.0, 1.0), (1.0, 3.5)]
    np.testing.assert_array_equal(purchases.frequency[group], rows.frequency)
    assert len(CustomerSummaries.of(np.zeros(0), np.zeros(0), np.zeros(0)).collapsed()) == 0


def test_alive_and_expected_purchases_of_a_customer_without_repeats(
        cdnow_model: LtvModel) -> None:
    fit = cdnow_model.purchases
    fresh = CustomerSummaries.of(np.zeros(3), np.zeros(3), np.array([0.0, 10.0, 38.86]))
    np.testing.assert_array_equal(fit.probability_alive(fresh), 1.0)
    expected = fit.expected_purchases(39.0, fresh)
    # a customer acquired just now expects E[X(t)]; one seen longer without a repeat, fewer
    assert expected[0] == pytest.approx(float(fit.expected_purchases_new(39.0)), rel=1e-12)
    assert expected[0] > expected[1] > expected[2] > 0
    # E[X(t)] grows with t, from 0
    new = fit.expected_purchases_new(np.array([0.0, 1.0, 39.0, 78.0]))
    assert new[0] == 0.0 and np.all(np.diff(new) > 0)


def test_lifetime_value_undiscounted_is_purchases_times_order_value(
        cdnow: tuple[np.ndarray, CustomerSummaries], cdnow_model: LtvModel) -> None:
    summaries, purchases, spend = cdnow[1], cdnow_model.purchases, cdnow_model.spend
    value = lifetime_value(purchases, spend, summaries, horizon=52.0, step=1.0)
    expected = purchases.expected_purchases(52.0, summaries) * spend.expected_order_value(
        summaries)
    np.testing.assert_allclose(value, expected, rtol=1e-10)
    np.testing.assert_allclose(cdnow_model.lifetime_value(summaries, 52.0, step=5.0), expected,
                               rtol=1e-10)  # 52 is no multiple of 5: a short last step
    assert not np.any(lifetime_value(purchases, spend, summaries, horizon=0.0))


def test_lifetime_value_discounts_each_step_from_its_end(
        cdnow: tuple[np.ndarray, CustomerSummaries], cdnow_model: LtvModel) -> None:
    summaries, purchases, spend = cdnow[1], cdnow_model.purchases, cdnow_model.spend
    plain = lifetime_value(purchases, spend, summaries, 52.0)
    one_step = lifetime_value(purchases, spend, summaries, 52.0, discount_rate=0.01, step=52.0)
    np.testing.assert_allclose(one_step, plain / 1.01 ** 52, rtol=1e-10)
    weekly = lifetime_value(purchases, spend, summaries, 52.0, discount_rate=0.01)
    assert np.all(weekly > one_step) and np.all(weekly < plain)
    by_hand = sum((purchases.expected_purchases(k, summaries)
                   - purchases.expected_purchases(k - 1, summaries)) / 1.01 ** k
                  for k in range(1, 53)) * spend.expected_order_value(summaries)
    np.testing.assert_allclose(weekly, by_hand, rtol=1e-9)


def test_expected_order_value_shrinks_towards_the_population_mean(
        cdnow_model: LtvModel) -> None:
    spend = cdnow_model.spend
    rows = CustomerSummaries.of(np.array([0.0, 1.0, 10.0]), np.array([0.0, 1.0, 20.0]),
                                np.full(3, 30.0), monetary=np.array([0.0, 100.0, 100.0]))
    mean = spend.p * spend.v / (spend.q - 1)
    values = spend.expected_order_value(rows)
    assert values[0] == pytest.approx(mean)
    assert mean < values[1] < values[2] < 100.0


def test_model_json_round_trip(cdnow_model: LtvModel) -> None:
    text = cdnow_model.to_json()
    assert LtvModel.from_json(text) == cdnow_model
    assert json.loads(text)["purchases"]["r"] == cdnow_model.purchases.r
    assert cdnow_model.customers == 2357.0 and cdnow_model.period_days == 7.0


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d["purchases"].pop("alpha"), "purchases.alpha"),
    (lambda d: d["spend"].__setitem__("q", -1.0), "spend.q"),
    (lambda d: d["spend"].__setitem__("v", "15"), "spend.v"),
    (lambda d: d.__setitem__("period_days", 0), "period_days"),
    (lambda d: d.__setitem__("customers", None), "customers"),
    (lambda d: d.__setitem__("purchases", [1, 2]), "purchases"),
    (lambda d: d.__setitem__("model", "pareto/nbd"), "model"),
    (lambda d: d.__setitem__("horizon", 52), "horizon"),
])
def test_bad_model_json_names_the_field(cdnow_model: LtvModel, change: object,
                                        field: str) -> None:
    data = json.loads(cdnow_model.to_json())
    change(data)  # type: ignore[operator]
    with pytest.raises(ValueError, match=f"'?{field}'?"):
        LtvModel.from_json(json.dumps(data))
    with pytest.raises(ValueError, match="does not parse"):
        LtvModel.from_json("{not json")


def test_summaries_from_transactions_edge_cases() -> None:
    customer = np.array(["b", "a", "a", "a", "b", "c", "a", "b"])
    day = np.array([10.0, 0.2, 0.9, 7.5, 12.0, 30.0, 14.0, 28.0])
    amount = np.array([5.0, 1.0, 2.0, 4.0, 6.0, 9.0, 8.0, 7.0])
    ids, summaries = summaries_from_transactions(customer, day, amount, end_day=14.0)
    assert ids.tolist() == ["a", "b"]  # c's first purchase is after the end: not a customer
    # a: days 0 (two lines: one purchase), 7, 14 (the end day counts); b: 10, 12 (28 is after)
    np.testing.assert_array_equal(summaries.frequency, [2.0, 1.0])
    np.testing.assert_allclose(summaries.recency, [2.0, 2 / 7])
    np.testing.assert_allclose(summaries.age, [2.0, 4 / 7])
    np.testing.assert_allclose(summaries.monetary, [(4.0 + 8.0) / 2, 6.0])
    np.testing.assert_array_equal(summaries.weight, 1.0)

    ids, summaries = summaries_from_transactions(
        np.array([7, 7, 7]), np.array([3.0, 3.5, 3.99]), np.array([1.0, 2.0, 3.0]), end_day=9.0,
        period_days=1.0)
    assert ids.tolist() == [7]
    assert (summaries.frequency[0], summaries.recency[0], summaries.age[0],
            summaries.monetary[0]) == (0.0, 0.0, 6.0, 0.0)  # one purchase day: x = 0

    ids, summaries = summaries_from_transactions(np.array([], dtype=np.int64), np.array([]),
                                                 np.array([]), end_day=1.0)
    assert ids.size == 0 and len(summaries) == 0


def test_summaries_reject_inconsistent_rows() -> None:
    with pytest.raises(ValueError, match="recency <= age"):
        BgNbd.fit(CustomerSummaries.of(np.array([1.0]), np.array([5.0]), np.array([4.0])))
    with pytest.raises(ValueError, match="recency"):
        CustomerSummaries.of(np.array([1.0, 2.0]), np.array([1.0]), np.array([4.0, 4.0]))
    with pytest.raises(ValueError, match="alpha"):
        BgNbd(r=1.0, alpha=0.0, a=1.0, b=1.0)
