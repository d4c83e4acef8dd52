"""The production shape: the same telemetry through 1, 4 and 8 partitions, read at
parallelism 1 and 2, gives row for row the same credits, conversions, late events and
accounting. Watermarks are made per partition in the source and lateness is decided per
partition, so neither the partition count, the parallelism nor the interleaving of
partitions may change any result."""

from __future__ import annotations

from typing import Any

import pytest

from pipelines.flink.attribution.job import run_job
from pipelines.kafka.io import producer
from pipelines.sources.expected import late_beyond
from pipelines.sources.generator import plan_events
from tests.job_io import conversion_rows, credit_rows, messages
from tests.spans import encoded, plain, stamp_of

SHAPES = [(1, 1), (4, 1), (8, 1), (1, 2), (4, 2), (8, 2)]  # (partitions, parallelism)
REFIT_S = 6 * 3600.0
HORIZON_DAYS = 30.0


@pytest.fixture(scope="module")
def telemetry() -> tuple[Any, list[bytes]]:
    plan = plan_events(400, seed=33)
    return plan, encoded(plan)


def publish(kafka: str, topic: str, values: list[bytes], partitions: int) -> None:
    """Message i to partition i mod n: each partition holds an ordered share of the stream,
    as a keyless producer's batches spread over partitions."""
    raw = producer(kafka)
    for i, value in enumerate(values):
        raw.send(topic, plain(value), partition=i % partitions, timestamp_ms=stamp_of(value))
    raw.flush()
    raw.close()


def run_shape(kafka, flink, job_config, topic, values, partitions, parallelism):
    spans = topic("spans", partitions)
    config = job_config.replace("topics", spans=spans, credits=topic("credits"),
                                dead_letter=topic("dlq"), late=topic("late"),
                                conversions=topic("conversions"), accounting=topic("acc"))
    config = config.replace("flink", parallelism=parallelism)
    config = config.replace("attribution", refit_every_s=REFIT_S)
    # a 30-day horizon: the plan's held-back events on both sides of it (those older go
    # to late_events, the rest correct)
    config = config.replace("journey", correction_days=HORIZON_DAYS)
    publish(kafka, spans, values, partitions)
    run_job(config, kafka, env=flink.environment(config))
    credits = sorted((r["model"], r["order_id"], r["touch_index"], r["channel"],
                      r["campaign"], r["credit"], r["revenue"], r["stage"])
                     for r in credit_rows(kafka, config.topics.credits))
    conversions = sorted(tuple(sorted((k, str(v)) for k, v in r.items()))
                         for r in conversion_rows(kafka, config.topics.conversions))
    late = sorted((r["type"], r["user_id"], r["ts_ms"])
                  for r in messages(kafka, config.topics.late))
    dead = sorted(r["reason"] for r in messages(kafka, config.topics.dead_letter))
    (report,) = [r for r in messages(kafka, config.topics.accounting) if r["final"]]
    return credits, conversions, late, dead, report


def test_results_do_not_depend_on_partitions_or_parallelism(kafka, flink, job_config, topic,
                                                            telemetry):
    plan, values = telemetry
    results = {shape: run_shape(kafka, flink, job_config, topic, values, *shape)
               for shape in SHAPES}
    credits, conversions, late, dead, report = results[1, 1]
    assert len(credits) > 1000 and len(conversions) > 100
    late_ones = late_beyond(plan, int(HORIZON_DAYS * 86_400_000))
    assert len(late) == late_ones > 0
    assert report["late"] == late_ones and report["messages"] == len(values)
    assert report["records_in"] == report["processed"] + report["dead_lettered"] \
        + report["late"] + report["other"]
    for shape, (c, v, lt, d, r) in results.items():
        assert c == credits, f"credits differ at (partitions, parallelism) = {shape}"
        assert v == conversions, shape
        assert lt == late, shape
        assert d == dead, shape
        assert {k: r[k] for k in r if k != "job"} == {k: report[k] for k in report
                                                     if k != "job"}, shape
