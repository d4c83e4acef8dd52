"""The Spark backfill against the Flink jobs: the same spans through the attribution and ROI
jobs and through `seedance archive` + the backfill give the same rows (ids equal, numbers
within 1e-9 relative); reruns are identical, a failed run resumes, and journeys that start
before the first day keep their lookback. One local[2] Spark session for the module."""

from __future__ import annotations

import csv
import itertools
import json
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from jobs.backfill import BackfillRequest, run
from jobs.cli import main
from pipelines.backfill.archive import archive_topic, tables_by_date, write_tables
from pipelines.backfill.config import BackfillConfig, SparkConfig
from pipelines.backfill.spark import spark_session
from pipelines.flink.attribution.job import run_job
from pipelines.flink.roi.job import run_roi_job
from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, ensure_topics, producer
from pipelines.settings.job_config import StreamingJobConfig, load_config
from pipelines.sources.expected import valid_events
from pipelines.sources.generator import Plan, plan_events
from pipelines.store.loading import TopicLoader
from pipelines.store.warehouse import Warehouse
from schemas.records import Conversion, Touchpoint
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


@pytest.fixture(scope="module")
def streamed(kafka, flink, tmp_path_factory) -> Streamed:
    home = tmp_path_factory.mktemp("backfill")
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


def test_the_backfill_gives_the_flink_jobs_rows(streamed, spark, kafka, tmp_path):
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    config = warehouse_for(streamed, kafka, url)
    lines: list[str] = []
    summary = run(BackfillRequest(FIRST, LAST, backfill_config(streamed, tmp_path), config),
                  progress=lines.append, spark=spark)
    assert summary.written == sorted(DAYS)
    assert [line.split(" ")[0] for line in lines if line.startswith("[")] == \
        [f"[{i}/6]" for i in range(1, 7)]  # progress per day
    assert_same_rows(streamed, url)
    with Warehouse(url) as warehouse:
        # the range exercises what it must: touches before its first day, repeat buyers,
        # every model, GPU cost linked to conversions and left unlinked
        (early,) = warehouse.query("SELECT COUNT(*) FROM attribution_credits WHERE "
                                   "touch_ts_ms < conversion_ts_ms - ? AND "
                                   "conversion_date = ?", (DAY_MS, FIRST))[0]
        stages = {s for (s,) in warehouse.query("SELECT DISTINCT stage FROM attribution_credits")}
        models = {m for (m,) in warehouse.query("SELECT DISTINCT model FROM roi_daily")}
        (linked,) = warehouse.query("SELECT SUM(compute_cost) FROM roi_daily "
                                    "WHERE dimension = 'channel'")[0]
        kinds = {k for (k,) in warehouse.query("SELECT DISTINCT cost_kind FROM roi_unallocated")}
    assert early > 0 and {"new", "repeat"} <= stages
    assert models == set(config.attribution.models)
    assert linked > 0 and kinds == {"ad_spend", "compute"}


def write_events_csv(plan: Plan, path: Path) -> None:
    """The plan's touches and orders as `seedance attribute --format events` reads them."""
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["user_id", "timestamp", "channel", "campaign", "event_type",
                         "revenue", "order_id"])
        for e in valid_events(plan):
            if e.kind == "touchpoint":
                writer.writerow([e.user_id, e.ts_ns // 10**6, e.channel, e.campaign, "touch",
                                 "", ""])
            elif e.kind == "conversion":
                writer.writerow([e.user_id, e.ts_ns // 10**6, "", "", "conversion",
                                 repr(e.revenue), e.order_id])


def test_stream_backfill_and_seedance_attribute_give_identical_credits(streamed, kafka,
                                                                       tmp_path):
    """One job config: the credits the stream wrote, those the backfill (pandas engine)
    writes for DAYS and those `seedance attribute --config` writes for the same telemetry
    as an events file are the same rows."""
    job_yaml = tmp_path / "job.yaml"
    job_yaml.write_text(f"attribution:\n  refit_every_s: {REFIT_S}\n")
    settings = load_config(job_yaml).computation
    assert settings == streamed.config.computation  # the stream ran with these settings
    events = tmp_path / "events.csv"
    write_events_csv(plan_events(300, seed=11, late_fraction=0.0), events)
    credits_file = tmp_path / "credits.csv"
    assert main(["attribute", "--config", str(job_yaml), "--input", str(events),
                 "--out", str(tmp_path / "summary.csv"), "--credits", str(credits_file)]) == 0
    cli = {(r["model"], r["order_id"], int(r["touch_index"])): r
           for r in pd.read_csv(credits_file, keep_default_na=False).to_dict("records")}
    stream = {(r["model"], r["order_id"], r["touch_index"]): r for r in streamed.credits}
    assert len(cli) == len(pd.read_csv(credits_file)) and cli.keys() == stream.keys()
    assert {key[0] for key in cli} == set(settings.models)
    for key, row in cli.items():
        want = stream[key]
        assert (row["user_id"], row["conversion_ts_ms"], row["channel"], row["campaign"],
                row["touch_ts_ms"], row["stage"]) == (
            want["user_id"], want["conversion_ts_ms"], want["channel"], want["campaign"],
            want["touch_ts_ms"], want["stage"]), key
        assert close(row["credit"], want["credit"]) and close(row["revenue"], want["revenue"])

    url = f"sqlite:///{tmp_path / 'wh.db'}"
    config = warehouse_for(streamed, kafka, url)
    run(BackfillRequest(FIRST, LAST, backfill_config(streamed, tmp_path, engine="pandas"),
                        config), progress=lambda _: None)
    assert_same_rows(streamed, url)  # the backfill's rows of DAYS are the stream's


@pytest.mark.parametrize("models", [
    None,  # every model: the data-driven counts need the topic from its earliest offset
    ("first_click", "position_based", "time_decay"),  # read from a timestamp
])
def test_the_backfill_from_kafka_gives_the_same_rows(streamed, spark, kafka, tmp_path, models):
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    config = warehouse_for(streamed, kafka, url)
    if models:
        config = config.replace("attribution", models=models)
    run(BackfillRequest(FIRST, LAST, backfill_config(streamed, tmp_path, source="kafka"),
                        config, bootstrap=kafka), progress=print, spark=spark)
    assert_same_rows(streamed, url, models)


class Crash(RuntimeError):
    pass


def table_rows(url: str) -> dict[str, list[tuple]]:
    with Warehouse(url) as warehouse:
        return {table: sorted(warehouse.query(f"SELECT * FROM {table}"), key=repr) for table in
                ("attribution_credits", "roi_daily", "roi_unallocated")}


def test_a_failed_run_resumes_and_a_rerun_gives_identical_rows(streamed, spark, kafka, tmp_path,
                                                              warehouse_url):
    config = warehouse_for(streamed, kafka, warehouse_url)
    with Warehouse(warehouse_url) as warehouse:
        # a row the recomputation does not produce, on the third day and on the next
        for day in ("2026-10-22", "2026-10-26"):
            warehouse.execute(
                "INSERT INTO attribution_credits (model, order_id, touch_index, user_id, "
                "conversion_ts_ms, conversion_date, channel, campaign, touch_ts_ms, credit, "
                "revenue, currency, stage) VALUES ('stale', ?, 0, 'u', 0, ?, 'c', '', 0, 1, 1, "
                "'USD', 'new')", (f"x-{day}", day))
    request = BackfillRequest("2026-10-20", "2026-10-23", backfill_config(streamed, tmp_path),
                              config)

    def crash_on_the_third_day(day: str) -> None:
        if day == "2026-10-22":
            raise Crash(day)

    with pytest.raises(Crash):
        run(request, progress=print, spark=spark, before_commit=crash_on_the_third_day)

    def stale(url: str) -> list[str]:
        with Warehouse(url) as warehouse:
            return [d for (d,) in warehouse.query("SELECT conversion_date FROM "
                                                  "attribution_credits WHERE model = 'stale' "
                                                  "ORDER BY conversion_date")]

    with Warehouse(warehouse_url) as warehouse:
        finished = warehouse.query("SELECT day FROM backfill_runs ORDER BY day")
    assert finished == [("2026-10-20",), ("2026-10-21",)]
    assert stale(warehouse_url) == ["2026-10-22", "2026-10-26"]  # the third day rolled back

    lines: list[str] = []
    summary = run(request, progress=lines.append, spark=spark)
    assert summary.skipped == ["2026-10-20", "2026-10-21"]
    assert summary.written == ["2026-10-22", "2026-10-23"]
    assert [line[:10] for line in lines if line.endswith(", skipped")] == \
        ["2026-10-20", "2026-10-21"]
    assert stale(warehouse_url) == ["2026-10-26"]  # only the affected days were replaced
    first = table_rows(warehouse_url)

    again = run(request, progress=print, spark=spark)
    assert again.written == [] and len(again.skipped) == 4
    redone = run(BackfillRequest("2026-10-20", "2026-10-23", request.config, config,
                                 restart=True), progress=print, spark=spark)
    assert redone.written == ["2026-10-20", "2026-10-21", "2026-10-22", "2026-10-23"]
    assert table_rows(warehouse_url) == first  # identical, to the last bit


def test_journeys_that_start_before_the_first_day_keep_their_lookback(spark, tmp_path):
    d1 = int(datetime(2026, 10, 20, tzinfo=UTC).timestamp() * 1000)
    day, hour = DAY_MS, 3_600_000

    def touch(user: str, ts: int, channel: str) -> Touchpoint:
        return Touchpoint(user, ts, channel, f"{channel}-c", f"t{next(_ids)}", "")

    def order(user: str, ts: int, order_id: str) -> Conversion:
        return Conversion(user, ts, order_id, 100.0, "USD", f"t{next(_ids)}", "")

    archive = tmp_path / "archive"
    write_tables(archive, tables_by_date([
        touch("a", d1 - 20 * day, "email"), touch("a", d1 - 2 * day, "display"),
        order("a", d1 + hour, "oA"),  # both touches, weeks before the first day
        order("b", d1 - 60 * day, "oB0"), touch("b", d1 - day, "affiliate"),
        order("b", d1 + 2 * hour, "oB"),  # a repeat buyer
        order("c", d1 - 100 * day, "oC0"), order("c", d1 + 3 * hour, "oC"),  # a winback
        order("e", d1 - 200 * day, "oE0"), order("e", d1 + 4 * hour, "oE"),  # forgotten: new
        touch("f", d1 - 31 * day, "email"), order("f", d1 + 5 * hour, "oF"),  # outside lookback
        touch("g", d1 - 3 * day, "email"), order("g", d1 - hour, "oG"),  # the day before
    ]), "hand")
    config = load_config().replace("warehouse", url=f"sqlite:///{tmp_path / 'wh.db'}")
    config = config.replace("journey", winback_days=90.0, history_days=150.0)
    config = config.replace("attribution", models=("first_click", "linear"))
    backfill = BackfillConfig(work_dir=str(tmp_path / "work")).replace("archive",
                                                                      path=str(archive))
    run(BackfillRequest(FIRST, FIRST, backfill, config), progress=print, spark=spark)
    with Warehouse(config.warehouse.url) as warehouse:
        rows = warehouse.query("SELECT model, order_id, channel, credit, stage "
                               "FROM attribution_credits ORDER BY model, order_id, touch_index")
    assert rows == [
        ("first_click", "oA", "email", 1.0, "new"),
        ("first_click", "oB", "affiliate", 1.0, "repeat"),
        ("first_click", "oC", "(unattributed)", 1.0, "winback"),
        ("first_click", "oE", "(unattributed)", 1.0, "new"),
        ("first_click", "oF", "(unattributed)", 1.0, "new"),
        ("linear", "oA", "email", 0.5, "new"), ("linear", "oA", "display", 0.5, "new"),
        ("linear", "oB", "affiliate", 1.0, "repeat"),
        ("linear", "oC", "(unattributed)", 1.0, "winback"),
        ("linear", "oE", "(unattributed)", 1.0, "new"),
        ("linear", "oF", "(unattributed)", 1.0, "new")]



def test_spark_and_flink_in_one_process_each_keep_their_java_errors(spark, flink, job_config):
    """Each engine installs its Java-exception handler for the whole process, and each
    handler asks its own JVM about the failed call; the one installed last must not see
    the other engine's errors. Flink's errors stay Flink's (PyFlink's own translation, and
    the NoSuchFieldException it catches itself), Spark's become AnalysisException, in
    whichever order the handlers went in."""
    from pyflink.table import StreamTableEnvironment
    from pyflink.util.exceptions import DatabaseNotExistException, install_exception_handler
    from pyflink.util.java_utils import get_field_value
    from pyspark.sql import SparkSession
    from pyspark.sql.utils import AnalysisException

    SparkSession(spark.sparkContext)  # as any new session does: Spark's handler goes in last
    env = flink.environment(job_config)
    catalog = StreamTableEnvironment.create(env).get_catalog("default_catalog")
    with pytest.raises(DatabaseNotExistException, match="no_such_database"):
        catalog.get_database("no_such_database")
    # PyFlink finds this field by catching NoSuchFieldException up the class hierarchy
    assert get_field_value(env._j_stream_execution_environment, "transformations").size() == 0

    install_exception_handler()  # as a fresh Flink gateway does: Flink's handler goes in last
    again = spark_session(SparkConfig(master="local[2]"))
    assert again is spark
    with pytest.raises(AnalysisException, match="no_such_column"):
        spark.sql("select no_such_column").collect()
