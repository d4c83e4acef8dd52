"""OTLP payloads the codec tests share: random span batches over every attribute the rules
read, a protobuf request that opens like JSON, and the comparison of the C scanner with the
Python decoder (`both`, `plain`)."""

from __future__ import annotations

import random
import time

import numpy as np
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from pipelines.codec.events import DecodedEvents, decode_events
from schemas.telemetry import EARLIEST_NS
from tests.spans import make_spans

T0 = 1_756_684_800_000_000_000  # 2025-09-01T00:00:00Z in ns
BUCKETS = 7


def plain(decoded: DecodedEvents) -> dict:
    """Everything a reader of the decoding sees, as plain values; the interleaving of the
    two kinds as the order of their places in the message."""
    seq = np.concatenate([decoded.touch_seq, decoded.order_seq])
    kinds = ["t"] * len(decoded.touch_seq) + ["o"] * len(decoded.order_seq)
    return {
        "touches": [c.tolist() for c in decoded.touches],
        "orders": [c.tolist() for c in decoded.orders],
        "buckets": (decoded.touch_bucket.tolist(), decoded.order_bucket.tolist()),
        "interleaving": [kinds[i] for i in np.argsort(seq, kind="stable").tolist()],
        "dead_letters": [(d.reason, d.detail, d.payload) for d in decoded.dead_letters],
        "counts": (decoded.spans, decoded.ignored, decoded.unbuilt_gpu_calls,
                   decoded.records_in),
    }


def both(payload: bytes) -> tuple[DecodedEvents, DecodedEvents]:
    return decode_events(payload, BUCKETS), decode_events(payload, BUCKETS, scanner=False)


def random_payloads(seed: int, count: int, plain_only: bool = False) -> list[bytes]:
    """Spans drawn over every attribute the rules read, valid and not, under resources that
    change how spans are read (`plain_only`: only values each rule plainly accepts)."""
    rng = random.Random(seed)
    future = time.time_ns() + 2 * 3600 * 10**9
    choices: dict[str, list[object]] = {
        "user.id": ["u1", "u2", "ü-3", "", 42, True, "x" * 300, "ctl-\x00-user", "c1\x85",
                    "nbsp\u00a0ok"],
        "enduser.id": ["legacy", ""],
        "marketing.channel": ["email", "search", "", "x" * 300, 3, "e\x1bmail"],
        "marketing.campaign": ["spring", "", 9],
        "order.id": ["o1", "o2", "", 981],
        "order.revenue": [10.0, 0.0, 7, -3.0, float("nan"), "12.5", "abc", 1e12, 1e308,
                          10**13, 10**12],
        "order.currency": ["EUR", "USD", "dollars", ""],
        "gpu.uuid": ["GPU-1", "", 7],
        "gpu.workload": ["ranker", ""],
        "k8s.pod.name": ["pod-1", "y" * 300],
        "db.system.name": ["postgresql"],
        # an ordinary HTTP request, a landing or not (pipelines/codec/landings.py)
        "url.full": ["https://shop.example.com/?utm_source=google&utm_medium=cpc&utm_campaign=b",
                     "https://shop.example.com/p/1", "https://shop.example.com/?GCLID=x",
                     "https://shop.example.com/?fbclid=1&utm_campaign=" + "c" * 300, 5],
        "url.query": ["utm_source=newsletter&utm_medium=email", "page=2", "Msclkid=9"],
        "http.request.header.referer": [["https://www.google.com/"], "https://t.co/x",
                                        ["https://shop.example.com/a"], []],
        "server.address": ["shop.example.com"],
    }
    user, channel = "u", rng.choice(["email", "search", "ü"])
    plain_spans = [{"user.id": user, "marketing.channel": channel},
                   {"user.id": user, "marketing.channel": channel, "marketing.campaign": "c"},
                   {"user.id": user, "order.id": "o1", "order.revenue": 10.0},
                   {"order.id": "o2", "order.revenue": 3, "order.currency": "EUR"},
                   {"gpu.uuid": "GPU-1", "gpu.workload": "ranker"},
                   {"db.system.name": "postgresql"}]
    payloads = []
    for _ in range(count):
        specs = []
        for n in range(rng.randrange(1, 25)):
            attrs = {key: rng.choice(values) for key, values in choices.items()
                     if rng.random() < 0.35}
            start = rng.choice([T0 + rng.randrange(10**12)] * 8 + [
                0, future, 1_000, EARLIEST_NS - 1, EARLIEST_NS])
            end = rng.choice([start + 1_000_000] * 4 + [start, max(start - 1, 0)])
            if plain_only:  # one of the four plain kinds of span
                attrs = dict(rng.choice(plain_spans))
                if "user.id" in attrs:
                    attrs["user.id"] = f"u{rng.randrange(50)}"
                start = T0 + rng.randrange(10**12)
                end = start + 1_000_000
            specs.append((f"s{n}", attrs, start, end))
        resource = rng.choice([{"service.name": "shop"}, {"k8s.pod.name": "pod-7"},
                               {"user.id": "from-resource"}, {"marketing.channel": "email"},
                               {"order.id": "r1", "user.id": "r"}, {"gpu.uuid": "GPU-9"}]
                              [:2 if plain_only else 6])
        payloads.append(encode_spans(make_spans(specs, resource=resource))
                        .SerializePartialToString())
    return payloads


def json_looking_protobuf() -> bytes:
    """A valid OTLP protobuf request of one touch whose first resource is 123 bytes long:
    field 1, length 123, is "\\n{", which also opens a JSON document."""
    for end in (T0 + 1, 0):
        for pad in range(1, 30):
            span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8,
                        start_time_unix_nano=T0, end_time_unix_nano=end,
                        attributes=[_kv("user.id", "u1"), _kv("marketing.channel", "email"),
                                    _kv("marketing.campaign", "x" * pad)])
            payload = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
                scope_spans=[ScopeSpans(spans=[span])])]).SerializeToString()
            if payload[:2] == b"\n{":
                return payload
    raise AssertionError("no request of that shape has a 123-byte first resource")


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))
