"""`seedance verify`'s reading: the sums each tie compares (udfs/reconcile/conservation.py)
from the warehouse's result tables, and which days the ROI job has closed (roi_days_closed),
so a day still filling is told from a break. The comparisons are stored, with their alert
events, by the reconciliation's tables' writer (pipelines/reconcile/store.py store_ties)."""

from __future__ import annotations

from typing import NamedTuple

from pipelines.store.warehouse import Warehouse
from schemas import rows
from udfs.periods import DAY_MS, day_end_ms, day_of, day_start_ms
from udfs.reconcile import (
    Comparison,
    calibrated_ties,
    compute_ties,
    gpu_ties,
    ltv_return_ties,
    order_revenue_ties,
    revenue_ties,
    spend_ties,
)
from udfs.roi import DIMENSIONS


def day_filter(column: str, first: str | None, last: str | None) -> tuple[str, list[str]]:
    clauses, params = [], []
    if first:
        clauses.append(f"{column} >= ?")
        params.append(first)
    if last:
        clauses.append(f"{column} <= ?")
        params.append(last)
    return (" AND ".join(clauses) or "1 = 1"), params


def _epoch_ms(day: str, end: bool) -> int:
    return day_end_ms(day) if end else day_start_ms(day)


class ClosedDays(NamedTuple):
    """How far the ROI job has closed the days: every day up to `rows_through` has its
    report, every day up to `compute_through` its GPU cost placed too (None: no day yet)."""

    rows_through: str
    compute_through: str | None


def closed_days(warehouse: Warehouse) -> ClosedDays | None:
    """From roi_days_closed; None where it is empty (a warehouse a ROI job from before the
    markers wrote: its days cannot be told apart). The job closes days in order (its
    watermark only advances), so the latest closed day stands for those before it, also
    the days with no input of their own and those closed before the job recorded it."""
    latest = dict(warehouse.query(
        f"SELECT part, MAX(day) FROM {rows.ROI_DAY_CLOSED.table} GROUP BY part"))
    if not latest:
        return None
    compute = str(latest["compute"]) if latest.get("compute") else None
    return ClosedDays(max(str(day) for day in latest.values()), compute)


def internal_ties(warehouse: Warehouse, currency: str, first: str | None = None,
                  last: str | None = None, fully_loaded: bool = True) -> list[Comparison]:
    """Every tie of udfs/reconcile/conservation.py over the days [first, last] (all by default);
    `fully_loaded`: ROI's compute covers the GPUs' idle cost too (roi.compute_cost)."""
    q = warehouse.query
    where, params = day_filter("day", first, last)
    roi = {(m, str(d), dim): (float(c), float(r)) for m, d, dim, c, r in q(
        f"SELECT model, day, dimension, SUM(conversions), SUM(revenue) FROM roi_daily "
        f"WHERE {where} GROUP BY model, day, dimension", params)}
    credit_where, credit_params = day_filter("conversion_date", first, last)
    credits = {(m, str(d)): (float(c), float(r)) for m, d, c, r in q(
        f"SELECT model, conversion_date, SUM(credit), SUM(revenue) FROM attribution_credits "
        f"WHERE {credit_where} GROUP BY model, conversion_date", credit_params)}
    models = sorted({key[0] for key in roi} | {key[0] for key in credits})
    out = revenue_ties(roi, credits, DIMENSIONS, currency)
    orders = {str(d): float(r) for d, r in q(
        f"SELECT conversion_date, SUM(revenue) FROM conversions WHERE {credit_where} "
        f"GROUP BY conversion_date", credit_params)}
    out += order_revenue_ties(credits, orders, currency)
    out += _calibrated_ties(warehouse, currency, first, last)

    allocated = {(m, str(d), k): float(a) for m, d, k, a in q(
        f"SELECT model, day, key, SUM(ad_spend) FROM roi_daily WHERE dimension = 'campaign' "
        f"AND {where} GROUP BY model, day, key", params)}
    unallocated = {(m, str(d), k): float(a) for m, d, k, a in q(
        f"SELECT model, day, key, SUM(amount) FROM roi_unallocated WHERE cost_kind = "
        f"'ad_spend' AND {where} GROUP BY model, day, key", params)}
    spend = {(str(d), c): float(a) for d, c, a in q(
        f"SELECT day, campaign, SUM(amount) FROM ad_spend WHERE {where} "
        f"GROUP BY day, campaign", params)}
    out += spend_ties(allocated, unallocated, spend, models, currency)

    compute = {m: float(a) for m, a in q(
        f"SELECT model, SUM(amount) FROM (SELECT model, compute_cost AS amount FROM roi_daily "
        f"WHERE dimension = 'campaign' AND {where} UNION ALL SELECT model, amount FROM "
        f"roi_unallocated WHERE cost_kind = 'compute' AND {where}) AS accounted "
        f"GROUP BY model", params + params)}
    time_where = "1 = 1"
    time_params: list[object] = []
    if first:
        time_where += " AND interval_end_ms >= ?"
        time_params.append(_epoch_ms(first, end=False))
    if last:
        time_where += " AND interval_end_ms <= ?"
        time_params.append(_epoch_ms(last, end=True))
    (bill,), = q(f"SELECT COALESCE(SUM(cost_usd), 0) FROM gpu_call_costs WHERE {time_where}",
                 time_params)
    if fully_loaded:
        (idle,), = q(f"SELECT COALESCE(SUM(cost_usd), 0) FROM gpu_idle_costs WHERE "
                     f"{time_where}", time_params)
        bill += idle
    if models and (bill or compute):
        out += compute_ties(compute, models, float(bill), currency, fully_loaded)

    parts: dict[tuple[str, ...], float] = {}
    intervals: dict[tuple[str, ...], float] = {}
    for gpu, end_ms, cost, interval_cost in q(
            f"SELECT gpu_uuid, interval_end_ms, SUM(cost_usd), MAX(interval_cost_usd) FROM "
            f"(SELECT gpu_uuid, interval_end_ms, cost_usd, interval_cost_usd FROM "
            f"gpu_call_costs WHERE {time_where} UNION ALL SELECT gpu_uuid, interval_end_ms, "
            f"cost_usd, interval_cost_usd FROM gpu_idle_costs WHERE {time_where}) AS priced "
            f"GROUP BY gpu_uuid, interval_end_ms", time_params + time_params):
        day = day_of(int(end_ms))
        parts[gpu, day] = parts.get((gpu, day), 0.0) + float(cost)
        intervals[gpu, day] = intervals.get((gpu, day), 0.0) + float(interval_cost)
    out += gpu_ties(parts, intervals, "USD")
    return out + ltv_ties(warehouse, first, last)


def _calibrated_ties(warehouse: Warehouse, currency: str, first: str | None,
                     last: str | None) -> list[Comparison]:
    """The calibrated ROI's ties, where `seedance incrementality` wrote one whose window
    ends within [first, last]."""
    q = warehouse.query
    (start, end), = q("SELECT MIN(first_day), MAX(last_day) FROM roi_calibrated")
    if start is None or (first and str(end) < first) or (last and str(end) > last):
        return []
    calibrated = {m: (float(c), float(r)) for m, c, r in q(
        "SELECT model, SUM(calibrated_conversions), SUM(calibrated_revenue) FROM "
        "roi_calibrated GROUP BY model")}
    uncalibrated = {m: (float(c), float(r)) for m, c, r in q(
        "SELECT model, SUM(conversions), SUM(revenue) FROM roi_daily WHERE dimension = "
        "'channel' AND day >= ? AND day <= ? GROUP BY model", (str(start), str(end)))}
    return calibrated_ties(calibrated, uncalibrated, str(end), currency)


# each known user's first order (the earliest `new` one by day, then id) on or before the
# day ending at ? ms, as udfs.ltv.channel_return.acquisitions picks it
_FIRST_ORDERS = (
    "WITH new_orders AS (SELECT DISTINCT order_id, user_id, conversion_ts_ms / ? AS day "
    "FROM attribution_credits WHERE stage = 'new' AND user_id <> '' AND conversion_ts_ms < ?), "
    "ranked AS (SELECT order_id, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY day, "
    "order_id) AS n FROM new_orders) ")


def ltv_ties(warehouse: Warehouse, first: str | None = None,
             last: str | None = None) -> list[Comparison]:
    """The LTV-based return's ties (ltv_return_ties) on its as-of day, if
    that day is among the checked ones; none while ltv_return is empty."""
    q = warehouse.query
    reported = {(str(m), str(d)): (float(c), float(r), float(a)) for m, d, c, r, a in q(
        "SELECT model, dimension, SUM(customers), SUM(first_order_revenue), "
        "SUM(acquisition_cost) FROM ltv_return GROUP BY model, dimension")}
    if not reported:
        return []
    (as_of, currency), = q("SELECT MAX(as_of_day), MAX(currency) FROM ltv_return")
    as_of = str(as_of)
    if (first and as_of < first) or (last and as_of > last):
        return []
    params = [DAY_MS, day_end_ms(as_of) + 1]
    credited = {str(m): (float(c), float(r)) for m, c, r in q(
        _FIRST_ORDERS + "SELECT model, SUM(credit), SUM(revenue) FROM attribution_credits "
        "WHERE order_id IN (SELECT order_id FROM ranked WHERE n = 1) GROUP BY model", params)}
    costs = {str(m): float(a) for m, a in q(
        _FIRST_ORDERS + "SELECT model, SUM(ad_spend + compute_cost) FROM order_costs "
        "WHERE order_id IN (SELECT order_id FROM ranked WHERE n = 1) GROUP BY model", params)}
    first_orders = {model: (*credited.get(model, (0.0, 0.0)), costs.get(model, 0.0))
                    for model in credited.keys() | costs.keys()}
    return ltv_return_ties(reported, first_orders, as_of, str(currency or ""))
