"""Attribution models: how much of each conversion each touch of its journey earns.

Every model returns weights over the journey's touches that sum to 1, so the credits of a
conversion sum to its count (1) and its revenue: attribution is conservative.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from schemas.records import UNATTRIBUTED, Credit
from udfs.journeys import ConvertedJourney


def last_click_weights(length: int) -> list[float]:
    return [0.0] * (length - 1) + [1.0]


def linear_weights(length: int) -> list[float]:
    return [1.0 / length] * length


POSITIONAL_MODELS: dict[str, Callable[[int], list[float]]] = {
    "last_click": last_click_weights,
    "linear": linear_weights,
}
MODELS = tuple(POSITIONAL_MODELS)
DEFAULT_MODELS = ("last_click", "linear")


def validate_models(models: Sequence[str]) -> tuple[str, ...]:
    unknown = [m for m in models if m not in POSITIONAL_MODELS]
    if unknown:
        raise ValueError(f"unknown attribution model(s) {', '.join(unknown)}; "
                         f"available: {', '.join(MODELS)}")
    if not models:
        raise ValueError("at least one attribution model is needed")
    return tuple(models)


def credit_journey(journey: ConvertedJourney, models: Sequence[str]) -> list[Credit]:
    """Per-touch credits of one conversion under each model (zero-weight touches omitted)."""
    conversion = journey.conversion
    out: list[Credit] = []
    if not journey.touches:
        for model in models:
            out.append(Credit(model, conversion.order_id, conversion.user_id, conversion.ts_ms,
                              0, UNATTRIBUTED, "", conversion.ts_ms, 1.0, conversion.revenue,
                              conversion.currency))
        return out
    length = len(journey.touches)
    for model in models:
        weights = POSITIONAL_MODELS[model](length)
        for index, (touch, weight) in enumerate(zip(journey.touches, weights, strict=True)):
            if weight == 0.0:
                continue
            out.append(Credit(model, conversion.order_id, conversion.user_id, conversion.ts_ms,
                              index, touch.channel, touch.campaign, touch.ts_ms, weight,
                              conversion.revenue * weight, conversion.currency))
    return out
