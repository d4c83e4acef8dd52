"""`seedance experiments`: the strategy table of every experiment over a window, from the
warehouse (exposures and exposed users' orders from the experiments job, each order's
allocated cost from the ROI job), stored for the dashboard as experiment_results."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from jobs.commands.common import CONFIG_HELP, CliError, job_config

if TYPE_CHECKING:
    import pandas as pd

    from udfs.incrementality import Measure


def add_experiments(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("experiments", help="experiments: ROI per variant with intervals, "
                                           "significance vs control, marginal cost, SRM")
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--day", help="the window's last day, YYYY-MM-DD (default: the newest day "
                                 "with a first exposure)")
    p.add_argument("--window-days", type=int, help="default: experiments.window_days")
    p.add_argument("--alpha", type=float, help="significance level (default: experiments.alpha)")
    p.add_argument("--control", help="the control variant (default: "
                                     "experiments.control_variant)")
    p.add_argument("--flag", help="one experiment's feature flag only")
    p.add_argument("--min-converters", type=int,
                   help="an arm with fewer converting users gets no interval and no verdict "
                        "(default: experiments.min_converters)")
    p.add_argument("--seed", type=int, default=0, help="of the bootstrap, where one is needed")
    p.set_defaults(func=cmd_experiments)


def cmd_experiments(args: argparse.Namespace) -> int:
    from pipelines.store.experiments import experiment_inputs, store_results
    from pipelines.store.warehouse import Warehouse, redacted_url
    from udfs.experiments import ExperimentsFailed, strategy_table, window_statistics
    from udfs.periods import parse_day

    config = job_config(args)
    settings = config.experiments
    window_days = int(settings.window_days) if args.window_days is None else args.window_days
    alpha = settings.alpha if args.alpha is None else args.alpha
    if not 0 < alpha < 1:
        raise CliError(f"--alpha must be between 0 and 1, got {alpha}")
    min_converters = settings.min_converters if args.min_converters is None \
        else args.min_converters
    if min_converters < 2:
        raise CliError(f"--min-converters must be at least 2, got {min_converters}")
    if window_days < 1:
        raise CliError(f"--window-days must be at least 1, got {window_days}")
    cost_model = config.experiment_cost_model
    with Warehouse(config.warehouse.url) as warehouse:
        inputs = experiment_inputs(warehouse, cost_model, args.flag,
                                   holdouts=config.incrementality.holdout_prefix)
        day = args.day or inputs.last_day
        if day is None:
            print(f"{redacted_url(warehouse.url)} holds no experiments yet: run the "
                  "experiments job (`seedance run --job experiments`), then `seedance load`")
            return 0
        try:
            parse_day(day)
        except ValueError as error:
            raise CliError(f"--day: {error}") from None
        failed: ExperimentsFailed | None = None
        try:
            stats = window_statistics(
                inputs.exposures, inputs.conversions, day, window_days,
                # '' (none named): the sorted-first variant
                control=(args.control or settings.control_variant) or None,
                alpha=alpha, seed=args.seed, min_converters=min_converters)
        except ExperimentsFailed as error:  # the others' results still stand
            failed, stats = error, error.computed
        stored = store_results(warehouse, stats)
    print(f"ROI = revenue / (ad spend + GPU compute) of each variant's exposed users, costs "
          f"allocated by {cost_model}; intervals at {100 * (1 - alpha):g} %")
    print(strategy_table(stats))
    if inputs.uncosted:
        print(f"note: {inputs.uncosted} exposed users' orders have no allocated cost yet (the "
              "ROI job has not reported their day): counted with their revenue alone")
    print(f"{stored} rows written to experiment_results")
    if failed is not None:
        for flag, reason in failed.failures.items():
            print(f"seedance: error: experiment {flag}: {reason}", file=sys.stderr)
        return 2
    return 0


def add_incrementality(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("incrementality",
                       help="lift tests (channel holdouts, studies from a file) and ROI per "
                            "channel calibrated by them beside uncalibrated "
                            "(docs/incrementality.md)")
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--studies", help="a CSV of lift studies from elsewhere (default: "
                                     "incrementality.studies)")
    p.add_argument("--first", help="the ROI window's first day, YYYY-MM-DD (default: the "
                                   "first day of roi_daily)")
    p.add_argument("--last", help="... and its last (default: the last day of roi_daily)")
    p.add_argument("--model", help="the model whose table is printed (default: "
                                   "experiments.cost_model's); every model's is stored")
    p.add_argument("--alpha", type=float, help="1 - the intervals' level (default: "
                                               "experiments.alpha)")
    p.set_defaults(func=cmd_incrementality)


def cmd_incrementality(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pipelines.sources.lift_studies import read_lift_studies
    from pipelines.store import incrementality as store
    from pipelines.store.warehouse import Warehouse, redacted_url
    from udfs.incrementality import Measure
    from udfs.periods import parse_day

    config = job_config(args)
    settings = config.incrementality
    alpha = config.experiments.alpha if args.alpha is None else args.alpha
    if not 0 < alpha < 1:
        raise CliError(f"--alpha must be between 0 and 1, got {alpha}")
    for name in ("first", "last"):
        if getattr(args, name):
            try:
                parse_day(getattr(args, name))
            except ValueError as error:
                raise CliError(f"--{name}: {error}") from None
    studies_file = args.studies or settings.studies
    measures: list[Measure] = []
    if studies_file:
        for study in read_lift_studies(Path(studies_file)):
            measures.append(Measure(
                f"study:{study.channel}:{study.start}:{study.source}", study.channel,
                study.source or "study", study.start, study.end, None, None,
                study.conversions, study.revenue))
    model = args.model or config.experiment_cost_model
    with Warehouse(config.warehouse.url) as warehouse:
        result = store.refresh(warehouse, measures, settings.holdout_prefix,
                               settings.exposed_variant, settings.held_out_variant, alpha,
                               config.roi.min_cost, config.roi.currency,
                               config.experiment_cost_model, args.first, args.last)
        if isinstance(result, str):
            print(f"{redacted_url(warehouse.url)}: {result}")
            return 0
    print(incrementality_report(result.measures, result.calibrated, model, result.first,
                                result.last, alpha, result.savings))
    for reason in result.skipped:
        print(f"not measured: {reason}")
    return 0


def incrementality_report(measures: list[Measure], calibrated: pd.DataFrame, model: str,
                          first: str, last: str, alpha: float,
                          savings: dict[str, float] | None = None) -> str:
    """The lift tests, then the model's ROI per channel calibrated beside uncalibrated."""
    level = f"{100 * (1 - alpha):g} %"
    lines = [f"Lift tests (incremental in the exposed users, {level} intervals)",
             f"{'channel':16}{'test':24}{'days':24}{'exposed':>9}{'held out':>9}"
             f"{'conversions':>28}{'revenue':>34}{'spared':>12}"]
    for m in sorted(measures, key=lambda m: (m.channel, m.end_day)):
        revenue = "-" if m.revenue is None else _figure(m.revenue, 2)
        spared = (savings or {}).get(m.test_id)
        lines.append(f"{m.channel:16}{m.test_id[:23]:24}{m.start_day + '..' + m.end_day:24}"
                     f"{'-' if m.exposed_users is None else m.exposed_users:>9}"
                     f"{'-' if m.held_out_users is None else m.held_out_users:>9}"
                     f"{_figure(m.conversions, 1):>28}{revenue:>34}"
                     f"{'-' if spared is None else f'{spared:,.2f}':>12}")
    frame = calibrated[calibrated.model == model]
    lines.append("(spared: the ad spend the held-out users did not cost, at the channel's "
                 "spend per exposed user)")
    lines += ["", f"ROI per channel under {model}, {first}..{last}: uncalibrated beside "
                  f"calibrated by the lift tests ({level}); cost = ad spend + compute",
              f"{'channel':16}{'revenue':>12}{'calibrated':>12}{'ROI':>14}"
              f"{'calibrated ROI':>28}{'ROAS':>8}{'calibrated':>11}{'factor':>8}{'age':>6}"]
    for _, row in frame.sort_values("channel").iterrows():
        paid = row.ad_spend > 0
        ratio = "-" if row.roi != row.roi else f"{row.roi:.2f}" if paid else "compute only"
        calibrated_roi = "-" if row.calibrated_roi != row.calibrated_roi or not paid else \
            f"{row.calibrated_roi:.2f} [{row.calibrated_roi_low:.2f}, " \
            f"{row.calibrated_roi_high:.2f}]"
        factor = f"{row.revenue_factor:.2f}" if row.test_id else "-"
        age = "-" if row.age_days != row.age_days else f"{int(row.age_days)}d"
        flip = "  <- below 1 once calibrated" if paid and row.roi == row.roi and \
            row.roi >= 1 > row.calibrated_roi else ""
        roas = f"{row.roas:8.2f}{row.calibrated_roas:11.2f}" if paid else f"{'-':>8}{'-':>11}"
        lines.append(f"{row.channel:16}{row.revenue:12,.2f}{row.calibrated_revenue:12,.2f}"
                     f"{ratio:>14}{calibrated_roi:>28}{roas}{factor:>8}{age:>6}{flip}")
    return "\n".join(lines)


def _figure(figure: tuple[float, float, float], digits: int) -> str:
    value, low, high = figure
    return f"{value:,.{digits}f} [{low:,.{digits}f}, {high:,.{digits}f}]"
