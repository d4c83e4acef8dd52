"""Bootstrap intervals of channel credit: coverage against a known generating model, width
against data size, points against `attribute`, counts against expanded rows."""

from __future__ import annotations

from dataclasses import replace
from itertools import product

import numpy as np
import pandas as pd
import pytest

from schemas.records import UNATTRIBUTED
from udfs.attribution.intervals import credit_intervals, credit_intervals_of_rows
from udfs.attribution.models import MODELS, attribute, touch_weights
from udfs.journeys.table import JourneyTable, from_paths

# --- the generating model ----------------------------------------------------------------
# Journeys of 1-3 touches over channels A, B, C. Half are "loyal" (every touch on one
# channel), half draw each touch independently: touches of a journey are correlated, so
# resampling touches instead of journeys would get the spread wrong. A journey converts
# with a probability set by its last channel; a conversion's revenue is exponential.

CHANNELS = ("A", "B", "C")
TOUCH_P = np.array([0.5, 0.3, 0.2])
CONVERT_P = np.array([0.3, 0.12, 0.06])
LENGTH_P = {1: 0.4, 2: 0.35, 3: 0.25}
LOYAL_P = 0.5
MEAN_REVENUE = 50.0


def _enumerated_paths() -> tuple[list[tuple[str, ...]], np.ndarray, np.ndarray]:
    """Every possible path, its probability, and its conversion probability."""
    paths, probability, convert = [], [], []
    for length, p_length in LENGTH_P.items():
        for codes in product(range(3), repeat=length):
            independent = np.prod(TOUCH_P[list(codes)])
            loyal = TOUCH_P[codes[0]] if len(set(codes)) == 1 else 0.0
            paths.append(tuple(CHANNELS[c] for c in codes))
            probability.append(p_length * (LOYAL_P * loyal + (1 - LOYAL_P) * independent))
            convert.append(CONVERT_P[codes[-1]])
    return paths, np.array(probability), np.array(convert)


PATHS, PATH_P, PATH_CONVERT = _enumerated_paths()


def expected_credit(model: str) -> np.ndarray:
    """Exact expected conversion credit per journey of each channel under `model`: the
    model's credit of every possible path, weighted by its probability of converting."""
    table = from_paths(PATHS, PATH_P * PATH_CONVERT, np.zeros(len(PATHS)),
                       np.zeros(len(PATHS)))
    weights = touch_weights(table, model) * table.conversions[table.journey_of_touch]
    return np.bincount(table.touch_channel, weights=weights, minlength=3)


def summary(rng: np.random.Generator, journeys: float, fixed: bool = False) -> JourneyTable:
    """Path summary of a simulated dataset: `journeys` journeys on average (Poisson), or
    exactly (`fixed`), counted per path (most rows stand for many journeys)."""
    if fixed:
        counts = rng.multinomial(int(journeys), PATH_P)
        converted = rng.binomial(counts, PATH_CONVERT)
    else:
        converted = rng.poisson(journeys * PATH_P * PATH_CONVERT)
        counts = converted + rng.poisson(journeys * PATH_P * (1 - PATH_CONVERT))
    revenue = rng.gamma(np.maximum(converted, 1), MEAN_REVENUE) * (converted > 0)
    return from_paths(PATHS, converted, counts - converted, revenue)


def expanded(table: JourneyTable) -> JourneyTable:
    """One row per journey (integer counts), revenue shared evenly among conversions."""
    conv, non = table.conversions.astype(int), table.non_conversions.astype(int)
    rows = np.repeat(np.arange(table.size), conv + non)
    converted = np.concatenate([np.r_[np.ones(c), np.zeros(n)] for c, n in zip(conv, non,
                                                                                  strict=True)])
    per_conversion = np.divide(table.revenue, conv, out=np.zeros(table.size), where=conv > 0)
    paths = table.paths()
    return from_paths([paths[r] for r in rows], converted, 1 - converted,
                      per_conversion[rows] * converted)


def rows_of(frame: pd.DataFrame, model: str) -> pd.DataFrame:
    return frame[frame.model == model].set_index("channel").loc[list(CHANNELS)]


# --- coverage ---------------------------------------------------------------------------

def _coverage(datasets: int, journeys: float, fixed: bool, measure: str,
              truth: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2024)
    hits = {model: np.zeros(3) for model in truth}
    for seed in range(datasets):
        result = credit_intervals(summary(rng, journeys, fixed), tuple(truth), resamples=800,
                                  seed=seed)
        for model, expected in truth.items():
            rows = rows_of(result, model)
            hits[model] += (rows[f"{measure}_low"] <= expected) \
                & (expected <= rows[f"{measure}_high"])
    return {model: h / datasets for model, h in hits.items()}


def _assert_covers(coverage: dict[str, np.ndarray]) -> None:
    every = np.concatenate(list(coverage.values()))
    assert every.mean() == pytest.approx(0.95, abs=0.03), coverage
    assert np.all(np.abs(every - 0.95) < 0.06), coverage


def test_total_intervals_cover_the_expected_total():
    """Traffic is Poisson (the bootstrap's own scheme): the total's interval covers the
    expected total, journeys x expected credit per journey. Rows stand for many journeys:
    resampling rows while ignoring their counts would cover far more than 95 %."""
    journeys = 4000.0
    truth = {m: journeys * expected_credit(m) for m in ("last_click", "linear")}
    _assert_covers(_coverage(300, journeys, False, "conversions", truth))


def test_share_intervals_cover_the_true_share_for_a_fixed_number_of_journeys():
    truth = {m: expected_credit(m) / expected_credit(m).sum()
             for m in ("last_click", "linear", "position_based")}
    _assert_covers(_coverage(300, 3000, True, "share", truth))


def test_revenue_intervals_cover_on_journey_rows():
    """Journey rows carry each conversion's own revenue, so the revenue spread is whole."""
    rng = np.random.default_rng(7)
    truth = 1500.0 * expected_credit("linear") * MEAN_REVENUE
    hits = np.zeros(3)
    datasets = 200
    for seed in range(datasets):
        table = expanded(summary(rng, 1500.0))
        per_journey = rng.exponential(MEAN_REVENUE, table.size) * table.conversions
        table = from_paths(table.paths(), table.conversions, table.non_conversions,
                           per_journey)
        rows = rows_of(credit_intervals(table, ("linear",), resamples=500, seed=seed),
                       "linear")
        hits += (rows.revenue_low <= truth) & (truth <= rows.revenue_high)
    assert (hits / datasets).mean() == pytest.approx(0.95, abs=0.035), hits / datasets


# --- width, points, determinism, counts -------------------------------------------------

def test_intervals_narrow_like_one_over_root_n():
    rng = np.random.default_rng(3)
    widths = {}
    for journeys in (2000, 8000):
        result = pd.concat([credit_intervals(summary(rng, journeys, fixed=True),
                                             ("last_click",), resamples=1000, seed=s)
                            for s in range(5)])
        widths[journeys] = (result.share_high - result.share_low).groupby(
            result.channel).mean()
    ratio = widths[8000] / widths[2000]
    assert ratio.to_numpy() == pytest.approx(0.5, abs=0.07), ratio


def _mixed_table() -> JourneyTable:
    """Touch and conversion times (for time_decay), an empty converting journey."""
    rng = np.random.default_rng(11)
    table = expanded(summary(rng, 400.0))
    paths = table.paths() + [()]
    base = from_paths(paths, np.r_[table.conversions, 1.0], np.r_[table.non_conversions, 0],
                      np.r_[table.revenue, 30.0])
    touch_ts = rng.integers(0, 20, len(base.touch_channel)) * 86_400_000
    return JourneyTable(base.channels, base.campaigns, base.offsets, base.touch_channel,
                        base.touch_campaign, np.sort(touch_ts), base.conversions,
                        base.non_conversions, base.revenue,
                        np.full(base.size, 25 * 86_400_000), has_timestamps=True)


def test_points_equal_attribute_and_intervals_hold_them():
    table = _mixed_table()
    result = credit_intervals(table, MODELS, resamples=300, refit_resamples=60)
    expected, _ = attribute(table, MODELS)
    pd.testing.assert_frame_equal(result[list(expected.columns)], expected)
    assert UNATTRIBUTED in set(result.channel)
    for measure in ("conversions", "revenue", "share", "revenue_share"):
        assert (result[f"{measure}_low"] <= result[measure] + 1e-9).all(), measure
        assert (result[measure] <= result[f"{measure}_high"] + 1e-9).all(), measure
    assert (result.conversions_se > 0).all()
    assert result.groupby("model").share.sum().to_numpy() == pytest.approx(1.0)
    assert set(result[result.model.isin(["markov", "shapley"])].resamples) == {60}
    assert set(result[~result.model.isin(["markov", "shapley"])].resamples) == {300}


def test_campaigns_and_no_conversions():
    rng = np.random.default_rng(13)
    lengths = rng.integers(0, 4, 400)
    touches = int(lengths.sum())
    converted = (rng.random(400) < 0.3).astype(float)
    table = JourneyTable(CHANNELS, ("x", "y"), np.r_[0, np.cumsum(lengths)],
                         rng.integers(0, 3, touches), rng.integers(0, 2, touches),
                         np.zeros(touches, np.int64), converted, 1 - converted,
                         converted * 10, np.zeros(400, np.int64), has_timestamps=False)
    result = credit_intervals(table, ("linear", "markov"), resamples=100, by_campaign=True,
                              refit_resamples=20)
    expected, _ = attribute(table, ("linear", "markov"), by_campaign=True)
    pd.testing.assert_frame_equal(result[list(expected.columns)], expected)
    assert (result.conversions_low <= result.conversions).all()
    nothing = from_paths([["A"], ["B"]], [0, 0], [3, 4], [0, 0])
    assert credit_intervals(nothing, ("linear", "markov"), resamples=10).empty


def test_seeded():
    table = summary(np.random.default_rng(5), 500.0)
    models = ("linear", "markov")
    first = credit_intervals(table, models, resamples=200, refit_resamples=20, seed=9)
    pd.testing.assert_frame_equal(
        first, credit_intervals(table, models, resamples=200, refit_resamples=20, seed=9))
    other = credit_intervals(table, models, resamples=200, refit_resamples=20, seed=10)
    assert not np.allclose(first.conversions_low, other.conversions_low)


@pytest.mark.parametrize(("models", "resamples"),
                         [(("last_click", "linear", "position_based"), 3000),
                          (("markov", "shapley"), 300)])
def test_counted_rows_resample_like_the_journeys_they_stand_for(models, resamples):
    table = summary(np.random.default_rng(8), 3000.0)
    assert table.conversions.max() > 20  # rows stand for many journeys
    kwargs = {"resamples": resamples, "refit_resamples": resamples}
    counted = credit_intervals(table, models, **kwargs)
    journeys = credit_intervals(expanded(table), models, **kwargs, seed=1)
    for model in models:
        a, b = rows_of(counted, model), rows_of(journeys, model)
        assert a.conversions.to_numpy() == pytest.approx(b.conversions.to_numpy(), rel=1e-9)
        tolerance = 0.08 if resamples > 1000 else 0.2
        for measure in ("conversions_se", "share_se", "revenue_se"):
            assert (a[measure] / b[measure]).to_numpy() == pytest.approx(1.0, abs=tolerance)


def test_data_driven_intervals_carry_the_uncertainty_of_the_fit():
    """Every conversion follows A > B, so a model whose per-conversion credit is fixed has
    a fixed share; markov's share still moves with the non-converting journeys its refit
    learns from (C > B: how well B converts without A). Without a refit per resample it
    would not move either."""
    table = from_paths([["A", "B"], ["C", "B"], ["A"]], [30, 0, 0], [70, 40, 40],
                       [3000, 0, 0])
    result = credit_intervals(table, ("linear", "markov"), resamples=200)
    linear, markov = (result[result.model == m].set_index("channel")
                      for m in ("linear", "markov"))
    assert linear.share_se.to_numpy() == pytest.approx(0.0, abs=1e-12)
    assert (markov.share_se > 0.005).all()
    assert (markov.share_high - markov.share_low > 0.02).all()


def test_data_driven_spread_matches_the_spread_between_datasets():
    """Lighter check for the refitted models: over simulated datasets, the bootstrap's
    standard error of a share is about the standard deviation of the share itself."""
    rng = np.random.default_rng(21)
    shares, errors = [], []
    for seed in range(40):
        result = credit_intervals(summary(rng, 2000.0, fixed=True), ("markov", "shapley"),
                                  resamples=60, seed=seed)
        shares.append(result.set_index(["model", "channel"]).share)
        errors.append(result.set_index(["model", "channel"]).share_se)
    ratio = pd.concat(errors, axis=1).mean(axis=1) / pd.concat(shares, axis=1).std(axis=1)
    assert ratio.to_numpy() == pytest.approx(1.0, abs=0.3), ratio


# --- the warehouse side -------------------------------------------------------------------

def credit_rows(table: JourneyTable, models: tuple[str, ...], days: int) -> pd.DataFrame:
    """What the warehouse holds: one row per (model, order, touch) of converting journeys."""
    frames = []
    journey_day = np.arange(table.size) % days
    channels = np.asarray(table.channels, dtype=object)
    for model in models:
        weights = touch_weights(table, model)
        journey = table.journey_of_touch
        keep = table.conversions[journey] > 0
        frames.append(pd.DataFrame({
            "model": model, "order_id": journey[keep].astype(str),
            "channel": channels[table.touch_channel[keep]], "credit": weights[keep],
            "revenue": (weights * table.revenue[journey])[keep],
            "conversion_date": [f"2024-01-0{d + 1}" for d in journey_day[journey[keep]]]}))
    return pd.concat(frames, ignore_index=True)


def test_rows_bootstrap_orders_like_the_table_bootstraps_journeys():
    """Several rows of an order move together: resampling rows instead of orders would
    give other standard errors than resampling the journeys."""
    table = expanded(summary(np.random.default_rng(4), 3000.0))
    models = ("linear", "position_based")
    rows = credit_intervals_of_rows(credit_rows(table, models, days=1), resamples=3000)
    journeys = credit_intervals(table, models, resamples=3000, seed=2)
    for model in models:
        a = rows[rows.model == model].set_index("channel").loc[list(CHANNELS)]
        b = rows_of(journeys, model)
        assert a.credit.to_numpy() == pytest.approx(b.conversions.to_numpy(), rel=1e-9)
        assert a.revenue.to_numpy() == pytest.approx(b.revenue.to_numpy(), rel=1e-9)
        for mine, theirs in (("credit_se", "conversions_se"), ("share_se", "share_se"),
                             ("revenue_se", "revenue_se")):
            assert (a[mine] / b[theirs]).to_numpy() == pytest.approx(1.0, abs=0.08)


def test_rows_per_period_and_seeded():
    table = expanded(summary(np.random.default_rng(6), 600.0))
    frame = credit_rows(table, ("last_click", "linear"), days=3)
    result = credit_intervals_of_rows(frame, resamples=400, seed=3)
    assert len(result) == 2 * 3 * 3
    sums = result.groupby(["model", "conversion_date"])
    assert sums.share.sum().to_numpy() == pytest.approx(1.0)
    day = frame[frame.conversion_date == "2024-01-02"]
    assert result.set_index(["model", "conversion_date", "channel"]).credit.loc[
        ("linear", "2024-01-02")].to_numpy() == pytest.approx(
        day[day.model == "linear"].groupby("channel").credit.sum().to_numpy())
    assert (result.credit_low <= result.credit).all()
    assert (result.credit <= result.credit_high).all()
    pd.testing.assert_frame_equal(result, credit_intervals_of_rows(frame, resamples=400,
                                                                   seed=3))
    with pytest.raises(ValueError, match="level"):
        credit_intervals_of_rows(frame, level=1.5)


# --- input that has no interval ---------------------------------------------------------

@pytest.mark.parametrize(("field", "value"), [("revenue", np.nan), ("revenue", np.inf),
                                              ("conversions", np.nan),
                                              ("conversions", -1.0),
                                              ("non_conversions", np.nan)])
def test_a_journey_count_or_revenue_that_is_not_a_number_is_an_error(field, value):
    """A NaN revenue used to show as a 0.0 share with an interval; a negative count
    crashed the Poisson draw."""
    table = summary(np.random.default_rng(7), 300.0)
    values = getattr(table, field).copy()
    values[2] = value
    bad = replace(table, **{field: values})
    with pytest.raises(ValueError, match=f"^{field} .*journey row 2"):
        credit_intervals(bad, ("linear", "shapley"), resamples=50)


@pytest.mark.parametrize("field", ["credit", "revenue"])
def test_a_credit_row_that_is_not_a_number_is_an_error(field):
    table = expanded(summary(np.random.default_rng(8), 300.0))
    frame = credit_rows(table, ("linear",), days=1)
    frame.loc[3, field] = np.nan
    with pytest.raises(ValueError, match=f"^{field} .*order {frame.order_id[3]}"):
        credit_intervals_of_rows(frame, resamples=50)


@pytest.mark.parametrize("resamples", [0, 1])
def test_fewer_than_two_resamples_is_an_error(resamples):
    table = summary(np.random.default_rng(9), 300.0)
    with pytest.raises(ValueError, match=f"resamples.*got {resamples}"):
        credit_intervals(table, ("linear",), resamples=resamples)
