"""Airflow DAG: the daily Spark backfill (docs/backfill.md).

One run per day at 03:30 UTC, catchup on: the run due on day R recomputes day R-2 (by then
the stream has settled it: the allowed lateness and the last refit period have passed) from
the raw archive and replaces it in the warehouse. Catchup walks history from start_date one
day at a time, one run at a time. Airflow's retry of a failed try keeps the run id, so it
resumes the run (a day already written is skipped); clearing a run in Airflow (a deliberate
rerun, say after a fix) or conf {"restart": true} recomputes the day even if it was written.

Needs the apache-spark provider (`SparkSubmitOperator`), `spark-submit` on the workers' PATH
(the checkout's .venv/bin has pyspark's) and an Airflow connection `seedance_spark` whose
host is the master: `local[*]` for one machine (the default sizing below fits 2 cores and
24 GB), `yarn`, `spark://host:7077` or `k8s://https://...` for a cluster (then set
SEEDANCE_SPARK_PROFILE=cluster in the scheduler's environment: the submit settings are
chosen when the DAG is parsed). Importable only where Airflow is installed; copy or symlink
it into the DAGs folder. Tested with Airflow 3.3 and the provider 6.3
(tests/integration/test_airflow.py).

Airflow Variables (optional): seedance_home (default /srv/seedance, the checkout with its
.venv), seedance_backfill_config (default: the shipped jobs/config/backfill.yaml).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow import DAG
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

HOME = "{{ var.value.get('seedance_home', '/srv/seedance') }}"
# The day the run is due (the end of its data interval: the same day under Airflow 3's
# default cron timetable and under the interval timetable of Airflow 2), two days back: the
# stream has settled the day before yesterday.
DAY = "{{ macros.ds_add(data_interval_end | ds, -2) }}"

# local[*] on a 2-core, 24 GB machine: one JVM does everything (driver = executor), so
# its heap is the Spark memory; the pandas UDF workers (one per core) and the driver's
# Python (the day being written) live beside it. Measured peak in bench/backfill.py.
LOCAL = {
    "driver_memory": "6g",
    "conf": {"spark.driver.maxResultSize": "2g", "spark.sql.shuffle.partitions": "8"},
}
# A cluster: executors of 4 cores / 8 GB (+2 GB for the Python workers), the shuffle at
# ~3 partitions per core; the project is shipped to the executors as a zip
# (`cd $HOME && zip -r seedance.zip schemas udfs pipelines jobs`, after each deploy),
# unpacked in each executor's folder and first on its Python workers' path. Not with
# --py-files: that puts the zip first on the driver's path too, and the driver reads
# files of the checkout (schemas/sql, jobs/config) that a zip import cannot give it.
CLUSTER = {
    "driver_memory": "4g",
    "executor_memory": "8g",
    "executor_cores": 4,
    "num_executors": 8,
    "conf": {"spark.executor.memoryOverhead": "2g", "spark.sql.shuffle.partitions": "96",
             "spark.driver.maxResultSize": "2g", "spark.dynamicAllocation.enabled": "false",
             # --archives as a setting (the operator renders conf, not its archives)
             "spark.archives": f"{HOME}/seedance.zip#seedance",
             "spark.executorEnv.PYTHONPATH": "seedance"},
}
COMMON_CONF = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
}


def submit_settings(profile: str) -> dict[str, object]:
    chosen = CLUSTER if profile == "cluster" else LOCAL
    return {**chosen, "conf": {**COMMON_CONF, **chosen["conf"]}}  # type: ignore[dict-item]


with DAG(
    dag_id="seedance_backfill",
    description="Recompute a settled day from the raw archive with Spark and replace it in "
                "the warehouse",
    schedule="30 3 * * *",  # before the reconciliation at 06:00 reads the day
    start_date=datetime(2026, 1, 1),
    catchup=True,  # every day since start_date, oldest first
    max_active_runs=1,  # runs share the warehouse and the staging folder
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
    params={"restart": False},
    tags=["seedance", "spark", "backfill"],
) as dag:
    SparkSubmitOperator(
        task_id="backfill",
        conn_id="seedance_spark",
        application=f"{HOME}/jobs/backfill.py",
        application_args=[
            "--from", DAY, "--to", DAY, "--run-id", "{{ run_id }}",
            "--config", "{{ var.value.get('seedance_backfill_config', var.value.get("
            "'seedance_home', '/srv/seedance') ~ '/jobs/config/backfill.yaml') }}",
            # a retry resumes (same run id); a cleared run or conf restart recomputes
            "{{ '--restart' if params.restart or dag_run.clear_number else '--no-restart' }}",
        ],
        name=f"seedance-backfill-{DAY}",
        # the job's own Python (its packages) on the driver and the workers
        env_vars={"PYSPARK_PYTHON": f"{HOME}/.venv/bin/python",
                  "PYSPARK_DRIVER_PYTHON": f"{HOME}/.venv/bin/python"},
        execution_timeout=timedelta(hours=3),
        **submit_settings(os.environ.get("SEEDANCE_SPARK_PROFILE", "local")),
    )
