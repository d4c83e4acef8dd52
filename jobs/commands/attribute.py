"""`seedance attribute`: batch attribution of an events or paths file, computed with a job
config's settings as the stream and the backfill compute (jobs/attribute.py does the work)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.settings.job_config import ConfigError, load_config
from udfs.settings import ComputeSettings

if TYPE_CHECKING:
    import pandas as pd


def add_attribute(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    attr = sub.add_parser("attribute", help="batch attribution of an events or paths file")
    attr.add_argument("--input", required=True, help="CSV or Parquet file")
    attr.add_argument("--format", choices=["events", "paths"], default="events",
                      help="events: user_id,timestamp,channel,campaign,event_type,revenue,"
                           "order_id and optionally arrival (or arrival_ms): when the event "
                           "reached Kafka, epoch ms or ISO 8601 like timestamp; with it an "
                           "event that arrived more than the config's "
                           "journey.correction_days after its timestamp does not count, as "
                           "in the stream and the backfill (empty: unknown, counts; without "
                           "the column every event counts); "
                           "paths: path,conversions,non_conversions,revenue")
    attr.add_argument("--config", help="the streaming job's YAML: compute with its settings "
                      "(journey rules, models, refit period), as the stream and the backfill "
                      "do; default: the shipped jobs/config/streaming.yaml. The flags below "
                      "change single values of it")
    attr.add_argument("--models", help="comma-separated (default: the config's models)")
    attr.add_argument("--out", required=True, help="result file, .csv or .parquet")
    attr.add_argument("--credits", metavar="FILE",
                      help="events input: also write every credit row (.csv or .parquet), "
                           "the rows the stream writes to its credits topic")
    attr.add_argument("--by", choices=["channel", "campaign"], default="channel")
    attr.add_argument("--lookback-days", type=float, help="default: the config's")
    attr.add_argument("--max-touches", type=int, help="default: the config's")
    attr.add_argument("--transform", choices=["none", "collapse", "drop_repeats", "unique"],
                      default="none", help="paths input: path rewrite before the models run")
    attr.add_argument("--half-life-days", type=float, help="time_decay (default: the config's)")
    attr.add_argument("--markov-order", type=int, help="default: the config's")
    attr.add_argument("--shapley-permutations", type=int,
                      help="samples per channel set above 16 channels (default 2000)")
    attr.add_argument("--seed", type=int, help="of the Shapley sampling and of the --ci "
                      "bootstrap (default 0): the same seed, the same file")
    attr.add_argument("--ci", type=float, metavar="LEVEL",
                      help="add bootstrap intervals at this level (e.g. 0.95) to every row: "
                           "conversions, revenue, share and revenue_share each with _low, "
                           "_high and _se, plus resamples and level. Paths: resampled journeys, "
                           "shapley/markov refitted per resample (at most 200). Events: "
                           "resampled conversions, each one's credit rows taken as given "
                           "(so for shapley/markov the refit's own uncertainty is not included)")
    attr.add_argument("--resamples", type=int,
                      help="bootstrap resamples of --ci (default 2000)")
    attr.add_argument("--skip-invalid", action="store_true",
                      help="set invalid rows aside in a rejects file instead of stopping")
    attr.add_argument("--rejects", help="rejects file (default: <out>.rejects.csv)")
    attr.set_defaults(func=cmd_attribute)


def attribute_settings(args: argparse.Namespace) -> ComputeSettings:
    """The job config's settings (`--config`, else the shipped defaults), with what the
    flags change; a flag left out keeps the config's value."""
    settings = load_config(Path(args.config) if args.config else None).computation
    journey = settings.journey
    if args.lookback_days is not None or args.max_touches is not None:
        journey = dataclasses.replace(
            journey, **({"lookback_days": args.lookback_days}
                        if args.lookback_days is not None else {}),
            **({"max_touches": args.max_touches} if args.max_touches is not None else {}))
    params = dataclasses.replace(settings.params, **{
        name: value for name, value in (
            ("half_life_days", args.half_life_days), ("markov_order", args.markov_order),
            ("shapley_permutations", args.shapley_permutations), ("seed", args.seed))
        if value is not None})
    models = tuple(m.strip() for m in args.models.split(",") if m.strip()) if args.models \
        else settings.models
    try:
        return dataclasses.replace(settings, journey=journey, params=params, models=models)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def cmd_attribute(args: argparse.Namespace) -> int:
    from jobs.attribute import AttributeRequest, run

    out = Path(args.out)
    request = AttributeRequest(
        input=Path(args.input), out=out, settings=attribute_settings(args), format=args.format,
        by_campaign=args.by == "campaign", transform=args.transform,
        skip_invalid=args.skip_invalid,
        rejects=Path(args.rejects) if args.rejects else out.with_name(out.stem + ".rejects.csv"),
        credits_out=Path(args.credits) if args.credits else None, ci=args.ci,
        resamples=args.resamples, seed=args.seed or 0)
    result, stats = run(request)
    print(f"{stats['journeys']:,} journeys, {stats['touches']:,} touches, "
          f"{stats['conversions']:,.0f} conversions; loaded in {stats['load_s']:.1f}s, "
          f"models in {stats['models_s']:.1f}s")
    if request.credits_out is not None:
        print(f"credit rows written to {request.credits_out}")
    if stats.get("late_events"):
        print(f"{stats['late_events']:,} events reached Kafka more than "
              "journey.correction_days after they happened (their arrival): not counted, as "
              "in the stream")
    if stats["rejected_rows"]:
        print(f"{stats['rejected_rows']} invalid rows set aside in {request.rejects}")
    for model, info in stats["info"].items():  # type: ignore[attr-defined]
        if info.removal_effects:
            effects = ", ".join(f"{c} {e:.3f}" for c, e in info.removal_effects.items())
            print(f"{model} removal effects: {effects}")
        if info.sampled_sets:
            print(f"{model}: {info.sampled_sets} channel sets above 16 channels sampled; "
                  f"largest standard error {info.max_standard_error:.2e}")
    if request.ci is not None:
        print(_intervals_line(result, request.format == "paths", request.ci, request.seed,
                              float(stats["intervals_s"])))  # type: ignore[arg-type]
    print(f"{len(result)} rows written to {out}")
    return 0


def _intervals_line(result: pd.DataFrame, paths: bool, level: float, seed: int,
                    seconds: float) -> str:
    """The intervals' level, resamples (per model where they differ) and time taken."""
    used = result.groupby("model", sort=False).resamples.first().astype(int)
    counts = ", ".join(f"{n:,}" + (f" ({', '.join(used.index[used == n])})"
                                   if used.nunique() > 1 else "")
                       for n in sorted(used.unique(), reverse=True)) or "no"
    over = "journeys, shapley/markov refitted per resample" if paths \
        else "conversions, their credit rows as given"
    line = (f"intervals at {100 * level:g} % (seed {seed}): {counts} bootstrap resamples "
            f"over {over}; {seconds:.1f}s")
    refitted = sorted({"shapley", "markov"} & set(used.index))
    if paths and refitted:  # measured by bench/interval_coverage.py (docs/attribution.md)
        line += (f"\n  {' and '.join(refitted)}: refitted percentile intervals are a little "
                 f"narrow; at 95 % they held the truth 93-94 % of the time in simulation")
    return line
