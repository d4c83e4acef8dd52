"""Experiment exposures out of OTLP trace messages, for the experiments job.

A span carrying `feature_flag.key` records that its user saw a variant of a flag
(schemas/telemetry.py `span_to_exposure`), whatever else the span is (a landing request
can be a touchpoint and an exposure at once). Only those spans are read here: the
attribution job reads the same messages for touches and orders, and it alone dead-letters
a message that is not OTLP at all (here such a message only counts as unreadable, so a bad
message is not dead-lettered twice). An exposure span that breaks the contract (no
variant, no user) is dead-lettered here, since no other job looks at it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from pipelines.codec.otlp import MAX_FUTURE_S, UTF8_BOM, sniff_encoding
from pipelines.codec.wire import LeanTraceRequest
from schemas.records import DeadLetter, Exposure
from schemas.telemetry import EXPOSURE_KEYS, FLAG_KEY, InvalidSpan, span_to_exposure


@dataclass
class DecodedExposures:
    exposures: list[Exposure] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    spans: int = 0
    unreadable: bool = False  # not OTLP: the attribution job dead-letters it


def decode_exposures(payload: bytes | None, encoding: str = "auto",
                     max_future_s: float = MAX_FUTURE_S) -> DecodedExposures:
    """The exposures of one message (a span starting more than `max_future_s` ahead of the
    clock is a dead letter). Never raises."""
    out = DecodedExposures()
    if not payload:
        out.unreadable = True
        return out
    latest_ns = time.time_ns() + int(max_future_s * 1e9)
    kind = sniff_encoding(payload) if encoding == "auto" else encoding
    try:
        if kind == "otlp_proto":
            _proto(payload, out, latest_ns)
        else:
            _json(json.loads(payload.removeprefix(UTF8_BOM)), out, latest_ns)
    except Exception:  # noqa: BLE001 - any input whatever: nothing of it is used here
        return DecodedExposures(unreadable=True)
    return out


def _add(out: DecodedExposures, attrs: dict[str, Any], trace_id: str, span_id: str,
         name: str, start_ns: int, latest_ns: int) -> None:
    try:
        exposure = span_to_exposure(attrs, trace_id, span_id, start_ns)
        if exposure is not None and start_ns > latest_ns:
            raise InvalidSpan("exposure", "start_time_unix_nano",
                              f"is more than {(latest_ns - time.time_ns()) / 1e9:.0f}s "
                              "ahead of the clock (event_time.max_future_s)")
    except InvalidSpan as error:
        detail = {"span_name": name, "trace_id": trace_id, "span_id": span_id,
                  "attributes": {k: v for k, v in attrs.items() if k in EXPOSURE_KEYS}}
        out.dead_letters.append(DeadLetter("invalid_span", str(error),
                                           json.dumps(detail, default=str).encode()))
        return
    if exposure is not None:
        out.exposures.append(exposure)


def _value(value: Any) -> Any:
    which = value.WhichOneof("value")
    return getattr(value, which) if which else None


def _proto(payload: bytes, out: DecodedExposures, latest_ns: int) -> None:
    request = LeanTraceRequest.FromString(payload)
    for resource_spans in request.resource_spans:
        resource = {key: _value(value) for key, value in
                    resource_spans.resource.attributes.items() if key in EXPOSURE_KEYS}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.spans += 1
                raw = span.attributes
                if FLAG_KEY not in raw:  # most spans: one C lookup
                    continue
                attrs = {**resource, **{key: _value(raw[key]) for key in EXPOSURE_KEYS
                                        if key in raw}}
                _add(out, attrs, span.trace_id.hex(), span.span_id.hex(), span.name,
                     span.start_time_unix_nano, latest_ns)


def _get(obj: dict[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    value = obj.get(camel)
    return obj.get(snake, default) if value is None else value


def _json_value(value: dict[str, Any]) -> Any:
    for camel, snake in (("stringValue", "string_value"), ("intValue", "int_value"),
                         ("boolValue", "bool_value"), ("doubleValue", "double_value")):
        if camel in value or snake in value:
            return _get(value, camel, snake)
    return None


def _attrs(items: Any) -> dict[str, Any]:
    return {item["key"]: _json_value(item.get("value") or {}) for item in items or ()
            if item.get("key") in EXPOSURE_KEYS}


def _json(request: Any, out: DecodedExposures, latest_ns: int) -> None:
    if not isinstance(request, dict):
        raise ValueError("not an OTLP/JSON trace request")
    for resource_spans in _get(request, "resourceSpans", "resource_spans", []):
        resource = _attrs((resource_spans.get("resource") or {}).get("attributes"))
        for scope_spans in _get(resource_spans, "scopeSpans", "scope_spans", []):
            for span in scope_spans.get("spans") or []:
                out.spans += 1
                attrs = _attrs(span.get("attributes"))
                if FLAG_KEY not in attrs:
                    continue
                _add(out, {**resource, **attrs},
                     str(_get(span, "traceId", "trace_id", "")).lower(),
                     str(_get(span, "spanId", "span_id", "")).lower(),
                     str(span.get("name", "")),
                     int(_get(span, "startTimeUnixNano", "start_time_unix_nano", 0)),
                     latest_ns)
