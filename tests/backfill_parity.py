"""The Flink jobs' rows beside the backfill's, shared by the backfill tests
(tests/integration/test_backfill.py: local[*] in the test process;
tests/integration/test_spark_standalone.py: spark-submit on a standalone cluster): a
generated population through the real attribution and ROI jobs and `seedance archive` of
the same spans (`stream_and_archive`), the warehouse's cost inputs (`warehouse_for`), and
the comparison of a warehouse's rows of DAYS with the stream's (`assert_same_rows`)."""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pipelines.backfill.archive import archive_topic
from pipelines.backfill.config import BackfillConfig
from pipelines.flink.attribution.job import run_job
from pipelines.flink.roi.job import run_roi_job
from pipelines.flink.runtime.cluster import LocalFlinkCluster
from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, ensure_topics, producer
from pipelines.settings.job_config import StreamingJobConfig, load_config
from pipelines.sources.generator import Plan, plan_events
from pipelines.store.loading import TopicLoader
from pipelines.store.warehouse import Warehouse
from schemas.rows import GPU_CALL_COST
from tests.job_io import messages, publish
from udfs.periods import DAY_MS, day_of

FIRST, LAST = "2026-10-20", "2026-10-25"  # the plan runs 2026-10-01 .. 2026-11-14
DAYS = {f"2026-10-{d}" for d in range(20, 26)}
REFIT_S = 6 * 3600.0  # several data-driven refits a day
_ids = itertools.count()


@dataclass
class Streamed:
    """What the Flink jobs made of the plan, and the archive of the same spans."""

    config: StreamingJobConfig
    archive: Path
    credits: list[dict]
    roi: dict[tuple, dict]  # latest row per key of the roi topic


def gpu_cost(trace_id: str, end_ms: int, cost: float) -> dict:
    row = dict.fromkeys(GPU_CALL_COST.names, "")
    row.update(kind="call", gpu_uuid="GPU-1", interval_end_ms=end_ms, trace_id=trace_id,
               span_id=f"{next(_ids):016x}", interval_start_ms=end_ms - 60_000,
               gpu_seconds=1.0, cost_usd=cost, interval_cost_usd=cost, price_known=True)
    return row


def spend_of(plan: Plan) -> list[dict]:
    """Daily spend per campaign with touches, a campaign nothing converts on, and a row in
    another currency (which both sides leave out)."""
    days: dict[tuple[str, str], int] = {}
    for e in plan.events:
        if e.kind == "touchpoint" and e.campaign:
            key = (e.campaign, day_of(e.ts_ns // 10**6))
            days[key] = days.get(key, 0) + 1
    rows = [{"platform": "ads", "account": "1", "campaign": campaign, "day": day,
             "amount": round(2.5 * count, 2), "currency": "USD"}
            for (campaign, day), count in sorted(days.items())]
    rows.append({"platform": "ads", "account": "1", "campaign": "ghost", "day": FIRST,
                 "amount": 7.0, "currency": "USD"})
    rows.append({"platform": "ads", "account": "1", "campaign": "ghost", "day": LAST,
                 "amount": 3.0, "currency": "EUR"})
    return rows


def send(kafka: str, topic: str, rows: list[dict]) -> None:
    out = producer(kafka)
    for row in rows:
        out.send(topic, json.dumps(row).encode())
    out.flush()
    out.close()


def stream_and_archive(kafka: str, flink: LocalFlinkCluster, home: Path) -> Streamed:
    """The plan (300 users, seed 11) through the attribution and ROI jobs on `flink`, with
    spend and GPU costs, and archived under `home` (a module fixture's work: ~1 min)."""
    topics = {name: f"backfill-{name}-{next(_ids)}" for name in (
        "spans", "credits", "dlq", "late", "conversions", "spend", "roi-dlq", "roi", "gpu")}
    # the sample's records carry their arrival (the spans topic keeps CreateTime)
    ensure_topics(kafka, [name for key, name in topics.items() if key != "spans"])
    ensure_topics(kafka, [topics["spans"]], config=SAMPLE_SPANS_TOPIC)
    config = load_config()
    config = config.replace("topics", spans=topics["spans"], credits=topics["credits"],
                            dead_letter=topics["dlq"], late=topics["late"],
                            conversions=topics["conversions"], ad_spend=topics["spend"],
                            roi_dead_letter=topics["roi-dlq"], roi=topics["roi"])
    config = config.replace("input", bounded=True, starting_offsets="earliest",
                            group_id=f"backfill-{next(_ids)}")
    config = config.replace("flink", checkpoint_interval_s=1.0,
                            checkpoint_dir=str(home / "checkpoints"))
    config = config.replace("attribution", refit_every_s=REFIT_S)
    config = config.replace("gpu", costs_topic=topics["gpu"])
    # no late events: the stream sets them aside, a backfill takes them (docs/backfill.md)
    plan = plan_events(300, seed=11, late_fraction=0.0)
    publish(kafka, config.topics.spans, plan)
    archive_topic(kafka, config.topics.spans, home / "archive", batch_messages=40)
    run_job(config, kafka, env=flink.environment(config))

    # GPU cost on the traces of conversions around the range (some claimed from after it,
    # some a day before their conversion), on a trace nobody claims, and outside any trace
    rng = random.Random(5)
    costs = [gpu_cost("f" * 32, int(datetime(2026, 10, 21, 5, tzinfo=UTC).timestamp() * 1000),
                      3.0),
             gpu_cost("", int(datetime(2026, 10, 24, 9, tzinfo=UTC).timestamp() * 1000), 2.0)]
    for row in messages(kafka, config.topics.conversions):
        day = day_of(row["conversion_ts_ms"])
        if "2026-10-16" <= day <= "2026-10-29":
            for trace in row["trace_ids"][:3]:
                costs.append(gpu_cost(trace, row["conversion_ts_ms"] - rng.randint(0, DAY_MS),
                                      round(rng.uniform(0.01, 1.0), 4)))
    send(kafka, config.gpu.costs_topic, costs)
    send(kafka, config.topics.ad_spend, spend_of(plan))
    run_roi_job(config, kafka, env=flink.environment(config))

    roi = final_reports(messages(kafka, config.topics.roi))
    credits = messages(kafka, config.topics.credits)  # the rows of every table message
    return Streamed(config, home / "archive", credits, roi)


def final_reports(rows: list[dict]) -> dict[tuple, dict]:
    """The roi topic read as its consumers read it, a changelog: the latest row per key.

    A day is reported again when late input arrives (data-driven credits come when their
    refit period closes; a source that idles lets the watermark pass a day before all its
    credits are in), and a later report may start with keys the earlier one lacked, so
    reports cannot be told apart by repeated keys. Keys of `roi` rows only grow; an
    `unallocated` key a later report drops comes again with amount 0."""
    return {(row["kind"], row.get("model"), row["day"], row.get("dimension"),
             row.get("cost_kind"), row.get("key", row.get("order_id", row.get("part")))): row
            for row in rows}


def warehouse_for(streamed: Streamed, kafka: str, url: str) -> StreamingJobConfig:
    """The stream's config pointed at `url`, holding the spend and GPU costs the ROI job
    read (the backfill's cost inputs)."""
    config = streamed.config.replace("warehouse", url=url)
    with Warehouse(url) as warehouse:
        loader = TopicLoader(warehouse)
        loader.load_spend(kafka, config.topics.ad_spend, config.roi.currency)
        loader.load_gpu_costs(kafka, config.gpu.costs_topic)
    return config


def backfill_config(streamed: Streamed, tmp_path: Path, **changes) -> BackfillConfig:
    return BackfillConfig(work_dir=str(tmp_path / "work")).replace(
        "archive", path=str(streamed.archive)).replace(**changes)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def assert_same_rows(streamed: Streamed, url: str,
                     models: tuple[str, ...] | None = None) -> None:
    """The warehouse's rows of DAYS are the Flink jobs' rows of those days (of `models`:
    each model's rows depend on no other model)."""
    models = models or streamed.config.attribution.models
    expected = {(r["model"], r["order_id"], r["touch_index"]): r for r in streamed.credits
                if day_of(r["conversion_ts_ms"]) in DAYS and r["model"] in models}
    with Warehouse(url) as warehouse:
        credits = warehouse.query(
            "SELECT model, order_id, touch_index, user_id, conversion_ts_ms, channel, campaign, "
            "touch_ts_ms, credit, revenue, currency, stage FROM attribution_credits "
            "WHERE conversion_date >= ? AND conversion_date <= ?", (FIRST, LAST))
        roi = warehouse.query(
            "SELECT model, day, dimension, key, conversions, revenue, ad_spend, compute_cost, "
            "roi, currency FROM roi_daily WHERE day >= ? AND day <= ?", (FIRST, LAST))
        unallocated = warehouse.query(
            "SELECT model, day, cost_kind, key, amount FROM roi_unallocated "
            "WHERE day >= ? AND day <= ?", (FIRST, LAST))
    got = {row[:3]: row for row in credits}
    assert len(got) == len(credits) and got.keys() == expected.keys() and got
    for key, row in got.items():
        want = expected[key]
        assert row[3:8] == (want["user_id"], want["conversion_ts_ms"], want["channel"],
                            want["campaign"], want["touch_ts_ms"]), key
        assert (row[10], row[11]) == (want["currency"], want["stage"]), key
        assert close(row[8], want["credit"]) and close(row[9], want["revenue"]), key

    streamed_roi = {k: r for k, r in streamed.roi.items()
                    if k[2] in DAYS and k[0] == "roi" and k[1] in models}
    got_roi = {("roi", r[0], r[1], r[2], None, r[3]): r for r in roi}
    assert got_roi.keys() == streamed_roi.keys() and got_roi
    for key, row in got_roi.items():
        want = streamed_roi[key]
        for value, name in zip(row[4:8], ("conversions", "revenue", "ad_spend",
                                          "compute_cost"), strict=True):
            assert close(value, want[name]), (key, name)
        assert (row[8] is None) == (want["roi"] is None), key
        assert row[8] is None or close(row[8], want["roi"]), key
    # an amount of 0 withdraws a key an earlier report of the day had
    streamed_left = {k: r["amount"] for k, r in streamed.roi.items()
                     if k[2] in DAYS and k[0] == "unallocated" and k[1] in models
                     and r["amount"] != 0}
    got_left = {("unallocated", r[0], r[1], None, r[2], r[3]): r[4] for r in unallocated}
    assert got_left.keys() == streamed_left.keys()
    assert all(close(got_left[k], streamed_left[k]) for k in got_left)
    # each order's revenue and allocated cost (the experiments' cost model, last_click)
    if streamed.config.experiment_cost_model not in models:
        return  # a backfill of other models allocates under another one
    with Warehouse(url) as warehouse:
        orders = warehouse.query("SELECT model, day, order_id, revenue, ad_spend, compute_cost "
                                 "FROM order_costs WHERE day >= ? AND day <= ?", (FIRST, LAST))
    streamed_orders = {k: r for k, r in streamed.roi.items()
                       if k[2] in DAYS and k[0] == "order_cost" and k[1] in models}
    got_orders = {("order_cost", r[0], r[1], None, None, r[2]): r for r in orders}
    assert got_orders.keys() == streamed_orders.keys() and got_orders
    for key, row in got_orders.items():
        want = streamed_orders[key]
        assert all(close(value, want[name]) for value, name in
                   zip(row[3:], ("revenue", "ad_spend", "compute_cost"), strict=True)), key


def table_rows(url: str) -> dict[str, list[tuple]]:
    with Warehouse(url) as warehouse:
        return {table: sorted(warehouse.query(f"SELECT * FROM {table}"), key=repr) for table in
                ("attribution_credits", "roi_daily", "roi_unallocated")}

