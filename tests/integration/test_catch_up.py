"""Which events count does not depend on how the topic is read: unbounded jobs, as
`seedance run` runs them, catching up on a backlog. The sample's records carry when each
arrived (the generator ships hourly; a record held back arrives with the last ones), so an
event counts exactly when it reached Kafka within the correction horizon (udfs/journeys/arrival.py),
however the messages were spread over partitions, compressed or paused, at parallelism 1
or 2, beside a busy loop per core. Every run's credits that hold are the batch reference's
over the events that count, row for row; the late events are exactly those that arrived
too late; nothing that counted is lost behind the state the job keeps (`expired`)."""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import pytest

from pipelines.flink.attribution.job import build_pipeline
from pipelines.kafka.io import ensure_topics, producer
from pipelines.sources.expected import late_beyond
from pipelines.sources.generator import Plan, PlannedEvent, plan_events
from pipelines.store.accounting import format_report
from tests.job_io import credit_key, credit_rows, drain, messages, wait_until_consumed
from tests.reference import reference_credits
from tests.roi_inputs import cpu_hog
from tests.spans import encoded, plain, stamp_of

REFIT_S = 6 * 3600.0
HORIZON_DAYS = 1.0  # the default: most of the events the plan holds back arrive too late
HORIZON_MS = int(HORIZON_DAYS * 86_400_000)


@pytest.fixture(scope="module")
def telemetry():
    # one touch in 10 arrives up to two days after it happened, on either side of the
    # horizon, wherever the producer happens to put it
    plan = plan_events(160, seed=29, delayed=(0.1, 2 * 86_400.0))
    return plan, encoded(plan, batch_size=8)


def publish_unkeyed(kafka: str, topic: str, values: list[bytes], partitions: int,
                    seed: int) -> None:
    """As a keyless producer spreads messages: runs of a few messages to one partition,
    then another, drawn anew on every publish; large zstd batches (one fetch holds much of
    a partition), each record with its arrival time."""
    rng = random.Random(seed)
    out = producer(kafka, compression_type="zstd", batch_size=4_000_000, linger_ms=200,
                   max_request_size=8_000_000)
    partition, left = 0, 0
    for value in values:
        if not left:
            partition, left = rng.randrange(partitions), rng.randint(1, 12)
        left -= 1
        out.send(topic, plain(value), partition=partition, timestamp_ms=stamp_of(value))
    out.flush()
    out.close()


def unbounded(job_config, topic, partitions: int, parallelism: int, idleness_s: float):
    """An unbounded job (as `seedance run` runs it) over a fresh spans topic."""
    config = job_config.replace("topics", spans=topic("spans", partitions))
    config = config.replace("input", bounded=False)
    config = config.replace("journey", correction_days=HORIZON_DAYS)
    config = config.replace("attribution", refit_every_s=REFIT_S)
    config = config.replace("flink", parallelism=parallelism)
    # hostile: a partition silent that long may go idle (only once read to its end), and
    # the reader drains one partition's fetch a few records a poll before it reaches the
    # next (as a large backlog reads): the last partitions are reached seconds later
    config = config.replace("kafka", properties={**config.kafka.properties,
                                                 "max.poll.records": "5"})
    return config.replace("event_time", idleness_s=idleness_s)


def start(kafka: str, flink, config, name: str):
    ensure_topics(kafka, [config.topics.credits, config.topics.late, config.topics.conversions,
                          config.topics.dead_letter, config.topics.accounting])
    env = flink.environment(config)
    build_pipeline(env, config, kafka)
    return env.execute_async(name)


def stop_when_caught_up(kafka: str, config, job, folder: Path) -> None:
    """As an operator stops a catch-up: once the committed offsets reach the end."""
    wait_until_consumed(kafka, config, timeout_s=400)
    drain(job, folder)


def assert_arrival_reference(kafka: str, config, plan) -> dict:
    expected = {(c.model, c.order_id, c.touch_index, c.channel): c.revenue
                for c in reference_credits(plan, config.attribution.models, REFIT_S,
                                           correction_ms=HORIZON_MS)}
    rows = credit_rows(kafka, config.topics.credits)
    got = {credit_key(r): r["revenue"] for r in rows}
    missing, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
    assert not missing and not extra, f"{len(missing)} credits missing, {len(extra)} extra"
    changed = [k for k in expected if not math.isclose(got[k], expected[k], rel_tol=1e-9)]
    assert not changed, f"{len(changed)} credits differ"
    late = messages(kafka, config.topics.late)
    assert {r["reason"] for r in late} <= {"arrived_late"}
    assert len(late) == late_beyond(plan, HORIZON_MS) > 0
    report = [r for r in messages(kafka, config.topics.accounting)][-1]
    assert report["expired"] == 0 and report["late"] == len(late)
    return report


@pytest.mark.slow
@pytest.mark.parametrize(("partitions", "publish"),
                         [(p, n) for p in (1, 4, 8) for n in range(3)])
def test_unkeyed_publishes_caught_up_unbounded_count_by_arrival(
        kafka, flink, job_config, topic, telemetry, tmp_path, partitions, publish):
    """Three publishes per partition count, each spread anew; parallelism 1 and 2."""
    plan, values = telemetry
    config = unbounded(job_config, topic, partitions, 1 + publish % 2, idleness_s=0.5)
    publish_unkeyed(kafka, config.topics.spans, values, partitions, seed=publish)
    with cpu_hog():
        job = start(kafka, flink, config, f"catch-up-{partitions}-{publish}")
        stop_when_caught_up(kafka, config, job, tmp_path / "final")
    assert_arrival_reference(kafka, config, plan)


@pytest.mark.slow
def test_an_aligned_catch_up_counts_the_same(kafka, flink, job_config, topic, telemetry,
                                              tmp_path):
    """With watermark alignment (event_time.max_drift_s: partitions more than two days
    ahead of the slowest are paused), the same events count and the same credits hold."""
    plan, values = telemetry
    config = unbounded(job_config, topic, 8, 2, idleness_s=0.5)
    config = config.replace("event_time", max_drift_s=2 * 86_400.0)
    publish_unkeyed(kafka, config.topics.spans, values, 8, seed=5)
    with cpu_hog():
        job = start(kafka, flink, config, "aligned-catch-up")
        stop_when_caught_up(kafka, config, job, tmp_path / "final")
    assert_arrival_reference(kafka, config, plan)


@pytest.mark.slow
def test_a_producer_paused_past_the_idleness_loses_nothing(
        kafka, flink, job_config, topic, telemetry, tmp_path):
    """A live job: the producer sends the first half, pauses for many idleness periods (the
    partitions, read to their end, go idle and the watermark moves on), then sends the
    rest, each record with its arrival time."""
    plan, values = telemetry
    config = unbounded(job_config, topic, 4, 2, idleness_s=1.0)
    half = len(values) // 2
    publish_unkeyed(kafka, config.topics.spans, values[:half], 4, seed=7)
    with cpu_hog():
        job = start(kafka, flink, config, "paused-producer")
        wait_until_consumed(kafka, config, timeout_s=400)
        time.sleep(6)  # silent for six idleness periods
        publish_unkeyed(kafka, config.topics.spans, values[half:], 4, seed=8)
        stop_when_caught_up(kafka, config, job, tmp_path / "final")
    assert_arrival_reference(kafka, config, plan)


def test_an_event_that_counted_but_came_behind_the_kept_state_raises_the_alarm(
        kafka, flink, job_config, topic, telemetry, tmp_path):
    """A record stamped as arriving within the horizon of its event, but appended after the
    stream moved weeks past it (a producer that backdates its records): it counts, and the
    job no longer keeps its user's past. Not dropped silently: a late event with its own
    reason, the accounting's `expired`, and an alarm in the report."""
    plan, values = telemetry
    config = unbounded(job_config, topic, 1, 1, idleness_s=1.0)
    publish_unkeyed(kafka, config.topics.spans, values, 1, seed=1)
    job = start(kafka, flink, config, "backdated")
    wait_until_consumed(kafka, config, timeout_s=400)
    first = min(e.ts_ns for e in plan.events) // 1_000_000
    # a new user's touch from the plan's first day, stamped as arriving an hour after it
    touch = PlannedEvent("touchpoint", "user-backdated", (first + 3_600_000) * 1_000_000,
                         "display", "dv360-awareness")
    (message,) = encoded(Plan(events=[touch]), batch_size=8)
    out = producer(kafka)
    out.send(config.topics.spans, plain(message), timestamp_ms=first + 2 * 3_600_000)
    out.flush()
    out.close()
    stop_when_caught_up(kafka, config, job, tmp_path / "final")
    late = messages(kafka, config.topics.late)
    expired = [r for r in late if r["reason"] == "state_expired"]
    assert [r["user_id"] for r in expired] == ["user-backdated"]
    report = messages(kafka, config.topics.accounting)[-1]
    assert report["expired"] == 1
    assert report["late"] == late_beyond(plan, HORIZON_MS) + 1
    assert "ALARM: 1 events arrived within the correction horizon" in format_report(
        report, config.topics.dead_letter, config.topics.late)
    assert report["records_in"] == report["processed"] + report["dead_lettered"] + \
        report["late"] + report["other"]
