"""GPU compute cost: samples x prices, allocated to the GPU-backed calls that ran.

Each sample closes an interval of its GPU: from the previous sample (if it is at most
`max_gap_ms` earlier) or else the nominal sampling interval back. The interval's cost is
GPU-hours x the price of that GPU family and pricing class, cut where the price changes.
Inside an interval (and price segment), the time covered by at least one call is
allocated to the calls, in proportion to overlap x utilisation weight (a pod's own
utilisation when the GPU is shared and reported per pod, else 1); the rest is idle cost of
the GPU. So allocated + idle = the GPU's cost over every interval. Idle cost is reported
per GPU and can be shared out over workloads in proportion to their allocated cost, as
OpenCost does. Time between samples further apart than `max_gap_ms` is not costed: it is
reported as unobserved.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from schemas.gpu import GpuSample, PriceCatalog
from schemas.records import GpuCall

HOUR_MS = 3_600_000


class CallCost(NamedTuple):
    trace_id: str
    span_id: str
    gpu_uuid: str
    workload: str
    pod: str
    namespace: str
    user_id: str
    gpu_seconds: float  # busy GPU-seconds attributed to the call
    cost_usd: float
    price_known: bool  # False: the GPU's model was priced at the catalog's fallback


class IdleCost(NamedTuple):
    gpu_uuid: str
    model: str
    start_ms: int
    end_ms: int
    idle_seconds: float
    cost_usd: float
    price_known: bool


@dataclass
class GpuCost:
    calls: list[CallCost] = field(default_factory=list)
    idle: list[IdleCost] = field(default_factory=list)
    total_usd: float = 0.0  # cost of every observed interval (allocated + idle)
    unobserved_ms: int = 0


def _union_length(spans: Iterable[tuple[int, int]]) -> int:
    total, cursor = 0, None
    for lo, hi in sorted(spans):
        if cursor is None or lo > cursor:
            total += hi - lo
            cursor = hi
        elif hi > cursor:
            total += hi - cursor
            cursor = hi
    return total


class IntervalCost(NamedTuple):
    """One closed sampling interval (or price segment) of one GPU."""

    gpu_uuid: str
    model: str
    start_ms: int
    end_ms: int
    cost_usd: float  # = sum of the calls' cost_usd + idle.cost_usd
    price_known: bool
    calls: tuple[CallCost, ...]
    idle: IdleCost | None


def allocate_intervals(samples: Sequence[GpuSample], calls: Sequence[GpuCall],
                       catalog: PriceCatalog, nominal_interval_ms: int, max_gap_ms: int,
                       previous_ts: int | None = None) -> tuple[list[IntervalCost], int]:
    """Cost of one GPU per interval closed by `samples`; also the unobserved milliseconds.

    `previous_ts` is the last sample already accounted for (streaming resumes from it).
    """
    by_ts: dict[int, list[GpuSample]] = defaultdict(list)
    for sample in samples:
        by_ts[sample.ts_ms].append(sample)
    out: list[IntervalCost] = []
    unobserved = 0
    previous = previous_ts
    # Sweep: intervals come in time order, so calls join the active set once (by start)
    # and leave it once they have ended; each segment only looks at active calls.
    pending = sorted(calls, key=lambda c: c.start_ms)
    next_call = 0
    active: list[GpuCall] = []
    for ts in sorted(by_ts):
        group = by_ts[ts]
        head = group[0]
        if previous is not None and ts - previous <= max_gap_ms:
            start = previous
        else:
            start = ts - nominal_interval_ms
            if previous is not None:
                unobserved += max(0, start - previous)
        previous = ts
        # per-pod utilisation when the GPU is reported per pod (shared GPU)
        pod_util = {s.pod: s.util_pct for s in group if s.pod}
        for lo, hi, usd_per_hour, known in catalog.segments(head.model, head.pricing_class,
                                                              start, ts):
            while next_call < len(pending) and pending[next_call].start_ms < hi:
                active.append(pending[next_call])
                next_call += 1
            active = [c for c in active if c.end_ms > lo]
            out.append(_segment(head, lo, hi, usd_per_hour * (hi - lo) / HOUR_MS, known,
                                active, pod_util))
    return out, unobserved


def _segment(head: GpuSample, lo: int, hi: int, cost: float, known: bool,
             calls: Sequence[GpuCall], pod_util: dict[str, float]) -> IntervalCost:
    overlaps = []
    for call in calls:
        a, b = max(lo, call.start_ms), min(hi, call.end_ms)
        if b > a:
            weight = pod_util.get(call.k8s_pod, 0.0) / 100 if len(pod_util) > 1 else 1.0
            overlaps.append((call, a, b, weight))
    covered = _union_length((a, b) for _, a, b, _ in overlaps)
    allocated = cost * covered / (hi - lo)
    weights = [(b - a) * w for _, a, b, w in overlaps]
    if overlaps and sum(weights) <= 0:  # shared, but no pod reported any use
        weights = [b - a for _, a, b, _ in overlaps]
    total_weight = sum(weights)
    shares = tuple(
        CallCost(call.trace_id, call.span_id, head.gpu_uuid, call.workload, call.k8s_pod,
                 call.k8s_namespace, call.user_id, (b - a) / 1000,
                 allocated * weight / total_weight, known)
        for (call, a, b, _), weight in zip(overlaps, weights, strict=True))
    idle_ms = (hi - lo) - covered
    idle = IdleCost(head.gpu_uuid, head.model, lo, hi, idle_ms / 1000, cost - allocated,
                    known) if idle_ms > 0 else None
    return IntervalCost(head.gpu_uuid, head.model, lo, hi, cost, known, shares, idle)


def allocate_gpu(samples: Sequence[GpuSample], calls: Sequence[GpuCall],
                 catalog: PriceCatalog, nominal_interval_ms: int,
                 max_gap_ms: int) -> GpuCost:
    """Cost of one GPU over its samples: per call (summed over intervals) and idle."""
    intervals, unobserved = allocate_intervals(samples, calls, catalog, nominal_interval_ms,
                                               max_gap_ms)
    out = GpuCost(unobserved_ms=unobserved)
    per_call: dict[tuple[str, str], CallCost] = {}
    for interval in intervals:
        out.total_usd += interval.cost_usd
        if interval.idle is not None:
            out.idle.append(interval.idle)
        for share in interval.calls:
            key = (share.trace_id, share.span_id)
            before = per_call.get(key)
            per_call[key] = share if before is None else before._replace(
                gpu_seconds=before.gpu_seconds + share.gpu_seconds,
                cost_usd=before.cost_usd + share.cost_usd,
                price_known=before.price_known and share.price_known)
    out.calls = list(per_call.values())
    return out


def cost_by(calls: Iterable[CallCost], key: str) -> dict[str, float]:
    """Total cost per trace_id, workload, pod, user_id, ... (any CallCost field)."""
    totals: dict[str, float] = defaultdict(float)
    for call in calls:
        totals[getattr(call, key)] += call.cost_usd
    return dict(totals)


def share_idle(allocated: Mapping[str, Mapping[str, float]],
               idle: Mapping[str, float]) -> dict[str, float]:
    """Idle cost of each GPU spread over its workloads by their allocated cost on that GPU
    (OpenCost's shared idle). `allocated`: GPU -> workload -> USD; `idle`: GPU -> USD.
    A GPU that ran no workload keeps its idle cost under '(idle)', so the shares add up to
    the idle cost."""
    shares: dict[str, float] = defaultdict(float)
    for gpu, idle_usd in idle.items():
        workloads = allocated.get(gpu) or {}
        total = sum(workloads.values())
        if total <= 0:
            shares["(idle)"] += idle_usd
            continue
        for workload, usd in workloads.items():
            shares[workload] += idle_usd * usd / total
    return dict(shares)


def totals_by_gpu(calls: Iterable[CallCost],
                  idle: Iterable[IdleCost]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """The inputs of `share_idle` from cost rows: allocated per GPU and workload, idle per GPU."""
    allocated: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for call in calls:
        allocated[call.gpu_uuid][call.workload or call.pod] += call.cost_usd
    idle_usd: dict[str, float] = defaultdict(float)
    for row in idle:
        idle_usd[row.gpu_uuid] += row.cost_usd
    return {g: dict(w) for g, w in allocated.items()}, dict(idle_usd)
