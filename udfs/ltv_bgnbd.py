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

import functools
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, digamma, expit, gammaln, hyp2f1

from udfs.ltv_fit import distinct_pairs, dot, group_by, maximise
from udfs.ltv_summaries import CustomerSummaries

_START = np.array([1.0, 1.0, 1.0, 1.0])
_CELLS = 1 << 21  # (horizon steps x distinct pairs) evaluated at once

# E[(1 - (1 + p s)^-k) / p], p ~ Beta(a, B): which way (see the module docstring)
_HYP2F1_MAX = 40.0  # a + B up to this: the closed form with scipy's hyp2f1
_HYP2F1_S_MAX = 1e4  # ... and s up to this (where it was checked)
_HYP2F1_KS_MIN = 1e-4  # ... and k s from this on (1 - tail keeps its digits)
_NARROW_A = 20.0  # a from this on: the Beta's mass stays clear of p = 0
_GAUSS_NODES = 24
_LEFT_NODES = 10  # Gauss-Jacobi on [0, p_L]
_LOG_NODES = 64  # Gauss-Legendre in ln p on [p_L, p_R]
_LEFT_REACH = 0.25  # p_L s max(k, 1): where (1 + p s)^-k starts to turn
_BLOCK = 1 << 15  # elements per quadrature block (x nodes: a few MB)
_NEAR_ONE = 1e-4  # |a - 1| below this: interpolate across a = 1
_ONE_STEP = 1e-3  # ... from a = 1 +- 1e-3, 1 +- 2e-3
_NEAR_ZERO_C = 1e-9  # |a + B - 1| below this: interpolate across it
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
        value = _expected_before_dropout(a, np.array([b]), np.array([r]),
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
    return _expected_before_dropout(a, b + x[0], r + x[0], t / (alpha + age))


def _expected_before_dropout(a: float, B: np.ndarray, k: np.ndarray,
                             s: np.ndarray) -> np.ndarray:
    """E[(1 - (1 + p s)^-k) / p] for p ~ Beta(a, B) (B = b + x, k = r + x, s = t / (alpha + T)):
    B and k of shape (n,), s of shape (m, n); each element by the way the module docstring
    gives for it."""
    closed = a + B <= _HYP2F1_MAX
    s = np.broadcast_to(s, np.broadcast_shapes(s.shape, B.shape))
    ks = k * s
    # outside s <= 1e4 hyp2f1 was not checked; below k s = 1e-4 the closed form's 1 - tail
    # keeps too few digits
    in_range = (s <= _HYP2F1_S_MAX) & (ks >= _HYP2F1_KS_MIN)
    if np.all(closed) and np.all(in_range):
        out = _closed_form(a, B, k, s)
        if np.all(np.isfinite(out)):
            return out
    out = np.full(s.shape, np.nan)
    if np.any(closed):
        out[:, closed] = _closed_form(a, B[closed], k[closed], s[:, closed])
        out[~in_range] = np.nan
    # the rest (and whatever hyp2f1 could not give) by quadrature, with rules per distinct B
    rows, cols = np.nonzero(~np.isfinite(out))
    if rows.size:
        distinct, which = np.unique(B, return_inverse=True)
        out[rows, cols] = _by_quadrature(a, distinct, which.ravel()[cols], k[cols],
                                         s[rows, cols])
    return out


def _by_quadrature(a: float, distinct: np.ndarray, rule: np.ndarray, k: np.ndarray,
                   s: np.ndarray) -> np.ndarray:
    """The expectation by quadrature, element i with B = distinct[rule[i]]."""
    B = distinct[rule]
    out = np.empty(B.size)
    narrow = (a >= _NARROW_A) | (2.0 * s * np.maximum(k, 1.0) <= a + B)
    if np.any(narrow):
        used, where = np.unique(rule[narrow], return_inverse=True)
        nodes, weights = _beta_rules(a, distinct[used])
        out[narrow] = _gauss_beta(nodes, weights, where.ravel(), k[narrow], s[narrow])
    spread = ~narrow
    if np.any(spread):
        out[spread] = _gauss_log(a, distinct, rule[spread], k[spread], s[spread])
    return out


def _closed_form(a: float, B: np.ndarray, k: np.ndarray, s: np.ndarray) -> np.ndarray:
    """FHL's closed form after Euler's transform (small, slowly varying series parameters):
    (a+B-1)/(a-1) [1 - (1+s)^(1-a) 2F1(a+B-1-k, a-1; a+B-1; s/(1+s))]; at a = 1 (a removable
    singularity, where the bracket loses digits as 1/|a-1|) the cubic through a = 1 +- d,
    1 +- 2d."""
    if abs(a - 1.0) >= _NEAR_ONE:
        return _euler(a, B, k, s)
    nodes = 1.0 + _ONE_STEP * np.array([-2.0, -1.0, 1.0, 2.0])
    out = np.zeros(np.broadcast_shapes(B.shape, k.shape, s.shape))
    with np.errstate(all="ignore"):  # not finite where hyp2f1 fails: done by quadrature
        for i, node in enumerate(nodes):
            others = np.delete(nodes, i)
            out = out + np.prod((a - others) / (node - others)) * _euler(float(node), B, k, s)
    return out


def _euler(a: float, B: np.ndarray, k: np.ndarray, s: np.ndarray) -> np.ndarray:
    c = a + B - 1.0
    near = np.abs(c) < _NEAR_ZERO_C  # x = 0 and a + b = 1: a removable singularity too
    if np.any(near):
        # (only for a < 1 - 1e-4: a + B - 1 > a - 1 >= 1e-4 above, and the a = 1 nodes
        # keep B = 1 - a +- 1e-9 positive) linear through c = -+1e-9
        shape = np.broadcast_shapes(B.shape, k.shape, s.shape)
        B, k, s, c, near = (np.broadcast_to(v, shape) for v in (B, k, s, c, near))
        out = np.empty(shape)
        out[~near] = _euler_at(a, B[~near], k[~near], s[~near])
        kn, sn, cn = k[near], s[near], c[near]
        low = _euler_at(a, np.full(cn.shape, 1.0 - a - _NEAR_ZERO_C), kn, sn)
        high = _euler_at(a, np.full(cn.shape, 1.0 - a + _NEAR_ZERO_C), kn, sn)
        out[near] = low + (cn + _NEAR_ZERO_C) * (high - low) / (2.0 * _NEAR_ZERO_C)
        return out
    return _euler_at(a, B, k, s)


def _euler_at(a: float, B: np.ndarray, k: np.ndarray, s: np.ndarray) -> np.ndarray:
    c = a + B - 1.0
    with np.errstate(all="ignore"):  # where hyp2f1 fails: not finite, done by quadrature
        tail = (1.0 + s) ** (1.0 - a) * hyp2f1(c - k, a - 1.0, c, s / (1.0 + s))
        return np.asarray(c / (a - 1.0) * (1.0 - tail))


def _before_dropout(p: np.ndarray, k: np.ndarray, s: np.ndarray) -> np.ndarray:
    """(1 - (1 + p s)^-k) / p, the integrand (p > 0)."""
    return np.asarray(-np.expm1(-k * np.log1p(p * s)) / p)


def _gauss_beta(nodes: np.ndarray, weights: np.ndarray, rule: np.ndarray, k: np.ndarray,
                s: np.ndarray) -> np.ndarray:
    """Gauss quadrature for the weight Beta(a, B): element i by the rule in row rule[i]."""
    out = np.empty(k.size)
    for lo in range(0, k.size, _BLOCK):
        hi = min(k.size, lo + _BLOCK)
        rows = rule[lo:hi]
        values = _before_dropout(nodes[rows], k[lo:hi, None], s[lo:hi, None])
        out[lo:hi] = np.einsum("ij,ij->i", weights[rows], values)
    return out


_RULES: dict[tuple[float, float], tuple[np.ndarray, np.ndarray]] = {}
_RULES_KEPT = 1 << 14


def _beta_rules(a: float, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_beta_rule(a, B, 24)`, remembered per (a, B): a model scores in several calls."""
    keys = [(a, value) for value in B.tolist()]
    found = {key: rule for key in dict.fromkeys(keys)
             if (rule := _RULES.get(key)) is not None}  # (another thread may clear it)
    missing = [key for key in dict.fromkeys(keys) if key not in found]
    if missing:
        nodes, weights = _beta_rule(a, np.array([v for _, v in missing]), _GAUSS_NODES)
        fresh = dict(zip(missing, zip(nodes, weights, strict=True), strict=True))
        found.update(fresh)
        if len(_RULES) + len(fresh) > _RULES_KEPT:
            _RULES.clear()
        _RULES.update(fresh)
    rules = [found[key] for key in keys]
    return np.array([n for n, _ in rules]), np.array([w for _, w in rules])


def _beta_rule(a: float, B: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n-node Gauss rules for Beta(a, B) (one row per B): eigenvalues of the Jacobi matrix of
    the Jacobi polynomials mapped to [0, 1], weights the squared first components of its
    eigenvectors. Written so that no term cancels or overflows for a, B up to 1e12."""
    u = (a + B)[:, None]
    j = np.arange(1, n, dtype=np.float64)[None, :]
    bb = B[:, None]
    diagonal = np.empty((B.size, n))
    diagonal[:, 0] = a / (a + B)
    diagonal[:, 1:] = (2.0 * j * (j + u - 1.0) + a * (u - 2.0)) / ((2.0 * j + u - 2.0)
                                                                   * (2.0 * j + u))
    off = np.empty((B.size, n - 1))
    off[:, 0] = np.sqrt(a * B / ((a + B) ** 2 * (a + B + 1.0)))  # the Beta's s.d.
    jj = j[:, 1:]
    off[:, 1:] = np.sqrt(jj * (jj + bb - 1.0) * (jj + a - 1.0) * (jj + u - 2.0)
                         / ((2.0 * jj + u - 2.0) ** 2 * (2.0 * jj + u - 1.0)
                            * (2.0 * jj + u - 3.0)))
    matrix = np.zeros((B.size, n, n))
    i = np.arange(n)
    matrix[:, i, i] = diagonal
    matrix[:, i[1:], i[:-1]] = off
    matrix[:, i[:-1], i[1:]] = off
    nodes, vectors = np.linalg.eigh(matrix)
    # (a node of a Beta with a or B near 0 may round onto or past 0 or 1)
    return np.clip(nodes, np.finfo(np.float64).tiny, 1.0), vectors[:, 0, :] ** 2


def _gauss_log(a: float, distinct: np.ndarray, rule: np.ndarray, k: np.ndarray,
               s: np.ndarray) -> np.ndarray:
    """For a < 20 with s max(k, 1) > (a + B) / 2, B = distinct[rule]: the integrand turns at
    p ~ 1 / (s max(k, 1)), below where most of the Beta's mass lies. Three pieces:
    - [0, p_L], p_L = min(1/4, 1 / (4 s max(k, 1))): Gauss-Jacobi for the weight p^(a-1), the
      rest ((1-p)^(B-1) times the integrand) smooth there;
    - [p_L, min(p_R, 1/2)], p_R past the Beta's upper tail: Gauss-Legendre in y = ln p, where
      the density e^(a y) (1 - e^y)^(B-1) and the integrand are smooth on a scale of 1
      (below the density's mode less than e^-45 of the mass is left out);
    - [1/2, 1] where p_R > 1/2: Gauss-Jacobi for the weight (1-p)^(B-1)."""
    B = distinct[rule]
    unit, unit_weights = _left_rule(a)
    log_nodes, log_weights = _legendre_rule()
    out = np.empty(B.size)
    for lo in range(0, B.size, _BLOCK):
        hi = min(B.size, lo + _BLOCK)
        bb, kk, ss = B[lo:hi, None], k[lo:hi, None], s[lo:hi, None]
        log_norm = betaln(a, bb)
        p_left = np.minimum(_LEFT_REACH / (ss * np.maximum(kk, 1.0)), _LEFT_REACH)
        p = p_left * unit
        left = np.exp(a * np.log(p_left) - log_norm) * np.einsum(
            "j,ij->i", unit_weights,
            np.exp((bb - 1.0) * np.log1p(-p)) * _before_dropout(p, kk, ss))[:, None]
        p_top = np.minimum(1.0, (a + 61.0 + 12.0 * np.sqrt(a + 1.0)) / (a + bb))
        log_mode = np.log(a) - np.log(a + np.maximum(bb - 1.0, 0.0))
        low = np.maximum(np.log(p_left), log_mode - 45.0 / a)
        half = np.maximum(np.log(np.minimum(p_top, 0.5)) - low, 0.0) / 2.0
        y = low + half * (1.0 + log_nodes)
        e = np.exp(y)
        values = np.exp((a - 1.0) * y + (bb - 1.0) * np.log1p(-e) - log_norm) * -np.expm1(
            -kk * np.log1p(ss * e))
        middle = half * np.einsum("j,ij->i", log_weights, values)[:, None]
        out[lo:hi] = (left + middle)[:, 0]
    upper = np.flatnonzero(
        np.minimum(1.0, (a + 61.0 + 12.0 * np.sqrt(a + 1.0)) / (a + B)) > 0.5)
    if upper.size:
        # 1 - p = u / 2, u ~ Beta(B, 1): 1 - u takes Beta(1, B)'s nodes
        used, where = np.unique(rule[upper], return_inverse=True)
        nodes, weights = _beta_rules(1.0, distinct[used])
        bb, kk, ss = B[upper, None], k[upper, None], s[upper, None]
        p = 0.5 + 0.5 * nodes[where.ravel()]
        values = np.exp((a - 1.0) * np.log(p)) * _before_dropout(p, kk, ss)
        scale = np.exp(-bb[:, 0] * np.log(2.0) - np.log(bb[:, 0]) - betaln(a, bb[:, 0]))
        out[upper] += scale * np.einsum("ij,ij->i", weights[where.ravel()], values)
    return out


@functools.lru_cache(maxsize=64)
def _left_rule(a: float) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Jacobi for the weight u^(a-1) on [0, 1]: Beta(a, 1)'s rule, weights / a."""
    nodes, weights = _beta_rule(a, np.ones(1), _LEFT_NODES)
    return nodes[0], weights[0] / a


@functools.lru_cache(maxsize=1)
def _legendre_rule() -> tuple[np.ndarray, np.ndarray]:
    nodes, weights = np.polynomial.legendre.leggauss(_LOG_NODES)
    return np.asarray(nodes), np.asarray(weights)


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
