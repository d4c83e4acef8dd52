"""`seedance backfill` on the single-process engine (no JVM) and the Airflow DAG's wiring:
days replaced exactly, progress per day, resume, and a DAG whose command line the entry
point accepts."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sqlite3
import sys
import types
from datetime import date, timedelta
from pathlib import Path

import pytest
import yaml

from jobs.backfill import add_backfill_arguments, day_range
from jobs.cli import main
from pipelines.sources.generator import plan_events
from tests.reference import archive_plan

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    """A backfill config over a small archive, its stream config and an empty warehouse."""
    archive_plan(plan_events(80, seed=2), tmp_path / "archive")
    (tmp_path / "streaming.yaml").write_text(yaml.safe_dump({
        "attribution": {"models": ["last_click", "linear", "markov"], "refit_every_s": 86400},
        "warehouse": {"url": f"sqlite:///{tmp_path / 'wh.db'}"}}))
    config = tmp_path / "backfill.yaml"
    config.write_text(yaml.safe_dump({
        "streaming_config": "streaming.yaml",  # relative to this file
        "engine": "pandas", "archive": {"path": str(tmp_path / "archive")}}))
    return config


def rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(sql).fetchall()


def test_the_command_replaces_exactly_the_days_and_resumes(deployment, capsys, monkeypatch):
    db = deployment.parent / "wh.db"
    args = ["backfill", "--from", "2026-10-10", "--to", "2026-10-12", "--config",
            str(deployment)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert re.findall(r"^\[(\d)/3\] (\S+):", out, re.M) == [
        ("1", "2026-10-10"), ("2", "2026-10-11"), ("3", "2026-10-12")]
    dates = rows(db, "SELECT DISTINCT conversion_date FROM attribution_credits ORDER BY 1")
    assert dates and set(dates) <= {("2026-10-10",), ("2026-10-11",), ("2026-10-12",)}
    assert rows(db, "SELECT DISTINCT model FROM roi_daily ORDER BY 1") == \
        [("last_click",), ("linear",), ("markov",)]
    first = rows(db, "SELECT * FROM attribution_credits ORDER BY 1, 2, 3")

    # the next day was written by someone else: a backfill of the first three leaves it
    with sqlite3.connect(db) as connection:
        connection.execute("INSERT INTO roi_daily VALUES ('x', '2026-10-13', 'channel', 'k', 1, "
                           "1, 0, 0, NULL, 'USD', NULL, NULL)")
    assert main(args) == 0  # same run id: every day is done already
    assert "every day already finished" in capsys.readouterr().out
    assert main([*args, "--restart"]) == 0
    assert "[3/3] 2026-10-12" in capsys.readouterr().out
    assert rows(db, "SELECT * FROM attribution_credits ORDER BY 1, 2, 3") == first
    assert rows(db, "SELECT day FROM roi_daily WHERE model = 'x'") == [("2026-10-13",)]
    assert rows(db, "SELECT run_id, day, engine FROM backfill_runs ORDER BY day") == [
        ("2026-10-10..2026-10-12", d, "pandas") for d in ("2026-10-10", "2026-10-11",
                                                          "2026-10-12")]


def test_bad_ranges_are_refused_with_the_reason(deployment, capsys):
    assert main(["backfill", "--from", "2026-10-12", "--to", "2026-10-10", "--config",
                 str(deployment)]) == 2
    assert "before --from" in capsys.readouterr().err
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        day_range("10/10/2026", "2026-10-11")


def test_kafka_is_read_by_the_spark_engine_only(deployment, capsys):
    assert main(["backfill", "--from", "2026-10-10", "--to", "2026-10-10", "--config",
                 str(deployment), "--source", "kafka", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "pandas engine reads the archive only" in capsys.readouterr().err


class _Recorder:
    """Stands in for an Airflow class: keeps what it was built with."""

    built: list[dict[str, object]] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        type(self).built.append(kwargs)

    def __enter__(self) -> _Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def load_dag(monkeypatch: pytest.MonkeyPatch, profile: str) -> tuple[dict, dict]:
    dag_class = type("DAG", (_Recorder,), {"built": []})
    operator_class = type("SparkSubmitOperator", (_Recorder,), {"built": []})
    modules = {"airflow": types.ModuleType("airflow"),
               "airflow.providers": types.ModuleType("airflow.providers"),
               "airflow.providers.apache": types.ModuleType("airflow.providers.apache"),
               "airflow.providers.apache.spark": types.ModuleType("spark"),
               "airflow.providers.apache.spark.operators": types.ModuleType("operators"),
               "airflow.providers.apache.spark.operators.spark_submit":
                   types.ModuleType("spark_submit")}
    modules["airflow"].DAG = dag_class  # type: ignore[attr-defined]
    modules["airflow.providers.apache.spark.operators.spark_submit"] \
        .SparkSubmitOperator = operator_class  # type: ignore[attr-defined]
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("SEEDANCE_SPARK_PROFILE", profile)
    spec = importlib.util.spec_from_file_location(
        "backfill_dag", ROOT / "jobs" / "schedules" / "backfill_dag.py")
    assert spec and spec.loader
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    (dag,), (operator,) = dag_class.built, operator_class.built
    return dag, operator


def render(value: str, restart: bool = False) -> str:
    """The DAG's Jinja with the values Airflow would give a run, without Airflow: each
    {{ expression }} is valid Python once Jinja's `~` (concatenation) is `+`."""
    context = {
        "var": types.SimpleNamespace(value=types.SimpleNamespace(get=lambda _, d: d)),
        "macros": types.SimpleNamespace(
            ds_add=lambda ds, n: str(date.fromisoformat(ds) + timedelta(days=n))),
        "ds": "2026-10-12", "run_id": "scheduled__2026-10-12T03:30:00+00:00",
        "params": types.SimpleNamespace(restart=restart)}
    return re.sub(r"\{\{(.*?)\}\}",
                  lambda m: str(eval(m.group(1).replace(" ~ ", " + "), context)), value)


@pytest.mark.parametrize("profile", ["local", "cluster"])
def test_the_dag_catches_up_one_run_at_a_time_with_a_valid_command(monkeypatch, profile):
    dag, operator = load_dag(monkeypatch, profile)
    assert dag["catchup"] is True and dag["max_active_runs"] == 1
    application = render(str(operator["application"]))
    assert application == "/srv/seedance/jobs/backfill.py"
    assert (ROOT / "jobs" / "backfill.py").is_file()
    parser = argparse.ArgumentParser()
    add_backfill_arguments(parser)
    args = parser.parse_args([render(str(a)) for a in operator["application_args"]])
    assert (args.date_from, args.date_to, args.restart) == ("2026-10-10", "2026-10-10", False)
    assert args.config == "/srv/seedance/jobs/config/backfill.yaml"
    assert args.run_id == "scheduled__2026-10-12T03:30:00+00:00"  # a retry resumes the run
    restart = parser.parse_args([render(str(a), restart=True)
                                 for a in operator["application_args"]])
    assert restart.restart is True
    conf = operator["conf"]
    assert conf["spark.sql.session.timeZone"] == "UTC"  # type: ignore[index]
    if profile == "local":
        # one JVM on a 2-core, 24 GB machine, with room for the Python workers beside it
        assert operator["driver_memory"] == "6g" and "executor_memory" not in operator
    else:
        assert operator["executor_memory"] and operator["py_files"]


def test_remote_locations_stay_uris():
    from pipelines.backfill.config import ArchiveConfig, BackfillConfig
    from pipelines.backfill.spark import local_path

    config = BackfillConfig(work_dir="hdfs://nn:8020/seedance/work",
                            archive=ArchiveConfig(path="s3a://bucket/archive"))
    assert (config.archive_root, config.work_root) == ("s3a://bucket/archive",
                                                       "hdfs://nn:8020/seedance/work")
    assert local_path(config.archive_root) is None
    assert local_path("file:///data/archive") == Path("/data/archive")
    assert local_path("/data/archive") == Path("/data/archive")
