"""Incrementality: what a channel causes, measured by holdout lift tests (holdouts.py), and
attribution calibrated by them (calibration.py): each tested channel's credit scaled to
its measured incremental conversions and revenue, the rest on a "(baseline)" row."""

from udfs.incrementality.calibration import (
    BASELINE,
    Calibrated,
    Factor,
    calibrated_credits,
    calibrated_totals,
    factor,
)
from udfs.incrementality.holdouts import DEFAULT_ALPHA, Arm, Lift, lift
from udfs.incrementality.report import (
    Measure,
    calibrated_roi,
    factors_frame,
    holdout_measures,
)

__all__ = [
    "BASELINE",
    "DEFAULT_ALPHA",
    "Arm",
    "Calibrated",
    "Factor",
    "Lift",
    "Measure",
    "calibrated_credits",
    "calibrated_roi",
    "calibrated_totals",
    "factor",
    "factors_frame",
    "holdout_measures",
    "lift",
]
