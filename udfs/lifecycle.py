"""Customer lifecycle stage of a conversion, from the user's order history.

`new`: the user's first order; `repeat`: the previous order lies within the winback window
(default 90 days); `winback`: the previous order is older than that; `unknown`: no
resolvable user. Stage weights (default new 0.6, repeat 0.3, winback 0.1, unknown 0.2)
steer how costs are shared between conversions (see udfs/roi/day.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from udfs.periods import DAY_MS

STAGES = ("new", "repeat", "winback", "unknown")


@dataclass(frozen=True)
class StageWeights:
    """How much a conversion of each stage weighs when costs are shared (udfs/roi/day.py).

    The one place their defaults and their rules live: the job config's `roi.stage_weights`
    is read into this class, so what the YAML says is checked here too."""

    new: float = 0.6
    repeat: float = 0.3
    winback: float = 0.1
    unknown: float = 0.2

    def __post_init__(self) -> None:
        for stage, weight in self.as_mapping().items():
            if isinstance(weight, bool) or not isinstance(weight, int | float) \
                    or not math.isfinite(weight) or weight < 0:
                raise ValueError(f"{stage} must be a non-negative number, got {weight!r}")

    def as_mapping(self) -> dict[str, float]:
        return {stage: getattr(self, stage) for stage in STAGES}

    @classmethod
    def of(cls, weights: Mapping[str, float]) -> StageWeights:
        """From a mapping that must name every stage, and nothing else."""
        missing = [s for s in STAGES if s not in weights]
        unknown = [str(s) for s in weights if s not in STAGES]
        if missing or unknown:
            raise ValueError(f"stage weights need exactly {', '.join(STAGES)}"
                             + (f"; missing {', '.join(missing)}" if missing else "")
                             + (f"; unknown {', '.join(unknown)}" if unknown else ""))
        return cls(**{stage: weights[stage] for stage in STAGES})



@dataclass(frozen=True)
class LifecycleConfig:
    winback_days: float = 90.0

    def __post_init__(self) -> None:
        if not self.winback_days > 0:
            raise ValueError(f"winback_days must be positive, got {self.winback_days}")


def stage_of(user_id: str, previous_order_ms: int | None, order_ms: int,
             config: LifecycleConfig = LifecycleConfig()) -> str:
    """Stage of one order, given the time of the user's previous order (None: none)."""
    if not user_id:
        return "unknown"
    if previous_order_ms is None:
        return "new"
    return "repeat" if order_ms - previous_order_ms <= config.winback_days * DAY_MS \
        else "winback"


def stages_of(previous_order_ms: np.ndarray, order_ms: np.ndarray, anonymous: np.ndarray,
              config: LifecycleConfig = LifecycleConfig()) -> np.ndarray:
    """`stage_of` for many orders at once: the previous order's time per order
    (np.iinfo(np.int64).min: none) and whether the order has no user."""
    none = previous_order_ms == np.iinfo(np.int64).min
    gap = order_ms - np.where(none, order_ms, previous_order_ms)
    code = np.where(none, 0, np.where(gap <= config.winback_days * DAY_MS, 1, 2))
    code[anonymous] = 3
    return _STAGE_NAMES[code]


_STAGE_NAMES = np.array(STAGES, dtype=object)


def stages_of_orders(orders: pd.DataFrame,
                     config: LifecycleConfig = LifecycleConfig()) -> pd.Series:
    """Stage of every order (columns user_id, ts_ms), vectorised; same rule as stage_of."""
    ordered = orders.sort_values(["user_id", "ts_ms"], kind="stable")
    previous = ordered.groupby("user_id", sort=False).ts_ms.shift(1)
    gap = ordered.ts_ms - previous
    stage = np.where(previous.isna(), "new",
                     np.where(gap <= config.winback_days * DAY_MS, "repeat", "winback"))
    stage = np.where(ordered.user_id.fillna("").astype(str) == "", "unknown", stage)
    return pd.Series(stage, index=ordered.index).reindex(orders.index)
