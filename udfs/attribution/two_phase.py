"""The data-driven models in two phases: what a bucket's closed journeys tell the fit (the
counts per path of one refit period), and what the fit tells the bucket back (the fitted
per-touch weights of the paths its conversions took).

The fit needs only counts per distinct path, of every journey; the credits need each
converted journey with its touches. So the journeys stay where they closed, the counts go
to the one place that adds them up, and a period's fitted weights come back, for the paths
each bucket converted on, to credit its conversions there: the work per conversion is
spread over the buckets, and the fit's over the distinct paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from udfs.attribution.credits import CreditRow, credit_rows
from udfs.attribution.data_driven import (
    FittedModels,
    Path,
    Period,
    PeriodRuns,
    touch_positions,
)
from udfs.journeys import ConvertedJourneys, concat_converted, paths_of

CountPeriod = tuple[int, dict[Path, float], dict[Path, float]]
"""A refit period's closed journeys of one bucket as the fit counts them: (period end,
conversions per path, non-conversions per path)."""


def path_tally(paths: Iterable[Path]) -> dict[Path, float]:
    tally: dict[Path, float] = {}
    for path in paths:
        tally[path] = tally.get(path, 0.0) + 1.0
    return tally


def split_runs(runs: PeriodRuns) -> tuple[PeriodRuns, list[CountPeriod]]:
    """A step's closed journeys by period, split: the converted journeys (runs of the
    periods with any) to credit where they closed, and every period's counts to the fit."""
    ends, starts, table, unconverted = runs
    paths = paths_of(table.touches)
    counts: list[CountPeriod] = []
    kept_ends, kept_starts = [], []
    for end, start, stop, lapsed in zip(ends, starts[:-1], starts[1:], unconverted,
                                        strict=True):
        counts.append((end, path_tally(paths[start:stop]), dict(lapsed)))
        if stop > start:  # a period without conversions takes no rows: the rest stay runs
            kept_ends.append(end)
            kept_starts.append(start)
    kept_starts.append(starts[-1])
    return (kept_ends, kept_starts, table, [{} for _ in kept_ends]), counts


def period_counts(periods: Sequence[Period]) -> list[CountPeriod]:
    """Periods of closed journeys (a correction's) as the fit counts them."""
    return [(end, path_tally(paths_of(converted.touches)), dict(unconverted))
            for end, converted, unconverted in periods]


def converted_periods(periods: Sequence[Period]) -> list[Period]:
    """Periods of closed journeys (a correction's) as the crediting keeps them: only the
    converted journeys, of the periods with any."""
    return [(end, converted, {}) for end, converted, _ in periods if len(converted)]


def merged_counts(parts: Iterable[tuple[Mapping[Path, float], int]]) -> dict[Path, float]:
    """Counts per path from parts that add (sign 1) or retract (-1); paths left at
    nothing dropped."""
    total: dict[Path, float] = {}
    for counts, sign in parts:
        for path, count in counts.items():
            total[path] = total.get(path, 0.0) + sign * count
    return {path: count for path, count in total.items() if count}


def weights_for(fitted: FittedModels, paths: Mapping[Path, float]) -> FittedModels:
    """The fitted weights of the paths counted in `paths` only, as a FittedModels of
    its own: what one bucket needs to credit its conversions on those paths, the same
    numbers as the whole fit's."""
    chosen = [path for path in paths if path]  # (distinct: the keys of a count)
    rows = np.fromiter((fitted.rows[path] for path in chosen), np.int64, len(chosen))
    flat = touch_positions(fitted.offsets, rows)
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(fitted.offsets[rows + 1] - fitted.offsets[rows], out=offsets[1:])
    return FittedModels({path: row for row, path in enumerate(chosen)}, offsets,
                        {model: weights[flat] for model, weights in fitted.weights.items()})


def journeys_paths(converted: ConvertedJourneys) -> dict[Path, float]:
    """Conversions per path of converted journeys."""
    return path_tally(paths_of(converted.touches))


def periods_credit_rows(periods: Sequence[tuple[ConvertedJourneys, FittedModels]]
                        ) -> list[CreditRow]:
    """Credit rows of several periods' conversions, each period's with its own fitted
    weights, in one call: the periods' weights side by side as one table (a catch-up
    settles tens of periods at once, and numpy calls per period and bucket cost more
    than the crediting itself)."""
    periods = [(journeys, fitted) for journeys, fitted in periods if len(journeys)]
    if not periods:
        return []
    journeys = concat_converted([journeys for journeys, _ in periods])
    models = list(periods[0][1].weights)
    rows: list[int] = []
    base = 0
    for part, fitted in periods:  # each journey's row among every period's paths
        own = fitted.rows
        rows += [base + own[path] for path in paths_of(part.touches) if path]
        base += len(fitted.offsets) - 1
    path_lengths = np.concatenate([np.diff(fitted.offsets) for _, fitted in periods])
    offsets = np.zeros(len(path_lengths) + 1, np.int64)
    np.cumsum(path_lengths, out=offsets[1:])
    flat = touch_positions(offsets, np.array(rows, np.int64))
    return credit_rows(journeys, ((model, np.concatenate(
        [fitted.weights[model] for _, fitted in periods])[flat]) for model in models))
