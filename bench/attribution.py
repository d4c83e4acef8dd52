"""Attribution speed: every model of ours end to end, side by side with the peers.

Data: deterministic synthetic journeys (1 to 8 touches) over 12 and over 20 channels,
written as a path-summary CSV (path, conversions, non_conversions, revenue; one row per
journey). Ours: `seedance attribute` on that file (load + journeys + model + write).
Peers on the same file, end to end too (read it, sum rows per path, run the model):
`mta` 0.0.9 Shapley (exact, grows as n*3^n) and `channelattribution` 2.2.5 Markov
(simulated). time_decay needs timestamps, which path
summaries lack: it is timed on the same journeys in memory with synthetic touch times.

    .venv/bin/python bench/attribution.py [--journeys 1000000] [--channels 12,20]
Install the peers with `.venv/bin/pip install -e '.[dev,bench]'`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import require_peers  # noqa: E402

from jobs.attribute import AttributeRequest, run  # noqa: E402
from pipelines.settings.job_config import load_config  # noqa: E402
from udfs.attribution import MODELS, touch_weights  # noqa: E402
from udfs.journeys import PATH_SEPARATOR, from_paths  # noqa: E402
from udfs.periods import DAY_MS  # noqa: E402
from udfs.settings import ComputeSettings  # noqa: E402

SETTINGS = load_config().computation  # the shipped job config's, as `seedance attribute`


def models_of(models: tuple[str, ...]) -> ComputeSettings:
    return replace(SETTINGS, models=models)

# every model but time_decay, which needs touch times (path summaries have none)
OUR_MODELS = tuple(m for m in MODELS if m != "time_decay")


def synthetic_paths(journeys: int, channels: int, seed: int = 42) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    names = np.array([f"ch{c:02d}" for c in range(channels)])
    popularity = rng.dirichlet(np.full(channels, 0.8))
    effect = rng.normal(0.0, 0.6, channels)
    lengths = np.minimum(rng.geometric(0.35, journeys), 8)
    codes = rng.choice(channels, size=int(lengths.sum()), p=popularity)
    journey = np.repeat(np.arange(journeys), lengths)
    score = np.bincount(journey, weights=effect[codes], minlength=journeys) / np.sqrt(lengths)
    converted = rng.random(journeys) < 1 / (1 + np.exp(-(score - 2.0)))
    offsets = np.r_[0, np.cumsum(lengths)]
    words = names[codes]
    paths = [PATH_SEPARATOR.join(words[a:b])
             for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    return pd.DataFrame({"path": paths, "conversions": converted.astype(int),
                         "non_conversions": (~converted).astype(int),
                         "revenue": np.where(converted, rng.lognormal(4, 0.5, journeys), 0.0)})


def timed(fn):
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        result = fn()
    return time.perf_counter() - started, result


def ours(csv: Path, out_dir: Path) -> tuple[dict[str, float], dict[str, float]]:
    """End-to-end seconds per model (file to result), and the model step alone."""
    times, model_only = {}, {}
    base = AttributeRequest(input=csv, out=out_dir / "out.parquet", settings=SETTINGS,
                            format="paths")
    for model in OUR_MODELS:
        times[model], (_, stats) = timed(
            lambda m=model: run(replace(base, settings=models_of((m,)))))
        model_only[model] = float(stats["models_s"])
    times["all models, one run"], (_, stats) = timed(
        lambda: run(replace(base, settings=models_of(OUR_MODELS))))
    model_only["all models, one run"] = float(stats["models_s"])
    return times, model_only


def our_time_decay(frame: pd.DataFrame) -> float:
    table = from_paths([p.split(PATH_SEPARATOR) for p in frame.path], frame.conversions,
                       frame.non_conversions, frame.revenue)
    rng = np.random.default_rng(1)
    table = replace(table, has_timestamps=True,
                    touch_ts=rng.integers(0, 30 * DAY_MS, len(table.touch_channel)),
                    conversion_ts=np.full(table.size, 30 * DAY_MS))
    seconds, _ = timed(lambda: touch_weights(table, "time_decay"))
    return seconds


def peer_frame(csv: Path) -> pd.DataFrame:
    """What a peer's user does first: read the same file and sum rows per path."""
    frame = pd.read_csv(csv, keep_default_na=False)
    grouped = frame.groupby("path", as_index=False).agg(
        total_conversions=("conversions", "sum"), total_null=("non_conversions", "sum"),
        total_conversion_value=("revenue", "sum"))
    return grouped


def mta_shapley(csv: Path) -> float:
    from mta import MTA

    def go() -> object:
        data = peer_frame(csv)[["path", "total_conversions", "total_null"]]
        return MTA(data=data, allow_loops=True).shapley()

    seconds, _ = timed(go)
    return seconds


def ca_markov(csv: Path) -> float:
    import ChannelAttribution as ca

    seconds, _ = timed(lambda: ca.markov_model(
        peer_frame(csv), "path", "total_conversions", var_null="total_null",
        var_value="total_conversion_value", verbose=0, flg_pro=False))
    return seconds


def removal_effects_side_by_side(csv: Path, workdir: Path) -> None:
    """Exact removal effects and credits (ours) beside channelattribution's simulated ones."""
    import ChannelAttribution as ca

    with contextlib.redirect_stdout(io.StringIO()):
        peer = ca.markov_model(peer_frame(csv), "path", "total_conversions",
                               var_null="total_null", out_more=True, verbose=0,
                               flg_pro=False)
        result, stats = run(AttributeRequest(input=csv, out=workdir / "re.parquet",
                                             format="paths", settings=models_of(("markov",))))
    ours_re = stats["info"]["markov"].removal_effects  # type: ignore[index]
    peer_re = dict(zip(peer["removal_effects"].channel_name,
                       peer["removal_effects"].iloc[:, 1], strict=True))
    peer_credit = dict(zip(peer["result"].channel_name, peer["result"].total_conversions,
                           strict=True))
    ours_credit = dict(zip(result.channel, result.conversions, strict=True))
    total = sum(ours_credit.values())
    re_sum = sum(ours_re.values())
    print(f"  {'channel':8} {'RE exact':>9} {'RE peer':>8}   {'credit ours':>11} "
          f"{'global split':>12} {'peer credit':>11}")
    for channel in sorted(ours_re):
        print(f"  {channel:8} {ours_re[channel]:9.3f} {peer_re.get(channel, 0):8.3f}   "
              f"{ours_credit.get(channel, 0):11.0f} {ours_re[channel] / re_sum * total:12.0f} "
              f"{peer_credit.get(channel, 0):11.0f}")
    print("  (ours: each conversion split over its own journey's channels by exact RE;"
          " global split: all conversions by RE / sum RE, as peers do)")


def restrict(frame: pd.DataFrame, keep: int) -> pd.DataFrame:
    """Journeys that only use the `keep` most frequent channels."""
    counts = frame.path.str.split(PATH_SEPARATOR).explode().value_counts()
    allowed = set(counts.index[:keep])
    mask = frame.path.str.split(PATH_SEPARATOR).map(lambda steps: set(steps) <= allowed)
    return frame[mask]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--journeys", type=int, default=1_000_000)
    parser.add_argument("--channels", default="12,20")
    parser.add_argument("--mta-max-channels", type=int, default=12,
                        help="largest channel count mta's n*3^n Shapley is run on")
    args = parser.parse_args()
    require_peers()
    workdir = Path(tempfile.mkdtemp(prefix="seedance-bench-"))
    for channels in (int(c) for c in args.channels.split(",")):
        frame = synthetic_paths(args.journeys, channels)
        csv = workdir / f"paths-{channels}.csv"
        frame.to_csv(csv, index=False)
        print(f"\n== {args.journeys:,} journeys over {channels} channels "
              f"({frame.conversions.sum():,} conversions, {frame.path.nunique():,} distinct "
              f"paths)")
        times, model_only = ours(csv, workdir)
        times["time_decay (in memory)"] = model_only["time_decay (in memory)"] = \
            our_time_decay(frame)
        print(f"  {'':33} {'end to end':>10} {'model only':>11}")
        for model, seconds in times.items():
            print(f"  ours {model:28} {seconds:8.2f} s {model_only[model]:9.2f} s")
        separate = sum(v for k, v in times.items() if k != "all models, one run")
        print(f"  ours, 8 separate runs, total      {separate:8.2f} s")
        removal_effects_side_by_side(csv, workdir)
        ca_s = ca_markov(csv)
        print(f"  channelattribution markov         {ca_s:8.2f} s   "
              f"ratio ours/peer {times['markov'] / ca_s:.2f} (end to end)")
        subset_csv, note = csv, ""
        if channels > args.mta_max_channels:
            subset = restrict(frame, args.mta_max_channels)
            note = (f" (on the {len(subset):,} journeys using only the "
                    f"{args.mta_max_channels} most frequent channels: "
                    f"n*3^n is out of reach at {channels})")
            subset_csv = workdir / f"paths-{channels}-subset.csv"
            subset.to_csv(subset_csv, index=False)
            ours_subset, _ = timed(lambda p=subset_csv: run(AttributeRequest(
                input=p, out=workdir / "o.parquet", format="paths",
                settings=models_of(("shapley",)))))
        else:
            ours_subset = times["shapley"]
        mta_s = mta_shapley(subset_csv)
        print(f"  mta shapley                       {mta_s:8.2f} s{note}")
        print(f"  ours shapley on the same data     {ours_subset:8.2f} s   "
              f"speed-up {mta_s / ours_subset:.1f}x")


if __name__ == "__main__":
    main()
