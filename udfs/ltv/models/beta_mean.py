"""E[(1 - (1 + p s)^-k) / p] for p ~ Beta(a, B): the expectation behind every BG/NBD
prediction (udfs/ltv/models/bgnbd.py: B = b + x, k = r + x, s = t / (alpha + T)), finite and
accurate for any a, B up to the fitter's bound. Each element goes one of three ways: the
closed form with scipy's hyp2f1 only where it was checked to hold (a + B <= 40, s <= 1e4,
k s >= 1e-4; a = 1 and a + B = 1 interpolated across); Gauss quadrature on the Beta itself
where it is narrow against the integrand; otherwise Gauss-Jacobi near p = 0, Gauss-Legendre
in ln p and Gauss-Jacobi near p = 1. Against numerical integration over p each agrees to
about 1e-9 (tests/unit/test_ltv_numerics.py).
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.special import betaln, hyp2f1

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

def expected_before_dropout(a: float, B: np.ndarray, k: np.ndarray,
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
