"""Every SQL statement of the reconciliation, on the dialect-neutral Warehouse API, and the
one writer of its tables (schemas/reconcile_rows.py: billing_ad_rows, billing_cloud_costs,
reconciliation_daily, alerts, reconciliation_runs), for `seedance reconcile` and
`seedance verify` alike.

Stages billing data (latest restatement wins), reads both sides for a date range, writes a
day's results and alert events in one transaction (`write_day`; the internal ties of
`seedance verify`: `store_ties`), and keeps the alert outbox (what still has to reach the
log, Kafka and the webhook). Works on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pipelines.reconcile.billing.records import AdReportRow, BillingBatch, CloudCostRow
from pipelines.settings.paths import PROJECT_ROOT
from pipelines.store.loading import store_offsets, stored_offsets
from pipelines.store.verify import day_filter
from pipelines.store.warehouse import Warehouse
from schemas.reconcile_rows import (
    ALERT,
    BILLING_AD_ROW,
    BILLING_CLOUD_COST,
    RECONCILIATION_DAILY,
    RECONCILIATION_RUN,
)
from udfs.periods import parse_day
from udfs.reconcile import ALL_DAYS, SCOPE, Comparison, Key, Transition, decide, state_of

DDL = PROJECT_ROOT / "schemas" / "sql" / "reconciliation.sql"

AD_COLUMNS = BILLING_AD_ROW.names
CLOUD_COLUMNS = BILLING_CLOUD_COST.names
DAILY_COLUMNS = RECONCILIATION_DAILY.names
ALERT_COLUMNS = ALERT.names
KEY_COLUMNS = RECONCILIATION_DAILY.key


@dataclass
class StageResult:
    ad_rows: int = 0
    ad_rows_stale: int = 0  # older than the restatement already staged: ignored
    cloud_rows: int = 0
    periods_stale: int = 0
    skipped_lines: int = 0
    stale: list[str] = field(default_factory=list)

    def add(self, other: StageResult) -> None:
        self.ad_rows += other.ad_rows
        self.ad_rows_stale += other.ad_rows_stale
        self.cloud_rows += other.cloud_rows
        self.periods_stale += other.periods_stale
        self.skipped_lines += other.skipped_lines
        self.stale += other.stale


@dataclass(frozen=True)
class AlertSinks:
    """Which sinks an alert raised now must reach (the others are marked disabled)."""

    log: bool = True
    kafka: bool = False
    webhook: bool = False


def alert_id(key: Key, seq: int, kind: str) -> str:
    """Stable across reruns, so a second insert of the same event is a no-op."""
    text = "|".join((*key, str(seq), kind))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def contributors_json(comparison: Comparison) -> str:
    return json.dumps([{"name": c.name, "ours": c.ours, "theirs": c.theirs}
                       for c in comparison.contributors], sort_keys=True)


def finite(value: float | None) -> float | None:
    """±inf drift (theirs is 0) is stored as NULL: neither JSON nor SQLite keep it."""
    return value if value is None or math.isfinite(value) else None


def daily_row(c: Comparison) -> tuple[object, ...]:
    return (*c.key, c.currency, c.ours, c.theirs, c.difference, finite(c.drift),
            c.rule.threshold, c.rule.min_volume, c.status, contributors_json(c), c.source,
            c.reported_at)


def alert_row(key: Key, transition: Transition, comparison: Comparison | None, run_id: str,
              raised_at: str, sinks: AlertSinks) -> tuple[object, ...]:
    c = comparison
    values = (c.currency, c.ours, c.theirs, finite(c.drift), c.rule.threshold,
              c.rule.min_volume, contributors_json(c)) if c else ("", None, None, None, 0.0,
                                                                  0.0, "[]")
    return (alert_id(key, transition.seq, transition.kind), transition.kind, *key,
            transition.seq, *values, run_id, raised_at,
            "pending" if sinks.log else "disabled", "pending" if sinks.kafka else "disabled",
            "pending" if sinks.webhook else "disabled", 0, "")


class ReconcileStore:
    def __init__(self, url: str = "") -> None:
        self.warehouse = Warehouse(url)
        self.warehouse.apply_ddl(DDL)
        self.url = self.warehouse.url

    def close(self) -> None:
        self.warehouse.close()

    def __enter__(self) -> ReconcileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- staging billing data -------------------------------------------------------------
    def stage(self, batch: BillingBatch,
              offsets: Sequence[tuple[str, str, int, int]] = ()) -> StageResult:
        """Stage one parsed file or message, with the Kafka offsets it advances
        ((consumer, topic, partition, next offset)) in the same transaction."""
        wh = self.warehouse
        result = StageResult(skipped_lines=batch.skipped)
        with wh.transaction():
            for row in batch.ads:
                if self._stage_ad_row(row):
                    result.ad_rows += 1
                else:
                    result.ad_rows_stale += 1
                    result.stale.append(f"{row.source}: {row.platform}/{row.account}/"
                                        f"{row.campaign} {row.day} is older than the row "
                                        "already staged")
            by_period: dict[tuple[str, str], list[CloudCostRow]] = {p: [] for p in batch.periods}
            for row in batch.cloud:
                by_period.setdefault((row.billing_account, row.billing_period_start),
                                     []).append(row)
            for (account, period), rows in sorted(by_period.items()):
                # rows carry their own message's reported_at (a file may hold several)
                reported_at = rows[0].reported_at if rows else batch.reported_at
                if self._stage_period(account, period, rows, batch.source, reported_at):
                    result.cloud_rows += len(rows)
                else:
                    result.periods_stale += 1
                    result.stale.append(f"{batch.source}: billing period {period} of {account} "
                                        "is older than the export already staged")
            store_offsets(wh, offsets)
        return result

    def _stage_ad_row(self, row: AdReportRow) -> bool:
        values = tuple(getattr(row, c) for c in AD_COLUMNS)
        updates = ", ".join(f"{c} = excluded.{c}" for c in AD_COLUMNS[4:])
        table, key = BILLING_AD_ROW.table, ", ".join(BILLING_AD_ROW.key)
        changed = self.warehouse.execute(
            f"INSERT INTO {table} ({', '.join(AD_COLUMNS)}) "
            f"VALUES ({', '.join('?' for _ in AD_COLUMNS)}) "
            f"ON CONFLICT ({key}) DO UPDATE SET {updates} "
            f"WHERE excluded.reported_at >= {table}.reported_at", values)
        return changed > 0

    def _stage_period(self, account: str, period: str, rows: list[CloudCostRow],
                      source: str, reported_at: str) -> bool:
        """Stage one billing period of an export (rows may be empty: an export whose lines
        of that period all lack a ResourceId still replaces an older export)."""
        wh = self.warehouse
        (stored,) = wh.query("SELECT MAX(reported_at) FROM billing_cloud_costs "
                             "WHERE billing_account = ? AND billing_period_start = ?",
                             (account, period))[0]
        if stored is not None and stored > reported_at:
            return False
        if stored is not None and stored < reported_at:
            # a newer export of the period: it replaces every earlier row of it
            wh.delete(BILLING_CLOUD_COST, ("billing_account", "billing_period_start"),
                      (account, period))
        else:
            # the same export again (a rerun) replaces its own rows only: other messages
            # of one export (same reported_at) add up
            wh.delete(BILLING_CLOUD_COST, ("billing_account", "billing_period_start", "source"),
                      (account, period, source))
        if not rows:
            return True
        wh.insert(BILLING_CLOUD_COST, [tuple(getattr(r, c) for c in CLOUD_COLUMNS) for r in rows])
        return True

    def kafka_offsets(self, consumer: str, topic: str) -> dict[int, int]:
        return stored_offsets(self.warehouse, consumer, topic)

    # -- reading both sides for a range -----------------------------------------------------
    def our_spend(self, first: str, last: str) -> list[tuple[Any, ...]]:
        return self.warehouse.query(
            "SELECT platform, account, campaign, day, amount, currency FROM ad_spend "
            "WHERE day >= ? AND day <= ?", (first, last))

    def our_credits(self, first: str, last: str, model: str) -> list[tuple[Any, ...]]:
        """Credits of `model` whose UTC day is within a day of the range: any account's
        local day inside the range is among them (zones are at most 14 h from UTC)."""
        before = (parse_day(first) - timedelta(days=1)).isoformat()
        after = (parse_day(last) + timedelta(days=1)).isoformat()
        return self.warehouse.query(
            "SELECT campaign, order_id, conversion_ts_ms, credit, revenue, currency "
            "FROM attribution_credits WHERE model = ? AND conversion_date >= ? "
            "AND conversion_date <= ?", (model, before, after))

    def our_gpu_costs(self, start_ms: int, end_ms: int) -> list[tuple[Any, ...]]:
        """(gpu_uuid, interval start, interval end, cost_usd, workload) of every priced
        interval overlapping [start, end); idle time as the workload '(idle)'."""
        return self.warehouse.query(
            "SELECT gpu_uuid, interval_start_ms, interval_end_ms, cost_usd, workload "
            "FROM gpu_call_costs WHERE interval_end_ms > ? AND interval_start_ms < ? "
            "UNION ALL SELECT gpu_uuid, interval_start_ms, interval_end_ms, cost_usd, "
            "'(idle)' FROM gpu_idle_costs WHERE interval_end_ms > ? AND interval_start_ms < ?",
            (start_ms, end_ms, start_ms, end_ms))

    def campaign_accounts(self) -> list[tuple[str, str, str]]:
        """(campaign, platform, account) pairs known from our spend and from the reports."""
        return self.warehouse.query(
            "SELECT DISTINCT campaign, platform, account FROM ad_spend UNION "
            "SELECT DISTINCT campaign, platform, account FROM billing_ad_rows")

    def report_time_zones(self) -> list[tuple[str, str, str]]:
        return self.warehouse.query(
            "SELECT DISTINCT platform, account, time_zone FROM billing_ad_rows "
            "WHERE time_zone <> ''")

    def their_ad_rows(self, first: str, last: str) -> list[tuple[Any, ...]]:
        return self.warehouse.query(
            "SELECT platform, account, campaign, day, currency, spend, conversions, revenue, "
            "date_basis, source, reported_at FROM billing_ad_rows WHERE day >= ? AND day <= ?",
            (first, last))

    def their_cloud_costs(self, first: str, last: str,
                          categories: Sequence[str]) -> list[tuple[Any, ...]]:
        """(resource, day, currency, cost, source, reported_at, category) of the range."""
        return self.warehouse.query(
            "SELECT resource_id, day, currency, cost, source, reported_at, charge_category "
            "FROM billing_cloud_costs WHERE day >= ? AND day <= ?", (first, last)) \
            if categories else []

    def alert_events(self, first: str, last: str) -> list[tuple[Any, ...]]:
        """(scope, platform, account, entity, day, metric, kind, seq) of the range."""
        return self.warehouse.query(
            f"SELECT {', '.join(KEY_COLUMNS)}, kind, seq FROM alerts "
            "WHERE day >= ? AND day <= ?", (first, last))

    # -- writing results --------------------------------------------------------------------
    def write_day(self, day: str, comparisons: Iterable[Comparison],
                  alerts: Iterable[tuple[object, ...]]) -> tuple[int, int]:
        """Replace the day's reconciliation rows and add its new alert events, together.
        Returns (rows written, alert events added)."""
        rows = sorted(daily_row(c) for c in comparisons)
        return len(rows), self._replace_rows("day = ?", [day], rows, alerts)

    def _replace_rows(self, where: str, params: Sequence[object], rows: list[tuple[object, ...]],
                      alerts: Iterable[tuple[object, ...]]) -> int:
        """Replace the reconciliation_daily rows `where` selects by `rows` and add the alert
        events, in one transaction; returns the alert events added."""
        wh = self.warehouse
        alerts = list(alerts)
        with wh.transaction():
            wh.execute(f"DELETE FROM {RECONCILIATION_DAILY.table} WHERE {where}", params)
            if rows:
                wh.insert(RECONCILIATION_DAILY, rows)
            added = 0
            for alert in alerts:
                # a concurrent run that raised the same event first wins; ours is a no-op
                added += wh.execute(
                    f"INSERT INTO {ALERT.table} ({', '.join(ALERT_COLUMNS)}) "
                    f"VALUES ({', '.join('?' for _ in ALERT_COLUMNS)}) ON CONFLICT DO NOTHING",
                    alert)
        return added

    def daily_rows(self, first: str, last: str) -> list[tuple[Any, ...]]:
        return self.warehouse.query(
            f"SELECT {', '.join(DAILY_COLUMNS)} FROM reconciliation_daily "
            "WHERE day >= ? AND day <= ? ORDER BY day, scope, platform, account, entity, metric",
            (first, last))

    # -- runs -------------------------------------------------------------------------------
    def start_run(self, run_id: str, started_at: str, first: str, last: str,
                  runner: str) -> None:
        self.warehouse.insert(RECONCILIATION_RUN, [
            (run_id, started_at, "", first, last, runner, "running", 0, 0, 0, 0, "")])

    def finish_run(self, run_id: str, finished_at: str, status: str, rows: int, breaches: int,
                   opened: int, resolved: int, detail: str) -> None:
        self.warehouse.execute(
            f"UPDATE {RECONCILIATION_RUN.table} SET finished_at = ?, status = ?, "
            "rows_written = ?, breaches = ?, opened = ?, resolved = ?, detail = ? WHERE run_id = ?",
            (finished_at, status, rows, breaches, opened, resolved, detail, run_id))

    # -- the alert outbox -------------------------------------------------------------------
    def alerts(self, where: str = "1 = 1", params: Sequence[object] = ()) -> list[dict[str, Any]]:
        rows = self.warehouse.query(
            f"SELECT {', '.join(ALERT_COLUMNS)} FROM alerts WHERE {where} "
            "ORDER BY raised_at, day, scope, platform, account, entity, metric, seq, kind",
            params)
        return [dict(zip(ALERT_COLUMNS, row, strict=True)) for row in rows]

    def undelivered(self) -> list[dict[str, Any]]:
        return self.alerts("log_status = 'pending' OR kafka_status IN ('pending', 'failed') "
                           "OR webhook_status IN ('pending', 'failed')")

    def mark(self, alert: str, **columns: object) -> None:
        allowed = {"log_status", "kafka_status", "webhook_status", "webhook_attempts",
                   "last_error"}
        if not set(columns) <= allowed:
            raise ValueError(f"not an alert delivery column: {sorted(set(columns) - allowed)}")
        sets = ", ".join(f"{c} = ?" for c in columns)
        self.warehouse.execute(f"UPDATE {ALERT.table} SET {sets} WHERE alert_id = ?",
                               (*columns.values(), alert))


def store_ties(store: ReconcileStore, comparisons: Sequence[Comparison], run_id: str,
               sinks: AlertSinks, first: str | None = None,
               last: str | None = None, unjudged: Collection[Key] = ()) -> int:
    """`seedance verify`'s comparisons (pipelines/store/verify.py internal_ties) stored beside
    the billing drift (reconciliation_daily, scope 'internal'): replace the internal rows of
    the checked days and add the alert events the ties' breaks and repairs call for
    (udfs.reconcile.drift.decide: open on a break, resolve once it ties again), so the
    dashboard's Reconciliation page and the alert sinks treat a broken tie as a drift.
    `unjudged`: keys of open ties, whose alerts stay as they are. Returns the alert events
    added."""
    where, params = day_filter("day", first, last)
    where, params = f"scope = ? AND ({where} OR day = ?)", [SCOPE, *params, ALL_DAYS]
    events: dict[Key, list[tuple[str, int]]] = {}
    for row in store.warehouse.query(
            f"SELECT {', '.join(KEY_COLUMNS)}, kind, seq FROM {ALERT.table} WHERE {where}",
            params):
        events.setdefault(Key(*row[:6]), []).append((row[6], int(row[7])))
    now = datetime.now(UTC).isoformat(timespec="seconds")
    current = {c.key: c for c in comparisons}
    alerts = []
    for key in sorted((current.keys() | events.keys()) - set(unjudged)):
        transition = decide(state_of(events.get(key, [])), current.get(key))
        if transition is not None:
            alerts.append(alert_row(key, transition, current.get(key), run_id, now, sinks))
    return store._replace_rows(where, params, sorted(daily_row(c) for c in comparisons),
                               alerts)
