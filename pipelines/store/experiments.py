"""The experiments in the warehouse: what the strategy table is computed from, and the
table itself (experiment_results) for the dashboard.

An exposed user's order carries its revenue and allocated cost from order_costs, under the
experiments' cost model (`experiments.cost_model`); an order the ROI job has not reported
yet has no cost row and counts with its revenue alone (`ExperimentInputs.uncosted` says
how many).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd

from pipelines.store.sinks import KeyGroupSink
from pipelines.store.warehouse import Warehouse
from schemas import rows
from udfs.periods import day_of


@dataclass(frozen=True)
class ExperimentInputs:
    exposures: pd.DataFrame  # flag_key, variant, user_id, first_exposure_ms
    conversions: pd.DataFrame  # + order_id, conversion_ts_ms, revenue, ad_spend, compute_cost
    uncosted: int  # exposed users' orders without a cost row (yet)

    @property
    def last_day(self) -> str | None:
        """The newest UTC day with a first exposure: a window ending later would hold no
        newly exposed users."""
        if not len(self.exposures):
            return None
        newest = int(self.exposures.first_exposure_ms.max())
        return day_of(newest)


def experiment_inputs(warehouse: Warehouse, cost_model: str,
                      flag_key: str | None = None, holdouts: str = "") -> ExperimentInputs:
    """The exposures and the exposed users' orders with their allocated cost: of one flag,
    or of every flag but the holdouts' (named `holdouts`<channel>: `seedance
    incrementality` reports them)."""
    where, params = ("WHERE flag_key = ?", (flag_key,)) if flag_key else \
        ("WHERE flag_key NOT LIKE ?", (holdouts.replace("%", r"\%") + "%",)) if holdouts \
        else ("", ())
    exposures = pd.DataFrame(
        warehouse.query("SELECT flag_key, variant, user_id, first_exposure_ms FROM "
                        f"experiment_exposures {where}", params),
        columns=["flag_key", "variant", "user_id", "first_exposure_ms"])
    on = "e.flag_key = ? AND" if flag_key else "e.flag_key NOT LIKE ? AND" if holdouts else ""
    conversions = pd.DataFrame(warehouse.query(
        "SELECT e.flag_key, e.variant, e.user_id, e.order_id, e.conversion_ts_ms, e.revenue, "
        "c.ad_spend, c.compute_cost, c.order_id IS NULL FROM experiment_conversions e "
        "LEFT JOIN order_costs c ON c.order_id = e.order_id AND c.model = ? "
        f"WHERE {on} 1 = 1", (cost_model, *params)),
        columns=["flag_key", "variant", "user_id", "order_id", "conversion_ts_ms", "revenue",
                 "ad_spend", "compute_cost", "uncosted"])
    uncosted = int(conversions.uncosted.astype(bool).sum()) if len(conversions) else 0
    conversions = conversions.drop(columns="uncosted").fillna(
        {"ad_spend": 0.0, "compute_cost": 0.0}).astype(
        {"revenue": float, "ad_spend": float, "compute_cost": float,
         "conversion_ts_ms": "int64"})
    return ExperimentInputs(exposures.astype({"first_exposure_ms": "int64"}), conversions,
                            uncosted)


def _value(value: object) -> object:
    """A cell as SQL takes it: numpy scalars as Python ones, NaN as NULL."""
    if hasattr(value, "item"):
        value = value.item()  # type: ignore[union-attr]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def store_results(warehouse: Warehouse, stats: pd.DataFrame) -> int:
    """Replace each (experiment, window end) of the window statistics
    (udfs.experiments.statistics.STATS_COLUMNS) with its experiment_results rows: a variant no
    longer in the data does not keep its old row. Returns how many rows were written."""
    computed_at = datetime.now(UTC).isoformat(timespec="seconds")
    frame = stats.assign(computed_at=computed_at,
                         # the group's TEXT columns
                         flag_key=stats.flag_key.astype(str),
                         window_end=stats.window_end.astype(str),
                         control_variant=stats.control_variant.fillna("").astype(str),
                         significant=stats.significant.fillna(False).astype(bool),
                         srm=stats.srm.fillna(False).astype(bool),
                         heavy_tail=stats.heavy_tail.fillna(False).astype(bool),
                         note=stats.note.fillna("").astype(str))
    values = [tuple(_value(row[name]) for name in rows.EXPERIMENT_RESULT.names)
              for _, row in frame.iterrows()]
    KeyGroupSink(warehouse, rows.EXPERIMENT_RESULT, ("flag_key", "window_end")).replace(values)
    return len(values)


def latest_results(warehouse: Warehouse) -> pd.DataFrame:
    """Each experiment's rows of its newest window."""
    return pd.DataFrame(warehouse.query(
        f"SELECT {', '.join(rows.EXPERIMENT_RESULT.names)} FROM experiment_results r WHERE "
        "window_end = (SELECT MAX(window_end) FROM experiment_results l "
        "WHERE l.flag_key = r.flag_key) ORDER BY flag_key, is_control DESC, variant"),
        columns=list(rows.EXPERIMENT_RESULT.names))
