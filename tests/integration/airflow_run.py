"""Runs under the Airflow of the test set-up (.cache/airflow-venv), not the project's Python:
loads jobs/schedules/ with Airflow's DagBag and runs DAGs with Airflow's own `DAG.test`.
tests/integration/test_airflow.py starts it once and sends it one JSON request a line; the
answer is one JSON line. A run's own output (the task log) goes to the file it names.

Requests: {"env"} -- the DAGs' import errors, settings and operators, parsed with env;
{"dag_id", "logical_date", "run_after", "variables", "conf", "log", "on_retry"} -- one
run.

The one thing a run changes on the parsed DAG is the retry delay (minutes in the DAG file),
so that a test waits a second for Airflow's retry; how many retries, and when a try fails,
stay the DAG's. `on_retry` holds shell commands, one run before each retry: what an operator
does about the cause. `run_after` fixes the run id (`manual__<run_after>`), so that a second
run of the same logical date has the same run id, as a retry of it has.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.api.datamodels._generated import DagRun as TaskDagRun

DAGS = Path(__file__).resolve().parents[2] / "jobs" / "schedules"
SETTINGS = ("_conn_id", "_driver_memory", "_executor_memory", "_executor_cores",
            "_num_executors")


def structure(env: dict[str, str]) -> dict[str, Any]:
    """What Airflow parses out of jobs/schedules/ with `env` in the environment (the
    backfill DAG chooses its submit settings by SEEDANCE_SPARK_PROFILE when parsed)."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        bag = DagBag(dag_folder=str(DAGS))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    dags: dict[str, Any] = {}
    for dag_id, dag in bag.dags.items():
        env = dag.get_template_env()
        tasks = {}
        for task in dag.tasks:
            args = getattr(task, "application_args", None)
            restart = args[-1] if args else None
            tasks[task.task_id] = {
                "operator": f"{type(task).__module__}.{type(task).__name__}",
                "retries": task.retries,
                "retry_delay_s": task.retry_delay.total_seconds(),
                "execution_timeout_s": task.execution_timeout.total_seconds(),
                "templates": {name: getattr(task, name) for name in task.template_fields},
                "settings": {k[1:]: v for k, v in vars(task).items() if k in SETTINGS},
                # the restart flag as Airflow's Jinja renders it for a run cleared n times
                "restart_flag": {n: env.from_string(restart).render(
                    params={"restart": False}, dag_run={"clear_number": n})
                    for n in (0, 1)} if restart else None,
            }
        dags[dag_id] = {"schedule": dag.schedule, "timetable": type(dag.timetable).__name__,
                        "catchup": dag.catchup, "max_active_runs": dag.max_active_runs,
                        "params": {k: dag.params[k] for k in dag.params}, "tasks": tasks}
    return {"import_errors": {str(k): v for k, v in bag.import_errors.items()},
            "dags": dags, "dag_run_fields": sorted(TaskDagRun.model_fields)}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session

    # Airflow Variables from the environment (AIRFLOW_VAR_<NAME>), read at each lookup
    os.environ.update({f"AIRFLOW_VAR_{k.upper()}": v for k, v in spec["variables"].items()})
    dag = DagBag(dag_folder=str(DAGS)).dags[spec["dag_id"]]
    fixes = list(spec.get("on_retry", []))

    def fix_the_cause(context: Any) -> None:
        print(f"[test] try {context['ti'].try_number} failed; before the retry: "
              f"{fixes[0] if fixes else 'nothing'}", flush=True)
        if fixes:
            subprocess.run(fixes.pop(0), shell=True, check=True)

    for task in dag.tasks:
        task.retry_delay = timedelta(seconds=1)
        task.on_retry_callback = [fix_the_cause]
    dr = dag.test(logical_date=datetime.fromisoformat(spec["logical_date"]),
                  run_after=datetime.fromisoformat(spec["run_after"]),
                  run_conf=spec.get("conf"))
    with create_session() as session:
        tis = dr.get_task_instances(session=session)
        return {"run_id": dr.run_id, "state": str(dr.state),
                "tasks": {ti.task_id: {"state": str(ti.state), "try_number": ti.try_number}
                          for ti in tis},
                "rendered": {ti.task_id: RenderedTaskInstanceFields.get_templated_fields(
                    ti, session=session) for ti in tis}}


def serve() -> None:
    """One request a line on stdin, one answer a line on the real stdout; everything a run
    prints (Airflow's log, the task's, spark-submit's) goes to the request's log file."""
    answers = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        spec = json.loads(line)
        with open(spec.get("log", os.devnull), "a") as log:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                answer = structure(spec["env"]) if "env" in spec else run(spec)
            except Exception as error:  # noqa: BLE001 - the test reports it
                answer = {"error": f"{type(error).__name__}: {error}"}
            sys.stdout.flush()
            sys.stderr.flush()
        answers.write(json.dumps(answer, default=str) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve()
