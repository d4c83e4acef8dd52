"""Per-conversion credits for the streaming job, from the same models as the batch CLI.

A converted journey becomes a one-journey JourneyTable and goes through
`udfs.models.touch_weights`, so a model means the same thing in Flink, in Spark and in
`seedance attribute`. The data-driven models (`shapley`, `markov`) need counts over many
journeys: the stream refits them per period (udfs/data_driven.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from schemas.records import UNATTRIBUTED, Credit
from udfs import models as batch_models
from udfs.journey_table import JourneyTable
from udfs.journeys import ConvertedJourney

PER_CONVERSION_MODELS = ("last_click", "first_click", "linear", "position_based",
                         "time_decay", "shapley_simplified")
"""Models that need nothing but the conversion's own journey."""


def validate_models(models: Sequence[str]) -> tuple[str, ...]:
    return batch_models.validate_models(tuple(models))


def journey_table(journey: ConvertedJourney) -> JourneyTable:
    touches = journey.touches
    channels = tuple(sorted({t.channel for t in touches}))
    code = {c: i for i, c in enumerate(channels)}
    conversion = journey.conversion
    return JourneyTable(
        channels=channels, campaigns=("",),
        offsets=np.array([0, len(touches)], dtype=np.int64),
        touch_channel=np.array([code[t.channel] for t in touches], dtype=np.int64),
        touch_campaign=np.zeros(len(touches), np.int64),
        touch_ts=np.array([t.ts_ms for t in touches], dtype=np.int64),
        conversions=np.ones(1), non_conversions=np.zeros(1),
        revenue=np.array([conversion.revenue]),
        conversion_ts=np.array([conversion.ts_ms], dtype=np.int64))


def credits_from_weights(journey: ConvertedJourney, model: str,
                         weights: Sequence[float]) -> list[Credit]:
    """Credit rows of one conversion from its per-touch weights (zero weights omitted; a
    conversion without touches goes to UNATTRIBUTED)."""
    conversion = journey.conversion
    if not journey.touches:
        return [Credit(model, conversion.order_id, conversion.user_id, conversion.ts_ms, 0,
                       UNATTRIBUTED, "", conversion.ts_ms, 1.0, conversion.revenue,
                       conversion.currency, journey.stage)]
    return [Credit(model, conversion.order_id, conversion.user_id, conversion.ts_ms, index,
                   touch.channel, touch.campaign, touch.ts_ms, weight,
                   conversion.revenue * weight, conversion.currency, journey.stage)
            for index, (touch, weight) in enumerate(zip(journey.touches, weights, strict=True))
            if weight != 0.0]


def credit_journey(journey: ConvertedJourney, models: Sequence[str],
                   params: batch_models.ModelParams | None = None) -> list[Credit]:
    """Per-touch credits of one conversion under each per-conversion model."""
    out: list[Credit] = []
    table = journey_table(journey) if journey.touches else None
    for model in models:
        if model not in PER_CONVERSION_MODELS:
            raise ValueError(f"{model} needs counts over many journeys: see udfs.data_driven")
        weights = batch_models.touch_weights(table, model, params).tolist() if table else []
        out.extend(credits_from_weights(journey, model, weights))
    return out
