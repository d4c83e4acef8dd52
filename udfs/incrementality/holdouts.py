"""What a channel holdout measures: the conversions and revenue the channel caused among the
users it reached, with an interval.

A holdout test randomly keeps a share of the users a channel would reach (its audience,
eligible users) from seeing it: no ads, a public-service ad, a suppressed email. The
users left in the audience see it (the exposed arm). Per arm, each user's orders and
revenue over the test period (0 for users who bought nothing) give

    lift per exposed user  d = mean_exposed - mean_held_out
    incremental total      D = n_exposed * d  (what the channel caused in its exposed users)

Var(d) = s_e^2 / n_e + s_h^2 / n_h (two independent arms), the interval Student's t with
Welch-Satterthwaite's degrees of freedom, as udfs/experiments/statistics.py compares
variants (gbstats' way). The interval of D is n_e times d's: the exposed users are counted,
not estimated. A held-out user costs nothing to reach: the holdout's saving is the
channel's cost per exposed user times the held-out users.

Arms come as sufficient statistics (users, sum and sum of squares of each user's value),
so a stream, a warehouse query or a simulation can each build them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

DEFAULT_ALPHA = 0.05
MIN_ARM_USERS = 2  # a variance needs two users


@dataclass(frozen=True)
class Arm:
    """One arm's users and the sum and sum of squares of a per-user value (orders,
    revenue) over them; users without any count with 0."""

    users: int
    total: float
    squares: float

    @property
    def mean(self) -> float:
        return self.total / self.users if self.users else math.nan

    @property
    def variance(self) -> float:
        """The sample variance of the per-user value (n - 1 in the denominator)."""
        if self.users < MIN_ARM_USERS:
            return math.nan
        spread = self.squares - self.total * self.total / self.users
        return max(spread, 0.0) / (self.users - 1)


@dataclass(frozen=True)
class Lift:
    """A holdout's measure of one value (orders or revenue): what the channel caused in
    its exposed users, `low`..`high` its interval at level 1 - alpha."""

    per_user: float  # d: exposed mean - held-out mean
    incremental: float  # D = exposed users * d
    low: float
    high: float
    exposed_users: int
    held_out_users: int
    alpha: float

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return self.low > 0 or self.high < 0


def lift(exposed: Arm, held_out: Arm, alpha: float = DEFAULT_ALPHA) -> Lift:
    """The exposed arm against the held-out arm (see the module's docstring). An arm of
    fewer than two users has no variance: ValueError naming it."""
    for name, arm in (("exposed", exposed), ("held-out", held_out)):
        if arm.users < MIN_ARM_USERS:
            raise ValueError(f"the {name} arm has {arm.users} users: a holdout needs at least "
                             f"{MIN_ARM_USERS} in each arm")
    d = exposed.mean - held_out.mean
    v_e, v_h = exposed.variance / exposed.users, held_out.variance / held_out.users
    spread = v_e + v_h
    if spread > 0:
        df = spread * spread / (v_e * v_e / (exposed.users - 1)
                                + v_h * v_h / (held_out.users - 1))
        half = float(stats.t.ppf(1 - alpha / 2, df)) * math.sqrt(spread)
    else:
        half = 0.0  # every user the same value in both arms: no spread to speak of
    n = exposed.users
    return Lift(d, n * d, n * (d - half), n * (d + half), exposed.users, held_out.users,
                alpha)
