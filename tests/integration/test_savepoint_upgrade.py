"""A savepoint the code before the move of udfs/ and pipelines/flink/ into packages took
(tests/fixtures/savepoints/attribution-pre-move/, made by make_pre_move.py there at
f7eae46) restores into the attribution job of the current code on a standalone cluster,
which goes on with the rest of the same input: the state it pickled (journey books,
settled fit periods: classes named by their module paths then, udfs/pickle_paths.py) loads,
and the credits on the topic are the batch reference's for the whole stream -- nothing
lost, nothing repeated."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.flink.runtime.standalone import StandaloneFlink
from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, producer, recreate_topics
from pipelines.settings.job_config import StreamingJobConfig
from pipelines.sources.generator import Plan, PlannedEvent
from tests.job_io import assert_reference_credits, wait_until_consumed

FIXTURE = (Path(__file__).resolve().parents[1] / "fixtures" / "savepoints"
           / "attribution-pre-move")
MANIFEST = json.loads((FIXTURE / "savepoint.json").read_text())
WAIT_S = 600.0


def rows_of(name: str) -> list[dict[str, Any]]:
    with gzip.open(FIXTURE / name, "rt") as lines:
        return [json.loads(line) for line in lines]


def unb64(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def fixture_plan() -> Plan:
    """The plan the input was generated from (as it was then: the reference's input)."""
    rows = rows_of("plan.jsonl.gz")
    return Plan(events=[PlannedEvent(**row["event"]) for row in rows if "event" in row],
                malformed=[unb64(row["malformed"]) for row in rows if "malformed" in row])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneFlink]:
    flink = StandaloneFlink(tmp_path_factory.mktemp("upgrade-cluster"))
    flink.up(task_managers=1, slots=MANIFEST["parallelism"])
    try:
        yield flink
    finally:
        flink.down()


def republish_input(kafka: str) -> None:
    """Every record of the input to the topic the savepoint's source names, each at the
    partition and offset it had (a fresh topic of that name), with its timestamp."""
    topic, partitions = MANIFEST["spans_topic"], MANIFEST["partitions"]
    recreate_topics(kafka, [topic], partitions, {topic: SAMPLE_SPANS_TOPIC})
    out = producer(kafka)
    records = rows_of("input.jsonl.gz")
    sent = [out.send(topic, unb64(r["value"]), partition=r["partition"],
                     timestamp_ms=r["timestamp_ms"]) for r in records]
    out.flush()
    placed = [(f.get(30).partition, f.get(30).offset) for f in sent]
    out.close()
    assert placed == [(r["partition"], r["offset"]) for r in records]
    assert MANIFEST["published"] < len(records) == MANIFEST["generator"]["messages"]


def republish_outputs(kafka: str, config: StreamingJobConfig) -> None:
    """What the job had committed before the savepoint, to this run's output topics (in
    order: a later version of a key replaces an earlier one)."""
    out = producer(kafka)
    for row in rows_of("outputs.jsonl.gz"):
        out.send(getattr(config.topics, row["role"]), unb64(row["value"]),
                 key=unb64(row["key"])).get(30)
    out.close()


def restored_from(cluster: StandaloneFlink, job: str) -> dict[str, Any]:
    """The checkpoint a job was restored from (the REST API's checkpoints.latest.restored)."""
    info = cluster.info()
    assert info is not None
    with urllib.request.urlopen(f"{info.rest}/jobs/{job}/checkpoints", timeout=10) as reply:
        return json.loads(reply.read())["latest"].get("restored") or {}


@pytest.mark.slow
def test_a_savepoint_of_the_code_before_the_move_restores_and_loses_and_repeats_nothing(
        kafka, cluster, job_config, tmp_path):
    before = yaml.safe_load((FIXTURE / "config.yaml").read_text())
    config = job_config.replace("topics", spans=MANIFEST["spans_topic"])
    config = config.replace("input", bounded=False)
    config = config.replace("flink", parallelism=MANIFEST["parallelism"],
                            restart_attempts=0)
    config = config.replace("attribution", refit_every_s=MANIFEST["refit_every_s"])
    # what the stored state depends on is what it was written with
    assert config.flink.user_buckets == before["flink"]["user_buckets"]
    assert config.journey.correction_days == MANIFEST["correction_days"]
    assert config.attribution.models == tuple(before["attribution"]["models"])
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(dataclasses.asdict(config)))
    republish_input(kafka)
    republish_outputs(kafka, config)
    savepoint = tmp_path / "pre-move-savepoint"
    shutil.copytree(FIXTURE / "savepoint", savepoint)

    job = cluster.submit("attribution", config_file, kafka, savepoint=str(savepoint))
    cluster.wait_for_job(job, ("RUNNING",))
    deadline = time.monotonic() + WAIT_S
    while not restored_from(cluster, job) and time.monotonic() < deadline:
        assert cluster.job_state(job) == "RUNNING", cluster.failure(job)
        time.sleep(1)
    restored = restored_from(cluster, job)
    assert restored.get("is_savepoint") and restored["external_path"].rstrip("/").endswith(
        "pre-move-savepoint"), restored
    wait_until_consumed(kafka, config, timeout_s=WAIT_S)
    cluster.stop_with_savepoint(job, tmp_path / "final", drain=True)

    assert_reference_credits(kafka, config, fixture_plan(), MANIFEST["refit_every_s"])
