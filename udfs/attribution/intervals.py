"""How sure is a channel's credit: bootstrap intervals of attributed totals.

The scheme is a Poisson bootstrap over journeys: each resample gives every journey a weight
drawn from Poisson(1) and recomputes the channel totals with those weights. Why Poisson and
not the classic multinomial (n draws with replacement):
- a path-summary row that stands for c journeys is resampled exactly as c separate journeys
  would be, by one draw: the sum of c independent Poisson(1) weights is Poisson(c) (the
  conversions and non-conversions of a row are drawn apart, Poisson(conversions) and
  Poisson(non_conversions)); fractional counts work the same way;
- draws are independent per row, so a resample is one vectorised draw and resamples can
  be taken chunk by chunk without holding a (resamples x journeys) matrix;
- the number of journeys varies between resamples like the traffic of a period does: the
  interval of a total covers the expected total of a period with the same traffic rate. The
  share of a channel (its credit over the model's total) is a ratio, free of that volume
  noise; for a fixed number of journeys read the share.
Revenue rides on conversions: a row's revenue is resampled as revenue x (drawn
conversions / conversions), its revenue per conversion being fixed.

Per-conversion models (`udfs.attribution.models.PER_CONVERSION_MODELS`) credit a journey from the
journey alone, so its credit per conversion is fixed and a resample is a weighted sum: one
sparse matrix product per chunk of resamples. Data-driven models (`shapley`, `markov`) are
refitted on every resample (the resampled counts change the model), which costs a fit per
resample: they get fewer resamples (DEFAULT_REFIT_RESAMPLES). A refit runs on the distinct
touch sequences with their resampled counts (what the fit depends on), reusing one index of
those sequences across resamples.

Intervals are percentile intervals; the standard error is the resamples' standard deviation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import sparse

from schemas.records import UNATTRIBUTED
from udfs.attribution.models import (
    PER_CONVERSION_MODELS,
    ModelParams,
    attribute,
    touch_weights,
    validate_models,
)
from udfs.journeys import JourneyTable, from_coded_paths

DEFAULT_RESAMPLES = 2000
DEFAULT_REFIT_RESAMPLES = 200  # data-driven models: one full fit per resample
_CHUNK_CELLS = 1 << 22  # Poisson weights drawn at once (resamples x rows): ~32 MB
_PATH_INDEX = ("lengths", "journey_of_touch", "position")  # the cached index of a table


# --- summaries of resampled totals ----------------------------------------------------

def _check(level: float, resamples: int) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    if resamples < 2:
        raise ValueError(f"at least 2 resamples are needed, got {resamples}")


def _check_finite(name: str, values: np.ndarray, where: Callable[[int], str],
                  non_negative: bool = False) -> None:
    """A ValueError naming `name` and the first row where `values` is NaN, infinite (or
    negative): such a row would turn every total and share it is in into NaN or 0."""
    bad = ~np.isfinite(values) | ((values < 0) if non_negative else False)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        kind = "a finite number of at least 0" if non_negative else "a finite number"
        raise ValueError(f"{name} must be {kind}: {int(bad.sum())} rows are not (e.g. "
                         f"{where(first)}: {values[first]})")


def _shares(totals: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Each column's share of `denominator` (per row; 0 where the denominator is 0)."""
    return np.divide(totals, denominator, out=np.zeros_like(totals),
                     where=denominator != 0)


def _describe(name: str, resampled: np.ndarray, level: float) -> dict[str, np.ndarray]:
    """Percentile interval and standard error of every column of (resamples x columns)."""
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(resampled, [tail, 1.0 - tail], axis=0)
    return {f"{name}_low": low, f"{name}_high": high,
            f"{name}_se": resampled.std(axis=0, ddof=1)}


def _poisson_chunks(rng: np.random.Generator, means: np.ndarray,
                    resamples: int) -> Iterator[np.ndarray]:
    """Poisson(means) weights, (k x len(means)) at a time, `resamples` rows in all."""
    chunk = max(1, _CHUNK_CELLS // max(len(means), 1))
    for start in range(0, resamples, chunk):
        yield rng.poisson(means, size=(min(chunk, resamples - start), len(means))) \
            .astype(np.float64)


# --- the table side -------------------------------------------------------------------

@dataclass(frozen=True)
class _Groups:
    """Credit columns: channel (or channel x campaign) codes, then one for UNATTRIBUTED."""

    of_touch: np.ndarray
    width: int  # campaigns per channel (1 without campaigns)
    count: int  # columns including UNATTRIBUTED

    @classmethod
    def of(cls, table: JourneyTable, by_campaign: bool) -> _Groups:
        width = len(table.campaigns) if by_campaign else 1
        of_touch = table.touch_channel * width + (table.touch_campaign if by_campaign else 0)
        return cls(of_touch, width, len(table.channels) * width + 1)


def _credit_matrix(table: JourneyTable, weights: np.ndarray, groups: _Groups) -> sparse.csr_array:
    """Credit of one conversion of each journey per column (rows x columns, sparse): its
    touch weights summed per column; a journey without touches credits UNATTRIBUTED."""
    empty = np.flatnonzero(table.lengths == 0)
    rows = np.concatenate([table.journey_of_touch, empty])
    cols = np.concatenate([groups.of_touch, np.full(len(empty), groups.count - 1)])
    data = np.concatenate([weights, np.ones(len(empty))])
    return sparse.csr_array((data, (rows, cols)), shape=(table.size, groups.count))


def _revenue_per_conversion(table: JourneyTable) -> np.ndarray:
    return np.divide(table.revenue, table.conversions, out=np.zeros(table.size),
                     where=table.conversions > 0)


def _fixed_revenue(table: JourneyTable, matrix: sparse.csr_array) -> np.ndarray:
    """Column totals of revenue on rows without conversions (not a real shape, but
    `attribute` credits it): held fixed, there is no conversion to resample it with."""
    return matrix.T @ np.where(table.conversions > 0, 0.0, table.revenue)


def _per_conversion_totals(table: JourneyTable, models: list[str], params: ModelParams,
                           groups: _Groups, resamples: int, rng: np.random.Generator
                           ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Resampled (conversions, revenue) column totals per model, (resamples x columns)
    each: fixed per-journey credits, so each chunk of resamples is one matrix product."""
    if not models:
        return {}
    converting = np.flatnonzero(table.conversions > 0)
    matrices, fixed = {}, {}
    for model in models:
        matrix = _credit_matrix(table, touch_weights(table, model, params), groups)
        fixed[model] = _fixed_revenue(table, matrix)
        matrices[model] = matrix[converting].T.tocsr()  # columns x converting rows
    per_conversion = _revenue_per_conversion(table)[converting]
    parts: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {m: ([], []) for m in models}
    for weights in _poisson_chunks(rng, table.conversions[converting], resamples):
        revenue_weights = (weights * per_conversion).T
        for model, matrix in matrices.items():
            parts[model][0].append((matrix @ weights.T).T)
            parts[model][1].append((matrix @ revenue_weights).T + fixed[model])
    return {m: (np.vstack(conv), np.vstack(rev)) for m, (conv, rev) in parts.items()}


@dataclass(frozen=True)
class _Sequences:
    """The distinct touch sequences (of credit columns) of a table: the rows a refit needs.
    Journeys with the same sequence get the same credit from a fitted data-driven model."""

    of_row: np.ndarray  # sequence of each journey row
    table: JourneyTable  # one row per sequence, counts to be filled per resample
    columns: np.ndarray  # credit column of each touch of `table`
    empty: np.ndarray  # sequences without touches (credited to UNATTRIBUTED)

    @classmethod
    def of(cls, table: JourneyTable, groups: _Groups) -> _Sequences:
        of_row = np.empty(table.size, np.int64)
        first_rows: list[np.ndarray] = []
        found = 0
        for length in np.unique(table.lengths):  # one 2-d unique per path length
            rows = np.flatnonzero(table.lengths == length)
            keys = groups.of_touch[table.offsets[rows][:, None] + np.arange(length)]
            _, first, inverse = np.unique(keys, axis=0, return_index=True,
                                          return_inverse=True)
            of_row[rows] = found + inverse.ravel()
            first_rows.append(rows[first])
            found += len(first)
        rows = np.concatenate(first_rows).astype(np.int64)
        lengths = table.lengths[rows]
        before = np.cumsum(lengths) - lengths
        touches = np.repeat(table.offsets[rows] - before, lengths) + np.arange(lengths.sum())
        zeros = np.zeros(len(rows))
        distinct = from_coded_paths(table.channels, table.touch_channel[touches], lengths,
                                    zeros, zeros, zeros)
        for name in _PATH_INDEX:  # fill the cache once: every refit's table shares it
            getattr(distinct, name)
        return cls(of_row, distinct, groups.of_touch[touches], np.flatnonzero(lengths == 0))

    def with_counts(self, conversions: np.ndarray, non_conversions: np.ndarray) -> JourneyTable:
        table = replace(self.table, conversions=conversions, non_conversions=non_conversions)
        # the index of the paths does not change with the counts: reuse the cached one
        table.__dict__.update({name: self.table.__dict__[name] for name in _PATH_INDEX})
        return table

    def totals(self, weights: np.ndarray, amount: np.ndarray, groups: _Groups) -> np.ndarray:
        """Column totals of `amount` per sequence spread by the per-touch `weights`."""
        spread = weights * amount[self.table.journey_of_touch]
        out = np.bincount(self.columns, weights=spread, minlength=groups.count)
        out[-1] += amount[self.empty].sum()
        return out


def _refit_totals(table: JourneyTable, models: list[str], params: ModelParams,
                  groups: _Groups, resamples: int, rng: np.random.Generator
                  ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Resampled (conversions, revenue) totals of data-driven models, one refit each."""
    if not models:
        return {}
    sequences = _Sequences.of(table, groups)
    n = int(sequences.of_row.max(initial=-1)) + 1
    per_conversion = _revenue_per_conversion(table)
    fixed_revenue = np.bincount(sequences.of_row, minlength=n,
                                weights=np.where(table.conversions > 0, 0.0, table.revenue))
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {
        m: (np.empty((resamples, groups.count)), np.empty((resamples, groups.count)))
        for m in models}
    for b in range(resamples):
        drawn = rng.poisson(table.conversions).astype(np.float64)
        conversions = np.bincount(sequences.of_row, weights=drawn, minlength=n)
        non_conversions = np.bincount(sequences.of_row, minlength=n,
                                      weights=rng.poisson(table.non_conversions))
        revenue = np.bincount(sequences.of_row, weights=drawn * per_conversion,
                              minlength=n) + fixed_revenue
        refit_table = sequences.with_counts(conversions, non_conversions)
        for model in models:
            weights = touch_weights(refit_table, model, params)
            out[model][0][b] = sequences.totals(weights, conversions, groups)
            out[model][1][b] = sequences.totals(weights, revenue, groups)
    return out


def _column_names(table: JourneyTable, groups: _Groups, by_campaign: bool) -> pd.DataFrame:
    """The names `attribute` gives each credit column, with the column's index."""
    columns = np.arange(groups.count)
    attributed = columns < groups.count - 1
    channels = np.asarray(table.channels + (UNATTRIBUTED,), dtype=object)
    names = {"channel": channels[np.where(attributed, columns // groups.width, -1)]}
    if by_campaign:
        campaigns = np.asarray(table.campaigns + ("",), dtype=object)
        names["campaign"] = campaigns[np.where(attributed, columns % groups.width, -1)]
    return pd.DataFrame({**names, "column": columns})


def _interval_columns(point: pd.DataFrame, conversions: np.ndarray, revenue: np.ndarray,
                      level: float) -> dict[str, np.ndarray]:
    """Interval columns of one model's rows of `point` (their credit column in `column`)."""
    columns = point["column"].to_numpy()
    shares = {"share": _shares(conversions, conversions.sum(axis=1, keepdims=True)),
              "revenue_share": _shares(revenue, revenue.sum(axis=1, keepdims=True))}
    out = {**_describe("conversions", conversions[:, columns], level),
           **_describe("revenue", revenue[:, columns], level)}
    for name, resampled in shares.items():
        out.update(_describe(name, resampled[:, columns], level))
    return out


def credit_intervals(table: JourneyTable, models: tuple[str, ...],
                     params: ModelParams | None = None, level: float = 0.95,
                     resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                     by_campaign: bool = False,
                     refit_resamples: int = DEFAULT_REFIT_RESAMPLES) -> pd.DataFrame:
    """Credited conversions and revenue per model and channel (and campaign), exactly as
    `udfs.attribution.models.attribute` gives them, with Poisson-bootstrap percentile intervals at
    `level`, standard errors, and each channel's share of the model's credit (`share`: of
    conversions, `revenue_share`: of revenue) with its interval. Per-conversion models
    use `resamples`, data-driven ones min(resamples, refit_resamples) (one refit each); the
    number used is in `resamples`. Same seed, same output."""
    _check(level, resamples)
    for name in ("conversions", "non_conversions"):
        _check_finite(name, getattr(table, name), "journey row {}".format, non_negative=True)
    _check_finite("revenue", table.revenue, "journey row {}".format)
    params = params or ModelParams()
    models = validate_models(models)
    point, _ = attribute(table, models, params, by_campaign)
    groups = _Groups.of(table, by_campaign)
    keys = ["model", "channel", *(["campaign"] if by_campaign else [])]
    point = point.merge(_column_names(table, groups, by_campaign), on=keys[1:], how="left")
    per_conversion_rng, refit_rng = (np.random.default_rng(s)
                                     for s in np.random.SeedSequence(seed).spawn(2))
    simple = [m for m in models if m in PER_CONVERSION_MODELS]
    fitted = [m for m in models if m not in PER_CONVERSION_MODELS]
    refits = min(resamples, refit_resamples)
    totals = {**_per_conversion_totals(table, simple, params, groups, resamples,
                                       per_conversion_rng),
              **_refit_totals(table, fitted, params, groups, refits, refit_rng)}
    frames = []
    for model, rows in point.groupby("model", sort=False):
        rows = rows.copy()
        conversions, revenue = totals[str(model)]
        for share, amount in (("share", "conversions"), ("revenue_share", "revenue")):
            total = rows[amount].sum()
            rows[share] = rows[amount] / total if total else 0.0
        for name, values in _interval_columns(rows, conversions, revenue, level).items():
            rows[name] = values
        rows["resamples"] = len(conversions)
        frames.append(rows)
    columns = [*keys, *_measure_columns(), "resamples"]
    if not frames:  # nothing converted: no credit to put an interval on
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)[columns]


def _measure_columns(measures: tuple[str, ...] = ("conversions", "revenue", "share",
                                                  "revenue_share")) -> list[str]:
    return [f"{m}{suffix}" for m in measures for suffix in ("", "_low", "_high", "_se")]


# --- the warehouse side -----------------------------------------------------------------

def _block_shares(totals: np.ndarray, block: np.ndarray) -> np.ndarray:
    """Each column's share of its block's total (columns x resamples in `totals` rows)."""
    sums = np.zeros((totals.shape[0], int(block.max(initial=-1)) + 1))
    np.add.at(sums.T, block, totals.T)
    return _shares(totals, sums[:, block])


def credit_intervals_of_rows(credits: pd.DataFrame, level: float = 0.95,
                             resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                             period: str = "conversion_date") -> pd.DataFrame:
    """Channel totals of per-conversion credit rows (columns model, order_id, channel,
    credit, revenue and `period`, as in the warehouse's attribution_credits) per model and
    period, with Poisson-bootstrap intervals over orders: which conversions happened is
    resampled, each order's credits are taken as given (exact for the per-conversion
    models; for a data-driven model the refit's own noise is left out). An order weighs
    the same under every model of a resample, so the models stay comparable. Returns
    model, period, channel, credit, revenue, share (of the model's credit in the period),
    revenue_share, each with _low, _high and _se, and resamples."""
    _check(level, resamples)
    for name in ("credit", "revenue"):
        _check_finite(name, credits[name].to_numpy(np.float64),
                      lambda row: f"order {credits.order_id.iloc[row]}")
    cell_keys = ["model", period, "channel"]
    cells = credits.groupby(cell_keys, sort=True, dropna=False)
    point = cells[["credit", "revenue"]].sum().reset_index()
    cell = cells.ngroup().to_numpy()
    order = credits.groupby([period, "order_id"], sort=False, dropna=False).ngroup().to_numpy()
    block = point.groupby(["model", period], sort=False, dropna=False).ngroup().to_numpy()
    shape = (len(point), int(order.max(initial=-1)) + 1)
    by_order = {name: sparse.csr_array((credits[name].to_numpy(np.float64), (cell, order)),
                                       shape=shape) for name in ("credit", "revenue")}
    parts: dict[str, list[np.ndarray]] = {"credit": [], "revenue": []}
    rng = np.random.default_rng(seed)
    for weights in _poisson_chunks(rng, np.ones(shape[1]), resamples):
        for name, matrix in by_order.items():
            parts[name].append((matrix @ weights.T).T)
    resampled = {name: np.vstack(chunks) for name, chunks in parts.items()}
    resampled["share"] = _block_shares(resampled["credit"], block)
    resampled["revenue_share"] = _block_shares(resampled["revenue"], block)
    point["share"] = _block_shares(point[["credit"]].to_numpy().T, block)[0]
    point["revenue_share"] = _block_shares(point[["revenue"]].to_numpy().T, block)[0]
    for name, values in resampled.items():
        for column, described in _describe(name, values, level).items():
            point[column] = described
    point["resamples"] = resamples
    measures = _measure_columns(("credit", "revenue", "share", "revenue_share"))
    return point[[*cell_keys, *measures, "resamples"]]
