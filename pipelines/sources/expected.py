"""What a run over a plan should count: the events a pipeline uses, and which of the
held-back ones (emitted after everything else) count by arrival rather than go to the late
events (udfs/journeys/arrival.py: an event counts when its record reached Kafka no more than the
horizon after it happened; the plan knows when each record arrives, `arrivals_ns`)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from pipelines.sources.generator import LATE_RANK, SHIP_EVERY_NS, Plan, PlannedEvent, arrivals_ns
from udfs.journeys import arrived_in_time

JOURNEY_KINDS = ("touchpoint", "conversion")


def valid_events(plan: Plan, correction_ms: int | None = None,
                 ship_every_ns: int = SHIP_EVERY_NS) -> Iterable[PlannedEvent]:
    """Events the pipeline should use: not broken at the source and, without
    `correction_ms`, not emitted late; with `correction_ms` (a stream's correction
    horizon), every one that arrived within it (`late_beyond` counts the rest)."""
    if correction_ms is None:
        return (e for e in plan.events if e.kind in JOURNEY_KINDS and e.emit_rank < LATE_RANK)
    counts = in_time(plan, correction_ms, ship_every_ns)
    return (e for e, ok in zip(plan.events, counts, strict=True)
            if e.kind in JOURNEY_KINDS and ok)


def in_time(plan: Plan, correction_ms: int, ship_every_ns: int = SHIP_EVERY_NS) -> np.ndarray:
    """For each event of the plan, whether it arrives within the horizon."""
    ts_ms = np.fromiter((e.ts_ns // 1_000_000 for e in plan.events), np.int64,
                        len(plan.events))
    arrival_ms = np.asarray(arrivals_ns(plan.events, ship_every_ns), np.int64) // 1_000_000
    return arrived_in_time(ts_ms, arrival_ms, correction_ms)


def valid_exposures(plan: Plan) -> Iterable[PlannedEvent]:
    """The plan's experiment exposures (none is late or broken)."""
    return (e for e in plan.events if e.kind == "exposure")


def late_beyond(plan: Plan, correction_ms: int,
                ship_every_ns: int = SHIP_EVERY_NS) -> int:
    """The journey events a stream with this correction horizon takes as late: those that
    arrive more than the horizon after they happened (whatever the partitioning)."""
    counts = in_time(plan, correction_ms, ship_every_ns)
    return sum(1 for e, ok in zip(plan.events, counts, strict=True)
               if e.kind in JOURNEY_KINDS and not ok)
