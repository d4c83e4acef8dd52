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
    folder = jars_home() / "flink"
    jars = sorted(folder.glob("flink-sql-connector-kafka-*.jar"))
    if not jars:
        raise FileNotFoundError(f"the Flink Kafka connector jar is missing in {folder}; "
                                f"{SETUP_HINT}")
    return jars
