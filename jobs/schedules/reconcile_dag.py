"""Airflow DAG: the daily reconciliation against billing data (docs/reconciliation.md).

Runs once a day at 06:00 UTC, after the billing exports land, and reconciles the three days
before, because Google Ads restates recent days and FOCUS bills carry corrections: a rerun
replaces those days' rows and resolves alerts that the restatement settled. A failed try is
retried by Airflow; each try reconciles the days again (idempotent, the latest restatement
wins). Importable only where Airflow is installed (it is not a dependency of this project);
copy or symlink it into the DAGs folder of a deployment that has the `seedance` command on
its workers. Tested with Airflow 3.3 (tests/integration/test_airflow.py).

Airflow Variables (optional): seedance_bin (default `seedance`), seedance_reconcile_config
(default: the shipped config). Secrets such as SEEDANCE_WEBHOOK_SECRET come from the
worker's environment or a secrets backend, never from this file.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow import DAG

try:  # Airflow 3 ships the BashOperator in the standard provider
    from airflow.providers.standard.operators.bash import BashOperator
except ImportError:  # Airflow 2
    from airflow.operators.bash import BashOperator

# The days before the one the run is due on (the end of its data interval: the same day
# under Airflow 3's default cron timetable, where the logical date is the run's time, and
# under the interval timetable of Airflow 2, where it is the day before): the run due at
# 06:00 UTC on 2025-03-05 covers 2025-03-02..2025-03-04, days that have ended.
RECONCILE = (
    "{{ var.value.get('seedance_bin', 'seedance') }} reconcile"
    " --from {{ macros.ds_add(data_interval_end | ds, -3) }}"
    " --to {{ macros.ds_add(data_interval_end | ds, -1) }}"
    "{% if var.value.get('seedance_reconcile_config', '') %}"
    " --config {{ var.value.seedance_reconcile_config }}{% endif %}"
)

with DAG(
    dag_id="seedance_reconcile",
    description="Reconcile spend, conversions, revenue and GPU cost against billing data",
    schedule="0 6 * * *",
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,  # two runs of overlapping days would race for the same alerts
    default_args={"retries": 2, "retry_delay": timedelta(minutes=15)},
    tags=["seedance", "finance"],
) as dag:
    BashOperator(task_id="reconcile", bash_command=RECONCILE,
                 execution_timeout=timedelta(hours=1))
