"""The streaming jobs' integration tests' side of Kafka: planned events published through
the project's span exporter, rows read back from the jobs' topics, and waiting for a job
(to commit credits, to consume its input, to drain)."""

from __future__ import annotations

import json
import math
import threading
import time
from datetime import UTC, datetime
from typing import Any

from pipelines.codec import credit_messages, table_messages
from pipelines.kafka.io import consumer_lag, producer, read_all
from pipelines.settings.job_config import StreamingJobConfig
from pipelines.sources.expected import late_beyond
from pipelines.sources.generator import PlannedEvent, emit
from pipelines.sources.kafka_exporter import KafkaSpanExporter
from tests.reference import TEST_HORIZON_MS, reference_credits
from tests.spans import plain, stamp_of

# times in ns since the epoch, the OpenTelemetry SDK's unit
T0 = int(datetime(2026, 9, 1, tzinfo=UTC).timestamp()) * 10**9
S = 10**9
H = 3600 * S
D = 24 * H


def touch(user, at, channel):
    return PlannedEvent("touchpoint", user, at, channel, f"{channel}-campaign")


def order(user, at, order_id, revenue, kind="conversion"):
    return PlannedEvent(kind, user, at, order_id=order_id, revenue=revenue)


def publish(kafka, topic, plan, encoding="otlp_proto"):
    raw = producer(kafka)
    emit(plan, KafkaSpanExporter(kafka, topic, encoding=encoding),
         lambda payload: raw.send(topic, payload).get(30), batch_size=4)
    raw.close()


def messages(kafka, topic):
    """Every row of a topic: a message is one JSON row, or a table of rows (credits,
    conversions: pipelines/codec/table_messages.py)."""
    return [row for _, value in read_all(kafka, topic) for row in table_messages.decode(value)]


def conversion_rows(kafka, topic):
    """The conversion rows that hold: of each order, its latest (a correction restates
    it; every version of one order is in one partition, in order)."""
    return list({row["order_id"]: row for row in messages(kafka, topic)}.values())


def credit_rows(kafka, topic):
    """The credit rows that hold on the credits topic: of each conversion under each
    model, the rows of its latest message (pipelines/codec/credit_messages.py)."""
    return credit_messages.latest(value for _, value in read_all(kafka, topic))


def credit_key(row):
    return (row["model"], row["order_id"], row["touch_index"], row["channel"])


def send(kafka, topic, rows):
    out = producer(kafka)
    for row in rows:
        out.send(topic, row if isinstance(row, bytes) else json.dumps(row).encode()).get(30)
    out.close()


def latest(rows):
    """The roi topic is a changelog: the last row per key is the current one."""
    current = {}
    for row in rows:
        # (a day_closed row has no model: its key is the day and part)
        key = (row["kind"], row.get("model"), row["day"], row.get("dimension"),
               row.get("cost_kind"), row.get("key", row.get("order_id", row.get("part"))))
        current[key] = row
    return current


def wait_for_credits(kafka: str, topic: str, timeout_s: float = 120.0) -> int:
    """Until some credits are committed (the job has read, stepped and checkpointed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = len(credit_rows(kafka, topic))
        if rows:
            return rows
        time.sleep(1)
    raise AssertionError(f"no credits committed to {topic} within {timeout_s:.0f} s")


def wait_until_consumed(kafka: str, config: StreamingJobConfig,
                        timeout_s: float = 240.0) -> None:
    """Until the job has read, processed and checkpointed the whole spans topic (its
    committed offsets reach the end): a drain stop ends the input where the source stands,
    so a job still catching up after a restart would never see the rest."""
    deadline = time.monotonic() + timeout_s
    lag = consumer_lag(kafka, config.input.group_id, config.topics.spans)
    while lag and time.monotonic() < deadline:
        time.sleep(1)
        lag = consumer_lag(kafka, config.input.group_id, config.topics.spans)
    assert lag == 0, f"the job still had {lag} records of {config.topics.spans} to read"


def drain(job, folder) -> None:
    """Stop with a savepoint after the final watermark (PyFlink 2.2's own wrapper misses
    the savepoint format argument the Java method takes)."""
    from pyflink.java_gateway import get_gateway

    canonical = get_gateway().jvm.org.apache.flink.core.execution.SavepointFormatType.CANONICAL
    job._j_job_client.stopWithSavepoint(True, folder.as_uri(), canonical).get()


def publishing_slowly(kafka: str, topic: str, values: list[bytes], partitions: int,
                      pause_s: float = 0.2,
                      stop: threading.Event | None = None) -> threading.Thread:
    """A thread that publishes `values` in order (each with its sample's arrival time), 10
    every `pause_s`, `values[i]` to partition i % `partitions`, until `stop` is set;
    started: input still arriving while a job runs."""
    def publish_slowly() -> None:
        out = producer(kafka)
        try:
            for i, value in enumerate(values):
                if stop is not None and stop.is_set():
                    break
                out.send(topic, plain(value), partition=i % partitions,
                         timestamp_ms=stamp_of(value))
                if i % 10 == 9:
                    out.flush()
                    time.sleep(pause_s)
            out.flush()
        finally:
            out.close()

    publisher = threading.Thread(target=publish_slowly)
    publisher.start()
    return publisher


def assert_reference_credits(kafka: str, config: StreamingJobConfig, plan: Any,
                             refit_s: float) -> None:
    """The committed credits are the batch reference's for `plan`, row for row (none
    missing, none extra, none repeated, none changed), and the late events as many as
    the events beyond the test horizon."""
    expected = {(c.model, c.order_id, c.touch_index, c.channel): c.revenue
                for c in reference_credits(plan, config.attribution.models, refit_s)}
    rows = credit_rows(kafka, config.topics.credits)
    got = {credit_key(r): r["revenue"] for r in rows}
    assert len(rows) == len(got), f"{len(rows) - len(got)} credits are repeated"
    missing, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
    assert not missing and not extra, (
        f"{len(missing)} credits missing (orders {sorted({k[1] for k in missing})[:8]}), "
        f"{len(extra)} extra (orders {sorted({k[1] for k in extra})[:8]}) "
        f"of {len(expected)}")
    changed = [k for k in expected if not math.isclose(got[k], expected[k], rel_tol=1e-9)]
    assert not changed, f"{len(changed)} credits changed, e.g. {changed[:3]}"
    late = messages(kafka, config.topics.late)
    assert len(late) == late_beyond(plan, TEST_HORIZON_MS), "late events"
