"""What the control loop knows of the world, in memory, fed message by message (by
pipelines/control/inputs.py from Kafka, or directly by tests):

- the ROI topic as a changelog: the latest roi_daily row per (model, day, dimension, key)
  (a day reported again wins, as in the warehouse), the last `history_days` data days;
- the newest GPU sample of each GPU (OTLP metrics, pipelines/codec/metrics.py) and the
  newest queue-depth gauge of each pool, which make each pool's pressure
  (udfs/control/pool_pressure.py) from the readings of the last `gpu.window_s` before now;
- the reconciliation alerts still open.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any, NamedTuple

import pandas as pd
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from pipelines.codec import roi_messages
from pipelines.codec.metrics import decode_samples
from pipelines.control.config import ControlConfig
from schemas.gpu import GpuSample
from schemas.rows import ROI_DAILY
from udfs.control import MEMORY_WEIGHT, QUEUE_WEIGHT, UTIL_SATURATION_PCT, UTIL_WEIGHT, pressure
from udfs.periods import parse_day

log = logging.getLogger("seedance.control")
_KEYS = len(ROI_DAILY.key)


class PoolReading(NamedTuple):
    """A pool's pressure and its three weighted factors (they add up to it)."""
    pressure: float
    utilization: float  # 0.40 x min(1, util / 95)
    memory: float  # 0.35 x memory in use
    queue: float  # 0.25 x min(1, queue / capacity)
    gpus: int


_TEXT_FIELDS = ("model", "dimension", "key", "currency")
_NUMBER_FIELDS = ("conversions", "revenue", "ad_spend", "compute_cost")
_OPTIONAL = ("roas", "margin_roi")


def _check_roi_row(values: tuple[object, ...]) -> None:
    """A roi_daily row the loop can use: names are text, the day a date, the figures
    finite numbers (roi may be null); a bad one would stop every later step."""
    row = dict(zip(ROI_DAILY.names, values, strict=True))
    for name in _TEXT_FIELDS:
        if not isinstance(row[name], str):
            raise ValueError(f"{name} must be text, got {row[name]!r}")
    if not isinstance(row["day"], str):
        raise ValueError(f"day must be YYYY-MM-DD, got {row['day']!r}")
    try:
        parse_day(row["day"])
    except ValueError as error:
        raise ValueError(f"day {row['day']!r} is not a date: {error}") from None
    for name in _NUMBER_FIELDS + ("roi", *_OPTIONAL):
        value = row[name]
        if value is None and name in ("roi", *_OPTIONAL):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")


class ControlState:
    def __init__(self, config: ControlConfig) -> None:
        self.config = config
        self.roi: dict[tuple[object, ...], tuple[object, ...]] = {}
        self.samples: dict[str, GpuSample] = {}  # gpu_uuid -> newest sample
        self.queues: dict[str, tuple[int, float]] = {}  # pool -> (ts_ms, depth)
        self.open_alerts: dict[str, dict[str, Any]] = {}  # alert key -> newest open event
        self.skipped = 0  # messages that were not understood

    # -- feeding ------------------------------------------------------------------------
    def add_roi(self, message: bytes) -> None:
        """One roi_daily row; raises ValueError naming what is wrong with one that is not a
        row of numbers and names (the caller skips it, saying where it was)."""
        # pipelines/codec/roi_messages.py (a message without a kind: a roi row)
        row = roi_messages.decode(message, default_kind=roi_messages.ROI)
        if row.kind != roi_messages.ROI:
            return  # unallocated cost and order costs are not metrics of a target
        values = roi_messages.row(row)  # (ratios absent from rows before them: None)
        _check_roi_row(values)
        if row.withdrawn:  # the key has no row any more (a corrected conversion)
            self.roi.pop(values[:_KEYS], None)
            return
        self.roi[values[:_KEYS]] = values

    def add_metrics(self, payload: bytes) -> None:
        samples, dead = decode_samples(payload)
        if dead:
            self.skipped += 1
            return
        for sample in samples:
            known = self.samples.get(sample.gpu_uuid)
            if known is None or sample.ts_ms >= known.ts_ms:
                self.samples[sample.gpu_uuid] = sample
        self._add_queue_depths(payload)

    def _add_queue_depths(self, payload: bytes) -> None:
        name = self.config.gpu.queue_metric
        if not name:
            return
        try:
            request = ExportMetricsServiceRequest.FromString(payload)
        except DecodeError:
            return
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != name or metric.WhichOneof("data") not in ("gauge", "sum"):
                        continue
                    for point in getattr(metric, str(metric.WhichOneof("data"))).data_points:
                        attrs = {kv.key: kv.value.string_value for kv in point.attributes}
                        value = point.as_double if point.WhichOneof("value") == "as_double" \
                            else float(point.as_int)
                        ts_ms = point.time_unix_nano // 1_000_000
                        pool = attrs.get("pool", "")
                        if pool and ts_ms >= self.queues.get(pool, (-1, 0.0))[0]:
                            self.queues[pool] = (ts_ms, value)

    def add_alert(self, message: bytes) -> None:
        try:
            alert = json.loads(message)
            key = json.dumps(alert["key"], sort_keys=True)
            kind = alert["kind"]
        except (ValueError, KeyError, TypeError):
            self.skipped += 1
            return
        if kind == "open":
            self.open_alerts[key] = alert
        else:
            self.open_alerts.pop(key, None)

    # -- views --------------------------------------------------------------------------
    def daily(self) -> pd.DataFrame:
        """The roi_daily rows of the last `history_days` data days."""
        frame = pd.DataFrame(list(self.roi.values()), columns=list(ROI_DAILY.names))
        if frame.empty:
            return frame
        frame["roi"] = frame["roi"].astype(float)
        newest = pd.to_datetime(frame.day).max()
        keep = pd.to_datetime(frame.day) > newest - pd.Timedelta(
            days=self.config.inputs.history_days)
        return frame[keep].reset_index(drop=True)

    def pools(self, now_ms: int) -> dict[str, PoolReading]:
        """Each pool's reading from the samples of the last gpu.window_s before now_ms."""
        since = now_ms - self.config.gpu.window_s * 1000
        members: dict[str, list[GpuSample]] = {}
        for sample in self.samples.values():
            if since <= sample.ts_ms <= now_ms:
                pool = self.config.pool_of(sample.gpu_uuid, sample.hostname, sample.model)
                members.setdefault(pool, []).append(sample)
        readings = {}
        for pool, group in sorted(members.items()):
            ts_ms, depth = self.queues.get(pool, (0, 0.0))
            queue = depth if since <= ts_ms <= now_ms else 0.0
            util = sum(s.util_pct for s in group) / len(group)
            free = sum(s.fb_free_mib for s in group)
            total = sum(s.fb_free_mib + s.fb_used_mib for s in group)
            capacity = self.config.capacity_of(pool)
            try:
                value = pressure(util, free, total, queue, capacity)
            except ValueError as error:
                log.warning("pool %s: no pressure: %s", pool, error)
                continue
            readings[pool] = PoolReading(
                value, UTIL_WEIGHT * min(1.0, util / UTIL_SATURATION_PCT),
                MEMORY_WEIGHT * (1 - free / total),
                QUEUE_WEIGHT * min(1.0, queue / capacity), len(group))
        return readings

    def pressures(self, now_ms: int) -> dict[str, float]:
        return {pool: r.pressure for pool, r in self.pools(now_ms).items()
                if not math.isnan(r.pressure)}
