import json
import time

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from pipelines.codec.events import decode_events
from pipelines.codec.otlp import decode_spans, request_to_json, sniff_encoding
from schemas.records import Conversion, GpuCall, Touchpoint
from tests.otlp_payloads import json_looking_protobuf
from tests.spans import make_spans

T0 = 1_756_684_800_000_000_000  # 2025-09-01T00:00:00Z in ns


def sample_spans():
    return make_spans([
        ("GET /landing", {"user.id": "u1", "marketing.channel": "email",
                          "marketing.campaign": "spring"}, T0),
        ("POST /checkout", {"user.id": "u1", "order.id": "o1", "order.revenue": 42.5,
                            "order.currency": "EUR"}, T0 + 60_000_000_000),
        ("recommend", {"gpu.uuid": "GPU-1", "gpu.workload": "ranker"}, T0 + 1_000_000),
        ("SELECT", {"db.system.name": "postgresql"}, T0),
    ], resource={"service.name": "shop", "k8s.pod.name": "pod-7"})


def test_proto_batch_decodes_to_records_and_counts_ignored_spans():
    payload = encode_spans(sample_spans()).SerializePartialToString()
    out = decode_spans(payload)
    assert out.spans == 4 and out.ignored == 1 and out.dead_letters == []
    touch, order, gpu = out.records
    assert isinstance(touch, Touchpoint)
    assert (touch.user_id, touch.channel, touch.campaign, touch.ts_ms) == (
        "u1", "email", "spring", T0 // 1_000_000)
    assert len(touch.trace_id) == 32 and len(touch.span_id) == 16
    assert isinstance(order, Conversion)
    assert (order.order_id, order.revenue, order.currency) == ("o1", 42.5, "EUR")
    assert isinstance(gpu, GpuCall)
    # the pod comes from the resource, the GPU from the span
    assert (gpu.gpu_uuid, gpu.k8s_pod, gpu.workload) == ("GPU-1", "pod-7", "ranker")


def test_json_encoding_gives_the_same_records_as_proto():
    request = encode_spans(sample_spans())
    from_proto = decode_spans(request.SerializePartialToString(), "otlp_proto").records
    body = request_to_json(request)
    assert sniff_encoding(body) == "otlp_json"
    # OTLP/JSON carries ids as hex and 64-bit ints as strings
    span = json.loads(body)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["traceId"] == from_proto[0].trace_id
    assert isinstance(span["startTimeUnixNano"], str)
    assert decode_spans(body, "auto").records == from_proto
    assert decode_spans(body, "otlp_json").records == from_proto


def test_hand_written_otlp_json_with_int_value_as_string():
    body = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [{
        "traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "EEE19B7EC3C1B174",
        "name": "checkout", "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 1),
        "attributes": [{"key": "order.id", "value": {"intValue": "981"}},
                       {"key": "order.revenue", "value": {"doubleValue": 10.0}},
                       {"key": "enduser.id", "value": {"stringValue": "legacy-user"}}]}]}]}]}
    out = decode_spans(json.dumps(body).encode())
    assert out.dead_letters == []
    (order,) = out.records
    assert (order.order_id, order.user_id, order.revenue) == ("981", "legacy-user", 10.0)
    assert order.trace_id == "5b8efff798038103d269b633813fc60c"


def test_an_int_value_beyond_any_float_loses_its_span_only():
    """JSON integers have no bound: an order.revenue of 10^400 (as a number or a string)
    is that span's dead letter; the other spans of the message are kept, on both paths."""
    def span(span_id: str, attributes: list) -> dict:
        return {"traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": span_id,
                "name": "s", "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 1),
                "attributes": attributes}

    for huge in (10**400, str(10**400)):
        body = {"resourceSpans": [{"scopeSpans": [{"spans": [
            span("EEE19B7EC3C1B174", [{"key": "order.id", "value": {"stringValue": "o1"}},
                                      {"key": "order.revenue", "value": {"intValue": huge}},
                                      {"key": "user.id", "value": {"stringValue": "u1"}}]),
            span("EEE19B7EC3C1B175", [{"key": "marketing.channel",
                                       "value": {"stringValue": "email"}},
                                      {"key": "user.id", "value": {"stringValue": "u2"}}])]}]}]}
        payload = json.dumps(body).encode()
        out = decode_spans(payload)
        assert [r.user_id for r in out.records] == ["u2"]
        (letter,) = out.dead_letters
        assert "order.revenue is beyond the maximum" in letter.detail, letter.detail
        assert "401 digits" in letter.detail
        events = decode_events(payload, 8)
        assert list(events.touches.user_id) == ["u2"] and len(events.dead_letters) == 1


def test_malformed_messages_become_dead_letters_with_reason_and_payload():
    cases = {
        b"this is not OTLP": "malformed_otlp_proto",
        b"\x0a\xff\xff\xff\x0f\x01": "malformed_otlp_proto",
        b'{"resourceSpans": [': "malformed_otlp_json",
        b"[1, 2]": "unknown_encoding",
        b"": "empty_message",
        # JSON a Collector writes with an encoding this job does not read
        b'[{"traceId": "5b8e", "id": "eee1", "name": "checkout"}]': "unknown_encoding",
        b'{"data": [{"traceID": "5b8e", "spans": [], "processes": {}}]}': "unknown_encoding",
        # a request without spans: no exporter sends one
        b'{"resourceSpans": []}': "no_spans",
        # numbers beyond any range, and nesting beyond the parser's recursion limit
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": 1e999}]}]}]}':
            "malformed_otlp_json",
        b'{"resourceSpans": ' + b"[" * 100_000 + b"]" * 100_000 + b"}": "malformed_otlp_json",
    }
    for payload, reason in cases.items():
        out = decode_spans(payload)
        assert out.records == []
        (letter,) = out.dead_letters
        assert letter.reason == reason, payload
        assert letter.payload == payload
        assert letter.detail


def test_truncated_batch_keeps_nothing_of_the_message():
    payload = encode_spans(sample_spans()).SerializePartialToString()
    out = decode_spans(payload[: len(payload) // 2])
    assert out.records == [] and [d.reason for d in out.dead_letters] == ["malformed_otlp_proto"]


def test_invalid_spans_are_dead_lettered_one_by_one_and_the_rest_kept():
    now = time.time_ns()
    spans = make_spans([
        ("ok", {"user.id": "u", "marketing.channel": "email"}, T0),
        ("no user", {"marketing.channel": "email"}, T0),
        ("neg", {"user.id": "u", "order.id": "o", "order.revenue": -3.0}, T0),
        ("nan", {"user.id": "u", "order.id": "o2", "order.revenue": float("nan")}, T0),
        ("cur", {"user.id": "u", "order.id": "o3", "order.revenue": 1.0,
                 "order.currency": "dollars"}, T0),
        ("future", {"user.id": "u", "marketing.channel": "email"}, now + 2 * 3600 * 10**9),
        ("no revenue", {"user.id": "u", "order.id": "o4"}, T0),
    ])
    out = decode_spans(encode_spans(spans).SerializePartialToString())
    assert [r.channel for r in out.records] == ["email"]
    details = [d.detail for d in out.dead_letters]
    assert details == [
        "invalid touchpoint span: user.id is missing",
        "invalid conversion span: order.revenue is negative: -3.0",
        "invalid conversion span: order.revenue is not finite: nan",
        "invalid conversion span: order.currency is not an ISO 4217 code: 'dollars'",
        "invalid touchpoint span: start_time_unix_nano is more than 300s ahead of the clock "
        "(event_time.max_future_s)",
        "invalid conversion span: order.revenue is missing",
    ]
    body = json.loads(out.dead_letters[0].payload)
    assert body["name"] == "no user" and body["attributes"] == {"marketing.channel": "email"}


def test_order_without_user_is_kept_for_unattributed_credit():
    spans = make_spans([("pay", {"order.id": "o9", "order.revenue": 5}, T0)])
    (order,) = decode_spans(encode_spans(spans).SerializePartialToString()).records
    assert order.user_id == "" and order.revenue == 5.0 and order.currency == "USD"


def test_the_lean_reading_sees_what_the_full_otlp_schema_sees():
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue

    from pipelines.codec.wire import LeanTraceRequest

    request = encode_spans(sample_spans())
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.events.add(name="clicked", time_unix_nano=T0)  # fields the lean reading skips
    span.status.message = "ok"
    # a key given twice keeps its last value, in OTLP's reading as in the lean one
    span.attributes.append(KeyValue(key="marketing.channel"))
    span.attributes[-1].value.string_value = "display"
    payload = request.SerializeToString()
    full, lean = ExportTraceServiceRequest.FromString(payload), LeanTraceRequest.FromString(payload)
    full_spans = [s for r in full.resource_spans for ss in r.scope_spans for s in ss.spans]
    lean_spans = [s for r in lean.resource_spans for ss in r.scope_spans for s in ss.spans]
    assert len(lean_spans) == len(full_spans) == 4
    for f, s in zip(full_spans, lean_spans, strict=True):
        assert (s.trace_id, s.span_id, s.name, s.start_time_unix_nano, s.end_time_unix_nano) \
            == (f.trace_id, f.span_id, f.name, f.start_time_unix_nano, f.end_time_unix_nano)
        assert dict(s.attributes.items()) == {kv.key: kv.value for kv in f.attributes}
    assert lean_spans[0].attributes["marketing.channel"].string_value == "display"
    assert decode_spans(payload).records[0].channel == "display"
    resource = lean.resource_spans[0].resource.attributes
    assert resource["k8s.pod.name"].string_value == "pod-7"


def test_touches_off_the_plain_path_are_read_as_the_contract_says():
    long = "x" * 300
    spans = make_spans([
        ("a", {"user.id": 42, "marketing.channel": "email"}, T0),  # int id: its text
        ("b", {"enduser.id": "legacy", "marketing.channel": "email"}, T0),
        ("c", {"user.id": "u3", "marketing.channel": "email", "marketing.campaign": ""}, T0),
        ("d", {"user.id": "u4", "marketing.channel": long}, T0),  # too long: dead letter
        ("e", {"user.id": "u5", "marketing.channel": "email"}, 0),  # no start: dead letter
        ("f", {"user.id": "u6", "marketing.channel": "email",
               "marketing.campaign": "spring"}, T0),  # plain
    ], resource={"service.name": "shop"})
    out = decode_spans(encode_spans(spans).SerializePartialToString())
    assert [(t.user_id, t.campaign) for t in out.records] == [
        ("42", ""), ("legacy", ""), ("u3", ""), ("u6", "spring")]
    assert [letter.detail for letter in out.dead_letters] == [
        "invalid touchpoint span: marketing.channel is longer than 256 characters",
        "invalid touchpoint span: start_time_unix_nano is not set"]
    # a resource that names the user: spans without one of their own take it
    spans = make_spans([("g", {"marketing.channel": "email"}, T0)],
                       resource={"user.id": "from-resource"})
    assert decode_spans(encode_spans(spans).SerializePartialToString()).records[0].user_id \
        == "from-resource"


def test_gpu_calls_left_unbuilt_are_counted_and_invalid_ones_still_dead_lettered(monkeypatch):
    """`gpu_calls=False` (the attribution job) gives what the full decode gives, less the
    GPU call records, which it counts: same touches and orders, same dead letters."""
    import random

    from pipelines.codec import otlp as otlp_codec

    rng = random.Random(7)
    values = [None, None, None, "GPU-1", "GPU-1", "GPU-1", "GPU-1", "", "x" * 300, 7, True, 2.5]
    future = time.time_ns() + 2 * 3600 * 10**9
    keys = ("gpu.uuid", "gpu.workload", "k8s.pod.name", "k8s.namespace.name", "user.id",
            "enduser.id", "marketing.channel", "order.id")
    payloads = []
    for _ in range(60):
        specs = []
        for n in range(12):
            attrs = {key: value for key in keys
                     if (value := rng.choice(values if key.startswith(("gpu", "k8s", "user",
                                                                         "enduser"))
                                             else [None] * 6 + ["email"])) is not None}
            start = rng.choice([T0] * 6 + [0, future])
            end = rng.choice([start + 1_000_000] * 3 + [start, start - 1])
            specs.append((f"s{n}", attrs, start, max(end, 0)))
        resource = rng.choice([{"service.name": "shop"}, {"k8s.pod.name": "pod-7"},
                               {"k8s.pod.name": "y" * 300}, {"gpu.uuid": "GPU-9"},
                               {"marketing.channel": "email", "user.id": "r"}])
        payloads.append(encode_spans(make_spans(specs, resource=resource))
                        .SerializePartialToString())
    # and each rule of a GPU call broken once, on a span that is otherwise plainly one
    plain = {"gpu.uuid": "GPU-1", "gpu.workload": "ranker", "user.id": "u1"}
    edges = [({}, T0, T0 + 1), ({}, T0, T0 - 1), ({}, 0, 1), ({}, future, future + 1),
             ({"marketing.channel": "email", "enduser.id": "legacy"}, T0, T0 + 1),
             ({"order.id": "o1", "order.revenue": 1.0}, T0, T0 + 1)]
    edges += [({key: bad}, T0, T0 + 1) for key in keys[:6] for bad in ("", 7, True, "x" * 300)]
    specs = [(f"e{n}", {**{k: v for k, v in plain.items() if not (k == "user.id" and
                                                                  "enduser.id" in extra)},
                        **extra}, start, end)
             for n, (extra, start, end) in enumerate(edges)]
    for resource in ({"k8s.pod.name": "pod-7"}, {"k8s.pod.name": "y" * 300},
                     {"marketing.channel": "email"}, {"k8s.namespace.name": 5},
                     {"k8s.namespace.name": True}):
        payloads.append(encode_spans(make_spans(specs, resource=resource))
                        .SerializePartialToString())
    gpu_calls = 0
    for payload in payloads:
        full, lean = decode_spans(payload), decode_spans(payload, gpu_calls=False)
        built = [r for r in full.records if isinstance(r, GpuCall)]
        gpu_calls += len(built)
        assert lean.records == [r for r in full.records if not isinstance(r, GpuCall)]
        assert lean.dead_letters == full.dead_letters
        assert (lean.spans, lean.ignored, lean.unbuilt_gpu_calls) == \
            (full.spans, full.ignored, len(built))
        assert full.unbuilt_gpu_calls == 0
    assert gpu_calls > 40  # the draw makes valid GPU calls, and invalid ones:
    assert sum(len(decode_spans(p).dead_letters) for p in payloads) > 40

    # a plainly valid GPU call is only checked: no record is made of it
    made = []
    monkeypatch.setattr(otlp_codec, "span_to_record",
                        lambda *args: made.append(args) or None)
    plain = make_spans([("call", {"gpu.uuid": "GPU-1", "gpu.workload": "ranker",
                                  "user.id": "u1"}, T0)], resource={"k8s.pod.name": "pod-7"})
    out = decode_spans(encode_spans(plain).SerializePartialToString(), gpu_calls=False)
    assert (out.unbuilt_gpu_calls, made) == (1, [])


def test_protobuf_that_opens_like_json_is_read_as_protobuf():
    payload = json_looking_protobuf()
    assert sniff_encoding(payload) == "otlp_json"  # it looks like JSON...
    out = decode_spans(payload)  # ...but is decoded as what it is
    assert out.dead_letters == []
    (touch,) = out.records
    assert (touch.user_id, touch.channel, touch.ts_ms) == ("u1", "email", T0 // 10**6)
