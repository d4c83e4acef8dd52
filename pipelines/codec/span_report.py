"""What each span of a message becomes in the jobs (`seedance inspect`): every span decoded
on its own by the jobs' own rules (pipelines/codec/otlp.py, exposures.py), so that a team
instrumenting a service sees, before it deploys, which spans are touches (with the channel
and the rule that named it), orders, GPU calls or exposures, which are ignored and why,
and which are dead letters and why."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from pipelines.codec.exposures import decode_exposures
from pipelines.codec.landings import has_landing_key, landing, landing_candidate
from pipelines.codec.otlp import (
    MAX_FUTURE_S,
    UTF8_BOM,
    any_value,
    decode_spans,
    json_attrs,
    sniff_encoding,
)
from schemas.records import Conversion, GpuCall, Touchpoint
from schemas.telemetry import CHANNEL, FLAG_KEY, USER_ID, USER_ID_LEGACY


@dataclass(frozen=True)
class SpanVerdict:
    trace_id: str
    span_id: str
    name: str
    becomes: str  # touch, order, gpu_call, exposure, ignored, dead_letter
    detail: str  # what it carries, or why


@dataclass(frozen=True)
class MessageReport:
    spans: list[SpanVerdict]
    unreadable: str | None = None  # why the whole message is a dead letter


def inspect_message(payload: bytes, encoding: str = "auto",
                    max_future_s: float = MAX_FUTURE_S) -> MessageReport:
    """Each span of one Kafka message (or OTLP request), in order."""
    whole = decode_spans(payload, encoding, max_future_s=max_future_s)
    if not whole.spans:
        reason = whole.dead_letters[0] if whole.dead_letters else None
        return MessageReport([], f"{reason.reason}: {reason.detail}" if reason
                             else "no spans in it")
    kind = sniff_encoding(payload) if encoding == "auto" else encoding
    try:
        singles = list(_proto_singles(payload) if kind == "otlp_proto"
                       else _json_singles(payload))
    except ValueError:  # "\n{": protobuf after all, as the decoder found
        singles = list(_proto_singles(payload))
    return MessageReport([_verdict(*single, max_future_s) for single in singles])


def _verdict(one: bytes, encoding: str, attrs: dict[str, Any], ids: tuple[str, str, str],
             max_future_s: float) -> SpanVerdict:
    decoded = decode_spans(one, encoding, max_future_s=max_future_s)
    trace_id, span_id, name = ids
    if decoded.dead_letters:
        return SpanVerdict(trace_id, span_id, name, "dead_letter",
                           decoded.dead_letters[0].detail)
    if decoded.records:
        return SpanVerdict(trace_id, span_id, name, *_record(decoded.records[0], attrs))
    exposures = decode_exposures(one, encoding, max_future_s)
    if exposures.exposures:
        e = exposures.exposures[0]
        return SpanVerdict(trace_id, span_id, name, "exposure",
                           f"user {e.user_id}, flag {e.flag_key}, variant {e.variant} "
                           "(the experiments job reads it)")
    if exposures.dead_letters:
        return SpanVerdict(trace_id, span_id, name, "dead_letter",
                           f"{exposures.dead_letters[0].detail} (the experiments job)")
    return SpanVerdict(trace_id, span_id, name, "ignored", _why_ignored(attrs))


def _record(record: Any, attrs: dict[str, Any]) -> tuple[str, str]:
    if type(record) is Touchpoint:
        campaign = f", campaign {record.campaign}" if record.campaign else ""
        if CHANNEL in attrs:
            rule = "its marketing.channel attribute"
        else:
            found = landing(attrs)
            rule = f"channel rule {found[1].rule!r}" if found else "?"
        return "touch", f"user {record.user_id}, channel {record.channel}{campaign} ({rule})"
    if type(record) is Conversion:
        return "order", (f"order {record.order_id}, revenue {record.revenue:g} "
                         f"{record.currency}, user {record.user_id or '(unattributed)'}")
    if type(record) is GpuCall:
        return "gpu_call", f"GPU {record.gpu_uuid}, workload {record.workload}"
    return "ignored", "ordinary tracing"


def _why_ignored(attrs: dict[str, Any]) -> str:
    if FLAG_KEY in attrs:
        return "a feature-flag span that is no exposure (no variant or user)"
    if not has_landing_key(attrs.__contains__):
        return "ordinary tracing: no marketing.channel, order.id, gpu.uuid or HTTP URL"
    if not landing_candidate(attrs):
        return ("an HTTP request that is no landing: no UTM parameter or click id in its "
                "URL and no referrer")
    if not (attrs.get(USER_ID) or attrs.get(USER_ID_LEGACY)):
        return "a landing without a user (enduser.id or user.id)"
    return "a click inside the site or a direct visit (no campaign, no other site)"


def _proto_singles(payload: bytes) -> Iterator[tuple[bytes, str, dict[str, Any],
                                                      tuple[str, str, str]]]:
    try:
        request = ExportTraceServiceRequest.FromString(payload)
    except DecodeError:
        return
    for resource_spans in request.resource_spans:
        resource = {kv.key: any_value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                one = ExportTraceServiceRequest()
                part = one.resource_spans.add()
                part.resource.CopyFrom(resource_spans.resource)
                scope = part.scope_spans.add()
                scope.scope.CopyFrom(scope_spans.scope)
                scope.spans.add().CopyFrom(span)
                attrs = {**resource, **{kv.key: any_value(kv.value) for kv in span.attributes}}
                yield (one.SerializeToString(), "otlp_proto", attrs,
                       (span.trace_id.hex(), span.span_id.hex(), span.name))


def _json_singles(payload: bytes) -> Iterator[tuple[bytes, str, dict[str, Any],
                                                     tuple[str, str, str]]]:
    request = json.loads(payload.removeprefix(UTF8_BOM))
    for resource_spans in _get(request, "resourceSpans", "resource_spans") or []:
        resource = resource_spans.get("resource") or {}
        for scope_spans in _get(resource_spans, "scopeSpans", "scope_spans") or []:
            for span in scope_spans.get("spans") or []:
                one = {"resourceSpans": [{"resource": resource, "scopeSpans": [
                    {"scope": scope_spans.get("scope") or {}, "spans": [span]}]}]}
                attrs = {**json_attrs(resource.get("attributes")),
                         **json_attrs(span.get("attributes"))}
                yield (json.dumps(one).encode(), "otlp_json", attrs,
                       (str(_get(span, "traceId", "trace_id") or "").lower(),
                        str(_get(span, "spanId", "span_id") or "").lower(),
                        str(span.get("name", ""))))


def _get(obj: dict[str, Any], camel: str, snake: str) -> Any:
    return obj.get(camel, obj.get(snake))
