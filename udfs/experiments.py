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

An arm with fewer than `min_converters` converting users (MIN_CONVERTERS by default) gets
no interval and no verdict ("too few converters"), nor does a comparison with it: one buyer
must never make a variant significant. Revenue where the top 1 % of an arm's users hold
over half of it is flagged `heavy_tail`. Variants are compared as strings (a flag served
as 0/1 keeps its control); a non-finite revenue or cost is an error naming the order.

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

import zlib
from collections.abc import Mapping
from datetime import date, timedelta

import numpy as np
import pandas as pd
from scipy import stats

from udfs.experiment_guards import MIN_CONVERTERS, heavy_tails, withhold_small_arms
from udfs.experiment_table import strategy_table
from udfs.periods import DAY_MS, parse_day

__all__ = ["MIN_CONVERTERS", "STATS_COLUMNS", "daily_aggregates", "first_exposures",
           "strategy_table", "window_statistics"]

# The sample-ratio-mismatch alarm: a chi-square p below this flags the experiment. Strict
# on purpose: the check runs on every experiment every day, and at 0.05 one healthy
# experiment in twenty would raise it; a real assignment bug gives p far below 0.001.
SRM_ALPHA = 0.001
SRM_MIN_SHARE = 0.01  # a variant with fewer of the users is a stray, not part of the split
BOOTSTRAP_REPLICATES = 2000
# weights matrix of one bootstrap chunk (replicates x converters) stays under this
_BOOTSTRAP_CELLS = 20_000_000

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
    counts = buyers.assign(paying=buyers.cost > 0).groupby(_KEY).agg(
        converters=("user_id", "size"), paying=("paying", "sum"))
    table = pd.concat([users.rename("users"), money, counts], axis=1).fillna(0.0)
    table = table.astype({"users": "int64", "converters": "int64", "conversions": "int64",
                          "paying": "int64"})
    table["roi"] = _ratio(table.revenue, table.cost)
    # residuals e_i = Y_i - R X_i; users without conversions have e_i = 0
    ratio = buyers[_KEY].merge(table.roi.reset_index(), on=_KEY, how="left").roi
    residual = (buyers.revenue - ratio.to_numpy(float) * buyers.cost) ** 2
    table["residual_ss"] = residual.groupby([buyers[k] for k in _KEY]).sum()
    table["residual_ss"] = table.residual_ss.fillna(0.0)
    n = table.users.astype(float)
    mean_cost = table.cost / n
    variance = table.residual_ss / (n - 1).where(n > 1) / (n * mean_cost ** 2)
    defined = (table.users > 1) & (table.paying > 1) & (table.residual_ss > 0)
    table["roi_sd"] = np.sqrt(variance.where(defined & table.roi.notna()))
    return table.reset_index()


def _bootstrap(buyers: pd.DataFrame, flag_key: str, variant: str, seed: int,
               replicates: int) -> np.ndarray:
    """Poisson-bootstrap replicates of one variant's ROI (NaN where a replicate has no
    cost); seeded by (seed, flag, variant), so they are the same wherever they are drawn."""
    mine = buyers[(buyers.flag_key == flag_key) & (buyers.variant == variant)]
    revenue, cost = mine.revenue.to_numpy(float), mine.cost.to_numpy(float)
    rng = np.random.default_rng([seed, zlib.crc32(flag_key.encode()),
                                 zlib.crc32(variant.encode())])
    chunk = max(1, _BOOTSTRAP_CELLS // max(1, len(mine)))
    parts = []
    for start in range(0, replicates, chunk):  # a chunk of replicates at a time, not users
        weights = rng.poisson(1.0, size=(min(chunk, replicates - start), len(mine)))
        parts.append(_ratio(pd.Series(weights @ revenue), pd.Series(weights @ cost)))
    return pd.concat(parts, ignore_index=True).to_numpy(float)


def _percentiles(draws: np.ndarray, alpha: float) -> tuple[float, float]:
    kept = draws[~np.isnan(draws)]
    if not len(kept):
        return np.nan, np.nan
    low, high = np.quantile(kept, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def _bootstrap_p(differences: np.ndarray) -> float:
    """Two-sided bootstrap p of a difference of 0 (add-one, so never exactly 0)."""
    kept = differences[~np.isnan(differences)]
    below, above = int((kept <= 0).sum()), int((kept >= 0).sum())
    return min(1.0, 2 * (min(below, above) + 1) / (len(kept) + 1))


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
    table["roi_diff"] = (table.roi - control_of(controls.roi)).where(~table.is_control)
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

    def replicates_of(flag_key: str, variant: str) -> np.ndarray:
        if (flag_key, variant) not in draws:
            draws[flag_key, variant] = _bootstrap(buyers, flag_key, variant, seed, replicates)
        return draws[flag_key, variant]

    flags, variants = table.flag_key.astype(str).tolist(), table.variant.astype(str).tolist()
    controls = table.control_variant.astype(str).tolist()
    columns = ["roi_low", "roi_high", "diff_low", "diff_high", "p_value"]
    values = {name: table[name].to_numpy(float, copy=True) for name in columns}
    for i in np.flatnonzero(table.roi_method == "bootstrap"):
        values["roi_low"][i], values["roi_high"][i] = _percentiles(
            replicates_of(flags[i], variants[i]), alpha)
    undefined = table.roi_diff.notna() & ((table.roi_method == "bootstrap")
                                          | (table.control_method == "bootstrap"))
    for i in np.flatnonzero(undefined):
        differences = replicates_of(flags[i], variants[i]) \
            - replicates_of(flags[i], controls[i])
        values["diff_low"][i], values["diff_high"][i] = _percentiles(differences, alpha)
        values["p_value"][i] = _bootstrap_p(differences)
    for name in columns:
        table[name] = values[name]
    table.loc[undefined, "diff_method"] = "bootstrap"
    table["significant"] = table.p_value < alpha
    table["confidence"] = 1 - alpha
    return table


def _srm_p_value(observed: Mapping[str, int], weights: Mapping[str, float]) -> float:
    """Chi-square goodness of fit of users per variant against `weights`. A configured
    variant nobody saw counts with 0 users; a variant served that is not configured is a
    mismatch outright (p = 0); with one variant (or no users) there is nothing to test."""
    if set(observed) - set(weights):
        return 0.0
    names = sorted(weights)
    counts = np.array([observed.get(name, 0) for name in names], dtype=float)
    if len(names) < 2 or counts.sum() == 0:
        return np.nan
    expected = np.array([weights[name] for name in names]) / sum(weights.values())
    return float(stats.chisquare(counts, expected * counts.sum()).pvalue)


def _main_variants(observed: Mapping[str, int]) -> list[str]:
    """The variants holding at least SRM_MIN_SHARE of an experiment's users."""
    total = sum(observed.values())
    return [v for v, n in observed.items() if total and n >= SRM_MIN_SHARE * total]


def _sample_ratio(table: pd.DataFrame,
                  expected_split: Mapping[str, Mapping[str, float]] | None) -> pd.DataFrame:
    """expected_share, srm_p_value and srm (p < SRM_ALPHA) per row; the split is equal
    unless `expected_split` configures the flag's. One test per experiment."""
    users: dict[str, dict[str, int]] = {}
    for flag_key, variant, count in zip(table.flag_key, table.variant, table.users,
                                        strict=True):
        users.setdefault(flag_key, {})[variant] = int(count)
    # without a configured split, an equal one over the variants that hold at least
    # SRM_MIN_SHARE of the users: a stray exposure or two (a variant served by mistake, a
    # test value) would otherwise turn a healthy split into a "mismatch"
    weights = {flag_key: dict((expected_split or {}).get(flag_key, {}))
               or dict.fromkeys(_main_variants(observed), 1.0)
               for flag_key, observed in users.items()}
    strays = {flag_key: set(observed) - set(weights[flag_key])
              for flag_key, observed in users.items()
              if not (expected_split or {}).get(flag_key)}
    table["expected_share"] = [
        weights[flag_key].get(variant, 0.0) / sum(weights[flag_key].values())
        for flag_key, variant in zip(table.flag_key, table.variant, strict=True)]
    p_values = {flag_key: _srm_p_value({v: n for v, n in observed.items()
                                        if v not in strays.get(flag_key, ())},
                                       weights[flag_key])
                for flag_key, observed in users.items()}
    stray = [variant in strays.get(flag_key, ()) for flag_key, variant
             in zip(table.flag_key, table.variant, strict=True)]
    table["note"] = [("; ".join(filter(None, (note, f"stray variant ({n} users, under "
                                              f"{100 * SRM_MIN_SHARE:g} %): left out of "
                                              "the SRM check"))) if is_stray else note)
                     for note, n, is_stray in zip(table.note, table.users, stray, strict=True)]
    table["srm_p_value"] = table.flag_key.map(p_values).astype(float)
    table["srm"] = table.srm_p_value < SRM_ALPHA
    return table


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
    `min_converters` converting users gets no interval and no verdict. Deterministic for a
    seed.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1 (exclusive), got {alpha}")
    if min_converters < 2:
        raise ValueError(f"min_converters must be at least 2, got {min_converters}")
    control = None if control is None else str(control)
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
    table = _sample_ratio(table, expected_split)
    table["window_start"], table["window_end"] = first_day.isoformat(), end_day
    return table.sort_values(_KEY).reset_index(drop=True)[STATS_COLUMNS]
