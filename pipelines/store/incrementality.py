"""The warehouse side of `seedance incrementality`: the holdout flags' exposures and
orders (the experiments job's tables), what each model credited a tested channel in the
test's users and days (attribution_credits), ROI per channel over a window (roi_daily),
and the three result tables (schemas/incrementality_rows.py), each replaced whole by a
run, in one transaction."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pandas as pd

from pipelines.store.sinks import TableSink
from pipelines.store.warehouse import Warehouse
from schemas import rows
from udfs.incrementality import Measure
from udfs.periods import day_end_ms, day_start_ms


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
    if measure.source == "holdout":
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
    """model, channel, conversions, revenue, cost (ad spend + compute) over [first, last]."""
    return pd.DataFrame([(m, k, float(c), float(r), float(cost)) for m, k, c, r, cost in
                         warehouse.query(
        "SELECT model, key, SUM(conversions), SUM(revenue), SUM(ad_spend + compute_cost) "
        "FROM roi_daily WHERE dimension = 'channel' AND day >= ? AND day <= ? "
        "GROUP BY model, key ORDER BY model, key", (first, last))],
        columns=["model", "channel", "conversions", "revenue", "cost"])


def roi_days(warehouse: Warehouse) -> tuple[str, str] | None:
    (first, last), = warehouse.query("SELECT MIN(day), MAX(day) FROM roi_daily")
    return None if first is None else (str(first), str(last))


def store(warehouse: Warehouse, measures: list[Measure], level: float, factors: pd.DataFrame,
          calibrated: pd.DataFrame, first: str, last: str, currency: str) -> None:
    computed_at = datetime.now(UTC).isoformat(timespec="seconds")
    tests = []
    for m in measures:
        for metric, figure in (("conversions", m.conversions), ("revenue", m.revenue)):
            if figure is not None:
                tests.append((m.test_id, metric, m.channel, m.source, m.start_day, m.end_day,
                              m.exposed_users, m.held_out_users, *figure, level, computed_at))
    factor_rows = [tuple(_plain(row[name]) for name in rows.CALIBRATION_FACTOR.names)
                   for _, row in factors.iterrows()]
    roi_rows = [tuple(_plain(row[name]) for name in rows.ROI_CALIBRATED.names)
                for _, row in calibrated.assign(first_day=first, last_day=last,
                                                currency=currency).iterrows()]
    with warehouse.transaction():
        for row, values in ((rows.LIFT_TEST, tests), (rows.CALIBRATION_FACTOR, factor_rows),
                            (rows.ROI_CALIBRATED, roi_rows)):
            TableSink(warehouse, row).replace_all(values)


def _plain(value: object) -> object:
    """A cell as SQL takes it: numpy scalars as Python ones, NaN as NULL."""
    if hasattr(value, "item"):
        value = value.item()  # type: ignore[union-attr]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
