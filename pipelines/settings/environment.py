"""Every environment variable the project reads, in one list: its meaning, and the one way
to read it (`setting`), so no module reads a variable this list does not document.

Variables override a config file's value (addresses and secrets belong to the machine a
command runs on, not to the file); `seedance --help` and `seedance reconcile --help`
print this list.
"""

from __future__ import annotations

import os

ENV_VARS = {
    "SEEDANCE_KAFKA_BOOTSTRAP": "Kafka bootstrap servers (over kafka.bootstrap; after "
                                "--bootstrap)",
    "SEEDANCE_WAREHOUSE_URL": "warehouse URL, sqlite:///path or postgresql://user@host:port/db "
                              "(overrides warehouse.url)",
    "SEEDANCE_HOME": "state folder: broker data, checkpoints, embedded warehouse "
                     "(default <project>/.seedance)",
    "SEEDANCE_JARS": "folder of the fetched jars (default <project>/.cache/jars)",
    "SEEDANCE_WEBHOOK_URL": "alert webhook URL (overrides alerts.webhook.url)",
    "SEEDANCE_WEBHOOK_SECRET": "HMAC-SHA256 key of the alert webhook (overrides "
                               "alerts.webhook.secret; never printed)",
    "SEEDANCE_CONTROL_WEBHOOK_SECRET": "HMAC-SHA256 key of the control loop's webhook "
                                       "(overrides executors.webhook.secret; never printed)",
    "SEEDANCE_SPARK_PROFILE": "Airflow backfill DAG: how it submits the Spark job, local or "
                              "cluster (default local)",
}


def setting(name: str) -> str:
    """The variable's value ('' when unset or empty); only for variables in ENV_VARS."""
    if name not in ENV_VARS:
        raise KeyError(f"{name} is not a documented setting: add it to "
                       "pipelines/settings/environment.py ENV_VARS")
    return os.environ.get(name, "")


def env_help(names: tuple[str, ...] | None = None) -> str:
    """The variables (all, or `names`) as lines for a command's --help."""
    chosen = {name: text for name, text in ENV_VARS.items() if names is None or name in names}
    width = max(map(len, chosen), default=0) + 1
    return "\n".join(f"  {name:{width}} {text}" for name, text in chosen.items())
