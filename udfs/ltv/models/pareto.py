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

Evaluated for large parameters too (the fit drives s and beta up together when every
customer's dropout rate is about the same): s / (r + s + x) A0 = s I, with
I = int_{t_x}^T (alpha + tau)^-(r+x) (beta + tau)^-(s+1) dtau (dropout at tau), and everything
is written with J = (alpha + T)^(r+x) (beta + T)^s I, whose terms stay of moderate size:

    P(alive) = 1 / (1 + s J),
    ln L = lnGamma(r+x) - lnGamma(r) - r ln(1 + T/alpha) - x ln(alpha + T) - s ln(1 + T/beta)
           + ln(1 + s J).

With m = min(alpha, beta), M = max(alpha, beta) and F(t) the same integral from t to inf,
I = F(t_x) - F(T) and F(t) = (m + t)^-A (M + t)^-E R(t) (A = s, E = r + x for beta <= alpha;
A = r + x - 1, E = s + 1 otherwise), where, with d = (M - m) / (m + t),
R(t) = int_0^inf e^(-A w) ((e^w + d) / (1 + d))^-E dw = 2F1(1, E; A+E+1; d / (1+d)) / (A+E).
R is hyp2f1's where that holds (A + E <= 100 and d <= 100; past that it fails, or loses
digits: 1e-6 at A = 2, E = 1.6, d = 2000);
otherwise Gauss-Legendre over panels between the points where ln of R's integrand, concave in
w, has fallen by 0.5, 2, 5, ... 42 from its peak (found by Newton's method), and across the
turn at w = ln d. Both agree with quad over tau to about 1e-9 (tests/unit/test_ltv_numerics.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit, gammaln, hyp2f1

from udfs.ltv.models.fit import distinct_pairs, dot, group_by, maximise
from udfs.ltv.summaries import CustomerSummaries


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
        x, t_x, age = summaries.frequency, summaries.recency, summaries.age
        log_odds = np.log(self.s) + _log_j(self.params(), _Times(x, t_x, age), x, t_x, age)
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
        return np.asarray(r * beta / (alpha * (s - 1.0))
                          * -np.expm1(-(s - 1.0) * np.log1p(t / beta)))

    def discounted_if_alive(self, edges: np.ndarray, factors: np.ndarray, x: np.ndarray,
                            age: np.ndarray) -> np.ndarray:
        """sum_k factors[k] (E[Y(edges[k])] - E[Y(edges[k-1])]) given active at T."""
        r, alpha, s, beta = self.params()
        s = _away_from_one(s)
        out = np.zeros(x.shape)
        previous = np.zeros(x.shape)
        level = (r + x) * (beta + age) / ((alpha + age) * (s - 1.0))
        for edge, factor in zip(edges, factors, strict=True):
            current = level * -np.expm1(-(s - 1.0) * np.log1p(edge / (beta + age)))
            out += factor * (current - previous)
            previous = current
        return out


def _away_from_one(s: float) -> float:
    return s if abs(s - 1.0) > 1e-7 else 1.0 + 1e-7


class _Times:
    """The distinct (x, t_x) and (x, T) pairs of some rows: J's two terms depend on one pair
    each, and are computed once per distinct pair (few, with times in days)."""

    def __init__(self, x: np.ndarray, t_x: np.ndarray, age: np.ndarray) -> None:
        self.at_recency = distinct_pairs(x, t_x)
        self.at_age = distinct_pairs(x, age)


def _log_j(theta: np.ndarray, times: _Times, x: np.ndarray, t_x: np.ndarray,
           age: np.ndarray) -> np.ndarray:
    """ln J per row (-inf where t_x == T, where J is 0); see the module docstring. J =
    [(m + T) / (M + T) if alpha < beta] R(T) (F(t_x) / F(T) - 1), where
    ln(F(t_x) / F(T)) = A ln((m + T) / (m + t_x)) + E ln((M + T) / (M + t_x)) + ln R(t_x)
    - ln R(T)."""
    r, alpha, s, beta = (float(v) for v in theta)
    low, high = min(alpha, beta), max(alpha, beta)

    def log_r(pairs: tuple[np.ndarray, np.ndarray, np.ndarray | None]) -> np.ndarray:
        px, t, index = pairs
        a_, e_ = _exponents(r, s, px, beta <= alpha)
        value = _log_r(a_, e_, (high - low) / (low + t))
        return np.asarray(value if index is None else value[index])

    at_tx, at_age = log_r(times.at_recency), log_r(times.at_age)
    a_, e_ = _exponents(r, s, x, beta <= alpha)
    gap = age - t_x
    ratio = np.maximum(a_ * np.log1p(gap / (low + t_x)) + e_ * np.log1p(gap / (high + t_x))
                       + at_tx - at_age, 0.0)
    with np.errstate(divide="ignore"):
        log_rise = np.where(ratio > 30.0, ratio + np.log1p(-np.exp(-ratio)),
                            np.log(np.expm1(np.minimum(ratio, 30.0))))
    out = at_age + log_rise
    if alpha < beta:
        out = out - np.log1p((high - low) / (low + age))
    return np.asarray(out)


def _exponents(r: float, s: float, x: np.ndarray,
               beta_low: bool) -> tuple[np.ndarray, np.ndarray]:
    """(A, E): the powers of m + tau (less one) and of M + tau in F's integrand."""
    if beta_low:
        return np.full(x.shape, s), r + x
    return r + x - 1.0, np.full(x.shape, s + 1.0)


_HYP2F1_C_MAX = 100.0  # R by hyp2f1 while A + E is at most this ...
_HYP2F1_D_MAX = 100.0  # ... and d at most this (z <= 0.99)
_LEVELS = np.array([0.5, 2.0, 5.0, 10.0, 18.0, 28.0, 42.0])  # drops of ln R's integrand
_PANEL_NODES = 12
_NEWTON_STEPS = 40


def _log_r(a_: np.ndarray, e_: np.ndarray, d: np.ndarray) -> np.ndarray:
    """ln R(A, E, d), R = int_0^inf e^(-A w) ((e^w + d) / (1 + d))^-E dw (A + E > 0, d >= 0)."""
    c = a_ + e_
    out = np.full(c.shape, np.nan)
    fast = (c <= _HYP2F1_C_MAX) & (d <= _HYP2F1_D_MAX)
    if np.any(fast):
        with np.errstate(all="ignore"):
            out[fast] = np.log(hyp2f1(1.0, e_[fast], c[fast] + 1.0, d[fast] / (1.0 + d[fast]))
                               / c[fast])
    rest = ~np.isfinite(out)
    if np.any(rest):
        out[rest] = _log_r_quadrature(a_[rest], e_[rest], d[rest])
    return out


def _psi(w: np.ndarray, a_: np.ndarray, e_: np.ndarray, d: np.ndarray) -> np.ndarray:
    """ln of R's integrand, -A w - E ln((e^w + d) / (1 + d)), w >= 0."""
    with np.errstate(over="ignore"):
        near = np.log1p(np.expm1(np.minimum(w, 30.0)) / (1.0 + d))
    far = w + np.log1p(d * np.exp(-np.maximum(w, 30.0))) - np.log1p(d)
    return np.asarray(-a_ * w - e_ * np.where(w < 30.0, near, far))


def _psi_slope(w: np.ndarray, a_: np.ndarray, e_: np.ndarray, d: np.ndarray) -> np.ndarray:
    return np.asarray(-a_ - e_ / (1.0 + d * np.exp(-w)))


def _log_r_quadrature(a_: np.ndarray, e_: np.ndarray, d: np.ndarray) -> np.ndarray:
    """ln R by Gauss-Legendre: psi is concave, so from its peak w0 (where the slope, which
    falls from -A - E/(1+d) at 0 to -(A+E), crosses 0; else 0) it falls on either side
    monotonically; the panels end where it has fallen by each of _LEVELS (Newton from the
    outside, where concavity keeps every step on that side) and at ln d +- 2, ln d."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_d = np.log(d)
        inner = a_ * (1.0 + d) + e_ < 0.0  # rising at 0: the peak is inside
        w0 = np.where(inner, log_d + np.log(-a_ / e_) - np.log1p(a_ / e_), 0.0)
    w0 = np.maximum(np.nan_to_num(w0, nan=0.0), 0.0)
    top = _psi(w0, a_, e_, d)
    aa, ee, dd, peak = a_[:, None], e_[:, None], d[:, None], w0[:, None]
    target = top[:, None] - _LEVELS
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # right: start where a tangent (above psi) reaches the level, from the peak or from
        # ln d + 5 (past the turn, the slope near its last value)
        turned = np.maximum(w0, log_d + 5.0)
        from_turn = turned[:, None] + _LEVELS / -_psi_slope(turned, a_, e_, d)[:, None]
        slope0 = np.maximum(-_psi_slope(w0, a_, e_, d), 0.0)[:, None]
        from_peak = np.where(slope0 > 0.0, peak + _LEVELS / slope0, np.inf)
        w = np.maximum(np.minimum(from_turn, from_peak), peak)
        for _ in range(_NEWTON_STEPS):
            step = (_psi(w, aa, ee, dd) - target) / np.minimum(_psi_slope(w, aa, ee, dd),
                                                               -1e-300)
            w, before = np.maximum(w - step, peak), w
            if np.all(np.abs(w - before) <= 1e-12 * (1.0 + np.abs(w))):
                break
        right = w
        # left of an inner peak: from 0 (where psi is below the level; else the panel ends at 0)
        w = np.zeros(target.shape)
        below = _psi(w, aa, ee, dd) < target
        for _ in range(_NEWTON_STEPS):
            step = (_psi(w, aa, ee, dd) - target) / np.maximum(_psi_slope(w, aa, ee, dd),
                                                               1e-300)
            w, before = np.clip(w - step, 0.0, peak), w
            if np.all(np.abs(w - before) <= 1e-12 * (1.0 + np.abs(w))):
                break
        left = np.where(below, w, 0.0)
        edges = np.concatenate([left[:, ::-1], peak, right], axis=1)
        turn = np.clip(log_d[:, None] + np.array([-2.0, 0.0, 2.0]), edges[:, :1], edges[:, -1:])
    edges = np.sort(np.concatenate([edges, turn], axis=1), axis=1)
    nodes, weights = np.polynomial.legendre.leggauss(_PANEL_NODES)
    start, half = edges[:, :-1, None], (edges[:, 1:, None] - edges[:, :-1, None]) / 2.0
    values = np.exp(_psi(start + half * (1.0 + nodes), aa[:, :, None], ee[:, :, None],
                         dd[:, :, None]) - top[:, None, None])
    return np.asarray(top + np.log(np.einsum("ijk,k->i", half * values, weights)))


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
        x, t_x, age = rows.frequency, rows.recency, rows.age
        ll = dot(self.wx, gammaln(r + self.xs)) - self.total * gammaln(r)
        # r ln alpha + s ln beta - (r + x) ln(alpha + T) - s ln(beta + T) + ln(1 + s J)
        log_j = _log_j(theta, self.times, x, t_x, age)
        ll += dot(rows.weight, np.logaddexp(0.0, np.log(s) + log_j) - r * np.log1p(age / alpha)
                  - x * np.log(alpha + age) - s * np.log1p(age / beta))
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
