"""Absorbing Markov chain attribution, solved exactly (a linear solve, no simulation).

States: "start", each observed order-k state (the last k channels of a path), and the two
absorbing states conversion and null. A path a>b seen with 3 conversions and 1 non-conversion
adds start->a, a->b (weight 4), b->conversion (3) and b->null (1). P(conversion) is the
absorption probability from start. The removal effect of channel c is
1 - P(conversion with every state containing c redirected to null) / P(conversion).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from udfs.journeys import JourneyTable

_DENSE_LIMIT = 2500  # states; above this the chain is solved by sparse iteration


@dataclass(frozen=True)
class Chain:
    n_states: int
    state_channels: list[frozenset[int]]  # channels contained in each transient state
    src: np.ndarray  # transient -> transient transitions (probabilities)
    dst: np.ndarray
    prob: np.ndarray
    to_conversion: np.ndarray  # per state
    start: np.ndarray  # start distribution over states


def _state_ids(table: JourneyTable, order: int) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Order-k state of every touch: the tuple of the last k channels (shorter at the start)."""
    base = len(table.channels) + 1
    channel = table.touch_channel
    position = table.position
    code = np.zeros(len(channel), dtype=np.int64)
    for lag in range(order):
        shifted = np.full(len(channel), -1, dtype=np.int64)
        if lag < len(channel):
            shifted[lag:] = channel[: len(channel) - lag]
        valid = position >= lag
        code = code * base + np.where(valid, shifted + 1, 0)
    uniq, ids = np.unique(code, return_inverse=True)
    tuples = []
    for value in uniq:
        parts = []
        for _ in range(order):
            value, digit = divmod(int(value), base)
            if digit:
                parts.append(digit - 1)
        tuples.append(tuple(parts))
    return ids.astype(np.int64), tuples


def build_chain(table: JourneyTable, order: int = 1) -> Chain:
    if order < 1:
        raise ValueError(f"markov order must be at least 1, got {order}")
    lengths = table.lengths
    has_touch = lengths > 0
    weight = (table.conversions + table.non_conversions)
    state, tuples = _state_ids(table, order)
    n = len(tuples)
    journey = table.journey_of_touch
    first = table.offsets[:-1][has_touch]
    last = table.offsets[1:][has_touch] - 1
    start = np.bincount(state[first], weights=weight[has_touch], minlength=n)
    conv = np.bincount(state[last], weights=table.conversions[has_touch], minlength=n)
    null = np.bincount(state[last], weights=table.non_conversions[has_touch], minlength=n)
    inner = np.ones(len(state), bool)
    inner[last] = False  # a touch followed by another touch of the same journey
    src, dst = state[inner], state[np.flatnonzero(inner) + 1]
    w = weight[journey[inner]]
    pair, inverse = np.unique(src * n + dst, return_inverse=True)
    counts = np.bincount(inverse, weights=w)
    src, dst = pair // n, pair % n
    out_total = np.bincount(src, weights=counts, minlength=n) + conv + null
    safe = np.where(out_total > 0, out_total, 1.0)
    return Chain(
        n_states=n, state_channels=[frozenset(t) for t in tuples],
        src=src, dst=dst, prob=counts / safe[src], to_conversion=conv / safe,
        start=start / max(start.sum(), 1e-300))


def conversion_probability(chain: Chain, removed: np.ndarray | None = None) -> float:
    """P(absorption in conversion) from start; `removed` states lead to null instead."""
    keep = np.ones(chain.n_states, bool) if removed is None else ~removed
    r = np.where(keep, chain.to_conversion, 0.0)
    edge = keep[chain.src] & keep[chain.dst]
    start = np.where(keep, chain.start, 0.0)
    if chain.n_states <= _DENSE_LIMIT:
        q = np.zeros((chain.n_states, chain.n_states))
        np.add.at(q, (chain.src[edge], chain.dst[edge]), chain.prob[edge])
        x = np.linalg.solve(np.eye(chain.n_states) - q, r)
    else:
        src, dst, prob = chain.src[edge], chain.dst[edge], chain.prob[edge]
        x = r.copy()
        for _ in range(100_000):
            nxt = r + np.bincount(src, weights=prob * x[dst], minlength=chain.n_states)
            if np.max(np.abs(nxt - x)) < 1e-14:
                x = nxt
                break
            x = nxt
    return float(start @ x)


def removal_effects(table: JourneyTable, order: int = 1) -> np.ndarray:
    """Removal effect of every channel code (0 for a channel never seen)."""
    chain = build_chain(table, order)
    base = conversion_probability(chain)
    effects = np.zeros(len(table.channels))
    if base <= 0:
        return effects
    for channel in range(len(table.channels)):
        removed = np.fromiter((channel in s for s in chain.state_channels), bool,
                              count=chain.n_states)
        if removed.any():
            effects[channel] = 1.0 - conversion_probability(chain, removed) / base
    return np.clip(effects, 0.0, 1.0)


def simulate_conversion_probability(chain: Chain, walks: int, rng: np.random.Generator,
                                    removed: np.ndarray | None = None) -> float:
    """Monte-Carlo walks through the same chain (to check the exact solve in tests)."""
    n = chain.n_states
    keep = np.ones(n, bool) if removed is None else ~removed
    # per state: cumulative distribution over [states..., conversion, null]
    probs = np.zeros((n, n + 2))
    np.add.at(probs, (chain.src, chain.dst), chain.prob)
    probs[:, n] = chain.to_conversion
    probs[:, n + 1] = np.clip(1.0 - probs[:, : n + 1].sum(axis=1), 0.0, None)
    probs[:, :n][:, ~keep] = 0.0
    probs[~keep] = 0.0
    probs[~keep, n + 1] = 1.0
    probs[:, n + 1] = 1.0 - probs[:, : n + 1].sum(axis=1)
    cumulative = np.cumsum(probs, axis=1)
    state = rng.choice(n, size=walks, p=chain.start)
    state = np.where(keep[state], state, n + 1)
    alive = state < n
    while alive.any():
        idx = np.flatnonzero(alive)
        draw = rng.random(len(idx))
        nxt = (cumulative[state[idx]] < draw[:, None]).sum(axis=1)
        state[idx] = np.minimum(nxt, n + 1)
        alive = state < n
    return float(np.mean(state == n))
