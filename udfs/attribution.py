"""Per-conversion credits for the streaming job, from the same models as the batch CLI.

A converted journey becomes a one-journey JourneyTable and goes through
`udfs.models.touch_weights`, so a model means the same thing in Flink, in Spark and in
`seedance attribute`. The data-driven models (`shapley`, `markov`) need counts over many
journeys: the stream refits them per period (udfs/data_driven.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from schemas.records import UNATTRIBUTED, Credit
from udfs import models as batch_models
from udfs.journey_table import JourneyTable
from udfs.journeys import ConvertedJourney

_new = tuple.__new__

PER_CONVERSION_MODELS = ("last_click", "first_click", "linear", "position_based",
                         "time_decay", "shapley_simplified")
"""Models that need nothing but the conversion's own journey."""


def validate_models(models: Sequence[str]) -> tuple[str, ...]:
    return batch_models.validate_models(tuple(models))


def journeys_table(journeys: Sequence[ConvertedJourney]) -> JourneyTable:
    """Converted journeys as one table (each journey's weights come out as they would from
    a table of its own: every model computes journey by journey)."""
    touches = [t for journey in journeys for t in journey.touches]
    channels = tuple(sorted({t.channel for t in touches}))
    code = {c: i for i, c in enumerate(channels)}
    count = len(touches)
    lengths = np.fromiter((len(j.touches) for j in journeys), np.int64, len(journeys))
    return JourneyTable(
        channels=channels, campaigns=("",),
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        touch_channel=np.fromiter((code[t.channel] for t in touches), np.int64, count),
        touch_campaign=np.zeros(count, np.int64),
        touch_ts=np.fromiter((t.ts_ms for t in touches), np.int64, count),
        conversions=np.ones(len(journeys)), non_conversions=np.zeros(len(journeys)),
        revenue=np.fromiter((j.conversion.revenue for j in journeys), np.float64,
                            len(journeys)),
        conversion_ts=np.fromiter((j.conversion.ts_ms for j in journeys), np.int64,
                                  len(journeys)))


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


def credit_rows(journeys: Sequence[ConvertedJourney],
                weights: Iterable[tuple[str, np.ndarray]]) -> list[CreditRow]:
    """Credit rows of conversions, model after model, from each model's per-touch weights
    (flat over the touches of the journeys that have any, in journey order): what
    `credits_from_weights` gives journey by journey, built column-wise.

    A stream writes a few rows per conversion per model; building them one Python tuple
    at a time was most of what crediting cost. Here the per-touch columns are gathered
    once, each model's are picked by numpy (zero weights left out) and `zip` makes the
    rows in C."""
    slots = [journey.touches or (None,) for journey in journeys]
    lengths = [len(touches) for touches in slots]
    total = sum(lengths)
    if not total:
        return []
    touched = np.fromiter((touches[0] is not None for touches in slots), bool, len(slots))
    slot_touched = np.repeat(touched, lengths)
    columns: dict[str, list[Any]] = {name: [] for name in
                                     ("order", "user", "ts", "index", "channel", "campaign",
                                      "touch_ts", "revenue", "currency", "stage")}
    for journey, touches, length in zip(journeys, slots, lengths, strict=True):
        conversion = journey.conversion
        columns["order"] += repeat(conversion.order_id, length)
        columns["user"] += repeat(conversion.user_id, length)
        columns["ts"] += repeat(conversion.ts_ms, length)
        columns["revenue"] += repeat(conversion.revenue, length)
        columns["currency"] += repeat(conversion.currency, length)
        columns["stage"] += repeat(journey.stage, length)
        columns["index"] += range(length)
        if touches[0] is None:  # no touches: all of it to UNATTRIBUTED
            columns["channel"].append(UNATTRIBUTED)
            columns["campaign"].append("")
            columns["touch_ts"].append(conversion.ts_ms)
        else:
            columns["channel"] += [touch.channel for touch in touches]
            columns["campaign"] += [touch.campaign for touch in touches]
            columns["touch_ts"] += [touch.ts_ms for touch in touches]
    revenue = np.asarray(columns.pop("revenue"), np.float64)
    objects = {name: np.asarray(values, dtype=object) for name, values in columns.items()}
    order = ("order", "user", "ts", "index", "channel", "campaign", "touch_ts")
    out: list[CreditRow] = []
    for model, touch_weights in weights:
        weight = np.ones(total)
        weight[slot_touched] = touch_weights
        keep = np.flatnonzero(weight != 0.0)
        kept = weight[keep]
        picked = [objects[name][keep].tolist() for name in order]
        out += zip(repeat(model, len(keep)), *picked, kept.tolist(),
                   (revenue[keep] * kept).tolist(), objects["currency"][keep].tolist(),
                   objects["stage"][keep].tolist(), strict=True)
    return out


def per_conversion_credit_rows(journeys: Sequence[ConvertedJourney], models: Sequence[str],
                               params: batch_models.ModelParams | None = None
                               ) -> list[CreditRow]:
    """Per-touch credit rows of conversions under each per-conversion model, all journeys
    in one table per model (a stream credits what one watermark closes in one call)."""
    unknown = [m for m in models if m not in PER_CONVERSION_MODELS]
    if unknown:
        raise ValueError(f"{', '.join(unknown)} needs counts over many journeys: see "
                         "udfs.data_driven")
    touched = [j for j in journeys if j.touches]
    table = journeys_table(touched) if touched else None
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
