"""What the commands share: their user-facing error, common options and the job config."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipelines.settings.job_config import StreamingJobConfig, load_config

CONFIG_HELP = "job config YAML (default: jobs/config/streaming.yaml)"
BOOTSTRAP_HELP = "Kafka bootstrap servers (default: the local stack)"


class CliError(RuntimeError):
    """A user-facing failure: printed without a traceback, exit code 2."""


def job_config(args: argparse.Namespace) -> StreamingJobConfig:
    """The job config of `--config` (the shipped one without it), bounded with `--bounded`."""
    config = load_config(Path(args.config) if args.config else None)
    if getattr(args, "bounded", False):
        config = config.replace("input", bounded=True)
    return config
