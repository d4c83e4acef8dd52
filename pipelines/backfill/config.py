"""Typed, validated configuration of the backfill and the archiver (jobs/config/backfill.yaml).

The computation itself (lookback, models, refit period, stage weights, topics, warehouse)
comes from the streaming job's config that `streaming_config` names: a backfill computes
what the stream computes only with the stream's own settings. Unknown keys and wrong types
are rejected with the file and key named, by the same rules as the streaming config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.settings.job_config import (
    DEFAULT_CONFIG,
    StreamingJobConfig,
    load_config,
    read_yaml,
)
from pipelines.settings.paths import state_home
from pipelines.settings.sections import ConfigError, build_section

DEFAULT_BACKFILL_CONFIG = DEFAULT_CONFIG.with_name("backfill.yaml")
SOURCES = ("archive", "kafka")
ENGINES = ("spark", "pandas")


@dataclass(frozen=True)
class ArchiveConfig:
    path: str = ""
    batch_messages: int = 5000
    flush_s: float = 60.0


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[*]"
    driver_memory: str = "6g"
    shuffle_partitions: int = 8
    max_records_per_batch: int = 10000
    conf: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BackfillConfig:
    streaming_config: str = ""
    source: str = "archive"
    engine: str = "spark"
    work_dir: str = ""
    archive: ArchiveConfig = ArchiveConfig()
    spark: SparkConfig = SparkConfig()

    def __post_init__(self) -> None:
        checks = [
            (self.source in SOURCES, "source", f"must be one of {', '.join(SOURCES)}"),
            (self.engine in ENGINES, "engine", f"must be one of {', '.join(ENGINES)}"),
            (self.archive.batch_messages >= 1, "archive.batch_messages", "must be at least 1"),
            (self.archive.flush_s > 0, "archive.flush_s", "must be positive"),
            (self.spark.shuffle_partitions >= 1, "spark.shuffle_partitions",
             "must be at least 1"),
            (self.spark.max_records_per_batch >= 1, "spark.max_records_per_batch",
             "must be at least 1"),
        ]
        for ok, key, problem in checks:
            if not ok:
                raise ConfigError(f"{key} {problem}")

    def replace(self, section: str | None = None, **changes: Any) -> BackfillConfig:
        """A copy with some keys changed (top level, or of one section)."""
        if section is None:
            return dataclasses.replace(self, **changes)
        updated = dataclasses.replace(getattr(self, section), **changes)
        return dataclasses.replace(self, **{section: updated})

    @property
    def archive_root(self) -> str:
        """As written (an hdfs:// or s3a:// URI must not go through Path)."""
        return self.archive.path or str(state_home() / "archive")

    @property
    def work_root(self) -> str:
        return self.work_dir or str(state_home() / "backfill")

    def streaming(self) -> StreamingJobConfig:
        """The stream's config (with its environment overrides)."""
        return load_config(Path(self.streaming_config) if self.streaming_config else None)


def load_backfill_config(path: Path | None = None) -> BackfillConfig:
    source = path or DEFAULT_BACKFILL_CONFIG
    data = read_yaml(source)
    try:
        config: BackfillConfig = build_section(BackfillConfig, data, "")
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    if config.streaming_config and not Path(config.streaming_config).is_absolute():
        # relative to the file that names it, so a deployment's folder can be moved whole
        config = config.replace(streaming_config=str(Path(source).resolve().parent
                                                     / config.streaming_config))
    return config
