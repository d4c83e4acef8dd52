"""GPU telemetry for the GPU cost job's tests: samples of two GPU models, and two hours of
samples and GPU-backed spans run through the job on topics of any partitioning
(`run_shape`)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

from pipelines.codec.metrics import encode_samples
from pipelines.flink.gpu_cost.job import run_gpu_job
from pipelines.kafka.io import producer, read_all
from pipelines.sources.kafka_exporter import CollectingProducer, KafkaSpanExporter
from schemas.gpu import GpuSample
from tests.spans import make_spans

# times in ms since the epoch, a GPU sample's unit
T0 = int(datetime(2026, 9, 1, tzinfo=UTC).timestamp()) * 1000
S = 1000
H100, L40S = "NVIDIA H100 80GB HBM3", "NVIDIA L40S"


def sample(ts, uuid, model, pod="", util=50.0, power=300.0):
    return GpuSample(ts, uuid, model, "node-1", pod, "ml" if pod else "", util, 20.0, 1000.0,
                     1000.0, power, 1.0)


MINUTES = 120  # well past the allowed out-of-orderness (5 min)


def telemetry() -> tuple[list[bytes], list[bytes]]:
    rng = random.Random(4)
    metrics = [encode_samples([sample(T0 + i * 10 * S, "GPU-A", H100, util=rng.uniform(5, 95)),
                               sample(T0 + i * 10 * S, "GPU-B", L40S, pod="rec-0",
                                      util=rng.uniform(5, 95))])
               for i in range(1, MINUTES * 6)]
    sink = CollectingProducer()
    exporter = KafkaSpanExporter("unused:0", producer=sink)
    for batch in range(MINUTES * 2):
        calls = []
        for n in range(4):
            start = T0 + batch * 30 * S + n * 7 * S
            attrs = ({"gpu.uuid": "GPU-A", "gpu.workload": "ranker", "user.id": f"u{n}"}
                     if n % 2 else {"gpu.workload": "recsys", "k8s.pod.name": "rec-0",
                                    "k8s.namespace.name": "ml", "user.id": f"u{n}"})
            calls.append((f"call-{batch}-{n}", attrs, start * 10**6,
                          (start + rng.randrange(1, 12) * S) * 10**6))
        exporter.export(make_spans(calls, resource={"service.name": "shop"}))
    return metrics, sink.values


def run_shape(kafka, flink, job_config, topic, partitions, parallelism):
    metrics_topic, spans_topic = topic("metrics", partitions), topic("spans", partitions)
    metrics, spans = telemetry()
    raw = producer(kafka)
    for name, values in ((metrics_topic, metrics), (spans_topic, spans)):
        # each partition's share in order, one partition after another: the source reads
        # whole partitions ahead of others
        for p in range(partitions):
            for value in values[p::partitions]:
                raw.send(name, value, partition=p)
    raw.flush()
    raw.close()
    config = job_config.replace("topics", spans=spans_topic, late=topic("late"))
    config = config.replace("gpu", metrics_topic=metrics_topic, costs_topic=topic("costs"),
                            metrics_dead_letter=topic("metrics-dlq"), nominal_interval_s=10.0,
                            max_gap_s=60.0, link_timeout_s=60.0)
    config = config.replace("flink", parallelism=parallelism)
    # watermarks as often as Flink will: a partition read ahead shows at once
    config = config.replace("event_time", watermark_interval_s=0.01)
    run_gpu_job(config, kafka, env=flink.environment(config))
    costs = sorted(tuple(sorted((k, str(v)) for k, v in json.loads(value).items()))
                   for _, value in read_all(kafka, config.gpu.costs_topic))
    late = [json.loads(v) for _, v in read_all(kafka, config.topics.late)]
    return costs, late
