"""The LTV refresh of the warehouse: every customer scored (customer_ltv) and the LTV-based
return per attribution model, channel and campaign (ltv_return), from the orders, costs
and spend already there (udfs/ltv/segments.py, udfs/ltv/channel_return.py; docs/ltv-return.md).

Orders are read from attribution_credits: a model's credits of one order sum to 1, so the
order's revenue is the sum of its credit revenue under one model; an order without a
resolvable user (user_id '') belongs to no customer. Costs come from order_costs (the ROI
job's allocation per model), spend from ad_spend. Progress goes to stderr.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import numpy as np
import pandas as pd

from pipelines.ltv.evaluate import Evaluation, evaluate, holdout_window
from pipelines.ltv.stray_dates import stray_days
from pipelines.ltv.transactions import transactions_from_warehouse, transactions_through
from pipelines.store.ltv import (
    credit_frame,
    order_cost_frame,
    spend_frame,
    write_customer_ltv,
    write_ltv_calibration,
    write_ltv_return,
)
from pipelines.store.warehouse import Warehouse, redacted_url
from udfs.lifecycle import StageWeights
from udfs.ltv import (
    CUTS,
    SEGMENTS,
    LtvModel,
    OrderSegmenter,
    SegmentWeights,
    bootstrap_models,
    fit_model,
    fit_warnings,
    ltv_return,
    orders_of,
    score_customers,
    summaries_from_transactions,
    tallies_of,
)
from udfs.periods import DAY_MS, day_number, day_of
from udfs.ratios import GROSS_MARGIN


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class LtvRefresh:
    """What a refresh wrote."""

    as_of_day: str
    horizon_days: int
    model: LtvModel  # the model the customers were scored with
    fitted: bool  # True: fitted by this refresh; False: the model given
    rounds: int  # bootstrap models behind the intervals
    customers: int  # rows of customer_ltv
    segments: dict[str, int]  # customers per segment
    predicted_ltv: float  # sum over customers of their predicted LTV
    return_rows: int  # rows of ltv_return
    currency: str
    # per attribution model, over its channels: customers, acquisition_cost,
    # first_order_revenue, predicted_value
    totals: dict[str, dict[str, float]] = field(default_factory=dict)
    # why the model fitted is no estimate (udfs/ltv/models/identify.py); empty for a given model
    warnings: list[str] = field(default_factory=list)


def refresh_ltv(warehouse: Warehouse, horizon_days: int = 365, model: LtvModel | None = None,
                rounds: int = 100, as_of: str | None = None, *, level: float = 0.9,
                seed: int = 0, period_days: float = 7.0, gross_margin: float = GROSS_MARGIN,
                stage_weights: StageWeights | None = None,
                segment_weights: SegmentWeights | None = None,
                segmenter: OrderSegmenter | None = None, cuts: Sequence[float] = CUTS,
                segments: Sequence[str] = SEGMENTS, today: float | None = None,
                progress: Callable[[str], None] = _stderr) -> LtvRefresh:
    """Score every customer and compute the LTV-based return, as of `as_of` (default: the
    last order's day), over `horizon_days`; replace customer_ltv and ltv_return with them.

    `model`: score with this model (its period); None fits BG/NBD + Gamma-Gamma on the
    customers' summaries (weeks of `period_days`). `rounds` bootstrap refits on resampled
    customers give the intervals (0: none). With `segment_weights` and `segmenter` (the
    ROI job's roi.allocation_weights: ltv_segment) acquisition cost is split over the keys
    by the orders' LTV segments, as the ROI job allocated it. With `today` (the run's
    clock, a day number) and no `as_of`, an order dated after it or far after the rest
    (pipelines/ltv/stray_dates.py) is a ValueError naming it: the last order's day would
    be the as-of day. ValueError when there is nothing to score.
    """
    if isinstance(horizon_days, bool) or int(horizon_days) != horizon_days or horizon_days < 1:
        raise ValueError(f"horizon_days must be a whole number of days >= 1, got "
                         f"{horizon_days!r}")
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")
    horizon_days = int(horizon_days)
    started = time.monotonic()
    credits = credit_frame(warehouse)
    if credits.empty:
        raise ValueError("no orders to score: attribution_credits is empty (credits arrive "
                         "with `seedance load` or a backfill)")
    if as_of is None and today is not None:
        _refuse_stray_orders(warehouse, credits, today)
    try:
        as_of_day = day_number(as_of) if as_of is not None else int(credits.day.max())
    except ValueError:
        raise ValueError(f"as_of must be a day YYYY-MM-DD, got {as_of!r}") from None
    credits = credits[credits.day <= as_of_day]
    orders = orders_of(credits)
    known = orders[orders.user_id != ""]
    if known.empty:
        raise ValueError(f"no order of a known user on or before {day_of(as_of_day * DAY_MS)}")
    period = model.period_days if model is not None else float(period_days)
    ids, summaries = summaries_from_transactions(
        known.user_id.to_numpy(dtype=object), known.day.to_numpy(dtype="float64"),
        known.revenue.to_numpy(dtype="float64"), float(as_of_day), period)
    progress(f"ltv: {len(orders):,} orders, {len(ids):,} customers as of "
             f"{day_of(as_of_day * DAY_MS)}")
    fitted = model is None
    warnings: list[str] = []
    if model is None:
        progress("ltv: fitting BG/NBD and Gamma-Gamma")
        model = fit_model(summaries, period, float(as_of_day))
        warnings = fit_warnings(summaries, model.purchases, model.spend)
    scores = score_customers(model, ids, summaries, horizon_days, cuts, segments)
    draws: list[LtvModel] = []
    if rounds:
        progress(f"ltv: {rounds} bootstrap refits for the intervals")
        draws = bootstrap_models(summaries, rounds, seed, point=model)
    progress("ltv: return per model, channel and campaign")
    order_segments = None
    if segment_weights is not None and segmenter is not None:
        order_segments = segmenter.segments(tallies_of(orders.assign(
            ts_ms=orders.day.astype("int64") * DAY_MS)))
    result = ltv_return(credits, order_cost_frame(warehouse), model, as_of_day, horizon_days,
                        spend=spend_frame(warehouse), stage_weights=stage_weights,
                        segment_weights=segment_weights, segments=order_segments,
                        gross_margin=gross_margin, draws=draws, level=level)
    as_of_text = day_of(as_of_day * DAY_MS)
    fitted_through = day_of(int(model.fitted_through_day) * DAY_MS)
    written = write_customer_ltv(warehouse, scores.assign(
        as_of_day=as_of_text, horizon_days=horizon_days, fitted_through_day=fitted_through))
    computed_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows = result.rows.assign(horizon_days=horizon_days, as_of_day=as_of_text,
                              currency=result.currency, gross_margin=float(gross_margin),
                              level=float(level), computed_at=computed_at)
    return_rows = write_ltv_return(warehouse, rows)
    progress(f"ltv: wrote {written:,} customers and {return_rows:,} return rows in "
             f"{time.monotonic() - started:.1f} s")
    return LtvRefresh(
        as_of_day=as_of_text, horizon_days=horizon_days, model=model, fitted=fitted,
        rounds=len(draws), customers=written,
        segments={name: int((scores.segment == name).sum()) for name in segments},
        predicted_ltv=float(scores.predicted_ltv.sum()), return_rows=return_rows,
        currency=result.currency, totals=_totals(result.rows), warnings=warnings)


def _refuse_stray_orders(warehouse: Warehouse, credits: pd.DataFrame, today: float) -> None:
    stray = stray_days(credits.day.to_numpy(dtype="float64"), today)
    if not stray.rows.any():
        return
    row = int(np.argmax(stray.rows))
    orders = credits.order_id[stray.rows].nunique()
    raise ValueError(
        f"{redacted_url(warehouse.url)}: order {credits.order_id.iloc[row]!r} of user "
        f"{credits.user_id.iloc[row]!r} (attribution_credits.conversion_ts_ms) "
        f"{stray.reason(row)}" + (f" (and {orders - 1} more such orders)" if orders > 1
                                  else ""))


def _totals(rows: pd.DataFrame) -> dict[str, dict[str, float]]:
    channels = rows[rows.dimension == "channel"]
    sums = channels.groupby("model")[["customers", "acquisition_cost", "first_order_revenue",
                                      "predicted_value"]].sum()
    return {str(model): {name: float(value) for name, value in values.items()}
            for model, values in sums.iterrows()}


class FrequencyCounts(Protocol):
    """One calibration frequency's holdout comparison (udfs/ltv/evaluate.py's rows)."""

    @property
    def frequency(self) -> int: ...
    @property
    def customers(self) -> int: ...
    @property
    def mean_predicted(self) -> float: ...
    @property
    def mean_actual(self) -> float: ...


def store_calibration(warehouse: Warehouse, rows: Iterable[FrequencyCounts],
                      calibration_end: float, holdout_end: float) -> int:
    """ltv_calibration := these rows (per calibration frequency, the last bucket open-ended)
    of a holdout check whose calibration ends on day `calibration_end` and holdout on day
    `holdout_end` (UTC day numbers); the number of rows."""
    computed_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    frame = pd.DataFrame(
        [(int(r.frequency), int(r.customers), float(r.mean_predicted), float(r.mean_actual))
         for r in rows if r.customers > 0],
        columns=["frequency", "customers", "predicted_purchases", "actual_purchases"])
    return write_ltv_calibration(warehouse, frame.assign(
        calibration_end=day_of(int(calibration_end) * DAY_MS),
        holdout_end=day_of(int(holdout_end) * DAY_MS), computed_at=computed_at))


def refresh_calibration(warehouse: Warehouse, calibration_weeks: float | None = None,
                        holdout_weeks: float | None = None,
                        calibration_end: float | None = None,
                        attribution_model: str = "last_click",
                        period_days: float = 7.0, today: float | None = None,
                        last_day: float | None = None) -> Evaluation:
    """The holdout check of `seedance ltv evaluate` on the warehouse's orders (credited by
    `attribution_model`; the window as pipelines.ltv.evaluate.holdout_window takes it,
    calibration_end a UTC day number), stored in ltv_calibration (the dashboard's
    calibration chart); the evaluation. `today` as refresh_ltv takes it; `last_day`: the
    orders after this day number are left out (the holdout ends there by default)."""
    transactions = transactions_from_warehouse(warehouse, attribution_model, today)
    if last_day is not None:
        transactions = transactions_through(transactions, last_day)
        if transactions.day.size == 0:
            raise ValueError(f"no order of a known user on or before "
                             f"{day_of(int(last_day) * DAY_MS)}")
    window = holdout_window(transactions, calibration_weeks, holdout_weeks, calibration_end,
                            last_day)
    result = evaluate(transactions, window, period_days)
    store_calibration(warehouse, result.comparison.by_frequency(), window.calibration_end,
                      window.holdout_end)
    return result
