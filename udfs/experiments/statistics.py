"""Experiment statistics: ROI per feature-flag variant, its interval, the difference to the
control variant, its significance, the marginal cost and a sample-ratio-mismatch check.

Input (what the experiments job stores):
  exposures    flag_key, variant, user_id, first_exposure_ms (one row per flag and user;
               duplicates are reduced again with `first_exposures`' rule)
  conversions  flag_key, variant, user_id, order_id, conversion_ts_ms, revenue, ad_spend,
               compute_cost (the order's allocated ad spend and GPU compute)

ROI of a variant = sum of revenue / sum of (ad spend + compute) over its users: a ratio
of per-user means R = Ybar / Xbar, Y_i the revenue and X_i the cost of user i (0 for
users who did not convert: they are in n). Delta method (first-order Taylor of Y/X):

    Var(R) ~ s_e^2 / (n Xbar^2),   e_i = Y_i - R X_i,   s_e^2 = sum e_i^2 / (n - 1)

(the same as (s_Y^2 - 2 R s_XY + R^2 s_X^2) / (n Xbar^2), computed from residuals to
avoid cancellation). The difference of two independent arms D = R_t - R_c has
Var(D) = Var(R_t) + Var(R_c); z = D / sd(D), two-sided p = 2 (1 - Phi(|z|)). Intervals and
p-values use Student's t: n - 1 degrees of freedom for an arm, Welch-Satterthwaite's for the
difference (df = (V_t + V_c)^2 / (V_t^2 / (n_t - 1) + V_c^2 / (n_c - 1)), as GrowthBook's
gbstats does), so small arms get wider intervals than the normal approximation gives.
Intervals are at level 1 - alpha, so `significant` (p < alpha) and "the interval excludes
0" agree.

An arm with fewer than `min_converters` converting users (MIN_CONVERTERS by default), or
fewer converters with a cost or with revenue, gets no interval and no verdict ("too few
converters"), nor does a comparison with it: one buyer must never make a variant
significant. Revenue where the top 1 % of an arm's buyers hold over half of it is flagged
`heavy_tail`. Variants are compared as strings (a flag served as 0/1 keeps its control); a
non-finite revenue or cost is an error naming the order, and an experiment that fails
never stops the others (ExperimentsFailed). Rounding counts as nothing: a residual spread
or a difference of ROIs under ROUNDING of their size is 0.

Where the delta method is undefined -- fewer than 2 users, fewer than 2 users with any
cost (no estimate of the cost's spread) or no residual spread (a zero-width interval) --
the interval comes from a seeded Poisson bootstrap over users (every user weighted by a
Poisson(1) draw, the streaming form of resampling users); `roi_method` / `diff_method`
say which. Users without revenue and cost change neither sum, so only converters are
drawn: the bootstrap scales with converters, not with exposed users. With a cost of 0 the
ROI is undefined (NaN) and so is its interval (method "none").

Days are UTC. Everything is vectorised per experiment set; the only Python loops are per
experiment (the chi-square test) and per bootstrapped variant.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, timedelta
from functools import partial

import numpy as np
import pandas as pd
from scipy import stats

from udfs.experiments.bootstrap import (
    BOOTSTRAP_REPLICATES,
    bootstrap_p,
    check_replicates,
    percentiles,
    replicates_of,
)
from udfs.experiments.guards import (
    MIN_CONVERTERS,
    ROUNDING,
    at_rounding_level,
    heavy_tails,
    withhold_small_arms,
)
from udfs.experiments.srm import SRM_ALPHA, check_split, sample_ratio
from udfs.experiments.table import strategy_table
from udfs.periods import DAY_MS, parse_day

__all__ = ["MIN_CONVERTERS", "SRM_ALPHA", "STATS_COLUMNS", "ExperimentsFailed",
           "daily_aggregates", "first_exposures", "strategy_table", "window_statistics"]

EXPOSURE_COLUMNS = ["flag_key", "variant", "user_id", "first_exposure_ms"]
DAILY_COLUMNS = ["flag_key", "variant", "day", "users", "conversions", "revenue",
                 "ad_spend", "compute_cost", "roi"]
STATS_COLUMNS = [
    "flag_key", "variant", "is_control", "control_variant", "window_start", "window_end",
    "users", "converters", "conversions", "revenue", "ad_spend", "compute_cost", "cost",
    "cost_per_user", "roi", "roi_low", "roi_high", "roi_method", "confidence", "roi_diff",
    "diff_low", "diff_high", "diff_method", "p_value", "significant", "marginal_cost",
    "expected_share", "srm_p_value", "srm", "heavy_tail", "note"]
_KEY = ["flag_key", "variant"]


def first_exposures(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (flag_key, user_id) from exposure events (user_id, flag_key, variant,
    ts_ms; any order, repeats allowed): the variant of the user's earliest exposure and its
    time as first_exposure_ms. Ties (two variants in the same millisecond) go to the
    variant first in sorted order, so the result does not depend on the input's order."""
    # earliest first, ties by variant name; then the first row of each user is the one
    ordered = frame.sort_values(["ts_ms", "variant"], kind="stable")
    first = ordered.drop_duplicates(["flag_key", "user_id"], keep="first")
    return first.rename(columns={"ts_ms": "first_exposure_ms"})[EXPOSURE_COLUMNS] \
        .reset_index(drop=True)


def _assigned(exposures: pd.DataFrame) -> pd.DataFrame:
    """Stored exposures, reduced to one row per flag and user in case a replay repeated one."""
    events = exposures.rename(columns={"first_exposure_ms": "ts_ms"})
    events = events.assign(variant=events.variant.astype(str))
    return first_exposures(events).astype({"first_exposure_ms": "int64"})


def _attributed(assigned: pd.DataFrame, conversions: pd.DataFrame) -> pd.DataFrame:
    """Conversions of exposed users at or after their exposure, each order once per flag,
    under the variant the exposures assign (the exposures are the authority on variants)."""
    columns = ["flag_key", "user_id", "order_id", "conversion_ts_ms", "revenue", "ad_spend",
               "compute_cost"]
    orders = conversions[columns].drop_duplicates(["flag_key", "order_id"]) \
        .astype({"revenue": float, "ad_spend": float, "compute_cost": float,
                 "conversion_ts_ms": "int64"})
    for name in ("revenue", "ad_spend", "compute_cost"):
        bad = ~np.isfinite(orders[name].to_numpy(float))
        if bad.any():  # dropped from one side of the ratio it would bias the ROI silently
            named = ", ".join(orders.order_id[bad].astype(str).head(3))
            raise ValueError(f"{int(bad.sum())} orders have a {name} that is not a finite "
                             f"number (e.g. {named}): fix or drop them before the statistics")
    joined = orders.merge(assigned, on=["flag_key", "user_id"], how="inner")
    joined = joined[joined.conversion_ts_ms >= joined.first_exposure_ms]
    return joined.assign(cost=joined.ad_spend + joined.compute_cost)


def _day_names(day_numbers: pd.Series) -> pd.Series:
    """YYYY-MM-DD of UTC day numbers (days since the epoch), formatted once per distinct day."""
    distinct = np.unique(day_numbers.to_numpy("int64"))
    names = pd.to_datetime(distinct * DAY_MS, unit="ms").strftime("%Y-%m-%d")
    return day_numbers.map(dict(zip(distinct, names, strict=True)))


def _ratio(numerator: pd.Series, denominator: pd.Series) -> pd.Series:
    """numerator / denominator, NaN where the denominator is not positive."""
    return (numerator / denominator.where(denominator > 0)).astype(float)


def daily_aggregates(exposures: pd.DataFrame, conversions: pd.DataFrame) -> pd.DataFrame:
    """DAILY_COLUMNS per (flag_key, variant, UTC day): users first exposed that day, and the
    conversions, revenue, ad spend, compute and ROI (NaN at zero cost) of orders that day."""
    assigned = _assigned(exposures)
    orders = _attributed(assigned, conversions)
    users = assigned.assign(day=assigned.first_exposure_ms // DAY_MS) \
        .groupby([*_KEY, "day"]).size().rename("users")
    sums = orders.assign(day=orders.conversion_ts_ms // DAY_MS).groupby([*_KEY, "day"]).agg(
        conversions=("order_id", "size"), revenue=("revenue", "sum"),
        ad_spend=("ad_spend", "sum"), compute_cost=("compute_cost", "sum"))
    daily = pd.concat([users, sums], axis=1).fillna(0.0).reset_index()
    daily = daily.astype({"users": "int64", "conversions": "int64"})
    daily["roi"] = _ratio(daily.revenue, daily.ad_spend + daily.compute_cost)
    daily["day"] = _day_names(daily.day)
    return daily.sort_values([*_KEY, "day"]).reset_index(drop=True)[DAILY_COLUMNS]


def _window_ms(end_day: str, window_days: int) -> tuple[date, int, int]:
    """First day and [start, end) in ms of the `window_days` UTC days ending with end_day."""
    if window_days < 1:
        raise ValueError(f"window_days must be at least 1, not {window_days}")
    last = parse_day(end_day)
    first = last - timedelta(days=window_days - 1)
    epoch_day = (first - date(1970, 1, 1)).days
    return first, epoch_day * DAY_MS, (epoch_day + window_days) * DAY_MS


def _per_user(orders: pd.DataFrame) -> pd.DataFrame:
    """Revenue Y_i, cost X_i and conversions of every user with a conversion."""
    return orders.groupby([*_KEY, "user_id"], sort=False).agg(
        revenue=("revenue", "sum"), cost=("cost", "sum"), conversions=("order_id", "size")) \
        .reset_index()


def _variant_sums(users: pd.Series, orders: pd.DataFrame, buyers: pd.DataFrame
                  ) -> pd.DataFrame:
    """Per variant: users, converters, conversions, the money, ROI and its delta-method sd."""
    money = orders.groupby(_KEY).agg(conversions=("order_id", "size"),
                                     revenue=("revenue", "sum"), ad_spend=("ad_spend", "sum"),
                                     compute_cost=("compute_cost", "sum"), cost=("cost", "sum"))
    counts = buyers.assign(paying=buyers.cost > 0, earning=buyers.revenue != 0) \
        .groupby(_KEY).agg(converters=("user_id", "size"), paying=("paying", "sum"),
                           earning=("earning", "sum"))
    table = pd.concat([users.rename("users"), money, counts], axis=1).fillna(0.0)
    table = table.astype({"users": "int64", "converters": "int64", "conversions": "int64",
                          "paying": "int64", "earning": "int64"})
    table["roi"] = _ratio(table.revenue, table.cost)
    # residuals e_i = Y_i - R X_i; users without conversions have e_i = 0
    ratio = buyers[_KEY].merge(table.roi.reset_index(), on=_KEY, how="left").roi
    residual = (buyers.revenue - ratio.to_numpy(float) * buyers.cost) ** 2
    by_variant = [buyers[k] for k in _KEY]
    residual_ss = residual.groupby(by_variant).sum()
    # revenue exactly proportional to cost leaves residuals of rounding only: an sd made
    # of them would call differences of 1e-16 significant
    revenue_ss = (buyers.revenue ** 2).groupby(by_variant).sum()
    residual_ss = residual_ss.where(residual_ss > ROUNDING ** 2 * revenue_ss, 0.0)
    table["residual_ss"] = residual_ss
    table["residual_ss"] = table.residual_ss.fillna(0.0)
    n = table.users.astype(float)
    mean_cost = table.cost / n
    variance = table.residual_ss / (n - 1).where(n > 1) / (n * mean_cost ** 2)
    defined = (table.users > 1) & (table.paying > 1) & (table.residual_ss > 0)
    table["roi_sd"] = np.sqrt(variance.where(defined & table.roi.notna()))
    return table.reset_index()


def _control_variants(table: pd.DataFrame, control: str | None) -> pd.Series:
    """Each row's control: `control` where the experiment has it (else missing), by default
    the variant named "control", else the experiment's first variant in sorted order."""
    by_flag = table.groupby("flag_key").variant
    if control is not None:
        present = (table.variant == control).groupby(table.flag_key).transform("any")
        return pd.Series(control, index=table.index).where(present)
    named = (table.variant == "control").groupby(table.flag_key).transform("any")
    return pd.Series(np.where(named, "control", by_flag.transform("min")), index=table.index)


def _delta_comparison(table: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Delta-method intervals per variant, and the difference to the control variant, its
    p-value and the marginal cost; the intervals stay NaN where the sd is undefined."""
    n = table.users.astype(float)
    arm_df = (n - 1).where(n > 1)
    arm_t = stats.t.ppf(1 - alpha / 2, arm_df)
    table["roi_low"], table["roi_high"] = table.roi - arm_t * table.roi_sd, \
        table.roi + arm_t * table.roi_sd
    table["roi_method"] = np.where(table.roi_sd.notna(), "delta",
                                   np.where(table.roi.notna(), "bootstrap", "none"))
    table["cost_per_user"] = _ratio(table.cost, table.users.astype(float))
    controls = table[table.is_control].set_index("flag_key")
    control_of = table.flag_key.map
    table["control_method"] = control_of(controls.roi_method)
    control_roi = control_of(controls.roi)
    table["roi_diff"] = (table.roi - control_roi).where(~table.is_control)
    table.loc[at_rounding_level(table.roi_diff, table.roi, control_roi), "roi_diff"] = 0.0
    variance, control_variance = table.roi_sd ** 2, control_of(controls.roi_sd) ** 2
    control_n = control_of(controls.users).astype(float)
    diff_sd = np.sqrt(variance + control_variance)
    # Welch-Satterthwaite degrees of freedom of the difference
    welch_df = (variance + control_variance) ** 2 / (
        variance ** 2 / (n - 1).where(n > 1) + control_variance ** 2
        / (control_n - 1).where(control_n > 1))
    diff_t = stats.t.ppf(1 - alpha / 2, welch_df)
    table["diff_low"] = table.roi_diff - diff_t * diff_sd
    table["diff_high"] = table.roi_diff + diff_t * diff_sd
    table["p_value"] = 2 * stats.t.sf(np.abs(table.roi_diff / diff_sd), welch_df)
    table["diff_method"] = np.where(table.roi_diff.isna(), "none", "delta")
    control_cost = control_of(controls.cost_per_user)
    table["marginal_cost"] = (table.cost_per_user / control_cost.where(control_cost > 0)
                              - 1).where(~table.is_control)
    return table


def _bootstrap_where_undefined(table: pd.DataFrame, buyers: pd.DataFrame, alpha: float,
                               seed: int, replicates: int) -> pd.DataFrame:
    """Percentile intervals for the variants without a delta-method sd, and bootstrap
    differences (and p-values) where either arm is one of them."""
    draws: dict[tuple[str, str], np.ndarray] = {}

    def drawn(flag_key: str, variant: str) -> np.ndarray:
        if (flag_key, variant) not in draws:
            draws[flag_key, variant] = replicates_of(buyers, flag_key, variant, seed,
                                                     replicates)
        return draws[flag_key, variant]

    flags, variants = table.flag_key.astype(str).tolist(), table.variant.astype(str).tolist()
    controls = table.control_variant.astype(str).tolist()
    columns = ["roi_low", "roi_high", "diff_low", "diff_high", "p_value"]
    values = {name: table[name].to_numpy(float, copy=True) for name in columns}
    for i in np.flatnonzero(table.roi_method == "bootstrap"):
        values["roi_low"][i], values["roi_high"][i] = percentiles(
            drawn(flags[i], variants[i]), alpha)
    undefined = table.roi_diff.notna() & ((table.roi_method == "bootstrap")
                                          | (table.control_method == "bootstrap"))
    for i in np.flatnonzero(undefined):
        mine, theirs = drawn(flags[i], variants[i]), drawn(flags[i], controls[i])
        differences = np.where(at_rounding_level(mine - theirs, mine, theirs), 0.0,
                               mine - theirs)
        values["diff_low"][i], values["diff_high"][i] = percentiles(differences, alpha)
        values["p_value"][i] = bootstrap_p(differences)
    for name in columns:
        table[name] = values[name]
    table.loc[undefined, "diff_method"] = "bootstrap"
    table["significant"] = table.p_value < alpha
    table["confidence"] = 1 - alpha
    return table


class ExperimentsFailed(ValueError):
    """Some experiments could not be computed: `failures` maps each one's flag to why,
    `computed` holds the others' statistics (STATS_COLUMNS), which stand on their own."""

    def __init__(self, failures: Mapping[str, str], computed: pd.DataFrame) -> None:
        self.failures = dict(failures)
        self.computed = computed
        super().__init__("; ".join(f"experiment {flag}: {reason}"
                                   for flag, reason in self.failures.items()))


def _reason(error: Exception) -> str:
    """One line of why an experiment failed (a ValueError is already a message)."""
    text = " ".join(str(error).split())
    return text if isinstance(error, ValueError) else f"{type(error).__name__}: {text}"


def window_statistics(exposures: pd.DataFrame, conversions: pd.DataFrame, end_day: str,
                      window_days: int = 7, control: str | None = None, alpha: float = 0.05,
                      expected_split: Mapping[str, Mapping[str, float]] | None = None,
                      seed: int = 0, bootstrap_replicates: int = BOOTSTRAP_REPLICATES,
                      min_converters: int = MIN_CONVERTERS) -> pd.DataFrame:
    """STATS_COLUMNS, one row per experiment (flag_key) and variant, over the `window_days`
    UTC days ending with `end_day` (YYYY-MM-DD, included).

    A user counts when first exposed inside the window (pass the exposures from before the
    window too, so that a returning user is not taken for a new one); their conversions at
    or after the exposure and before the window's end count. `control` names the control
    variant (experiments without it get no comparison); `expected_split` maps flag_key ->
    {variant: weight} for the SRM check (default an equal split); an arm with fewer than
    `min_converters` converting users (or users with a cost, or with revenue) gets no
    interval and no verdict. Deterministic for a seed.

    Experiments are computed together; one that fails is computed on its own and never
    stops the others: ExperimentsFailed names it and carries the others' statistics.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1 (exclusive), got {alpha}")
    if min_converters < 2:
        raise ValueError(f"min_converters must be at least 2, got {min_converters}")
    check_replicates(bootstrap_replicates)
    check_split(expected_split)
    _window_ms(end_day, window_days)  # a bad day or window is the caller's, not an experiment's
    statistics = partial(_statistics, end_day=end_day, window_days=window_days,
                         control=None if control is None else str(control), alpha=alpha,
                         expected_split=expected_split, seed=seed,
                         bootstrap_replicates=bootstrap_replicates,
                         min_converters=min_converters)
    tables: list[pd.DataFrame] = []
    failures: dict[str, str] = {}

    def compute(flags: list[object]) -> None:
        # halves of a failing set again: one bad experiment costs a few recomputations of
        # the others, not one run per experiment
        try:
            tables.append(statistics(exposures[exposures.flag_key.isin(flags)],
                                     conversions[conversions.flag_key.isin(flags)]))
        except Exception as error:  # noqa: BLE001 - one experiment must not stop the others
            if len(flags) == 1:
                failures[str(flags[0])] = _reason(error)
            else:
                compute(flags[:len(flags) // 2])
                compute(flags[len(flags) // 2:])

    compute(sorted(pd.unique(exposures.flag_key), key=str))
    kept = [t for t in tables if len(t)]
    table = pd.concat(kept, ignore_index=True).sort_values(_KEY).reset_index(drop=True) \
        if kept else pd.DataFrame(columns=STATS_COLUMNS)
    if failures:
        raise ExperimentsFailed(dict(sorted(failures.items())), table)
    return table


def _statistics(exposures: pd.DataFrame, conversions: pd.DataFrame, end_day: str,
                window_days: int, control: str | None, alpha: float,
                expected_split: Mapping[str, Mapping[str, float]] | None, seed: int,
                bootstrap_replicates: int, min_converters: int) -> pd.DataFrame:
    """window_statistics of a set of experiments, all at once."""
    first_day, start_ms, end_ms = _window_ms(end_day, window_days)
    assigned = _assigned(exposures)
    assigned = assigned[(assigned.first_exposure_ms >= start_ms)
                        & (assigned.first_exposure_ms < end_ms)]
    orders = _attributed(assigned, conversions)
    orders = orders[orders.conversion_ts_ms < end_ms]
    buyers = _per_user(orders)
    table = _variant_sums(assigned.groupby(_KEY).size(), orders, buyers)
    if table.empty:
        return pd.DataFrame(columns=STATS_COLUMNS)
    table["control_variant"] = _control_variants(table, control)
    table["is_control"] = table.variant == table.control_variant
    table = _delta_comparison(table, alpha)
    table = _bootstrap_where_undefined(table, buyers, alpha, seed, bootstrap_replicates)
    table = withhold_small_arms(table, min_converters)
    table = heavy_tails(table, buyers)
    table = sample_ratio(table, expected_split)
    table["window_start"], table["window_end"] = first_day.isoformat(), end_day
    return table.sort_values(_KEY).reset_index(drop=True)[STATS_COLUMNS]
