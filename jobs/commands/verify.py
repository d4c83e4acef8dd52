"""`seedance verify`: the internal ties of the warehouse's result tables
(udfs/reconcile/conservation.py)
-- ROI revenue = credited revenue, spend = allocated + unallocated, GPU cost = calls + idle
-- each difference printed with its key, stored beside the billing drift and alerted like
it; exit code 1 on a break. The ties of days the ROI job has not closed yet (roi_days_closed)
are open, printed apart and not a break."""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from jobs.commands.common import BOOTSTRAP_HELP, CONFIG_HELP, CliError, job_config


def add_verify(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "verify", help="check that the warehouse's totals tie out (ROI = credits, spend and "
                       "GPU cost = allocated + unallocated); days the ROI job has not closed "
                       "yet are reported open; exit 1 on a break")
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--warehouse", help="warehouse URL (default: the config's warehouse.url)")
    p.add_argument("--first", help="first day to check, YYYY-MM-DD (default: every day)")
    p.add_argument("--last", help="last day to check, YYYY-MM-DD (default: every day)")
    p.add_argument("--no-store", action="store_true",
                   help="print only: store no rows and raise no alert")
    p.add_argument("--bootstrap", help=f"also publish alerts to the alerts topic; "
                                       f"{BOOTSTRAP_HELP}")
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from udfs.periods import parse_day

    for option, value in (("--first", args.first), ("--last", args.last)):
        if value:
            try:
                parse_day(value)
            except ValueError as error:
                raise CliError(f"{option}: {error}") from None
    config = job_config(args)
    broken = verify_warehouse(args.warehouse or config.warehouse.url, config.roi.currency,
                              args.first, args.last, store=not args.no_store,
                              bootstrap=args.bootstrap or "",
                              fully_loaded=config.computation.fully_loaded)
    return 1 if broken else 0


def verify_warehouse(url: str, currency: str, first: str | None = None,
                     last: str | None = None, store: bool = True, bootstrap: str = "",
                     indent: str = "", fully_loaded: bool = True) -> int:
    """Check, print each break with its key, store the ties and raise their alerts;
    returns the number of broken ties."""
    from pipelines.reconcile.alerts import dispatch
    from pipelines.reconcile.config import AlertsSection
    from pipelines.reconcile.store import AlertSinks, ReconcileStore, store_ties
    from pipelines.store.verify import closed_days, internal_ties
    from pipelines.store.warehouse import redacted_url
    from udfs.reconcile import ALL_DAYS, breaks, still_open

    with ReconcileStore(url) as reconcile:
        ties = internal_ties(reconcile.warehouse, currency, first, last, fully_loaded)
        closed = closed_days(reconcile.warehouse)
        unjudged = [] if closed is None else still_open(ties, *closed)
        open_keys = {c.key for c in unjudged}
        judged = [c for c in ties if c.key not in open_keys]
        broken = breaks(judged)
        days = {c.key.day for c in ties} - {ALL_DAYS}
        print(f"{indent}verify {redacted_url(reconcile.url)}: {len(ties):,} ties over "
              f"{len(days)} days, {len(broken)} broken"
              + (f", {len(unjudged):,} open" if unjudged else ""))
        if closed is None:
            print(f"{indent}  no closed days recorded (roi_days_closed is empty: a ROI job "
                  "from before it wrote this warehouse): every day is checked as closed")
        else:
            _print_open(unjudged, closed, indent)
        for c in broken:
            names = [p.name for p in c.contributors]
            print(f"{indent}  BREAK {c.key.metric:<12} {c.key.entity:<32} {c.key.day:<10}  "
                  f"{names[0]} {_amount(c.ours)} != {names[1]} {_amount(c.theirs)}  "
                  f"(difference {c.difference:+,.2f})")
        if store:
            sinks = AlertSinks(log=True, kafka=bool(bootstrap))
            added = store_ties(reconcile, judged, f"verify-{uuid.uuid4().hex[:12]}", sinks,
                               first, last, open_keys)
            if added:
                dispatch(reconcile, AlertsSection(), bootstrap)
                print(f"{indent}  {added} alert event(s) raised (open on a break, resolve "
                      "on a repair)")
    return len(broken)


def _print_open(unjudged: list[Any], closed: Any, indent: str) -> None:
    """The open ties per day (and the compute ties), with how many differ for now."""
    from udfs.reconcile import ALL_DAYS, breaks

    by_day: dict[str, list[Any]] = {}
    for c in unjudged:
        by_day.setdefault(c.key.day, []).append(c)
    for day, ties in sorted(by_day.items()):
        what = (f"compute waits up to roi.link_window_days for its orders (compute closed "
                f"through {closed.compute_through or 'no day yet'})" if day == ALL_DAYS
                else f"{day} not closed by the ROI job yet (closed through "
                     f"{closed.rows_through})")
        print(f"{indent}  OPEN  {what}: {len(ties)} ties, {len(breaks(ties))} differ for now")


def _amount(value: float | None) -> str:
    return "(none)" if value is None else f"{value:,.2f}"
