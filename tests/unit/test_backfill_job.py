"""`seedance backfill` on the single-process engine (no JVM): days replaced exactly, progress
per day, resume, and a day the archive lacks refused. The Airflow DAG runs under a real
Airflow in tests/integration/test_airflow.py."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
import yaml

from jobs.backfill import day_range
from jobs.cli import main
from pipelines.sources.generator import plan_events
from tests.reference import archive_plan


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


def test_a_day_the_archive_lacks_is_refused_and_nothing_replaced(deployment, capsys):
    db = deployment.parent / "wh.db"
    args = ["backfill", "--from", "2026-10-11", "--to", "2026-10-12", "--config",
            str(deployment)]
    assert main(args) == 0
    before = rows(db, "SELECT * FROM roi_daily ORDER BY 1, 2, 3, 4")
    archive = deployment.parent / "archive"
    for kind in ("touchpoints", "conversions"):
        (archive / kind / "date=2026-10-12").rename(archive / kind / "aside")
    assert main([*args, "--restart"]) == 2
    err = capsys.readouterr().err
    assert f"the archive {archive} holds no event of 2026-10-12" in err
    assert len(err.strip().splitlines()) == 1 and "Nothing was replaced" in err
    assert rows(db, "SELECT * FROM roi_daily ORDER BY 1, 2, 3, 4") == before


def test_kafka_is_read_by_the_spark_engine_only(deployment, capsys):
    assert main(["backfill", "--from", "2026-10-10", "--to", "2026-10-10", "--config",
                 str(deployment), "--source", "kafka", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "pandas engine reads the archive only" in capsys.readouterr().err


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
