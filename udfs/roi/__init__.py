"""ROI: ad spend and GPU compute cost allocated to credited conversions, per day, and a
GPU's idle cost loaded onto its workloads. Depends on udfs.ltv (the allocation weights).
"""

from __future__ import annotations

from udfs.roi.compute_loading import (
    IDLE_COLUMNS,
    MODES,
    call_shares,
    idle_shares,
)
from udfs.roi.day import (
    COMPUTE_COLUMNS,
    CREDIT_COLUMNS,
    DIMENSIONS,
    SPEND_COLUMNS,
    day_roi,
    with_withdrawn,
)
from udfs.roi.gpu_cost import (
    allocate_gpu,
    allocate_intervals,
    share_idle,
)

__all__ = [
    "COMPUTE_COLUMNS",
    "CREDIT_COLUMNS",
    "DIMENSIONS",
    "IDLE_COLUMNS",
    "MODES",
    "SPEND_COLUMNS",
    "allocate_gpu",
    "allocate_intervals",
    "call_shares",
    "day_roi",
    "idle_shares",
    "share_idle",
    "with_withdrawn",
]
