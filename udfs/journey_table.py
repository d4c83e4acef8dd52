"""Journeys as flat arrays, the shape every attribution model computes on.

Touches of all journeys sit in one set of arrays (channel code, campaign code, time);
`offsets` cut them into journeys. Each journey row carries how many conversions and
non-conversions it stands for (1/0 or 0/1 for a single user's journey; any counts for a
path summary), the revenue and the conversion time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pandas as pd

PATH_SEPARATOR = " > "
TRANSFORMS = ("none", "collapse", "drop_repeats", "unique")
"""collapse: merge consecutive repeats (a>a>b>a -> a>b>a); drop_repeats: keep each channel's
first occurrence (a>b>a -> a>b); unique: keep each channel's last occurrence (a>b>a -> b>a)."""


@dataclass(frozen=True)
class JourneyTable:
    channels: tuple[str, ...]  # channel code -> name
    campaigns: tuple[str, ...]  # campaign code -> name
    offsets: np.ndarray  # int64, n+1: touches of journey j are offsets[j]:offsets[j+1]
    touch_channel: np.ndarray  # int64 codes
    touch_campaign: np.ndarray  # int64 codes
    touch_ts: np.ndarray  # int64 ms since epoch (0 when unknown)
    conversions: np.ndarray  # float64 per journey
    non_conversions: np.ndarray  # float64 per journey
    revenue: np.ndarray  # float64 per journey
    conversion_ts: np.ndarray  # int64 ms (0 when unknown)
    has_timestamps: bool = True

    @property
    def size(self) -> int:
        return len(self.offsets) - 1

    # derived arrays are cached: the models read them many times per table (a frozen
    # dataclass still lets cached_property fill the instance dict)
    @cached_property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @cached_property
    def journey_of_touch(self) -> np.ndarray:
        return np.repeat(np.arange(self.size), self.lengths)

    @cached_property
    def position(self) -> np.ndarray:
        """Index of each touch inside its journey (0 = first)."""
        return np.arange(len(self.touch_channel)) - self.offsets[:-1][self.journey_of_touch]

    def paths(self) -> list[tuple[str, ...]]:
        names = np.asarray(self.channels, dtype=object)[self.touch_channel]
        return [tuple(names[a:b]) for a, b in zip(self.offsets[:-1], self.offsets[1:],
                                                   strict=True)]


def _codes(values: Sequence[str] | np.ndarray) -> tuple[tuple[str, ...], np.ndarray]:
    """Integer codes in sorted-name order (hashing, then a sort of the few distinct names)."""
    codes, uniques = pd.factorize(np.asarray(values, dtype=object), sort=True)
    return tuple(str(u) for u in uniques), codes.astype(np.int64)


def from_paths(paths: Sequence[Sequence[str]], conversions: Sequence[float],
               non_conversions: Sequence[float], revenue: Sequence[float]) -> JourneyTable:
    """Path summaries (the peers' input shape): no timestamps, no campaigns."""
    lengths = np.fromiter((len(p) for p in paths), dtype=np.int64, count=len(paths))
    return from_flat_paths(np.asarray([c for p in paths for c in p], dtype=object), lengths,
                           conversions, non_conversions, revenue)


def from_flat_paths(steps: np.ndarray, lengths: np.ndarray, conversions: Sequence[float],
                    non_conversions: Sequence[float], revenue: Sequence[float]) -> JourneyTable:
    """Path summaries given as all steps in one array, cut by `lengths`."""
    channels, codes = _codes(steps) if len(steps) else ((), np.zeros(0, np.int64))
    return from_coded_paths(channels, codes, lengths, conversions, non_conversions, revenue)


def from_coded_paths(channels: tuple[str, ...], codes: np.ndarray, lengths: np.ndarray,
                     conversions: Sequence[float] | np.ndarray,
                     non_conversions: Sequence[float] | np.ndarray,
                     revenue: Sequence[float] | np.ndarray) -> JourneyTable:
    """Path summaries whose steps are codes into `channels` (sorted names, as `_codes`
    gives them)."""
    return JourneyTable(
        channels=channels, campaigns=("",),
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        touch_channel=codes, touch_campaign=np.zeros(len(codes), np.int64),
        touch_ts=np.zeros(len(codes), np.int64),
        conversions=np.asarray(conversions, dtype=np.float64),
        non_conversions=np.asarray(non_conversions, dtype=np.float64),
        revenue=np.asarray(revenue, dtype=np.float64),
        conversion_ts=np.zeros(len(lengths), np.int64), has_timestamps=False)


def apply_transform(table: JourneyTable, transform: str) -> JourneyTable:
    """Rewrite every path with one of TRANSFORMS (vectorised: one mask over all touches)."""
    if transform == "none" or len(table.touch_channel) == 0:
        return table
    if transform not in TRANSFORMS:
        raise ValueError(f"unknown path transform {transform!r}; choose from {TRANSFORMS}")
    journey = table.journey_of_touch
    channel = table.touch_channel
    if transform == "collapse":
        keep = np.ones(len(channel), bool)
        keep[1:] = (channel[1:] != channel[:-1]) | (journey[1:] != journey[:-1])
    else:
        # first (or last) occurrence of each (journey, channel) pair
        key = journey * (len(table.channels) + 1) + channel
        order = np.arange(len(key)) if transform == "drop_repeats" else np.arange(len(key))[::-1]
        _, first = np.unique(key[order], return_index=True)
        keep = np.zeros(len(key), bool)
        keep[order[first]] = True
    counts = np.bincount(journey[keep], minlength=table.size)
    return replace(table, offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                   touch_channel=channel[keep], touch_campaign=table.touch_campaign[keep],
                   touch_ts=table.touch_ts[keep])


def from_events(events: pd.DataFrame, lookback_days: float = 30.0,
                max_touches: int | None = None) -> JourneyTable:
    """Journeys from event rows, the batch twin of `udfs.journeys.step`.

    Columns: user_id, ts_ms (int), is_conversion (bool), channel, campaign, revenue.
    A conversion takes the user's touches since the previous conversion that lie inside
    its lookback (the last `max_touches` of them); touches not taken by an order form
    non-converting journeys, closed when the lookback of their last touch passed before
    the user's next event (or at the end of the data), with the touches within the
    lookback of that last one -- exactly as `udfs.journeys.step` closes them.
    """
    lookback_ms = int(lookback_days * 86_400_000)
    frame = events[["user_id", "ts_ms", "is_conversion", "channel", "campaign", "revenue"]]
    frame = frame.assign(_kind=frame.is_conversion.astype(np.int8))
    frame = frame.sort_values(["user_id", "ts_ms", "_kind"], kind="stable", ignore_index=True)
    conv = frame.is_conversion.to_numpy(bool)
    user_codes = pd.factorize(frame.user_id)[0]
    ts = frame.ts_ms.to_numpy(np.int64)
    # segments = journeys: a new one starts at a user's first event, after each order, and
    # after a touch whose lookback passed before the next event (it closed unconverted)
    same_user = np.r_[False, user_codes[1:] == user_codes[:-1]]
    after_order = np.r_[False, conv[:-1]]
    after_stale_touch = ~after_order & (np.r_[0, np.diff(ts)] > lookback_ms)
    key = np.cumsum(~same_user | after_order | after_stale_touch)
    touches = frame.loc[~conv].assign(_key=key[~conv])
    orders = frame.loc[conv].assign(_key=key[conv])
    ts_by_order = pd.Series(orders.ts_ms.to_numpy(), index=orders._key.to_numpy())
    end_ts = touches._key.map(ts_by_order)
    open_last = touches.groupby("_key").ts_ms.transform("max")
    converting = end_ts.notna().to_numpy()
    anchor = np.where(converting, end_ts.fillna(0).to_numpy(np.int64), open_last.to_numpy())
    touches = touches[touches.ts_ms.to_numpy() >= anchor - lookback_ms]
    if max_touches is not None:
        from_end = touches.groupby("_key").cumcount(ascending=False)
        touches = touches[from_end.to_numpy() < max_touches]
    # journeys: every order (with or without touches) and every open segment with touches
    open_keys = np.setdiff1d(touches._key.unique(), orders._key.to_numpy())
    journey_keys = np.concatenate([orders._key.to_numpy(), open_keys])
    journey_index = pd.Series(np.arange(len(journey_keys)), index=journey_keys)
    touch_journey = touches._key.map(journey_index).to_numpy()
    order_in_touches = np.argsort(touch_journey, kind="stable")
    counts = np.bincount(touch_journey, minlength=len(journey_keys))
    channels, channel_codes = _codes(touches.channel.to_numpy()[order_in_touches]) \
        if len(touches) else ((), np.zeros(0, np.int64))
    campaigns, campaign_codes = _codes(touches.campaign.to_numpy()[order_in_touches]) \
        if len(touches) else (("",), np.zeros(0, np.int64))
    n_orders = len(orders)
    return JourneyTable(
        channels=channels, campaigns=campaigns,
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        touch_channel=channel_codes, touch_campaign=campaign_codes,
        touch_ts=touches.ts_ms.to_numpy(np.int64)[order_in_touches],
        conversions=np.r_[np.ones(n_orders), np.zeros(len(open_keys))],
        non_conversions=np.r_[np.zeros(n_orders), np.ones(len(open_keys))],
        revenue=np.r_[orders.revenue.to_numpy(np.float64), np.zeros(len(open_keys))],
        conversion_ts=np.r_[orders.ts_ms.to_numpy(np.int64),
                            np.zeros(len(open_keys), np.int64)])
