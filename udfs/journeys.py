"""User journeys: the touches that led to each conversion.

A journey is the ordered list of a user's touchpoints inside the lookback window before a
conversion (default 30 days, optionally only the last N touches). A conversion closes the
journey: touches before it count for it and not for the user's next order.

The logic is a small state plus `step(state, event)`; engines only load the state, call
it with events in event-time order, and store the state back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.records import Conversion, Touchpoint
from udfs.lifecycle import LifecycleConfig, stage_of

DAY_MS = 86_400_000


@dataclass(frozen=True)
class JourneyConfig:
    lookback_days: float = 30.0
    max_touches: int | None = None  # keep only the last N touches of a journey
    winback_days: float = 90.0  # previous order older than this: a winback, else a repeat
    history_days: float = 730.0  # how long a user's last order is remembered

    def __post_init__(self) -> None:
        if self.lookback_days <= 0:
            raise ValueError(f"lookback_days must be positive, got {self.lookback_days}")
        if self.max_touches is not None and self.max_touches < 1:
            raise ValueError(f"max_touches must be at least 1, got {self.max_touches}")
        if self.history_days < self.winback_days:
            raise ValueError("history_days must be at least winback_days, or winbacks would "
                             "look like new customers")

    @property
    def lookback_ms(self) -> int:
        return int(self.lookback_days * DAY_MS)

    @property
    def history_ms(self) -> int:
        return int(self.history_days * DAY_MS)


@dataclass
class JourneyState:
    """Per user: open touches (time-ordered) and the time of the last order."""

    touches: list[Touchpoint] = field(default_factory=list)
    last_order_ts_ms: int | None = None


@dataclass(frozen=True)
class ConvertedJourney:
    conversion: Conversion
    touches: tuple[Touchpoint, ...]
    stage: str = "unknown"  # lifecycle stage of the order (udfs.lifecycle)


def event_order(event: Touchpoint | Conversion) -> tuple[int, int]:
    """Sort key for one user's events: by time; at equal times a touch precedes the order."""
    return (event.ts_ms, 1 if isinstance(event, Conversion) else 0)


def step(
    state: JourneyState, event: Touchpoint | Conversion, config: JourneyConfig
) -> tuple[JourneyState, list[ConvertedJourney]]:
    """Advance one user's state by one event (events must arrive in `event_order`)."""
    if isinstance(event, Touchpoint):
        return JourneyState([*state.touches, event], state.last_order_ts_ms), []
    window_start = event.ts_ms - config.lookback_ms
    touches = [t for t in state.touches if window_start <= t.ts_ms <= event.ts_ms]
    if config.max_touches is not None:
        touches = touches[-config.max_touches:]
    stage = stage_of(event.user_id, state.last_order_ts_ms, event.ts_ms,
                     LifecycleConfig(config.winback_days))
    journey = ConvertedJourney(event, tuple(touches), stage)
    return JourneyState([], event.ts_ms), [journey]


def expire(state: JourneyState, watermark_ms: int, config: JourneyConfig) -> JourneyState:
    """Drop touches that no future conversion (ts >= watermark) can reach any more, and an
    order history older than `history_days`."""
    horizon = watermark_ms - config.lookback_ms
    kept = [t for t in state.touches if t.ts_ms >= horizon]
    last_order = state.last_order_ts_ms
    if last_order is not None and last_order + config.history_ms < watermark_ms:
        last_order = None
    if len(kept) == len(state.touches) and last_order == state.last_order_ts_ms:
        return state
    return JourneyState(kept, last_order)


def next_wake_up(state: JourneyState, config: JourneyConfig) -> int | None:
    """When `expire` next has something to drop (None: nothing left to keep)."""
    times = []
    if state.touches:
        times.append(state.touches[-1].ts_ms + config.lookback_ms + 1)
    if state.last_order_ts_ms is not None:
        times.append(state.last_order_ts_ms + config.history_ms + 1)
    return min(times) if times else None


def journeys_of(events: list[Touchpoint | Conversion],
                config: JourneyConfig) -> list[ConvertedJourney]:
    """All converted journeys of one user's events, in any arrival order (batch use)."""
    state = JourneyState()
    out: list[ConvertedJourney] = []
    for event in sorted(events, key=event_order):
        state, produced = step(state, event, config)
        out.extend(produced)
    return out
