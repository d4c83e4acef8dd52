"""Customers drawn from a BG/NBD (and optionally Gamma-Gamma spend), for tests and benches.

Exact and vectorised: with purchase rate lambda, a customer would make N ~ Poisson(lambda T)
repeat purchases in (0, T]; it drops out after its K-th repeat purchase, K ~ Geometric(p)
(dropout with probability p after each one), so x = min(K, N). Given N = n purchases, their
times are uniform on (0, T], and the x-th of n sorted uniforms is Beta(x, n - x + 1): that
is t_x / T. A customer still active at T (K > N) makes min(K - N, Poisson(lambda t)) more
purchases in (T, T + t] (the process is memoryless).
"""

from __future__ import annotations

import numpy as np

from udfs.ltv.summaries import CustomerSummaries


def simulate_bgnbd(r: float, alpha: float, a: float, b: float, customers: int,
                   T: float | np.ndarray, seed: int = 0,
                   spend: tuple[float, float, float] | None = None) -> CustomerSummaries:
    """Summaries of `customers` customers of a BG/NBD, each observed for T periods (a number
    or one per customer); with `spend` = (p, q, v) also the mean value of the repeat
    purchases from a Gamma-Gamma (otherwise monetary is 0)."""
    summaries, _ = simulate_bgnbd_holdout(r, alpha, a, b, customers, T, 0.0, seed, spend)
    return summaries


def simulate_bgnbd_holdout(r: float, alpha: float, a: float, b: float, customers: int,
                           T: float | np.ndarray, holdout: float, seed: int = 0,
                           spend: tuple[float, float, float] | None = None,
                           ) -> tuple[CustomerSummaries, np.ndarray]:
    """`simulate_bgnbd` plus each customer's purchases in (T, T + holdout]."""
    if customers < 0:
        raise ValueError(f"customers must be >= 0, got {customers}")
    rng = np.random.default_rng(seed)
    age = np.broadcast_to(np.asarray(T, dtype=np.float64), (customers,)).copy()
    if np.any(age < 0):
        raise ValueError("T must be >= 0")
    rate = rng.gamma(r, 1.0 / alpha, customers)
    dropout = rng.beta(a, b, customers)
    # K >= 1: the repeat purchase after which the customer drops out
    last_allowed = rng.geometric(np.clip(dropout, 1e-300, 1.0)).astype(np.float64)
    possible = rng.poisson(rate * age).astype(np.float64)
    x = np.minimum(last_allowed, possible)
    bought = x > 0
    recency = np.zeros(customers)
    recency[bought] = age[bought] * rng.beta(x[bought], possible[bought] - x[bought] + 1.0)
    alive = last_allowed > possible
    later = np.zeros(customers)
    if holdout > 0:
        more = rng.poisson(rate[alive] * holdout).astype(np.float64)
        later[alive] = np.minimum(last_allowed[alive] - possible[alive], more)
    monetary = np.zeros(customers)
    if spend is not None:
        p, q, v = spend
        scale = rng.gamma(q, 1.0 / v, customers)  # nu: each customer's rate of spend
        # the mean of x Gamma(p, nu) values is Gamma(p x, nu x)
        monetary[bought] = rng.gamma(p * x[bought], 1.0 / (scale[bought] * x[bought]))
    summaries = CustomerSummaries(x, recency, age, monetary, np.ones(customers))
    return summaries, later
