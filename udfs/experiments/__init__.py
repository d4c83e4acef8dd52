"""Experiments: per-variant ROI statistics of feature-flag experiments, their intervals,
sample-ratio checks and guard rails.
"""

from __future__ import annotations

from udfs.experiments.statistics import (
    ExperimentsFailed,
    window_statistics,
)
from udfs.experiments.table import (
    strategy_table,
)

__all__ = [
    "ExperimentsFailed",
    "strategy_table",
    "window_statistics",
]
