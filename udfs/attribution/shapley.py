"""Shapley values of the conversion-rate game, exact by subset enumeration.

The game on a journey's distinct channel set S: v(T) = observed conversion rate of the
journeys whose distinct channel set is exactly T (0 when never observed). For |S| <= 16
every subset is enumerated with bitmasks; all sets of one size are solved together as one
matrix product  phi = W_n^T . V  (V: the values of every subset of every set, W_n: the
Shapley coefficients), so the cost is per distinct set size, not per journey. Larger sets
use permutation sampling and report the standard error of each value.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import factorial

import numpy as np

EXACT_LIMIT = 16
_CHUNK_CELLS = 1 << 22  # values materialised at once (2^n subsets x sets): ~32 MB


@dataclass(frozen=True)
class ValueFunction:
    """Observed conversion rate per distinct channel set (as a bitmask)."""

    masks: np.ndarray  # sorted uint64 bitmasks of observed sets
    rates: np.ndarray  # conversion rate of each

    @classmethod
    def from_counts(cls, masks: np.ndarray, conversions: np.ndarray,
                    non_conversions: np.ndarray) -> ValueFunction:
        uniq, inverse = np.unique(masks, return_inverse=True)
        conv = np.bincount(inverse, weights=conversions, minlength=len(uniq)).astype(float)
        total = conv + np.bincount(inverse, weights=non_conversions, minlength=len(uniq))
        rates = np.divide(conv, total, out=np.zeros_like(conv), where=total > 0)
        return cls(uniq, rates)

    def __call__(self, masks: np.ndarray) -> np.ndarray:
        if len(self.masks) == 0:
            return np.zeros(masks.shape)
        pos = np.searchsorted(self.masks, masks)
        pos = np.minimum(pos, len(self.masks) - 1)
        return np.where(self.masks[pos] == masks, self.rates[pos], 0.0)


@lru_cache(maxsize=EXACT_LIMIT + 1)
def _coefficients(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(subset membership [2^n x n], Shapley coefficient matrix W [2^n x n]).

    phi_i = sum over T not containing i of |T|!(n-|T|-1)!/n! * (v(T+i) - v(T)).
    """
    subsets = np.arange(1 << n, dtype=np.int64)
    member = ((subsets[:, None] >> np.arange(n)) & 1).astype(bool)
    size = member.sum(axis=1)
    weight = np.array([factorial(s) * factorial(n - s - 1) / factorial(n) if s < n else 0.0
                       for s in range(n + 1)])
    coef = np.zeros((1 << n, n))
    for i in range(n):
        without = subsets[~member[:, i]]
        coef[without | (1 << i), i] += weight[size[without]]
        coef[without, i] -= weight[size[without]]
    return member, coef


def exact(sets: np.ndarray, value: ValueFunction) -> np.ndarray:
    """Shapley values for sets of one size n: sets [m x n] channel codes -> phi [m x n]."""
    m, n = sets.shape
    member, coef = _coefficients(n)
    bits = (np.uint64(1) << sets.astype(np.uint64))  # [m x n]
    out = np.empty((m, n))
    chunk = max(1, _CHUNK_CELLS >> n)
    for start in range(0, m, chunk):
        part = bits[start:start + chunk]
        # mask of every subset of every set: OR of member bits (= sum, the bits are distinct)
        masks = np.zeros((1 << n, len(part)), dtype=np.uint64)
        for i in range(n):
            masks[member[:, i]] |= part[:, i]
        out[start:start + chunk] = (coef.T @ value(masks)).T
    return out


def sampled(channels: np.ndarray, value: ValueFunction, permutations: int,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Permutation-sampling estimate and its standard error, for one large set."""
    n = len(channels)
    bits = np.uint64(1) << channels.astype(np.uint64)
    orders = np.argsort(rng.random((permutations, n)), axis=1)
    prefix = np.bitwise_or.accumulate(bits[orders], axis=1)
    before = np.concatenate([np.zeros((permutations, 1), np.uint64), prefix[:, :-1]], axis=1)
    marginal = value(prefix) - value(before)  # [P x n], contribution of orders[p, k]
    contrib = np.empty_like(marginal)
    np.put_along_axis(contrib, orders, marginal, axis=1)
    se = contrib.std(axis=0, ddof=1) / np.sqrt(permutations) if permutations > 1 \
        else np.full(n, np.inf)
    return contrib.mean(axis=0), se
