"""What a run over a plan should count: the events a pipeline uses, and which of the
held-back ones (emitted after everything else) a stream corrects with rather than sets
aside as late."""

from __future__ import annotations

from collections.abc import Iterable

from pipelines.sources.generator import LATE_RANK, Plan, PlannedEvent

JOURNEY_KINDS = ("touchpoint", "conversion")


def valid_events(plan: Plan, correction_ms: int | None = None,
                 slack_ms: int = 300_000) -> Iterable[PlannedEvent]:
    """Events the pipeline should use: not broken at the source and not emitted late; with
    `correction_ms` (a stream's correction horizon), also the held-back events it corrects
    with (`late_beyond`)."""
    corrections = set() if correction_ms is None else _corrections(plan, correction_ms,
                                                                    slack_ms)
    return (e for at, e in enumerate(plan.events)
            if e.kind in JOURNEY_KINDS
            and (e.emit_rank < LATE_RANK or at in corrections))


def _corrections(plan: Plan, correction_ms: int, slack_ms: int) -> set[int]:
    """Where in `plan.events` the held-back events within the horizon are."""
    newest = -(2**63)
    within = set()
    for at, e in enumerate(plan.events):  # in emission order
        ms = e.ts_ns // 1_000_000
        if e.emit_rank >= LATE_RANK and e.kind in JOURNEY_KINDS \
                and ms > newest - slack_ms - correction_ms:
            within.add(at)
        newest = max(newest, ms)  # every span moves its partition's newest time
    return within


def valid_exposures(plan: Plan) -> Iterable[PlannedEvent]:
    """The plan's experiment exposures (none is late or broken)."""
    return (e for e in plan.events if e.kind == "exposure")


def late_beyond(plan: Plan, correction_ms: int, slack_ms: int = 300_000) -> int:
    """Of the held-back events, those a stream with this correction horizon takes as late
    (the rest correct): at or behind the newest event before them, minus the allowed
    out-of-orderness and the horizon (on one partition, exactly)."""
    return plan.late_count - len(_corrections(plan, correction_ms, slack_ms))
