"""Per-conversion credits for the streaming job, from the same models as the batch CLI.

A converted journey becomes a one-journey JourneyTable and goes through
`udfs.attribution.models.touch_weights`, so a model means the same thing in Flink, in Spark and in
`seedance attribute`. The data-driven models (`shapley`, `markov`) need counts over many
journeys: the stream refits them per period (udfs/attribution/data_driven.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any

import numpy as np
import pandas as pd

from schemas.records import UNATTRIBUTED, Credit
from udfs.attribution import models as batch_models
from udfs.attribution.models import PER_CONVERSION_MODELS
from udfs.journeys import ConvertedJourney, ConvertedJourneys, JourneyTable, converted_columns

_new = tuple.__new__

def journeys_table(journeys: ConvertedJourneys) -> JourneyTable:
    """Converted journeys (all with touches) as one table (each journey's weights come out
    as they would from a table of its own: every model computes journey by journey)."""
    touches = journeys.touches
    codes, channels = pd.factorize(touches.channel, sort=True)
    return JourneyTable(
        channels=tuple(channels.tolist()), campaigns=("",), offsets=touches.offsets,
        touch_channel=codes.astype(np.int64),
        touch_campaign=np.zeros(len(codes), np.int64), touch_ts=touches.ts_ms,
        conversions=np.ones(len(journeys)), non_conversions=np.zeros(len(journeys)),
        revenue=journeys.revenue, conversion_ts=journeys.ts_ms)


def credits_from_weights(journey: ConvertedJourney, model: str,
                         weights: Sequence[float]) -> list[Credit]:
    """Credit rows of one conversion from its per-touch weights (zero weights omitted; a
    conversion without touches goes to UNATTRIBUTED)."""
    conversion = journey.conversion
    if not journey.touches:
        return [Credit(model, conversion.order_id, conversion.user_id, conversion.ts_ms, 0,
                       UNATTRIBUTED, "", conversion.ts_ms, 1.0, conversion.revenue,
                       conversion.currency, journey.stage)]
    order_id, user_id, ts, revenue = (conversion.order_id, conversion.user_id,
                                      conversion.ts_ms, conversion.revenue)
    currency, stage = conversion.currency, journey.stage
    # tuple.__new__ builds the NamedTuple in C (its own __new__ is a Python function):
    # this runs for every credit row the stream writes
    return [_new(Credit, (model, order_id, user_id, ts, index, touch.channel, touch.campaign,
                          touch.ts_ms, weight, revenue * weight, currency, stage))
            for index, (touch, weight) in enumerate(zip(journey.touches, weights, strict=True))
            if weight != 0.0]


CreditRow = tuple[Any, ...]
"""A credit as a plain tuple, in `schemas.records.Credit`'s field order."""


def credit_rows(journeys: Sequence[ConvertedJourney] | ConvertedJourneys,
                weights: Iterable[tuple[str, np.ndarray]]) -> list[CreditRow]:
    """Credit rows of conversions, model after model, from each model's per-touch weights
    (flat over the touches of the journeys that have any, in journey order): what
    `credits_from_weights` gives journey by journey, built column-wise.

    A stream writes a few rows per conversion per model; building them one Python tuple
    at a time was most of what crediting cost. Here the per-touch columns are gathered
    once, each model's are picked by numpy (zero weights left out) and `zip` makes the
    rows in C."""
    if not isinstance(journeys, ConvertedJourneys):
        journeys = converted_columns(journeys)
    count = len(journeys)
    if not count:
        return []
    touches = journeys.touches
    lengths = touches.lengths
    slots = np.maximum(lengths, 1)  # a journey without touches: one UNATTRIBUTED row
    total = int(slots.sum())
    slot_touched = np.repeat(lengths > 0, slots)
    first_slot = np.cumsum(slots) - slots

    def per_slot(values: np.ndarray) -> np.ndarray:
        return np.repeat(values, slots)

    def per_touch(values: np.ndarray, stand_in: np.ndarray) -> np.ndarray:
        if total == len(values):
            return values
        out = np.empty(total, values.dtype)
        out[slot_touched] = values
        out[~slot_touched] = stand_in
        return out

    untouched = lengths == 0
    columns = (per_slot(journeys.order_id), per_slot(journeys.user_id),
               per_slot(journeys.ts_ms), np.arange(total) - np.repeat(first_slot, slots),
               per_touch(touches.channel, np.full(int(untouched.sum()), UNATTRIBUTED,
                                                  object)),
               per_touch(touches.campaign, np.full(int(untouched.sum()), "", object)),
               per_touch(touches.ts_ms, journeys.ts_ms[untouched]))
    revenue = per_slot(journeys.revenue)
    currency, stage = per_slot(journeys.currency), per_slot(journeys.stage)
    out: list[CreditRow] = []
    for model, touch_weights in weights:
        weight = np.ones(total)
        weight[slot_touched] = touch_weights
        keep = np.flatnonzero(weight != 0.0)
        kept = weight[keep]
        out += zip(repeat(model, len(keep)), *(column[keep].tolist() for column in columns),
                   kept.tolist(), (revenue[keep] * kept).tolist(), currency[keep].tolist(),
                   stage[keep].tolist(), strict=True)
    return out


def per_conversion_credit_rows(journeys: Sequence[ConvertedJourney] | ConvertedJourneys,
                               models: Sequence[str],
                               params: batch_models.ModelParams | None = None
                               ) -> list[CreditRow]:
    """Per-touch credit rows of conversions under each per-conversion model, all journeys
    in one table per model (a stream credits what one watermark closes in one call)."""
    unknown = [m for m in models if m not in PER_CONVERSION_MODELS]
    if unknown:
        raise ValueError(f"{', '.join(unknown)} needs counts over many journeys: see "
                         "udfs.attribution.data_driven")
    if not isinstance(journeys, ConvertedJourneys):
        journeys = converted_columns(journeys)
    touched = journeys.touches.lengths > 0
    table = journeys_table(journeys if touched.all() else journeys.select(touched)) \
        if touched.any() else None
    return credit_rows(journeys, ((model, batch_models.touch_weights(table, model, params)
                                   if table else np.zeros(0)) for model in models))


def credit_journeys(journeys: Sequence[ConvertedJourney], models: Sequence[str],
                    params: batch_models.ModelParams | None = None) -> list[Credit]:
    """`per_conversion_credit_rows` as Credit records."""
    return as_credits(per_conversion_credit_rows(journeys, models, params))


def as_credits(rows: Iterable[CreditRow]) -> list[Credit]:
    return [_new(Credit, row) for row in rows]


def credit_journey(journey: ConvertedJourney, models: Sequence[str],
                   params: batch_models.ModelParams | None = None) -> list[Credit]:
    """Per-touch credits of one conversion under each per-conversion model."""
    return credit_journeys([journey], models, params)
