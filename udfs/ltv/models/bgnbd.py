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

A customer enters with (x, t_x, T) in periods; see `udfs/ltv/summaries.py`.

Large a and b. When every customer drops out with about the same probability the fit drives
a and b up together (Beta(a, b) narrows to a point; a/(a + b) stays put), to the fitter's
bound. The likelihood is then evaluated with log rising factorials (lnGamma(y + x) -
lnGamma(y), by Stirling's series for large y) rather than as differences of huge lnGamma
values, and r ln alpha - (r + x) ln(alpha + T) as -r ln(1 + T/alpha) - x ln(alpha + T). The
expected purchases need more: FHL's closed form (eq. 10)

    E[Y(t) | x, T, active] = (a+b+x-1)/(a-1) [1 - ((alpha+T)/(alpha+T+t))^(r+x)
                             2F1(r+x, b+x; a+b+x-1; t/(alpha+T+t))]

is E[(1 - (1 + p s)^-k) / p] for p ~ Beta(a, b + x), k = r + x, s = t / (alpha + T): the
purchases expected before dropout, the rate having its posterior Gamma(r + x, alpha + T).
scipy's hyp2f1 gives it only while a + b + x is small (past that it returns NaN or inf, or
silently loses digits: 1e-3 at a = 20, b + x = 100, s = 10), so the expectation is computed
in one of three ways, chosen per element:
- a + b + x <= 40, s <= 1e4, k s >= 1e-4: the closed form after Euler's transform, with
  hyp2f1; its removable singularities (a = 1; a + b + x = 1) by interpolation across them;
- the Beta narrow beside the scale on which the integrand turns, p ~ 1 / (s max(k, 1))
  (a >= 20, or s max(k, 1) <= (a + b + x) / 2): 24-node Gauss quadrature for the weight
  Beta(a, b + x) itself (Golub-Welsch; the rules per distinct b + x, remembered);
- otherwise (a < 20, the Beta's mass spread down to where the integrand turns): Gauss-Jacobi
  for the weight p^(a-1) near 0, Gauss-Legendre in ln p (where density and integrand are
  smooth on a scale of 1) up to 1/2 and Gauss-Jacobi for the weight (1-p)^(b+x-1) above.
The closed form where hyp2f1 gives no finite value falls to the quadratures, which hold
everywhere on their own. Against numerical integration over p each agrees to about 1e-9
(tests/unit/test_ltv_numerics.py); with a, b -> inf at a fixed a / (a + b) = p they tend to
the fixed-dropout model's (1 - (1 + p s)^-k) / p.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import digamma, expit, gammaln

from udfs.ltv.models.beta_mean import expected_before_dropout
from udfs.ltv.models.fit import distinct_pairs, dot, group_by, maximise
from udfs.ltv.summaries import CustomerSummaries

_START = np.array([1.0, 1.0, 1.0, 1.0])
_CELLS = 1 << 21  # (horizon steps x distinct pairs) evaluated at once

_STIRLING_FROM = 1e4  # log rising factorials by Stirling's series from here on


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
        """E[X(t)]: expected repeat purchases in (0, t] of a customer just acquired (eq. 9):
        E[Y(t) | x = 0, T = 0, active]."""
        t = np.asarray(t, dtype=np.float64)
        r, alpha, a, b = self.params()
        value = expected_before_dropout(a, np.array([b]), np.array([r]),
                                         t.reshape(-1, 1) / alpha)
        return value.reshape(t.shape)


def _alive(model: BgNbd, x: np.ndarray, t_x: np.ndarray, age: np.ndarray) -> np.ndarray:
    """1 / (1 + A4 / A3), 1 where x = 0; (r + x) ln((alpha + T) / (alpha + t_x)) as log1p
    (exact however large alpha is), over all rows at once (a boolean gather costs more)."""
    r, alpha, a, b = model.params()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_odds = np.log(a / (b + x - 1.0)) + (r + x) * np.log1p((age - t_x) / (alpha + t_x))
        return np.where(x > 0, 1.0 / (1.0 + np.exp(log_odds)), 1.0)


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
    """E[Y(t) | x, T, active] for t of shape (steps, 1) and x, age of shape (1, pairs)."""
    r, alpha, a, b = model.params()
    return expected_before_dropout(a, b + x[0], r + x[0], t / (alpha + age))


def _log_rising(y: np.ndarray | float, x: np.ndarray) -> np.ndarray:
    """lnGamma(y + x) - lnGamma(y) (y > 0, x >= 0): for large y from Stirling's series, whose
    terms here are all small, not as the difference of two huge lnGamma values."""
    y = np.broadcast_to(np.asarray(y, dtype=np.float64), x.shape)
    out = np.empty(x.shape)
    big = y >= _STIRLING_FROM
    yb, xb = y[big], x[big]
    z = yb + xb
    out[big] = ((yb - 0.5) * np.log1p(xb / yb) + xb * np.log(z) - xb
                + (1.0 / z - 1.0 / yb) / 12.0 - (1.0 / z ** 3 - 1.0 / yb ** 3) / 360.0)
    small = ~big
    out[small] = gammaln(y[small] + x[small]) - gammaln(y[small])
    return out


def _digamma_step(y: np.ndarray | float, x: np.ndarray) -> np.ndarray:
    """digamma(y + x) - digamma(y), the derivative of `_log_rising` in y, likewise."""
    y = np.broadcast_to(np.asarray(y, dtype=np.float64), x.shape)
    out = np.empty(x.shape)
    big = y >= _STIRLING_FROM
    yb, xb = y[big], x[big]
    z = yb + xb
    out[big] = (np.log1p(xb / yb) + xb / (2.0 * yb * z) + (1.0 / yb ** 2 - 1.0 / z ** 2) / 12.0
                - (1.0 / yb ** 4 - 1.0 / z ** 4) / 120.0)
    small = ~big
    out[small] = digamma(y[small] + x[small]) - digamma(y[small])
    return out


class _Likelihood:
    """Mean negative log-likelihood and its gradient in (r, alpha, a, b).

    Terms that depend on x alone are summed per distinct x (weights added up first), the
    rest per row; rows with x = 0 need only ln A3. Written for large parameters too: ln A1 +
    ln A2 as log rising factorials, r ln alpha - (r + x) ln(alpha + T) as
    -r ln(1 + T/alpha) - x ln(alpha + T), ratios of times as log1p.
    """

    def __init__(self, summaries: CustomerSummaries) -> None:
        w, x = summaries.weight, summaries.frequency
        self.total = float(w.sum())
        self.xs, _, self.wx = group_by(x, w)
        self.w, self.age = w, summaries.age
        rep = x > 0
        self.w1, self.x1 = w[rep], x[rep]
        self.age1, self.tx1 = summaries.age[rep], summaries.recency[rep]

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        r, alpha, a, b = (float(v) for v in theta)
        xs, wx = self.xs, self.wx
        # per distinct x: ln A1 + ln A2 (less r ln alpha)
        ab = a + b
        ll = dot(wx, _log_rising(r, xs) + _log_rising(b, xs) - _log_rising(ab, xs))
        step_ab = _digamma_step(ab, xs)
        g_r = dot(wx, _digamma_step(r, xs))
        g_a = -dot(wx, step_ab)
        g_b = dot(wx, _digamma_step(b, xs) - step_ab)
        # every row: r ln alpha - r ln(alpha + T)
        log_grow = np.log1p(self.age / alpha)
        ll -= r * dot(self.w, log_grow)
        g_r -= dot(self.w, log_grow)
        g_alpha = r * dot(self.w, self.age / (alpha * (alpha + self.age)))
        # x > 0: -x ln(alpha + T) + softplus(ln A4 - ln A3)
        w, x1 = self.w1, self.x1
        rx = r + x1
        log_t = np.log(alpha + self.age1)
        gap = np.log1p((self.age1 - self.tx1) / (alpha + self.tx1))  # ln((a+T)/(a+t_x))
        bx1 = b + x1 - 1.0
        d = np.log(a) - np.log(bx1) + rx * gap
        ll += dot(w, -x1 * log_t + np.logaddexp(0.0, d))
        s = w * expit(d)  # weight x share of the A4 term
        inv_t = 1.0 / (alpha + self.age1)
        g_r += dot(s, gap)
        g_alpha += dot(s, rx * (self.tx1 - self.age1) * inv_t / (alpha + self.tx1)) - dot(
            w, x1 * inv_t)
        g_a += float(s.sum()) / a
        g_b -= dot(s, 1.0 / bx1)
        gradient = np.array([g_r, g_alpha, g_a, g_b])
        return -ll / self.total, -gradient / self.total
