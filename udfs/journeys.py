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

DAY_MS = 86_400_000


@dataclass(frozen=True)
class JourneyConfig:
    lookback_days: float = 30.0
    max_touches: int | None = None  # keep only the last N touches of a journey

    def __post_init__(self) -> None:
        if self.lookback_days <= 0:
            raise ValueError(f"lookback_days must be positive, got {self.lookback_days}")
        if self.max_touches is not None and self.max_touches < 1:
            raise ValueError(f"max_touches must be at least 1, got {self.max_touches}")

    @property
    def lookback_ms(self) -> int:
        return int(self.lookback_days * DAY_MS)


@dataclass
class JourneyState:
    """Per user: open touches (time-ordered) and the time of the last order."""

    touches: list[Touchpoint] = field(default_factory=list)
    last_order_ts_ms: int | None = None

    def is_empty(self) -> bool:
        return not self.touches and self.last_order_ts_ms is None


@dataclass(frozen=True)
class ConvertedJourney:
    conversion: Conversion
    touches: tuple[Touchpoint, ...]


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
    journey = ConvertedJourney(event, tuple(touches))
    return JourneyState([], event.ts_ms), [journey]


def expire(state: JourneyState, watermark_ms: int, config: JourneyConfig) -> JourneyState:
    """Drop touches that no future conversion (ts >= watermark) can reach any more."""
    horizon = watermark_ms - config.lookback_ms
    kept = [t for t in state.touches if t.ts_ms >= horizon]
    return state if len(kept) == len(state.touches) else JourneyState(kept, state.last_order_ts_ms)


def journeys_of(events: list[Touchpoint | Conversion],
                config: JourneyConfig) -> list[ConvertedJourney]:
    """All converted journeys of one user's events, in any arrival order (batch use)."""
    state = JourneyState()
    out: list[ConvertedJourney] = []
    for event in sorted(events, key=event_order):
        state, produced = step(state, event, config)
        out.extend(produced)
    return out
