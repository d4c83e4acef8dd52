"""Where the project keeps its jars and its runtime state.

SEEDANCE_HOME (default `<project>/.seedance`) holds broker data, logs, checkpoints and the
embedded warehouse; SEEDANCE_JARS (default `<project>/.cache/jars`) the jars fetched by
`jobs/setup/bootstrap.sh`.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.settings.environment import setting

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def state_home() -> Path:
    """The state folder (broker data, checkpoints, the embedded warehouse): created readable
    by its owner alone (0700) when it does not exist yet."""
    home = Path(setting("SEEDANCE_HOME") or PROJECT_ROOT / ".seedance").resolve()
    if not home.exists():
        home.mkdir(parents=True, mode=0o700, exist_ok=True)
    return home


def jars_home() -> Path:
    return Path(setting("SEEDANCE_JARS") or PROJECT_ROOT / ".cache" / "jars").resolve()


SETUP_HINT = "run `make setup` (or `bash jobs/setup/bootstrap.sh`) to fetch them"


def flink_connector_jars() -> list[Path]:
    """The jars every Flink job of the project needs: the Kafka connector, the zstd codec it
    leaves out (Flink's own jars carry lz4 and snappy) and the project's own JVM classes
    (pipelines/jvm, compiled by the set-up)."""
    folder = jars_home() / "flink"
    jars = sorted(folder.glob("flink-sql-connector-kafka-*.jar"))
    codecs = sorted(folder.glob("zstd-jni-*.jar"))
    if not jars or not codecs:
        raise FileNotFoundError(f"the Flink Kafka connector or zstd-jni jar is missing in "
                                f"{folder}; {SETUP_HINT}")
    own = folder / "seedance-flink.jar"
    if not own.is_file():
        raise FileNotFoundError(f"{own} is missing (the job's JVM classes, pipelines/jvm); "
                                f"{SETUP_HINT}")
    return [*jars, *codecs, own]
