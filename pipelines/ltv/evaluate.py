"""`seedance ltv evaluate`: the models fitted on a calibration period and checked against
what the same customers bought in the holdout that follows (udfs/ltv/evaluate.py), as the
lines the command prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pipelines.ltv.transactions import Transactions, day_text
from udfs.ltv import (
    BgNbd,
    HoldoutComparison,
    HoldoutWindow,
    compare_holdout,
    fit_warnings,
    summaries_from_transactions,
)


def holdout_window(transactions: Transactions, calibration_weeks: float | None = None,
                   holdout_weeks: float | None = None,
                   calibration_end: float | None = None,
                   last_day: float | None = None) -> HoldoutWindow:
    """The calibration period from the first transaction's day: `calibration_weeks` long or
    up to the day `calibration_end`; the holdout `holdout_weeks` long, or else up to the
    data's last day: `last_day` when given (--as-of), else the last transaction's.
    ValueError when a period would be empty."""
    if (calibration_weeks is None) == (calibration_end is None):
        raise ValueError("give the calibration period's length (--calibration-weeks) or its "
                         "last day (--calibration-end), one of them")
    for flag, weeks in (("--calibration-weeks", calibration_weeks),
                        ("--holdout-weeks", holdout_weeks)):
        if weeks is not None and not (weeks > 0 and weeks * 7 == round(weeks * 7)):
            raise ValueError(f"{flag} must be positive and a whole number of days long, "
                             f"got {weeks:g}")
    first = math.floor(float(transactions.day.min()))
    last = math.floor(float(transactions.day.max() if last_day is None else last_day))
    if calibration_end is None:
        end = first + round(float(calibration_weeks or 0) * 7) - 1
    else:
        end = math.floor(calibration_end)
        if end < first:
            raise ValueError(f"--calibration-end {day_text(end)} is before the first "
                             f"transaction ({day_text(first)})")
    holdout_end = last if holdout_weeks is None else end + round(holdout_weeks * 7)
    if holdout_end <= end:
        raise ValueError(f"the calibration period ends on {day_text(end)}, on or after the "
                         f"last transaction ({day_text(last)}): nothing is left to hold out")
    return HoldoutWindow(first, end, holdout_end)


@dataclass(frozen=True)
class Evaluation:
    window: HoldoutWindow
    purchases: BgNbd  # fitted on the calibration period
    period_days: float
    log_likelihood: float
    comparison: HoldoutComparison
    last_day: float  # of the data
    warnings: list[str]  # why the calibration fit is no estimate (udfs/ltv/models/identify.py)


def evaluate(transactions: Transactions, window: HoldoutWindow,
             period_days: float = 7.0) -> Evaluation:
    """Fit the purchase model on the calibration period (the order-value model has no part
    in the forecast); forecast and count the cohort's holdout purchases."""
    customer, day, amount = transactions
    ids, summaries = summaries_from_transactions(customer, day, amount,
                                                 end_day=window.calibration_end,
                                                 period_days=period_days)
    if len(summaries) == 0:
        raise ValueError(f"no customer bought in the calibration period "
                         f"({day_text(window.first_day)} to {day_text(window.calibration_end)})")
    purchases = BgNbd.fit(summaries.collapsed())
    comparison = compare_holdout(purchases, ids, summaries, customer, day, window, period_days)
    return Evaluation(window, purchases, period_days, purchases.log_likelihood(summaries),
                      comparison, float(np.floor(day.max())),
                      fit_warnings(summaries, purchases))


def _span(days: float) -> str:
    weeks = days / 7
    return f"{weeks:g} weeks" if weeks == round(weeks) else f"{days:g} days"


def _periods(value: float, period_days: float) -> str:
    return f"{value:.4g}" if period_days != 7 else f"{value:.4g} weeks"


def report_lines(result: Evaluation) -> list[str]:
    """What `seedance ltv evaluate` prints."""
    window, comparison = result.window, result.comparison
    purchases, period_days = result.purchases, result.period_days
    summaries = comparison.summaries
    t = comparison.holdout_periods
    unit = "weeks" if period_days == 7 else f"periods of {period_days:g} days"
    lines = [
        f"calibration {day_text(window.first_day)} to {day_text(window.calibration_end)} "
        f"({_span(window.calibration_days)}), holdout {day_text(window.calibration_end + 1)} "
        f"to {day_text(window.holdout_end)} ({_span(window.holdout_days)}); time in {unit}",
        f"cohort: {len(summaries):,} customers whose first purchase is in the calibration "
        f"period, {summaries.frequency.sum():,.0f} repeat purchases there (distinct days)",
        f"BG/NBD fitted on the calibration: r {purchases.r:.4f}, alpha {purchases.alpha:.4f}, "
        f"a {purchases.a:.4f}, b {purchases.b:.4f}; log-likelihood {result.log_likelihood:.2f}"
        + ("; not an estimate: see the warnings" if result.warnings else ""),
    ]
    if result.last_day < window.holdout_end:
        lines.append(f"note: the data end on {day_text(result.last_day)}, "
                     f"{window.holdout_end - result.last_day:g} days before the holdout does: "
                     "the actual counts miss those days, the forecasts do not")
    forecasts = (
        (f"BG/NBD E[Y({_periods(t, period_days)}) | x, t_x, T]", comparison.predicted),
        (f"naive: x again, scaled by {window.holdout_days:g}/{window.calibration_days:g} days",
         comparison.naive_count),
        (f"naive: rate x/T over {_periods(t, period_days)}", comparison.naive_rate),
    )
    width = max(len(name) for name, _ in forecasts)
    actual = comparison.actual
    lines += ["", "holdout repeat purchases (distinct purchase days) of the cohort",
              f"{'forecast':<{width}} {'total':>10} {'vs actual':>10} {'MAE':>7} {'RMSE':>7}"]
    for name, forecast in forecasts:
        error = comparison.error(forecast)
        change = (f"{100 * (error.total / actual.sum() - 1):+.1f} %" if actual.sum() > 0
                  else "")
        lines.append(f"{name:<{width}} {error.total:>10,.1f} {change:>10} "
                     f"{error.mae:>7.3f} {error.rmse:>7.3f}")
    lines.append(f"{'actual':<{width}} {actual.sum():>10,.0f}")
    lines += ["", "mean holdout purchases per customer by calibration frequency x "
                  "(the conditional expectations of Fader, Hardie & Lee 2005)",
              f"{'x':>4} {'customers':>10} {'predicted':>10} {'actual':>10}"]
    for row in comparison.by_frequency():
        lines.append(f"{row.label:>4} {row.customers:>10,} {row.mean_predicted:>10.3f} "
                     f"{row.mean_actual:>10.3f}")
    return lines
