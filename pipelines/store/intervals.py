"""The credit intervals in the warehouse: the credit rows they are computed from, one day
at a time (attribution_credits), and the intervals themselves (credit_intervals) for the
dashboard. `seedance intervals` (jobs/commands/intervals.py) runs them; the statistics are
udfs/attribution/intervals.py's.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd

from pipelines.store.sinks import KeyGroupSink
from pipelines.store.warehouse import Warehouse
from schemas import rows

# what credit_intervals_of_rows reads of a credit row
CREDIT_COLUMNS = ("model", "order_id", "channel", "credit", "revenue", "conversion_date")


def _models_clause(models: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    if not models:
        return "", ()
    return f" AND model IN ({', '.join('?' for _ in models)})", models


def credit_days(warehouse: Warehouse, first: str | None = None, last: str | None = None,
                models: tuple[str, ...] = ()) -> list[str]:
    """The days (YYYY-MM-DD, ascending) with credit rows from `first` to `last` (both
    included; open where None), of `models` only when given."""
    where, params = _models_clause(models)
    if first is not None:
        where, params = f"{where} AND conversion_date >= ?", (*params, first)
    if last is not None:
        where, params = f"{where} AND conversion_date <= ?", (*params, last)
    return [str(day) for (day,) in warehouse.query(
        f"SELECT DISTINCT conversion_date FROM attribution_credits WHERE 1 = 1{where} "
        "ORDER BY conversion_date", params)]


def credit_rows_of_day(warehouse: Warehouse, day: str,
                       models: tuple[str, ...] = ()) -> pd.DataFrame:
    """The credit rows of the orders of one day (CREDIT_COLUMNS), of `models` only when
    given: what one day's intervals need, so memory is bounded by the largest day."""
    where, params = _models_clause(models)
    found = warehouse.query(
        f"SELECT {', '.join(CREDIT_COLUMNS)} FROM attribution_credits "
        f"WHERE conversion_date = ?{where}", (day, *params))
    frame = pd.DataFrame(found, columns=list(CREDIT_COLUMNS))
    return frame.astype({"credit": np.float64, "revenue": np.float64})


def store_intervals(warehouse: Warehouse, intervals: pd.DataFrame, level: float, seed: int,
                    computed_at: str | None = None) -> int:
    """Replace each (model, period) of credit_intervals_of_rows' output (period column
    `conversion_date`) with its CREDIT_INTERVAL rows: a channel a recomputation no longer
    credits does not keep its old row. Returns how many rows were written."""
    computed_at = computed_at or datetime.now(UTC).isoformat(timespec="seconds")
    frame = intervals.rename(columns={"conversion_date": "period"}).assign(
        level=float(level), seed=int(seed), computed_at=computed_at)
    frame = frame.astype({"model": str, "period": str})  # the group's TEXT columns
    names = rows.CREDIT_INTERVAL.names
    values = [tuple(v.item() if isinstance(v, np.generic) else v for v in row)
              for row in frame[list(names)].itertuples(index=False, name=None)]
    KeyGroupSink(warehouse, rows.CREDIT_INTERVAL, ("model", "period")).replace(values)
    return len(values)


def latest_intervals(warehouse: Warehouse, model: str) -> pd.DataFrame:
    """One model's intervals of its newest period (CREDIT_INTERVAL columns), the largest
    credit first; empty when none were computed."""
    names = rows.CREDIT_INTERVAL.names
    found = warehouse.query(
        f"SELECT {', '.join(names)} FROM credit_intervals WHERE model = ? AND period = "
        "(SELECT MAX(period) FROM credit_intervals WHERE model = ?) "
        "ORDER BY credit DESC, channel", (model, model))
    return pd.DataFrame(found, columns=list(names))
