"""`seedance run` tells an operator what went wrong in one line, with a non-zero exit, and
never advises dropping the job's state."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import yaml

from pipelines.sources.generator import plan_events
from tests.job_io import publish


def seedance(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, "SEEDANCE_HOME": str(home)})


def test_a_failed_job_is_one_clear_line_and_a_non_zero_exit(kafka, job_config, tmp_path):
    publish(kafka, job_config.topics.spans, plan_events(40, seed=2))
    # a client setting the Kafka clients refuse: the job fails once it starts
    config = job_config.replace("flink", restart_attempts=0)
    config = config.replace("kafka", properties={"max.poll.records": "many"})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(dataclasses.asdict(config)))
    failed = seedance("run", "--config", str(path), "--bootstrap", kafka, "--bounded",
                      home=tmp_path)
    assert failed.returncode == 2
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1, failed.stderr[-3000:]
    assert lines[0].startswith("seedance: error: the seedance-attribution job failed:")
    assert "max.poll.records" in lines[0] or "Source: otlp-spans" in lines[0]
    assert "checkpoints are kept in" in lines[0] and "Traceback" not in failed.stderr
    assert "remove" not in lines[0] and "afresh" not in lines[0]

    verbose = seedance("-v", "run", "--config", str(path), "--bootstrap", kafka, "--bounded",
                       home=tmp_path)
    assert verbose.returncode == 2 and "Py4JJavaError" in verbose.stderr  # the trace, asked

