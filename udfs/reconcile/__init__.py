"""Reconciliation: drift between our figures and a billing source, the alert decisions, and
the conservation ties between the result tables.
"""

from __future__ import annotations

from udfs.reconcile.conservation import (
    ALL_DAYS,
    SCOPE,
    breaks,
    calibrated_ties,
    compute_ties,
    gpu_ties,
    ltv_return_ties,
    order_revenue_ties,
    revenue_ties,
    spend_ties,
    still_open,
)
from udfs.reconcile.drift import (
    BREACH,
    METRICS,
    Amount,
    Comparison,
    CurrencyError,
    Key,
    RateTable,
    Rule,
    Transition,
    compare,
    decide,
    state_of,
    total,
)

__all__ = [
    "ALL_DAYS",
    "Amount",
    "BREACH",
    "Comparison",
    "CurrencyError",
    "Key",
    "METRICS",
    "RateTable",
    "Rule",
    "SCOPE",
    "Transition",
    "breaks",
    "compare",
    "calibrated_ties",
    "compute_ties",
    "decide",
    "gpu_ties",
    "ltv_return_ties",
    "order_revenue_ties",
    "revenue_ties",
    "spend_ties",
    "state_of",
    "still_open",
    "total",
]
