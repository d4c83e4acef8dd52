"""Per-conversion credits for the streaming job, from the same models as the batch CLI.

A converted journey becomes a one-journey JourneyTable and goes through
`udfs.models.touch_weights`, so a model means the same thing in Flink, in Spark and in
`seedance attribute`. The data-driven models (`shapley`, `markov`) need counts over many
journeys and are not available per conversion yet.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from schemas.records import UNATTRIBUTED, Credit
from udfs import models as batch_models
from udfs.journey_table import JourneyTable
from udfs.journeys import ConvertedJourney

STREAMING_MODELS = ("last_click", "first_click", "linear", "position_based", "time_decay",
                    "shapley_simplified")


def validate_models(models: Sequence[str]) -> tuple[str, ...]:
    chosen = batch_models.validate_models(tuple(models))
    unsupported = [m for m in chosen if m not in STREAMING_MODELS]
    if unsupported:
        raise ValueError(f"model(s) {', '.join(unsupported)} need counts over many journeys "
                         f"and are not available per conversion; streaming models: "
                         f"{', '.join(STREAMING_MODELS)}")
    return chosen


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


def credit_journey(journey: ConvertedJourney, models: Sequence[str],
                   params: batch_models.ModelParams | None = None) -> list[Credit]:
    """Per-touch credits of one conversion under each model (zero-weight touches omitted)."""
    conversion = journey.conversion
    out: list[Credit] = []
    if not journey.touches:
        for model in models:
            out.append(Credit(model, conversion.order_id, conversion.user_id, conversion.ts_ms,
                              0, UNATTRIBUTED, "", conversion.ts_ms, 1.0, conversion.revenue,
                              conversion.currency, journey.stage))
        return out
    table = journey_table(journey)
    for model in models:
        weights = batch_models.touch_weights(table, model, params)
        for index, (touch, weight) in enumerate(zip(journey.touches, weights.tolist(),
                                                    strict=True)):
            if weight == 0.0:
                continue
            out.append(Credit(model, conversion.order_id, conversion.user_id, conversion.ts_ms,
                              index, touch.channel, touch.campaign, touch.ts_ms, weight,
                              conversion.revenue * weight, conversion.currency, journey.stage))
    return out
