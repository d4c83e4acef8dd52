"""GPU samples <-> OTLP metrics, the wire format of the `otlp_metrics` topic.

Encoding follows the OpenTelemetry hardware semantic conventions: gauges
`hw.gpu.utilization` and `hw.gpu.memory.utilization` (ratios), `hw.gpu.memory.usage` and
`hw.gpu.memory.free` (bytes), `hw.power` (W), `hw.energy` (J), `system.network.io.transmit.rate`
(By/s), with attributes `hw.id` (the GPU UUID), `hw.model`, `hw.type=gpu`, `host.name`,
`k8s.pod.name`, `k8s.namespace.name`. Decoding also accepts dcgm-exporter's metric names
and labels as an OpenTelemetry Collector's prometheus receiver forwards them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from schemas.gpu import DCGM_FIELDS, LABELS, OTEL_FIELDS, GpuSample
from schemas.records import DeadLetter

_UNITS = {"hw.gpu.utilization": "1", "hw.gpu.memory.utilization": "1",
          "hw.gpu.memory.usage": "By", "hw.gpu.memory.free": "By", "hw.power": "W",
          "hw.energy": "J", "system.network.io.transmit.rate": "By/s"}
_FIELD_TO_OTEL = {field: (name, factor) for name, (field, factor) in OTEL_FIELDS.items()}
_FROM_DCGM = {name: (field, 1.0) for name, field in DCGM_FIELDS.items()}
_NUMERIC = ("util_pct", "mem_copy_util_pct", "fb_used_mib", "fb_free_mib", "power_w",
            "energy_mj", "net_tx_bytes_per_s")


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def encode_samples(samples: Sequence[GpuSample]) -> bytes:
    request = ExportMetricsServiceRequest()
    by_host: dict[str, list[GpuSample]] = {}
    for sample in samples:
        by_host.setdefault(sample.hostname, []).append(sample)
    for host, group in by_host.items():
        resource_metrics = request.resource_metrics.add()
        resource_metrics.resource.attributes.append(_kv("host.name", host))
        scope = resource_metrics.scope_metrics.add()
        scope.scope.name = "seedance.gpu_probe"
        for field in _NUMERIC:
            name, factor = _FIELD_TO_OTEL[field]
            metric = scope.metrics.add(name=name, unit=_UNITS[name])
            for sample in group:
                point = metric.gauge.data_points.add(
                    time_unix_nano=sample.ts_ms * 1_000_000,
                    as_double=getattr(sample, field) / factor)
                point.attributes.extend([
                    _kv("hw.id", sample.gpu_uuid), _kv("hw.model", sample.model),
                    _kv("hw.type", "gpu"), _kv("k8s.pod.name", sample.pod),
                    _kv("k8s.namespace.name", sample.namespace),
                    _kv("seedance.pricing_class", sample.pricing_class)])
    return request.SerializeToString()


def _text(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    return "" if kind is None else str(getattr(value, kind))


def decode_samples(payload: bytes | None) -> tuple[list[GpuSample], list[DeadLetter]]:
    """One OTLP metrics message -> GPU samples. Never raises on bad input."""
    if not payload:
        return [], [DeadLetter("empty_message", "message value is empty", b"")]
    try:
        request = ExportMetricsServiceRequest.FromString(payload)
    except DecodeError as error:
        return [], [DeadLetter("malformed_otlp_metrics", f"DecodeError: {error}",
                               bytes(payload))]
    rows: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for resource_metrics in request.resource_metrics:
        resource = {kv.key: _text(kv.value) for kv in resource_metrics.resource.attributes}
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                target = OTEL_FIELDS.get(metric.name) or _FROM_DCGM.get(metric.name)
                if target is None:
                    continue
                field, factor = target
                kind = metric.WhichOneof("data")
                points = getattr(metric, kind).data_points if kind in ("gauge", "sum") else []
                for point in points:
                    attrs = {**resource, **{kv.key: _text(kv.value) for kv in point.attributes}}
                    base: dict[str, Any] = {"gpu_uuid": "", "model": "", "hostname": "",
                                            "pod": "", "namespace": "",
                                            "pricing_class": "on_demand"}
                    for label, value in attrs.items():
                        if label in LABELS and value:
                            base[LABELS[label]] = value
                    ts_ms = point.time_unix_nano // 1_000_000
                    key = (base["gpu_uuid"], base["pod"], base["namespace"], ts_ms)
                    row = rows.setdefault(key, {**base, "ts_ms": ts_ms,
                                                **dict.fromkeys(_NUMERIC, 0.0)})
                    value = point.as_double if point.WhichOneof("value") == "as_double" \
                        else float(point.as_int)
                    row[field] = value * factor
    return [GpuSample(**row) for row in rows.values()], []
