"""Scaling pressure of a GPU pool, and whether to scale it out, in, or hold.

    pressure = 0.40 x min(1, util_pct / 95)            compute: 95 % busy counts as full
             + 0.35 x (1 - free_mem / total_mem)       memory in use
             + 0.25 x min(1, queue_depth / capacity)   work waiting, per request slot

in [0, 1]. Above 0.8 the pool scales out, below 0.3 it scales in (both strict: exactly 0.8
holds), but only once `cooldown_ms` (5 min) has passed since the pool's last scaling action,
so a pool does not flap while new nodes warm up or drain. Time is passed in (ms); a last
action in the future (clock skew between writers) counts as just now, i.e. still cooling.

Inputs are validated, not clamped: util_pct in 0..100, memory >= 0 with free <= total and
total > 0, queue_depth >= 0, capacity > 0. NaN is an error too: a missing reading must not
look like an idle pool and scale it in. `pool_decisions` (many pools at once) raises on the
first invalid pool by default, or with errors="hold" marks such pools "hold" with the reason
and a NaN pressure, so one broken exporter does not stop the other pools' decisions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import pandas as pd

UTIL_WEIGHT, MEMORY_WEIGHT, QUEUE_WEIGHT = 0.4, 0.35, 0.25
UTIL_SATURATION_PCT = 95.0  # above this a GPU has no useful headroom left
ACTIONS = ("scale_out", "scale_in", "hold")
INPUT_COLUMNS = ["pool", "util_pct", "free_mem", "total_mem", "queue_depth", "capacity"]


@dataclass(frozen=True)
class ScalingPolicy:
    scale_out_above: float = 0.8
    scale_in_below: float = 0.3
    cooldown_ms: int = 300_000  # 5 minutes since the pool's last scaling action

    def __post_init__(self) -> None:
        if not 0 <= self.scale_in_below < self.scale_out_above <= 1:
            raise ValueError("need 0 <= scale_in_below < scale_out_above <= 1, got "
                             f"{self.scale_in_below} and {self.scale_out_above}")
        if self.cooldown_ms < 0:
            raise ValueError(f"cooldown_ms must not be negative, got {self.cooldown_ms}")


class ScalingDecision(NamedTuple):
    pressure: float
    action: str  # one of ACTIONS
    reason: str


def _invalid_reason(util_pct: float, free_mem: float, total_mem: float, queue_depth: float,
                    capacity: float) -> str:
    """Why a reading cannot be scored ('' when it can)."""
    values = {"util_pct": util_pct, "free_mem": free_mem, "total_mem": total_mem,
              "queue_depth": queue_depth, "capacity": capacity}
    for name, number in values.items():
        if not isinstance(number, int | float | np.number) or isinstance(number, bool):
            return f"{name} must be a number, got {number!r}"
        if math.isnan(number):
            return f"{name} is NaN (no reading)"
    if not 0 <= util_pct <= 100:
        return f"util_pct must lie in 0..100, got {util_pct}"
    if not (total_mem > 0 and 0 <= free_mem <= total_mem):
        return f"need 0 <= free_mem <= total_mem and total_mem > 0, got {free_mem} of {total_mem}"
    if not 0 <= queue_depth < math.inf:
        return f"queue_depth must be a finite count >= 0, got {queue_depth}"
    if not 0 < capacity < math.inf:
        return f"capacity must be finite and > 0, got {capacity}"
    return ""


def pressure(util_pct: float, free_mem: float, total_mem: float, queue_depth: float,
             capacity: float) -> float:
    """The pool's pressure in [0, 1]; ValueError on an invalid reading."""
    problem = _invalid_reason(util_pct, free_mem, total_mem, queue_depth, capacity)
    if problem:
        raise ValueError(problem)
    return (UTIL_WEIGHT * min(1.0, util_pct / UTIL_SATURATION_PCT)
            + MEMORY_WEIGHT * (1.0 - free_mem / total_mem)
            + QUEUE_WEIGHT * min(1.0, queue_depth / capacity))


def decide(pool_pressure: float, now_ms: int, last_action_ms: int | None,
           policy: ScalingPolicy = ScalingPolicy()) -> ScalingDecision:
    """Scale out / in / hold for a pressure, given when the pool last scaled (None: never)."""
    if pool_pressure > policy.scale_out_above:
        wanted, rule = "scale_out", f"pressure {pool_pressure:.3f} > {policy.scale_out_above}"
    elif pool_pressure < policy.scale_in_below:
        wanted, rule = "scale_in", f"pressure {pool_pressure:.3f} < {policy.scale_in_below}"
    else:
        return ScalingDecision(pool_pressure, "hold", f"pressure {pool_pressure:.3f} within "
                               f"[{policy.scale_in_below}, {policy.scale_out_above}]")
    if last_action_ms is not None:
        elapsed = max(0, now_ms - last_action_ms)
        if elapsed < policy.cooldown_ms:
            left_s = (policy.cooldown_ms - elapsed) / 1000
            return ScalingDecision(pool_pressure, "hold",
                                   f"{rule}, but cooling down: {left_s:.0f} s left")
    return ScalingDecision(pool_pressure, wanted, rule)


def scaling_decision(util_pct: float, free_mem: float, total_mem: float, queue_depth: float,
                     capacity: float, now_ms: int, last_action_ms: int | None,
                     policy: ScalingPolicy = ScalingPolicy()) -> ScalingDecision:
    """(pressure, action, reason) of one pool from its reading; ValueError if invalid."""
    return decide(pressure(util_pct, free_mem, total_mem, queue_depth, capacity), now_ms,
                  last_action_ms, policy)


def pressures(readings: pd.DataFrame) -> pd.Series:
    """Pressure per row of INPUT_COLUMNS, vectorised (NaN where the reading is invalid)."""
    util, free, total, queue, capacity = (readings[c].to_numpy(dtype=float)
                                          for c in INPUT_COLUMNS[1:])
    with np.errstate(invalid="ignore", divide="ignore"):
        valid = ((util >= 0) & (util <= 100) & (total > 0) & (free >= 0) & (free <= total)
                 & (queue >= 0) & np.isfinite(queue) & (capacity > 0) & np.isfinite(capacity))
        score = (UTIL_WEIGHT * np.minimum(1.0, util / UTIL_SATURATION_PCT)
                 + MEMORY_WEIGHT * (1.0 - free / total)
                 + QUEUE_WEIGHT * np.minimum(1.0, queue / capacity))
    return pd.Series(np.where(valid, score, np.nan), index=readings.index, name="pressure")


def pool_decisions(readings: pd.DataFrame, now_ms: int, last_action_ms: Mapping[str, int],
                   policy: ScalingPolicy = ScalingPolicy(),
                   errors: Literal["raise", "hold"] = "raise") -> pd.DataFrame:
    """Columns pool, pressure, action, reason: one row per reading (INPUT_COLUMNS);
    `last_action_ms`: the last scaling action per pool (a pool not in it never scaled)."""
    scores = pressures(readings)
    rows = []
    for reading, score in zip(readings[INPUT_COLUMNS].itertuples(index=False), scores,
                              strict=True):
        if math.isnan(score):  # only invalid readings score NaN: say why
            problem = _invalid_reason(*(float(v) for v in reading[1:]))
            if errors == "raise":
                raise ValueError(f"pool {reading.pool}: {problem}")
            rows.append((reading.pool, math.nan, "hold", f"invalid reading: {problem}"))
            continue
        rows.append((reading.pool,
                     *decide(float(score), now_ms, last_action_ms.get(str(reading.pool)), policy)))
    return pd.DataFrame(rows, columns=["pool", "pressure", "action", "reason"])
