"""Credits that depend on the events alone, under the conditions that used to change them:
zstd-compressed batches read as a catch-up (one fetch holds most of a partition), unkeyed
and keyed publishing over 4 and 8 partitions, a CPU hog beside the job, parallelism 1 and
2 (bounded runs; unbounded ones, paused producers and the alarm for what comes behind the
kept state: test_catch_up.py). Every run's credits that hold (each conversion's latest)
are the batch reference's over every event, row for row; nothing is late."""

from __future__ import annotations

import math

import pytest

from pipelines.flink.attribution.job import run_job
from pipelines.kafka.io import producer
from pipelines.sources.generator import plan_events
from tests.job_io import (
    credit_key,
    credit_rows,
    messages,
)
from tests.reference import reference_credits
from tests.roi_inputs import cpu_hog
from tests.spans import encoded, plain, stamp_of

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
            out.send(topic, plain(value), key=str(i).encode(), timestamp_ms=stamp_of(value))
        else:
            out.send(topic, plain(value), partition=partition, timestamp_ms=stamp_of(value))
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
