"""The control loop: rules over daily series (anomalies, GPU pool pressure) that decide
actions, and the verification of what an action changed.
"""

from __future__ import annotations

from udfs.control.pool_pressure import (
    MEMORY_WEIGHT,
    QUEUE_WEIGHT,
    UTIL_SATURATION_PCT,
    UTIL_WEIGHT,
    pressure,
)
from udfs.control.rules import (
    ActionRecord,
    Decision,
    Rule,
    RuleError,
    check_limits,
    evaluate,
    parse_rules,
)
from udfs.control.verification import (
    observed_after,
    verify,
)

__all__ = [
    "ActionRecord",
    "Decision",
    "MEMORY_WEIGHT",
    "QUEUE_WEIGHT",
    "Rule",
    "RuleError",
    "UTIL_SATURATION_PCT",
    "UTIL_WEIGHT",
    "check_limits",
    "evaluate",
    "observed_after",
    "parse_rules",
    "pressure",
    "verify",
]
