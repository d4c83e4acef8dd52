"""Accuracy against a known truth: which model recovers how much each channel matters?

Simulated users see a path of channels; each converts with probability p(S), a known
function of the set S of channels seen, with interactions between channels. The true
credit of a conversion with set S is the Shapley split of the game v(T) = p(T) - p({})
over S (normalised to the conversion); summed over conversions it gives each channel's
true share. Printed: each model's error against the truth, as the total absolute
difference of channel shares (0 = perfect, 2 = everything on the wrong channels), for our
models and the peers' (channelattribution's Markov, mta's Shapley).

Then the selection scenarios (udfs/incrementality/simulation.py): channels aimed at users
who would buy anyway, where association and cause part ways. Each model's credited conversions per
channel against the channel's true incremental conversions, uncalibrated and calibrated
by holdout lift tests (udfs/incrementality) holding 1 %, 5 % and 10 % of each tested
channel's audience out: the error is sum over channels of |figure - truth| / sum of the
truths (mean over --seeds populations); then how often the calibrated channels' 95 %
intervals cover the truth over --coverage-runs populations.

    .venv/bin/python bench/accuracy.py [--users 200000] [--selection-users 1000000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from itertools import combinations
from math import factorial
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import require_peers  # noqa: E402

from udfs.attribution import MODELS as ALL_MODELS  # noqa: E402
from udfs.attribution import attribute  # noqa: E402
from udfs.incrementality import SIMULATED_CHANNELS as SELECTION_CHANNELS  # noqa: E402
from udfs.incrementality import factor  # noqa: E402
from udfs.incrementality import simulate as simulate_selection  # noqa: E402
from udfs.journeys import PATH_SEPARATOR, from_paths  # noqa: E402

CHANNELS = ("search", "social", "display", "email", "affiliate", "retargeting")
# every model but time_decay, which needs touch times (path summaries have none)
MODELS = tuple(m for m in ALL_MODELS if m != "time_decay")

# base rate, per-channel lift, pairwise interactions
SCENARIOS = {
    "additive": (0.02, {"search": 0.06, "social": 0.03, "display": 0.01, "email": 0.04,
                        "affiliate": 0.02, "retargeting": 0.0}, {}),
    "synergy search x social": (0.02, {"search": 0.03, "social": 0.01, "display": 0.01,
                                       "email": 0.02, "affiliate": 0.01, "retargeting": 0.0},
                                {("search", "social"): 0.10}),
    "redundant email / affiliate": (0.02, {"search": 0.04, "social": 0.02, "display": 0.01,
                                           "email": 0.05, "affiliate": 0.05,
                                           "retargeting": 0.005},
                                    {("affiliate", "email"): -0.05}),
}


def probability(members: frozenset[str], base: float, lift: dict[str, float],
                pairs: dict[tuple[str, str], float]) -> float:
    p = base + sum(lift[c] for c in members)
    p += sum(g for (a, b), g in pairs.items() if a in members and b in members)
    return min(max(p, 0.0), 1.0)


def true_split(members: tuple[str, ...], value) -> dict[str, float]:
    n = len(members)
    phi = dict.fromkeys(members, 0.0)
    for i, c in enumerate(members):
        others = members[:i] + members[i + 1:]
        for size in range(n):
            w = factorial(size) * factorial(n - size - 1) / factorial(n)
            for coalition in combinations(others, size):
                t = frozenset(coalition)
                phi[c] += w * (value(t | {c}) - value(t))
    positive = {c: max(v, 0.0) for c, v in phi.items()}
    total = sum(positive.values())
    return {c: v / total for c, v in positive.items()} if total > 0 else \
        {members[-1]: 1.0}


def simulate(users: int, scenario: str, seed: int) -> tuple[pd.DataFrame, dict[str, float]]:
    base, lift, pairs = SCENARIOS[scenario]
    rng = np.random.default_rng(seed)
    popularity = np.array([0.3, 0.25, 0.2, 0.12, 0.08, 0.05])
    rows, truth = [], dict.fromkeys(CHANNELS, 0.0)
    cache: dict[frozenset[str], dict[str, float]] = {}
    for _ in range(users):
        length = int(rng.integers(1, 7))
        path = list(rng.choice(CHANNELS, size=length, p=popularity))
        if "retargeting" in path:  # retargeting shows up last: it follows the others
            path = [c for c in path if c != "retargeting"] + ["retargeting"]
        members = frozenset(path)
        converted = rng.random() < probability(members, base, lift, pairs)
        rows.append((PATH_SEPARATOR.join(path), int(converted)))
        if converted:
            if members not in cache:
                cache[members] = true_split(
                    tuple(sorted(members)),
                    lambda t: probability(t, base, lift, pairs) - base)
            for c, share in cache[members].items():
                truth[c] += share
    frame = pd.DataFrame(rows, columns=["path", "conversions"])
    frame["non_conversions"] = 1 - frame.conversions
    total = sum(truth.values())
    return frame, {c: v / total for c, v in truth.items()}


def error(shares: dict[str, float], truth: dict[str, float]) -> float:
    return sum(abs(shares.get(c, 0.0) - truth[c]) for c in CHANNELS)


def normalised(values: dict[str, float]) -> dict[str, float]:
    total = sum(values.values())
    return {c: v / total for c, v in values.items()}


def peers(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    grouped = frame.groupby("path", as_index=False).agg(
        total_conversions=("conversions", "sum"), total_null=("non_conversions", "sum"))
    out = {}
    with contextlib.redirect_stdout(io.StringIO()):
        import ChannelAttribution as ca
        from mta import MTA

        result = ca.markov_model(grouped, "path", "total_conversions",
                                 var_null="total_null", verbose=0, flg_pro=False)
        result = result["result"] if isinstance(result, dict) else result
        out["channelattribution markov"] = normalised(dict(zip(
            result.channel_name, result.total_conversions, strict=True)))
        model = MTA(data=grouped.copy(), allow_loops=True).shapley(normalize=True)
        out["mta shapley"] = normalised(dict(model.attribution["shapley"]))
    return out


HOLDOUTS = (0.01, 0.05, 0.10)
# which channels run a holdout: every one, or the paid ones (email to customers untested)
TESTED = {"every channel tested": tuple(c.name for c in SELECTION_CHANNELS),
          "paid channels tested": tuple(c.name for c in SELECTION_CHANNELS
                                        if c.name != "email")}


def selection_errors(users: int, holdout: float, tested: tuple[str, ...], seed: int
                     ) -> dict[str, tuple[float, float]]:
    """Per model: (uncalibrated error, calibrated error) against the true incremental
    conversions of one simulated population."""
    population = simulate_selection(users, holdout, seed)
    names = [c.name for c in population.channels]
    truth = dict(zip(names, population.truth.tolist(), strict=True))
    measured = dict(zip(names, population.measured(), strict=True))
    result, _ = attribute(population.journeys(np.random.default_rng(seed)), MODELS)
    out = {}
    for model in MODELS:
        rows = result[result.model == model]
        credited = dict(zip(rows.channel, rows.conversions, strict=True))
        calibrated = {name: value * factor(name, measured[name], value).factor
                      if name in tested and value > 0 else value
                      for name, value in credited.items()}
        out[model] = (selection_error(credited, truth), selection_error(calibrated, truth))
    return out


def selection_error(figures: dict[str, float], truth: dict[str, float]) -> float:
    return sum(abs(figures.get(c, 0.0) - t) for c, t in truth.items()) / sum(truth.values())


def selection_table(users: int, seeds: int) -> None:
    print(f"\nSelection: true incremental conversions per channel ({users:,} users, mean "
          f"of {seeds} populations); error = sum |figure - truth| / sum truth")
    for label, tested in TESTED.items():
        header = f"{label:32}{'uncalibrated':>14}" + "".join(
            f"{f'calibrated {h:.0%}':>16}" for h in HOLDOUTS)
        print(header)
        print("-" * len(header))
        sums: dict[str, list[float]] = {m: [0.0] * (1 + len(HOLDOUTS)) for m in MODELS}
        for at, holdout in enumerate(HOLDOUTS):
            for seed in range(seeds):
                for model, (raw, calibrated) in selection_errors(
                        users, holdout, tested, 100 + seed).items():
                    if at == len(HOLDOUTS) - 1:
                        sums[model][0] += raw / seeds
                    sums[model][1 + at] += calibrated / seeds
        for model, (raw, *calibrated) in sums.items():
            print(f"{'ours ' + model:32}{raw:14.3f}" + "".join(f"{c:16.3f}"
                                                               for c in calibrated))
        best = min(v[0] for v in sums.values())
        worst = max(v[-1] for v in sums.values())
        print(f"{'(10 % held out) worst calibrated / best uncalibrated':54}"
              f"{worst / best:10.3f}\n")


def coverage_table(users: int, runs: int, alpha: float = 0.05) -> None:
    print(f"Coverage of the calibrated channels' {1 - alpha:.0%} intervals: {runs} "
          f"populations of {users:,} users each")
    names = [c.name for c in SELECTION_CHANNELS]
    header = f"{'held out':10}" + "".join(f"{n:>14}" for n in names) + f"{'all':>10}"
    print(header)
    print("-" * len(header))
    for holdout in HOLDOUTS:
        hits = np.zeros(len(names))
        for run in range(runs):
            population = simulate_selection(users, holdout, 10_000 + run)
            hits += [m.low <= t <= m.high for m, t in zip(
                population.measured(alpha), population.truth, strict=True)]
        share = hits / runs
        se = np.sqrt((1 - alpha) * alpha / (runs * len(names)))
        print(f"{holdout:<10.0%}" + "".join(f"{s:14.3f}" for s in share)
              + f"{share.mean():10.3f}  (nominal {1 - alpha:.2f}, +-{2 * se:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--selection-users", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, default=5, help="populations per selection row")
    parser.add_argument("--coverage-users", type=int, default=200_000)
    parser.add_argument("--coverage-runs", type=int, default=500)
    parser.add_argument("--only-selection", action="store_true",
                        help="skip the association scenarios (and the peers they need)")
    args = parser.parse_args()
    if not args.only_selection:
        association(args.users, args.seed)
    selection_table(args.selection_users, args.seeds)
    coverage_table(args.coverage_users, args.coverage_runs)


def association(users: int, seed: int) -> None:
    """The association scenarios: each model's error against the Shapley truth."""
    args = argparse.Namespace(users=users, seed=seed)
    require_peers()
    errors: dict[str, dict[str, float]] = {}
    for scenario in SCENARIOS:
        frame, truth = simulate(args.users, scenario, args.seed)
        table = from_paths([p.split(PATH_SEPARATOR) for p in frame.path], frame.conversions,
                           frame.non_conversions, frame.conversions)
        result, _ = attribute(table, MODELS)
        for model in MODELS:
            rows = result[result.model == model]
            shares = normalised(dict(zip(rows.channel, rows.conversions, strict=True)))
            errors.setdefault(f"ours {model}", {})[scenario] = error(shares, truth)
        for name, shares in peers(frame).items():
            errors.setdefault(name, {})[scenario] = error(shares, truth)
        print(f"{scenario}: truth " + ", ".join(f"{c} {v:.3f}" for c, v in truth.items()))
    print(f"\nerror = sum over channels of |model share - true share| ({args.users:,} users)")
    header = f"{'model':32}" + "".join(f"{s[:26]:>28}" for s in SCENARIOS)
    print(header)
    print("-" * len(header))
    for name, by_scenario in errors.items():
        print(f"{name:32}" + "".join(f"{by_scenario[s]:28.3f}" for s in SCENARIOS))


if __name__ == "__main__":
    main()
