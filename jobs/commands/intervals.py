"""`seedance intervals`: how sure each channel's credit is, per model and day, from the
warehouse's credit rows (attribution_credits), stored for the dashboard as credit_intervals.

One day at a time: a day's credit rows are read, bootstrapped over that day's orders
(udfs.attribution.intervals.credit_intervals_of_rows: each order's credit rows as given, so for
shapley and markov the refit's own noise is not in the interval) and upserted, so memory is
bounded by the largest day and a rerun replaces the rows. Each day's resamples come from
the seed and the day: a day gets the same rows whether it is run alone or in a range.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from jobs.commands.common import CONFIG_HELP, CliError, job_config

if TYPE_CHECKING:
    import pandas as pd

TOP_CHANNELS = 5  # per model in the summary


def add_intervals(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("intervals", help="bootstrap intervals of each channel's credit per "
                                         "model and day, from the warehouse's credit rows")
    p.add_argument("--config", help=CONFIG_HELP + "; its warehouse.url is read and written")
    p.add_argument("--from", dest="first", metavar="DAY",
                   help="first day, YYYY-MM-DD (default: the oldest day with credits)")
    p.add_argument("--to", dest="last", metavar="DAY",
                   help="last day, YYYY-MM-DD (default: the newest day with credits)")
    p.add_argument("--model", help="comma-separated models (default: every model with credits)")
    p.add_argument("--level", type=float, default=0.95, help="of the intervals (default 0.95)")
    p.add_argument("--resamples", type=int, default=1000,
                   help="bootstrap resamples per day (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="of the bootstrap (default 0): the "
                                                       "same seed, the same rows")
    p.set_defaults(func=cmd_intervals)


def day_seed(seed: int, day: str) -> int:
    """The bootstrap seed of one day: from the run's seed and the day alone."""
    import numpy as np

    from udfs.periods import parse_day

    state = np.random.SeedSequence([seed, parse_day(day).toordinal()]).generate_state(2)
    return int(state[0]) << 32 | int(state[1])


def _check(args: argparse.Namespace) -> tuple[str, ...]:
    from udfs.attribution import validate_models
    from udfs.periods import parse_day

    for flag, day in (("--from", args.first), ("--to", args.last)):
        if day is not None:
            try:
                parse_day(day)
            except ValueError as error:
                raise CliError(f"{flag}: {error}") from None
    if args.first and args.last and args.last < args.first:
        raise CliError(f"--to {args.last} is before --from {args.first}")
    if not 0 < args.level < 1:
        raise CliError(f"--level must lie strictly between 0 and 1 (e.g. 0.95), "
                       f"got {args.level:g}")
    if args.resamples < 2:
        raise CliError(f"--resamples must be at least 2, got {args.resamples}")
    models = tuple(m.strip() for m in (args.model or "").split(",") if m.strip())
    return validate_models(models) if models else ()


def _summary(day: str, intervals: pd.DataFrame, level: float) -> list[str]:
    lines = [f"{day}: share of each model's credited conversions, {100 * level:g} % interval"]
    for model, rows in intervals.groupby("model", sort=True):
        top = rows.sort_values(["share", "channel"], ascending=[False, True]) \
            .head(TOP_CHANNELS)
        cells = ", ".join(f"{r.channel} {100 * r.share:.1f} % [{100 * r.share_low:.1f}, "
                          f"{100 * r.share_high:.1f}]" for r in top.itertuples())
        more = len(rows) - len(top)
        lines.append(f"  {model}: {cells}" + (f" (+{more} more)" if more > 0 else ""))
    return lines


def cmd_intervals(args: argparse.Namespace) -> int:
    from pipelines.store.intervals import credit_days, credit_rows_of_day, store_intervals
    from pipelines.store.warehouse import Warehouse, redacted_url
    from udfs.attribution import credit_intervals_of_rows

    models = _check(args)
    config = job_config(args)
    started = time.perf_counter()
    stored, credit_rows = 0, 0
    with Warehouse(config.warehouse.url) as warehouse:
        days = credit_days(warehouse, args.first, args.last, models)
        if not days:
            span = f"from {args.first or 'the start'} to {args.last or 'the end'}"
            print(f"no attribution credits {span}"
                  + (f" for {', '.join(models)}" if models else "")
                  + f" in {redacted_url(warehouse.url)}: nothing to do (credits arrive "
                    "with `seedance load` or a backfill)")
            return 0
        print(f"credit intervals at {100 * args.level:g} %, {args.resamples:,} resamples "
              f"(seed {args.seed}), {len(days)} days from {days[0]} to {days[-1]}")
        for day in days:
            began = time.perf_counter()
            credits = credit_rows_of_day(warehouse, day, models)
            intervals = credit_intervals_of_rows(credits, args.level, args.resamples,
                                                 day_seed(args.seed, day),
                                                 period="conversion_date")
            stored += store_intervals(warehouse, intervals, args.level, args.seed)
            credit_rows += len(credits)
            print(f"  {day}: {credits.order_id.nunique():,} orders, {len(credits):,} credit "
                  f"rows, {intervals.model.nunique()} models -> {len(intervals)} rows "
                  f"({time.perf_counter() - began:.1f}s)")
    for line in _summary(days[-1], intervals, args.level):
        print(line)
    print(f"{stored:,} rows written to credit_intervals from {credit_rows:,} credit rows "
          f"in {time.perf_counter() - started:.1f}s")
    return 0
