"""How often do the credit intervals hold the truth? Coverage of `seedance attribute --ci`.

Journeys are simulated from a known model (three channels, paths of one to three touches,
a conversion probability set by the last channel; a loyal half of the users sticks to one
channel). Each dataset has a Poisson number of journeys around `--journeys`; its 95 %
interval of each channel's credited conversions should hold the expected total -- the
model's credit on the expected counts of every path -- in 95 % of datasets. Printed per
model: the coverage of each channel over `--datasets` datasets, at the default resamples
(2,000 for the per-conversion models, 200 refits for shapley and markov), side by side.

    .venv/bin/python bench/interval_coverage.py [--datasets 300] [--journeys 3000]
"""

from __future__ import annotations

import argparse
import sys
import time
from itertools import product
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from udfs.attribution import (
    attribute,  # noqa: E402
    credit_intervals,  # noqa: E402
)
from udfs.journeys import JourneyTable, from_paths  # noqa: E402

CHANNELS = ("A", "B", "C")
TOUCH_P = np.array([0.5, 0.3, 0.2])
CONVERT_P = np.array([0.3, 0.12, 0.06])
LENGTH_P = {1: 0.4, 2: 0.35, 3: 0.25}
LOYAL_P = 0.5
MODELS = ("last_click", "linear", "shapley", "markov")


def enumerated_paths() -> tuple[list[tuple[str, ...]], np.ndarray, np.ndarray]:
    """Every possible path, its probability and its conversion probability."""
    paths, probability, convert = [], [], []
    for length, p_length in LENGTH_P.items():
        for codes in product(range(3), repeat=length):
            independent = np.prod(TOUCH_P[list(codes)])
            loyal = TOUCH_P[codes[0]] if len(set(codes)) == 1 else 0.0
            paths.append(tuple(CHANNELS[c] for c in codes))
            probability.append(p_length * (LOYAL_P * loyal + (1 - LOYAL_P) * independent))
            convert.append(CONVERT_P[codes[-1]])
    return paths, np.array(probability), np.array(convert)


def dataset(rng: np.random.Generator, paths: list[tuple[str, ...]], p: np.ndarray,
            convert: np.ndarray, journeys: float) -> JourneyTable:
    converted = rng.poisson(journeys * p * convert)
    counts = converted + rng.poisson(journeys * p * (1 - convert))
    return from_paths(paths, converted, counts - converted, 50.0 * converted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", type=int, default=300)
    parser.add_argument("--journeys", type=float, default=3000.0)
    args = parser.parse_args()
    paths, p, convert = enumerated_paths()
    expected = from_paths(paths, args.journeys * p * convert,
                          args.journeys * p * (1 - convert), 50.0 * args.journeys * p * convert)
    truth_frame, _ = attribute(expected, MODELS)
    truth = {model: truth_frame[truth_frame.model == model].set_index("channel")
             .conversions.reindex(list(CHANNELS)).to_numpy() for model in MODELS}
    rng = np.random.default_rng(2024)
    hits = {model: np.zeros(len(CHANNELS)) for model in MODELS}
    started = time.monotonic()
    for seed in range(args.datasets):
        result = credit_intervals(dataset(rng, paths, p, convert, args.journeys), MODELS,
                                  seed=seed)
        for model in MODELS:
            rows = result[result.model == model].set_index("channel").reindex(list(CHANNELS))
            hits[model] += (rows.conversions_low.to_numpy() <= truth[model]) \
                & (truth[model] <= rows.conversions_high.to_numpy())
        if (seed + 1) % 50 == 0:
            print(f"  {seed + 1}/{args.datasets} datasets, {time.monotonic() - started:.0f}s",
                  file=sys.stderr)
    print(f"coverage of 95 % intervals of credited conversions, {args.datasets} datasets of "
          f"~{args.journeys:,.0f} journeys (nominal 95.0 %; the binomial noise of the "
          f"estimate is ±{196 * np.sqrt(0.95 * 0.05 / args.datasets):.1f} points)")
    print(f"{'model':<12}" + "".join(f"{c:>9}" for c in CHANNELS) + f"{'mean':>9}")
    for model in MODELS:
        share = 100 * hits[model] / args.datasets
        print(f"{model:<12}" + "".join(f"{v:>8.1f}%" for v in share) + f"{share.mean():>8.1f}%")


if __name__ == "__main__":
    main()
