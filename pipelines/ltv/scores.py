"""`seedance ltv score`: each customer's summary and what a fitted LtvModel expects of it,
written to CSV a chunk of customers at a time (memory holds the summaries, not the
scores).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from udfs.ltv import CustomerSummaries, LtvModel

SCORE_COLUMNS = ("customer", "frequency", "recency", "age", "monetary", "p_alive",
                 "expected_purchases", "expected_order_value", "ltv")
CHUNK_ROWS = 200_000
DAYS_PER_YEAR = 365.25


def per_period_rate(annual_rate: float, period_days: float) -> float:
    """The discount rate per period of `period_days` days equivalent to `annual_rate`."""
    if not annual_rate > -1:
        raise ValueError(f"--discount-rate must be above -1, got {annual_rate:g}")
    return float((1.0 + annual_rate) ** (period_days / DAYS_PER_YEAR) - 1.0)


def score_table(model: LtvModel, ids: np.ndarray, summaries: CustomerSummaries,
                horizon: float, discount_rate: float) -> pa.Table:
    """SCORE_COLUMNS of these customers; horizon in periods, discount_rate per period."""
    purchases, spend = model.purchases, model.spend
    return pa.table({
        "customer": pa.array(ids, type=pa.string()),
        "frequency": summaries.frequency,
        "recency": summaries.recency,
        "age": summaries.age,
        "monetary": summaries.monetary,
        "p_alive": purchases.probability_alive(summaries),
        "expected_purchases": purchases.expected_purchases(horizon, summaries),
        "expected_order_value": spend.expected_order_value(summaries),
        "ltv": model.lifetime_value(summaries, horizon, discount_rate),
    })


@dataclass
class ScoreTotals:
    customers: int = 0
    expected_purchases: float = 0.0
    ltv: float = 0.0
    p_alive: float = 0.0  # summed

    def add(self, table: pa.Table) -> None:
        self.customers += table.num_rows
        for name in ("expected_purchases", "ltv", "p_alive"):
            column = table.column(name).to_numpy()
            setattr(self, name, getattr(self, name) + float(column.sum()))


def write_scores(model: LtvModel, ids: np.ndarray, summaries: CustomerSummaries, out: Path,
                 horizon: float, discount_rate: float, chunk_rows: int = CHUNK_ROWS,
                 progress: Callable[[str], None] | None = None) -> ScoreTotals:
    """Score the customers `chunk_rows` at a time into the CSV `out` (SCORE_COLUMNS);
    `progress` hears after each chunk when there is more than one."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
    totals = ScoreTotals()
    started = time.perf_counter()
    schema = score_table(model, ids[:0], summaries.take(np.arange(0)), horizon,
                         discount_rate).schema
    # Arrow writes each float in its shortest form that reads back to the same number (and
    # quotes the customer ids); the header goes first, unquoted
    options = pacsv.WriteOptions(include_header=False, quoting_style="needed")
    with open(out, "wb") as handle, pacsv.CSVWriter(handle, schema,
                                                    write_options=options) as writer:
        handle.write((",".join(SCORE_COLUMNS) + "\n").encode())
        for lo in range(0, len(summaries), chunk_rows):
            rows = np.arange(lo, min(lo + chunk_rows, len(summaries)))
            table = score_table(model, ids[rows], summaries.take(rows), horizon, discount_rate)
            writer.write_table(table)
            totals.add(table)
            if progress is not None and len(summaries) > chunk_rows:
                progress(f"scored {totals.customers:,} of {len(summaries):,} customers "
                         f"({time.perf_counter() - started:.1f}s)")
    return totals
