"""udfs/ltv/models/bgnbd.py over the whole range of a and b (up to the fitter's bound, e^25): its
expected purchases, P(alive) and likelihood against an independent reference (the model's
definition integrated numerically over the dropout probability p ~ Beta(a, b), the purchase
rate lambda ~ Gamma(r, alpha) integrated in closed form, and once over both numerically), the
fixed-dropout limit, a fit on customers who all share one dropout probability, and no NaN or
inf for extreme parameters; udfs/ltv/models/pareto.py likewise for large s and beta (its P(alive)
and likelihood against the integral over the time of dropout, by quad)."""

from __future__ import annotations

import functools
import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import integrate
from scipy.special import expit

from udfs.ltv.model import BgNbd, CustomerSummaries, GammaGamma, ParetoNbd, lifetime_value
from udfs.ltv.models.beta_mean import _by_quadrature, _closed_form
from udfs.ltv.models.fit import LOG_BOUND
from udfs.ltv.simulate import simulate_bgnbd_holdout

GRID = (0.5, 2.0, 30.0, 1e3, 1e5, 1e8)  # a and b
# (x, t_x, T): new, no repeat yet, the papers' worked example, a regular, a frequent buyer
CUSTOMERS = ((0.0, 0.0, 0.0), (0.0, 0.0, 39.0), (2.0, 30.43, 38.86), (7.0, 20.0, 39.0),
             (40.0, 38.5, 39.0))
HORIZONS = (1.0, 39.0, 520.0)
RTOL = 1e-9  # found: 6e-12 at most (the reference, quad at epsrel 1e-11, to some 1e-10)


QUAD = {"epsabs": 0.0, "epsrel": 1e-11, "limit": 500}


def beta_expectation(fun, a: float, b: float, turns: tuple[float, ...] = ()) -> float:
    """E[fun(p)] for p ~ Beta(a, b): quad over u = logit p, in units of the density's width
    from its mode, the density normalised by quad as well (no Beta function needed); `turns`
    are values of p where fun changes fast (breakpoints)."""
    mode, width = math.log(a / b), math.sqrt(1.0 / a + 1.0 / b)
    cuts = {-10.0, 0.0, 10.0}
    cuts.update(float(np.clip((math.log(p / (1 - p)) - mode) / width, -1e6, 1e6))
                for p in turns if 0 < p < 1)
    edges = [-np.inf, *sorted(cuts), np.inf]

    def weighted(v: float) -> float:
        return math.exp(_log_density(a, b, v)) * fun(float(expit(mode + width * v)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        total = sum(integrate.quad(weighted, lo, hi, **QUAD)[0]
                    for lo, hi in zip(edges[:-1], edges[1:], strict=True))
    return total / _mass(a, b)


def _log_density(a: float, b: float, v: float) -> float:
    """ln of Beta(a, b)'s density in v = (logit p - mode) / width, less its value at v = 0."""
    mode, width = math.log(a / b), math.sqrt(1.0 / a + 1.0 / b)
    u = mode + width * v
    return a * width * v - (a + b) * (np.logaddexp(0.0, u) - np.logaddexp(0.0, mode))


@functools.cache
def _mass(a: float, b: float) -> float:
    edges = (-np.inf, -10.0, 0.0, 10.0, np.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        return sum(integrate.quad(lambda v: math.exp(_log_density(a, b, v)), lo, hi,
                                  **QUAD)[0] for lo, hi in zip(edges[:-1], edges[1:], strict=True))


def dropout_moments(a: float, b: float, x: float) -> tuple[float, float]:
    """ln E[(1 - p)^x] and ln E[p (1 - p)^(x - 1)] (x >= 1; -inf at x = 0) for p ~ Beta(a, b),
    as sums of logs of the ratios in the moments' products."""
    survive = sum(math.log((b + j) / (a + b + j)) for j in range(int(x)))
    drop = -math.inf if x == 0 else math.log(a / (a + b)) + sum(
        math.log((b + j) / (a + b + 1 + j)) for j in range(int(x) - 1))
    return survive, drop


def reference_alive(model: BgNbd, x: float, t_x: float, age: float) -> float:
    """P(active at T | x, t_x, T): of the two ways to see (x, t_x, T) (still active; dropped
    out after the x-th purchase), lambda integrated out in closed form."""
    r, alpha, a, b = model.params()
    if x == 0:
        return 1.0
    survive, drop = dropout_moments(a, b, x)
    log_alive = survive - (r + x) * math.log(alpha + age)
    log_dead = drop - (r + x) * math.log(alpha + t_x)
    return float(expit(log_alive - log_dead))


def reference_if_alive(model: BgNbd, t: float, x: float, age: float) -> float:
    """E[Y(t) | x, T, active]: given active, p ~ Beta(a, b + x) and lambda ~ Gamma(r + x,
    alpha + T); given both, (1 - e^(-lambda p t)) / p purchases before dropout, which over
    lambda is (1 - ((alpha + T) / (alpha + T + p t))^(r + x)) / p; that, over p by quad."""
    r, alpha, a, b = model.params()
    k, rate = r + x, alpha + age

    def purchases(p: float) -> float:
        if p * t < 1e-300:
            return k * t / rate
        return -math.expm1(-k * math.log1p(p * t / rate)) / p

    turn = rate / (t * max(k, 1.0))
    return beta_expectation(purchases, a, b + x, (turn / 10, turn, 10 * turn))


def models() -> list[BgNbd]:
    return [BgNbd(0.243, 4.414, a, b) for a, b in itertools.product(GRID, GRID)]


def test_expected_purchases_and_alive_match_numerical_integration() -> None:
    rows = CustomerSummaries.of(*(np.array(column) for column in zip(*CUSTOMERS, strict=True)))
    worst = 0.0
    for model in models():
        alive = model.probability_alive(rows)
        new = model.expected_purchases_new(np.array(HORIZONS))
        for t, new_t in zip(HORIZONS, new, strict=True):
            expected = model.expected_purchases(t, rows)
            for (x, t_x, age), got, p_alive in zip(CUSTOMERS, expected, alive, strict=True):
                want_alive = reference_alive(model, x, t_x, age)
                assert p_alive == pytest.approx(want_alive, rel=1e-12, abs=1e-300), (model, x)
                want = want_alive * reference_if_alive(model, t, x, age)
                assert got == pytest.approx(want, rel=RTOL), (model, t, x, t_x, age)
                worst = max(worst, abs(got / want - 1.0))
            assert new_t == pytest.approx(reference_if_alive(model, t, 0.0, 0.0), rel=RTOL)
    assert worst < RTOL


def joint_integrals(model: BgNbd, x: float, t_x: float, age: float,
                    t: float) -> dict[str, float]:
    """Over lambda and p both (dblquad), the prior densities (unnormalised) times: the chance
    of (x, t_x, T) ("seen"), of it and being active at T ("alive"), and that times the
    purchases expected in (T, T + t] ("purchases")."""
    r, alpha, a, b = model.params()

    def joint(lam: float, p: float, what: str) -> float:
        prior = lam ** (r - 1) * math.exp(-alpha * lam) * p ** (a - 1) * (1 - p) ** (b - 1)
        alive = (1 - p) ** x * lam ** x * math.exp(-lam * age)
        dead = p * (1 - p) ** (x - 1) * lam ** x * math.exp(-lam * t_x) if x else 0.0
        if what == "seen":
            return prior * (alive + dead)
        if what == "alive":
            return prior * alive
        return prior * alive * -math.expm1(-lam * p * t) / p

    top = 60.0 * (r + x) / (alpha + t_x)  # lambda beyond this: nothing left
    return {what: integrate.dblquad(lambda lam, p, w=what: joint(lam, p, w), 0.0, 1.0, 0.0, top,
                                    epsabs=0.0, epsrel=1e-10)[0]
            for what in ("seen", "alive", "purchases")}


def test_the_reference_agrees_with_integration_over_both_rate_and_dropout() -> None:
    # lambda integrated numerically as well, where the densities are broad enough for dblquad
    for model, (x, t_x, age), t in ((BgNbd(0.243, 4.414, 0.793, 2.426), CUSTOMERS[2], 39.0),
                                    (BgNbd(2.0, 10.0, 30.0, 100.0), CUSTOMERS[3], 52.0)):
        found = joint_integrals(model, x, t_x, age, t)
        rows = CustomerSummaries.of(np.array([x]), np.array([t_x]), np.array([age]))
        assert model.probability_alive(rows)[0] == pytest.approx(
            found["alive"] / found["seen"], rel=1e-7)
        assert model.expected_purchases(t, rows)[0] == pytest.approx(
            found["purchases"] / found["seen"], rel=1e-7)
        assert reference_if_alive(model, t, x, age) == pytest.approx(
            found["purchases"] / found["alive"], rel=1e-7)


def test_log_likelihood_matches_the_definition_up_to_the_fitters_bound() -> None:
    rows = CustomerSummaries.of(*(np.array(column) for column in zip(*CUSTOMERS, strict=True)))
    bound = math.exp(LOG_BOUND)
    for a, b in [*itertools.product(GRID, GRID), (0.3 * bound, 0.7 * bound),
                 (bound, bound), (bound, 0.5)]:
        model = BgNbd(0.243, 4.414, a, b)
        r, alpha = model.r, model.alpha
        want = 0.0
        for x, t_x, age in CUSTOMERS:
            survive, drop = dropout_moments(a, b, x)
            seen = np.logaddexp(survive - r * math.log1p(age / alpha) - x * math.log(alpha + age),
                                drop - r * math.log1p(t_x / alpha) - x * math.log(alpha + t_x))
            want += math.lgamma(r + x) - math.lgamma(r) + float(seen)
        assert model.log_likelihood(rows) == pytest.approx(want, abs=1e-9), (a, b)


def test_likelihood_gradient_is_exact_for_large_a_and_b() -> None:
    from udfs.ltv.models.bgnbd import _Likelihood

    summaries, _ = simulate_bgnbd_holdout(0.5, 5.0, 3e9, 7e9, 2000, T=39.0, holdout=0.0)
    objective = _Likelihood(summaries)
    for theta in (np.array([0.5, 5.0, 3e4, 7e4]), np.array([0.5, 5.0, 3e10, 7e10])):
        _, gradient = objective(theta)
        for i in range(4):  # central differences in ln theta_i
            step = np.zeros(4)
            step[i] = 1e-4
            up, down = (objective(theta * np.exp(sign * step))[0] for sign in (1, -1))
            assert gradient[i] * theta[i] == pytest.approx((up - down) / 2e-4, abs=1e-8)


def test_large_a_and_b_tend_to_the_fixed_dropout_model() -> None:
    rows = CustomerSummaries.of(*(np.array(column) for column in zip(*CUSTOMERS, strict=True)))
    x, t_x, age = rows.frequency, rows.recency, rows.age
    r, alpha, t = 0.5, 3.0, 52.0
    for p in (0.02, 0.3, 0.9):
        model = BgNbd(r, alpha, p * 1e13, (1 - p) * 1e13)
        # with p fixed: purchases before dropout (1 - ((alpha+T)/(alpha+T+p t))^(r+x)) / p,
        # and P(alive) = 1 / (1 + p / (1 - p) ((alpha + T) / (alpha + t_x))^(r + x))
        if_alive = -np.expm1(-(r + x) * np.log1p(p * t / (alpha + age))) / p
        odds = np.where(x > 0, p / (1 - p) * ((alpha + age) / (alpha + t_x)) ** (r + x), 0.0)
        np.testing.assert_allclose(model.probability_alive(rows), 1 / (1 + odds), rtol=1e-9)
        np.testing.assert_allclose(model.expected_purchases(t, rows),
                                   if_alive / (1 + odds), rtol=1e-9)
        np.testing.assert_allclose(model.expected_purchases_new(t),
                                   -math.expm1(-r * math.log1p(p * t / alpha)) / p, rtol=1e-9)


def test_the_closed_form_and_the_quadratures_agree_where_both_apply() -> None:
    rng = np.random.default_rng(5)
    for _ in range(40):
        a = float(np.exp(rng.uniform(math.log(0.05), math.log(39.0))))
        B = np.exp(rng.uniform(math.log(0.05), math.log(40.0 - a), 50))
        k = np.exp(rng.uniform(math.log(0.01), math.log(200.0), 50))
        s = np.exp(rng.uniform(math.log(1e-4), math.log(1e4), (3, 50)))
        closed = _closed_form(a, B, k, s)
        quadrature = _by_quadrature(a, B, np.tile(np.arange(50), 3), np.tile(k, 3),
                                    s.ravel()).reshape(3, 50)
        np.testing.assert_allclose(closed, quadrature, rtol=1e-8, err_msg=f"a={a}")


def test_a_equal_to_one_is_no_singularity() -> None:
    rows = CustomerSummaries.of(np.array([0.0, 3.0]), np.array([0.0, 20.0]),
                                np.array([10.0, 39.0]))
    near = [BgNbd(0.3, 2.0, 1.0 + d, 5.0).expected_purchases(100.0, rows)
            for d in (-1e-3, -1e-6, -1e-12, 0.0, 1e-12, 1e-6, 1e-3)]
    at_one = BgNbd(0.3, 2.0, 1.0, 5.0)
    for (x, t_x, age), value in zip(((0.0, 0.0, 10.0), (3.0, 20.0, 39.0)), near[3],
                                    strict=True):
        want = reference_alive(at_one, x, t_x, age) * reference_if_alive(at_one, 100.0, x, age)
        assert value == pytest.approx(want, rel=RTOL)
    for value in near:
        np.testing.assert_allclose(value, near[3], rtol=1e-3 * 3)
    np.testing.assert_allclose(near[2], near[3], rtol=1e-9)
    np.testing.assert_allclose(near[4], near[3], rtol=1e-9)


def test_a_fit_where_everyone_drops_out_alike_predicts_the_holdout() -> None:
    # every customer's dropout probability 0.6 (a, b ~ 1e12): the likelihood keeps rising
    # with a and b, and the fit goes far out (before, every prediction was then NaN)
    summaries, later = simulate_bgnbd_holdout(0.3, 2.0, 0.6e12, 0.4e12, 20000, T=39.0,
                                              holdout=39.0, seed=2, spend=(6.0, 4.0, 15.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = BgNbd.fit(summaries.collapsed().by_purchases()[0])
        assert model.a > 1e4 and model.b > 1e4
        assert model.a / (model.a + model.b) == pytest.approx(0.6, abs=0.03)
        predicted = model.expected_purchases(39.0, summaries)
        spend = GammaGamma.fit(summaries.collapsed())
        value = lifetime_value(model, spend, summaries, horizon=52.0, discount_rate=0.002)
    assert np.all(np.isfinite(predicted)) and np.all(np.isfinite(value))
    assert predicted.sum() == pytest.approx(later.sum(), rel=0.05)
    for x in (0, 1, 2):  # and customer by customer, on average over those alike
        group = summaries.frequency == x
        assert predicted[group].mean() == pytest.approx(later[group].mean(), abs=0.03)


def test_no_nan_or_inf_for_extreme_parameters() -> None:
    tiny, huge = math.exp(-LOG_BOUND), math.exp(LOG_BOUND)
    rows = CustomerSummaries.of(np.array([0.0, 0.0, 1.0, 5.0, 50.0, 500.0]),
                                np.array([0.0, 0.0, 0.5, 35.0, 38.0, 500.0]),
                                np.array([0.0, 39.0, 520.0, 39.0, 520.0, 520.0]))
    sides = (tiny, 1e-3, 0.5, 1.0, 1.0 + 1e-9, 30.0, 1e4, huge)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for r, alpha, a, b in itertools.product((tiny, 0.24, huge), (tiny, 4.4, huge), sides,
                                                sides):
            model = BgNbd(r, alpha, a, b)
            values = [model.expected_purchases(t, rows) for t in (0.0, 1.0, 52.0, 520.0)]
            values.append(model.expected_purchases_new(np.array([0.0, 1e-6, 52.0, 520.0])))
            values.append(model.discounted_if_alive(np.arange(4.0, 53.0, 4.0),
                                                    1.04 ** -np.arange(1.0, 14.0),
                                                    rows.frequency, rows.age))
            values.append(model.probability_alive(rows))
            values.append(np.array([model.log_likelihood(rows)]))
            assert all(np.all(np.isfinite(v)) for v in values), model
            assert all(np.all(v >= 0) for v in values[:-1]), model


def pareto_log_j(model: ParetoNbd, x: float, t_x: float, age: float) -> float:
    """ln J, J = (alpha + T)^(r+x) (beta + T)^s int_{t_x}^T (alpha + tau)^-(r+x)
    (beta + tau)^-(s+1) dtau (dropout at tau between the last purchase and T), by quad; the
    integrand is largest at t_x and falls on the scale 1 / (its log's slope there)."""
    r, alpha, s, beta = model.params()
    if age <= t_x:
        return -math.inf

    def log_integrand(tau: float) -> float:
        return ((r + x) * math.log1p((age - tau) / (alpha + tau))
                + s * math.log1p((age - tau) / (beta + tau)) - math.log(beta + tau))

    top = log_integrand(t_x)
    scale = 1.0 / ((r + x) / (alpha + t_x) + (s + 1) / (beta + t_x))
    points = sorted({min(t_x + k * scale, age) for k in (0.1, 1.0, 3.0, 10.0, 30.0, 100.0)}
                    | {t_x + (age - t_x) * q for q in (1e-3, 0.1, 0.5)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        value = integrate.quad(lambda tau: math.exp(log_integrand(tau) - top), t_x, age,
                               points=[p for p in points if t_x < p < age], epsabs=0.0,
                               epsrel=1e-12, limit=1000)[0]
    return top + math.log(value)


PARETO_CUSTOMERS = ((0.0, 0.0, 39.0), (1.0, 5.0, 39.0), (2.0, 30.43, 38.86), (7.0, 20.0, 39.0),
                    (40.0, 38.5, 39.0), (3.0, 1.0, 104.0), (0.0, 0.0, 0.0))


def test_pareto_alive_and_likelihood_match_numerical_integration() -> None:
    rows = CustomerSummaries.of(*(np.array(c) for c in zip(*PARETO_CUSTOMERS, strict=True)))
    for (r, alpha), s, beta in itertools.product(((0.55, 10.6), (3.0, 0.5)),
                                                 (0.6, 30.0, 1e3, 1e6, 1e10),
                                                 (11.7, 1e3, 1e5, 1e8, 1e11)):
        model = ParetoNbd(r, alpha, s, beta)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            alive = model.probability_alive(rows)
            found = model.log_likelihood(rows)
        want = 0.0
        for (x, t_x, age), got in zip(PARETO_CUSTOMERS, alive, strict=True):
            odds = math.log(s) + pareto_log_j(model, x, t_x, age)  # P(alive) = 1 / (1 + s J)
            assert got == pytest.approx(float(expit(-odds)), rel=1e-9, abs=1e-300), (model, x)
            want += (math.lgamma(r + x) - math.lgamma(r) - r * math.log1p(age / alpha)
                     - x * math.log(alpha + age) - s * math.log1p(age / beta)
                     + float(np.logaddexp(0.0, odds)))
        assert found == pytest.approx(want, rel=1e-10, abs=1e-8), model


def test_pareto_has_no_nan_or_inf_for_extreme_parameters() -> None:
    tiny, huge = math.exp(-LOG_BOUND), math.exp(LOG_BOUND)
    rows = CustomerSummaries.of(np.array([0.0, 0.0, 1.0, 5.0, 50.0]),
                                np.array([0.0, 0.0, 0.5, 35.0, 38.0]),
                                np.array([0.0, 39.0, 520.0, 39.0, 520.0]))
    sides = (tiny, 1e-3, 0.6, 1.0, 30.0, 1e4, huge)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for r, alpha, s, beta in itertools.product((0.05, 5.0), (0.5, 100.0), sides, sides):
            model = ParetoNbd(r, alpha, s, beta)
            values = [model.expected_purchases(t, rows) for t in (0.0, 52.0, 520.0)]
            values.append(model.expected_purchases_new(np.array([0.0, 52.0, 520.0])))
            values.append(model.probability_alive(rows))
            values.append(np.array([model.log_likelihood(rows)]))
            assert all(np.all(np.isfinite(v)) for v in values), model
