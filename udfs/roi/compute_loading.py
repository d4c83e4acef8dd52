"""Fully loaded compute: a GPU's idle cost follows its workloads to their orders.

Within one window (a GPU's UTC day), the GPU's idle cost is shared over the calls it
served in proportion to their cost -- OpenCost's shared-idle rule (udfs.roi.gpu_cost.share_idle)
applied per call, so the share travels with the call's trace to the order whose journey
carried it, exactly as the call's own cost does. A GPU that served no call in a window
keeps that window's idle cost as unallocated compute under its own id. So, per GPU and
day: calls + their idle shares + unshared idle = the GPU's bill.

`roi.compute_cost: direct` leaves idle cost out of ROI (reported only by the GPU cost job);
`fully_loaded` (the default) is what a finance team expects: the bill is covered.

Pure pandas: the backfill calls `idle_shares` on whole frames; the stream's ShareIdleCost
operator calls `call_shares` for one GPU-day at a time, with the same arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from udfs.periods import DAY_MS

MODES = ("fully_loaded", "direct")

# costs as udfs.roi.day and pipelines.backfill.roi take them: trace ('' for none), time, cost
COST_COLUMNS = ["trace_id", "ts_ms", "cost"]
IDLE_COLUMNS = ["gpu_uuid", "ts_ms", "cost"]
UNSHARED_COLUMNS = ["gpu_uuid", "day_number", "cost"]


def call_shares(call_costs: Sequence[float], idle: float) -> np.ndarray:
    """One GPU-day: each call's share of the idle cost, in proportion to its cost (all 0
    when the calls cost nothing: the idle cost is then unshared)."""
    costs = np.asarray(call_costs, dtype=float)
    total = float(costs.sum())
    if total <= 0 or idle == 0:
        return np.zeros(len(costs))
    return costs * (idle / total)


def idle_shares(calls: pd.DataFrame, idle: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """calls: gpu_uuid, trace_id, ts_ms, cost (every priced call, traced or not); idle:
    IDLE_COLUMNS. Returns (shares: COST_COLUMNS, one row per call with its share of its
    GPU-day's idle cost, to be linked like the call's own cost; unshared: UNSHARED_COLUMNS,
    the idle cost of GPU-days without calls)."""
    calls = calls.assign(day_number=calls.ts_ms.astype("int64") // DAY_MS)
    idle = idle.assign(day_number=idle.ts_ms.astype("int64") // DAY_MS)
    key = ["gpu_uuid", "day_number"]
    idle_by_day = idle.groupby(key).cost.sum().rename("idle")
    calls_by_day = calls.groupby(key).cost.sum().rename("calls")
    merged = calls.join(idle_by_day, on=key).join(calls_by_day, on=key)
    idle_of_call = merged.idle.fillna(0.0).to_numpy(float)
    total = merged.calls.to_numpy(float)
    share = np.divide(merged.cost.to_numpy(float) * idle_of_call, total,
                      out=np.zeros(len(merged)), where=total > 0)
    shares = pd.DataFrame({"trace_id": merged.trace_id.to_numpy(object),
                           "ts_ms": merged.ts_ms.to_numpy("int64"), "cost": share})
    both = pd.concat([idle_by_day, calls_by_day], axis=1).fillna(0.0)
    unshared = both[(both.calls <= 0) & (both.idle != 0)]
    return (shares[shares.cost != 0].reset_index(drop=True),
            pd.DataFrame({"gpu_uuid": unshared.index.get_level_values(0).to_numpy(object),
                          "day_number": unshared.index.get_level_values(1).to_numpy("int64"),
                          "cost": unshared.idle.to_numpy(float)}, columns=UNSHARED_COLUMNS))
