"""Credits that depend on the events alone, under the conditions that used to change them:
zstd-compressed batches read as a catch-up (one fetch holds most of a partition), unkeyed
and keyed publishing over 4 and 8 partitions, a CPU hog beside the job, parallelism 1 and
2, and a live job whose partitions fall silent past the idleness and then send what they
held back. Every run's credits that hold (each conversion's latest) are the batch
reference's over every event, row for row; nothing is late."""

from __future__ import annotations

import math
import time

import pytest

from pipelines.flink.attribution_job import build_pipeline, run_job
from pipelines.kafka.io import ensure_topics, producer
from pipelines.sources.generator import plan_events
from tests.job_io import (
    credit_key,
    credit_rows,
    drain,
    messages,
    wait_for_credits,
    wait_until_consumed,
)
from tests.reference import reference_credits
from tests.roi_inputs import cpu_hog
from tests.spans import encoded

REFIT_S = 6 * 3600.0


@pytest.fixture(scope="module")
def telemetry():
    plan = plan_events(250, seed=41)
    return plan, encoded(plan, batch_size=8)


def publish(kafka: str, topic: str, values: list[bytes], partitions: int, keyed: bool,
            compression: str | None = "zstd", only: set[int] | None = None) -> None:
    """Unkeyed: message i to partition i mod n (a user's events in several). Keyed: by the
    message's place (the producer's hash decides). Large zstd batches: one fetch holds
    much of a partition. `only`: just the messages bound for these partitions."""
    out = producer(kafka, compression_type=compression, batch_size=4_000_000,
                   linger_ms=200, max_request_size=8_000_000)
    for i, value in enumerate(values):
        partition = i % partitions
        if only is not None and partition not in only:
            continue
        if keyed:
            out.send(topic, value, key=str(i).encode())
        else:
            out.send(topic, value, partition=partition)
    out.flush()
    out.close()


def assert_reference_credits(kafka, config, plan) -> None:
    expected = {(c.model, c.order_id, c.touch_index, c.channel): c.revenue
                for c in reference_credits(plan, config.attribution.models, REFIT_S)}
    got = {credit_key(r): r["revenue"] for r in credit_rows(kafka, config.topics.credits)}
    assert got.keys() == expected.keys()
    assert all(math.isclose(got[k], expected[k], rel_tol=1e-9) for k in expected)
    assert messages(kafka, config.topics.late) == []


@pytest.mark.parametrize(("partitions", "keyed", "parallelism"),
                         [(8, False, 1), (4, True, 2)])
def test_a_compressed_catch_up_beside_a_cpu_hog_gives_the_reference_credits(
        kafka, flink, job_config, topic, telemetry, partitions, keyed, parallelism):
    plan, values = telemetry
    config = job_config.replace("topics", spans=topic("spans", partitions))
    config = config.replace("attribution", refit_every_s=REFIT_S)
    config = config.replace("flink", parallelism=parallelism)
    config = config.replace("event_time", idleness_s=0.5)  # hostile: idle after 0.5 s
    publish(kafka, config.topics.spans, values, partitions, keyed)
    with cpu_hog():
        run_job(config, kafka, env=flink.environment(config))
    assert_reference_credits(kafka, config, plan)


def test_partitions_silent_past_the_idleness_correct_when_they_resume(
        kafka, flink, job_config, topic, telemetry, tmp_path):
    """A live job: partition 0 sends everything it has while partitions 1-3 stay silent
    for several idleness periods (the watermark follows partition 0 to the end of the
    data); then they send theirs, weeks behind the watermark. They correct."""
    plan, values = telemetry
    partitions = 4
    config = job_config.replace("topics", spans=topic("spans", partitions))
    config = config.replace("input", bounded=False)
    config = config.replace("attribution", refit_every_s=REFIT_S)
    config = config.replace("event_time", idleness_s=1.0)
    ensure_topics(kafka, [config.topics.credits, config.topics.late,
                          config.topics.conversions, config.topics.dead_letter,
                          config.topics.accounting])
    publish(kafka, config.topics.spans, values, partitions, keyed=False, only={0})
    env = flink.environment(config)
    build_pipeline(env, config, kafka)
    job = env.execute_async("silent-partitions")
    wait_for_credits(kafka, config.topics.credits)
    time.sleep(5)  # silent for five idleness periods, the watermark past their data
    publish(kafka, config.topics.spans, values, partitions, keyed=False, only={1, 2, 3})
    wait_until_consumed(kafka, config)  # read and checkpointed, however busy the machine
    drain(job, tmp_path / "final")
    assert_reference_credits(kafka, config, plan)
