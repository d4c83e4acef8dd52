"""`seedance ltv fit | score | evaluate`: customer lifetime value from transactions (a CSV or
Parquet file, CDNOW's text format, or the warehouse's orders), with the BG/NBD and
Gamma-Gamma models of udfs/ltv/model.py.

`fit` fits both models and writes the LtvModel JSON; `score` writes each customer's
summary, P(alive), expected purchases, expected order value and LTV under a model; `evaluate`
fits on a calibration period and sets the forecasts of the holdout beside what the same
customers bought, and beside the naive forecasts (docs/ltv-cli.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.commands.common import BOOTSTRAP_HELP, CONFIG_HELP, CliError, positive_int
from jobs.commands.ltv_return import add_return, clock_day, read_model

if TYPE_CHECKING:
    from pipelines.ltv.transactions import Transactions

# without an explicit last day, the data's last day is the end of observation: a row dated
# after the clock, or far after the rest, is refused rather than moving it (stray_dates.py)
AS_OF_HELP = ("(default: the last transaction's day; a transaction dated after today, or "
              "far after the rest, is then an error)")

PARAMETERS = (("BG/NBD (purchases)", "purchases", ("r", "alpha", "a", "b")),
              ("Gamma-Gamma (order value)", "spend", ("p", "q", "v")))


def add_ltv(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("ltv", help="customer lifetime value: fit BG/NBD and Gamma-Gamma on "
                                   "transactions, score customers, check against a holdout")
    commands = p.add_subparsers(dest="ltv_command", required=True)
    fit = commands.add_parser("fit", help="fit the models; print the parameters, write the "
                                          "model JSON")
    score = commands.add_parser("score", help="per customer: x, t_x, T, P(alive), expected "
                                              "purchases and order value, LTV, to CSV")
    evaluate = commands.add_parser("evaluate", help="fit on a calibration period, forecast "
                                                    "the holdout, compare with what happened")
    for command in (fit, score, evaluate):
        _add_input(command)
    for command in (fit, evaluate):
        command.add_argument("--period-days", type=float, default=7.0,
                             help="the models' time unit in days (default 7: weeks)")
    fit.add_argument("--end", "--as-of", dest="end", metavar="DAY",
                     help=f"last day of the data to fit, YYYY-MM-DD {AS_OF_HELP}")
    fit.add_argument("--out", default="ltv_model.json", help="the model JSON to write "
                                                             "(default ltv_model.json)")
    fit.add_argument("--intervals", type=positive_int, metavar="ROUNDS",
                     help="also bootstrap intervals of the parameters, over this many rounds")
    fit.add_argument("--level", type=float, default=0.9, help="of the intervals (default 0.9)")
    fit.add_argument("--seed", type=int, default=0, help="of the bootstrap (default 0)")
    fit.add_argument("--publish", action="store_true",
                     help="also publish the model to the job config's ltv_models topic "
                          "(compacted), which the ltv streaming job scores with, with the "
                          "config's ltv: horizon and discount rate and segment bounds from "
                          "these customers' predicted LTV")
    fit.add_argument("--message-out", metavar="FILE",
                     help="also write the model message (the model, the config's ltv: "
                          "horizon and discount rate, segment bounds from these customers' "
                          "predicted LTV) to FILE: roi.ltv_model for cost allocation by "
                          "LTV segment")
    fit.add_argument("--config", help=f"{CONFIG_HELP} (with --publish: the topic, Kafka "
                                      "address and security; with --publish or "
                                      "--message-out: the ltv: section)")
    fit.add_argument("--bootstrap", help=BOOTSTRAP_HELP)
    fit.set_defaults(func=cmd_fit)
    score.add_argument("--model", required=True, help="the model JSON `ltv fit` wrote")
    score.add_argument("--end", "--as-of", dest="end", metavar="DAY",
                       help=f"the day customers are scored at, YYYY-MM-DD {AS_OF_HELP}")
    score.add_argument("--horizon-weeks", type=float, default=52.0,
                       help="LTV and expected purchases over this many weeks (default 52)")
    score.add_argument("--discount-rate", type=float, default=0.0,
                       help="annual, e.g. 0.1 for 10 %% a year; applied per model period "
                            "(default 0: undiscounted)")
    score.add_argument("--out", default="ltv_scores.csv",
                       help="the CSV to write (default ltv_scores.csv)")
    score.add_argument("--chunk-rows", type=positive_int, default=200_000,
                       help="customers scored and written at a time (default 200,000)")
    score.set_defaults(func=cmd_score)
    evaluate.add_argument("--calibration-weeks", type=float,
                          help="calibration period: this many weeks from the first "
                               "transaction's day (Fader, Hardie & Lee: 39)")
    evaluate.add_argument("--calibration-end", metavar="DAY",
                          help="or: the calibration period's last day, YYYY-MM-DD")
    evaluate.add_argument("--holdout-weeks", type=float,
                          help="holdout period after it (default: up to the last "
                               "transaction's day)")
    evaluate.add_argument("--as-of", dest="end", metavar="DAY",
                          help=f"the data's last day, YYYY-MM-DD: later transactions are left "
                               f"out {AS_OF_HELP}")
    evaluate.set_defaults(func=cmd_evaluate)
    add_return(commands)


def _add_input(command: argparse.ArgumentParser) -> None:
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("--transactions", metavar="FILE",
                        help="CSV or Parquet with customer, timestamp, amount (or CDNOW's "
                             "text format with --format cdnow)")
    source.add_argument("--warehouse", metavar="URL",
                        help="the warehouse's orders instead (sqlite:///path or "
                             "postgresql://...): each known user's orders, the revenue of "
                             "--attribution-model's credits")
    command.add_argument("--format", choices=("csv", "parquet", "cdnow"),
                         help="of --transactions (default: by its suffix, .parquet or CSV)")
    for field in ("customer", "timestamp", "amount"):
        command.add_argument(f"--{field}-column", default=field, metavar="NAME",
                             help=f"the {field} column of a CSV or Parquet file "
                                  f"(default {field})")
    command.add_argument("--attribution-model", default="last_click",
                         help="whose credits make an order's revenue, with --warehouse "
                              "(default last_click)")


def load_transactions(args: argparse.Namespace) -> tuple[Transactions, str]:
    """The transactions of --transactions or --warehouse, and where they came from; with no
    --as-of (--end), one dated after today or far after the rest is an error naming it."""
    from pipelines.ltv.transactions import Columns, read_transactions, transactions_from_warehouse

    today = None if args.end is not None else clock_day()
    if args.warehouse:
        from pipelines.store.warehouse import Warehouse, redacted_url

        with Warehouse(args.warehouse, create=False) as warehouse:
            found = transactions_from_warehouse(warehouse, args.attribution_model, today)
        return found, (f"{redacted_url(args.warehouse)} (orders credited by "
                       f"{args.attribution_model})")
    columns = Columns(args.customer_column, args.timestamp_column, args.amount_column)
    return (read_transactions(Path(args.transactions), args.format, columns, today),
            args.transactions)


def _day(flag: str, text: str | None, default: float) -> float:
    from udfs.periods import day_number

    if text is None:
        return default
    try:
        return day_number(text)
    except ValueError as error:
        raise CliError(f"{flag}: {error}") from None


def _period_days(value: float) -> float:
    if not 0 < value < float("inf"):
        raise CliError(f"--period-days must be a positive number of days, got {value:g}")
    return value


def _data_line(transactions: Transactions, source: str, end: float) -> str:
    from pipelines.ltv.transactions import day_text

    return (f"{source}: {transactions.day.size:,} transactions from "
            f"{day_text(transactions.day.min())} to {day_text(transactions.day.max())}"
            + (f", those through {day_text(end)} used" if end < transactions.day.max() // 1
               else ""))


def _parameter_lines(model: Any, intervals: dict[str, tuple[float, float]] | None,
                     level: float, rounds: int | None) -> list[str]:
    from udfs.ltv import at_bound

    lines = []
    for title, part, names in PARAMETERS:
        fitted = getattr(model, part)
        head = f"{title}" + (f"   {100 * level:g} % interval, {rounds} bootstrap rounds"
                             if intervals else "")
        lines.append(head)
        bounded = at_bound(names, [getattr(fitted, name) for name in names])
        for name in names:
            value = getattr(fitted, name)
            cell = f"  {name:<6} {value:>10.4f}"
            if intervals:
                low, high = intervals[name]
                cell += f"   [{low:.4f}, {high:.4f}]"
            lines.append(cell + ("   at the optimiser's bound: no estimate"
                                 if name in bounded else ""))
    return lines


def warn(lines: list[str]) -> None:
    """Each line to stderr as a warning."""
    for line in lines:
        print(f"warning: {line}", file=sys.stderr)


def cmd_fit(args: argparse.Namespace) -> int:
    from pipelines.ltv.transactions import day_text
    from udfs.ltv import (
        bootstrap_intervals,
        fit_model,
        fit_warnings,
        spenders,
        summaries_from_transactions,
    )

    period_days = _period_days(args.period_days)
    if not 0 < args.level < 1:
        raise CliError(f"--level must lie strictly between 0 and 1, got {args.level:g}")
    transactions, source = load_transactions(args)
    end = _day("--end", args.end, float(transactions.day.max() // 1))
    started = time.perf_counter()
    _, summaries = summaries_from_transactions(*transactions, end_day=end,
                                               period_days=period_days)
    if len(summaries) == 0:
        raise CliError(f"no transaction on or before {day_text(end)} (--end)")
    repeat = spenders(summaries)
    if repeat.customers() == 0:
        raise CliError(f"none of the {len(summaries):,} customers bought on a second day "
                       "with a positive amount: the order-value model has nothing to learn")
    model = fit_model(summaries, period_days, end)
    warnings = fit_warnings(summaries, model.purchases, model.spend)
    intervals = bootstrap_intervals(summaries, args.intervals, args.level, args.seed) \
        if args.intervals else None
    elapsed = time.perf_counter() - started
    print(_data_line(transactions, source, end))
    print(f"{len(summaries):,} customers, {int((summaries.frequency > 0).sum()):,} with repeat "
          f"purchases ({summaries.frequency.sum():,.0f} repeat purchase days); time in "
          f"periods of {period_days:g} days")
    print("\n".join(_parameter_lines(model, intervals, args.level, args.intervals)))
    print(f"log-likelihood: BG/NBD {model.purchases.log_likelihood(summaries):.2f}, "
          f"Gamma-Gamma {model.spend.log_likelihood(summaries):.2f} "
          f"({repeat.customers():,.0f} repeat customers)")
    if model.spend.q > 1:
        print(f"mean order value p v / (q - 1): {model.spend.population_mean():,.2f}")
    Path(args.out).write_text(model.to_json() + "\n", encoding="utf-8")
    print(f"model written to {args.out} (fitted in {elapsed:.1f}s"
          + ("; not an estimate: see the warnings)" if warnings else ")"))
    warn(warnings)
    if args.message_out:
        message = _message(args, model, summaries)
        Path(args.message_out).write_text(message.to_json() + "\n", encoding="utf-8")
        print(f"model message written to {args.message_out} ({_segments_line(message)})")
    if args.publish:
        _publish(args, model, summaries)
    return 0


def _message(args: argparse.Namespace, model: Any, summaries: Any) -> Any:
    """The model message with the config's ltv: horizon and discount rate (per period)."""
    from jobs.commands.common import job_config
    from pipelines.codec.ltv_models import ModelMessage

    config = job_config(args)
    return ModelMessage.fitted(model, summaries, int(config.ltv.horizon_days),
                               float(config.ltv.discount_rate))


def _segments_line(message: Any) -> str:
    bounds = ", ".join(f"{b:,.2f}" for b in message.bounds)
    return (f"horizon {message.horizon_days} days, segments {'/'.join(message.names)} at "
            f"{bounds}")


def _publish(args: argparse.Namespace, model: Any, summaries: Any) -> None:
    """The model as the stream's next: to the config's ltv_models topic, keyed "current"."""
    from jobs.commands.common import job_config
    from jobs.commands.inputs import kafka_of
    from pipelines.ltv.models_topic import publish_model

    config = job_config(args)
    message = _message(args, model, summaries)
    bootstrap, client = kafka_of(args, config)
    publish_model(bootstrap, config.topics.ltv_models, message, client)
    print(f"published to {config.topics.ltv_models} at {bootstrap}: "
          f"{_segments_line(message)}")


def cmd_score(args: argparse.Namespace) -> int:
    from pipelines.ltv.scores import per_period_rate, write_scores
    from pipelines.ltv.transactions import day_text
    from udfs.ltv import summaries_from_transactions

    model = read_model(args.model)
    if not 0 <= args.horizon_weeks < float("inf"):
        raise CliError(f"--horizon-weeks must be 0 or more, got {args.horizon_weeks:g}")
    try:
        discount = per_period_rate(args.discount_rate, model.period_days)
    except ValueError as error:
        raise CliError(str(error)) from None
    transactions, source = load_transactions(args)
    end = _day("--end", args.end, float(transactions.day.max() // 1))
    ids, summaries = summaries_from_transactions(*transactions, end_day=end,
                                                 period_days=model.period_days)
    horizon = args.horizon_weeks * 7 / model.period_days
    started = time.perf_counter()
    totals = write_scores(model, ids, summaries, Path(args.out), horizon, discount,
                          args.chunk_rows, progress=lambda line: print(line, file=sys.stderr))
    elapsed = time.perf_counter() - started
    print(_data_line(transactions, source, end))
    print(f"{totals.customers:,} customers scored at {day_text(end)} over {args.horizon_weeks:g} "
          f"weeks ({horizon:g} periods of {model.period_days:g} days), discount "
          f"{100 * args.discount_rate:g} % a year ({100 * discount:.4g} % a period)")
    if totals.customers:
        print(f"expected purchases {totals.expected_purchases:,.1f}, LTV {totals.ltv:,.2f} "
              f"(mean {totals.ltv / totals.customers:,.2f} a customer), mean P(alive) "
              f"{totals.p_alive / totals.customers:.3f}")
    print(f"scores written to {args.out} in {elapsed:.1f}s")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from pipelines.ltv.evaluate import evaluate, holdout_window, report_lines
    from pipelines.ltv.transactions import day_text, transactions_through

    period_days = _period_days(args.period_days)
    calibration_end = None if args.calibration_end is None \
        else _day("--calibration-end", args.calibration_end, 0.0)
    transactions, source = load_transactions(args)
    last = None
    if args.end is not None:
        last = _day("--as-of", args.end, 0.0)
        transactions = transactions_through(transactions, last)
        if transactions.day.size == 0:
            raise CliError(f"no transaction on or before {day_text(last)} (--as-of)")
    try:
        window = holdout_window(transactions, args.calibration_weeks, args.holdout_weeks,
                                calibration_end, last)
    except ValueError as error:
        raise CliError(str(error)) from None
    result = evaluate(transactions, window, period_days)
    print(_data_line(transactions, source, float(transactions.day.max() // 1)))
    print("\n".join(report_lines(result)))
    warn(result.warnings)
    return 0
