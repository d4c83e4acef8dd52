"""GPU samples per second through the Flink GPU cost job, beside the same arithmetic in
one Python process (the ceiling: no Kafka, no Flink, no state).

Starts its own Kafka broker (in a temporary folder), publishes N samples of K GPUs (one
every 10 s each) plus GPU-backed spans, runs the GPU cost job bounded, and times it.

    .venv/bin/python bench/gpu_cost.py [--samples 100000] [--gpus 8]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from pipelines.codec.metrics import encode_samples  # noqa: E402
from pipelines.flink.gpu_cost.job import run_gpu_job  # noqa: E402
from pipelines.kafka.io import ensure_topics, producer  # noqa: E402
from pipelines.settings.job_config import load_config  # noqa: E402
from pipelines.sources.kafka_exporter import KafkaSpanExporter  # noqa: E402
from pipelines.stack.local_kafka import LocalKafka  # noqa: E402
from schemas.gpu import GpuSample, load_catalog  # noqa: E402
from schemas.records import GpuCall  # noqa: E402
from udfs.roi import allocate_gpu  # noqa: E402

T0 = 1_788_220_800_000
STEP = 10_000


def workload(samples: int, gpus: int, seed: int = 3) -> tuple[list[GpuSample], list[GpuCall]]:
    rng = random.Random(seed)
    uuids = [f"GPU-bench-{i:04d}" for i in range(gpus)]
    per_gpu = samples // gpus
    out = [GpuSample(T0 + (k + 1) * STEP, uuid, "NVIDIA H100 80GB HBM3", "node", "", "",
                     rng.uniform(0, 100), rng.uniform(0, 60), 1000.0, 1000.0, 300.0, 1.0)
           for k in range(per_gpu) for uuid in uuids]
    calls = []
    for k in range(per_gpu // 2):  # a call every other interval on each GPU
        for uuid in uuids:
            start = T0 + 2 * k * STEP + rng.randrange(STEP)
            calls.append(GpuCall(f"{rng.getrandbits(128):032x}", f"{rng.getrandbits(64):016x}",
                                 start, start + rng.randrange(100, 15_000), "u", uuid, "", "",
                                 "bench"))
    return out, calls


def in_process(samples: list[GpuSample], calls: list[GpuCall]) -> float:
    catalog = load_catalog()
    started = time.perf_counter()
    for uuid in {s.gpu_uuid for s in samples}:
        allocate_gpu([s for s in samples if s.gpu_uuid == uuid],
                     [c for c in calls if c.gpu_uuid == uuid], catalog, STEP, 6 * STEP)
    return time.perf_counter() - started


def spans_for(calls: list[GpuCall]):
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    for call in calls:
        span = tracer.start_span("infer", attributes={"gpu.uuid": call.gpu_uuid,
                                                      "gpu.workload": "bench"},
                                 start_time=call.start_ms * 1_000_000)
        span.end(end_time=call.end_ms * 1_000_000)
    return memory.get_finished_spans()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    samples, calls = workload(args.samples, args.gpus)
    ceiling = in_process(samples, calls)
    home = Path(tempfile.mkdtemp(prefix="seedance-bench-gpu-"))
    broker = LocalKafka(home / "kafka")
    info = broker.up()
    try:
        config = load_config().replace("input", bounded=True, starting_offsets="earliest",
                                       group_id="bench-gpu")
        config = config.replace("flink", checkpoint_interval_s=5.0,
                                checkpoint_dir=str(home / "checkpoints"))
        config = config.replace("gpu", nominal_interval_s=STEP / 1000, max_gap_s=6 * STEP / 1000)
        gpu = config.gpu
        ensure_topics(info.bootstrap, [config.topics.spans, config.topics.late, gpu.costs_topic,
                                       gpu.metrics_topic, gpu.metrics_dead_letter])
        out = producer(info.bootstrap)
        for start in range(0, len(samples), 500):
            out.send(gpu.metrics_topic, encode_samples(samples[start:start + 500]))
        out.flush()
        out.close()
        exporter = KafkaSpanExporter(info.bootstrap, config.topics.spans)
        spans = spans_for(calls)
        for start in range(0, len(spans), 500):
            exporter.export(spans[start:start + 500])
        exporter.shutdown()
        started = time.perf_counter()
        run_gpu_job(config, info.bootstrap, job_name="bench-gpu-cost")
        job = time.perf_counter() - started
    finally:
        broker.down()
    print(f"{len(samples):,} GPU samples of {args.gpus} GPUs and {len(calls):,} GPU-backed calls")
    print(f"{'':38}{'seconds':>9}{'samples/s':>12}")
    print(f"{'ceiling: udfs.roi.gpu_cost in one process':38}{ceiling:9.2f}"
          f"{len(samples) / ceiling:12,.0f}")
    print(f"{'Flink GPU cost job (incl. start-up)':38}{job:9.2f}{len(samples) / job:12,.0f}")
    print(f"ratio job/ceiling: {ceiling / job:.2f}")


if __name__ == "__main__":
    main()
