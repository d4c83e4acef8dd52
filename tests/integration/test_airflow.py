"""The schedules under a real Airflow (3.3, with the apache-spark provider 6.3; the dev set-up
installs them in .cache/airflow-venv, beside the project's environment): Airflow's DagBag
loads jobs/schedules/ without an import error, and `DAG.test` runs the backfill DAG (its
rendered spark-submit on local[*]) and the reconciliation DAG (its rendered `seedance
reconcile`) against a PostgreSQL warehouse -- days replaced, reruns, restarts, and failed
tries that Airflow retries once the cause is gone. tests/integration/airflow_run.py is the
side that runs in Airflow's Python."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg import sql

from jobs.cli import main
from pipelines.reconcile.store import ReconcileStore
from pipelines.sources.generator import plan_events
from pipelines.store.sinks import CreditsSink
from pipelines.store.warehouse import Warehouse
from tests.reference import archive_plan

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_VENV = ROOT / ".cache" / "airflow-venv"
PROJECT_BIN = Path(sys.executable).parent  # the project's .venv: seedance, spark-submit
_databases = count()


class Airflow:
    """The driver (airflow_run.py) in Airflow's Python, with a throw-away AIRFLOW_HOME."""

    def __init__(self, home: Path) -> None:
        python = AIRFLOW_VENV / "bin" / "python"
        if not python.exists():
            pytest.fail(f"no Airflow in {AIRFLOW_VENV}: run `make setup-dev`")
        self.home = home
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AIRFLOW", "SEEDANCE_", "PYSPARK_"))
               and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        self.env = {**env, "AIRFLOW_HOME": str(home),
                    "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "jobs" / "schedules"),
                    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                    # the one connection and the Variables docs/backfill.md tells to set
                    "AIRFLOW_CONN_SEEDANCE_SPARK": json.dumps({"conn_type": "spark",
                                                              "host": "local[*]"}),
                    "AIRFLOW_VAR_SEEDANCE_HOME": str(ROOT),
                    "AIRFLOW_VAR_SEEDANCE_BIN": str(PROJECT_BIN / "seedance"),
                    # workers find spark-submit on their PATH (pyspark's, in the project's venv)
                    "PATH": f"{PROJECT_BIN}:{os.environ['PATH']}"}
        subprocess.run([str(AIRFLOW_VENV / "bin" / "airflow"), "db", "migrate"], env=self.env,
                       check=True, capture_output=True, timeout=300)
        self.process = subprocess.Popen(
            [str(python), str(Path(__file__).with_name("airflow_run.py"))], env=self.env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.runs = count()

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self.process.stdout.readline() or '{"error": '
                                            '"the driver died"}')
        assert "error" not in answer, answer["error"]
        return answer

    def run(self, dag_id: str, due: str, variables: dict[str, str],
            conf: dict[str, Any] | None = None, on_retry: tuple[str, ...] = ()
            ) -> tuple[dict[str, Any], str]:
        """One run of `dag_id` due at `due` (its logical date; the same `due` gives the same
        run id) with these Airflow Variables, and its log."""
        log = self.home / f"run-{next(self.runs)}.log"
        answer = self.ask({"dag_id": dag_id, "logical_date": due, "run_after": due,
                           "variables": variables, "conf": conf, "on_retry": list(on_retry),
                           "log": str(log)})
        return answer, log.read_text()

    def close(self) -> None:
        assert self.process.stdin
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    driver = Airflow(tmp_path_factory.mktemp("airflow-home"))
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture
def database(postgres: str) -> Iterator[str]:
    """A fresh database on the session's PostgreSQL server, dropped afterwards."""
    name = f"airflow_{next(_databases)}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"{postgres.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(postgres, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                         .format(sql.Identifier(name)))


def connections(url: str, allowed: bool) -> str:
    """A shell command that lets the database of `url` accept connections or refuse them
    (the warehouse down for maintenance), as its owner would."""
    server, name = url.rsplit("/", 1)
    code = (f"import psycopg; psycopg.connect({f'{server}/postgres'!r}, autocommit=True)"
            f".execute('ALTER DATABASE {name} ALLOW_CONNECTIONS {str(allowed).lower()}')")
    return shlex.join([sys.executable, "-c", code])


def one_line(log: str, text: str) -> str:
    """The log line holding `text` (the error and what it says all on it)."""
    lines = [line for line in log.splitlines() if text in line]
    assert lines, f"{text!r} is not in the task log:\n{log[-3000:]}"
    return lines[0]


def test_airflow_loads_both_dags_with_the_settings_they_document(airflow):
    bag = airflow.ask({"env": {}})
    assert bag["import_errors"] == {}
    backfill, reconcile = bag["dags"]["seedance_backfill"], bag["dags"]["seedance_reconcile"]
    assert (backfill["schedule"], backfill["catchup"], backfill["max_active_runs"]) == \
        ("30 3 * * *", True, 1)
    assert (reconcile["schedule"], reconcile["catchup"], reconcile["max_active_runs"]) == \
        ("0 6 * * *", False, 1)
    submit, bash = backfill["tasks"]["backfill"], reconcile["tasks"]["reconcile"]
    assert submit["operator"] == \
        "airflow.providers.apache.spark.operators.spark_submit.SparkSubmitOperator"
    assert bash["operator"] == "airflow.providers.standard.operators.bash.BashOperator"
    assert (submit["retries"], submit["retry_delay_s"]) == (2, 600)
    assert (bash["retries"], bash["retry_delay_s"]) == (2, 900)
    assert submit["settings"]["conn_id"] == "seedance_spark"
    assert submit["settings"]["driver_memory"] == "6g"  # local[*]: one JVM on 2 cores
    assert submit["settings"]["executor_memory"] is None
    assert submit["templates"]["conf"]["spark.sql.session.timeZone"] == "UTC"
    assert backfill["params"] == {"restart": False}
    # SEEDANCE_SPARK_PROFILE=cluster where the scheduler parses it: executors, the zip
    cluster = airflow.ask({"env": {"SEEDANCE_SPARK_PROFILE": "cluster"}})
    on_cluster = cluster["dags"]["seedance_backfill"]["tasks"]["backfill"]
    assert (on_cluster["settings"]["executor_memory"], on_cluster["settings"]["executor_cores"],
            on_cluster["settings"]["num_executors"]) == ("8g", 4, 8)
    assert on_cluster["templates"]["conf"]["spark.archives"].endswith("/seedance.zip#seedance")
    assert not on_cluster["templates"]["py_files"]  # the driver reads the checkout's files
    assert on_cluster["templates"]["conf"]["spark.executorEnv.PYTHONPATH"] == "seedance"
    # a retry resumes the run; a run cleared in Airflow (clear_number > 0) recomputes
    assert "clear_number" in bag["dag_run_fields"]
    assert submit["restart_flag"] == {"0": "--no-restart", "1": "--restart"}


def write_deployment(folder: Path, warehouse: str) -> Path:
    """A small archive (2026-10-01 onwards), the stream's config and the backfill's."""
    archive_plan(plan_events(80, seed=2), folder / "archive")
    (folder / "streaming.yaml").write_text(yaml.safe_dump({
        "attribution": {"models": ["last_click", "linear"]},
        "warehouse": {"url": warehouse}}))
    config = folder / "backfill.yaml"
    config.write_text(yaml.safe_dump({
        "streaming_config": "streaming.yaml", "engine": "spark",
        "work_dir": str(folder / "work"), "archive": {"path": str(folder / "archive")}}))
    return config


TABLES = {"attribution_credits": "conversion_date", "roi_daily": "day",
          "roi_unallocated": "day"}


def day_rows(url: str, day: str) -> dict[str, list[tuple]]:
    with Warehouse(url) as wh:
        return {table: sorted(wh.query(f"SELECT * FROM {table} WHERE {column} = ?", (day,)),
                              key=repr) for table, column in TABLES.items()}


def make_stale(url: str, day: str) -> None:
    """What a backfill of `day` must replace: its credits gone, its ROI rows off by one."""
    with Warehouse(url) as wh:
        wh.execute("DELETE FROM attribution_credits WHERE conversion_date = ?", (day,))
        wh.execute("UPDATE roi_daily SET revenue = revenue + 1 WHERE day = ?", (day,))


def test_backfill_dag_replaces_the_day_before_yesterday_resumes_and_restarts(
        airflow, database, tmp_path):
    config = write_deployment(tmp_path, database)
    variables = {"seedance_backfill_config": str(config)}
    # the rows of four days as `seedance backfill` computes them by hand (the pandas
    # engine: the same functions as Spark's, in one process)
    days = ("2026-10-10", "2026-10-11", "2026-10-12", "2026-10-13")
    assert main(["backfill", "--from", days[0], "--to", days[-1], "--config", str(config),
                 "--engine", "pandas", "--run-id", "by hand"]) == 0
    by_hand = {day: day_rows(database, day) for day in days}
    assert all(by_hand[day]["roi_daily"] for day in days[1:])
    for day in days[1:]:
        make_stale(database, day)
    stale = day_rows(database, "2026-10-13")

    # The run due on 13 October recomputes the 11th. Its first try finds the warehouse
    # down, its second the archive without the day; each fails on one line, and Airflow's
    # retry succeeds once that is fixed.
    moves = [(tmp_path / "archive" / kind / "date=2026-10-11", tmp_path / "aside" / kind)
             for kind in ("touchpoints", "conversions")]
    for folder, aside in moves:
        aside.mkdir(parents=True)
        folder.rename(aside / folder.name)
    restore = " && ".join(f"mv {aside / folder.name} {folder}" for folder, aside in moves)
    subprocess.run(connections(database, allowed=False), shell=True, check=True)
    first, log = airflow.run("seedance_backfill", "2026-10-13T03:30:00+00:00", variables,
                             on_retry=(connections(database, allowed=True), restore))
    assert first["state"] == "success", log[-3000:]
    assert first["tasks"]["backfill"]["try_number"] == 3
    assert "is not currently accepting connections" in one_line(
        log, "backfill: error: cannot connect to the warehouse")
    assert "Nothing was replaced" in one_line(log, "backfill: error: the archive")
    assert first["rendered"]["backfill"]["application_args"] == [
        "--from", "2026-10-11", "--to", "2026-10-11", "--run-id",
        "manual__2026-10-13T03:30:00+00:00", "--config", str(config), "--no-restart"]
    assert "--master local[*]" in one_line(log, "Spark-Submit cmd:")
    assert day_rows(database, "2026-10-11") == by_hand["2026-10-11"]

    # the next day's run recomputes the 12th and nothing else
    second, log = airflow.run("seedance_backfill", "2026-10-14T03:30:00+00:00", variables)
    assert second["state"] == "success", log[-3000:]
    assert "[1/1] 2026-10-12:" in log
    assert day_rows(database, "2026-10-12") == by_hand["2026-10-12"]
    assert day_rows(database, "2026-10-10") == by_hand["2026-10-10"]
    assert day_rows(database, "2026-10-13") == stale

    # the same run id again skips the day it wrote; conf {"restart": true} recomputes it
    make_stale(database, "2026-10-12")
    again, log = airflow.run("seedance_backfill", "2026-10-14T03:30:00+00:00", variables)
    assert again["run_id"] == second["run_id"] and again["state"] == "success"
    assert "every day already finished" in log
    assert day_rows(database, "2026-10-12") != by_hand["2026-10-12"]
    restart, log = airflow.run("seedance_backfill", "2026-10-14T03:30:00+00:00", variables,
                               conf={"restart": True})
    assert restart["state"] == "success", log[-3000:]
    assert restart["rendered"]["backfill"]["application_args"][-1] == "--restart"
    assert day_rows(database, "2026-10-12") == by_hand["2026-10-12"]
    assert day_rows(database, "2026-10-13") == stale


DAY = "2025-03-01"
ACCOUNT = "1234567890"
T_1500Z = 1_740_841_200_000  # 2025-03-01T15:00Z, 10:00 in New York: the same day there


def seed_reconciliation(url: str, folder: Path) -> Path:
    """Our side: 100 last-click orders of campaign 111 on 1 March and its 500 USD of spend;
    Google's report: the spend, and 93 conversions (drift +7.5 %: one alert). Returns the
    reconciliation config: the report among its billing files, alerts to the log."""
    credits = [json.dumps({"model": "last_click", "order_id": f"a{i}", "user_id": f"u{i}",
                           "conversion_ts_ms": T_1500Z + i * 1000, "touch_index": 0,
                           "channel": "search", "campaign": "111",
                           "touch_ts_ms": T_1500Z - 3_600_000, "credit": 1.0, "revenue": 50.0,
                           "currency": "USD", "stage": "new"}).encode() for i in range(100)]
    with Warehouse(url) as wh:
        CreditsSink(wh).write(credits)
        wh.upsert("ad_spend", ("platform", "account", "campaign", "day", "amount", "currency"),
                  4, [("google_ads", ACCOUNT, "111", DAY, 500.0, "USD")])
    report = folder / "google.json"
    report.write_text(json.dumps([{"results": [{
        "customer": {"id": ACCOUNT, "currencyCode": "USD", "timeZone": "America/New_York"},
        "campaign": {"id": "111"}, "segments": {"date": DAY},
        "metrics": {"costMicros": str(500_000_000), "conversions": 93.0,
                    "conversionsValue": 5000.0}}]}]))
    config = folder / "reconcile.yaml"
    config.write_text(yaml.safe_dump({"warehouse": {"url": url}, "alerts": {"topic": ""},
                                      "billing": {"files": [f"google_ads:{report}"]}}))
    return config


def reconciled(url: str) -> tuple[list[tuple], list[tuple]]:
    with ReconcileStore(url) as store:
        alerts = sorted((a["scope"], a["entity"], a["day"], a["metric"], a["kind"])
                        for a in store.alerts())
        return store.daily_rows("2025-02-26", "2025-03-01"), alerts


def test_reconcile_dag_reconciles_the_three_days_before_and_retries_a_failed_try(
        airflow, database, tmp_path):
    variables = {"seedance_reconcile_config": str(seed_reconciliation(database, tmp_path))}
    # the warehouse stays down: every try fails on one line, and so does the run
    subprocess.run(connections(database, allowed=False), shell=True, check=True)
    failed, log = airflow.run("seedance_reconcile", "2025-03-02T06:00:00+00:00", variables)
    assert failed["state"] == "failed"
    assert failed["tasks"]["reconcile"] == {"state": "failed", "try_number": 3}
    assert "is not currently accepting connections" in one_line(
        log, "seedance: error: cannot connect to the warehouse")

    # down on the first try, back before the retry: the run due at 06:00 on 2 March
    # reconciles 27 February to 1 March and raises the drift alert
    run, log = airflow.run("seedance_reconcile", "2025-03-02T06:00:00+00:00", variables,
                           on_retry=(connections(database, allowed=True),))
    assert run["state"] == "success", log[-3000:]
    assert run["tasks"]["reconcile"]["try_number"] == 2
    command = run["rendered"]["reconcile"]["bash_command"]
    assert command == (f"{PROJECT_BIN / 'seedance'} reconcile --from 2025-02-27 --to "
                       f"{DAY} --config {variables['seedance_reconcile_config']}")
    assert "ALERT campaign google_ads/1234567890/111 2025-03-01 conversions: drift +7.53%" in log
    assert "alerts: 2 opened, 0 resolved" in log  # the campaign's, and the day's total
    rows, alerts = reconciled(database)
    assert alerts == [("campaign", "111", DAY, "conversions", "open"),
                      ("total", "*", DAY, "conversions", "open")]
    # the same command by hand finds the days reconciled: the same rows, no new alert
    assert main(shlex.split(command)[1:]) == 0
    assert reconciled(database) == (rows, alerts)
