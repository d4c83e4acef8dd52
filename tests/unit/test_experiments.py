"""Experiment statistics (udfs/experiments/statistics.py): the first exposure wins, daily
aggregates, the window's ROI intervals and their coverage, the false-positive rate of A/A tests, the
power on a real lift, sample-ratio mismatch, and the degenerate cases.

The simulated experiments know their true ROI exactly: a converting user places
1 + Poisson(0.5) orders, each with cost ~ Gamma(2, 5) and revenue = cost x r x L with
L ~ LogNormal(-s^2/2, s) (E[L] = 1), so E[revenue] / E[cost] = r for every arm. Revenue
follows cost closely, so an interval that ignores the revenue-cost covariance is far too
wide and one that ignores the cost's variance is far too narrow: the coverage bands tell
them apart (checked below on the same data).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tests.experiment_frames import CONVERSION_COLUMNS, END, T0, orders, stored
from udfs.experiments.statistics import (
    DAILY_COLUMNS,
    SRM_ALPHA,
    STATS_COLUMNS,
    daily_aggregates,
    first_exposures,
    strategy_table,
    window_statistics,
)
from udfs.periods import DAY_MS

WINDOW_END_MS = T0 + 7 * DAY_MS
SIGMA = 0.6


class Simulation:
    """`experiments` experiments of `len(rois)` arms ("control", "t1", ...) with `users`
    users each, all in one frame; user ids are 0..N-1, arms in consecutive blocks."""

    def __init__(self, seed: int, rois: list[float], experiments: int, users: int,
                 conversion_rate: float = 0.3):
        rng = np.random.default_rng(seed)
        arms = len(rois)
        total = experiments * arms * users
        user = np.arange(total)
        self.arm = (user // users) % arms
        names = np.array([f"exp{k:04d}" for k in range(experiments)], dtype=object)
        variants = np.array(["control"] + [f"t{k}" for k in range(1, arms)], dtype=object)
        exposed = T0 + rng.integers(0, 7 * DAY_MS, total)
        orders = rng.binomial(1, conversion_rate, total) * (1 + rng.poisson(0.5, total))
        buyer = np.repeat(user, orders)
        cost = rng.gamma(2.0, 5.0, len(buyer))
        revenue = cost * np.asarray(rois)[self.arm[buyer]] \
            * rng.lognormal(-SIGMA ** 2 / 2, SIGMA, len(buyer))
        ad_share = rng.uniform(0.6, 0.9, len(buyer))
        # every order after its user's exposure and inside the window
        delay = rng.random(len(buyer)) * (WINDOW_END_MS - exposed[buyer])
        self.exposures = pd.DataFrame({
            "flag_key": names[user // (users * arms)], "variant": variants[self.arm],
            "user_id": user, "first_exposure_ms": exposed})
        self.conversions = pd.DataFrame({
            "flag_key": names[user // (users * arms)][buyer], "variant": variants[self.arm][buyer],
            "user_id": buyer, "order_id": np.arange(len(buyer)),
            "conversion_ts_ms": exposed[buyer] + delay.astype(np.int64), "revenue": revenue,
            "ad_spend": cost * ad_share, "compute_cost": cost * (1 - ad_share)})
        # per user and per arm block (rows in the order of window_statistics' output)
        self.revenue = np.bincount(buyer, revenue, total).reshape(-1, users)
        self.cost = np.bincount(buyer, cost, total).reshape(-1, users)
        self.true_roi = np.tile(rois, experiments)

    def statistics(self, **options: object) -> pd.DataFrame:
        return window_statistics(self.exposures, self.conversions, END, **options)


def covered(low: pd.Series | np.ndarray, high: pd.Series | np.ndarray,
            truth: pd.Series | np.ndarray) -> float:
    return float(np.mean((np.asarray(low) <= truth) & (truth <= np.asarray(high))))


def exposure(user: str, flag: str, variant: str, ts: int) -> dict:
    return {"user_id": user, "flag_key": flag, "variant": variant, "ts_ms": ts}


# --- who is in which variant -------------------------------------------------------------

def test_first_exposure_wins_and_repeats_count_once():
    events = pd.DataFrame([
        exposure("u1", "bid", "dynamic", T0 + 50),
        exposure("u1", "bid", "fixed", T0 + 10),   # u1's first: fixed, whatever comes later
        exposure("u1", "bid", "fixed", T0 + 10),   # a repeat
        exposure("u1", "bid", "dynamic", T0 + 5 * DAY_MS),
        exposure("u2", "bid", "dynamic", T0 + 20),
        exposure("u2", "bid", "dynamic", T0 + 30),
        exposure("u1", "copy", "long", T0 + 99),   # another flag: its own first exposure
        exposure("u3", "bid", "fixed", T0 + 7),    # a tie in one millisecond: sorted name
        exposure("u3", "bid", "dynamic", T0 + 7),
    ])
    expected = [("bid", "u1", "fixed", T0 + 10), ("bid", "u2", "dynamic", T0 + 20),
                ("bid", "u3", "dynamic", T0 + 7), ("copy", "u1", "long", T0 + 99)]
    for order in range(3):  # the input's order does not matter
        shuffled = events.sample(frac=1.0, random_state=order)
        result = first_exposures(shuffled).sort_values(["flag_key", "user_id"])
        assert list(result.columns) == ["flag_key", "variant", "user_id", "first_exposure_ms"]
        assert list(zip(result.flag_key, result.user_id, result.variant,
                        result.first_exposure_ms, strict=True)) == expected

    # through the statistics: u1 counts once, in fixed, and their order counts for fixed
    conversions = orders([("bid", "dynamic", "u1", "o1", T0 + 6 * DAY_MS, 30.0, 8.0, 2.0)])
    exposures = first_exposures(events)
    table = window_statistics(pd.concat([exposures, exposures]), conversions, END)
    bid = table[table.flag_key == "bid"].set_index("variant")
    assert bid.users.to_dict() == {"dynamic": 2, "fixed": 1}
    fixed = bid.loc["fixed"]
    assert (fixed.conversions, fixed.revenue, fixed.roi) == (1, 30.0, 3.0)


def test_daily_aggregates_by_exposure_day_and_order_day():
    exposures = stored([("bid", "a", "u1", T0 + 1), ("bid", "a", "u1", T0 + 5),
                        ("bid", "a", "u2", T0 + DAY_MS + 1), ("bid", "b", "u3", T0 + 2)])
    conversions = orders([
        ("bid", "a", "u1", "o1", T0 + 10, 40.0, 8.0, 2.0),
        ("bid", "a", "u1", "o1", T0 + 10, 40.0, 8.0, 2.0),          # a replayed row
        ("bid", "a", "u2", "o2", T0 + DAY_MS + 9, 10.0, 4.0, 1.0),
        ("bid", "a", "u2", "o3", T0 + DAY_MS - 9, 99.0, 1.0, 1.0),  # before u2's exposure
        ("bid", "b", "u3", "o4", T0 + DAY_MS + 3, 5.0, 0.0, 0.0),   # no cost: no ROI
        ("bid", "a", "u9", "o5", T0 + 3, 50.0, 5.0, 5.0),           # u9 never exposed
    ])
    daily = daily_aggregates(exposures, conversions)
    assert list(daily.columns) == DAILY_COLUMNS
    rows = [tuple(row) for row in daily.drop(columns="roi").itertuples(index=False)]
    assert rows == [("bid", "a", "2025-09-01", 1, 1, 40.0, 8.0, 2.0),
                    ("bid", "a", "2025-09-02", 1, 1, 10.0, 4.0, 1.0),
                    ("bid", "b", "2025-09-01", 1, 0, 0.0, 0.0, 0.0),
                    ("bid", "b", "2025-09-02", 0, 1, 5.0, 0.0, 0.0)]
    assert daily.roi.iloc[:2].tolist() == [4.0, 2.0] and daily.roi.iloc[2:].isna().all()


def test_the_window_counts_users_first_exposed_in_it_and_their_orders_in_it():
    exposures = stored([("bid", "a", "early", T0 - 1), ("bid", "a", "in", T0 + 5),
                        ("bid", "a", "late", WINDOW_END_MS)])
    conversions = orders([
        ("bid", "a", "early", "o1", T0 + 9, 100.0, 1.0, 0.0),  # exposed before the window
        ("bid", "a", "in", "o2", T0 + 9, 30.0, 10.0, 0.0),
        ("bid", "a", "in", "o3", WINDOW_END_MS, 100.0, 1.0, 0.0),  # after the window
        ("bid", "a", "late", "o4", WINDOW_END_MS + 1, 100.0, 1.0, 0.0),
    ])
    row = window_statistics(exposures, conversions, END).iloc[0]
    assert (row.window_start, row.window_end) == ("2025-09-01", END)
    assert (row.users, row.conversions, row.revenue, row.cost, row.roi) == (1, 1, 30.0, 10.0,
                                                                            3.0)
    shorter = window_statistics(exposures, conversions, "2025-09-02", window_days=2).iloc[0]
    assert shorter.users == 1 and shorter.window_start == "2025-09-01"
    with pytest.raises(ValueError):
        window_statistics(exposures, conversions, END, window_days=0)


# --- the statistics on simulated experiments ---------------------------------------------

def delta_sd(revenue: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """The delta-method sd of sum(Y) / sum(X) per row of per-user arrays, written out as
    (s_Y^2 - 2 R s_XY + R^2 s_X^2) / (n Xbar^2), independently of the module's residuals."""
    n = revenue.shape[1]
    ratio = revenue.sum(1) / cost.sum(1)
    covariance = [np.cov(y, x) for y, x in zip(revenue, cost, strict=True)]
    s_yy, s_xy, s_xx = (np.array([c[i, j] for c in covariance]) for i, j in
                        [(0, 0), (0, 1), (1, 1)])
    return np.sqrt((s_yy - 2 * ratio * s_xy + ratio ** 2 * s_xx) / (n * cost.mean(1) ** 2))


def test_intervals_cover_the_true_roi_and_difference():
    sim = Simulation(seed=11, rois=[3.0, 3.3], experiments=400, users=2000)
    table = sim.statistics()
    assert list(table.columns) == STATS_COLUMNS and (table.roi_method == "delta").all()
    z = stats.norm.ppf(0.975)

    # the interval is the delta method's with Student's t (n - 1 degrees of freedom), to
    # rounding
    sd = delta_sd(sim.revenue, sim.cost)
    t = stats.t.ppf(0.975, sim.revenue.shape[1] - 1)
    np.testing.assert_allclose((table.roi_high - table.roi_low) / (2 * t), sd, rtol=1e-9)

    roi_coverage = covered(table.roi_low, table.roi_high, sim.true_roi)
    treated = table[~table.is_control]
    diff_coverage = covered(treated.diff_low, treated.diff_high, 0.3)
    print(f"coverage: ROI {roi_coverage:.3f} (800 intervals), difference "
          f"{diff_coverage:.3f} (400)")
    assert 0.92 <= roi_coverage <= 0.98
    assert 0.92 <= diff_coverage <= 0.98

    # the band has teeth: on the same data, the sd of a mean revenue over a fixed cost
    # (s_Y / (sqrt(n) Xbar), the covariance with the cost ignored) over-covers, and so
    # does the plain sum of the two arms' variances' square roots for the difference
    naive = sim.revenue.std(1, ddof=1) / np.sqrt(sim.revenue.shape[1]) / sim.cost.mean(1)
    naive_coverage = covered(table.roi - z * naive, table.roi + z * naive, sim.true_roi)
    arm_sd = ((table.roi_high - table.roi_low) / (2 * t)).to_numpy().reshape(-1, 2)
    summed_sd = arm_sd.sum(1)  # sd_t + sd_c instead of sqrt(sd_t^2 + sd_c^2)
    summed_coverage = covered(treated.roi_diff - z * summed_sd,
                              treated.roi_diff + z * summed_sd, 0.3)
    print(f"wrong variances: ROI {naive_coverage:.3f}, difference {summed_coverage:.3f}")
    assert naive_coverage > 0.98 and summed_coverage > 0.98


def test_aa_tests_are_significant_about_alpha_of_the_time():
    sim = Simulation(seed=12, rois=[3.0, 3.0], experiments=400, users=2000)
    treated = sim.statistics()[lambda t: ~t.is_control]
    rate = float(treated.significant.mean())
    print(f"A/A false-positive rate: {rate:.3f} (400 tests, alpha 0.05)")
    assert 0.02 <= rate <= 0.08
    # and the p-values are uniform, not merely rarely small
    assert stats.kstest(treated.p_value, "uniform").pvalue > 0.001
    assert ((treated.p_value < 0.05) == treated.significant).all()
    assert ((treated.diff_low > 0) | (treated.diff_high < 0) == treated.significant).all()


def test_a_real_lift_is_detected():
    sim = Simulation(seed=13, rois=[3.0, 3.45], experiments=200, users=2000)
    treated = sim.statistics()[lambda t: ~t.is_control]
    power = float(treated.significant.mean())
    # the power the delta method's own sd predicts: Phi(|effect| / sd - z)
    sd = (treated.diff_high - treated.diff_low) / (2 * stats.norm.ppf(0.975))
    predicted = float(stats.norm.cdf(0.45 / sd - stats.norm.ppf(0.975)).mean())
    print(f"power: {power:.3f} measured, {predicted:.3f} predicted (200 tests, +15 % ROI)")
    assert power >= 0.9 and abs(power - predicted) < 0.06
    assert (treated.roi_diff > 0).mean() > 0.99


# --- sample-ratio mismatch ---------------------------------------------------------------

def split(counts: dict[str, int], flag: str = "bid") -> pd.DataFrame:
    rows = [(flag, variant, f"{variant}{i}", T0 + i) for variant, n in counts.items()
            for i in range(n)]
    return stored(rows)


NO_ORDERS = orders([])


def test_a_52_48_split_is_a_mismatch_and_an_even_one_is_not():
    lopsided = window_statistics(split({"control": 10_400, "t1": 9_600}), NO_ORDERS, END)
    assert lopsided.srm.all() and lopsided.srm_p_value.iloc[0] < 1e-6
    assert "MISMATCH" in strategy_table(lopsided)
    even = window_statistics(split({"control": 10_000, "t1": 10_000}), NO_ORDERS, END)
    assert not even.srm.any() and even.srm_p_value.iloc[0] == pytest.approx(1.0)
    assert even.expected_share.tolist() == [0.5, 0.5]

    # configured weights: 2:1:1 served as configured is fine, against an equal split not
    served = split({"control": 5_000, "t1": 2_500, "t2": 2_500})
    weights = {"bid": {"control": 2.0, "t1": 1.0, "t2": 1.0}}
    assert not window_statistics(served, NO_ORDERS, END, expected_split=weights).srm.any()
    assert window_statistics(served, NO_ORDERS, END).srm.all()
    # a configured variant nobody got, and a variant served that was not configured
    missing = {"bid": {"control": 1.0, "t1": 1.0, "t2": 1.0}}
    only_two = split({"control": 3_000, "t1": 3_000})
    assert window_statistics(only_two, NO_ORDERS, END, expected_split=missing).srm.all()
    assert window_statistics(served, NO_ORDERS, END, expected_split={
        "bid": {"control": 1.0, "t1": 1.0}}).srm.all()


def test_balanced_experiments_raise_the_alarm_about_as_often_as_its_threshold():
    rng = np.random.default_rng(14)
    experiments, users = 200, 2000
    arm = rng.binomial(1, 0.5, experiments * users)  # a fair coin per user
    flags = np.repeat([f"exp{k:03d}" for k in range(experiments)], users)
    exposures = pd.DataFrame({"flag_key": flags, "variant": np.where(arm, "t1", "control"),
                              "user_id": np.arange(len(arm)), "first_exposure_ms": T0})
    table = window_statistics(exposures, NO_ORDERS, END)[lambda t: t.is_control]
    p = table.srm_p_value
    print(f"SRM: {int(table.srm.sum())} of 200 balanced experiments flagged "
          f"(threshold {SRM_ALPHA}); {float((p < 0.05).mean()):.3f} with p < 0.05")
    assert table.srm.sum() <= 2  # expected 0.2; 3 or more has probability ~0.001
    # the p-values are those of a correct test (uniform), so the rate tracks the threshold
    assert 0.02 <= (p < 0.05).mean() <= 0.09
    assert stats.kstest(p, "uniform").pvalue > 0.001


# --- degenerate experiments --------------------------------------------------------------

def test_a_variant_without_conversions_and_one_without_cost():
    exposures = stored([("bid", "control", f"c{i}", T0) for i in range(4)]
                       + [("bid", "dry", f"d{i}", T0) for i in range(4)]
                       + [("bid", "free", f"f{i}", T0) for i in range(4)])
    conversions = orders([("bid", "control", "c0", "o1", T0 + 1, 30.0, 5.0, 5.0),
                          ("bid", "control", "c1", "o2", T0 + 1, 10.0, 5.0, 0.0),
                          ("bid", "control", "c2", "o3", T0 + 1, 20.0, 2.0, 3.0),
                          ("bid", "free", "f0", "o4", T0 + 1, 50.0, 0.0, 0.0)])
    table = window_statistics(exposures, conversions, END).set_index("variant")
    assert table.loc["control"].roi == pytest.approx(60 / 20)
    for name in ("dry", "free"):
        row = table.loc[name]
        assert np.isnan(row.roi) and row.roi_method == "none" and row.diff_method == "none"
        assert np.isnan(row.p_value) and not row.significant
    assert table.loc["dry"].marginal_cost == pytest.approx(-1.0)  # no cost at all
    assert (table.loc["free"].converters, table.loc["free"].revenue) == (1, 50.0)
    text = strategy_table(table.reset_index())
    assert "not comparable" in text and "dry" in text


def test_a_single_variant_and_the_choice_of_control():
    one = window_statistics(split({"only": 10}), NO_ORDERS, END)
    assert len(one) == 1 and one.is_control.iloc[0] and np.isnan(one.srm_p_value.iloc[0])
    assert not one.srm.iloc[0]

    rng = np.random.default_rng(15)
    exposures = split({"a": 300, "b": 300, "c": 300})
    buyers = exposures.sample(300, random_state=1)
    cost = rng.gamma(2.0, 5.0, len(buyers))
    conversions = buyers.assign(
        order_id=[f"o{i}" for i in range(len(buyers))], conversion_ts_ms=T0 + 1_000,
        revenue=cost * rng.lognormal(1.0, 0.5, len(buyers)), ad_spend=cost,
        compute_cost=0.0)[CONVERSION_COLUMNS]
    default = window_statistics(exposures, conversions, END)  # no "control": first sorted
    assert (default.control_variant == "a").all() and default.is_control.tolist() == [
        True, False, False]
    chosen = window_statistics(exposures, conversions, END, control="c")
    assert chosen.is_control.tolist() == [False, False, True]
    c_roi = chosen.roi.iloc[2]
    assert np.allclose(chosen.roi_diff.iloc[:2], chosen.roi.iloc[:2] - c_roi)
    absent = window_statistics(exposures, conversions, END, control="zzz")
    assert not absent.is_control.any() and absent.p_value.isna().all()
    assert "no control" in strategy_table(absent)


def test_the_bootstrap_takes_over_where_the_delta_method_is_undefined():
    exposures = stored([("bid", "control", f"c{i}", T0) for i in range(200)]
                       + [("bid", "lucky", f"l{i}", T0) for i in range(200)])
    rng = np.random.default_rng(16)
    cost = rng.gamma(2.0, 5.0, 60)
    rows = [("bid", "control", f"c{i}", f"o{i}", T0 + 1, float(c * 3 * rng.lognormal(0, .3)),
             float(c), 0.0) for i, c in enumerate(cost)]
    # "lucky": 31 paying users whose revenue is 4 x their cost exactly (no residual spread:
    # a zero-width delta interval), enough of them for a verdict; one has two orders
    lucky_cost = rng.gamma(2.0, 5.0, 31)
    rows += [("bid", "lucky", f"l{i}", f"z{i}", T0 + 1, float(4 * c), float(c), 0.0)
             for i, c in enumerate(lucky_cost)]
    rows += [("bid", "lucky", "l0", "x2", T0 + 2, 20.0, 5.0, 0.0)]
    first = window_statistics(exposures, orders(rows), END, seed=7)
    table = first.set_index("variant")
    lucky, control = table.loc["lucky"], table.loc["control"]
    assert (control.roi_method, control.diff_method) == ("delta", "none")
    assert (lucky.roi_method, lucky.diff_method) == ("bootstrap", "bootstrap")
    # every replicate has the same ratio: 4
    assert (lucky.roi, lucky.roi_low, lucky.roi_high) == (4.0, 4.0, 4.0)
    assert lucky.diff_low < lucky.roi_diff < lucky.diff_high and 0 <= lucky.p_value <= 1
    assert "(bootstrap)" in strategy_table(table.reset_index())

    again = window_statistics(exposures, orders(rows), END, seed=7)
    pd.testing.assert_frame_equal(first, again)  # the same seed, the same
    other = window_statistics(exposures, orders(rows), END, seed=8).set_index("variant")
    assert other.loc["lucky"].diff_low != lucky.diff_low

    # revenue exactly proportional to cost: no residual spread, a zero-width interval
    exact = [(f, v, u, o, t, 2.0 * a, a, c) for f, v, u, o, t, _, a, c in rows]
    row = window_statistics(exposures, orders(exact), END).set_index("variant").loc["control"]
    assert row.roi_method == "bootstrap" and row.roi_low == row.roi_high == pytest.approx(2.0)


def test_the_strategy_table_reads_like_the_brief():
    sim = Simulation(seed=17, rois=[3.0, 3.8], experiments=1, users=4000)
    table = sim.statistics()
    text = strategy_table(table)
    print(text)
    lines = text.splitlines()
    assert lines[0] == "window 2025-09-01 .. 2025-09-07"
    assert lines[1].split()[:5] == ["experiment", "variant", "ROI", "[95", "%"]
    control, treated = lines[2], lines[3]
    assert "control (control)" in control and "4,000" in control
    assert f"{table.roi.iloc[1]:.2f} [{table.roi_low.iloc[1]:.2f}, " in treated
    assert "significant (p=" in treated and " %" in treated
    assert strategy_table(window_statistics(split({"a": 1}), NO_ORDERS, "2025-08-01")) \
        == "no experiments in the window"
