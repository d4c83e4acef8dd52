"""`seedance backfill --from D1 --to D2`: recompute journeys, credits of every model,
lifecycle-weighted allocation and ROI for a range of days, and replace exactly those days
in the warehouse; and `seedance archive`, which writes the raw archive it reads.

One transaction per day deletes the day's rows from attribution_credits (by
conversion_date), roi_daily and roi_unallocated, inserts the recomputed ones and records
the day in backfill_runs: a rerun gives the same rows, and a run started again with the
same run id skips the days already finished (resume after a failure). `--restart` redoes
them. Also the spark-submit entry point: `spark-submit ... jobs/backfill.py --from D1 --to
D2` (docs/backfill.md).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from pipelines.backfill.config import BackfillConfig, load_backfill_config
from pipelines.backfill.frames import BackfillWindow, ComputedDays
from pipelines.backfill.roi import (
    SPEND_COLUMNS,
    credit_rows,
    loaded_costs,
    order_scores,
    orders_of_credits,
    roi_rows,
)
from pipelines.kafka.address import resolve_bootstrap
from pipelines.kafka.security import for_python
from pipelines.settings.job_config import ConfigError, StreamingJobConfig
from pipelines.store.backfill import (
    call_cost_rows,
    finished_days,
    forget_run,
    idle_cost_rows,
    spend_rows,
    stored_orders,
    write_day,
)
from pipelines.store.warehouse import Warehouse, redacted_url
from udfs.ltv import OrderScore
from udfs.periods import DAY_MS
from udfs.roi import IDLE_COLUMNS
from udfs.settings import ComputeSettings

BACKFILL_DDL = Path(__file__).resolve().parent.parent / "schemas" / "sql" / "backfill.sql"


@dataclass(frozen=True)
class BackfillRequest:
    date_from: str
    date_to: str
    config: BackfillConfig = field(default_factory=BackfillConfig)
    streaming: StreamingJobConfig | None = None  # None: the one config.streaming_config names
    run_id: str = ""  # default '<from>..<to>'
    restart: bool = False  # redo days this run id already finished
    bootstrap: str = ""  # Kafka, for source kafka


@dataclass
class BackfillSummary:
    run_id: str
    written: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    credits: int = 0
    roi_rows: int = 0
    unallocated_rows: int = 0
    compute_s: float = 0.0
    write_s: float = 0.0


def day_range(date_from: str, date_to: str) -> list[str]:
    """Every day from D1 to D2, both included (YYYY-MM-DD)."""
    try:
        first, last = date.fromisoformat(date_from), date.fromisoformat(date_to)
    except ValueError:
        raise ValueError(f"dates must be YYYY-MM-DD, got {date_from!r} and {date_to!r}") \
            from None
    if last < first:
        raise ValueError(f"--to {date_to} is before --from {date_from}")
    return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


def read_spend(warehouse: Warehouse, days: list[str], currency: str) -> pd.DataFrame:
    rows = spend_rows(warehouse, currency, days[0], days[-1])
    return pd.DataFrame(rows, columns=SPEND_COLUMNS).astype({"amount": float})


def read_costs(warehouse: Warehouse, window: BackfillWindow) -> pd.DataFrame:
    """GPU costs that can land on the window's days (within the link window of them), as
    the ROI job takes them: each call's cost and, fully loaded, its share of its GPU-day's
    idle cost (whole GPU-days read, so the shares are the stream's), and the idle cost of
    GPU-days without calls under the GPU's key (udfs/roi/compute_loading.py)."""
    first = window.claims_from_ms // DAY_MS * DAY_MS
    until = (window.claims_until_ms // DAY_MS + 1) * DAY_MS - 1
    calls = pd.DataFrame(call_cost_rows(warehouse, first, until),
                         columns=["gpu_uuid", "trace_id", "ts_ms", "cost"]).astype(
        {"ts_ms": "int64", "cost": float})
    if not window.settings.fully_loaded:
        return loaded_costs(calls, None)
    idle = pd.DataFrame(idle_cost_rows(warehouse, first, until),
                        columns=IDLE_COLUMNS).astype({"ts_ms": "int64", "cost": float})
    return loaded_costs(calls, idle)


def compute_days(request: BackfillRequest, window: BackfillWindow, settings: ComputeSettings,
                 streaming: StreamingJobConfig, costs: pd.DataFrame, run_id: str,
                 progress: Callable[[str], None], spark: Any = None) -> ComputedDays:
    """Run the configured engine over the window."""
    config = request.config
    if config.engine == "pandas":
        if config.source != "archive":
            raise ValueError("the pandas engine reads the archive only (source: archive)")
        from pipelines.backfill.local import compute_from_archive

        return compute_from_archive(config.archive_root, window, settings, costs, progress)
    from pipelines.backfill import spark as sb

    own_session = spark is None
    if own_session:
        jars = sb.kafka_jars() if config.source == "kafka" else None
        spark = sb.spark_session(config.spark, jars)
    if config.source == "kafka":
        if not request.bootstrap:
            raise ValueError("source kafka needs a Kafka address (--bootstrap, kafka.bootstrap "
                             "or SEEDANCE_KAFKA_BOOTSTRAP)")
        events = sb.kafka_events(spark, request.bootstrap, streaming.topics.spans,
                                 streaming.input.encoding, window, streaming.kafka.properties)
    else:
        events = sb.archive_events(spark, config.archive_root, window)
    work_dir = f"{config.work_root.rstrip('/')}/{re.sub(r'[^A-Za-z0-9_.-]', '_', run_id)}"
    computed = sb.compute(spark, events, window, settings, costs, work_dir, progress)
    if own_session:
        if sb.is_local(work_dir):
            spark.stop()  # staged credits are read back with pyarrow: free the JVM's memory
        else:  # read back through Spark: the session lives until the last day is written
            remove = computed.cleanup

            def cleanup() -> None:
                remove()
                spark.stop()

            computed.cleanup = cleanup
    return computed


def run(request: BackfillRequest, progress: Callable[[str], None] = print,
        spark: Any = None, before_commit: Callable[[str], None] | None = None
        ) -> BackfillSummary:
    """Recompute and replace the requested days (see the module docstring)."""
    days = day_range(request.date_from, request.date_to)
    streaming = request.streaming or request.config.streaming()
    settings = streaming.computation
    run_id = request.run_id or f"{days[0]}..{days[-1]}"
    summary = BackfillSummary(run_id)
    warehouse = Warehouse(streaming.warehouse.url)
    try:
        warehouse.apply_ddl(BACKFILL_DDL)
        done = {} if request.restart else finished_days(warehouse, run_id)
        todo = [d for d in days if d not in done]
        if request.config.source == "archive":
            require_archived(request.config.archive_root, todo)
        if request.restart:
            forget_run(warehouse, run_id)
        for day in days:
            if day in done:
                summary.skipped.append(day)
                progress(f"{day}: finished earlier in run {run_id} at {done[day]}, skipped")
        if not todo:
            progress(f"run {run_id}: every day already finished (--restart redoes them)")
            return summary
        source = request.config.source
        progress(f"backfill {run_id}: {len(todo)} of {len(days)} days from the {source} "
                 f"({request.config.engine} engine) into {redacted_url(warehouse.url)}")
        window = BackfillWindow(tuple(todo), settings)
        started = time.monotonic()
        computed = compute_days(request, window, settings, streaming,
                                read_costs(warehouse, window), run_id, progress, spark)
        summary.compute_s = time.monotonic() - started
        try:
            _write_days(warehouse, request, settings, computed, todo, run_id, summary,
                        progress, before_commit, streaming.experiment_cost_model)
        finally:
            computed.cleanup()
    finally:
        warehouse.close()
    progress(f"run {run_id} finished: {len(summary.written)} days written, "
             f"{len(summary.skipped)} skipped; {summary.credits:,} credits, "
             f"{summary.roi_rows:,} ROI rows, {summary.unallocated_rows:,} unallocated; "
             f"compute {summary.compute_s:.1f}s, writes {summary.write_s:.1f}s")
    return summary


ARCHIVED_KINDS = ("touchpoints", "conversions", "gpu_calls")


def require_archived(root: str, days: list[str]) -> None:
    """Refuse days the archive holds no event of: replacing such a day would put nothing
    where the stream's rows were (an archiver that fell behind, a mount that is missing).
    Checked where the archive is on this machine; on hdfs:// or s3a:// Spark reads what
    is there."""
    path = root.removeprefix("file://")
    if "://" in path:
        return
    missing = [day for day in days
               if not any((Path(path) / kind / f"date={day}").is_dir() for kind in ARCHIVED_KINDS)]
    if missing:
        raise ValueError(f"the archive {root} holds no event of {', '.join(missing)} (no "
                         f"{'/'.join(ARCHIVED_KINDS)} folder date=DAY); is `seedance archive "
                         "--follow` running and caught up? Nothing was replaced")


def window_scores(warehouse: Warehouse, computed: ComputedDays, todo: list[str],
                  settings: ComputeSettings) -> dict[str, OrderScore] | None:
    """With costs shared by LTV segment, the segment (and value) of every order of the
    recomputed days, from its customer's whole history: the orders recomputed, and those
    of other days up to the last one from the warehouse (udfs/ltv/allocation.py). None
    otherwise."""
    if settings.by_segment is None:
        return None
    window = pd.concat([orders_of_credits(computed.credits_of(day)) for day in todo],
                       ignore_index=True)
    stored = pd.DataFrame(stored_orders(warehouse, min(settings.models), todo[-1]),
                          columns=["order_id", "user_id", "ts_ms", "revenue", "day"])
    stored = stored[~stored.day.astype(str).isin(set(todo))]
    orders = pd.concat([stored.drop(columns="day"), window], ignore_index=True)
    return order_scores(orders, settings, of=window)


def _write_days(warehouse: Warehouse, request: BackfillRequest, settings: ComputeSettings,
                computed: ComputedDays, todo: list[str], run_id: str,
                summary: BackfillSummary, progress: Callable[[str], None],
                before_commit: Callable[[str], None] | None, order_cost_model: str) -> None:
    spend = read_spend(warehouse, todo, settings.currency)
    scores = window_scores(warehouse, computed, todo, settings)
    for number, day in enumerate(todo, 1):
        started = time.monotonic()
        # in key order: the primary key's B-tree then grows at its end instead of at random
        credits = computed.credits_of(day).sort_values(["model", "order_id", "touch_index"],
                                                       kind="stable")
        compute = computed.compute[computed.compute.day == day]
        of_day = computed.unlinked[computed.unlinked.day == day]
        unlinked = of_day.groupby("key").cost.sum().to_dict() if "key" in of_day \
            else float(of_day.cost.sum())
        roi, unallocated, orders, segments = roi_rows(
            day, credits, spend[spend.day == day], compute, unlinked, settings,
            order_cost_model, scores)
        finished = datetime.now(UTC).isoformat(timespec="seconds")
        write_day(warehouse, day, credit_rows(credits), roi, unallocated,
                  (run_id, day, request.config.source, request.config.engine, len(credits),
                   len(roi), len(unallocated), finished), before_commit, orders, segments)
        elapsed = time.monotonic() - started
        summary.write_s += elapsed
        summary.written.append(day)
        summary.credits += len(credits)
        summary.roi_rows += len(roi)
        summary.unallocated_rows += len(unallocated)
        progress(f"[{number}/{len(todo)}] {day}: {len(credits):,} credits, {len(roi):,} ROI "
                 f"rows, {len(unallocated):,} unallocated; replaced in {elapsed:.2f}s")


# --- command line --------------------------------------------------------------------------

def add_backfill_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="date_from", required=True, metavar="D1",
                   help="first day, YYYY-MM-DD (UTC)")
    p.add_argument("--to", dest="date_to", required=True, metavar="D2",
                   help="last day, included")
    p.add_argument("--config", help="backfill YAML (default: jobs/config/backfill.yaml)")
    p.add_argument("--source", choices=["archive", "kafka"], help="overrides source")
    p.add_argument("--engine", choices=["spark", "pandas"], help="overrides engine")
    p.add_argument("--run-id", default="", help="progress key (default: D1..D2); a run "
                   "started again with the same id skips its finished days")
    p.add_argument("--restart", action=argparse.BooleanOptionalAction, default=False,
                   help="recompute the days this run id already finished (default: skip "
                        "them, which resumes a failed run)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (source kafka)")


def request_of(args: argparse.Namespace) -> BackfillRequest:
    config = load_backfill_config(Path(args.config) if args.config else None)
    if args.source:
        config = config.replace(source=args.source)
    if args.engine:
        config = config.replace(engine=args.engine)
    streaming = config.streaming()
    # the archive source needs no Kafka
    bootstrap = resolve_bootstrap(args.bootstrap, streaming) if config.source == "kafka" else ""
    return BackfillRequest(args.date_from, args.date_to, config, streaming, args.run_id,
                           args.restart, bootstrap)


def cmd_backfill(args: argparse.Namespace) -> int:
    run(request_of(args), progress=lambda line: print(line, flush=True))
    return 0


def cmd_archive(args: argparse.Namespace) -> int:
    from pipelines.backfill.archive import archive_topic

    config = load_backfill_config(Path(args.config) if args.config else None)
    streaming = config.streaming()
    bootstrap = resolve_bootstrap(args.bootstrap, streaming)
    topic = streaming.topics.spans
    root = config.archive_root
    print(f"archiving {topic} on {bootstrap} into {root}"
          + (" (Ctrl-C to stop)" if args.follow else ""), flush=True)
    total = archive_topic(bootstrap, topic, root, streaming.input.encoding, args.follow,
                          config.archive.batch_messages, config.archive.flush_s,
                          for_python(dict(streaming.kafka.properties)),
                          progress=lambda line: print(line, flush=True))
    print(f"{total.messages:,} messages archived: " + ", ".join(
        f"{n:,} {kind}" for kind, n in total.records.items())
        + f" in {total.files} files; {total.dead_letters:,} unusable spans left to the "
        "stream's dead-letter topic", flush=True)
    return 0


def add_parsers(sub: Any) -> None:
    """Register `backfill` and `archive` on the seedance command line."""
    p = sub.add_parser(
        "backfill", help="recompute a date range with Spark and replace it in the warehouse",
        description="Recompute journeys, credits of every model, lifecycle-weighted "
                    "allocation and ROI for D1..D2 from the raw archive (or Kafka) with "
                    "the stream's logic, and replace exactly those days in the warehouse, "
                    "one transaction per day. Resumes: finished days of the run id are "
                    "skipped.")
    add_backfill_arguments(p)
    p.set_defaults(func=cmd_backfill)
    a = sub.add_parser("archive", help="archive the spans topic as Parquet by event date "
                                       "(the backfill's input; runs beside the stream)")
    a.add_argument("--config", help="backfill YAML (default: jobs/config/backfill.yaml)")
    a.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack)")
    a.add_argument("--follow", action="store_true", help="keep archiving as spans arrive")
    a.set_defaults(func=cmd_archive)


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point: the `seedance backfill` arguments."""
    parser = argparse.ArgumentParser(prog="backfill.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backfill_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cmd_backfill(args)
    except (ConfigError, ValueError, OSError) as error:
        # one line: a scheduler's task log shows the last line of a failed submit
        print(f"backfill: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
