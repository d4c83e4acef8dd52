"""Channel holdouts in a sample plan (`seedance generate --holdouts`, the demo): lift tests
whose answer is known.

In the sample, whether a user buys does not depend on the channels they meet (its personas
buy or not): every channel collects credit for sales it did not cause, as channels shown
to likely buyers do. A holdout gives each channel a cause: of the users in its audience
(those with a touch of it), a share `held_out` is kept from it -- their touches of it are
gone -- and for a share `lift` of the audience the channel made the sale: such a user,
held out, does not buy after the point the channel would have reached them. So the
channel's true incremental orders are `lift` times its exposed users' orders after their
first touch of it, and its holdout measures that. Every user of the audience is exposed to
the flag `holdout.<channel>` at their first touch of the channel (variant `exposed` or
`held_out`), as a provider assigning the audience would.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, replace

from pipelines.sources.generator import Plan, PlannedEvent

HOLDOUT_PREFIX = "holdout."
EXPOSED, HELD_OUT = "exposed", "held_out"
ORDERS = ("conversion", "invalid_conversion")


@dataclass(frozen=True)
class HoldoutPlan:
    channel: str
    held_out: float = 0.1  # of the channel's audience
    lift: float = 0.2  # of the audience's buyers, those the channel made buy


# the demo's: prospecting channels that cause much of what they are credited, paid search
# (mostly brand searches by people who would buy anyway) little, affiliates in between
DEMO_HOLDOUTS = (HoldoutPlan("display", 0.1, 0.45), HoldoutPlan("paid_social", 0.1, 0.5),
                 HoldoutPlan("paid_search", 0.1, 0.06), HoldoutPlan("affiliate", 0.1, 0.2))


@dataclass(frozen=True)
class _Audience:
    """A holdout's draw: each user of the channel's audience with their first touch of it,
    whether they are held out and whether the channel made their sale."""

    reached: dict[str, int]
    held: dict[str, bool]
    caused: dict[str, bool]


def _audience(events: list[PlannedEvent], holdout: HoldoutPlan, seed: int) -> _Audience:
    """Drawn from a generator of the holdout's own, so the rest of the plan does not
    change; the same draw for the holdout and its truth."""
    rng = random.Random(seed ^ zlib.crc32(holdout.channel.encode()))
    reached: dict[str, int] = {}
    for event in events:
        if event.kind == "touchpoint" and event.channel == holdout.channel and \
                event.ts_ns < reached.get(event.user_id, 2**63):
            reached[event.user_id] = event.ts_ns
    held, caused = {}, {}
    for user in sorted(reached):
        held[user] = rng.random() < holdout.held_out
        caused[user] = rng.random() < holdout.lift
    return _Audience(reached, held, caused)


def with_holdout(events: list[PlannedEvent], holdout: HoldoutPlan,
                 seed: int) -> list[PlannedEvent]:
    """The events with the holdout applied (see the module's docstring)."""
    audience = _audience(events, holdout, seed)
    out = []
    for event in events:
        reached = audience.reached.get(event.user_id)
        if reached is not None and audience.held[event.user_id]:
            if event.kind == "touchpoint" and event.channel == holdout.channel:
                continue  # kept from the channel
            if event.kind in ORDERS and audience.caused[event.user_id] and \
                    event.ts_ns >= reached:
                continue  # the sale the channel would have made
        out.append(event)
    flag = HOLDOUT_PREFIX + holdout.channel
    # exposed (and emitted) a millisecond before the touch that reaches the user
    out += [PlannedEvent("exposure", user, at - 1_000_000, flag_key=flag,
                         variant=HELD_OUT if audience.held[user] else EXPOSED,
                         emit_rank=at - 1_000_000)
            for user, at in sorted(audience.reached.items())]
    return out


def with_holdouts(plan: Plan, holdouts: tuple[HoldoutPlan, ...], seed: int) -> Plan:
    """A planned sample (pipelines.sources.generator.plan_events) with these holdouts."""
    events = plan.events
    for holdout in holdouts:
        events = with_holdout(events, holdout, seed)
    return replace(plan, events=sorted(events, key=lambda e: e.emit_rank))


def holdout_truths(plan: Plan, holdouts: tuple[HoldoutPlan, ...], seed: int
                   ) -> dict[str, float]:
    """Per channel, the orders it caused in its exposed users (`true_incremental`, each
    holdout applied after the ones before it, as `with_holdouts` applies them)."""
    events, truths = plan.events, {}
    for holdout in holdouts:
        truths[holdout.channel] = true_incremental(events, holdout, seed)
        events = with_holdout(events, holdout, seed)
    return truths


def true_incremental(events: list[PlannedEvent], holdout: HoldoutPlan,
                     seed: int) -> float:
    """The orders the channel caused in its exposed users, in events planned before the
    holdout (what the holdout should measure): theirs after their first touch of it."""
    audience = _audience(events, holdout, seed)
    return float(sum(
        1 for e in events if e.kind == "conversion" and e.user_id in audience.reached
        and not audience.held[e.user_id] and audience.caused[e.user_id]
        and e.ts_ns >= audience.reached[e.user_id]))
