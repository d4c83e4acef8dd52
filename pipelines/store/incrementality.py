"""The warehouse side of `seedance incrementality`: the holdout flags' exposures and
orders (the experiments job's tables), what each model credited a tested channel in the
test's users and days (attribution_credits), ROI per channel over a window (roi_daily),
and the three result tables (schemas/incrementality_rows.py), each replaced whole by a
run, in one transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd

from pipelines.store.sinks import TableSink, plain_rows
from pipelines.store.warehouse import Warehouse
from schemas import rows
from udfs.incrementality import Measure, calibrated_roi, factors_frame, holdout_measures
from udfs.periods import day_end_ms, day_start_ms


@dataclass(frozen=True)
class Refreshed:
    """What a run found and stored: the tests, the calibrated ROI, its window."""

    measures: list[Measure]
    calibrated: pd.DataFrame
    first: str
    last: str
    skipped: list[str]  # holdouts that could not be measured, and why
    savings: dict[str, float]  # per holdout: the ad spend its held-out users were spared


def refresh(warehouse: Warehouse, studies: list[Measure], prefix: str, exposed: str,
            held_out: str, alpha: float, min_cost: float, currency: str, cost_model: str,
            first: str | None = None, last: str | None = None) -> Refreshed | str:
    """Measure every holdout flag (<prefix><channel>), add the studies, calibrate each
    model's ROI per channel over [first, last] (default: roi_daily's days) and store the
    three tables; or why there is nothing to calibrate."""
    measures, skipped = list(studies), []
    for flag in holdout_flags(warehouse, prefix):
        exposures, orders = holdout_inputs(warehouse, flag)
        try:
            measures.append(holdout_measures(flag, flag.removeprefix(prefix), exposures,
                                             orders, exposed, held_out, alpha))
        except ValueError as error:  # too few users, a stray variant: the others stand
            skipped.append(str(error))
    days = roi_days(warehouse)
    if days is None:
        return "no ROI yet (run the ROI job, then `seedance load`)"
    if not measures:
        return "; ".join(skipped) if skipped else (
            f"no lift tests: no flag named {prefix}<channel> and no studies file "
            "(docs/incrementality.md)")
    first, last = first or days[0], last or days[1]
    credited = pd.concat([credited_in_test(warehouse, m, exposed) for m in measures],
                         ignore_index=True)
    factors = factors_frame(measures, credited, last)
    calibrated = calibrated_roi(roi_by_channel(warehouse, first, last), factors, min_cost)
    savings = {m.test_id: cost_saving(warehouse, m, cost_model) for m in measures
               if m.exposed_users}
    store(warehouse, measures, 1 - alpha, factors, calibrated, first, last, currency, savings)
    return Refreshed(measures, calibrated, first, last, skipped, savings)


def cost_saving(warehouse: Warehouse, measure: Measure, cost_model: str) -> float:
    """What a holdout spared: the channel's ad spend (allocated under `cost_model`) over
    the test's days per exposed user, times the held-out users (spend follows reach)."""
    (spend,), = warehouse.query(
        "SELECT COALESCE(SUM(ad_spend), 0) FROM roi_daily WHERE model = ? AND dimension = "
        "'channel' AND key = ? AND day >= ? AND day <= ?",
        (cost_model, measure.channel, measure.start_day, measure.end_day))
    exposed, held = measure.exposed_users or 0, measure.held_out_users or 0
    return float(spend) / exposed * held if exposed else 0.0


def holdout_flags(warehouse: Warehouse, prefix: str) -> list[str]:
    """The flags of holdout tests: those named <prefix><channel>."""
    return [flag for (flag,) in warehouse.query(
        "SELECT DISTINCT flag_key FROM experiment_exposures WHERE flag_key LIKE ? "
        "ORDER BY flag_key", (prefix.replace("%", r"\%") + "%",))]


def holdout_inputs(warehouse: Warehouse, flag: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(exposures: user_id, variant, first_exposure_ms; orders after the exposure:
    user_id, variant, conversion_ts_ms, revenue) of one holdout flag."""
    exposures = pd.DataFrame(warehouse.query(
        "SELECT user_id, variant, first_exposure_ms FROM experiment_exposures WHERE "
        "flag_key = ?", (flag,)), columns=["user_id", "variant", "first_exposure_ms"])
    orders = pd.DataFrame(warehouse.query(
        "SELECT user_id, variant, conversion_ts_ms, revenue FROM experiment_conversions "
        "WHERE flag_key = ?", (flag,)),
        columns=["user_id", "variant", "conversion_ts_ms", "revenue"])
    return (exposures.astype({"first_exposure_ms": "int64"}),
            orders.astype({"conversion_ts_ms": "int64", "revenue": float}))


def credited_in_test(warehouse: Warehouse, measure: Measure, exposed: str) -> pd.DataFrame:
    """test_id, model, conversions, revenue: what each model credited the test's channel
    over its days -- a holdout's: in its exposed users, after their exposure; a study's:
    in every user."""
    end_ms = day_end_ms(measure.end_day)
    if measure.exposed_users is not None:  # a holdout (a study names no users)
        found = warehouse.query(
            "SELECT a.model, SUM(a.credit), SUM(a.revenue) FROM attribution_credits a JOIN "
            "experiment_exposures e ON e.user_id = a.user_id AND e.flag_key = ? AND "
            "e.variant = ? WHERE a.channel = ? AND a.conversion_ts_ms >= e.first_exposure_ms "
            "AND a.conversion_ts_ms <= ? GROUP BY a.model",
            (measure.test_id, exposed, measure.channel, end_ms))
    else:
        found = warehouse.query(
            "SELECT model, SUM(credit), SUM(revenue) FROM attribution_credits WHERE "
            "channel = ? AND conversion_ts_ms >= ? AND conversion_ts_ms <= ? GROUP BY model",
            (measure.channel, day_start_ms(measure.start_day), end_ms))
    return pd.DataFrame([(measure.test_id, m, float(c), float(r)) for m, c, r in found],
                        columns=["test_id", "model", "conversions", "revenue"])


def roi_by_channel(warehouse: Warehouse, first: str, last: str) -> pd.DataFrame:
    """model, channel, conversions, revenue, cost (ad spend + compute) and ad_spend over
    [first, last]."""
    return pd.DataFrame([(m, k, float(c), float(r), float(cost), float(spend))
                         for m, k, c, r, cost, spend in warehouse.query(
        "SELECT model, key, SUM(conversions), SUM(revenue), SUM(ad_spend + compute_cost), "
        "SUM(ad_spend) FROM roi_daily WHERE dimension = 'channel' AND day >= ? AND day <= ? "
        "GROUP BY model, key ORDER BY model, key", (first, last))],
        columns=["model", "channel", "conversions", "revenue", "cost", "ad_spend"])


def roi_days(warehouse: Warehouse) -> tuple[str, str] | None:
    (first, last), = warehouse.query("SELECT MIN(day), MAX(day) FROM roi_daily")
    return None if first is None else (str(first), str(last))


def store(warehouse: Warehouse, measures: list[Measure], level: float, factors: pd.DataFrame,
          calibrated: pd.DataFrame, first: str, last: str, currency: str,
          savings: dict[str, float]) -> None:
    computed_at = datetime.now(UTC).isoformat(timespec="seconds")
    tests = []
    for m in measures:
        for metric, figure in (("conversions", m.conversions), ("revenue", m.revenue)):
            if figure is not None:
                tests.append((m.test_id, metric, m.channel, m.source, m.start_day, m.end_day,
                              m.exposed_users, m.held_out_users, *figure, level,
                              savings.get(m.test_id), computed_at))
    factor_rows = plain_rows(rows.CALIBRATION_FACTOR, factors)
    roi_rows = plain_rows(rows.ROI_CALIBRATED, calibrated.assign(
        first_day=first, last_day=last, currency=currency))
    with warehouse.transaction():
        for row, values in ((rows.LIFT_TEST, tests), (rows.CALIBRATION_FACTOR, factor_rows),
                            (rows.ROI_CALIBRATED, roi_rows)):
            TableSink(warehouse, row).replace_all(values)
