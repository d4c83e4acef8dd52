"""BG/NBD: how many purchases a customer makes, and whether it is still a customer.

Fader, Hardie & Lee (2005), "'Counting Your Customers' the Easy Way: An Alternative to the
Pareto/NBD Model", Marketing Science 24(2). While active a customer buys at Poisson rate
lambda ~ Gamma(r, alpha); after each repeat purchase it drops out with probability
p ~ Beta(a, b). The likelihood (their eq. 6, in the log form of Fader, Hardie & Lee,
"Implementing the BG/NBD Model", 2019 note) is, per customer,

    ln L = ln A1 + ln A2 + ln(exp(ln A3) + [x > 0] exp(ln A4)),
    ln A1 = lnGamma(r + x) - lnGamma(r) + r ln alpha
    ln A2 = ln B(a, b + x) - ln B(a, b)
    ln A3 = -(r + x) ln(alpha + T)
    ln A4 = ln a - ln(b + x - 1) - (r + x) ln(alpha + t_x)

A customer enters with (x, t_x, T) in periods; see `udfs/ltv_summaries.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, digamma, expit, gammaln, hyp2f1

from udfs.ltv_fit import distinct_pairs, dot, group_by, maximise
from udfs.ltv_summaries import CustomerSummaries

_START = np.array([1.0, 1.0, 1.0, 1.0])
_CELLS = 1 << 21  # (horizon steps x distinct pairs) evaluated at once


@dataclass(frozen=True)
class BgNbd:
    """Fitted BG/NBD parameters: purchase rate ~ Gamma(r, alpha), dropout ~ Beta(a, b)."""

    r: float
    alpha: float
    a: float
    b: float

    def __post_init__(self) -> None:
        for name in ("r", "alpha", "a", "b"):
            value = float(getattr(self, name))
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"BgNbd.{name} must be a positive number, got {value}")
            object.__setattr__(self, name, value)

    def params(self) -> np.ndarray:
        return np.array([self.r, self.alpha, self.a, self.b])

    @classmethod
    def fit(cls, summaries: CustomerSummaries, start: BgNbd | None = None) -> BgNbd:
        """Maximum likelihood, each row counted `weight` times (collapse rows first for
        speed: the fit depends on the rows only through (x, t_x, T) and the weights)."""
        summaries.validate()
        if summaries.customers() <= 0:
            raise ValueError("BgNbd.fit needs at least one customer")
        objective = _Likelihood(summaries)
        if start is None:
            # alpha scales time: start it at the data's own time scale
            x0 = _START * np.array([1.0, max(float(np.average(summaries.age,
                                                  weights=summaries.weight)), 1e-3), 1, 1])
        else:
            x0 = start.params()
        return cls(*(float(v) for v in maximise(objective, x0, "BgNbd.fit")))

    def log_likelihood(self, summaries: CustomerSummaries) -> float:
        """Sum over rows of weight x ln L(r, alpha, a, b | x, t_x, T)."""
        value, _ = _Likelihood(summaries)(self.params())
        return -value * summaries.customers()

    def probability_alive(self, summaries: CustomerSummaries) -> np.ndarray:
        """P(still active at T | x, t_x, T) (FHL 2005 eq. 11 / their note)."""
        x, t_x, age = summaries.frequency, summaries.recency, summaries.age
        return _alive(self, x, t_x, age)

    def expected_purchases(self, t: float, summaries: CustomerSummaries) -> np.ndarray:
        """E[Y(t) | x, t_x, T]: expected purchases in (T, T + t] (FHL 2005 eq. 10)."""
        x, age = summaries.frequency, summaries.age
        return _alive(self, x, summaries.recency, age) * expected_if_alive(self, t, x, age)

    def discounted_if_alive(self, edges: np.ndarray, factors: np.ndarray, x: np.ndarray,
                            age: np.ndarray) -> np.ndarray:
        """sum_k factors[k] (E[Y(edges[k])] - E[Y(edges[k-1])]) given active at T."""
        return discounted_if_alive(self, edges, factors, x, age)

    def expected_purchases_new(self, t: float | np.ndarray) -> np.ndarray:
        """E[X(t)]: expected repeat purchases in (0, t] of a customer just acquired (eq. 9)."""
        t = np.asarray(t, dtype=np.float64)
        r, alpha, a, b = self.params()
        a = _away_from_one(a)
        z = t / (alpha + t)
        tail = (1.0 - z) ** (a - 1.0) * hyp2f1(a + b - 1.0 - r, a - 1.0, a + b - 1.0, z)
        return np.asarray((a + b - 1.0) / (a - 1.0) * (1.0 - tail))


def _away_from_one(a: float) -> float:
    # the closed forms divide by a - 1; at a = 1 they have a removable singularity
    return a if abs(a - 1.0) > 1e-7 else 1.0 + 1e-7


def _alive(model: BgNbd, x: np.ndarray, t_x: np.ndarray, age: np.ndarray) -> np.ndarray:
    r, alpha, a, b = model.params()
    repeat = x > 0
    log_odds = np.full(x.shape, -np.inf)
    xr = x[repeat]
    log_odds[repeat] = (np.log(a) - np.log(b + xr - 1.0) + (r + xr)
                        * (np.log(alpha + age[repeat]) - np.log(alpha + t_x[repeat])))
    return np.asarray(expit(-log_odds))


def expected_if_alive(model: BgNbd, t: float, x: np.ndarray, age: np.ndarray) -> np.ndarray:
    """E[Y(t) | x, T, active at T]; it depends on (x, T) only."""
    return discounted_if_alive(model, np.array([float(t)]), np.ones(1), x, age)


def discounted_if_alive(model: BgNbd, edges: np.ndarray, factors: np.ndarray,
                        x: np.ndarray, age: np.ndarray) -> np.ndarray:
    """sum_k factors[k] (E[Y(edges[k])] - E[Y(edges[k-1])]) given active at T (edges[-1] = 0).

    Computed once per distinct (x, T) pair (few, in data counted in days) and spread back to
    the rows; chunked so that a long horizon over many distinct pairs stays small in memory.
    """
    if x.size == 0:
        return np.zeros(x.shape)
    dx, dage, index = distinct_pairs(x, age)
    out = np.empty(dx.size)
    chunk = max(1, _CELLS // max(1, edges.size))
    for lo in range(0, dx.size, chunk):
        hi = min(dx.size, lo + chunk)
        cumulative = _if_alive(model, edges[:, None], dx[None, lo:hi], dage[None, lo:hi])
        increments = np.diff(cumulative, axis=0, prepend=0.0)
        out[lo:hi] = np.einsum("k,kn->n", factors, increments)  # no BLAS: see ltv_fit.dot
    return out if index is None else out[index]


def _if_alive(model: BgNbd, t: np.ndarray, x: np.ndarray, age: np.ndarray) -> np.ndarray:
    r, alpha, a, b = model.params()
    a = _away_from_one(a)
    z = t / (alpha + age + t)
    # Euler's transform of (1-z)^(r+x) 2F1(r+x, b+x; a+b+x-1; z) (FHL eq. 10): the series
    # then has small parameters and no (1-z)^(r+x) underflow for large x
    tail = (1.0 - z) ** (a - 1.0) * hyp2f1(a + b - 1.0 - r, a - 1.0, a + b + x - 1.0, z)
    return np.asarray((a + b + x - 1.0) / (a - 1.0) * (1.0 - tail))


class _Likelihood:
    """Mean negative log-likelihood and its gradient in (r, alpha, a, b).

    Terms that depend on x alone are summed per distinct x (weights added up first), the
    rest per row; rows with x = 0 need only ln A3.
    """

    def __init__(self, summaries: CustomerSummaries) -> None:
        w, x = summaries.weight, summaries.frequency
        self.total = float(w.sum())
        self.xs, _, self.wx = group_by(x, w)
        zero = x == 0
        self.w0, self.age0 = w[zero], summaries.age[zero]
        rep = ~zero
        self.w1, self.x1 = w[rep], x[rep]
        self.age1, self.tx1 = summaries.age[rep], summaries.recency[rep]

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        r, alpha, a, b = (float(v) for v in theta)
        xs, wx = self.xs, self.wx
        # per distinct x: ln A1 + ln A2
        ll = dot(wx, gammaln(r + xs) + betaln(a, b + xs))
        ll += self.total * (-gammaln(r) + r * np.log(alpha) - betaln(a, b))
        g_r = dot(wx, digamma(r + xs)) + self.total * (np.log(alpha) - digamma(r))
        g_alpha = self.total * r / alpha
        psi_ab = digamma(a + b)
        g_a = dot(wx, psi_ab - digamma(a + b + xs))
        g_b = dot(wx, digamma(b + xs) - digamma(a + b + xs) + psi_ab - digamma(b))
        # x = 0: ln A3 = -r ln(alpha + T)
        log_t0 = np.log(alpha + self.age0)
        ll -= r * dot(self.w0, log_t0)
        g_r -= dot(self.w0, log_t0)
        g_alpha -= r * dot(self.w0, 1.0 / (alpha + self.age0))
        # x > 0: ln A3 + softplus(ln A4 - ln A3)
        w, x1 = self.w1, self.x1
        rx = r + x1
        log_t, log_tx = np.log(alpha + self.age1), np.log(alpha + self.tx1)
        bx1 = b + x1 - 1.0
        d = np.log(a) - np.log(bx1) + rx * (log_t - log_tx)
        ll += dot(w, -rx * log_t + np.logaddexp(0.0, d))
        s = w * expit(d)  # weight x share of the A4 term
        inv_t, inv_tx = 1.0 / (alpha + self.age1), 1.0 / (alpha + self.tx1)
        g_r += dot(s, log_t - log_tx) - dot(w, log_t)
        g_alpha += dot(s, rx * (inv_t - inv_tx)) - dot(w, rx * inv_t)
        g_a += float(s.sum()) / a
        g_b -= dot(s, 1.0 / bx1)
        gradient = np.array([g_r, g_alpha, g_a, g_b])
        return -ll / self.total, -gradient / self.total
