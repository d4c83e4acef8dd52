"""The warehouse's summaries that `seedance demo` and `seedance load` print: credits per
channel, model and lifecycle stage, ROI per dimension, GPU cost with its conservation check.
(The dashboard's views are pipelines/dashboard/queries.py.) Functions of a `Warehouse`;
their SQL is portable to SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from udfs.roi import share_idle

if TYPE_CHECKING:
    from pipelines.store.warehouse import Warehouse


def channel_summary(warehouse: Warehouse) -> list[tuple[str, str, float, float]]:
    """(model, channel, conversions credited, revenue credited), largest first."""
    return warehouse.query(
        "SELECT model, channel, SUM(credit), SUM(revenue) FROM attribution_credits "
        "GROUP BY model, channel ORDER BY model, SUM(revenue) DESC")


def gpu_cost_summary(warehouse: Warehouse) -> dict[str, object]:
    """Cost per workload, the costliest traces, idle per GPU, and the conservation check."""
    q = warehouse.query

    def total(sql: str) -> float:
        return float(q(sql)[0][0])

    return {
        "per_workload": q("SELECT namespace, workload, SUM(gpu_seconds), SUM(cost_usd) "
                          "FROM gpu_call_costs GROUP BY namespace, workload "
                          "ORDER BY SUM(cost_usd) DESC"),
        "top_traces": q("SELECT trace_id, user_id, SUM(cost_usd) FROM gpu_call_costs "
                        "GROUP BY trace_id, user_id ORDER BY SUM(cost_usd) DESC LIMIT 5"),
        "idle_per_gpu": q("SELECT gpu_uuid, model, SUM(idle_seconds), SUM(cost_usd) "
                          "FROM gpu_idle_costs GROUP BY gpu_uuid, model "
                          "ORDER BY gpu_uuid, model"),
        "allocated_usd": total("SELECT COALESCE(SUM(cost_usd), 0) FROM gpu_call_costs"),
        "idle_usd": total("SELECT COALESCE(SUM(cost_usd), 0) FROM gpu_idle_costs"),
        # each interval's cost once, whether it had calls, idle time or both
        "interval_usd": total(
            "SELECT COALESCE(SUM(cost), 0) FROM (SELECT MAX(interval_cost_usd) AS cost FROM "
            "(SELECT gpu_uuid, interval_end_ms, interval_cost_usd FROM gpu_call_costs "
            "UNION ALL SELECT gpu_uuid, interval_end_ms, interval_cost_usd "
            "FROM gpu_idle_costs) AS priced GROUP BY gpu_uuid, interval_end_ms) "
            "AS intervals"),
        # OpenCost-style shared idle, by the same rule as everywhere (udfs.roi.gpu_cost)
        "idle_shared": sorted(share_idle(*_gpu_totals(warehouse)).items(),
                              key=lambda item: -item[1]),
        "fallback_priced_rows": q("SELECT COUNT(*) FROM gpu_call_costs WHERE NOT "
                                  "price_known")[0][0],
    }


def _gpu_totals(warehouse: Warehouse
                ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    allocated: dict[str, dict[str, float]] = {}
    for gpu, workload, usd in warehouse.query(
            "SELECT gpu_uuid, workload, SUM(cost_usd) FROM gpu_call_costs "
            "GROUP BY gpu_uuid, workload"):
        allocated.setdefault(gpu, {})[workload] = usd
    idle = dict(warehouse.query(
        "SELECT gpu_uuid, SUM(cost_usd) FROM gpu_idle_costs GROUP BY gpu_uuid"))
    return allocated, idle


def roi_summary(warehouse: Warehouse,
                dimension: str) -> list[tuple[str, str, float, float, float]]:
    """(model, key, revenue, ad spend, compute) over all days, for one dimension."""
    return warehouse.query(
        "SELECT model, key, SUM(revenue), SUM(ad_spend), SUM(compute_cost) FROM roi_daily "
        "WHERE dimension = ? GROUP BY model, key ORDER BY model, key", (dimension,))


def stage_summary(warehouse: Warehouse) -> list[tuple[str, str, int, float]]:
    """(model, lifecycle stage, orders, revenue credited)."""
    return warehouse.query(
        "SELECT model, stage, COUNT(DISTINCT order_id), SUM(revenue) "
        "FROM attribution_credits GROUP BY model, stage ORDER BY model, stage")


def totals(warehouse: Warehouse) -> list[tuple[str, int, float, float]]:
    """Per model: orders, conversions credited, revenue credited (conservation check)."""
    return warehouse.query(
        "SELECT model, COUNT(DISTINCT order_id), SUM(credit), SUM(revenue) "
        "FROM attribution_credits GROUP BY model ORDER BY model")


def unallocated_by_kind(warehouse: Warehouse, model: str) -> list[tuple[str, float]]:
    """(cost kind, amount) no conversion took under `model` (roi_unallocated), by kind."""
    return warehouse.query(
        "SELECT cost_kind, SUM(amount) FROM roi_unallocated WHERE model = ? GROUP BY cost_kind "
        "ORDER BY cost_kind", (model,))


def credit_row_count(warehouse: Warehouse) -> int:
    """The rows of attribution_credits."""
    (count,), = warehouse.query("SELECT COUNT(*) FROM attribution_credits")
    return int(count)


def order_totals(warehouse: Warehouse) -> tuple[float, int]:
    """The orders' revenue (net of refunds: the conversions table) and their count."""
    (revenue, orders), = warehouse.query("SELECT COALESCE(SUM(revenue), 0), COUNT(*) FROM "
                                         "conversions")
    return float(revenue), int(orders)
