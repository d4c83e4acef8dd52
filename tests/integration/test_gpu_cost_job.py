"""GPU samples and GPU-backed spans through the real broker and the Flink GPU cost job."""

from __future__ import annotations

import json
import math
from collections import defaultdict

import pytest

from pipelines.codec.metrics import encode_samples
from pipelines.flink.gpu_cost.job import run_gpu_job
from pipelines.kafka.io import producer, read_all
from pipelines.sources.kafka_exporter import KafkaSpanExporter
from pipelines.store import summaries
from pipelines.store.loading import TopicLoader
from pipelines.store.warehouse import Warehouse
from schemas.gpu import GpuSample, load_catalog
from schemas.records import GpuCall
from tests.gpu_telemetry import H100, L40S, T0, S, sample
from tests.spans import make_spans
from udfs.roi.gpu_cost import allocate_gpu

SAMPLES = [sample(T0 + i * 10 * S, "GPU-A", H100) for i in range(1, 7)] + \
    [sample(T0 + i * 10 * S, "GPU-B", L40S, pod="rec-0") for i in range(1, 4)]
BROKEN = sample(T0 + 20 * S, "GPU-C", H100, power=2000.0)  # above any H100's power limit

CALLS = [  # (span name, attributes, start, end)
    ("rank", {"gpu.uuid": "GPU-A", "gpu.workload": "ranker", "user.id": "u1"},
     T0 + 5 * S, T0 + 25 * S),
    ("rank", {"gpu.uuid": "GPU-A", "gpu.workload": "ranker", "user.id": "u2"},
     T0 + 20 * S, T0 + 30 * S),
    ("recommend", {"gpu.workload": "recsys", "k8s.pod.name": "rec-0",
                   "k8s.namespace.name": "ml", "user.id": "u3"}, T0 + 12 * S, T0 + 18 * S),
    ("ghost", {"gpu.workload": "recsys", "k8s.pod.name": "ghost-0",
               "k8s.namespace.name": "ml"}, T0 + 12 * S, T0 + 14 * S),
]


@pytest.fixture
def gpu_config(job_config, topic):
    return job_config.replace("gpu", metrics_topic=topic("metrics"), costs_topic=topic("costs"),
                              metrics_dead_letter=topic("metrics-dlq"),
                              nominal_interval_s=10.0, max_gap_s=60.0, link_timeout_s=60.0)


def test_gpu_cost_per_call_and_idle_matches_the_reference(kafka, flink, gpu_config, tmp_path):
    config = gpu_config
    raw = producer(kafka)
    by_ts: dict[int, list[GpuSample]] = defaultdict(list)
    for s in [*SAMPLES, BROKEN]:
        by_ts[s.ts_ms].append(s)
    for ts in sorted(by_ts):
        raw.send(config.gpu.metrics_topic, encode_samples(by_ts[ts])).get(30)
    raw.close()
    spans = make_spans([(n, a, start * 10**6, end * 10**6) for n, a, start, end in CALLS],
                       resource={"service.name": "ranker"})
    exporter = KafkaSpanExporter(kafka, config.topics.spans)
    exporter.export(spans)
    exporter.shutdown()

    run_gpu_job(config, kafka, env=flink.environment(config))

    records = list(read_all(kafka, config.gpu.costs_topic))
    rows = [json.loads(v) for _, v in records]
    # keyed by GPU: one GPU's intervals stay in order in one partition
    assert [json.loads(k) for k, _ in records] == [[row["gpu_uuid"]] for row in rows]
    per_span: dict[str, float] = defaultdict(float)
    idle: dict[str, float] = defaultdict(float)
    intervals: dict[tuple[str, int], float] = {}
    allocated_in: dict[tuple[str, int], float] = defaultdict(float)
    for row in rows:
        key = (row["gpu_uuid"], row["interval_end_ms"])
        intervals[key] = row["interval_cost_usd"]
        if row["kind"] == "call":
            per_span[row["span_id"]] += row["cost_usd"]
            allocated_in[key] += row["cost_usd"]
        elif row["kind"] == "idle":
            idle[row["gpu_uuid"]] += row["cost_usd"]
            allocated_in[key] += row["cost_usd"]
    # conservation per interval: calls + idle = the interval's cost
    for key, cost in intervals.items():
        assert math.isclose(allocated_in[key], cost, rel_tol=1e-9), key

    # the same arithmetic in process (udfs.roi.gpu_cost) on the same inputs
    calls = [GpuCall(format(s.context.trace_id, "032x"), format(s.context.span_id, "016x"),
                     s.start_time // 10**6, s.end_time // 10**6, s.attributes.get("user.id", ""),
                     s.attributes.get("gpu.uuid", "") or ("GPU-B" if s.name == "recommend"
                                                           else ""),
                     s.attributes.get("k8s.pod.name", ""),
                     s.attributes.get("k8s.namespace.name", ""), s.attributes["gpu.workload"])
             for s in spans if s.name != "ghost"]
    catalog = load_catalog()
    expected_span: dict[str, float] = {}
    expected_idle: dict[str, float] = {}
    for gpu in ("GPU-A", "GPU-B"):
        ref = allocate_gpu([s for s in SAMPLES if s.gpu_uuid == gpu],
                           [c for c in calls if c.gpu_uuid == gpu], catalog, 10 * S, 60 * S)
        expected_span.update({c.span_id: c.cost_usd for c in ref.calls})
        expected_idle[gpu] = sum(i.cost_usd for i in ref.idle)
    assert set(per_span) == set(expected_span) and len(per_span) == 3
    for span_id, usd in expected_span.items():
        assert math.isclose(per_span[span_id], usd, rel_tol=1e-9)
    for gpu, usd in expected_idle.items():
        assert math.isclose(idle[gpu], usd, rel_tol=1e-9)
    # hand check: GPU-A is priced at $6.98/h for 60 s, of which 25 s are busy
    assert math.isclose(sum(intervals[k] for k in intervals if k[0] == "GPU-A"),
                        6.98 * 60 / 3600, rel_tol=1e-9)
    assert math.isclose(idle["GPU-A"], 6.98 * 35 / 3600, rel_tol=1e-9)

    dead = [json.loads(v) for _, v in read_all(kafka, config.gpu.metrics_dead_letter)]
    reasons = sorted((d["reason"], d["detail"]) for d in dead)
    assert reasons[0][0] == "invalid_gpu_sample" and "above the 800 W limit" in reasons[0][1]
    assert reasons[1][0] == "unlinked_gpu_call" and "ml/ghost-0" in reasons[1][1]
    assert len(reasons) == 2

    # into the warehouse: per workload and per trace, totals conserved
    warehouse = Warehouse(f"sqlite:///{tmp_path / 'wh.db'}")
    assert TopicLoader(warehouse).load_gpu_costs(kafka, config.gpu.costs_topic) == len(rows)
    summary = summaries.gpu_cost_summary(warehouse)
    warehouse.close()
    assert math.isclose(summary["allocated_usd"] + summary["idle_usd"], summary["interval_usd"],
                        rel_tol=1e-9)
    workloads = {w: usd for _, w, _, usd in summary["per_workload"]}
    assert math.isclose(workloads["recsys"], expected_span[calls[2].span_id], rel_tol=1e-9)
    assert math.isclose(workloads["ranker"], expected_span[calls[0].span_id]
                        + expected_span[calls[1].span_id], rel_tol=1e-9)
