"""Record types that flow between the decoder, the journey logic and the sinks.

They are NamedTuples on purpose: cheap to build in a hot loop, pickled compactly between
Python operators in Flink, and plain tuples for pandas/Spark.
"""

from __future__ import annotations

from typing import NamedTuple, final


# final: the journey code tells the two apart with `type(x) is ...` (exact type, no subclass)
@final
class Touchpoint(NamedTuple):
    """A marketing touch: a user met a channel (and maybe a campaign) at ts_ms."""

    user_id: str
    ts_ms: int
    channel: str
    campaign: str
    trace_id: str
    span_id: str


@final
class Conversion(NamedTuple):
    """An order: the user converted at ts_ms for revenue in currency."""

    user_id: str
    ts_ms: int
    order_id: str
    revenue: float
    currency: str
    trace_id: str
    span_id: str


class Exposure(NamedTuple):
    """A user saw a variant of a feature flag (an experiment) at ts_ms."""

    user_id: str
    ts_ms: int
    flag_key: str
    variant: str
    trace_id: str
    span_id: str


class GpuCall(NamedTuple):
    """A GPU-backed service call; cost attaches to it through the GPU UUID or the pod."""

    trace_id: str
    span_id: str
    start_ms: int
    end_ms: int
    user_id: str
    gpu_uuid: str
    k8s_pod: str
    k8s_namespace: str
    workload: str


class DeadLetter(NamedTuple):
    """Input that could not be used, with the reason; nothing is dropped silently."""

    reason: str
    detail: str
    payload: bytes


class Credit(NamedTuple):
    """One touch's share of one conversion under one attribution model.

    `credit` is the share of the conversion (the credits of a conversion sum to 1 per
    model); `revenue` is that share of the order's revenue. Key: (model, order_id, touch_index).
    """

    model: str
    order_id: str
    user_id: str
    conversion_ts_ms: int
    touch_index: int
    channel: str
    campaign: str
    touch_ts_ms: int
    credit: float
    revenue: float
    currency: str
    stage: str = "unknown"  # lifecycle stage of the order: new, repeat, winback, unknown


UNATTRIBUTED = "(unattributed)"
"""Channel credited with a conversion that had no touch inside its lookback window."""
