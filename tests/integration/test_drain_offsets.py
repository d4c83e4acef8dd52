"""`seedance cluster stop --drain` on a real standalone Flink cluster leaves the job's
consumer group exactly where its sources stood in the final savepoint, so a job started
from the group reads nothing twice; and `seedance cluster submit` of a job without the
savepoint of one that held state says how its results will differ."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from pipelines.flink.jobs import ATTRIBUTION
from pipelines.flink.runtime.final_offsets import savepoint_offsets
from pipelines.flink.runtime.standalone import StandaloneFlink
from pipelines.kafka.group_offsets import committed
from pipelines.sources.generator import plan_events
from tests.job_io import publishing_slowly
from tests.spans import encoded

PARTITIONS = 4
WAIT_S = 600.0


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory):
    """SEEDANCE_HOME of the CLI runs, with a cluster running from it (the one `seedance
    cluster` commands find there)."""
    folder = tmp_path_factory.mktemp("home")
    cluster = StandaloneFlink(folder / "flink-cluster")
    cluster.up(task_managers=1, slots=2)
    try:
        yield folder
    finally:
        cluster.down()


def seedance(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "jobs.cli", *argv],
                          env={**os.environ, "SEEDANCE_HOME": str(home)}, capture_output=True,
                          text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def test_a_drain_commits_where_the_job_stopped_and_a_start_without_its_savepoint_warns(
        kafka, home, job_config, topic, tmp_path):
    """The input still arriving, the job drained after its first commits: the group's
    offsets are the final savepoint's, partition by partition (before, they were the last
    checkpoint's, 2 to 16 messages short, and a job started from the group credited their
    orders again). Submitted again without that savepoint, the job warns that it starts
    without the state the group's earlier job had, and names the savepoint."""
    values = encoded(plan_events(600, seed=12))
    config = job_config.replace("topics", spans=topic("spans", PARTITIONS))
    config = config.replace("input", bounded=False, starting_offsets="committed")
    config = config.replace("flink", parallelism=2)
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(dataclasses.asdict(config)))
    group, spans = ATTRIBUTION.group(config), config.topics.spans

    first = seedance(home, "cluster", "submit", "--config", str(config_file),
                     "--bootstrap", kafka)
    assert "warning" not in first.stderr  # a fresh group: nothing was read before
    job = re.search(r"as job ([0-9a-f]{32})", first.stdout).group(1)  # type: ignore[union-attr]
    stop = threading.Event()
    publisher = publishing_slowly(kafka, spans, values, PARTITIONS, pause_s=0.5,
                                  stop=stop)
    try:
        deadline = time.monotonic() + WAIT_S
        while not committed(kafka, {}, group, [spans]):  # a checkpoint completed
            assert time.monotonic() < deadline, "the job committed no offsets"
            time.sleep(0.5)
        time.sleep(2.0)  # more input read since that checkpoint
        assert publisher.is_alive(), "all the input was published before the first commit"
        stopped = seedance(home, "cluster", "stop", job, "--savepoint-dir",
                           str(tmp_path / "final"), "--drain")
    finally:
        stop.set()
        publisher.join()
    savepoint = re.search(r"savepoint (\S+)", stopped.stdout).group(1)  # type: ignore[union-attr]
    position = savepoint_offsets(savepoint, [spans])
    assert sorted(position.get(spans, {})) == list(range(PARTITIONS)), stopped.stdout
    read = sum(position[spans].values())
    assert 0 < read < len(values)  # stopped mid-stream
    assert committed(kafka, {}, group, [spans]) == position, stopped.stdout

    again = seedance(home, "cluster", "submit", "--config", str(config_file),
                     "--bootstrap", kafka)
    warning = again.stderr.strip()
    assert warning.startswith(f"warning: consumer group {group} has already read {read:,} "
                              f"messages of {spans}"), again.stderr
    assert ATTRIBUTION.state in warning and f"--from-savepoint {savepoint}" in warning
    StandaloneFlink(home / "flink-cluster").cancel_unfinished()
