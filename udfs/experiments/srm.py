"""The sample-ratio-mismatch check of the experiment statistics (udfs/experiments/statistics.py):
do an experiment's users per variant follow its planned split, leaving stray variants out."""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Real

import numpy as np
import pandas as pd
from scipy import stats

# The sample-ratio-mismatch alarm: a chi-square p below this flags the experiment. Strict
# on purpose: the check runs on every experiment every day, and at 0.05 one healthy
# experiment in twenty would raise it; a real assignment bug gives p far below 0.001.
SRM_ALPHA = 0.001
# A variant with fewer of the users, and fewer than half an even share of them, is a stray
# (served by mistake, a test value), not part of the split. Both: a flag with 150 variants
# holds well under 1 % in each, and every one of them is part of its split.
SRM_MIN_SHARE = 0.01


def check_split(expected_split: Mapping[str, Mapping[str, float]] | None) -> None:
    """A ValueError naming the weight unless every flag's weights are finite, not negative
    and not all 0 (a chi-square against them would divide by 0 or mean nothing)."""
    for flag_key, weights in (expected_split or {}).items():
        for variant, weight in weights.items():
            if not isinstance(weight, Real) or not math.isfinite(weight) or weight < 0:
                raise ValueError(f"expected_split[{flag_key!r}][{variant!r}] must be a "
                                 f"non-negative number, got {weight!r}")
        if weights and sum(weights.values()) <= 0:
            raise ValueError(f"expected_split[{flag_key!r}]: the weights sum to 0; give the "
                             "share planned for each variant")


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
    """The variants that are not strays; the largest never is one."""
    total = sum(observed.values())
    floor = min(SRM_MIN_SHARE * total, total / (2 * max(1, len(observed))))
    return [v for v, n in observed.items() if n >= floor]


def sample_ratio(table: pd.DataFrame,
                 expected_split: Mapping[str, Mapping[str, float]] | None) -> pd.DataFrame:
    """expected_share, srm_p_value and srm (p < SRM_ALPHA) per row; the split is equal
    unless `expected_split` configures the flag's (checked by `check_split`). One test per
    experiment."""
    users: dict[str, dict[str, int]] = {}
    for flag_key, variant, count in zip(table.flag_key, table.variant, table.users,
                                        strict=True):
        users.setdefault(flag_key, {})[variant] = int(count)
    # without a configured split, an equal one over the variants that are not strays: a
    # stray exposure or two (a variant served by mistake, a test value) would otherwise
    # turn a healthy split into a "mismatch"
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
