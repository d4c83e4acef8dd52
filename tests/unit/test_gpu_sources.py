"""GPU sources and the otlp_metrics encoding, without a broker."""

from pathlib import Path

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from pipelines.codec.metrics import decode_samples, encode_samples
from pipelines.sources.gpu_probe import Thresholds, describe, run_probe, warnings_for
from pipelines.sources.gpu_sources import GpuSourceError, parse_prometheus, replay_source
from schemas.gpu import load_catalog

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_dcgm_exporter_text_becomes_one_sample_per_gpu():
    text = (FIXTURES / "dcgm_metrics.txt").read_text()
    h100, l40s = sorted(parse_prometheus(text, now_ms=123), key=lambda s: s.model)
    assert h100.model == "NVIDIA H100 80GB HBM3" and l40s.model == "NVIDIA L40S"
    assert (h100.gpu_uuid, h100.hostname, h100.pod, h100.namespace) == (
        "GPU-5fd4c6a2-8b7e-4d1a-9f3c-2e6b1a0c7d11", "gpu-node-1", "ranker-7c9d5-abcde", "ml")
    assert (h100.util_pct, h100.mem_copy_util_pct, h100.power_w) == (87.0, 94.0, 412.527)
    assert (h100.fb_used_mib, h100.fb_free_mib, h100.energy_mj) == (61758, 19321, 81230456789)
    assert h100.ts_ms == 123 and l40s.pod == ""


def test_label_variants_are_accepted():
    text = ('DCGM_FI_DEV_GPU_UTIL{UUID="GPU-x",modelName="NVIDIA A100",hostname="n2",'
            'pod_name="p",pod_namespace="ns"} 12 1700000000000\n')
    (sample,) = parse_prometheus(text, now_ms=0)
    assert (sample.hostname, sample.pod, sample.namespace, sample.ts_ms) == (
        "n2", "p", "ns", 1700000000000)


def test_otlp_metrics_round_trip_uses_otel_names_and_units():
    samples = parse_prometheus((FIXTURES / "dcgm_metrics.txt").read_text(), now_ms=5_000)
    payload = encode_samples(samples)
    request = ExportMetricsServiceRequest.FromString(payload)
    names = {m.name for m in request.resource_metrics[0].scope_metrics[0].metrics}
    assert {"hw.gpu.utilization", "hw.gpu.memory.usage", "hw.power", "hw.energy"} <= names
    util = next(m for m in request.resource_metrics[0].scope_metrics[0].metrics
                if m.name == "hw.gpu.utilization")
    assert util.unit == "1" and util.gauge.data_points[0].as_double == pytest.approx(0.87)
    decoded, dead = decode_samples(payload)
    assert dead == []
    key = {s.gpu_uuid: s for s in samples}
    for sample in decoded:
        original = key[sample.gpu_uuid]
        assert sample._replace(util_pct=0, mem_copy_util_pct=0, fb_used_mib=0,
                               fb_free_mib=0, energy_mj=0) == \
            original._replace(util_pct=0, mem_copy_util_pct=0, fb_used_mib=0, fb_free_mib=0,
                              energy_mj=0)
        assert sample.util_pct == pytest.approx(original.util_pct)
        assert sample.fb_used_mib == pytest.approx(original.fb_used_mib)
        assert sample.energy_mj == pytest.approx(original.energy_mj)


def test_collector_forwarded_dcgm_names_decode_too():
    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add(
        name="DCGM_FI_DEV_POWER_USAGE")
    point = metric.gauge.data_points.add(time_unix_nano=2_000_000_000, as_double=250.0)
    for key, value in (("UUID", "GPU-c"), ("modelName", "NVIDIA H200"), ("Hostname", "h")):
        point.attributes.add(key=key).value.string_value = value
    (sample,), _ = decode_samples(request.SerializeToString())
    assert (sample.gpu_uuid, sample.model, sample.power_w, sample.ts_ms) == (
        "GPU-c", "NVIDIA H200", 250.0, 2000)


def test_malformed_metrics_message_is_a_dead_letter():
    samples, dead = decode_samples(b"\x0a\xff\xff")
    assert samples == [] and dead[0].reason == "malformed_otlp_metrics"


def test_replay_groups_scrapes_and_names_bad_lines(tmp_path):
    scrapes = list(replay_source(FIXTURES / "gpu_replay.jsonl", interval_s=0))
    assert [len(s) for s in scrapes] == [2, 2]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ts_ms": 1, "gpu_uuid": "g"}\n{"gpu_uuid": "no time"}\n')
    with pytest.raises(GpuSourceError, match=r"bad.jsonl:2: not a GPU sample"):
        list(replay_source(bad, 0))


def test_probe_lines_and_cost_warnings():
    lines: list[str] = []
    scrapes = list(replay_source(FIXTURES / "gpu_replay.jsonl", interval_s=0))
    samples, warnings = run_probe(scrapes, load_catalog(), None, Thresholds(), lines.append)
    text = "\n".join(lines)
    assert samples == 4 and warnings == 4
    assert "$6.98/h" in text and "$1.86/h" in text
    assert "allocated but idle (30000 MiB in use, utilisation 0 %)" in text
    assert "INVALID reading (util_pct is above 100 %: 130.0)" in text
    assert "network egress high (900 MB/s > 500 MB/s)" in text
    saturated = scrapes[0][0]._replace(mem_copy_util_pct=95.0)
    assert warnings_for(saturated, Thresholds()) == [
        "memory bandwidth saturated (95 % > 90 %)"]
    assert warnings_for(saturated, Thresholds(mem_bandwidth_pct=99)) == []
    assert "ranker-0" in describe(saturated, load_catalog(), Thresholds())


def test_a_replay_that_is_not_utf8_text_is_located(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"ts_ms": 1, "gpu_uuid": "g"}\n{"gpu_uuid": "\xff"}\n')
    with pytest.raises(GpuSourceError, match=r"bad.jsonl:2: byte 0xff at column 15"):
        list(replay_source(bad, 0))
