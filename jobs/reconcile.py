"""`seedance reconcile`: the daily reconciliation against billing data, end to end.

One typed entry, `run(config, request)`, used by the CLI, the schedules and the tests:
stage the billing inputs (files, the billing topic) -> the Beam job over the date range ->
deliver the new alert events -> a summary. Every step is idempotent, so a rerun of a day
(or a day whose billing was restated since) replaces its rows and sends nothing twice.
"""

from __future__ import annotations

import argparse
import glob
import logging
import re
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from pipelines.kafka.address import resolve_bootstrap
from pipelines.kafka.security import for_python
from pipelines.reconcile.config import (
    RECONCILE_ENV_VARS,
    ReconcileConfig,
    load_rates,
    load_reconcile_config,
    load_resource_map,
)
from pipelines.settings.environment import env_help
from udfs.periods import days_between, parse_day
from udfs.reconcile import CurrencyError

log = logging.getLogger("seedance.reconcile")


@dataclass(frozen=True)
class ReconcileRequest:
    first: str
    last: str
    billing_files: tuple[str, ...] = ()  # in addition to billing.files of the config
    bootstrap: str = ""  # resolved Kafka address ('' when none is known)
    dispatch: bool = True  # deliver alerts (false: record them, deliver on a later run)


@dataclass
class ReconcileResult:
    run_id: str
    first: str
    last: str
    warehouse: str = ""  # its URL, password hidden
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)
    staged: Any = None  # StageResult
    invalid_messages: list[str] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    delivery: Any = None  # DispatchReport
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)  # events raised by this run


def expand_billing_files(specs: tuple[str, ...]) -> list[str]:
    """Globs -> files, keeping an optional FORMAT: prefix; a glob matching nothing is an
    error (a missing daily export must not pass for an empty one)."""
    from pipelines.reconcile.billing.records import BillingError
    from pipelines.reconcile.billing.sources import FORMATS

    files: list[str] = []
    for spec in specs:
        head, sep, tail = spec.partition(":")
        prefix, pattern = (f"{head}:", tail) if sep and head in FORMATS else ("", spec)
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise BillingError(pattern, ["no billing file matches this pattern"])
        files += [prefix + m for m in matches]
    return files


def run(config: ReconcileConfig, request: ReconcileRequest,
        progress: Callable[[str], None] = log.info) -> ReconcileResult:
    from pipelines.reconcile.alerts import dispatch
    from pipelines.reconcile.beam import Settings, run_pipeline
    from pipelines.reconcile.billing.kafka_source import stage_topic
    from pipelines.reconcile.billing.sources import ParseOptions, read_file
    from pipelines.reconcile.store import AlertSinks, ReconcileStore, StageResult
    from pipelines.store.warehouse import redacted_url

    days_between(request.first, request.last)  # validates the range
    started = time.monotonic()
    now = datetime.now(UTC)
    result = ReconcileResult(uuid.uuid4().hex[:12], request.first, request.last)
    # side files first: a bad rate table fails before anything is written
    rates, resource_map = load_rates(config), load_resource_map(config.ours.resource_map)
    store = ReconcileStore(config.warehouse.url)
    result.warehouse = redacted_url(store.url)
    store.start_run(result.run_id, now.isoformat(), request.first, request.last,
                    config.beam.runner)
    try:
        billing = config.billing
        options = ParseOptions(billing.default_currency, billing.meta_purchase_actions,
                               billing.meta_attribution_window)
        result.staged = StageResult()
        result.files = expand_billing_files(billing.files + request.billing_files)
        for spec in result.files:
            batch = read_file(spec, options)
            staged = store.stage(batch)
            result.staged.add(staged)
            progress(f"billing {batch.format} {batch.source}: {len(batch.ads)} ad rows, "
                     f"{len(batch.cloud)} cloud cost rows"
                     + (f", {len(staged.stale)} older than what is staged (ignored)"
                        if staged.stale else ""))
        if billing.topic:
            if not request.bootstrap:
                raise ValueError(f"billing.topic {billing.topic!r} needs a Kafka broker: "
                                 "pass --bootstrap or set SEEDANCE_KAFKA_BOOTSTRAP")
            topic = stage_topic(store, request.bootstrap, billing.topic, options,
                                for_python(dict(config.kafka.properties)), progress=progress)
            result.staged.add(topic.staged)
            result.invalid_messages = topic.invalid
        settings = Settings(
            request.first, request.last, config.rules(), rates, config.currency.reporting,
            config.time_zones(), resource_map, billing.focus_charge_categories,
            config.alerts.top_contributors, result.run_id, now.isoformat(),
            AlertSinks(config.alerts.log, bool(config.alerts.topic),
                       bool(config.alerts.webhook.url)))
        progress(f"reconciling {request.first}..{request.last} with Beam "
                 f"({config.beam.runner})")
        try:
            result.counters = run_pipeline(store.url, settings, config.ours.attribution_model,
                                           config.beam.runner, config.beam.options)
        except CurrencyError as error:
            # Beam appends the failing step to the message; the key already says enough
            raise CurrencyError(re.sub(r"\s*\[while running .*\]$", "", str(error),
                                       flags=re.S)) from None
        result.alerts = store.alerts("run_id = ?", (result.run_id,))
        if request.dispatch:
            result.delivery = dispatch(store, config.alerts, request.bootstrap,
                                       for_python(dict(config.kafka.properties)))
            result.alerts = store.alerts("run_id = ?", (result.run_id,))
        result.rows = store.daily_rows(request.first, request.last)
        result.seconds = time.monotonic() - started
        c = result.counters
        store.finish_run(result.run_id, datetime.now(UTC).isoformat(), "done",
                         c.get("rows_written", 0), c.get("breaches", 0),
                         c.get("alerts_opened", 0), c.get("alerts_resolved", 0),
                         "; ".join(result.invalid_messages)[:2000])
        return result
    except BaseException as error:
        store.finish_run(result.run_id, datetime.now(UTC).isoformat(), "failed", 0, 0, 0, 0,
                         f"{type(error).__name__}: {error}"[:2000])
        raise
    finally:
        store.close()


# --- the command line ----------------------------------------------------------------

def _day(option: str, text: str) -> str:
    """`text` as a strict YYYY-MM-DD day; the error names the option it came from."""
    try:
        return parse_day(text).isoformat()
    except ValueError as error:
        raise ValueError(f"{option} {text}: {error}") from None


def date_range(args: argparse.Namespace, today: date | None = None) -> tuple[str, str]:
    today = today or datetime.now(UTC).date()
    if args.date:
        if args.date == "yesterday":
            day = (today - timedelta(days=1)).isoformat()
            return day, day
        day = _day("--date", args.date)
        return day, day
    if args.days:
        if args.days < 1:
            raise ValueError("--days must be at least 1")
        last = today - timedelta(days=1)
        return (last - timedelta(days=args.days - 1)).isoformat(), last.isoformat()
    if args.date_to and not args.date_from:
        raise ValueError("--to needs --from")
    if not (args.date_from and args.date_to):
        raise ValueError("give --date D, or --from D1 --to D2, or --days N")
    first, last = _day("--from", args.date_from), _day("--to", args.date_to)
    days_between(first, last)
    return first, last


def add_parser(sub: Any) -> None:
    env_lines = env_help(RECONCILE_ENV_VARS)
    p = sub.add_parser(
        "reconcile", help="reconcile our numbers against billing data for a date range",
        description="Compare our spend, conversions, revenue and GPU cost with the ad "
                    "platforms' reports and the cloud bill, per key and day; alert on "
                    "drift above the thresholds. Rerunning a day replaces its rows.",
        epilog=f"environment variables:\n{env_lines}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    when = p.add_mutually_exclusive_group()
    when.add_argument("--date", metavar="D", help="one day, YYYY-MM-DD or 'yesterday' (UTC)")
    when.add_argument("--from", dest="date_from", metavar="D1", help="first day (with --to)")
    when.add_argument("--days", type=int, metavar="N",
                      help="the N days up to yesterday (UTC): restatements of recent days")
    p.add_argument("--to", dest="date_to", metavar="D2", help="last day, included")
    p.add_argument("--billing", action="append", default=[], metavar="[FORMAT:]FILE",
                   help="billing file (CSV, JSON, JSON lines, Parquet; globs allowed), "
                        "FORMAT one of google_ads, meta, generic, focus; repeatable")
    p.add_argument("--config", help="config YAML (default: jobs/config/reconcile.yaml)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack)")
    p.add_argument("--runner", help="Beam runner (overrides beam.runner)")
    p.add_argument("--no-dispatch", action="store_true",
                   help="record alerts without delivering them (a later run delivers)")
    p.set_defaults(func=cmd_reconcile)


def cmd_reconcile(args: argparse.Namespace) -> int:
    config = load_reconcile_config(Path(args.config) if args.config else None)
    if args.runner:
        config = config.replace("beam", runner=args.runner)
    first, last = date_range(args)
    if not args.verbose:
        # Beam logs a failing step's traceback at ERROR before re-raising; the user gets
        # the error itself, once
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    lines = logging.StreamHandler(sys.stdout)
    lines.setFormatter(logging.Formatter("  %(message)s"))
    log.addHandler(lines)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        # Kafka is optional: without a broker, Kafka deliveries wait for a run that has one
        bootstrap = resolve_bootstrap(args.bootstrap, config, required=False)
        request = ReconcileRequest(first, last, tuple(args.billing), bootstrap,
                                   dispatch=not args.no_dispatch)
        print(f"seedance reconcile {first}..{last}")
        result = run(config, request)
    finally:
        log.removeHandler(lines)
        log.propagate = True
    print_summary(result, config)
    delivery = result.delivery
    failed = sum(delivery.failed.values()) if delivery else 0
    if failed:
        print(f"seedance: error: {failed} alert deliveries failed (recorded; the next run "
              "retries them)", file=sys.stderr)
        return 1
    return 0


def _money(value: float | None, currency: str) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f} {currency}".strip() if currency else f"{value:,.2f}"


def _drift(value: float | None, ours: float | None) -> str:
    if value is None:
        return "inf" if ours else "-"
    return f"{0.0 if abs(value) < 5e-5 else value:+.2%}"  # no "-0.00%" from float noise


def print_summary(result: ReconcileResult, config: ReconcileConfig) -> None:
    by = {(r[4], r[5]): r for r in result.rows if r[0] == "total"}
    keys: dict[tuple[str, str], list[int]] = {}
    for r in result.rows:
        if r[0] != "total":
            counts = keys.setdefault((r[4], r[5]), [0, 0, 0])
            counts[0] += 1
            counts[1] += r[13] == "breach"
            counts[2] += r[13] == "no_report"
    print(f"\n{'day':<11} {'metric':<13} {'ours':>18} {'theirs':>18} {'drift':>9} "
          f"{'keys':>5} {'breach':>6} {'no report':>9}")
    for (day, metric), (n, breaches, uncovered) in sorted(keys.items()):
        total = by.get((day, metric))
        ours = _money(total[7], total[6]) if total else "-"
        theirs = _money(total[8], total[6]) if total else "-"
        drift = _drift(total[10], total[7]) if total and total[13] != "no_report" else "-"
        print(f"{day:<11} {metric:<13} {ours:>18} {theirs:>18} {drift:>9} {n:>5} "
              f"{breaches:>6} {uncovered:>9}")
    if not keys:
        print("(no keys in range: no results of ours and no billing rows for these days)")
    opened = [a for a in result.alerts if a["kind"] == "open"]
    resolved = [a for a in result.alerts if a["kind"] == "resolve"]
    print(f"\nalerts: {len(opened)} opened, {len(resolved)} resolved")
    from pipelines.reconcile.alerts import summary

    for alert in result.alerts:
        sinks = ", ".join(f"{s} {alert[f'{s}_status']}" for s in ("log", "kafka", "webhook")
                          if alert[f"{s}_status"] != "disabled")
        print(f"  {alert['kind'].upper():<7} {summary(alert)} [{sinks}]")
    if result.delivery:
        d = result.delivery
        print(f"delivery: log {d.sent['log']} sent; kafka {d.sent['kafka']} sent, "
              f"{d.failed['kafka']} failed; webhook {d.sent['webhook']} sent, "
              f"{d.failed['webhook']} failed, {d.retries} retries")
    if result.delivery and result.delivery.errors:
        print("undelivered (retried by the next run):")
        for error in result.delivery.errors[:10]:
            print(f"  {error}")
    c = result.counters
    notes = []
    if c.get("credits_without_account"):
        notes.append(f"{c['credits_without_account']} credit rows of campaigns that neither "
                     "ad_spend nor a report names (not reconciled)")
    if c.get("credits_of_ambiguous_campaigns"):
        notes.append(f"{c['credits_of_ambiguous_campaigns']} credit rows of campaigns under "
                     "two accounts (not reconciled)")
    if c.get("report_rows_by_interaction_date"):
        notes.append(f"{c['report_rows_by_interaction_date']} report rows count conversions on "
                     "the ad interaction's day while ours fall on the order's day; select "
                     "metrics.conversions_by_conversion_date to compare like with like")
    if result.staged and result.staged.skipped_lines:
        notes.append(f"{result.staged.skipped_lines} FOCUS lines without ResourceId ignored")
    for line in result.invalid_messages:
        notes.append(f"invalid billing message skipped: {line.splitlines()[0]}")
    for note in notes:
        print(f"note: {note}")
    print(f"\n{len(result.rows)} rows in reconciliation_daily for {result.first}..{result.last}"
          f" in {result.warehouse}; run {result.run_id}, {result.seconds:.1f}s")
