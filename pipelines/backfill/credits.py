"""The backfill's credits on pandas frames, engine-free: the second half of the flow that
`pipelines.backfill.frames` describes, from its closed journeys (JOURNEY_COLUMNS) to credit
rows (CREDIT_COLUMNS) of the days being recomputed, as the Flink jobs credit them.

per-conversion models   `conversion_credits`: `udfs.attribution.models.touch_weights` on one
                        JourneyTable of many conversions
data-driven models      `path_counts` (conversions and non-conversions per refit period and
                        path) -> `fit_weights` (the weights
                        `udfs.attribution.data_driven.PathCounts`
                        fits when a period closes, on the counts of every journey closed up
                        to then; `fit_groups` splits the periods for fitting in parallel) ->
                        joined back to the conversions as `w_<model>` columns ->
                        `data_driven_credits`
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain

import numpy as np
import pandas as pd

from pipelines.backfill.frames import CREDIT_COLUMNS, PATH_KEY_SEPARATOR, typed
from schemas.records import UNATTRIBUTED, Conversion, Touchpoint
from udfs.attribution import FittedModels, PathCounts, touch_weights
from udfs.journeys import ConvertedJourney, JourneyTable
from udfs.settings import ComputeSettings


def weight_column(model: str) -> str:
    """The column of a data-driven model's per-touch weights (see `fit_weights`)."""
    return f"w_{model}"


@dataclass(frozen=True)
class _Touches:
    """The touches of many converted journeys, flat, in journey order."""

    lengths: np.ndarray
    offsets: np.ndarray
    ts: np.ndarray
    channel: np.ndarray
    campaign: np.ndarray

    @classmethod
    def of(cls, conversions: pd.DataFrame) -> _Touches:
        lengths = np.fromiter((len(x) for x in conversions.touch_ts), np.int64,
                              len(conversions))
        total = int(lengths.sum())
        return cls(lengths, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                   np.fromiter(chain.from_iterable(conversions.touch_ts), np.int64, total),
                   np.array(list(chain.from_iterable(conversions.touch_channel)), dtype=object),
                   np.array(list(chain.from_iterable(conversions.touch_campaign)),
                            dtype=object))

    def table(self, conversions: pd.DataFrame) -> JourneyTable:
        """One JourneyTable of all these conversions (per-conversion models weigh each
        journey on its own, so this equals one table per conversion, as the stream has)."""
        codes, names = pd.factorize(self.channel, sort=True)
        n = len(conversions)
        return JourneyTable(
            channels=tuple(str(name) for name in names), campaigns=("",),
            offsets=self.offsets, touch_channel=codes.astype(np.int64),
            touch_campaign=np.zeros(len(codes), np.int64), touch_ts=self.ts,
            conversions=np.ones(n), non_conversions=np.zeros(n),
            revenue=conversions.revenue.to_numpy(np.float64),
            conversion_ts=conversions.conversion_ts_ms.to_numpy(np.int64))


def _credit_rows(conversions: pd.DataFrame, touches: _Touches, model: str,
                 weights: np.ndarray) -> pd.DataFrame:
    """Credit rows as `udfs.attribution.credits.credits_from_weights` builds them: zero weights
    left out, a conversion without touches to UNATTRIBUTED."""
    journey = np.repeat(np.arange(len(conversions)), touches.lengths)
    position = np.arange(len(journey)) - touches.offsets[:-1][journey]
    keep = weights != 0.0
    j = journey[keep]
    revenue = conversions.revenue.to_numpy(np.float64)
    fields = {name: conversions[name].to_numpy() for name in
              ("order_id", "user_id", "conversion_ts_ms", "currency", "stage", "day")}
    touched = pd.DataFrame({
        "model": model, "order_id": fields["order_id"][j], "user_id": fields["user_id"][j],
        "conversion_ts_ms": fields["conversion_ts_ms"][j], "touch_index": position[keep],
        "channel": touches.channel[keep], "campaign": touches.campaign[keep],
        "touch_ts_ms": touches.ts[keep], "credit": weights[keep],
        "revenue": revenue[j] * weights[keep], "currency": fields["currency"][j],
        "stage": fields["stage"][j], "day": fields["day"][j]})
    empty = np.flatnonzero(touches.lengths == 0)
    if not len(empty):
        return touched
    untouched = pd.DataFrame({
        "model": model, "order_id": fields["order_id"][empty],
        "user_id": fields["user_id"][empty],
        "conversion_ts_ms": fields["conversion_ts_ms"][empty], "touch_index": 0,
        "channel": UNATTRIBUTED, "campaign": "",
        "touch_ts_ms": fields["conversion_ts_ms"][empty], "credit": 1.0,
        "revenue": revenue[empty], "currency": fields["currency"][empty],
        "stage": fields["stage"][empty], "day": fields["day"][empty]})
    return pd.concat([touched, untouched], ignore_index=True)


def concat_credits(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Credit frames as one, typed (CREDIT_COLUMNS)."""
    frames = [frame for frame in frames if len(frame)]
    if not frames:
        return typed(pd.DataFrame(columns=list(CREDIT_COLUMNS)), CREDIT_COLUMNS)
    return typed(pd.concat(frames, ignore_index=True), CREDIT_COLUMNS)


def conversion_credits(conversions: pd.DataFrame, settings: ComputeSettings) -> pd.DataFrame:
    """Credits of converted journeys (rows with touches) under the per-conversion models."""
    if not len(conversions) or not settings.per_conversion:
        return concat_credits([])
    touches = _Touches.of(conversions)
    table = touches.table(conversions)
    return concat_credits([_credit_rows(conversions, touches, model,
                                        touch_weights(table, model, settings.params))
                           for model in settings.per_conversion])


def data_driven_credits(conversions: pd.DataFrame, settings: ComputeSettings) -> pd.DataFrame:
    """Credits of converted journeys under the data-driven models, from the weights fitted
    for their period and path (the `w_<model>` columns, see `fit_weights`)."""
    if not len(conversions) or not settings.data_driven:
        return concat_credits([])
    touches = _Touches.of(conversions)
    frames = []
    for model in settings.data_driven:
        column = conversions[weight_column(model)]
        weights = np.fromiter(chain.from_iterable(column), np.float64, int(touches.lengths.sum()))
        frames.append(_credit_rows(conversions, touches, model, weights))
    return concat_credits(frames)


def _path(key: str) -> tuple[str, ...]:
    return tuple(key.split(PATH_KEY_SEPARATOR)) if key else ()


def _path_weights(fitted: FittedModels, path: tuple[str, ...],
                  models: tuple[str, ...]) -> list[list[float]]:
    """Each model's per-touch weights of one path, read through `FittedModels.credit` on a
    stand-in conversion (credit = weight; zero weights come back as absent rows)."""
    probe = ConvertedJourney(Conversion("", 0, "", 1.0, "", "", ""),
                             tuple(Touchpoint("", 0, channel, "", "", "") for channel in path))
    weights = {model: [0.0] * len(path) for model in models}
    for credit in fitted.credit(probe):
        if path:
            weights[credit.model][credit.touch_index] = credit.credit
    return [weights[model] for model in models]


def fit_weights(counts: pd.DataFrame, needed: pd.DataFrame,
                settings: ComputeSettings) -> pd.DataFrame:
    """Per (period, path) in `needed`: each data-driven model's per-touch weights, fitted as
    the stream fits them when that period closes -- on the counts of every journey closed
    up to its end (`counts`: period_end_ms, path, conversions, non_conversions)."""
    models = settings.data_driven
    columns = ["period_end_ms", "path", *map(weight_column, models)]
    if not len(needed):
        return pd.DataFrame(columns=columns)
    wanted = needed.groupby("period_end_ms").path.agg(lambda p: sorted(set(p))).sort_index()
    # Counts are whole numbers, so their sums are exact in any order: the periods before
    # the first one wanted are summed at once (a Spark task fits a later group of periods).
    before = counts.period_end_ms < wanted.index[0]
    prior = counts[before].groupby("path")[["conversions", "non_conversions"]].sum()
    totals = PathCounts({_path(key): [float(c), float(n)]
                         for key, c, n in prior.itertuples(name=None)})
    counts = counts[~before].sort_values(["period_end_ms", "path"], kind="stable")
    periods = counts.period_end_ms.to_numpy(np.int64)
    paths = counts.path.tolist()
    conversions = counts.conversions.to_numpy(np.float64)
    non_conversions = counts.non_conversions.to_numpy(np.float64)
    rows = []
    i = 0
    for period, period_paths in wanted.items():
        while i < len(periods) and periods[i] <= period:
            cell = totals.counts.setdefault(_path(paths[i]), [0.0, 0.0])
            cell[0] += conversions[i]
            cell[1] += non_conversions[i]
            i += 1
        fitted = totals.fit(models, settings.params)
        rows.extend((period, key, *_path_weights(fitted, _path(key), models))
                    for key in period_paths)
    return pd.DataFrame(rows, columns=columns)


def fit_groups(counts: pd.DataFrame, periods: Iterable[int], groups: int) -> dict[int, int]:
    """Periods -> `groups` contiguous groups of about equal fitting work (a fit costs about
    as much as the (period, path) counts up to its period), for fitting in parallel."""
    ordered = np.sort(np.fromiter(periods, np.int64))
    if not len(ordered):
        return {}
    cost = np.searchsorted(np.sort(counts.period_end_ms.to_numpy(np.int64)), ordered,
                           side="right").astype(np.float64) + 1.0
    done_before = np.cumsum(cost) - cost
    group = np.minimum((done_before / cost.sum() * groups).astype(np.int64), groups - 1)
    return dict(zip(ordered.tolist(), group.tolist(), strict=True))


def path_counts(journeys: pd.DataFrame) -> pd.DataFrame:
    """Conversions and non-conversions per (refit period, path) of the counted journeys."""
    counted = journeys[journeys.counted]
    return (counted.assign(conversions=counted.converted.astype(np.float64),
                           non_conversions=(~counted.converted).astype(np.float64))
            .groupby(["period_end_ms", "path"], as_index=False)[
                ["conversions", "non_conversions"]].sum())
