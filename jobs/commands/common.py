"""What the commands share: their user-facing error, common options and the job config."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

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


def _number(text: str, convert: type, expected: str) -> Any:
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (argparse names the option)."""
    value = _number(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return int(value)


def busy_fraction(text: str) -> float:
    """An argparse type: a share of time, 0 to 0.8 (a batch run keeps ±0.2 around it)."""
    value = _number(text, float, "a number")
    if not 0 <= value <= 0.8:
        raise argparse.ArgumentTypeError(f"must be from 0 to 0.8, got {value}")
    return float(value)


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    value = _number(text, int, "a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return int(value)
