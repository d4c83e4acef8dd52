"""One sample plan, published: its spans through the OpenTelemetry SDK (`seedance generate`,
the demo), the GPU samples of its GPU calls (as `seedance probe` sends them, or as a
recording for `seedance probe --replay`) and ad spend records. A run builds the plan once
(`pipelines.sources.generator.plan_events`) and hands it to each."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from pipelines.codec.metrics import encode_samples
from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, ensure_topics, producer, timestamp_type
from pipelines.sources.ad_spend import SpendRecord
from pipelines.sources.generator import ExperimentPlan, Plan, emit
from pipelines.sources.kafka_exporter import KafkaSpanExporter
from pipelines.sources.plan_costs import gpu_samples

# The sample's experiments (`seedance generate --experiments`, the demo): a bidding
# strategy that earns a third more per order than the control (a real lift the strategy
# table should find) and a checkout copy that changes nothing (an A/A test in effect: "not
# significant" is the right answer).
DEMO_EXPERIMENTS = (
    ExperimentPlan("bidding-strategy", ("control", "v2.3-dynamic-bidding"), revenue_lift=0.35),
    ExperimentPlan("checkout-copy", ("control", "short-copy")),
)


def publish_plan(plan: Plan, bootstrap: str, topic: str, seed: int,
                 encoding: str = "otlp_proto", partition_by_trace: bool = False,
                 client: dict[str, Any] | None = None, touches: str = "attributes") -> int:
    """The plan's spans (and malformed messages) to `topic`, each record stamped with when
    it would have arrived; returns the spans exported. A missing topic is created to keep
    those stamps (CreateTime, no retention: SAMPLE_SPANS_TOPIC); one that stamps records
    with the broker's time gets a warning. `client`: kafka-python settings (security:
    pipelines.kafka.security.for_python); `touches`: pipelines.sources.landing_form's
    TOUCH_FORMS."""
    ensure_topics(bootstrap, [topic], client=client, config=SAMPLE_SPANS_TOPIC)
    if timestamp_type(bootstrap, topic, client) != "CreateTime":
        print(f"warning: {topic} stamps records with the broker's time (LogAppendTime): the "
              "sample's arrival times are replaced by now, so its events older than "
              "journey.correction_days count as late; publish it to a CreateTime topic "
              "(a new one is created so)", file=sys.stderr)
    exporter = KafkaSpanExporter(bootstrap, topic, encoding=encoding,
                                 partition_by_trace=partition_by_trace, **(client or {}))
    raw = producer(bootstrap, **(client or {}))
    try:
        return emit(plan, exporter, lambda payload: raw.send(topic, payload).get(30),
                    seed=seed, touches=touches)
    finally:
        raw.close()


def generated_summary(plan: Plan, spans: int, users: int, topic: str, seconds: float) -> str:
    """What `seedance generate` (and the demo) say of a published plan."""
    kinds: dict[str, int] = defaultdict(int)
    for event in plan.events:
        kinds[event.kind] += 1
    return (f"generated {spans} spans for {users} users to {topic} in "
            f"{seconds:.1f}s: {kinds['touchpoint']} touchpoints, "
            f"{kinds['conversion']} orders, {kinds['invalid_conversion']} broken orders, "
            f"{kinds['exposure']} experiment exposures, "
            f"{plan.late_count} late touches, {len(plan.malformed)} malformed messages")


def publish_gpu_samples(plan: Plan, bootstrap: str, topic: str, seed: int,
                        client: dict[str, Any] | None = None) -> int:
    """The GPU samples of the plan's GPU calls, as `seedance probe` sends them; returns how
    many."""
    samples = gpu_samples(plan, seed=seed)
    raw = producer(bootstrap, **(client or {}))
    try:
        for start in range(0, len(samples), 500):
            raw.send(topic, encode_samples(samples[start:start + 500])).get(30)
    finally:
        raw.close()
    return len(samples)


def write_gpu_recording(plan: Plan, path: Path, seed: int) -> int:
    """The same GPU samples as a recording for `seedance probe --replay`; returns how many."""
    samples = gpu_samples(plan, seed=seed)
    with path.open("w") as out:
        for sample in samples:
            out.write(json.dumps(sample._asdict()) + "\n")
    return len(samples)


def publish_spend(bootstrap: str, topic: str, records: list[SpendRecord],
                  client: dict[str, Any] | None = None) -> None:
    """Spend records (a plan's daily spend, a restatement) to the ad spend topic, keyed by
    what a restatement replaces."""
    raw = producer(bootstrap, **(client or {}))
    try:
        for record in records:
            raw.send(topic, record.to_json().encode(), key=record.key().encode())
        raw.flush()
    finally:
        raw.close()
