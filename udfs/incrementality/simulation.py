"""Users who would buy anyway, and channels aimed at them: a simulation where attribution's
association and a channel's causal effect part ways, with holdout tests to tell them apart
(bench/accuracy.py's selection scenarios: their errors and the intervals' coverage).

Each user has a baseline propensity b to buy without any ad (Beta-distributed: most
users seldom buy, a few often). A channel reaches a user with a probability that grows
with b for the channels that target likely buyers -- retargeting (recent visitors), brand
search (people who know the shop), email (customers) -- and that does not depend on b for
the prospecting channels (display, paid social). Each channel c has a causal lift l_c: a
user shown the channels S buys with probability

    p(S) = 1 - (1 - b) * prod_{c in S} (1 - l_c)

so the true incremental conversions of c are, summed over the users it was shown to,
p(S) - p(S without c): what a holdout of c estimates. Each channel holds a random share
of its audience out (they are not shown it); the exposed and held-out arms give the
measured lift (udfs/incrementality). The touches of a journey come in a random order,
brand search and retargeting last (they follow the others).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from udfs.incrementality.holdouts import Arm, Lift, lift
from udfs.journeys import JourneyTable, from_coded_paths


@dataclass(frozen=True)
class Channel:
    name: str
    reach: float  # the share of all users in its audience, on average
    targeting: float  # 0: reaches users at random; > 0: by propensity ** targeting
    lift: float  # causal: the chance it makes a user buy who would not have
    last: int = 0  # touches with a higher rank come later in a journey


CHANNELS = (
    Channel("retargeting", 0.20, 2.0, 0.002, last=2),
    Channel("brand_search", 0.25, 1.5, 0.004, last=1),
    Channel("email", 0.30, 1.5, 0.003),
    Channel("display", 0.35, 0.0, 0.010),
    Channel("paid_social", 0.30, 0.0, 0.012),
)
PROPENSITY = (0.4, 12.0)  # Beta(a, b): mean 3.2 %, a long tail of likely buyers


@dataclass(frozen=True)
class Population:
    """One simulated population: who was eligible for and shown each channel, who
    bought, and the truth."""

    channels: tuple[Channel, ...]
    eligible: np.ndarray  # users x channels: in the channel's audience
    held_out: np.ndarray  # users x channels: in the audience, held out of it
    converted: np.ndarray  # per user
    truth: np.ndarray  # per channel: true incremental conversions in its exposed users

    @property
    def shown(self) -> np.ndarray:
        return self.eligible & ~self.held_out

    def measured(self, alpha: float = 0.05) -> list[Lift]:
        """Each channel's holdout: exposed against held-out users of its audience."""
        out = []
        y = self.converted.astype(float)
        for at in range(len(self.channels)):
            exposed = y[self.eligible[:, at] & ~self.held_out[:, at]]
            held = y[self.eligible[:, at] & self.held_out[:, at]]
            out.append(lift(Arm(len(exposed), exposed.sum(), exposed.sum()),
                            Arm(len(held), held.sum(), held.sum()), alpha))
        return out

    def journeys(self, rng: np.random.Generator) -> JourneyTable:
        """Every user with a touch as a path summary (identical paths summed)."""
        shown = self.shown
        ranks = np.array([c.last for c in self.channels], float)
        # order: a random key per touch, the channels that come last ranked above it
        keys = np.where(shown, ranks[None, :] + rng.random(shown.shape), np.inf)
        order = np.argsort(keys, axis=1)
        lengths = shown.sum(axis=1)
        touched = lengths > 0
        # each user's path as a number in base (channels + 1): distinct paths summed
        width = len(self.channels) + 1
        code = np.zeros(len(lengths), np.int64)
        for step in range(len(self.channels)):
            channel = order[:, step]
            present = step < lengths
            code = code * width + np.where(present, channel + 1, 0)
        paths, inverse = np.unique(code[touched], return_inverse=True)
        conv = np.bincount(inverse, self.converted[touched].astype(float), len(paths))
        total = np.bincount(inverse, minlength=len(paths)).astype(float)
        steps, lengths_out = [], []
        for value in paths.tolist():
            digits = []
            while value:
                value, digit = divmod(value, width)
                if digit:
                    digits.append(digit - 1)
            steps += digits[::-1]
            lengths_out.append(len(digits))
        names = tuple(sorted(c.name for c in self.channels))
        recode = np.array([names.index(c.name) for c in self.channels])
        return from_coded_paths(names, recode[np.asarray(steps, np.int64)],
                                np.asarray(lengths_out, np.int64), conv, total - conv, conv)


def simulate(users: int, holdout: float, seed: int,
             channels: tuple[Channel, ...] = CHANNELS) -> Population:
    rng = np.random.default_rng(seed)
    b = rng.beta(*PROPENSITY, users)
    mean_b = PROPENSITY[0] / sum(PROPENSITY)
    eligible = np.zeros((users, len(channels)), bool)
    for at, c in enumerate(channels):
        chance = np.full(users, c.reach) if not c.targeting else \
            c.reach * (b / mean_b) ** c.targeting / np.mean((b / mean_b) ** c.targeting)
        eligible[:, at] = rng.random(users) < np.minimum(chance, 1.0)
    held_out = eligible & (rng.random(eligible.shape) < holdout)
    shown = eligible & ~held_out
    lifts = np.array([c.lift for c in channels])
    keep = np.where(shown, 1.0 - lifts[None, :], 1.0)  # per channel: 1 - l if shown
    not_buying = (1.0 - b) * keep.prod(axis=1)
    p = 1.0 - not_buying
    converted = rng.random(users) < p
    # without channel c: its factor back to 1
    truth = np.array([((not_buying / keep[:, at] - not_buying) * shown[:, at]).sum()
                      for at in range(len(channels))])
    return Population(channels, eligible, held_out, converted, truth)
