"""Maximum likelihood over positive parameters, shared by the LTV models.

The models' parameters are all positive: the optimiser works on their logarithms, so every
step stays in the domain. SLSQP (a quasi-Newton method) with the analytic gradient does the
work; should it stop without converging (a flat or badly scaled start), Nelder-Mead from the
same start finds the basin and SLSQP polishes from there. Not L-BFGS-B: with few parameters
its every step is a handful of tiny BLAS calls, and a threaded BLAS on a busy machine makes
each of them wait for its threads (a 5 ms fit took 0.5 s beside a CPU-heavy neighbour).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

# log-parameters stay within e^-LOG_BOUND .. e^LOG_BOUND: far outside any sensible fit, and
# the gammaln/log terms stay finite there
LOG_BOUND = 25.0

# objective(theta) -> (mean negative log-likelihood, its gradient), at theta = exp(log_theta)
Objective = Callable[[np.ndarray], tuple[float, np.ndarray]]


def _on_logs(objective: Objective) -> Callable[[np.ndarray], tuple[float, np.ndarray]]:
    def on_logs(log_theta: np.ndarray) -> tuple[float, np.ndarray]:
        theta = np.exp(log_theta)
        value, gradient = objective(theta)
        if not np.isfinite(value) or not np.all(np.isfinite(gradient)):
            return float(np.inf), np.zeros_like(log_theta)
        return value, gradient * theta  # d/d log(theta) = theta * d/d theta

    return on_logs


def maximise(objective: Objective, start: np.ndarray, what: str) -> np.ndarray:
    """The positive parameters minimising `objective` (a mean negative log-likelihood)."""
    # imported here, not with the module: the streaming jobs score with these models but
    # never fit, and importing scipy.optimize (its HiGHS extension) inside Flink's embedded
    # Python while other operators start hung a whole job at INITIALIZING
    from scipy.optimize import minimize

    on_logs = _on_logs(objective)
    x0 = np.clip(np.log(np.asarray(start, dtype=np.float64)), -LOG_BOUND, LOG_BOUND)
    bounds = [(-LOG_BOUND, LOG_BOUND)] * x0.size
    options = {"maxiter": 1000, "ftol": 1e-14}
    result = minimize(on_logs, x0, jac=True, method="SLSQP", bounds=bounds, options=options)
    if not _good(result, on_logs):
        def value_only(log_theta: np.ndarray) -> float:
            return on_logs(log_theta)[0]

        rough = minimize(value_only, x0, method="Nelder-Mead",
                         options={"maxiter": 20000, "xatol": 1e-8, "fatol": 1e-14})
        start_polish = np.clip(rough.x, -LOG_BOUND, LOG_BOUND)
        polished = minimize(on_logs, start_polish, jac=True, method="SLSQP", bounds=bounds,
                            options=options)
        best = min((result, rough, polished), key=lambda r: float(r.fun))
        if not np.isfinite(best.fun):
            raise ValueError(f"{what}: the likelihood is not finite anywhere the fit looked")
        result = best
    return np.asarray(np.exp(result.x), dtype=np.float64)


def _good(result: Any, on_logs: Callable[[np.ndarray], tuple[float, np.ndarray]]) -> bool:
    value = float(result.fun)
    if not np.isfinite(value):
        return False
    if bool(result.success):
        return True
    # a stop on a line search that cannot improve further is the optimum too when the
    # gradient is small there (to the precision the objective has)
    _, gradient = on_logs(np.asarray(result.x))
    return bool(np.max(np.abs(gradient)) < 1e-6)


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """sum(a * b), without BLAS: a threaded BLAS splits long dot products over threads, and
    on a busy machine waiting for them costs milliseconds per call (einsum's own loop does
    not thread)."""
    return float(np.einsum("i,i->", a, b))


def group_by(values: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                             np.ndarray]:
    """The distinct values, each row's index among them, and the weight summed per value."""
    distinct, index = np.unique(values, return_inverse=True)
    index = index.ravel()
    return distinct, index, np.bincount(index, weights=weight, minlength=distinct.size)


def distinct_pairs(x: np.ndarray, age: np.ndarray,
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The distinct (x, T) pairs (or any two columns) and each row's index among them
    (None: rows as they are, when hardly any pair repeats). Hashing (pandas' factorize)
    rather than sorting: a million rows take tens of milliseconds."""
    x_code, xs = pd.factorize(x)
    age_code, ages = pd.factorize(age)
    index, codes = pd.factorize(x_code.astype(np.int64) * ages.size + age_code)
    if codes.size > x.size // 2:
        return x, age, None
    codes = np.asarray(codes)
    return (np.asarray(xs)[codes // ages.size], np.asarray(ages)[codes % ages.size],
            np.asarray(index))
