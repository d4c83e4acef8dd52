"""Experiments that refuse to over-claim: one paying user never makes an arm significant,
A/A tests with a handful of converters stay quiet, non-finite money is an error, variants
of any type compare as strings, alpha is checked, heavy-tailed revenue is flagged."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.experiment_frames import END, T0, orders, stored
from udfs.experiments.statistics import MIN_CONVERTERS, strategy_table, window_statistics


def control_arm(rng: np.random.Generator, users: int = 200, buyers: int = 60
                ) -> tuple[list, list]:
    exposures = [("bid", "control", f"c{i}", T0) for i in range(users)]
    cost = rng.gamma(2.0, 5.0, buyers)
    rows = [("bid", "control", f"c{i}", f"o{i}", T0 + 1, float(c * 3 * rng.lognormal(0, .3)),
             float(c), 0.0) for i, c in enumerate(cost)]
    return exposures, rows


def test_one_paying_user_gets_no_interval_and_no_verdict():
    exposures, rows = control_arm(np.random.default_rng(3))
    exposures += [("bid", "lucky", f"l{i}", T0) for i in range(200)]
    rows += [("bid", "lucky", "l0", "x1", T0 + 1, 400.0, 10.0, 0.0)]
    table = window_statistics(stored(exposures), orders(rows), END).set_index("variant")
    lucky = table.loc["lucky"]
    assert lucky.roi == pytest.approx(40.0)  # the point estimate is still shown
    assert np.isnan(lucky.roi_low) and np.isnan(lucky.roi_high)
    assert np.isnan(lucky.p_value) and not lucky.significant
    assert (lucky.roi_method, lucky.diff_method) == ("too_few_converters",) * 2
    assert lucky.note.startswith(f"too few converters (1 < {MIN_CONVERTERS})")
    assert lucky.heavy_tail  # one user holds all of it
    assert "too few converters: no verdict" in strategy_table(table.reset_index())
    # the control keeps its interval
    assert table.loc["control"].roi_low < table.loc["control"].roi


def test_aa_tests_with_a_handful_of_converters_are_never_significant():
    rng = np.random.default_rng(29)
    significant = 0
    for experiment in range(200):  # 200 users per arm, 0.5 % of them buy
        exposures, rows = [], []
        for variant in ("a", "b"):
            for i in range(200):
                user = f"{variant}{i}"
                exposures.append(("aa", variant, user, T0))
                if rng.random() < 0.005:
                    cost = float(rng.gamma(2.0, 5.0))
                    rows.append(("aa", variant, user, f"o{experiment}-{user}", T0 + 1,
                                 cost * float(rng.lognormal(1, 1)), cost, 0.0))
        table = window_statistics(stored(exposures), orders(rows) if rows else
                                  orders([("aa", "a", "a0", "none", T0 - 1, 0.0, 0.0, 0.0)]),
                                  END, bootstrap_replicates=200)
        significant += int(table.significant.any())
    assert significant <= 10  # at most alpha of them; the normal approximation gave 28 %


@pytest.mark.parametrize("field", ["revenue", "ad_spend", "compute_cost"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_money_is_an_error_naming_the_order(field: str, value: float):
    exposures, rows = control_arm(np.random.default_rng(4))
    frame = orders(rows)
    frame.loc[3, field] = value
    with pytest.raises(ValueError, match=f"{field} that is not a finite number.*o3"):
        window_statistics(stored(exposures), frame, END)


def test_integer_variants_keep_their_control():
    rng = np.random.default_rng(5)
    exposures, rows = [], []
    for variant in (0, 1):
        for i in range(300):
            exposures.append(("flag", variant, f"{variant}-{i}", T0))
            if i < 90:
                cost = float(rng.gamma(2.0, 5.0))
                rows.append(("flag", variant, f"{variant}-{i}", f"o{variant}-{i}", T0 + 1,
                             cost * 3, cost, 0.0))
    frame = pd.DataFrame(exposures, columns=["flag_key", "variant", "user_id",
                                             "first_exposure_ms"])
    for control in (0, "0"):
        table = window_statistics(frame, orders(rows), END, control=control)
        assert table.variant.tolist() == ["0", "1"]
        assert table.is_control.tolist() == [True, False]
        assert table.p_value.notna().iloc[1]


@pytest.mark.parametrize("alpha", [0.0, 1.0, 1.5, -0.1])
def test_alpha_outside_zero_one_is_refused(alpha: float):
    exposures, rows = control_arm(np.random.default_rng(6))
    with pytest.raises(ValueError, match="alpha must be between 0 and 1"):
        window_statistics(stored(exposures), orders(rows), END, alpha=alpha)


def test_a_broad_base_of_buyers_is_not_heavy_tailed():
    exposures, rows = control_arm(np.random.default_rng(7))
    table = window_statistics(stored(exposures), orders(rows), END)
    assert not table.heavy_tail.any() and table.note.tolist() == [""]


def test_two_stray_exposures_do_not_make_a_healthy_split_a_mismatch():
    """203/202 users, and one user each in variants `7` and `aaa` (served by mistake): no
    SRM; the strays are named and left out of the check. A real 52/48 split still is."""
    exposures = [("bid", "control", f"c{i}", T0) for i in range(203)]
    exposures += [("bid", "treatment", f"t{i}", T0) for i in range(202)]
    exposures += [("bid", 7, "s1", T0), ("bid", "aaa", "s2", T0)]
    frame = pd.DataFrame(exposures, columns=["flag_key", "variant", "user_id",
                                             "first_exposure_ms"])
    table = window_statistics(frame, orders([("bid", "control", "c0", "o1", T0 + 1, 10.0,
                                               5.0, 0.0)]), END).set_index("variant")
    assert not table.srm.any() and table.srm_p_value.iloc[0] > 0.9
    assert "stray variant (1 users" in table.loc["7"].note
    assert "stray" not in table.loc["treatment"].note
    skewed = [("bid", "control", f"c{i}", T0) for i in range(10_400)]
    skewed += [("bid", "treatment", f"t{i}", T0) for i in range(9_600)]
    table = window_statistics(stored(skewed), orders([("bid", "control", "c0", "o1", T0 + 1,
                                                       10.0, 5.0, 0.0)]), END)
    assert table.srm.all()
