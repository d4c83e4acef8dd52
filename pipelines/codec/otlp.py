"""OTLP trace payloads <-> pipeline records.

Speaks what the OpenTelemetry Collector's kafka exporter/receiver put on a topic: one
`ExportTraceServiceRequest` per message, as `otlp_proto` (binary protobuf) or `otlp_json`
(the OTLP/JSON mapping: lowerCamelCase keys, hex trace/span ids, 64-bit ints as strings).
Decoding never raises on bad input: it returns dead letters with the reason instead.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from pipelines.codec.landings import has_landing_key, landing, landing_read
from pipelines.codec.wire import LeanTraceRequest
from schemas.records import Conversion, DeadLetter, GpuCall, Touchpoint
from schemas.telemetry import (
    CAMPAIGN,
    CHANNEL,
    CONTRACT_KEYS,
    EARLIEST_NS,
    GPU_UUID,
    GPU_WORKLOAD,
    K8S_POD,
    KEYS_READ,
    MAX_TEXT,
    ORDER_ID,
    USER_ID,
    InvalidSpan,
    record_kind,
    span_to_record,
)

ENCODINGS = ("auto", "otlp_proto", "otlp_json")
# Kafka 4 brokers reject records more than 1 h ahead of their clock by default
# (log.message.timestamp.after.max.ms); events are held to the same bound.
MAX_FUTURE_S = 300.0  # event_time.max_future_s's default

Record = Touchpoint | Conversion | GpuCall


@dataclass
class Decoded:
    """What one Kafka message turned into."""

    records: list[Record] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    spans: int = 0
    ignored: int = 0  # ordinary tracing spans with no pipeline meaning
    unbuilt_gpu_calls: int = 0  # valid GPU calls counted, not built (gpu_calls=False)
    latest_ns: int = 0  # spans starting after this are dead-lettered (clock skew)
    max_future_s: float = MAX_FUTURE_S  # how far ahead of the clock latest_ns is


# --- protobuf ------------------------------------------------------------------------

def any_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind in ("array_value", "kvlist_value"):
        return json_format.MessageToDict(getattr(value, kind))
    return getattr(value, kind)


def _span_dead_letter(error: InvalidSpan, trace_id: str, span_id: str, name: str,
                      attrs: dict[str, Any]) -> DeadLetter:
    body = {"trace_id": trace_id, "span_id": span_id, "name": name,
            "attributes": {k: v if isinstance(v, str | int | float | bool | None) else str(v)
                           for k, v in attrs.items()}}
    return DeadLetter("invalid_span", str(error), json.dumps(body).encode())


def _attr_value(value: AnyValue) -> Any:
    text = value.string_value  # most attributes are strings: one C call then
    return text if text else any_value(value)


_TOUCH_KEYS = frozenset(KEYS_READ["touchpoint"])
_new = tuple.__new__


def _plain_touchpoint(span: Any, latest_ns: int) -> Touchpoint | None:
    """The touchpoint of a span that is plainly one: channel and user id non-empty string
    values (and a campaign, if any), a start time set and not in the future. What
    `span_to_record` makes of such a span, without its general checks; None for anything
    else (the general path decides, dead letter or not). Two thirds of the spans of a
    typical stream are touches."""
    raw = span.attributes
    channel = raw.get(CHANNEL)
    user = raw.get(USER_ID)
    if channel is None or user is None:
        return None
    channel, user = channel.string_value, user.string_value
    campaign = raw.get(CAMPAIGN)
    campaign = "" if campaign is None else (campaign.string_value or None)
    start = span.start_time_unix_nano
    if not (0 < len(channel) <= MAX_TEXT and 0 < len(user) <= MAX_TEXT
            and campaign is not None and len(campaign) <= MAX_TEXT
            and EARLIEST_NS <= start <= latest_ns
            # a control character (or any unusual one): the general path decides
            and channel.isprintable() and user.isprintable() and campaign.isprintable()):
        return None
    return _new(Touchpoint, (user, start // 1_000_000, channel, campaign,
                             span.trace_id.hex(), span.span_id.hex()))


_GPU_KEYS = KEYS_READ["gpu_call"]


def _gpu_calls_checked_by_span(resource: dict[str, Any]) -> bool:
    """Whether a resource leaves a GPU call's kind and validity to its span: it names no
    touch or order, and the GPU call fields it fills in are valid text."""
    return CHANNEL not in resource and ORDER_ID not in resource and all(
        type(resource[key]) is str and len(resource[key]) <= MAX_TEXT
        and resource[key].isprintable() for key in _GPU_KEYS if key in resource)


def _plainly_valid_gpu_call(span: Any, resource: dict[str, Any], latest_ns: int) -> bool:
    """Whether `span_to_record` makes a GPU call of this span (and `_classify` keeps it):
    a span that is one by its keys, its times in order and not in the future, and the
    GPU call fields it has non-empty text. False for anything else (the general path
    decides). The resource must pass `_gpu_calls_checked_by_span`."""
    raw = span.attributes
    if CHANNEL in raw or ORDER_ID in raw:
        return False
    if not (GPU_UUID in raw or GPU_UUID in resource
            or ((K8S_POD in raw or K8S_POD in resource)
                and (GPU_WORKLOAD in raw or GPU_WORKLOAD in resource))):
        return False
    start = span.start_time_unix_nano
    if not EARLIEST_NS <= start <= min(span.end_time_unix_nano, latest_ns):
        return False
    for key in _GPU_KEYS:
        value = raw.get(key)
        if value is not None and not (0 < len(value.string_value) <= MAX_TEXT
                                      and value.string_value.isprintable()):
            return False
    return True


@dataclass(frozen=True)
class _ResourceRules:
    """What a resource's attributes decide for each of its spans."""

    resource: dict[str, Any]  # its contract attributes: they fill in what a span lacks
    plain_touches: bool  # it says nothing about touches: a span may take the plain path
    check_gpu_calls: bool  # GPU calls are only checked (not built) and the span may say


def _resource_rules(resource_spans: Any, gpu_calls: bool) -> _ResourceRules:
    resource_all = {key: any_value(value)
                    for key, value in resource_spans.resource.attributes.items()}
    # resource attributes (k8s pod, namespace) fill in what a span does not say
    resource = {k: v for k, v in resource_all.items() if k in CONTRACT_KEYS}
    # ... unless a resource says something about touches: then every span goes the
    # general way.
    # GPU calls the caller does not want are only checked (a fifth of a typical
    # stream's spans: the attribution job drops them, the GPU cost job reads them)
    return _ResourceRules(resource, _TOUCH_KEYS.isdisjoint(resource),
                          not gpu_calls and _gpu_calls_checked_by_span(resource))


def _decode_span(out: Decoded, span: Any, rules: _ResourceRules, gpu_calls: bool) -> None:
    latest_ns = out.latest_ns
    if rules.plain_touches:
        touch = _plain_touchpoint(span, latest_ns)
        if touch is not None:
            out.records.append(touch)
            return
    resource = rules.resource
    if rules.check_gpu_calls and _plainly_valid_gpu_call(span, resource, latest_ns):
        out.unbuilt_gpu_calls += 1
        return
    raw = span.attributes
    # Most spans are recognised by key alone (a lookup in the parsed map is one
    # C call); only the values their record is made of are converted.
    kind = record_kind(raw.__contains__ if not resource else
                       lambda key, raw=raw, res=resource: key in raw or key in res)
    if kind is None and not has_landing_key(raw.__contains__):
        out.ignored += 1
        return
    attrs = dict(resource)
    for key in KEYS_READ[kind] if kind is not None else landing_read():
        if key in raw:
            attrs[key] = _attr_value(raw[key])
    _classify(out, attrs, span.trace_id.hex(), span.span_id.hex(), span.name,
              span.start_time_unix_nano, span.end_time_unix_nano,
              lambda raw=raw: {k: any_value(v) for k, v in raw.items()},
              gpu_calls)


def _decode_proto(payload: bytes, out: Decoded, gpu_calls: bool) -> None:
    request = LeanTraceRequest.FromString(payload)
    for resource_spans in request.resource_spans:
        rules = _resource_rules(resource_spans, gpu_calls)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.spans += 1
                _decode_span(out, span, rules, gpu_calls)


def decode_proto_spans(payload: bytes, spans: Iterable[tuple[int, int, int]],
                       latest_ns: int, gpu_calls: bool = True) -> tuple[Decoded, list[int]]:
    """Only some spans of a well-formed protobuf message, named by (resource, scope, span)
    index, each exactly as `decode_spans` decodes it (`spans` counts them). Also returns,
    for each record, the place in `spans` of the span it came from."""
    request = LeanTraceRequest.FromString(payload)
    out = Decoded(latest_ns=latest_ns)
    rules: dict[int, _ResourceRules] = {}
    origin: list[int] = []
    for place, (resource_index, scope_index, span_index) in enumerate(spans):
        resource_spans = request.resource_spans[resource_index]
        if resource_index not in rules:
            rules[resource_index] = _resource_rules(resource_spans, gpu_calls)
        out.spans += 1
        _decode_span(out, resource_spans.scope_spans[scope_index].spans[span_index],
                     rules[resource_index], gpu_calls)
        origin += [place] * (len(out.records) - len(origin))
    return out, origin


# --- OTLP/JSON -----------------------------------------------------------------------

def _get(obj: dict[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    value = obj.get(camel)
    return obj.get(snake, default) if value is None else value


def _json_value(value: dict[str, Any]) -> Any:
    for camel, snake in (("stringValue", "string_value"), ("boolValue", "bool_value"),
                         ("doubleValue", "double_value")):
        if camel in value or snake in value:
            return _get(value, camel, snake)
    if "intValue" in value or "int_value" in value:
        return int(_get(value, "intValue", "int_value"))  # int64 arrive as strings
    for camel, snake in (("arrayValue", "array_value"), ("kvlistValue", "kvlist_value")):
        if camel in value or snake in value:
            return _get(value, camel, snake)
    return None


def json_attrs(items: Iterable[dict[str, Any]] | None) -> dict[str, Any]:
    return {item["key"]: _json_value(item.get("value") or {}) for item in items or ()}


def _decode_json(request: dict[str, Any], out: Decoded, gpu_calls: bool) -> None:
    for resource_spans in _get(request, "resourceSpans", "resource_spans", []):
        resource = resource_spans.get("resource") or {}
        resource_attrs = json_attrs(resource.get("attributes"))
        for scope_spans in _get(resource_spans, "scopeSpans", "scope_spans", []):
            for span in scope_spans.get("spans") or []:
                out.spans += 1
                attrs = json_attrs(span.get("attributes"))
                _classify(out, {**resource_attrs, **attrs} if resource_attrs else attrs,
                          str(_get(span, "traceId", "trace_id", "")).lower(),
                          str(_get(span, "spanId", "span_id", "")).lower(),
                          str(span.get("name", "")),
                          int(_get(span, "startTimeUnixNano", "start_time_unix_nano", 0)),
                          int(_get(span, "endTimeUnixNano", "end_time_unix_nano", 0)),
                          lambda attrs=attrs: attrs, gpu_calls)


# --- shared --------------------------------------------------------------------------

def _classify(out: Decoded, attrs: dict[str, Any], trace_id: str, span_id: str, name: str,
              start_ns: int, end_ns: int, span_attrs: Callable[[], dict[str, Any]],
              gpu_calls: bool) -> None:
    """`attrs`: at least the attributes a record is made of, the span's over its
    resource's; `span_attrs` gives all of the span's own (for the dead letter of a span
    that breaks the contract); `gpu_calls`: keep GPU calls (else only count them)."""
    try:
        record = span_to_record(attrs, trace_id, span_id, start_ns, end_ns)
        if record is None and has_landing_key(attrs.__contains__):  # an HTTP request
            touch = landing(attrs)  # a touch if it landed (pipelines/codec/landings.py)
            if touch is not None:
                record = span_to_record(touch[0], trace_id, span_id, start_ns, end_ns)
        if record is not None and start_ns > out.latest_ns:
            # A clock far ahead would poison event time (and brokers reject such
            # timestamps by default): such a span is unusable, not data.
            raise InvalidSpan(type(record).__name__.lower(), "start_time_unix_nano",
                              f"is more than {out.max_future_s:g}s ahead of the clock "
                              "(event_time.max_future_s)")
    except InvalidSpan as error:
        out.dead_letters.append(_span_dead_letter(error, trace_id, span_id, name,
                                                 span_attrs()))
        return
    if record is None:
        out.ignored += 1
    elif not gpu_calls and type(record) is GpuCall:
        out.unbuilt_gpu_calls += 1
    else:
        out.records.append(record)


UTF8_BOM = b"\xef\xbb\xbf"  # some JSON writers open with it: still JSON


def sniff_encoding(payload: bytes) -> str:
    """JSON opens with "{" or "[" (after whitespace); an OTLP protobuf request never does,
    except one whose first resource is 123 bytes long ("\\n{"): `decode_spans` reads such a
    message as protobuf when it is not JSON."""
    head = payload[:64].removeprefix(UTF8_BOM).lstrip()
    return "otlp_json" if head[:1] in (b"{", b"[") else "otlp_proto"


def _looks_like_other_format(request: Any) -> str | None:
    """What a JSON message that is not OTLP/JSON seems to be (Collector encodings this job
    does not read), for the dead letter's detail."""
    if isinstance(request, list):
        return "a JSON array (zipkin_json?)"
    if not isinstance(request, dict):
        return "a JSON value that is not an object"
    if "resourceSpans" in request or "resource_spans" in request:
        return None
    if "data" in request or "spans" in request or "process" in request:
        return "an object without resourceSpans (jaeger_json?)"
    return f"an object without resourceSpans (keys: {', '.join(sorted(map(str, request))[:8])})"


def decode_spans(payload: bytes | None, encoding: str = "auto",
                 gpu_calls: bool = True, max_future_s: float = MAX_FUTURE_S) -> Decoded:
    """Decode one message. Never raises: malformed input becomes a dead letter.

    `gpu_calls=False`: GPU calls are checked as usual (an invalid one is a dead letter)
    but only counted (`unbuilt_gpu_calls`), not built, for a reader that needs touches and
    orders alone."""
    if not payload:
        out = Decoded()
        out.dead_letters.append(DeadLetter("empty_message", "message value is empty", b""))
        return out
    kind = sniff_encoding(payload) if encoding == "auto" else encoding
    decoded = _decode_as(payload, kind, gpu_calls, max_future_s)
    if (decoded.dead_letters and decoded.dead_letters[0].reason == "malformed_otlp_json"
            and encoding == "auto" and payload[:1] == b"\n"):
        # "\n{": protobuf after all
        as_proto = _decode_as(payload, "otlp_proto", gpu_calls, max_future_s)
        if not (as_proto.dead_letters
                and as_proto.dead_letters[0].reason == "malformed_otlp_proto"):
            return as_proto
    return decoded


def _decode_as(payload: bytes, kind: str, gpu_calls: bool,
               max_future_s: float = MAX_FUTURE_S) -> Decoded:
    out = Decoded(latest_ns=time.time_ns() + int(max_future_s * 1e9),
                  max_future_s=max_future_s)
    reason = "malformed_otlp_proto" if kind == "otlp_proto" else "malformed_otlp_json"
    try:
        if kind == "otlp_proto":
            _decode_proto(payload, out, gpu_calls)
        elif kind == "otlp_json":
            request = json.loads(payload.removeprefix(UTF8_BOM))
            other = _looks_like_other_format(request)
            if other is not None:
                return Decoded(dead_letters=[DeadLetter(
                    "unknown_encoding", f"not an OTLP/JSON trace request: {other}; the "
                    "Collector's kafka exporter must use encoding otlp_proto or otlp_json",
                    bytes(payload))])
            _decode_json(request, out, gpu_calls)
        else:
            raise ValueError(f"unknown encoding {kind!r}; expected one of {ENCODINGS}")
    except Exception as error:  # noqa: BLE001 - any input whatever must end as a dead letter
        # The whole message is unusable: keep none of its partial output, so that a
        # replay after fixing the producer does not double-count.
        return Decoded(dead_letters=[DeadLetter(reason, f"{type(error).__name__}: {error}",
                                                bytes(payload))])
    if out.spans == 0 and not out.dead_letters:
        # a request without spans is no OTLP exporter's (it sends none); more likely bytes
        # of another format that happen to parse: kept, not silently counted as nothing
        return Decoded(dead_letters=[DeadLetter(
            "no_spans", f"decoded as {kind} but holds no spans: is the producer's encoding "
            "otlp_proto or otlp_json?", bytes(payload))])
    return out


# --- encoding (the exporter side) ----------------------------------------------------

def request_to_json(request: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON: protobuf's JSON mapping, except trace and span ids are hex, not base64."""
    body = json_format.MessageToDict(request)
    for resource_spans in body.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        if key in link:
                            link[key] = base64.b64decode(link[key]).hex()
    return json.dumps(body, separators=(",", ":")).encode()
