"""Incrementality: what a channel causes, measured by holdout lift tests (holdouts.py), and
attribution calibrated by them (calibration.py): each tested channel's credit scaled to
its measured incremental conversions and revenue, the rest on a "(baseline)" row; and a
simulation where channels aimed at likely buyers part association from cause
(simulation.py)."""

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
from udfs.incrementality.simulation import CHANNELS as SIMULATED_CHANNELS
from udfs.incrementality.simulation import Population, simulate

__all__ = [
    "BASELINE",
    "DEFAULT_ALPHA",
    "Arm",
    "Calibrated",
    "Factor",
    "Lift",
    "Measure",
    "Population",
    "SIMULATED_CHANNELS",
    "calibrated_credits",
    "calibrated_roi",
    "calibrated_totals",
    "factor",
    "factors_frame",
    "holdout_measures",
    "simulate",
    "lift",
]
