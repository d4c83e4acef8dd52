"""The backfill's writes (jobs/backfill.py): one transaction per day replaces the day's
rows of attribution_credits (by conversion_date), roi_daily, roi_unallocated and
order_costs and records the day in backfill_runs (schemas/rows.py BACKFILL_RUN), so a day
listed there is complete and a run started again with the same run id skips it.
"""

from __future__ import annotations

from collections.abc import Callable

from pipelines.store.sinks import CreditsSink, RoiSink
from pipelines.store.warehouse import Warehouse
from schemas import rows

Rows = list[tuple[object, ...]]


def finished_days(warehouse: Warehouse, run_id: str) -> dict[str, str]:
    """The days run `run_id` finished, with when."""
    return dict(warehouse.query(
        f"SELECT day, finished_at FROM {rows.BACKFILL_RUN.table} WHERE run_id = ?",
        (run_id,)))


def forget_run(warehouse: Warehouse, run_id: str) -> None:
    """Forget the days run `run_id` finished (--restart: they are done again)."""
    warehouse.delete(rows.BACKFILL_RUN, ("run_id",), (run_id,))


def write_day(warehouse: Warehouse, day: str, credits: Rows, roi: Rows, unallocated: Rows,
              progress_row: tuple[object, ...],
              before_commit: Callable[[str], None] | None = None,
              orders: Rows | None = None, segments: Rows | None = None) -> None:
    """Replace one day's partition of the result tables, and mark it done (a BACKFILL_RUN
    row), atomically. `segments`: the order_segments rows of the day (costs shared by LTV
    segment); None leaves that table alone."""
    with warehouse.transaction():
        # through the tables' one writer, the loader's sinks
        RoiSink(warehouse).replace_day(day, roi, unallocated, orders or [], segments)
        CreditsSink(warehouse).replace_day(day, credits)
        warehouse.store(rows.BACKFILL_RUN, [progress_row])
        if before_commit:
            before_commit(day)  # tests simulate a crash here: the day must roll back


# -- what the backfill reads of the warehouse (jobs/backfill.py) -------------------------------
def spend_rows(warehouse: Warehouse, currency: str, first: str, last: str) -> Rows:
    """(platform, account, campaign, day, amount) of the ad spend in `currency` over the days
    [first, last]."""
    return warehouse.query(
        "SELECT platform, account, campaign, day, amount FROM ad_spend WHERE currency = ? "
        "AND day >= ? AND day <= ?", (currency, first, last))


def call_cost_rows(warehouse: Warehouse, first_ms: int, until_ms: int) -> Rows:
    """(gpu_uuid, trace_id, interval end, cost) of the GPU calls whose interval ends in
    [first_ms, until_ms] (gpu_call_costs)."""
    return warehouse.query(
        "SELECT gpu_uuid, trace_id, interval_end_ms, cost_usd FROM gpu_call_costs "
        "WHERE interval_end_ms >= ? AND interval_end_ms <= ?", (first_ms, until_ms))


def idle_cost_rows(warehouse: Warehouse, first_ms: int, until_ms: int) -> Rows:
    """(gpu_uuid, interval end, cost) of the idle GPU time whose interval ends in
    [first_ms, until_ms] (gpu_idle_costs)."""
    return warehouse.query(
        "SELECT gpu_uuid, interval_end_ms, cost_usd FROM gpu_idle_costs "
        "WHERE interval_end_ms >= ? AND interval_end_ms <= ?", (first_ms, until_ms))


def stored_orders(warehouse: Warehouse, model: str, through: str) -> Rows:
    """(order_id, user_id, order time, revenue, day) of every order of a known user up to the
    day `through`, from its credits under `model` (a model's credits of an order sum to 1)."""
    return warehouse.query(
        "SELECT order_id, user_id, conversion_ts_ms, SUM(revenue), conversion_date FROM "
        "attribution_credits WHERE model = ? AND conversion_date <= ? AND user_id <> '' "
        "GROUP BY order_id, user_id, conversion_ts_ms, conversion_date", (model, through))
