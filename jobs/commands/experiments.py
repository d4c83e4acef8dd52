"""`seedance experiments`: the strategy table of every experiment over a window, from the
warehouse (exposures and exposed users' orders from the experiments job, each order's
allocated cost from the ROI job), stored for the dashboard as experiment_results."""

from __future__ import annotations

import argparse
import sys

from jobs.commands.common import CONFIG_HELP, CliError, job_config


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
        inputs = experiment_inputs(warehouse, cost_model, args.flag)
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
