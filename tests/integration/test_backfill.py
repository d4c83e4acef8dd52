"""The Spark backfill against the Flink jobs: the same spans through the attribution and ROI
jobs and through `seedance archive` + the backfill give the same rows (ids equal, numbers
within 1e-9 relative); reruns are identical, a failed run resumes, and journeys that start
before the first day keep their lookback. One local[2] Spark session for the module."""

from __future__ import annotations

import csv
import itertools
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from jobs.backfill import BackfillRequest, run
from jobs.cli import main
from pipelines.backfill.archive import tables_by_date, write_tables
from pipelines.backfill.config import BackfillConfig, SparkConfig
from pipelines.backfill.spark import spark_session
from pipelines.settings.job_config import load_config
from pipelines.sources.expected import valid_events
from pipelines.sources.generator import Plan, plan_events
from pipelines.store.warehouse import Warehouse
from schemas.records import Conversion, Touchpoint
from tests.backfill_parity import (
    DAYS,
    FIRST,
    LAST,
    REFIT_S,
    Streamed,
    assert_same_rows,
    backfill_config,
    close,
    stream_and_archive,
    table_rows,
    warehouse_for,
)
from udfs.periods import DAY_MS

_ids = itertools.count()


@pytest.fixture(scope="module")
def streamed(kafka, flink, tmp_path_factory) -> Streamed:
    return stream_and_archive(kafka, flink, tmp_path_factory.mktemp("backfill"))


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
