"""Repeat buying with a known generating process, for the sample telemetry.

A converting user's first order is followed by repeat orders drawn from a BG/NBD (Fader,
Hardie & Lee 2005; the definitions of `udfs/ltv/models/bgnbd.py`, time in weeks): the user buys
at rate lambda ~ Gamma(r, rate alpha) per week while active, the times between purchases
exponential(lambda); after each repeat purchase it becomes inactive for good with
probability p ~ Beta(a, b) (it is active at its first order: the first order is not one of
the x repeat purchases). Each order's value comes from a Gamma-Gamma (Fader, Hardie & Lee
2005b; `udfs/ltv/models/gamma.py`): the user's nu ~ Gamma(q, rate v), a repeat order's value
~ Gamma(p, rate nu), so the population's mean repeat order is p v / (q - 1). The first
order's value may follow its own shape (`first_p`: Gamma(first_p, rate nu)), so that a
channel's first orders can look poor while its customers come back.

The parameters differ by acquisition channel: the channel of the last touch before the
user's first order, `DIRECT` for none. A fit of `udfs.ltv.model` on the plan's orders per
acquisition cohort recovers them (tests/unit/test_repeat_buying.py).

Draws come from a generator of each user's own (seeded by the plan's seed and the user),
so a plan is deterministic for its seed and one user's draws shift no other user's.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

DIRECT = "(direct)"  # the acquisition channel of a user without a touch before its first order
WEEK_NS = 7 * 24 * 3_600_000_000_000
RETARGET_LEAD_NS = 6 * 3_600_000_000_000  # a retargeting touch comes up to 6 h before its order


@dataclass(frozen=True)
class BuyingProcess:
    """One cohort's generating process: BG/NBD purchases (weeks), Gamma-Gamma values.

    r, alpha: purchase rate lambda ~ Gamma(r, rate alpha) per week (mean r / alpha);
    a, b: dropout after each repeat purchase with probability ~ Beta(a, b) (mean a / (a + b));
    p, q, v: a repeat order's value ~ Gamma(p, rate nu), nu ~ Gamma(q, rate v) (mean
    p v / (q - 1)); first_p: the first order's value ~ Gamma(first_p, rate nu) (None: the
    plan's own first-order value).
    """

    r: float
    alpha: float
    a: float
    b: float
    p: float
    q: float
    v: float
    first_p: float | None = None

    def __post_init__(self) -> None:
        for name in ("r", "alpha", "a", "b", "p", "q", "v", "first_p"):
            value = getattr(self, name)
            if value is None and name == "first_p":
                continue
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"BuyingProcess.{name} must be a positive number, got {value!r}")

    def mean_rate(self) -> float:
        """The population's mean purchase rate per week while active, r / alpha."""
        return self.r / self.alpha

    def mean_dropout(self) -> float:
        """The population's mean dropout probability after a repeat purchase, a / (a + b)."""
        return self.a / (self.a + self.b)

    def mean_order_value(self) -> float:
        """The population's mean repeat order value, p v / (q - 1) (infinite for q <= 1)."""
        return self.p * self.v / (self.q - 1.0) if self.q > 1.0 else math.inf

    def mean_first_order_value(self) -> float | None:
        """The population's mean first order value (None: the plan's own)."""
        if self.first_p is None:
            return None
        return self.first_p * self.v / (self.q - 1.0) if self.q > 1.0 else math.inf


class Order(NamedTuple):
    """One order of a user: its time, its value, and the retargeting touch (channel,
    campaign, time) that came before it, if any."""

    ts_ns: int
    revenue: float
    touch: tuple[str, str, int] | None = None


@dataclass(frozen=True)
class RepeatBuying:
    """The buying process of each acquisition channel (`default` for any channel not
    listed, `DIRECT` included unless listed); a repeat order is a direct order, or with
    probability `retarget_share` preceded by one touch of a `retargeting` campaign."""

    channels: Mapping[str, BuyingProcess]
    default: BuyingProcess
    retarget_share: float = 0.05
    retargeting: tuple[tuple[str, str], ...] = (("paid_social", "meta-retargeting"),
                                                ("email", "cart-reminder"))

    def __post_init__(self) -> None:
        object.__setattr__(self, "channels", MappingProxyType(dict(self.channels)))
        if not 0.0 <= self.retarget_share <= 1.0:
            raise ValueError(f"RepeatBuying.retarget_share must lie in [0, 1], "
                             f"got {self.retarget_share}")
        if self.retarget_share > 0 and not self.retargeting:
            raise ValueError("RepeatBuying.retargeting must name a campaign when "
                             "retarget_share > 0")

    def process(self, channel: str) -> BuyingProcess:
        """The buying process of users acquired by `channel`."""
        return self.channels.get(channel, self.default)

    def orders(self, user: str, channel: str, first_ns: int, end_ns: int,
               first_revenue: float, seed: int) -> list[Order]:
        """The user's first order (at `first_ns`; its value `first_revenue` unless the
        channel's process sets first_p) and its repeat orders before `end_ns`."""
        rng = random.Random(f"repeat-buying:{seed}:{user}")
        return draw_orders(self.process(channel), first_ns, end_ns, first_revenue, rng,
                           self.retarget_share, self.retargeting)


def draw_orders(process: BuyingProcess, first_ns: int, end_ns: int, first_revenue: float,
                rng: random.Random, retarget_share: float = 0.0,
                retargeting: tuple[tuple[str, str], ...] = ()) -> list[Order]:
    """One user's orders from `process`: the first at `first_ns`, then the repeat purchases
    of the BG/NBD up to (not including) `end_ns`, each valued by the Gamma-Gamma."""
    rate = rng.gammavariate(process.r, 1.0 / process.alpha)  # purchases per week
    dropout = rng.betavariate(process.a, process.b)
    nu = rng.gammavariate(process.q, 1.0 / process.v)  # the user's rate of spend
    if process.first_p is not None:
        first_revenue = _value(rng, process.first_p, nu)
    orders = [Order(first_ns, first_revenue)]
    at = first_ns
    while rate > 0:
        at += int(rng.expovariate(rate) * WEEK_NS)
        if at >= end_ns:
            break
        touch = None
        if retarget_share > 0 and rng.random() < retarget_share:
            lead = int(rng.random() * min(RETARGET_LEAD_NS, (at - orders[-1].ts_ns) // 2))
            channel, campaign = retargeting[rng.randrange(len(retargeting))]
            touch = (channel, campaign, at - lead)
        orders.append(Order(at, _value(rng, process.p, nu), touch))
        if rng.random() < dropout:
            break
    return orders


def _value(rng: random.Random, shape: float, nu: float) -> float:
    """An order's value ~ Gamma(shape, rate nu), in cents (at least one)."""
    return max(0.01, round(rng.gammavariate(shape, 1.0 / nu), 2))


# The demo's customers: paid social brings small first orders (about $27) from customers
# who buy again about every four weeks and seldom leave; paid search brings larger first
# orders (about $96) from customers who seldom come back. The other channels lie between.
DEMO_REPEAT_BUYING = RepeatBuying(
    channels={
        "paid_social": BuyingProcess(r=2.0, alpha=8.0, a=1.0, b=9.0,
                                     p=6.0, q=4.0, v=15.0, first_p=5.5),
        "paid_search": BuyingProcess(r=0.5, alpha=10.0, a=2.0, b=3.0,
                                     p=6.0, q=4.0, v=24.0, first_p=12.0),
    },
    default=BuyingProcess(r=0.8, alpha=8.0, a=1.0, b=3.0, p=6.0, q=4.0, v=20.0),
)
REPEAT_BUYING_PRESETS = {"demo": DEMO_REPEAT_BUYING}
