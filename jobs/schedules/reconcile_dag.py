"""Airflow DAG: the daily reconciliation against billing data (docs/reconciliation.md).

Runs once a day after the billing exports land and reconciles the last three days, because
Google Ads restates recent days and FOCUS bills carry corrections: a rerun replaces those
days' rows and resolves alerts that the restatement settled. Importable only where Airflow
is installed (it is not a dependency of this project); copy or symlink it into the DAGs
folder of a deployment that has the `seedance` command on its workers.

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

# {{ ds }} is the logical date: the run for 2025-03-04 starts after that day has ended
# (schedule 06:00 UTC the next morning) and covers 2025-03-02..2025-03-04.
RECONCILE = (
    "{{ var.value.get('seedance_bin', 'seedance') }} reconcile"
    " --from {{ macros.ds_add(ds, -2) }} --to {{ ds }}"
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
