"""Experiments at the edges a user reaches with unusual input: flags with hundreds of small
variants, one experiment that cannot be computed beside healthy ones, arms whose buyers
mostly carry no cost, low conversion rates, revenue exactly proportional to cost, and
parameters that make no sense."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.experiment_frames import END, T0, orders, stored
from udfs.experiments.statistics import ExperimentsFailed, window_statistics


def arm(rng: np.random.Generator, flag: str, variant: str, users: int, rate: float,
        roi: float = 3.0, sigma: float = 0.6) -> tuple[list, list]:
    """`users` exposed users of one arm, each buying once with probability `rate`: cost
    ~ Gamma(2, 5), revenue = cost x roi x LogNormal(-sigma^2/2, sigma)."""
    exposures = [(flag, variant, f"{flag}-{variant}-{i}", T0) for i in range(users)]
    buyers = np.flatnonzero(rng.random(users) < rate)
    cost = rng.gamma(2.0, 5.0, len(buyers))
    revenue = cost * roi * rng.lognormal(-sigma ** 2 / 2, sigma, len(buyers))
    rows = [(flag, variant, f"{flag}-{variant}-{i}", f"o-{flag}-{variant}-{i}", T0 + 1,
             float(r), float(c), 0.0) for i, c, r in zip(buyers, cost, revenue, strict=True)]
    return exposures, rows


def experiment(rng: np.random.Generator, flag: str, variants: dict[str, int],
               rate: float = 0.3, **options: float) -> tuple[list, list]:
    exposures: list = []
    rows: list = []
    for variant, users in variants.items():
        e, r = arm(rng, flag, variant, users, rate, **options)
        exposures += e
        rows += r
    return exposures, rows


# --- item 1: many small variants, and one bad experiment beside good ones ----------------

def test_a_flag_with_more_than_a_hundred_variants_each_under_one_percent():
    """150 variants of 20 users each (0.67 % of the flag's users apiece): an equal split
    over all of them, no strays, no mismatch; the experiment beside it is unaffected."""
    rng = np.random.default_rng(1)
    exposures, rows = experiment(rng, "wide", {f"v{k:03d}": 20 for k in range(150)})
    more, more_rows = experiment(rng, "bid", {"control": 300, "treatment": 300})
    table = window_statistics(stored(exposures + more), orders(rows + more_rows), END)
    wide = table[table.flag_key == "wide"]
    assert len(wide) == 150
    assert wide.expected_share.to_numpy() == pytest.approx(np.full(150, 1 / 150))
    assert not wide.srm.any() and not wide.note.str.contains("stray").any()
    assert len(table[table.flag_key == "bid"]) == 2


def test_a_hundred_variants_of_about_one_percent_are_all_part_of_the_split():
    """100 variants drawn at random for 20,000 users: about half hold a little under 1 %
    of the users by chance; none of them is a stray."""
    rng = np.random.default_rng(2)
    variant = rng.integers(0, 100, 20_000)
    exposures = [("wide", f"v{v:03d}", f"u{i}", T0) for i, v in enumerate(variant)]
    table = window_statistics(stored(exposures), orders([("wide", "v000", "u0", "o", T0 + 1,
                                                           1.0, 1.0, 0.0)]), END)
    assert (table.users < 200).sum() > 20  # the case this is about
    assert not table.note.str.contains("stray").any()
    assert not table.srm.any()


def test_a_stray_beside_many_variants_is_still_named():
    rng = np.random.default_rng(3)
    exposures, rows = experiment(rng, "wide", {f"v{k:03d}": 20 for k in range(150)})
    exposures.append(("wide", "typo", "s1", T0))
    table = window_statistics(stored(exposures), orders(rows), END).set_index("variant")
    assert "stray variant (1 users" in table.loc["typo"].note
    assert not table.srm.any()


def test_one_experiment_that_fails_does_not_stop_the_others():
    rng = np.random.default_rng(4)
    exposures, rows = experiment(rng, "bid", {"control": 300, "treatment": 300})
    bad, bad_rows = experiment(rng, "broken", {"control": 300, "treatment": 300})
    others, other_rows = experiment(rng, "zeta", {"control": 300, "treatment": 300})
    frame = orders(rows + bad_rows + other_rows)
    frame.loc[frame.flag_key == "broken", "revenue"] = np.nan
    with pytest.raises(ExperimentsFailed) as failed:
        window_statistics(stored(exposures + bad + others), frame, END)
    assert list(failed.value.failures) == ["broken"]
    assert str(failed.value).startswith("experiment broken: ")
    assert "not a finite number" in str(failed.value) and "\n" not in str(failed.value)
    computed = failed.value.computed
    assert sorted(set(computed.flag_key)) == ["bid", "zeta"] and len(computed) == 4
    alone = window_statistics(stored(exposures), orders(rows), END)
    assert computed[computed.flag_key == "bid"].reset_index(drop=True).equals(alone)


# --- item 2: min_converters counts both sides of the ratio -------------------------------

def test_an_arm_whose_buyers_mostly_have_no_cost_gets_no_verdict():
    """40 buyers of whom one has a cost: the ROI rests on one user's cost."""
    rng = np.random.default_rng(5)
    exposures, rows = experiment(rng, "bid", {"control": 400})
    exposures += [("bid", "treatment", f"t{i}", T0) for i in range(400)]
    rows += [("bid", "treatment", f"t{i}", f"ot{i}", T0 + 1, float(rng.gamma(2.0, 15.0)),
              10.0 if i == 0 else 0.0, 0.0) for i in range(40)]
    table = window_statistics(stored(exposures), orders(rows), END).set_index("variant")
    treatment = table.loc["treatment"]
    assert treatment.converters == 40
    assert not treatment.significant and np.isnan(treatment.p_value)
    assert treatment.diff_method == "too_few_converters"
    assert np.isnan(treatment.roi_low) and treatment.roi_method == "too_few_converters"
    assert "too few converters with a cost (1 < 30)" in treatment.note


def test_a_control_whose_buyers_mostly_have_no_cost_gives_no_verdict():
    rng = np.random.default_rng(6)
    exposures, rows = experiment(rng, "bid", {"treatment": 400})
    exposures += [("bid", "control", f"c{i}", T0) for i in range(400)]
    rows += [("bid", "control", f"c{i}", f"oc{i}", T0 + 1, 30.0, 10.0 if i < 3 else 0.0,
              0.0) for i in range(50)]
    table = window_statistics(stored(exposures), orders(rows), END).set_index("variant")
    assert not table.loc["treatment"].significant
    assert table.loc["treatment"].diff_method == "too_few_converters"
    assert "control has too few" in table.loc["treatment"].note


# --- item 3: the heavy tail is judged among the buyers -----------------------------------

@pytest.mark.parametrize("rate", [0.01, 0.02, 0.05])
def test_light_tailed_revenue_at_a_low_conversion_rate_is_not_heavy_tailed(rate: float):
    rng = np.random.default_rng(7)
    exposures, rows = experiment(rng, "bid", {"control": 10_000, "treatment": 10_000},
                                 rate=rate)
    table = window_statistics(stored(exposures), orders(rows), END)
    assert not table.heavy_tail.any(), table.note.tolist()


def test_a_whale_among_the_buyers_is_heavy_tailed():
    rng = np.random.default_rng(8)
    exposures, rows = experiment(rng, "bid", {"control": 10_000}, rate=0.02)
    revenue = sum(r[5] for r in rows)
    rows[0] = (*rows[0][:5], 2 * revenue, *rows[0][6:])  # one buyer: two thirds of it
    table = window_statistics(stored(exposures), orders(rows), END)
    assert table.heavy_tail.all() and "heavy-tailed revenue" in table.note.iloc[0]


# --- item 4: a residual spread at rounding level is zero ---------------------------------

def test_revenue_exactly_proportional_to_cost_is_never_significant():
    rng = np.random.default_rng(9)
    significant = []
    for run in range(40):
        exposures, rows = experiment(rng, f"aa{run}", {"a": 300, "b": 300}, sigma=0.0)
        frame = orders(rows)
        frame["revenue"] = frame.ad_spend * 2.7  # exactly proportional, rounded per order
        table = window_statistics(stored(exposures), frame, END, bootstrap_replicates=200)
        significant.append(bool(table.significant.any()))
        treated = table.set_index("variant").loc["b"]
        assert abs(treated.roi_diff) < 1e-12
    assert not any(significant)


def test_a_real_difference_without_spread_stays_significant():
    rng = np.random.default_rng(10)
    exposures, rows = experiment(rng, "exact", {"a": 300, "b": 300}, sigma=0.0)
    frame = orders(rows)
    frame["revenue"] = frame.ad_spend * np.where(frame.variant == "a", 2.0, 3.0)
    table = window_statistics(stored(exposures), frame, END).set_index("variant")
    assert table.loc["b"].roi_diff == pytest.approx(1.0)
    assert table.loc["b"].significant


# --- item 5: parameters that make no sense are one-line errors ---------------------------

@pytest.mark.parametrize("replicates", [0, 1, 10])
def test_too_few_bootstrap_replicates_is_an_error(replicates: int):
    rng = np.random.default_rng(11)
    exposures, rows = experiment(rng, "bid", {"control": 100, "treatment": 100})
    with pytest.raises(ValueError, match=f"bootstrap_replicates must be at least .*"
                                         f"got {replicates}$"):
        window_statistics(stored(exposures), orders(rows), END,
                          bootstrap_replicates=replicates)


@pytest.mark.parametrize("weight", [-1.0, float("nan"), float("inf")])
def test_a_split_weight_that_is_not_a_non_negative_number_is_an_error(weight: float):
    rng = np.random.default_rng(12)
    exposures, rows = experiment(rng, "bid", {"control": 100, "treatment": 100})
    with pytest.raises(ValueError, match=r"expected_split\['bid'\]\['treatment'\]"):
        window_statistics(stored(exposures), orders(rows), END,
                          expected_split={"bid": {"control": 1.0, "treatment": weight}})


def test_a_split_of_zero_weights_is_an_error():
    rng = np.random.default_rng(13)
    exposures, rows = experiment(rng, "bid", {"control": 100, "treatment": 100})
    with pytest.raises(ValueError, match=r"expected_split\['bid'\]: the weights sum to 0"):
        window_statistics(stored(exposures), orders(rows), END,
                          expected_split={"bid": {"control": 0.0, "treatment": 0.0}})


def test_a_configured_uneven_split_still_checks():
    rng = np.random.default_rng(14)
    exposures, rows = experiment(rng, "bid", {"control": 200, "treatment": 100})
    table = window_statistics(stored(exposures), orders(rows), END,
                              expected_split={"bid": {"control": 2, "treatment": 1}})
    assert table.expected_share.tolist() == pytest.approx([2 / 3, 1 / 3])
    assert not table.srm.any()


def test_no_experiments_give_an_empty_table():
    empty = pd.DataFrame(columns=["flag_key", "variant", "user_id", "first_exposure_ms"])
    table = window_statistics(empty, orders([]), END)
    assert table.empty


# --- item 1 through the CLI: `seedance experiments` writes what it can -------------------

def cli_warehouse(tmp_path, exposures: list, rows: list) -> tuple[str, str]:
    """A SQLite warehouse holding the exposures and orders (no allocated cost), and a job
    config naming it."""
    import yaml

    from pipelines.store.warehouse import Warehouse
    from schemas import rows as layouts

    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    with Warehouse(url) as warehouse:
        warehouse.store(layouts.EXPERIMENT_EXPOSURE,
                        [(f, u, v, ms, "") for f, v, u, ms in exposures])
        warehouse.store(layouts.EXPERIMENT_CONVERSION,
                        [(f, o, v, u, ts, revenue, "USD", "purchase", T0)
                         for f, v, u, o, ts, revenue, _, _ in rows])
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({"warehouse": {"url": url}}))
    return url, str(config)


def stored_flags(url: str) -> dict[str, int]:
    from pipelines.store.warehouse import Warehouse

    with Warehouse(url) as warehouse:
        return dict(warehouse.query("SELECT flag_key, COUNT(*) FROM experiment_results "
                                    "GROUP BY flag_key"))


def test_the_cli_computes_a_flag_with_150_small_variants(tmp_path, capsys):
    from jobs.cli import main

    rng = np.random.default_rng(15)
    exposures, rows = experiment(rng, "wide", {f"v{k:03d}": 20 for k in range(150)})
    more, more_rows = experiment(rng, "bid", {"control": 300, "treatment": 300})
    url, config = cli_warehouse(tmp_path, exposures + more, rows + more_rows)
    assert main(["experiments", "--config", config, "--day", END]) == 0
    assert stored_flags(url) == {"bid": 2, "wide": 150}


def test_the_cli_names_the_experiment_it_could_not_compute_and_writes_the_others(
        tmp_path, capsys):
    from jobs.cli import main

    rng = np.random.default_rng(16)
    exposures, rows = experiment(rng, "bid", {"control": 300, "treatment": 300})
    bad, bad_rows = experiment(rng, "broken", {"control": 300, "treatment": 300})
    # the warehouse holds no NULL revenue, but an infinite one gets through
    bad_rows = [(*row[:5], float("inf"), *row[6:]) for row in bad_rows]
    url, config = cli_warehouse(tmp_path, exposures + bad, rows + bad_rows)
    assert main(["experiments", "--config", config, "--day", END]) == 2
    out, err = capsys.readouterr()
    assert "bid" in out and "2 rows written" in out
    assert err.startswith("seedance: error: experiment broken: ") and err.count("\n") == 1
    assert stored_flags(url) == {"bid": 2}
