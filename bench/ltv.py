"""LTV speed and agreement: udfs.ltv.model beside lifetimes' BetaGeoFitter and GammaGammaFitter.

Data: the CDNOW sample (tests/fixtures/cdnow, 39 weeks of calibration) and customers
simulated from a BG/NBD with Gamma-Gamma spend (r, alpha, a, b = 0.25, 4, 0.8, 2.5;
p, q, v = 6, 4, 15), acquired over 12 weeks and observed to the end of week 39, times in
days. Both sides get the same per-customer summaries, one row per customer (ours merges
identical rows itself: that is part of its fit time). Times, per side:
- fit: BG/NBD + Gamma-Gamma on the summaries (lifetimes: `fit` as it runs, its Hessian
  for standard errors included);
- scoring: for every customer E[Y(39) | x, t_x, T], P(alive) and the lifetime value over
  12 months (lifetimes' `customer_lifetime_value(time=12, freq="W", discount_rate=0.01)`:
  12 monthly steps of 4.345 weeks, 1 % a month; ours the same horizon, steps and rate), as
  customers per second over the three together.
Parameters and scores of both are compared (largest relative difference).

    .venv/bin/python bench/ltv.py [--customers 100000,1000000] [--rounds 200]
        [--lifetimes-python PATH] [--peer-max 1000000]

lifetimes 0.11.3 is in the `bench` extra (`.venv/bin/pip install -e '.[dev,bench]'`); it
runs in a child process of the Python that has it: this one, or `--lifetimes-python`
(a separate virtual environment with lifetimes installed) when this one lacks it.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from udfs.ltv import (  # noqa: E402
    CustomerSummaries,
    LtvModel,
    bootstrap_intervals,
    fit_model,
    simulate_bgnbd,  # noqa: E402
    summaries_from_transactions,
)

CDNOW = ROOT / "tests" / "fixtures" / "cdnow" / "CDNOW_sample.txt"
WEEKS_PER_MONTH = 4.345  # lifetimes' month in weeks (freq="W")
MONTHS = 12
MONTHLY_DISCOUNT = 0.01
FORECAST_WEEKS = 39.0
TRUE_PURCHASES = (0.25, 4.0, 0.8, 2.5)
TRUE_SPEND = (6.0, 4.0, 15.0)

# The peer's side, run by the Python that has lifetimes: argv = summaries .npz, output .npz
PEER = """
import sys, time, warnings
import numpy as np, pandas as pd
from lifetimes import BetaGeoFitter, GammaGammaFitter
warnings.simplefilter("ignore")
data = np.load(sys.argv[1])
x, t_x, T, m = (pd.Series(data[k]) for k in ("frequency", "recency", "age", "monetary"))
months, discount, horizon = (float(v) for v in data["settings"])
start = time.perf_counter()
bgf = BetaGeoFitter().fit(x, t_x, T)
spenders = (x > 0) & (m > 0)
ggf = GammaGammaFitter().fit(x[spenders], m[spenders])
fitted = time.perf_counter()
expected = bgf.conditional_expected_number_of_purchases_up_to_time(horizon, x, t_x, T)
alive = bgf.conditional_probability_alive(x, t_x, T)
clv = ggf.customer_lifetime_value(bgf, x, t_x, T, m, time=int(months), freq="W",
                                  discount_rate=discount)
scored = time.perf_counter()
p = bgf.params_
g = ggf.params_
np.savez(sys.argv[2], fit_s=fitted - start, score_s=scored - fitted,
         params=[p["r"], p["alpha"], p["a"], p["b"], g["p"], g["q"], g["v"]],
         expected=np.asarray(expected), alive=np.asarray(alive), clv=np.asarray(clv))
"""


@dataclass
class Run:
    fit_s: float
    score_s: float
    params: np.ndarray  # r, alpha, a, b, p, q, v
    expected: np.ndarray
    alive: np.ndarray
    clv: np.ndarray


def cdnow_summaries() -> CustomerSummaries:
    columns = np.loadtxt(CDNOW, dtype=str)
    dates = np.array([f"{d[:4]}-{d[4:6]}-{d[6:]}" for d in columns[:, 2]], dtype="datetime64[D]")
    epoch = np.datetime64("1997-01-01")
    day = (dates - epoch).astype(np.float64)
    end = float((np.datetime64("1997-09-30") - epoch).astype(int))
    _, summaries = summaries_from_transactions(columns[:, 1].astype(np.int64), day,
                                               columns[:, 4].astype(np.float64), end)
    return summaries


def simulated(customers: int, seed: int = 0) -> CustomerSummaries:
    ages = 39.0 - np.random.default_rng(seed).integers(0, 84, customers) / 7.0
    return simulate_bgnbd(*TRUE_PURCHASES, customers=customers, T=ages, seed=seed,
                          spend=TRUE_SPEND).rounded(1 / 7)


def ours(summaries: CustomerSummaries) -> Run:
    start = time.perf_counter()
    model: LtvModel = fit_model(summaries, period_days=7.0, fitted_through_day=0.0)
    fitted = time.perf_counter()
    expected = model.purchases.expected_purchases(FORECAST_WEEKS, summaries)
    alive = model.purchases.probability_alive(summaries)
    weekly = (1 + MONTHLY_DISCOUNT) ** (1 / WEEKS_PER_MONTH) - 1
    clv = model.lifetime_value(summaries, horizon=MONTHS * WEEKS_PER_MONTH,
                               discount_rate=weekly, step=WEEKS_PER_MONTH)
    scored = time.perf_counter()
    return Run(fitted - start, scored - fitted,
               np.concatenate([model.purchases.params(), model.spend.params()]),
               expected, alive, clv)


def peer_python(given: str | None) -> str | None:
    """The Python that has lifetimes: --lifetimes-python, or this one; None if neither."""
    candidates = [given] if given else [sys.executable]
    for python in candidates:
        probe = subprocess.run([python, "-c", "import lifetimes"], capture_output=True)
        if probe.returncode == 0:
            return python
        if given:
            sys.exit(f"--lifetimes-python {given} cannot import lifetimes: "
                     f"{probe.stderr.decode().strip().splitlines()[-1:]}")
    return None


def peer(python: str, summaries: CustomerSummaries, timeout: float) -> Run | str:
    """lifetimes on the summaries in a child process; a string says why there is no result."""
    with tempfile.TemporaryDirectory() as folder:
        given, result = Path(folder) / "summaries.npz", Path(folder) / "result.npz"
        np.savez(given, frequency=summaries.frequency, recency=summaries.recency,
                 age=summaries.age, monetary=summaries.monetary,
                 settings=[MONTHS, MONTHLY_DISCOUNT, FORECAST_WEEKS])
        try:
            done = subprocess.run([python, "-c", PEER, str(given), str(result)],
                                  capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"no result within {timeout:.0f} s"
        if done.returncode != 0:
            lines = done.stderr.decode().strip().splitlines()
            return "failed: " + (lines[-1] if lines else f"exit status {done.returncode}")
        with np.load(result) as data:
            return Run(float(data["fit_s"]), float(data["score_s"]), data["params"],
                       data["expected"], data["alive"], data["clv"])


def largest_relative(ours_values: np.ndarray, theirs: np.ndarray) -> float:
    scale = np.maximum(np.abs(theirs), 1e-12)
    return float(np.max(np.abs(ours_values - theirs) / scale)) if theirs.size else 0.0


def report(name: str, summaries: CustomerSummaries, python: str | None, peer_max: int,
           timeout: float) -> dict[str, object]:
    customers = len(summaries)
    print(f"\n== {name}: {customers:,} customers, {len(summaries.collapsed()):,} distinct "
          f"(x, t_x, T, m), {len(summaries.by_purchases()[0]):,} distinct (x, t_x, T)")
    mine = ours(summaries)
    theirs: Run | str
    if python is None:
        theirs = "lifetimes not installed (see --lifetimes-python)"
    elif customers > peer_max:
        theirs = f"skipped above --peer-max {peer_max:,}"
    else:
        theirs = peer(python, summaries, timeout)
    rate = customers / mine.score_s
    print(f"{'':24}{'udfs.ltv.model':>14}{'lifetimes':>14}{'speed-up':>10}")
    if isinstance(theirs, str):
        print(f"{'fit (s)':24}{mine.fit_s:14.3f}{'-':>14}")
        print(f"{'scoring (customers/s)':24}{rate:14,.0f}{'-':>14}")
        print(f"lifetimes: {theirs}")
        print("params (r, alpha, a, b, p, q, v):", np.round(mine.params, 4).tolist())
        return {"data": name, "customers": customers, "fit_s": mine.fit_s,
                "score_per_s": rate, "peer": theirs}
    peer_rate = customers / theirs.score_s
    print(f"{'fit (s)':24}{mine.fit_s:14.3f}{theirs.fit_s:14.3f}"
          f"{theirs.fit_s / mine.fit_s:9.1f}x")
    print(f"{'scoring (customers/s)':24}{rate:14,.0f}{peer_rate:14,.0f}"
          f"{rate / peer_rate:9.1f}x")
    names = ("r", "alpha", "a", "b", "p", "q", "v")
    for label, params in (("udfs.ltv.model", mine.params), ("lifetimes", theirs.params)):
        print(f"{label:>10} "
              + "  ".join(f"{n}={v:.4f}" for n, v in zip(names, params, strict=True)))
    differences = {
        "params": largest_relative(mine.params, theirs.params),
        "E[Y(39)]": largest_relative(mine.expected, theirs.expected),
        "P(alive)": largest_relative(mine.alive, theirs.alive),
        "clv": largest_relative(mine.clv, theirs.clv),
    }
    print("largest relative difference: "
          + ", ".join(f"{k} {v:.1e}" for k, v in differences.items()))
    return {"data": name, "customers": customers, "fit_s": mine.fit_s, "score_per_s": rate,
            "peer_fit_s": theirs.fit_s, "peer_score_per_s": peer_rate, **differences}


def bootstrap_timing(summaries: CustomerSummaries, rounds: int) -> None:
    start = time.perf_counter()
    intervals = bootstrap_intervals(summaries, rounds=rounds, level=0.9)
    took = time.perf_counter() - start
    print(f"bootstrap, {rounds} rounds: {took:.2f} s; 90 % intervals: "
          + ", ".join(f"{k} {lo:.3f}-{hi:.3f}" for k, (lo, hi) in intervals.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--customers", default="100000",
                        help="comma-separated sizes of the simulated data (default 100000)")
    parser.add_argument("--rounds", type=int, default=200,
                        help="bootstrap rounds timed on the CDNOW sample (0: none)")
    parser.add_argument("--lifetimes-python", default=None,
                        help="a Python with lifetimes 0.11.3, when this one has none")
    parser.add_argument("--peer-max", type=int, default=1_000_000,
                        help="run lifetimes up to this many customers")
    parser.add_argument("--peer-timeout", type=float, default=600.0)
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    sizes = [int(n) for n in args.customers.split(",") if n]
    python = peer_python(args.lifetimes_python)
    rows = []
    cdnow = cdnow_summaries()
    rows.append(report("CDNOW sample", cdnow, python, args.peer_max, args.peer_timeout))
    if args.rounds > 0:
        bootstrap_timing(cdnow, args.rounds)
    for size in sizes:
        data = simulated(size)
        rows.append(report(f"simulated {size:,}", data, python, args.peer_max,
                           args.peer_timeout))
        if args.rounds > 0 and size == max(sizes):
            bootstrap_timing(data, max(1, math.ceil(args.rounds / 10)))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
