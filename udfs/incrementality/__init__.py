"""Incrementality: what a channel causes, measured by holdout lift tests (lift.py), and
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
from udfs.incrementality.lift import DEFAULT_ALPHA, Arm, Lift, lift

__all__ = [
    "BASELINE",
    "DEFAULT_ALPHA",
    "Arm",
    "Calibrated",
    "Factor",
    "Lift",
    "calibrated_credits",
    "calibrated_totals",
    "factor",
    "lift",
]
