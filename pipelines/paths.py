"""Where the project keeps its jars and its runtime state.

SEEDANCE_HOME (default `<project>/.seedance`) holds broker data, logs, checkpoints and the
embedded warehouse; SEEDANCE_JARS (default `<project>/.cache/jars`) the jars fetched by
`jobs/setup/bootstrap.sh`.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def state_home() -> Path:
    return Path(os.environ.get("SEEDANCE_HOME", PROJECT_ROOT / ".seedance")).resolve()


def jars_home() -> Path:
    return Path(os.environ.get("SEEDANCE_JARS", PROJECT_ROOT / ".cache" / "jars")).resolve()


SETUP_HINT = "run `make setup` (or `bash jobs/setup/bootstrap.sh`) to fetch them"


def flink_connector_jars() -> list[Path]:
    """The jars every Flink job of the project needs: the Kafka connector and the project's
    own JVM classes (pipelines/jvm, compiled by the set-up)."""
    folder = jars_home() / "flink"
    jars = sorted(folder.glob("flink-sql-connector-kafka-*.jar"))
    if not jars:
        raise FileNotFoundError(f"the Flink Kafka connector jar is missing in {folder}; "
                                f"{SETUP_HINT}")
    own = folder / "seedance-flink.jar"
    if not own.is_file():
        raise FileNotFoundError(f"{own} is missing (the job's JVM classes, pipelines/jvm); "
                                f"{SETUP_HINT}")
    return [*jars, own]
