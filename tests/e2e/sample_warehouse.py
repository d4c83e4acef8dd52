"""A warehouse filled with demo-shaped rows in a few seconds, for the browser test.

Credits come from the generator's plan through the batch reference (the same udfs as the
Flink job), ROI rows from `udfs.roi.day.day_roi` over seeded spend and compute, and
reconciliation rows and alerts in the shapes of schemas/sql/reconciliation.sql with a
seeded drift (a few keys outside the 5 % band, some of them resolved later). Running the
whole stack would take minutes; these rows have the same columns and the same invariants.

The figures of how sure the results are come as fixed rows (`EXPERIMENTS`, `DECISIONS`) or
from the credits by a normal approximation (credit intervals): three experiments (a
significant lift, no difference, a sample-ratio mismatch) and three control decisions (one
executed and verified, one blocked by a limit, one awaiting approval).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pandas as pd

from pipelines.settings.job_config import AttributionConfig
from pipelines.sources.generator import plan_events
from pipelines.store.warehouse import Warehouse
from schemas.rows import (
    AD_SPEND,
    ATTRIBUTION_CREDITS,
    CONTROL_ACTION,
    CONTROL_DECISION,
    CONTROL_VERIFICATION,
    CREDIT_INTERVAL,
    EXPERIMENT_RESULT,
    GPU_CALL_COST,
    GPU_IDLE_COST,
    ROI_DAILY,
    ROI_UNALLOCATED,
)
from tests.reference import reference_credits
from udfs.lifecycle import StageWeights
from udfs.roi.day import day_roi

RECONCILIATION_DDL = (Path(__file__).resolve().parents[2] / "schemas" / "sql"
                      / "reconciliation.sql")
START = datetime(2026, 10, 1, tzinfo=UTC)
# campaign -> (platform, account, typical daily spend); email and organic cost nothing here
PAID = {"gs-brand": ("google_ads", "123-456-7890", 35.0),
        "gs-generic": ("google_ads", "123-456-7890", 55.0),
        "meta-prospecting": ("meta", "act_1001", 50.0),
        "meta-retargeting": ("meta", "act_1001", 25.0),
        "dv360-awareness": ("dv360", "dv-77", 30.0),
        "aff-coupons": ("awin", "aw-5", 12.0)}
THRESHOLD = 0.05
MIN_VOLUME = {"spend": 10.0, "conversions": 5.0, "revenue": 50.0}
DAILY_COLUMNS = ("scope", "platform", "account", "entity", "day", "metric", "currency", "ours",
                 "theirs", "difference", "drift", "threshold", "min_volume", "status",
                 "contributors", "billing_source", "reported_at")
ALERT_COLUMNS = ("alert_id", "kind", "scope", "platform", "account", "entity", "day", "metric",
                 "seq", "currency", "ours", "theirs", "drift", "threshold", "min_volume",
                 "contributors", "run_id", "raised_at", "log_status", "kafka_status",
                 "webhook_status", "webhook_attempts", "last_error")


@dataclass(frozen=True)
class SampleSummary:
    days: list[str]
    credits: int
    roi_rows: int
    reconciliation_rows: int
    alert_events: int
    credit_intervals: int = 0


def fill_sample_warehouse(url: str, users: int = 600, seed: int = 11,
                          days: int = 30) -> SampleSummary:
    rng = random.Random(seed)
    plan = plan_events(users, seed=seed, days=days, start=START)
    credits = reference_credits(plan)
    all_days = [(START.date() + timedelta(days=i)).isoformat() for i in range(days)]
    credit_rows = [(c.model, c.order_id, c.touch_index, c.user_id, c.conversion_ts_ms,
                    _day(c.conversion_ts_ms), c.channel, c.campaign, c.touch_ts_ms, c.credit,
                    c.revenue, c.currency, c.stage) for c in credits]
    spend = [(platform, account, campaign, day, round(base * rng.uniform(0.6, 1.4), 2), "USD")
             for day in all_days for campaign, (platform, account, base) in PAID.items()]
    orders = sorted({c.order_id for c in credits})
    compute = {order: round(rng.uniform(0.02, 0.9), 4) for order in orders}

    roi, unallocated = _roi_rows(credit_rows, spend, compute, all_days, rng)
    recon = _reconciliation_rows(credit_rows, spend, all_days, rng)
    alerts = _alert_rows(recon, rng)
    with Warehouse(url) as warehouse:
        warehouse.store(ATTRIBUTION_CREDITS, credit_rows)
        warehouse.store(AD_SPEND, spend)
        warehouse.store(ROI_DAILY, roi)
        warehouse.store(ROI_UNALLOCATED, unallocated)
        warehouse.apply_ddl(RECONCILIATION_DDL)
        warehouse.upsert("reconciliation_daily", DAILY_COLUMNS, 6, recon)
        warehouse.upsert("alerts", ALERT_COLUMNS, 1, alerts)
        intervals = _credit_interval_rows(credit_rows)
        warehouse.store(CREDIT_INTERVAL, intervals)
        _store_experiments_and_control(warehouse, all_days)
        calls, idle = _gpu_rows(all_days, rng)
        warehouse.store(GPU_CALL_COST, calls)
        warehouse.store(GPU_IDLE_COST, idle)
    return SampleSummary(all_days, len(credit_rows), len(roi), len(recon), len(alerts),
                         len(intervals))


def _day(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%d")


def _gpu_rows(days: list[str], rng: random.Random
              ) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Two GPUs a day: ranking calls and a batch job on the A100, idle time on both; the
    L40S serves nothing on even days."""
    calls, idle = [], []
    for n, day in enumerate(days):
        start = int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp() * 1000)
        for hour in range(0, 24, 6):
            end = start + hour * 3_600_000 + 600_000
            for workload, seconds in (("ranker", rng.uniform(20, 60)),
                                      ("batch-embed", rng.uniform(100, 400))):
                cost = round(seconds * 0.0011, 4)
                values = {"gpu_uuid": "GPU-a100", "interval_end_ms": end,
                          "trace_id": f"{workload}-{day}-{hour}", "span_id": "s",
                          "interval_start_ms": end - 600_000, "model": "NVIDIA A100",
                          "workload": workload, "pod": "p", "namespace": "shop",
                          "user_id": "", "gpu_seconds": seconds, "cost_usd": cost,
                          "interval_cost_usd": 0.66, "price_known": True}
                calls.append(tuple(values[name] for name in GPU_CALL_COST.names))
            for gpu, model in (("GPU-a100", "NVIDIA A100"), ("GPU-l40s", "NVIDIA L40S")):
                if gpu == "GPU-l40s" and n % 2 == 0:
                    continue
                idle.append((gpu, end + 1, end - 600_000, model, 200.0,
                             round(rng.uniform(0.05, 0.3), 4), 0.66, True))
    return calls, idle


def _roi_rows(credit_rows: list[tuple], spend: list[tuple], compute: dict[str, float],
              days: list[str], rng: random.Random) -> tuple[list[tuple], list[tuple]]:
    frame = pd.DataFrame(credit_rows, columns=ATTRIBUTION_CREDITS.names)
    spend_frame = pd.DataFrame(spend, columns=["platform", "account", "campaign", "day", "amount",
                                               "currency"])
    models = list(AttributionConfig.models)
    roi, unallocated = [], []
    for day in days:
        credits = frame[frame.conversion_date == day]
        orders = credits.order_id.unique()
        day_compute = pd.DataFrame({"order_id": orders, "cost": [compute[o] for o in orders]})
        result = day_roi(credits, spend_frame[spend_frame.day == day], day_compute, models,
                         StageWeights(), unlinked_compute=round(rng.uniform(0.0, 2.0), 4))
        for r in result.roi.itertuples(index=False):
            roi.append((r.model, day, r.dimension, r.key, float(r.conversions),
                        float(r.revenue), float(r.ad_spend), float(r.compute_cost),
                        None if pd.isna(r.roi) else float(r.roi), "USD",
                        None if pd.isna(r.roas) else float(r.roas),
                        None if pd.isna(r.margin_roi) else float(r.margin_roi)))
        for u in result.unallocated.itertuples(index=False):
            unallocated.append((u.model, day, u.kind, u.key, float(u.amount), "USD"))
    return roi, unallocated


def _status(ours: float, theirs: float, metric: str) -> tuple[float | None, str]:
    drift = (ours - theirs) / abs(theirs) if theirs else None
    if max(abs(ours), abs(theirs)) < MIN_VOLUME.get(metric, 0.0):
        return drift, "below_min_volume"
    return drift, "breach" if drift is None or abs(drift) > THRESHOLD else "ok"


def _reconciliation_rows(credit_rows: list[tuple], spend: list[tuple], days: list[str],
                         rng: random.Random) -> list[tuple]:
    """Ours against a platform's report per campaign-day and metric, plus daily totals."""
    ours: dict[tuple[str, str, str], float] = defaultdict(float)
    for _model, _order, _i, _user, _ts, day, _channel, campaign, _t, credit, revenue, *_ in (
            r for r in credit_rows if r[0] == "last_click"):
        ours[campaign, day, "conversions"] += credit
        ours[campaign, day, "revenue"] += revenue
    for _platform, _account, campaign, day, amount, _currency in spend:
        ours[campaign, day, "spend"] += amount
    rows = []
    for day in days:
        totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for campaign, (platform, account, _base) in PAID.items():
            for metric in ("spend", "conversions", "revenue"):
                mine = round(ours[campaign, day, metric], 6)
                # mostly within a few %, now and then a platform restates far away
                error = rng.gauss(0.0, 0.02) if rng.random() > 0.06 else rng.choice(
                    (-1, 1)) * rng.uniform(0.06, 0.2)
                theirs = round(mine / (1 + error), 2)
                drift, status = _status(mine, theirs, metric)
                currency = "" if metric == "conversions" else "USD"
                rows.append(("campaign", platform, account, campaign, day, metric, currency,
                             mine, theirs, mine - theirs, drift, THRESHOLD, MIN_VOLUME[metric],
                             status, "[]", f"{platform}-report.csv", f"{day}T23:00:00Z"))
                totals[metric][0] += mine
                totals[metric][1] += theirs
        for metric, (mine, theirs) in totals.items():
            drift, status = _status(mine, theirs, metric)
            rows.append(("total", "*", "*", "*", day, metric,
                         "" if metric == "conversions" else "USD", mine, theirs, mine - theirs,
                         drift, THRESHOLD, MIN_VOLUME[metric], status, "[]", "*",
                         f"{day}T23:00:00Z"))
    return rows


def _alert_rows(recon: list[tuple], rng: random.Random) -> list[tuple]:
    """An open event per breach; about half resolved by a later restatement."""
    out = []
    for row in recon:
        scope, platform, account, entity, day, metric, currency, ours, theirs = row[:9]
        if row[13] != "breach":
            continue
        raised = (date.fromisoformat(day) + timedelta(days=1)).isoformat() + "T06:00:00Z"
        key = (scope, platform, account, entity, day, metric)
        out.append(_alert(key, "open", currency, ours, theirs, row[10], raised))
        if rng.random() < 0.5:
            resolved = (date.fromisoformat(day) + timedelta(days=3)).isoformat() + "T06:00:00Z"
            fixed = round(ours * (1 + rng.uniform(-0.02, 0.02)), 2)
            out.append(_alert(key, "resolve", currency, ours, fixed,
                              (ours - fixed) / abs(fixed) if fixed else None, resolved))
    return out


def _alert(key: tuple[str, ...], kind: str, currency: str, ours: float, theirs: float,
           drift: float | None, raised_at: str) -> tuple:
    alert_id = hashlib.sha256("|".join((*key, "1", kind)).encode()).hexdigest()[:32]
    return (alert_id, kind, *key, 1, currency, ours, theirs, drift, THRESHOLD,
            MIN_VOLUME[key[5]], json.dumps([]), "sample-run", raised_at, "sent", "disabled",
            "sent", 1, "")


# (experiment, variant, users, ROI (value, low, high), vs control (value, low, high), p,
# significant, marginal cost, SRM p): the newest window; bid-strategy has an older one too
EXPERIMENTS = [
    ("bid-strategy", "control", 2010, (3.10, 2.84, 3.36), None, None, False, None, 0.81),
    ("bid-strategy", "target-roas", 1990, (3.82, 3.41, 4.25), (0.72, 0.23, 1.21), 0.004, True,
     0.04, 0.81),
    ("checkout-copy", "control", 1500, (2.40, 2.10, 2.70), None, None, False, None, 0.66),
    ("checkout-copy", "short-copy", 1523, (2.46, 2.14, 2.78), (0.06, -0.37, 0.49), 0.78,
     False, -0.01, 0.66),
    ("onboarding-flow", "control", 1380, (1.90, 1.60, 2.20), None, None, False, None, 3.1e-08),
    ("onboarding-flow", "guided", 1020, (2.05, 1.70, 2.40), (0.15, -0.31, 0.61), 0.52, False,
     0.02, 3.1e-08)]


def experiment_row(flag_key: str, variant: str, users: int, roi: tuple[float, float, float],
                   diff: tuple[float, float, float] | None, p_value: float | None,
                   significant: bool, marginal_cost: float | None, srm_p: float,
                   window_end: str) -> tuple:
    end = date.fromisoformat(window_end)
    cost = round(users * 0.05, 2)
    values = {
        "flag_key": flag_key, "variant": variant, "window_end": window_end,
        "window_start": (end - timedelta(days=6)).isoformat(), "is_control": diff is None,
        "control_variant": "control", "users": users, "converters": users // 12,
        "conversions": users // 10, "revenue": round(cost * roi[0], 2),
        "ad_spend": round(cost * 0.8, 2), "compute_cost": round(cost * 0.2, 2),
        "roi": roi[0], "roi_low": roi[1], "roi_high": roi[2],
        "roi_diff": diff and diff[0], "diff_low": diff and diff[1],
        "diff_high": diff and diff[2], "p_value": p_value, "significant": significant,
        "marginal_cost": marginal_cost, "srm_p_value": srm_p, "srm": srm_p < 0.001,
        "confidence": 0.95, "computed_at": f"{window_end}T23:30:00+00:00",
        "heavy_tail": False, "note": ""}
    return tuple(values[name] for name in EXPERIMENT_RESULT.names)


def _credit_interval_rows(credit_rows: list[tuple]) -> list[tuple]:
    """Per model, day and channel: the credited conversions, revenue and share, with a 95 %
    normal-approximation interval of the share over the day's orders."""
    sums: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for model, _order, _i, _user, _ts, day, channel, _campaign, _t, credit, revenue, *_ in (
            credit_rows):
        sums[model, day, channel][0] += credit
        sums[model, day, channel][1] += revenue
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for (model, day, _channel), (credit, _revenue) in sums.items():
        totals[model, day] += credit
    rows = []
    for (model, day, channel), (credit, revenue) in sorted(sums.items()):
        total = totals[model, day]
        share = credit / total if total else 0.0
        half = 1.96 * (share * (1 - share) / total) ** 0.5 if total else 0.0
        low, high = max(share - half, 0.0), min(share + half, 1.0)
        rows.append((model, day, channel, credit, low * total, high * total, revenue,
                     revenue * (low / share if share else 1.0),
                     revenue * (high / share if share else 1.0), share, low, high, 0.95, 1000,
                     7, f"{day}T23:45:00+00:00"))
    return rows


def _store_experiments_and_control(warehouse: Warehouse, days: list[str]) -> None:
    last, week_before = days[-1], days[-8]
    older = [experiment_row(*row[:3], (2.90, 2.50, 3.30), None if row[4] is None
                            else (0.20, -0.35, 0.75), None if row[4] is None else 0.47, False,
                            row[7], 0.74, week_before) for row in EXPERIMENTS[:2]]
    warehouse.store(EXPERIMENT_RESULT,
                    older + [experiment_row(*row, last) for row in EXPERIMENTS])
    decided = [f"{day}T06:00:00Z" for day in days[-6:-3]]
    params = (("budget_change", '{"percent": 20, "requested_percent": 20}'),
              ("budget_change", '{"percent": 0, "requested_percent": 30}'),
              ("scale", '{"nodes": 2}'))
    decisions = [
        ("ctl-0001", "roi-floor-raise", "dv360-awareness", *params[0],
         "ROI 1.62 above 1.5 for 3 days", "executed", "", "auto", 0.82, decided[0]),
        ("ctl-0002", "roi-floor-raise", "meta-retargeting", *params[1],
         "ROI 1.71 above 1.5 for 3 days", "blocked", "max_change_per_week_percent", "auto",
         1.71, decided[1]),
        ("ctl-0003", "gpu-pressure", "ranking-pool", *params[2],
         "GPU utilisation 0.93 above 0.85", "awaiting_approval", "", "approval", 0.93,
         decided[2])]
    warehouse.store(CONTROL_DECISION, decisions)
    warehouse.store(CONTROL_ACTION, [
        ("act-0001", "ctl-0001", "webhook", "succeeded", 1, "200 OK",
         decided[0].replace("06:00:00", "06:00:02"), decided[1].replace("06:00:00", "06:00:02"))])
    warehouse.store(CONTROL_VERIFICATION, [
        ("act-0001", "success", 0.82, 1.05, 28.04878, "roi-floor-raise: verified",
         decided[1].replace("06:00:00", "07:00:00"))])
