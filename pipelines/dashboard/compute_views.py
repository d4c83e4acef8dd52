"""The dashboard's Compute page: what the GPUs cost and where it went.

- per workload and day: the GPU-seconds its calls used, their own cost, their share of
  their GPUs' idle cost (each GPU-day's idle shared by call cost, udfs/roi/compute_loading.py,
  the rule the ROI job applies with roi.compute_cost fully_loaded) and the idle share of the
  fully loaded cost;
- the unit cost: fully loaded cost per useful (busy) GPU-second, per workload, GPU model
  and day;
- compute cost per conversion by channel, under the selected model (roi_daily);
- GPU-days that served no call keep their idle cost (unallocated compute, per GPU);
- how busy each GPU model's pool was, day by day: busy GPU-seconds over observed ones (the
  utilisation side of the pool pressure the control loop acts on; memory and queue depth
  are live readings, see docs/control.md).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pipelines.dashboard.filters import Filters, day_range
from pipelines.dashboard.paging import EVERY_ROW, Page, Paging
from pipelines.dashboard.tables import Column, Kpi, View
from pipelines.store.warehouse import Warehouse
from udfs.periods import DAY_MS, day_of
from udfs.roi import call_shares

COMPUTE_EMPTY = ("No GPU costs yet: run the GPU cost job (`seedance run --job gpu-cost`) and "
                 "`seedance load`, or `seedance demo`.")


def _day(day_number: int) -> str:
    return day_of(day_number * DAY_MS)


def _in_range(day: str, filters: Filters) -> bool:
    return (not filters.date_from or day >= filters.date_from) and \
        (not filters.date_to or day <= filters.date_to)


def _gpu_days(warehouse: Warehouse, filters: Filters
              ) -> tuple[list[tuple[Any, ...]], dict[tuple[str, int], float]]:
    """Calls summed per (GPU, model, workload, day) and idle cost per (GPU, day), of the
    selected days."""
    calls = [(gpu, model, workload or "(none)", int(day), float(seconds), float(cost))
             for gpu, model, workload, day, seconds, cost in warehouse.query(
                 "SELECT gpu_uuid, model, workload, interval_end_ms / 86400000, "
                 "SUM(gpu_seconds), SUM(cost_usd) FROM gpu_call_costs GROUP BY gpu_uuid, "
                 "model, workload, interval_end_ms / 86400000")
             if _in_range(_day(int(day)), filters)]
    idle = {(gpu, int(day)): float(cost) for gpu, day, cost in warehouse.query(
        "SELECT gpu_uuid, interval_end_ms / 86400000, SUM(cost_usd) FROM gpu_idle_costs "
        "GROUP BY gpu_uuid, interval_end_ms / 86400000") if _in_range(_day(int(day)), filters)}
    return calls, idle


def compute_view(warehouse: Warehouse, filters: Filters, paging: Paging = EVERY_ROW) -> View:
    view = View("compute", "Compute: what the GPUs cost and where it went")
    if not warehouse.query("SELECT 1 FROM gpu_call_costs UNION ALL SELECT 1 FROM "
                           "gpu_idle_costs LIMIT 1"):
        view.notice = COMPUTE_EMPTY
        return view
    calls, idle = _gpu_days(warehouse, filters)
    by_gpu_day: dict[tuple[str, int], list[int]] = defaultdict(list)
    for at, (gpu, _, _, day, _, _) in enumerate(calls):
        by_gpu_day[gpu, day].append(at)
    share = [0.0] * len(calls)
    for key, rows in by_gpu_day.items():
        for at, part in zip(rows, call_shares([calls[i][5] for i in rows],
                                              idle.get(key, 0.0)).tolist(), strict=True):
            share[at] = part
    unshared = {key: cost for key, cost in idle.items() if key not in by_gpu_day
                or sum(calls[i][5] for i in by_gpu_day[key]) <= 0}

    workloads: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    units: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for (_gpu, model, workload, day, seconds, cost), idle_part in zip(calls, share,
                                                                      strict=True):
        figures = workloads[_day(day), workload]
        figures[0] += seconds
        figures[1] += cost
        figures[2] += idle_part
        unit = units[_day(day), model, workload]
        unit[0] += seconds
        unit[1] += cost + idle_part
    workload_rows = [(day, workload, s, own, idle_part, own + idle_part,
                      idle_part / (own + idle_part) if own + idle_part else None)
                     for (day, workload), (s, own, idle_part) in sorted(workloads.items())]
    unit_rows = [(day, model, workload, s, cost, cost / s if s > 0 else None)
                 for (day, model, workload), (s, cost) in sorted(units.items())]
    kept_rows = [(_day(day), gpu, cost) for (gpu, day), cost in sorted(
        unshared.items(), key=lambda item: (item[0][1], item[0][0]))]

    observed: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for _gpu, model, _workload, day, seconds, _cost in calls:
        observed[_day(day), model][0] += seconds
    for model, day, seconds in warehouse.query(
            "SELECT model, interval_end_ms / 86400000, SUM(idle_seconds) FROM gpu_idle_costs "
            "GROUP BY model, interval_end_ms / 86400000"):
        if _in_range(_day(int(day)), filters):
            observed[_day(int(day)), model][1] += float(seconds)
    pool_rows = [(day, model, (busy + quiet) / 3600, busy / (busy + quiet)
                  if busy + quiet > 0 else None)
                 for (day, model), (busy, quiet) in sorted(observed.items())]

    where, params = day_range("day", filters)
    per_channel = paging.query(
        warehouse, "compute_per_conversion",
        "SELECT key, SUM(conversions), SUM(compute_cost) FROM roi_daily WHERE model = ? AND "
        f"dimension = 'channel'{where} GROUP BY key", [filters.model, *params],
        "SUM(compute_cost) DESC, key") if filters.model else Page([], 0, 0)
    channel_rows = [(key, conversions, compute, compute / conversions if conversions else None)
                    for key, conversions, compute in per_channel.rows]

    bill = sum(c[5] for c in calls) + sum(idle.values())
    idle_total = sum(idle.values())
    useful = sum(c[4] for c in calls)
    view.kpis = [Kpi("kpi_gpu_bill", "GPU cost (calls + idle)", bill),
                 Kpi("kpi_idle_share", "Idle share of it", idle_total / bill if bill else None,
                     "share"),
                 Kpi("kpi_unit_cost", "Cost per useful GPU-second",
                     (bill - sum(unshared.values())) / useful if useful else None, "ratio"),
                 Kpi("kpi_unshared", "Idle cost of GPUs without calls",
                     sum(unshared.values()))]
    # the chart's totals per workload, over every day (not the page of the table shown)
    view.chart_rows["compute_by_workload"] = workload_rows
    view.tables = [
        paging.cut("compute_by_workload", workload_rows).table(
            "compute_by_workload", "GPU cost per workload and day",
            (Column("day", "Day"), Column("workload", "Workload"),
             Column("gpu_seconds", "Busy GPU-seconds", "number"),
             Column("call_cost", "Own cost", "money"),
             Column("idle_share", "Share of idle", "money"),
             Column("loaded_cost", "Fully loaded", "money"),
             Column("idle_fraction", "Idle part", "share")),
            note="Each GPU's idle cost of a day is shared over the calls it served that day "
                 "by their cost, as the ROI job does with roi.compute_cost: fully_loaded."),
        paging.cut("compute_unit_cost", unit_rows).table(
            "compute_unit_cost", "Cost per useful GPU-second",
            (Column("day", "Day"), Column("gpu_model", "GPU model"),
             Column("workload", "Workload"),
             Column("gpu_seconds", "Busy GPU-seconds", "number"),
             Column("loaded_cost", "Fully loaded cost", "money"),
             Column("unit_cost", "Per GPU-second", "ratio"))),
        Page(channel_rows, per_channel.total, per_channel.offset).table(
            "compute_per_conversion", "Compute cost per conversion by channel",
            (Column("channel", "Channel"), Column("conversions", "Conversions", "number"),
             Column("compute_cost", "Compute cost", "money"),
             Column("per_conversion", "Per conversion", "money")),
            empty="No ROI rows for this model: compute reaches channels through the ROI "
                  "job."),
        paging.cut("compute_pool_busy", pool_rows).table(
            "compute_pool_busy", "How busy each GPU pool was, per day",
            (Column("day", "Day"), Column("gpu_model", "GPU model"),
             Column("observed_hours", "Observed GPU-hours", "number"),
             Column("busy_share", "Busy", "share")),
            note="Busy GPU-seconds (time covered by calls) over observed GPU-seconds: the "
                 "utilisation side of the pool pressure the control loop acts on."),
        paging.cut("compute_unshared", kept_rows).table(
            "compute_unshared", "Idle cost of GPUs that served no call that day",
            (Column("day", "Day"), Column("gpu_uuid", "GPU"),
             Column("idle_cost", "Idle cost", "money")),
            empty="Every GPU-day with idle time also served calls."),
    ]
    return view
