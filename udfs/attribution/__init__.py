"""Attribution: the models that share each conversion among the touches of its journey
(rule-based, Shapley, Markov), the per-conversion credits, the data-driven fits and the
credit intervals. Depends on udfs.journeys only.
"""

from __future__ import annotations

from udfs.attribution.credits import (
    per_conversion_credit_rows,
)
from udfs.attribution.data_driven import (
    FittedModels,
    PathCounts,
    Period,
    PeriodRuns,
    closed_by_period,
    closed_period_runs,
    conversion_credit_rows,
    merged_period,
    period_end,
    period_runs,
    runs_periods,
)
from udfs.attribution.intervals import (
    DEFAULT_RESAMPLES,
    credit_intervals,
    credit_intervals_of_rows,
)
from udfs.attribution.models import (
    DATA_DRIVEN_MODELS,
    MODELS,
    PER_CONVERSION_MODELS,
    ModelParams,
    attribute,
    touch_weights,
    validate_models,
)
from udfs.attribution.two_phase import (
    CountPeriod,
    converted_periods,
    journeys_paths,
    merged_counts,
    period_counts,
    periods_credit_rows,
    split_runs,
    weights_for,
)

__all__ = [
    "CountPeriod",
    "converted_periods",
    "journeys_paths",
    "merged_counts",
    "period_counts",
    "periods_credit_rows",
    "split_runs",
    "weights_for",
    "DATA_DRIVEN_MODELS",
    "DEFAULT_RESAMPLES",
    "FittedModels",
    "MODELS",
    "ModelParams",
    "PER_CONVERSION_MODELS",
    "PathCounts",
    "Period",
    "PeriodRuns",
    "attribute",
    "closed_by_period",
    "closed_period_runs",
    "conversion_credit_rows",
    "credit_intervals",
    "credit_intervals_of_rows",
    "merged_period",
    "per_conversion_credit_rows",
    "period_end",
    "period_runs",
    "runs_periods",
    "touch_weights",
    "validate_models",
]
