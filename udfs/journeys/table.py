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
"""Between the steps of a path as text: a path summary file's `path` column (docs/attribution.md);
reading splits on ">" and strips the names."""
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
