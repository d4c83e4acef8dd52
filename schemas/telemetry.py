"""Telemetry semantics: which OpenTelemetry spans mean what, and how they become records.

The contract for application teams is written out in `schemas/TELEMETRY.md`; this module
is its executable form. A span is classified by the attributes it carries:

* `marketing.channel`  -> a touchpoint
* `order.id`           -> a conversion (an order)
* `gpu.uuid` or `k8s.pod.name` together with `gpu.workload` -> a GPU-backed call

Anything else is ordinary tracing and is ignored (counted, not dead-lettered).

Independently of the kind, a span that carries `feature_flag.key` (the OpenTelemetry
feature-flag semantic conventions) records an experiment exposure: the experiments job
reads those (`span_to_exposure`); the attribution and GPU jobs never look at them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from schemas.records import Conversion, Exposure, GpuCall, Touchpoint

# --- attribute names (the public contract) -------------------------------------------
USER_ID = "user.id"
USER_ID_LEGACY = "enduser.id"  # older semantic conventions; still accepted
CHANNEL = "marketing.channel"
CAMPAIGN = "marketing.campaign"
ORDER_ID = "order.id"
ORDER_REVENUE = "order.revenue"
ORDER_CURRENCY = "order.currency"
GPU_UUID = "gpu.uuid"
GPU_WORKLOAD = "gpu.workload"
K8S_POD = "k8s.pod.name"
K8S_NAMESPACE = "k8s.namespace.name"
# experiments: OpenTelemetry's feature-flag semantic conventions
FLAG_KEY = "feature_flag.key"
FLAG_VARIANT = "feature_flag.result.variant"
FLAG_VARIANT_LEGACY = "feature_flag.variant"  # conventions before 1.32; still accepted
FLAG_CONTEXT_ID = "feature_flag.context.id"  # the targeting key, when user.id is absent
EXPOSURE_KEYS = (FLAG_KEY, FLAG_VARIANT, FLAG_VARIANT_LEGACY, FLAG_CONTEXT_ID, USER_ID,
                 USER_ID_LEGACY)

# A span carrying none of these (and no gpu.workload) is ordinary tracing.
MARKERS = frozenset({CHANNEL, ORDER_ID, GPU_UUID})
# The attributes `span_to_record` reads for each kind of record: a decoder need convert
# no other value.
KEYS_READ = {
    "touchpoint": (CHANNEL, CAMPAIGN, USER_ID, USER_ID_LEGACY),
    "conversion": (ORDER_ID, ORDER_REVENUE, ORDER_CURRENCY, USER_ID, USER_ID_LEGACY),
    "gpu_call": (GPU_UUID, GPU_WORKLOAD, K8S_POD, K8S_NAMESPACE, USER_ID, USER_ID_LEGACY),
}
CONTRACT_KEYS = tuple(dict.fromkeys(k for keys in KEYS_READ.values() for k in keys))

DEFAULT_CURRENCY = "USD"
_CURRENCY = re.compile(r"^[A-Z]{3}$")
MAX_TEXT = 256


class InvalidSpan(ValueError):
    """A span that claims to be a touchpoint/order/GPU call but breaks the contract."""

    def __init__(self, kind: str, field: str, problem: str) -> None:
        super().__init__(f"invalid {kind} span: {field} {problem}")
        self.kind = kind
        self.field = field
        self.problem = problem


# C0 controls (NUL included), DEL, C1 controls and lone surrogates: no sink stores a NUL
# (PostgreSQL text refuses it), a lone surrogate is no UTF-8 at all, and none of them belongs
# in a channel, campaign, user or order id (the C scanner checks the same:
# pipelines/codec/otlp_scan.c has_control)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def unprintable(text: str) -> str | None:
    """Why `text` cannot be stored as it is (None: it can)."""
    found = _CONTROL.search(text)
    if found is None:
        return None
    return f"holds the control character U+{ord(found.group()):04X} at {found.start()}"


def _text(attrs: Mapping[str, Any], key: str, kind: str, required: bool) -> str:
    value = attrs.get(key)
    if type(value) is str and 0 < len(value) <= MAX_TEXT and value.isprintable():
        return value  # the common case, checked first: this runs for every span
    if value is None or value == "":
        if required:
            raise InvalidSpan(kind, key, "is missing")
        return ""
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise InvalidSpan(kind, key, f"must be a string, got {type(value).__name__}")
    text = str(value)
    if len(text) > MAX_TEXT:
        raise InvalidSpan(kind, key, f"is longer than {MAX_TEXT} characters")
    problem = unprintable(text)
    if problem:
        raise InvalidSpan(kind, key, problem)
    return text


def _user(attrs: Mapping[str, Any], kind: str, required: bool) -> str:
    if USER_ID_LEGACY in attrs and attrs.get(USER_ID_LEGACY) not in (None, "") \
            and attrs.get(USER_ID) in (None, ""):
        return _text(attrs, USER_ID_LEGACY, kind, True)
    return _text(attrs, USER_ID, kind, required)


# Values outside these are no data, whatever a producer sent: a start before 2000 is an
# unset or broken clock (and would drag event time back), a revenue beyond a trillion a
# unit error or garbage that would overflow every sum it joined. (The decoders also refuse
# starts more than event_time.max_future_s -- 5 minutes by default -- ahead of their
# clock: pipelines/codec/otlp.py MAX_FUTURE_S.)
EARLIEST_NS = 946_684_800 * 10**9  # 2000-01-01T00:00:00Z
MAX_FUTURE_LIMIT_S = 86_400.0  # the largest event_time.max_future_s a config may set
MAX_REVENUE = 1e12


def _start(kind: str, start_ns: int) -> None:
    if start_ns <= 0:
        raise InvalidSpan(kind, "start_time_unix_nano", "is not set")
    if start_ns < EARLIEST_NS:
        raise InvalidSpan(kind, "start_time_unix_nano", "is before 2000-01-01")


def _revenue(attrs: Mapping[str, Any]) -> float:
    value = attrs.get(ORDER_REVENUE)
    if value is None:
        raise InvalidSpan("conversion", ORDER_REVENUE, "is missing")
    if isinstance(value, bool):
        raise InvalidSpan("conversion", ORDER_REVENUE, "must be a number, got bool")
    try:
        amount = float(value)
    except OverflowError:  # an intValue beyond any float (JSON integers have no bound)
        raise InvalidSpan("conversion", ORDER_REVENUE,
                          f"is beyond the maximum of {MAX_REVENUE:g}: an integer of "
                          f"{len(str(abs(value)))} digits") from None
    except (TypeError, ValueError):
        raise InvalidSpan("conversion", ORDER_REVENUE, f"is not a number: {value!r}") from None
    if not math.isfinite(amount):
        raise InvalidSpan("conversion", ORDER_REVENUE, f"is not finite: {value!r}")
    if amount < 0:
        raise InvalidSpan("conversion", ORDER_REVENUE, f"is negative: {amount}")
    if amount > MAX_REVENUE:
        raise InvalidSpan("conversion", ORDER_REVENUE,
                          f"is beyond the maximum of {MAX_REVENUE:g}: {amount:g}")
    return amount


def record_kind(has: Callable[[str], bool]) -> str | None:
    """Which record a span with these attribute keys becomes (None: ordinary tracing)."""
    if has(CHANNEL):
        return "touchpoint"
    if has(ORDER_ID):
        return "conversion"
    if has(GPU_UUID) or (has(K8S_POD) and has(GPU_WORKLOAD)):
        return "gpu_call"
    return None


def span_to_record(
    attrs: Mapping[str, Any],
    trace_id: str,
    span_id: str,
    start_ns: int,
    end_ns: int,
) -> Touchpoint | Conversion | GpuCall | None:
    """Map one span to a record, None for spans that carry no pipeline meaning.

    Raises InvalidSpan (with the offending field) when a span is recognisably one of ours
    but unusable; the caller dead-letters it with that reason.
    """
    kind = record_kind(attrs.__contains__)
    if kind == "touchpoint":
        _start(kind, start_ns)
        return Touchpoint(
            user_id=_user(attrs, kind, required=True),
            ts_ms=start_ns // 1_000_000,
            channel=_text(attrs, CHANNEL, kind, True),
            campaign=_text(attrs, CAMPAIGN, kind, False),
            trace_id=trace_id,
            span_id=span_id,
        )
    if kind == "conversion":
        _start(kind, start_ns)
        currency = _text(attrs, ORDER_CURRENCY, kind, False) or DEFAULT_CURRENCY
        if not _CURRENCY.match(currency):
            raise InvalidSpan(kind, ORDER_CURRENCY, f"is not an ISO 4217 code: {currency!r}")
        return Conversion(
            # An order without a resolvable user is still revenue: it is kept and credited
            # to "(unattributed)" rather than dropped.
            user_id=_user(attrs, kind, required=False),
            ts_ms=start_ns // 1_000_000,
            order_id=_text(attrs, ORDER_ID, kind, True),
            revenue=_revenue(attrs),
            currency=currency,
            trace_id=trace_id,
            span_id=span_id,
        )
    if kind == "gpu_call":
        if start_ns <= 0 or end_ns < start_ns:
            raise InvalidSpan(kind, "end_time_unix_nano", "is before the start time")
        _start(kind, start_ns)
        return GpuCall(
            trace_id=trace_id,
            span_id=span_id,
            start_ms=start_ns // 1_000_000,
            end_ms=end_ns // 1_000_000,
            user_id=_user(attrs, kind, required=False),
            gpu_uuid=_text(attrs, GPU_UUID, kind, False),
            k8s_pod=_text(attrs, K8S_POD, kind, False),
            k8s_namespace=_text(attrs, K8S_NAMESPACE, kind, False),
            workload=_text(attrs, GPU_WORKLOAD, kind, False),
        )
    return None


def span_to_exposure(attrs: Mapping[str, Any], trace_id: str, span_id: str,
                     start_ns: int) -> Exposure | None:
    """The experiment exposure a span records (None: it carries no `feature_flag.key`).

    Raises InvalidSpan when the flag is named but the exposure is unusable: no variant, or
    no user to keep the variant for (a user keeps the variant of their first exposure)."""
    if attrs.get(FLAG_KEY) in (None, ""):
        return None
    kind = "exposure"
    _start(kind, start_ns)
    variant_key = FLAG_VARIANT if attrs.get(FLAG_VARIANT) not in (None, "") \
        else FLAG_VARIANT_LEGACY
    if attrs.get(variant_key) in (None, ""):
        raise InvalidSpan(kind, FLAG_VARIANT, "is missing")
    user = _user(attrs, kind, required=False)
    if not user:
        user = _text(attrs, FLAG_CONTEXT_ID, kind, False)
    if not user:
        raise InvalidSpan(kind, USER_ID, f"is missing (and so is {FLAG_CONTEXT_ID})")
    return Exposure(user_id=user, ts_ms=start_ns // 1_000_000,
                    flag_key=_text(attrs, FLAG_KEY, kind, True),
                    variant=_text(attrs, variant_key, kind, True),
                    trace_id=trace_id, span_id=span_id)
