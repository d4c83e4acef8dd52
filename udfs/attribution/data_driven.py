"""Data-driven models on a stream: conversion-rate counts that grow as journeys close.

`shapley` and `markov` need counts over many journeys, converting and not. A stream keeps
those counts per distinct path (the channel sequence) and refits the models once per
period: a conversion closed in period [k*P, (k+1)*P) is credited with the models fitted on
every journey closed before the period ends, itself included. The result depends only on
the data and P, not on arrival timing, so a batch run over the same journeys (see
`credit_by_period`) gives the same credits. One fit per period keeps the cost per journey
small; a P longer than the data makes the credits equal a batch fit over all of it.

The fit is `udfs.attribution.models.touch_weights` on a JourneyTable of the distinct paths with
their counts: the same function the batch CLI calls.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np

from schemas.records import Credit
from udfs.attribution import models as batch_models
from udfs.attribution.credits import CreditRow, as_credits, credit_rows
from udfs.journeys import (
    NOTHING_CLOSED,
    ClosedJourney,
    ClosedJourneys,
    ConvertedJourney,
    ConvertedJourneys,
    JourneyTable,
    close_ts,
    concat_converted,
    converted_keys,
    from_coded_paths,
    key_runs,
    paths_of,
    unmatched,
)

Path = tuple[str, ...]


def period_end(ts_ms: Any, period_ms: int) -> Any:
    """Last millisecond of the refit period holding ts_ms (an int, or an array of them)."""
    return (ts_ms // period_ms + 1) * period_ms - 1


def path_of(journey: ClosedJourney) -> Path:
    """A journey's channels in order: what the data-driven models count."""
    return tuple([touch.channel for touch in journey.touches])


class _PathIndex:
    """The distinct paths of a PathCounts as channel codes, grown as paths are added, so a
    refit does not rebuild the table of every path seen so far from the path tuples."""

    def __init__(self) -> None:
        self.rows: dict[Path, int] = {}  # each indexed path's row
        self.channel_ids: dict[str, int] = {}  # first-seen order
        self.steps = array("q")  # every indexed path's channels, first-seen ids
        self.lengths = array("q")

    def update(self, counts: dict[Path, list[float]]) -> dict[Path, int]:
        """Index the paths added to `counts` since the last call (a dict only appends);
        returns every path's row."""
        ids, steps, rows = self.channel_ids, self.steps, self.rows
        for path in islice(counts, len(rows), None):
            rows[path] = len(rows)
            for channel in path:
                code = ids.get(channel)
                if code is None:
                    code = ids[channel] = len(ids)
                steps.append(code)
            self.lengths.append(len(path))
        return rows

    def table(self, counts: dict[Path, list[float]]) -> JourneyTable:
        """The JourneyTable `from_paths` makes of `counts` (rows in the dict's order)."""
        ids, steps = self.channel_ids, self.steps
        self.update(counts)
        names = sorted(ids)
        rank = np.empty(len(names), np.int64)
        rank[[ids[name] for name in names]] = np.arange(len(names))
        cells = np.array(list(counts.values()), dtype=np.float64).reshape(-1, 2)
        return from_coded_paths(tuple(names), rank[np.frombuffer(steps, np.int64)],
                                np.frombuffer(self.lengths, np.int64).copy(),
                                cells[:, 0], cells[:, 1], np.zeros(len(cells)))


@dataclass
class PathCounts:
    """Conversions and non-conversions per distinct path, in first-seen order.

    Paths are only ever added (to `counts`, directly or by `add_path`): a fit indexes the
    new ones and reuses the codes of the rest. `changed` collects the paths `add_path`
    touched, for a caller that stores only what changed."""

    counts: dict[Path, list[float]] = field(default_factory=dict)
    changed: set[Path] = field(default_factory=set, init=False, repr=False, compare=False)
    # paths whose counts went back to nothing (a correction retracted them) and were
    # dropped, for a caller that deletes what it stored of them
    dropped: set[Path] = field(default_factory=set, init=False, repr=False, compare=False)
    _index: _PathIndex = field(default_factory=_PathIndex, init=False, repr=False,
                               compare=False)
    _retracted: bool = field(default=False, init=False, repr=False, compare=False)

    def add(self, journey: ClosedJourney) -> None:
        converted = isinstance(journey, ConvertedJourney)
        self.add_path(path_of(journey), float(converted), float(not converted))

    def add_path(self, path: Path, conversions: float = 0.0,
                 non_conversions: float = 0.0) -> None:
        cell = self.counts.setdefault(path, [0.0, 0.0])
        cell[0] += conversions
        cell[1] += non_conversions
        self.changed.add(path)

    def retract(self, converted: ConvertedJourneys, unconverted: Mapping[Path, float]) -> None:
        """Take a period's journeys out again (a correction restates the period)."""
        for path in paths_of(converted.touches):
            self.add_path(path, conversions=-1.0)
        for path, count in unconverted.items():
            self.add_path(path, non_conversions=-count)
        self._retracted = True

    def add_counts(self, converted: Mapping[Path, float], unconverted: Mapping[Path, float],
                   sign: int = 1) -> None:
        """Conversions and non-conversions per path, added (sign 1) or taken out again
        (-1: a correction restates a period)."""
        for path, count in converted.items():
            self.add_path(path, conversions=sign * count)
        for path, count in unconverted.items():
            self.add_path(path, non_conversions=sign * count)
        if sign < 0:
            self._retracted = True

    def _drop_empty(self) -> None:
        """Forget the paths no journey holds any more: a fit sees only paths counted, as a
        batch over the same journeys does (their rows are indexed afresh)."""
        self._retracted = False
        empty = [path for path, (c, n) in self.counts.items() if c == 0.0 and n == 0.0]
        if not empty:
            return
        for path in empty:
            del self.counts[path]
        self.dropped.update(empty)
        self.changed.difference_update(empty)
        self.changed.update(self.counts)  # rows renumbered: every stored row changes
        self._index = _PathIndex()

    def rows(self) -> dict[Path, int]:
        """Each path's row: its place in first-seen order."""
        return self._index.update(self.counts)

    def fit(self, models: Sequence[str],
            params: batch_models.ModelParams | None = None) -> FittedModels:
        if self._retracted:
            self._drop_empty()
        table = self._index.table(self.counts)
        weights = {model: batch_models.touch_weights(table, model, params) for model in models}
        return FittedModels(self._index.rows, table.offsets, weights)


@dataclass(frozen=True)
class FittedModels:
    """Per model: the per-touch weights of every path seen so far (flat, cut by offsets).

    `rows` is the counts' own index, shared to save a copy per fit: paths counted after
    the fit appear in it too, but have no weights here."""

    rows: dict[Path, int]
    offsets: np.ndarray
    weights: dict[str, np.ndarray]

    def credit(self, journey: ConvertedJourney) -> list[Credit]:
        return as_credits(self.credit_rows([journey]))

    def credit_rows(self, journeys: Sequence[ConvertedJourney] | ConvertedJourneys,
                    paths: Sequence[Path] | None = None) -> list[CreditRow]:
        """Credit rows of conversions whose paths have been counted, model after model
        (`paths`: the journeys' paths, if the caller has them already)."""
        if paths is None:
            paths = paths_of(journeys.touches) if isinstance(journeys, ConvertedJourneys) \
                else [path_of(journey) for journey in journeys]
        rows = np.fromiter((self.rows[path] for path in paths if path), np.int64)
        flat = touch_positions(self.offsets, rows)
        return credit_rows(journeys, ((model, weights[flat])
                                      for model, weights in self.weights.items()))


def touch_positions(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Where each touch of paths `rows` (in order) sits in weights flat over all paths
    (path r's touches at offsets[r]:offsets[r + 1]): its path's start plus its place."""
    starts = offsets[rows]
    lengths = offsets[rows + 1] - starts
    before = np.cumsum(lengths) - lengths
    return np.repeat(starts - before, lengths) + np.arange(int(lengths.sum()))


def credit_period(counts: PathCounts, closed: Iterable[ClosedJourney],
                  models: Sequence[str],
                  params: batch_models.ModelParams | None = None) -> list[Credit]:
    """Count one period's closed journeys, refit, and credit that period's conversions."""
    converted: list[ConvertedJourney] = []
    unconverted: dict[Path, float] = {}
    for journey in closed:
        if isinstance(journey, ConvertedJourney):
            converted.append(journey)
        else:
            path = tuple(t.channel for t in journey.touches)
            unconverted[path] = unconverted.get(path, 0.0) + 1.0
    return credit_conversions(counts, converted, unconverted, models, params)


def credit_conversions(counts: PathCounts, converted: Sequence[ConvertedJourney],
                       unconverted: Mapping[Path, float], models: Sequence[str],
                       params: batch_models.ModelParams | None = None) -> list[Credit]:
    """`credit_period` given the period's non-converting journeys as counts per path (all a
    fit needs of them): count, refit, and credit the period's conversions."""
    return as_credits(conversion_credit_rows(counts, converted, unconverted, models, params))


def conversion_credit_rows(counts: PathCounts,
                           converted: Sequence[ConvertedJourney] | ConvertedJourneys,
                           unconverted: Mapping[Path, float], models: Sequence[str],
                           params: batch_models.ModelParams | None = None) -> list[CreditRow]:
    """`credit_conversions` as plain rows (what a stream writes)."""
    for path, count in unconverted.items():
        counts.add_path(path, non_conversions=count)
    paths = paths_of(converted.touches) if isinstance(converted, ConvertedJourneys) \
        else [path_of(journey) for journey in converted]
    for path in paths:
        counts.add_path(path, conversions=1.0)
    if not converted:
        return []
    return counts.fit(models, params).credit_rows(converted, paths)


def credit_by_period(journeys: Iterable[ClosedJourney], models: Sequence[str],
                     period_ms: int,
                     params: batch_models.ModelParams | None = None) -> list[Credit]:
    """Batch twin of the stream: credits of every conversion, fitting period by period."""
    by_period: dict[int, list[ClosedJourney]] = {}
    for journey in journeys:
        by_period.setdefault(period_end(close_ts(journey), period_ms), []).append(journey)
    counts = PathCounts()
    out: list[Credit] = []
    for end in sorted(by_period):
        out.extend(credit_period(counts, by_period[end], models, params))
    return out


NO_CONVERSIONS = NOTHING_CLOSED.converted
Period = tuple[int, ConvertedJourneys, dict[Path, float]]
"""Closed journeys of one refit period, as the fit needs them: (period end, the converted
journeys, the non-converting ones as counts per path)."""


# What one step closed, by refit period, as one table: (the periods' ends in order, where
# each period's converted journeys start in the table and, last, where the table ends, the
# converted journeys in period order, each period's counts per path of the journeys that
# did not convert). One pickle for the step: a table per period costs a pickle of each of
# its dozen columns, and in a catch-up every step closes tens of periods (at 256 user
# buckets the fit read 15,752 period tables from 1,024 steps).
PeriodRuns = tuple[list[int], list[int], ConvertedJourneys, list[dict[Path, float]]]


def closed_period_runs(closed: ClosedJourneys, period_ms: int) -> PeriodRuns:
    """What one step closed, grouped by the refit period each journey closed in (one sort
    of each kind by period: a step that closes many periods costs no pass over every
    journey per period)."""
    converted, lapsed = closed.converted, closed.lapsed
    converted_end = period_end(converted.ts_ms, period_ms)
    lapsed_end = period_end(lapsed.close_ts_ms, period_ms)
    unconverted_by_end: dict[int, dict[Path, float]] = {}
    for end, path in zip(lapsed_end.tolist(), paths_of(lapsed.touches), strict=True):
        counts = unconverted_by_end.setdefault(end, {})
        counts[path] = counts.get(path, 0.0) + 1.0
    order, bounds = key_runs(converted_end)  # each period's rows, in their order
    ends = sorted(bounds.keys() | unconverted_by_end.keys())
    starts, row = [], 0
    for end in ends:
        starts.append(row)
        row = bounds.get(end, (row, row))[1]
    starts.append(len(converted))
    table = converted if len(bounds) <= 1 else converted.select(order)
    return ends, starts, table, [unconverted_by_end.get(end, {}) for end in ends]


def runs_periods(runs: PeriodRuns) -> list[Period]:
    """Each period of the runs, its converted journeys a view of the table."""
    ends, starts, table, unconverted = runs
    return [(end, table.rows(start, stop), paths) for end, start, stop, paths
            in zip(ends, starts[:-1], starts[1:], unconverted, strict=True)]


def period_runs(periods: Sequence[Period]) -> PeriodRuns:
    """Periods (one each) as runs of one table."""
    periods = sorted(periods, key=lambda period: period[0])
    starts = [0]
    for _, converted, _ in periods:
        starts.append(starts[-1] + len(converted))
    parts = [converted for _, converted, _ in periods]
    return ([period[0] for period in periods], starts,
            concat_converted(parts) if parts else NO_CONVERSIONS,
            [dict(period[2]) for period in periods])


def closed_by_period(closed: ClosedJourneys, period_ms: int) -> list[Period]:
    """What one step closed, one entry per refit period each journey closed in."""
    return runs_periods(closed_period_runs(closed, period_ms))


def merged_period(parts: Sequence[tuple[ConvertedJourneys, Mapping[Path, float], int]]
                  ) -> tuple[ConvertedJourneys, dict[Path, float]]:
    """One refit period's closed journeys from parts that add (sign 1) or retract (-1)
    journeys: the converted ones left, and the counts per path of the others."""
    added = [converted for converted, _, sign in parts if sign > 0 and len(converted)]
    converted = concat_converted(added) if added else NO_CONVERSIONS
    retracted = [converted for converted, _, sign in parts if sign < 0 and len(converted)]
    if retracted:
        converted = converted.select(unmatched(converted_keys(converted),
                                               converted_keys(concat_converted(retracted))))
    unconverted: dict[Path, float] = {}
    for _, paths, sign in parts:
        for path, count in paths.items():
            unconverted[path] = unconverted.get(path, 0.0) + sign * count
    return converted, {path: count for path, count in unconverted.items() if count}
