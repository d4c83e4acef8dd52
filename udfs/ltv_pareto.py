"""Pareto/NBD: the classic alternative to the BG/NBD (Schmittlein, Morrison & Colombo 1987).

While active a customer buys at Poisson rate lambda ~ Gamma(r, alpha) and stays active for an
exponential lifetime of rate mu ~ Gamma(s, beta), dropout being possible at any time, not
only after a purchase. Likelihood, P(alive) and E[Y(t) | x, t_x, T] as in Fader, Hardie &
Lee (2005), "A Note on Deriving the Pareto/NBD Model and Related Expressions":

    L = Gamma(r + x) alpha^r beta^s / Gamma(r)
        x [1 / ((alpha + T)^(r + x) (beta + T)^s) + s / (r + s + x) A0]

with A0 a difference of two Gaussian hypergeometric terms (at t_x and at T). The gradient
is taken by central differences (scipy has no derivative of 2F1 in its parameters), so a fit
costs more than the BG/NBD's; collapse the rows first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit, gammaln, hyp2f1

from udfs.ltv_fit import distinct_pairs, dot, group_by, maximise
from udfs.ltv_summaries import CustomerSummaries


@dataclass(frozen=True)
class ParetoNbd:
    """Fitted Pareto/NBD parameters: purchase rate ~ Gamma(r, alpha), dropout rate
    ~ Gamma(s, beta)."""

    r: float
    alpha: float
    s: float
    beta: float

    def __post_init__(self) -> None:
        for name in ("r", "alpha", "s", "beta"):
            value = float(getattr(self, name))
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"ParetoNbd.{name} must be a positive number, got {value}")
            object.__setattr__(self, name, value)

    def params(self) -> np.ndarray:
        return np.array([self.r, self.alpha, self.s, self.beta])

    @classmethod
    def fit(cls, summaries: CustomerSummaries, start: ParetoNbd | None = None) -> ParetoNbd:
        """Maximum likelihood, each row counted `weight` times."""
        summaries.validate()
        if summaries.customers() <= 0:
            raise ValueError("ParetoNbd.fit needs at least one customer")
        rows, _ = summaries.by_purchases()
        scale = max(float(np.average(rows.age, weights=rows.weight)), 1e-3)
        x0 = np.array([1.0, scale, 1.0, scale]) if start is None else start.params()
        return cls(*(float(v) for v in maximise(_Likelihood(rows), x0, "ParetoNbd.fit")))

    def log_likelihood(self, summaries: CustomerSummaries) -> float:
        """Sum over rows of weight x ln L(r, alpha, s, beta | x, t_x, T)."""
        value = _Likelihood(summaries).value(self.params())
        return -value * summaries.customers()

    def probability_alive(self, summaries: CustomerSummaries) -> np.ndarray:
        """P(still active at T | x, t_x, T)."""
        r, alpha, s, beta = self.params()
        x, t_x, age = summaries.frequency, summaries.recency, summaries.age
        log_odds = (np.log(s) - np.log(r + s + x) + (r + x) * np.log(alpha + age)
                    + s * np.log(beta + age) + _log_a0(self.params(), _Times(x, t_x, age)))
        return np.asarray(expit(-log_odds))

    def expected_purchases(self, t: float, summaries: CustomerSummaries) -> np.ndarray:
        """E[Y(t) | x, t_x, T]: expected purchases in (T, T + t]."""
        return self.probability_alive(summaries) * self.discounted_if_alive(
            np.array([float(t)]), np.ones(1), summaries.frequency, summaries.age)

    def expected_purchases_new(self, t: float | np.ndarray) -> np.ndarray:
        """E[X(t)]: expected purchases in (0, t] of a customer just acquired."""
        r, alpha, s, beta = self.params()
        s = _away_from_one(s)
        t = np.asarray(t, dtype=np.float64)
        return np.asarray(r * beta / (alpha * (s - 1.0)) * (1.0 - (beta / (beta + t))
                                                          ** (s - 1.0)))

    def discounted_if_alive(self, edges: np.ndarray, factors: np.ndarray, x: np.ndarray,
                            age: np.ndarray) -> np.ndarray:
        """sum_k factors[k] (E[Y(edges[k])] - E[Y(edges[k-1])]) given active at T."""
        r, alpha, s, beta = self.params()
        s = _away_from_one(s)
        out = np.zeros(x.shape)
        previous = np.zeros(x.shape)
        level = (r + x) * (beta + age) / ((alpha + age) * (s - 1.0))
        for edge, factor in zip(edges, factors, strict=True):
            current = level * (1.0 - ((beta + age) / (beta + age + edge)) ** (s - 1.0))
            out += factor * (current - previous)
            previous = current
        return out


def _away_from_one(s: float) -> float:
    return s if abs(s - 1.0) > 1e-7 else 1.0 + 1e-7


class _Times:
    """The distinct (x, t_x) and (x, T) pairs of some rows: A0's two terms depend on one
    pair each, and are computed once per distinct pair (few, with times in days)."""

    def __init__(self, x: np.ndarray, t_x: np.ndarray, age: np.ndarray) -> None:
        self.at_recency = distinct_pairs(x, t_x)
        self.at_age = distinct_pairs(x, age)


def _log_a0(theta: np.ndarray, times: _Times) -> np.ndarray:
    """ln A0 per row (-inf where t_x == T, where A0 is 0). Of the note's two forms the one
    whose 2F1 has z = |alpha - beta| / (max(alpha, beta) + t) in [0, 1), each after Euler's
    transform to 2F1(1, b; r + s + x + 1; z), whose series stays tame however large x is:
      alpha >= beta: 2F1(r+s+x, s+1; c; z) = (1-z)^-s 2F1(1, r+x; c; z)
      alpha < beta:  2F1(r+s+x, r+x; c; z) = (1-z)^-(r+x-1) 2F1(1, s+1; c; z)"""
    r, alpha, s, beta = (float(v) for v in theta)
    top, gap = max(alpha, beta), abs(alpha - beta)

    def log_term(pairs: tuple[np.ndarray, np.ndarray, np.ndarray | None]) -> np.ndarray:
        x, t, index = pairs
        c = r + s + x + 1.0
        if alpha >= beta:
            b, power = r + x, np.full(x.shape, s)
        else:
            b, power = np.full(x.shape, s + 1.0), r + x - 1.0
        # ln[2F1(...) / (top + t)^(r+s+x)], with 1 - z = (min(alpha, beta) + t) / (top + t)
        log_top = np.log(top + t)
        log_one_minus_z = np.log(top + t - gap) - log_top
        value = (np.log(hyp2f1(1.0, b, c, gap / (top + t))) - power * log_one_minus_z
                 - (c - 1.0) * log_top)
        return np.asarray(value if index is None else value[index])

    at_tx, at_age = log_term(times.at_recency), log_term(times.at_age)
    with np.errstate(divide="ignore"):
        return np.asarray(at_tx + np.log(-np.expm1(np.minimum(at_age - at_tx, 0.0))))


class _Likelihood:
    """Mean negative log-likelihood; its gradient by central differences."""

    def __init__(self, rows: CustomerSummaries) -> None:
        self.rows = rows
        self.total = float(rows.weight.sum())
        self.xs, _, self.wx = group_by(rows.frequency, rows.weight)
        self.times = _Times(rows.frequency, rows.recency, rows.age)

    def value(self, theta: np.ndarray) -> float:
        r, alpha, s, beta = (float(v) for v in theta)
        rows = self.rows
        x, age = rows.frequency, rows.age
        ll = dot(self.wx, gammaln(r + self.xs)) + self.total * (
            -gammaln(r) + r * np.log(alpha) + s * np.log(beta))
        log_first = -(r + x) * np.log(alpha + age) - s * np.log(beta + age)
        log_second = np.log(s) - np.log(r + s + x) + _log_a0(theta, self.times)
        ll += dot(rows.weight, np.logaddexp(log_first, log_second))
        return -ll / self.total

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        value = self.value(theta)
        gradient = np.empty(theta.size)
        for i in range(theta.size):
            step = 1e-6 * theta[i]
            up, down = theta.copy(), theta.copy()
            up[i] += step
            down[i] -= step
            gradient[i] = (self.value(up) - self.value(down)) / (2.0 * step)
        return value, gradient
