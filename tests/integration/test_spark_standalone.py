"""The Spark backfill on a real standalone Spark cluster (pipelines/stack/spark_standalone.py:
a master and two workers of 1 core and 1 GB, from the pyspark package, on loopback), run as
the backfill DAG runs it: `spark-submit ... jobs/backfill.py --from D1 --to D2 --run-id ID
--config FILE --no-restart` (jobs/schedules/backfill_dag.py) with the project's Python on
the driver and the executors (the DAG's cluster profile, sized down to the test's
workers, with its archive: the project as a zip, unpacked in each executor's folder and
first on its Python workers' path, the driver reading the checkout). The same command on
local[2] beside it: both write the
same rows to PostgreSQL, row for row, and those are the Flink jobs' rows of the same spans
(tests/backfill_parity.py, as tests/integration/test_backfill.py checks local[*]); the
master lists the finished application, and each worker ran an executor of it that
finished tasks."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import yaml
from psycopg import sql

from pipelines.settings.job_config import load_config
from pipelines.stack.spark_standalone import LocalSparkCluster
from tests.backfill_parity import (
    FIRST,
    LAST,
    REFIT_S,
    Streamed,
    assert_same_rows,
    stream_and_archive,
    table_rows,
    warehouse_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PROJECT_BIN = Path(sys.executable).parent  # the project's .venv: python, spark-submit
_databases = itertools.count()

# what the DAG passes to every submit (COMMON_CONF) and its profiles' sizing, scaled to the
# test: local[2] as the local profile (one JVM); on the cluster one executor per worker
# (1 core, 512 MB of the worker's 1 GB), shuffle partitions ~3 x the cluster's cores
COMMON = ["--conf", "spark.sql.execution.arrow.pyspark.enabled=true",
          "--conf", "spark.sql.session.timeZone=UTC",
          "--conf", "spark.ui.showConsoleProgress=false",
          "--conf", "spark.driver.maxResultSize=2g"]
LOCAL = ["--conf", "spark.sql.shuffle.partitions=8", "--driver-memory", "1g"]
CLUSTER = ["--conf", "spark.sql.shuffle.partitions=6",
           "--conf", "spark.dynamicAllocation.enabled=false",
           "--conf", "spark.executorEnv.PYTHONPATH=seedance",
           "--num-executors", "2", "--total-executor-cores", "2", "--executor-cores", "1",
           "--executor-memory", "512m", "--driver-memory", "1g"]


@pytest.fixture(scope="module")
def streamed(kafka, flink, tmp_path_factory) -> Streamed:
    return stream_and_archive(kafka, flink, tmp_path_factory.mktemp("backfill"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalSparkCluster]:
    spark = LocalSparkCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2,
                              worker_cores=1, worker_memory="1g")
    spark.up()
    try:
        yield spark
    finally:
        spark.down()


@pytest.fixture
def databases(postgres: str) -> Iterator[tuple[str, str]]:
    """Two fresh databases on the session's PostgreSQL server, dropped afterwards."""
    names = [f"standalone_{next(_databases)}" for _ in range(2)]
    with psycopg.connect(postgres, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        server = postgres.rsplit("/", 1)[0]
        yield f"{server}/{names[0]}", f"{server}/{names[1]}"
    finally:
        with psycopg.connect(postgres, autocommit=True) as conn:
            for name in names:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                             .format(sql.Identifier(name)))


def deployment(streamed: Streamed, kafka: str, url: str, folder: Path) -> Path:
    """The backfill YAML of a deployment writing to `url`: the stream's settings (its
    refit period; what the Flink jobs computed with), the archive, a work folder."""
    warehouse_for(streamed, kafka, url)  # the spend and GPU costs the ROI job read
    folder.mkdir()
    streaming = folder / "streaming.yaml"
    streaming.write_text(yaml.safe_dump({"attribution": {"refit_every_s": REFIT_S},
                                         "warehouse": {"url": url}}))
    assert load_config(streaming).computation == streamed.config.computation
    config = folder / "backfill.yaml"
    config.write_text(yaml.safe_dump({
        "streaming_config": "streaming.yaml", "engine": "spark", "source": "archive",
        "work_dir": str(folder / "work"), "archive": {"path": str(streamed.archive)}}))
    return config


def project_zip(path: Path) -> Path:
    """`zip -r seedance.zip schemas udfs pipelines jobs`, as docs/backfill.md deploys it."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in ("schemas", "udfs", "pipelines", "jobs"):
            for file in sorted((ROOT / package).rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts:
                    archive.write(file, file.relative_to(ROOT))
    return path


def submit(master: str, settings: list[str], config: Path, run_id: str,
           log: Path) -> tuple[str, float]:
    """The DAG's spark-submit of jobs/backfill.py for FIRST..LAST; its output and time."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SEEDANCE_", "PYSPARK_", "SPARK_"))
           and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    python = str(PROJECT_BIN / "python")
    env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python, SPARK_LOCAL_IP="127.0.0.1",
               PATH=f"{PROJECT_BIN}:{env['PATH']}")
    command = [str(PROJECT_BIN / "spark-submit"), "--master", master, *COMMON, *settings,
               "--name", f"seedance-backfill-{run_id}", str(ROOT / "jobs" / "backfill.py"),
               "--from", FIRST, "--to", LAST, "--run-id", run_id, "--config", str(config),
               "--no-restart"]
    started = time.monotonic()
    done = subprocess.run(command, env=env, cwd=log.parent, capture_output=True, text=True,
                          timeout=600, check=False)
    elapsed = time.monotonic() - started
    log.write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"spark-submit on {master} failed ({log}):\n" \
        + (done.stdout + done.stderr)[-4000:]
    return done.stdout, elapsed


def test_the_backfill_on_a_standalone_cluster_writes_the_local_runs_rows(
        streamed, cluster, kafka, databases, tmp_path):
    local_url, cluster_url = databases
    master = cluster.info.master_url
    local, elapsed_local = submit(
        "local[2]", LOCAL, deployment(streamed, kafka, local_url, tmp_path / "local"),
        "local", tmp_path / "local.log")
    shipped = project_zip(tmp_path / "seedance.zip")  # as the DAG's cluster profile
    on_cluster, elapsed_cluster = submit(
        master, [*CLUSTER, "--conf", f"spark.archives={shipped}#seedance"],
        deployment(streamed, kafka, cluster_url, tmp_path / "cluster"), "standalone",
        tmp_path / "cluster.log")
    print(f"spark-submit: local[2] {elapsed_local:.1f}s, {master} {elapsed_cluster:.1f}s")
    for output in (local, on_cluster):  # every day written, one line each
        assert [line.split(" ")[0] for line in output.splitlines() if line.startswith("[")] \
            == [f"[{i}/6]" for i in range(1, 7)]

    # the same rows, row for row, and they are the stream's
    rows = table_rows(cluster_url)
    assert all(rows.values())
    assert rows == table_rows(local_url)
    assert_same_rows(streamed, cluster_url)

    # the work ran on the cluster: the master lists the finished application under the
    # DAG's --name, and each worker ran one of its executors, whose log shows the tasks it
    # finished (this cluster ran nothing else)
    state = cluster.state()
    (app,) = state["completedapps"]
    assert app["name"] == "seedance-backfill-standalone" and not state["activeapps"]
    assert app["state"] == "FINISHED" and app["cores"] == 2
    assert all(worker["state"] == "ALIVE" for worker in state["workers"])
    for work_dir in cluster.info.work_dirs:
        (executor,) = (Path(work_dir) / app["id"]).iterdir()
        stderr = (executor / "stderr").read_text()
        assert "Finished task" in stderr, f"{executor}/stderr ran no task"
        assert (executor / "seedance" / "udfs" / "__init__.py").is_file(), \
            f"{executor}: the project's archive was not unpacked"
