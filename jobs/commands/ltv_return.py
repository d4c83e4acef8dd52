"""`seedance ltv return`: the warehouse's LTV refresh (pipelines/ltv/report.py) -- every
customer scored into customer_ltv, the LTV-based return per attribution model, channel and
campaign into ltv_return, and with --calibration-weeks the holdout check into
ltv_calibration -- then the channels' return printed beside their first-order ROI
(docs/ltv-return.md)."""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

from jobs.commands.common import CliError, job_config, positive_int


def add_return(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "return", help="score the warehouse's customers (customer_ltv) and compute the "
                       "LTV-based return per model, channel and campaign (ltv_return)")
    p.add_argument("--warehouse", metavar="URL", required=True,
                   help="sqlite:///path or postgresql://... (its credits, order costs and "
                        "spend are read; customer_ltv and ltv_return replaced)")
    p.add_argument("--horizon-days", type=positive_int, default=365,
                   help="predicted value over this many days from acquisition (default 365)")
    p.add_argument("--model", metavar="JSON",
                   help="score with this model (`seedance ltv fit --out`) instead of fitting "
                        "one on the warehouse's customers")
    p.add_argument("--as-of", metavar="DAY",
                   help="YYYY-MM-DD (default: the last order's day; an order dated after "
                        "today, or far after the rest, is then an error)")
    p.add_argument("--rounds", type=int, default=100,
                   help="bootstrap refits behind the intervals (default 100; 0: none)")
    p.add_argument("--level", type=float, default=0.9, help="of the intervals (default 0.9)")
    p.add_argument("--seed", type=int, default=0, help="of the bootstrap (default 0)")
    p.add_argument("--calibration-weeks", type=float,
                   help="also check the purchase model on a holdout after this many weeks "
                        "(ltv_calibration: the dashboard's calibration chart)")
    p.add_argument("--holdout-weeks", type=float,
                   help="the holdout's length with --calibration-weeks (default: to the end)")
    p.add_argument("--config", help="the job config whose roi: allocation weights the ROI "
                                    "job used (stage weights, or LTV segment weights and "
                                    "model): acquisition cost is split alike (default: the "
                                    "shipped one)")
    p.add_argument("--attribution-model", default="last_click",
                   help="whose channels to print (default last_click; all are stored)")
    p.set_defaults(func=cmd_return)


def clock_day() -> float:
    """Today as a day number (days since 1970-01-01 UTC), by the run's clock."""
    return time.time() / 86_400


def read_model(path: str) -> Any:
    """The LtvModel of a `seedance ltv fit --out` file; a CliError naming --model if not."""
    from pathlib import Path

    from udfs.ltv import LtvModel

    try:
        return LtvModel.from_json(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CliError(f"--model {path}: file not found (`seedance ltv fit` writes "
                       "one)") from None
    except (ValueError, UnicodeDecodeError, IsADirectoryError) as error:
        raise CliError(f"--model {path}: {error}") from None


def cmd_return(args: argparse.Namespace) -> int:
    from pipelines.ltv.report import refresh_calibration, refresh_ltv
    from pipelines.store.ltv import ltv_return_frame
    from pipelines.store.warehouse import Warehouse
    from udfs.periods import day_number

    if args.rounds < 0:
        raise CliError(f"--rounds must be 0 or more, got {args.rounds}")
    if not 0 < args.level < 1:
        raise CliError(f"--level must lie between 0 and 1, got {args.level:g}")
    model = read_model(args.model) if args.model else None
    settings = job_config(args).computation
    # without --as-of the last order's day is the as-of day: a stray one is refused
    today = None if args.as_of is not None else clock_day()
    with Warehouse(args.warehouse, create=False) as warehouse:
        try:
            refresh = refresh_ltv(warehouse, args.horizon_days, model, args.rounds,
                                  args.as_of, level=args.level, seed=args.seed,
                                  stage_weights=settings.stage_weights,
                                  segment_weights=settings.by_segment,
                                  segmenter=settings.segmenter, today=today)
            calibration = None
            if args.calibration_weeks is not None:
                calibration = refresh_calibration(
                    warehouse, args.calibration_weeks, args.holdout_weeks,
                    attribution_model=args.attribution_model,
                    period_days=refresh.model.period_days, today=today,
                    last_day=day_number(refresh.as_of_day))
        except ValueError as error:
            raise CliError(str(error)) from None
        table = ltv_return_frame(warehouse)
    for line in report_lines(refresh, table, args.attribution_model, args.level):
        print(line)
    for line in refresh.warnings + (calibration.warnings if calibration else []):
        print(f"warning: {line}", file=sys.stderr)
    return 0


def report_lines(refresh: Any, table: Any, attribution_model: str, level: float) -> list[str]:
    """What a refresh did and the channels' rows of the ltv_return it wrote (`table`)."""
    lines = [f"{refresh.customers:,} customers scored as of {refresh.as_of_day} over "
             f"{refresh.horizon_days} days ({'fitted' if refresh.fitted else 'given'} model"
             f"{', not an estimate: see the warnings' if refresh.warnings else ''}, "
             f"{refresh.rounds} bootstrap rounds); segments: "
             + ", ".join(f"{name} {count:,}" for name, count in refresh.segments.items())]
    shown = table[(table.model == attribution_model) & (table.dimension == "channel")]
    if shown.empty:
        return [*lines, f"no channel acquired a customer under {attribution_model}; models "
                        f"in ltv_return: {', '.join(sorted(set(table.model))) or 'none'}"]
    return [*lines, "", f"LTV-based return by channel under {attribution_model} "
                        f"({refresh.currency}, {100 * level:g} % intervals):",
            *channel_lines(shown)]


def _ratio(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{float(value):.2f}"


def count_text(value: Any) -> str:
    """Customers as a whole number (a fractional credit, under a multi-touch model, with
    one decimal), as the dashboard shows them."""
    number = float(value)
    return f"{round(number):,}" if abs(number - round(number)) < 1e-6 else f"{number:,.1f}"


def channel_lines(rows: Any) -> list[str]:
    """The channels' rows of ltv_return as a table, and the totals they add up to; a row
    whose acquisition cost is compute alone (`compute_only`, pipelines.store.ltv) shows
    "compute only" for its ROIs."""
    from udfs.ratios import COMPUTE_ONLY

    lines = [f"{'channel':<18}{'customers':>11}{'acq. cost':>12}{'CAC':>9}"
             f"{'1st-order ROI':>15}{'LTV ROI':>14}  {'interval':<15}{'payback':>9}"]
    marked = False
    for r in rows.itertuples(index=False):
        interval = f"[{_ratio(r.ltv_roi_low)}, {_ratio(r.ltv_roi_high)}]"
        first_roi, ltv_roi = _ratio(r.first_order_roi), _ratio(r.ltv_roi)
        if getattr(r, "compute_only", False):
            first_roi = ltv_roi = COMPUTE_ONLY
            interval, marked = "", True
        payback = "-" if r.payback_days is None or (isinstance(r.payback_days, float)
                                                     and math.isnan(r.payback_days)) \
            else f"{int(r.payback_days)} d"
        lines.append(f"{r.key:<18}{count_text(r.customers):>11}"
                     f"{float(r.acquisition_cost):>12,.2f}{_ratio(r.cac):>9}{first_roi:>15}"
                     f"{ltv_roi:>14}  {interval:<15}{payback:>9}")
    cost = float(rows.acquisition_cost.astype(float).sum())
    lines.append(f"{'all channels':<18}{count_text(rows.customers.astype(float).sum()):>11}"
                 f"{cost:>12,.2f}   first-order revenue "
                 f"{float(rows.first_order_revenue.astype(float).sum()):,.2f}, predicted value "
                 f"{float(rows.predicted_value.astype(float).sum()):,.2f}")
    if marked:
        lines.append(f"{COMPUTE_ONLY}: the channel's only cost is compute, no ad spend; its "
                     "ROIs are left out")
    return lines
