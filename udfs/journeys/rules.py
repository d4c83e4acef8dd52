"""User journeys: the touches that led to each conversion.

A journey is the ordered list of a user's touchpoints inside the lookback window before a
conversion (default 30 days, optionally only the last N touches). A conversion closes the
journey: touches before it count for it and not for the user's next order. A journey also
closes, without conversion, once its last touch is older than the lookback: from then on
no order can take those touches (the data-driven models learn from both kinds).

The logic is a small state plus `step(state, event)`; engines only load the state, call
it with events in event-time order, and store the state back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from schemas.records import Conversion, Touchpoint
from udfs.lifecycle import LifecycleConfig, stage_of
from udfs.periods import DAY_MS

_new = tuple.__new__  # builds a NamedTuple in C (its own __new__ is Python)


@dataclass(frozen=True)
class JourneyConfig:
    lookback_days: float = 30.0
    max_touches: int | None = None  # keep only the last N touches of a journey
    winback_days: float = 90.0  # previous order older than this: a winback, else a repeat
    history_days: float = 730.0  # how long a user's last order is remembered
    # an order id seen again within this much event time is a duplicate (None: the lookback)
    duplicate_order_days: float | None = None
    # a stream takes an event this far behind its watermark as a correction (it re-credits
    # what it changes: udfs/journeys/corrections.py); only older ones are late (0: every
    # event behind the watermark is late). Every event of the horizon is kept in state.
    correction_days: float = 1.0
    # ordinary HTTP server spans that land with campaign parameters or from another site
    # become touches, their channel named by this rule file (udfs/traffic/channel_rules.py;
    # a path, relative to the config file's folder). Empty: the shipped rules, web
    # analytics' default channel grouping (jobs/config/channel_rules.yaml)
    channel_rules: str = ""
    # where a landing span's user is when it has no enduser.id / user.id: a span attribute
    # (e.g. a header the instrumentation captures, http.request.header.x-user-id), or
    # "cookie:<name>", a cookie of the captured Cookie header. Empty: nowhere else
    landing_user: str = ""
    # a touch of the channel and campaign of the user's touch before it, at most this many
    # minutes after it, is the same visit (a reload, a second page of the landing, a second
    # click on the same ad): no new touch. 0: every touch counts. Web analytics' sessions
    # end after 30 minutes without a hit
    visit_minutes: float = 0.0

    def __post_init__(self) -> None:
        # messages name the field: the job config reads its `journey` section into this class
        if not self.lookback_days > 0:
            raise ValueError(f"lookback_days must be positive, got {self.lookback_days}")
        if self.max_touches is not None and self.max_touches < 1:
            raise ValueError(f"max_touches must be at least 1 or null, got {self.max_touches}")
        if not self.winback_days > 0:
            raise ValueError(f"winback_days must be positive, got {self.winback_days}")
        if self.history_days < self.winback_days:
            raise ValueError("history_days must be at least winback_days, or winbacks would "
                             "look like new customers")
        if self.duplicate_order_days is not None and not self.duplicate_order_days > 0:
            raise ValueError("duplicate_order_days must be positive or null, got "
                             f"{self.duplicate_order_days}")
        if self.landing_user.strip() != self.landing_user or " " in self.landing_user or (
                self.landing_user.startswith("cookie:") and len(self.landing_user) == 7):
            raise ValueError("landing_user must be an attribute name or cookie:<name>, got "
                             f"{self.landing_user!r}")
        if not self.correction_days >= 0:
            raise ValueError(f"correction_days must be 0 or more, got {self.correction_days}")
        if not 0 <= self.visit_minutes * 60_000 < self.lookback_days * DAY_MS:
            raise ValueError("visit_minutes must be 0 or more, and shorter than the lookback, "
                             f"got {self.visit_minutes}")

    # read for every event: computed once (a frozen dataclass still lets cached_property
    # fill the instance dict)
    @cached_property
    def lookback_ms(self) -> int:
        return int(self.lookback_days * DAY_MS)

    @cached_property
    def history_ms(self) -> int:
        return int(self.history_days * DAY_MS)

    @property
    def duplicate_order_ms(self) -> int:
        return int((self.duplicate_order_days or self.lookback_days) * DAY_MS)

    @cached_property
    def visit_ms(self) -> int:
        return int(self.visit_minutes * 60_000)

    @property
    def correction_ms(self) -> int:
        return int(self.correction_days * DAY_MS)

    @cached_property
    def lifecycle(self) -> LifecycleConfig:
        return LifecycleConfig(self.winback_days)


@dataclass
class JourneyState:
    """Per user: open touches (time-ordered) and the time of the last order."""

    touches: list[Touchpoint] = field(default_factory=list)
    last_order_ts_ms: int | None = None


# Closed journeys are NamedTuples, not frozen dataclasses: a stream makes one per order
# and per lapsed journey, and a frozen dataclass's __init__ (object.__setattr__ per field)
# costs several times a tuple's.
class ConvertedJourney(NamedTuple):
    conversion: Conversion
    touches: tuple[Touchpoint, ...]
    stage: str = "unknown"  # lifecycle stage of the order (udfs.lifecycle)


class NonConvertingJourney(NamedTuple):
    """Touches whose lookback passed without an order (those within the lookback of the
    last one, the last N of them); closed at `close_ts_ms` = last touch + lookback + 1."""

    user_id: str
    touches: tuple[Touchpoint, ...]
    close_ts_ms: int


ClosedJourney = ConvertedJourney | NonConvertingJourney


def close_ts(journey: ClosedJourney) -> int:
    """When a journey closed: its order's time, or its last touch + lookback + 1."""
    if isinstance(journey, ConvertedJourney):
        return journey.conversion.ts_ms
    return journey.close_ts_ms


def close_stale(state: JourneyState, now_ms: int,
                config: JourneyConfig) -> tuple[JourneyState, list[NonConvertingJourney]]:
    """Close the open touches as a non-converting journey if the lookback of the last one
    has passed by `now_ms` (the time of the next event, or the watermark)."""
    if not state.touches or state.touches[-1].ts_ms + config.lookback_ms >= now_ms:
        return state, []
    last = state.touches[-1]
    touches = [t for t in state.touches if t.ts_ms >= last.ts_ms - config.lookback_ms]
    if config.max_touches is not None:
        touches = touches[-config.max_touches:]
    journey = NonConvertingJourney(last.user_id, tuple(touches),
                                   last.ts_ms + config.lookback_ms + 1)
    return JourneyState([], state.last_order_ts_ms), [journey]


def event_order(event: Touchpoint | Conversion) -> tuple[int, int]:
    """Sort key for one user's events: by time; at equal times a touch precedes the order."""
    return (event.ts_ms, 1 if isinstance(event, Conversion) else 0)


def step(
    state: JourneyState, event: Touchpoint | Conversion, config: JourneyConfig
) -> tuple[JourneyState, list[ClosedJourney]]:
    """Advance one user's state by one event (events must arrive in `event_order`).

    Returns the journeys this event closed: a stale open journey (non-converting) and/or
    the conversion's own journey."""
    open_touches = state.touches
    closed: list[ClosedJourney] = []
    if open_touches and open_touches[-1].ts_ms + config.lookback_ms < event.ts_ms:
        state, stale = close_stale(state, event.ts_ms, config)
        closed.extend(stale)
    if isinstance(event, Touchpoint):
        if config.visit_ms and state.touches and same_visit(state.touches[-1], event,
                                                            config.visit_ms):
            return state, closed  # the visit of the touch before it goes on
        return JourneyState([*state.touches, event], state.last_order_ts_ms), closed
    closed.append(_order_journey(state.touches, state.last_order_ts_ms, event, config))
    return JourneyState([], event.ts_ms), closed


def same_visit(before: Touchpoint, touch: Touchpoint, visit_ms: int) -> bool:
    """True when `touch` continues the visit of the touch kept before it: the same channel
    and campaign, at most `visit_ms` later."""
    return (touch.channel == before.channel and touch.campaign == before.campaign
            and touch.ts_ms - before.ts_ms <= visit_ms)


def _order_journey(touches: list[Touchpoint], last_order_ts_ms: int | None,
                   order: Conversion, config: JourneyConfig) -> ConvertedJourney:
    """An order's journey: the open touches (time-ordered) within its lookback, the last
    N of them, and its lifecycle stage."""
    window_start = order.ts_ms - config.lookback_ms
    # usually every open touch is inside the window: then no copy
    kept = touches if not touches or (touches[0].ts_ms >= window_start
                                      and touches[-1].ts_ms <= order.ts_ms) \
        else [t for t in touches if window_start <= t.ts_ms <= order.ts_ms]
    if config.max_touches is not None:
        kept = kept[-config.max_touches:]
    if last_order_ts_ms is not None and order.ts_ms - last_order_ts_ms > config.history_ms + 1:
        # forgotten (the user is new again): the stream's timer at last order + history
        # + 1 ms expires it before any order after that millisecond
        last_order_ts_ms = None
    return _new(ConvertedJourney, (order, tuple(kept), stage_of(
        order.user_id, last_order_ts_ms, order.ts_ms, config.lifecycle)))


def _unexpired(touches: list[Touchpoint], last_order_ts_ms: int | None, watermark_ms: int,
               config: JourneyConfig) -> tuple[list[Touchpoint], int | None]:
    """The touches (time-ordered) and order history `expire` keeps (the same list when
    every touch is kept)."""
    horizon = min(watermark_ms, touches[-1].ts_ms if touches else watermark_ms) \
        - config.lookback_ms
    # touches are in time order: usually the first one is still needed, and so all are
    kept = touches if not touches or touches[0].ts_ms >= horizon \
        else [t for t in touches if t.ts_ms >= horizon]
    if last_order_ts_ms is not None and last_order_ts_ms + config.history_ms < watermark_ms:
        last_order_ts_ms = None
    return kept, last_order_ts_ms


def expire(state: JourneyState, watermark_ms: int, config: JourneyConfig) -> JourneyState:
    """Drop touches that neither a future conversion (ts >= watermark) nor the open
    journey's own close can reach any more, and an order history older than
    `history_days`. Call `close_stale` first."""
    kept, last_order = _unexpired(state.touches, state.last_order_ts_ms, watermark_ms, config)
    if kept is state.touches and last_order == state.last_order_ts_ms:
        return state
    return JourneyState(kept, last_order)


def next_wake_up(state: JourneyState, config: JourneyConfig) -> int | None:
    """When `expire` next has something to drop (None: nothing left to keep)."""
    touch = state.touches[-1].ts_ms + config.lookback_ms + 1 if state.touches else None
    if state.last_order_ts_ms is None:
        return touch
    order = state.last_order_ts_ms + config.history_ms + 1
    return order if touch is None or order < touch else touch


def advance_user(state: JourneyState | None, events: list[Touchpoint | Conversion],
                 now_ms: int, config: JourneyConfig
                 ) -> tuple[JourneyState | None, list[ClosedJourney], int | None]:
    """One user brought up to `now_ms` (a watermark): `step` over `events` (in
    `event_order`, all at or before now_ms), then `close_stale` and `expire` at now_ms.
    Returns the new state (None: nothing left to remember), the journeys closed and
    `next_wake_up` of the state.

    The same as calling those functions one after the other (and built from the same
    rules), in one call with the state in local variables: a stream does this for every
    user that has events, hundreds of thousands of times a minute, and the separate calls
    and the intermediate states were most of the cost."""
    lookback = config.lookback_ms
    touches = list(state.touches) if state is not None else []
    last_order = state.last_order_ts_ms if state is not None else None
    closed: list[ClosedJourney] = []
    for event in events:
        ts = event.ts_ms
        if touches and touches[-1].ts_ms + lookback < ts:  # the open journey went stale
            closed += close_stale(JourneyState(touches, last_order), ts, config)[1]
            touches = []
        if type(event) is Touchpoint:
            touches.append(event)
            continue
        closed.append(_order_journey(touches, last_order, event, config))
        touches = []
        last_order = ts
    if touches and touches[-1].ts_ms + lookback < now_ms:
        closed += close_stale(JourneyState(touches, last_order), now_ms, config)[1]
        touches = []
    touches, last_order = _unexpired(touches, last_order, now_ms, config)
    if not touches and last_order is None:
        return None, closed, None
    after = JourneyState(touches, last_order)
    return after, closed, next_wake_up(after, config)


def closed_journeys_of(events: list[Touchpoint | Conversion],
                       config: JourneyConfig) -> list[ClosedJourney]:
    """Every journey of one user's events, in any arrival order, as a stream that ran to
    its end would close them (the open touches close last)."""
    state = JourneyState()
    out: list[ClosedJourney] = []
    for event in sorted(events, key=event_order):
        state, produced = step(state, event, config)
        out.extend(produced)
    out.extend(close_stale(state, 2**62, config)[1])
    return out


def journeys_of(events: list[Touchpoint | Conversion],
                config: JourneyConfig) -> list[ConvertedJourney]:
    """The converted journeys of one user's events, in any arrival order (batch use)."""
    return [j for j in closed_journeys_of(events, config) if isinstance(j, ConvertedJourney)]
