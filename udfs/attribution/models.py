"""Attribution models over a JourneyTable: per-touch weights that sum to 1 per journey.

Rule-based models need only positions (and times); data-driven ones (`shapley`, `markov`)
learn from every journey, converting or not. All work on whole arrays: a model costs per
distinct path length, channel set or chain state, not per journey.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from schemas.records import UNATTRIBUTED
from udfs.attribution import markov, shapley
from udfs.journeys import JourneyTable
from udfs.periods import DAY_MS

POSITIONAL_MODELS = ("last_click", "first_click", "linear", "position_based")
"""Weights from a touch's place in its journey alone."""
MODELS = (*POSITIONAL_MODELS, "time_decay", "shapley", "shapley_simplified", "markov")
"""Every attribution model: the one list of their names (YAML files keep their own)."""
DATA_DRIVEN_MODELS = ("shapley", "markov")
"""Models fitted on counts over many journeys, converting and not (a stream refits them
once per period: udfs/attribution/data_driven.py)."""
PER_CONVERSION_MODELS = tuple(m for m in MODELS if m not in DATA_DRIVEN_MODELS)
"""Models that need nothing but the conversion's own journey."""


@dataclass(frozen=True)
class ModelParams:
    half_life_days: float = 7.0  # time_decay
    markov_order: int = 1
    shapley_permutations: int = 2000  # sampling above shapley.EXACT_LIMIT channels
    seed: int = 0


@dataclass
class ModelInfo:
    """What a model reports besides weights (removal effects, sampling errors)."""

    removal_effects: dict[str, float] = field(default_factory=dict)
    sampled_sets: int = 0
    max_standard_error: float = 0.0


def validate_models(models: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ValueError(f"unknown attribution model(s) {', '.join(unknown)}; "
                         f"available: {', '.join(MODELS)}")
    if not models:
        raise ValueError("at least one attribution model is needed")
    return tuple(models)


# --- helpers over the flat touch arrays ---------------------------------------------

def _normalise(table: JourneyTable, raw: np.ndarray) -> np.ndarray:
    totals = np.bincount(table.journey_of_touch, weights=raw, minlength=table.size)
    return raw / np.where(totals > 0, totals, 1.0)[table.journey_of_touch]


def _occurrences(table: JourneyTable) -> np.ndarray:
    """How often each touch's channel occurs in its journey."""
    key = table.journey_of_touch * (len(table.channels) + 1) + table.touch_channel
    _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    return counts[inverse].astype(np.float64)


def _last_touch(table: JourneyTable) -> np.ndarray:
    return (table.position == table.lengths[table.journey_of_touch] - 1).astype(np.float64)


def _channel_shares(table: JourneyTable, share: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Spread per-(journey, channel) shares over that channel's touches; journeys flagged in
    `fallback` (nothing positive to share) give everything to the last touch."""
    weights = share / _occurrences(table)
    weights = _normalise(table, weights)
    use_last = fallback[table.journey_of_touch]
    return np.where(use_last, _last_touch(table), weights)


def channel_set_masks(table: JourneyTable) -> np.ndarray:
    """Bitmask of each journey's distinct channels (0 for an empty journey)."""
    if len(table.channels) > 63:
        raise ValueError(f"{len(table.channels)} distinct channels: the set-based models "
                         "support at most 63 (group rare channels together)")
    bits = np.uint64(1) << table.touch_channel.astype(np.uint64)
    masks = np.zeros(table.size, dtype=np.uint64)
    np.bitwise_or.at(masks, table.journey_of_touch, bits)
    return masks


# --- the models ----------------------------------------------------------------------

def positional_weights(table: JourneyTable, model: str) -> np.ndarray:
    position = table.position
    length = table.lengths[table.journey_of_touch]
    if model == "last_click":
        return (position == length - 1).astype(np.float64)
    if model == "first_click":
        return (position == 0).astype(np.float64)
    if model == "linear":
        return 1.0 / length
    if model == "position_based":
        middle = 0.2 / np.maximum(length - 2, 1)
        ends = (position == 0) | (position == length - 1)
        return np.select([length == 1, length == 2, ends], [1.0, 0.5, 0.4], middle)
    raise ValueError(model)


def time_decay_weights(table: JourneyTable, half_life_days: float) -> np.ndarray:
    if not table.has_timestamps:
        raise ValueError("time_decay needs touch and conversion times: use event input "
                         "(--format events), not path summaries")
    if half_life_days <= 0:
        raise ValueError(f"half-life must be positive, got {half_life_days}")
    age = (table.conversion_ts[table.journey_of_touch] - table.touch_ts) / DAY_MS
    return _normalise(table, np.exp2(-np.maximum(age, 0.0) / half_life_days))


def shapley_simplified_weights(table: JourneyTable) -> np.ndarray:
    distinct = np.zeros(table.size)
    key = table.journey_of_touch * (len(table.channels) + 1) + table.touch_channel
    np.add.at(distinct, np.unique(key) // (len(table.channels) + 1), 1.0)
    return 1.0 / (distinct[table.journey_of_touch] * _occurrences(table))


def shapley_weights(table: JourneyTable, params: ModelParams, info: ModelInfo) -> np.ndarray:
    masks = channel_set_masks(table)
    # v(empty set) = 0: journeys without any touch say nothing about channels
    touched = table.lengths > 0
    value = shapley.ValueFunction.from_counts(masks[touched], table.conversions[touched],
                                              table.non_conversions[touched])
    converting = (table.conversions > 0) & (table.lengths > 0)
    sets, set_of_journey = np.unique(masks[converting], return_inverse=True)
    channel_count = len(table.channels)
    phi = np.zeros((max(len(sets), 1), channel_count))  # one spare row: indexable if empty
    members = ((sets[:, None] >> np.arange(channel_count, dtype=np.uint64)) & np.uint64(1)) \
        .astype(bool)
    sizes = members.sum(axis=1)
    rng = np.random.default_rng(params.seed)
    for n in np.unique(sizes):
        rows = np.flatnonzero(sizes == n)
        codes = np.nonzero(members[rows])[1].reshape(len(rows), n)
        if n <= shapley.EXACT_LIMIT:
            phi[rows[:, None], codes] = shapley.exact(codes, value)
            continue
        for row, channels in zip(rows, codes, strict=True):
            estimate, se = shapley.sampled(channels, value, params.shapley_permutations, rng)
            phi[row, channels] = estimate
            info.sampled_sets += 1
            info.max_standard_error = max(info.max_standard_error, float(se.max()))
    phi = np.maximum(phi, 0.0)  # negative contributions are floored, the rest normalised
    journey_set = np.full(table.size, -1)
    journey_set[converting] = set_of_journey
    touch_set = journey_set[table.journey_of_touch]
    share = np.where(touch_set >= 0, phi[np.maximum(touch_set, 0), table.touch_channel], 0.0)
    positive = np.zeros(table.size, bool)
    positive[converting] = phi[: len(sets)].sum(axis=1)[set_of_journey] > 0
    return _channel_shares(table, share, ~positive)


def markov_weights(table: JourneyTable, params: ModelParams, info: ModelInfo) -> np.ndarray:
    effects = markov.removal_effects(table, params.markov_order)
    info.removal_effects = {name: float(e) for name, e in zip(table.channels, effects,
                                                               strict=True)}
    share = effects[table.touch_channel]
    totals = np.bincount(table.journey_of_touch, weights=share / _occurrences(table),
                         minlength=table.size)
    return _channel_shares(table, share, totals <= 0)


def touch_weights(table: JourneyTable, model: str, params: ModelParams | None = None,
                  info: ModelInfo | None = None) -> np.ndarray:
    """Weight of every touch under `model`; each non-empty journey's weights sum to 1."""
    params = params or ModelParams()
    info = info if info is not None else ModelInfo()
    if model in POSITIONAL_MODELS:
        return positional_weights(table, model)
    if model == "time_decay":
        return time_decay_weights(table, params.half_life_days)
    if model == "shapley_simplified":
        return shapley_simplified_weights(table)
    if model == "shapley":
        return shapley_weights(table, params, info)
    if model == "markov":
        return markov_weights(table, params, info)
    raise ValueError(f"unknown attribution model {model!r}; available: {', '.join(MODELS)}")


def attribute(table: JourneyTable, models: tuple[str, ...], params: ModelParams | None = None,
              by_campaign: bool = False) -> tuple[pd.DataFrame, dict[str, ModelInfo]]:
    """Credited conversions and revenue per model and channel (and campaign)."""
    params = params or ModelParams()
    journey = table.journey_of_touch
    group = table.touch_channel * len(table.campaigns) + table.touch_campaign if by_campaign \
        else table.touch_channel
    n_groups = len(table.channels) * (len(table.campaigns) if by_campaign else 1)
    empty = (table.lengths == 0) & (table.conversions > 0)
    frames, infos = [], {}
    for model in validate_models(models):
        info = ModelInfo()
        weights = touch_weights(table, model, params, info)
        infos[model] = info
        conversions = np.bincount(group, weights=weights * table.conversions[journey],
                                  minlength=n_groups)
        revenue = np.bincount(group, weights=weights * table.revenue[journey],
                              minlength=n_groups)
        frame = pd.DataFrame({"model": model, "group": np.arange(n_groups),
                              "conversions": conversions, "revenue": revenue})
        frame = frame[(frame.conversions != 0) | (frame.revenue != 0)]
        if empty.any():
            frame = pd.concat([frame, pd.DataFrame({
                "model": [model], "group": [-1],
                "conversions": [table.conversions[empty].sum()],
                "revenue": [table.revenue[empty].sum()]})])
        frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    width = len(table.campaigns) if by_campaign else 1
    channel_names = np.asarray(table.channels + (UNATTRIBUTED,), dtype=object)
    out["channel"] = channel_names[np.where(out.group >= 0, out.group // width, -1)]
    columns = ["model", "channel"]
    if by_campaign:
        campaign_names = np.asarray(table.campaigns + ("",), dtype=object)
        out["campaign"] = campaign_names[np.where(out.group >= 0, out.group % width, -1)]
        columns.append("campaign")
    out = out[[*columns, "conversions", "revenue"]]
    return out.sort_values(["model", "revenue"], ascending=[True, False],
                           ignore_index=True), infos
