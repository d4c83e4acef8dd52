"""`seedance run` tells an operator what went wrong in one line, with a non-zero exit, and
never advises dropping the job's state."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
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



def test_a_killed_flink_jvm_ends_with_its_reason_and_tracebacks_only_with_verbose(
        kafka, job_config, tmp_path):
    """The JVM that runs the job (PyFlink's gateway, a child of the CLI) is killed while the
    job runs. The CLI's last line says so and where the checkpoints are; without -v it is
    the only line (py4j logged a traceback for every call and, at exit, for every Java object
    it released: 108 of them in 707 lines, the reason on line 16), with -v the tracebacks
    come first and the reason still last."""
    publish(kafka, job_config.topics.spans, plan_events(40, seed=2))
    config = job_config.replace("input", bounded=False)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(dataclasses.asdict(config)))
    for verbose in ([], ["-v"]):
        err = tmp_path / f"stderr{len(verbose)}.txt"
        with err.open("w") as stderr:
            run = subprocess.Popen([sys.executable, "-m", "jobs.cli", *verbose, "run",
                                    "--config", str(path), "--bootstrap", kafka],
                                   stdout=subprocess.DEVNULL, stderr=stderr,
                                   stdin=subprocess.DEVNULL,
                                   env={**os.environ, "SEEDANCE_HOME": str(tmp_path)})
            try:
                before = checkpoints(config.flink.checkpoint_dir)
                deadline = time.monotonic() + 300
                while checkpoints(config.flink.checkpoint_dir) <= before:  # running
                    assert run.poll() is None and time.monotonic() < deadline, err.read_text()
                    time.sleep(0.5)
                children = subprocess.run(["ps", "-o", "pid=,comm=", "--ppid", str(run.pid)],
                                          capture_output=True, text=True).stdout
                jvm = [int(line.split()[0]) for line in children.splitlines()
                       if line.split()[1:] == ["java"]]
                assert len(jvm) == 1, jvm
                os.kill(jvm[0], signal.SIGKILL)
                assert run.wait(timeout=120) == 2
            finally:
                if run.poll() is None:
                    run.kill()
        lines = [line for line in err.read_text().splitlines()
                 if not line.startswith("WARNING pipelines.flink.runtime.kafka: resuming")]
        assert lines[-1].startswith("seedance: error: the Flink JVM running "
                                    "seedance-attribution exited"), lines[-40:]
        assert "checkpoints are kept in" in lines[-1]
        if verbose:
            assert "Traceback" in err.read_text()
        else:
            assert lines == lines[-1:], lines[:20]


def checkpoints(root: str | None) -> int:
    """Completed checkpoints under a job config's checkpoint_dir."""
    return len(list(Path(root or ".").glob("*/*/chk-*/_metadata")))
