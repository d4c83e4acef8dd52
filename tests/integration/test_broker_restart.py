"""The broker killed with SIGKILL mid-stream and started again with its data: it answers on
the same address, the running attribution job recovers by itself (Kafka clients reconnect;
a failed checkpoint restarts the job from the last one), and the results read with
read_committed equal an uninterrupted run's: none lost, none repeated."""

from __future__ import annotations

import math
import os
import signal
import time

from pipelines.flink.attribution.job import build_pipeline
from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, ensure_topics, producer
from pipelines.sources.expected import late_beyond
from pipelines.sources.generator import plan_events
from pipelines.stack.local_kafka import LocalKafka
from tests.job_io import credit_key, credit_rows, drain, messages, wait_for_credits
from tests.reference import TEST_HORIZON_MS, reference_credits
from tests.spans import encoded, plain, stamp_of

REFIT_S = 6 * 3600.0


def publish(bootstrap: str, topic: str, values: list[bytes], first: int = 0) -> None:
    raw = producer(bootstrap)
    for i, value in enumerate(values, start=first):
        raw.send(topic, plain(value), partition=i % 2, timestamp_ms=stamp_of(value))
    raw.flush()
    raw.close()


def test_the_job_rides_out_a_broker_killed_and_started_again(flink, job_config, tmp_path):
    plan = plan_events(300, seed=23)
    values = encoded(plan)

    broker = LocalKafka(tmp_path / "kafka")
    bootstrap = broker.up().bootstrap
    try:
        config = job_config.replace("input", bounded=False)
        config = config.replace("attribution", refit_every_s=REFIT_S)
        config = config.replace("flink", restart_attempts=30, restart_delay_s=2.0)
        topics = config.topics
        ensure_topics(bootstrap, [topics.spans], partitions=2, config=SAMPLE_SPANS_TOPIC)
        ensure_topics(bootstrap, [topics.credits, topics.dead_letter, topics.late,
                                  topics.conversions, topics.accounting])
        half = len(values) // 2
        publish(bootstrap, topics.spans, values[:half])
        env = flink.environment(config)
        build_pipeline(env, config, bootstrap)
        job = env.execute_async("broker-restart")
        wait_for_credits(bootstrap, topics.credits)

        os.kill(broker.info().pid, signal.SIGKILL)  # mid-stream: journeys open, txns open
        time.sleep(5)
        again = broker.up()
        assert again.bootstrap == bootstrap  # the same address: clients find it again
        publish(bootstrap, topics.spans, values[half:], first=half)
        deadline = time.monotonic() + 240
        while len({credit_key(r) for r in credit_rows(bootstrap, topics.credits)}) < 10 and \
                time.monotonic() < deadline:
            time.sleep(2)
        time.sleep(10)  # a few checkpoints after the second half is read
        drain(job, tmp_path / "final")

        expected = {(c.model, c.order_id, c.touch_index, c.channel): c.revenue
                    for c in reference_credits(plan, config.attribution.models, REFIT_S)}
        rows = credit_rows(bootstrap, topics.credits)
        got = {credit_key(r): r["revenue"] for r in rows}
        assert len(rows) == len(got), "a credit is repeated"
        assert got.keys() == expected.keys()
        assert all(math.isclose(got[k], expected[k], rel_tol=1e-9) for k in expected)
        assert len(messages(bootstrap, topics.late)) == late_beyond(plan, TEST_HORIZON_MS)
    finally:
        broker.down()
