"""The backfill in one process on pandas: the same functions the Spark job runs per
partition, run once over all the events. For small ranges, for tests without a JVM, and as
the baseline of bench/backfill.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from pipelines.backfill.archive import read_kind
from pipelines.backfill.credits import (
    concat_credits,
    conversion_credits,
    data_driven_credits,
    fit_weights,
    path_counts,
)
from pipelines.backfill.frames import (
    SORT_KEY,
    BackfillWindow,
    ComputedDays,
    closed_journeys,
    counted_by_arrival,
    events_frame,
    journeys_of_batches,
)
from pipelines.backfill.roi import exploded_claims, link_costs
from udfs.settings import ComputeSettings

CHUNK_ROWS = 200_000  # events per closed_journeys call: bounds the row lists held at once


def read_archive_events(root: Path | str, window: BackfillWindow) -> pd.DataFrame:
    """The window's events from the archive, in SORT_KEY order."""
    touches = read_kind(root, "touchpoints", window.touches_from_ms, window.events_until_ms)
    orders = read_kind(root, "conversions", window.conversions_from_ms, window.events_until_ms)
    events = events_frame(touches, orders)
    return events.sort_values(SORT_KEY, kind="stable", ignore_index=True)


def credits_of_events(events: pd.DataFrame, window: BackfillWindow, settings: ComputeSettings,
                      progress: Callable[[str], None] = print
                      ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The credits of the window's days and the journeys they came from, from events in
    SORT_KEY order (`seedance attribute --format events` runs this too)."""
    chunks = (events.iloc[start:start + CHUNK_ROWS]
              for start in range(0, len(events), CHUNK_ROWS))
    frames = list(journeys_of_batches(chunks, settings, window))
    journeys = pd.concat(frames, ignore_index=True) if frames else \
        closed_journeys(events.iloc[:0], settings, window)
    late = len(events) - int(counted_by_arrival(events, settings).sum())
    progress(f"{len(events):,} events -> {len(journeys):,} journeys needed"
             + (f" ({late:,} events reached Kafka more than journey.correction_days after "
                "they happened: not counted, as in the stream)" if late else ""))
    conversions = journeys[journeys.in_days]
    credits = [conversion_credits(conversions, settings)]
    if settings.data_driven:
        weights = fit_weights(path_counts(journeys), conversions[["period_end_ms", "path"]],
                              settings)
        progress(f"data-driven models fitted for {weights.period_end_ms.nunique():,} "
                 "refit periods")
        credits.append(data_driven_credits(
            conversions.merge(weights, on=["period_end_ms", "path"]), settings))
    return concat_credits(credits), journeys


def compute_events(events: pd.DataFrame, window: BackfillWindow, settings: ComputeSettings,
                   costs: pd.DataFrame, progress: Callable[[str], None] = print
                   ) -> ComputedDays:
    """Credits and linked GPU cost of the window's days from events in SORT_KEY order."""
    all_credits, journeys = credits_of_events(events, window, settings, progress)
    by_day = {day: frame for day, frame in all_credits.groupby("day", sort=False)}
    empty = all_credits.iloc[:0]
    compute, unlinked = link_costs(costs, exploded_claims(journeys), settings, window.days)
    return ComputedDays(lambda day: by_day.get(day, empty), compute, unlinked,
                        {"events": float(len(events)), "journeys": float(len(journeys))})


def compute_from_archive(root: Path | str, window: BackfillWindow, settings: ComputeSettings,
                         costs: pd.DataFrame, progress: Callable[[str], None] = print
                         ) -> ComputedDays:
    return compute_events(read_archive_events(root, window), window, settings, costs, progress)
