"""GPU metric samples and the GPU price catalog.

A sample follows the DCGM exporter's fields and units (percent, MiB, W, mJ, MHz), with the
OpenTelemetry `hw.gpu.*` names as aliases; see schemas/GPU.md for the full mapping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from schemas.telemetry import MAX_TEXT, unprintable


class GpuSample(NamedTuple):
    """One reading of one GPU (or of one pod's share of it) at ts_ms."""

    ts_ms: int
    gpu_uuid: str
    model: str  # modelName, e.g. "NVIDIA H100 80GB HBM3"
    hostname: str
    pod: str
    namespace: str
    util_pct: float  # DCGM_FI_DEV_GPU_UTIL
    mem_copy_util_pct: float  # DCGM_FI_DEV_MEM_COPY_UTIL: memory bandwidth in use
    fb_used_mib: float
    fb_free_mib: float
    power_w: float
    energy_mj: float  # counter since boot
    net_tx_bytes_per_s: float = 0.0  # egress of the host/pod, when the source has it
    pricing_class: str = "on_demand"


# DCGM exporter metric -> sample field (units already match)
DCGM_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "mem_copy_util_pct",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
}
# OpenTelemetry semantic conventions -> (sample field, factor to DCGM units)
OTEL_FIELDS = {
    "hw.gpu.utilization": ("util_pct", 100.0),  # ratio -> %
    "hw.gpu.memory.utilization": ("mem_copy_util_pct", 100.0),
    "hw.gpu.memory.usage": ("fb_used_mib", 1 / 1_048_576),  # bytes -> MiB
    "hw.gpu.memory.free": ("fb_free_mib", 1 / 1_048_576),
    "hw.power": ("power_w", 1.0),
    "hw.energy": ("energy_mj", 1000.0),  # J -> mJ
    "system.network.io.transmit.rate": ("net_tx_bytes_per_s", 1.0),
}
# label spellings seen in the wild -> sample field
LABELS = {
    "UUID": "gpu_uuid", "uuid": "gpu_uuid", "hw.id": "gpu_uuid", "gpu.uuid": "gpu_uuid",
    "modelName": "model", "hw.model": "model",
    "Hostname": "hostname", "hostname": "hostname", "host.name": "hostname",
    "pod": "pod", "pod_name": "pod", "k8s.pod.name": "pod",
    "namespace": "namespace", "pod_namespace": "namespace", "k8s.namespace.name": "namespace",
    "pricing_class": "pricing_class", "seedance.pricing_class": "pricing_class",
}

PRICING_CLASSES = ("on_demand", "spot", "reserved")

# Board power limits (W) with headroom, to catch impossible readings.
POWER_LIMIT_W = {"A100": 500.0, "L40S": 400.0, "H100": 800.0, "H200": 800.0}
DEFAULT_POWER_LIMIT_W = 1200.0


def model_family(model: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100' (the catalog's key); '' if none matches."""
    upper = model.upper()
    for family in sorted(POWER_LIMIT_W, key=len, reverse=True):
        if family in upper:
            return family
    return ""


def sample_problem(sample: GpuSample) -> str | None:
    """Why a sample is impossible (it then goes to the dead-letter topic), or None."""
    if not sample.gpu_uuid:
        return "gpu uuid is missing"
    # the labels go to every sink as text: the same rule as the span decoders'
    for name in ("gpu_uuid", "model", "hostname", "pod", "namespace", "pricing_class"):
        label = getattr(sample, name)
        if len(label) > MAX_TEXT:
            return f"{name} is longer than {MAX_TEXT} characters"
        problem = unprintable(label)
        if problem is not None:
            return f"{name} {problem}"
    values = {"util_pct": sample.util_pct, "mem_copy_util_pct": sample.mem_copy_util_pct,
              "fb_used_mib": sample.fb_used_mib, "fb_free_mib": sample.fb_free_mib,
              "power_w": sample.power_w, "energy_mj": sample.energy_mj,
              "net_tx_bytes_per_s": sample.net_tx_bytes_per_s}
    for name, value in values.items():
        if not isinstance(value, int | float) or math.isnan(value) or math.isinf(value):
            return f"{name} is not a finite number: {value!r}"
        if value < 0:
            return f"{name} is negative: {value}"
    for name in ("util_pct", "mem_copy_util_pct"):
        if values[name] > 100:
            return f"{name} is above 100 %: {values[name]}"
    limit = POWER_LIMIT_W.get(model_family(sample.model), DEFAULT_POWER_LIMIT_W)
    if sample.power_w > limit:
        return f"power_w {sample.power_w} is above the {limit:.0f} W limit of {sample.model!r}"
    if sample.pricing_class not in PRICING_CLASSES:
        return f"pricing_class must be one of {', '.join(PRICING_CLASSES)}"
    return None


# --- price catalog -------------------------------------------------------------------

@dataclass(frozen=True)
class Price:
    family: str  # A100, L40S, H100, H200, ...
    pricing_class: str
    usd_per_hour: float
    effective_from_ms: int


@dataclass(frozen=True)
class PriceCatalog:
    prices: tuple[Price, ...]
    fallback_usd_per_hour: float

    def segments(self, model: str, pricing_class: str, start_ms: int,
                 end_ms: int) -> list[tuple[int, int, float, bool]]:
        """[start, end) cut where the price changes: (start, end, USD/h, known model)."""
        family = model_family(model)
        rows = sorted((p for p in self.prices
                       if p.family == family and p.pricing_class == pricing_class),
                      key=lambda p: p.effective_from_ms)
        if not rows:
            return [(start_ms, end_ms, self.fallback_usd_per_hour, False)]
        out = []
        for i, price in enumerate(rows):
            until = rows[i + 1].effective_from_ms if i + 1 < len(rows) else end_ms
            lo, hi = max(start_ms, price.effective_from_ms), min(end_ms, until)
            if lo < hi:
                out.append((lo, hi, price.usd_per_hour, True))
        before = rows[0].effective_from_ms
        if start_ms < before:  # before the first price: the fallback, flagged
            out.insert(0, (start_ms, min(end_ms, before), self.fallback_usd_per_hour, False))
        return out


DEFAULT_CATALOG = Path(__file__).resolve().parent / "gpu_prices.yaml"


def _ms(value: Any) -> int:
    day = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if day.tzinfo is None:
        day = day.replace(tzinfo=UTC)
    return int(day.timestamp() * 1000)


def load_catalog(path: Path | None = None) -> PriceCatalog:
    source = path or DEFAULT_CATALOG
    data = yaml.safe_load(Path(source).read_text())
    if not isinstance(data, dict) or "prices" not in data:
        raise ValueError(f"{source}: expected keys 'prices' and 'fallback_usd_per_hour'")
    prices = []
    for i, row in enumerate(data["prices"]):
        where = f"{source}: prices[{i}]"
        try:
            pricing_class = str(row["pricing_class"])
            if pricing_class not in PRICING_CLASSES:
                raise ValueError(f"pricing_class must be one of {', '.join(PRICING_CLASSES)}")
            usd = float(row["usd_per_hour"])
            if not math.isfinite(usd) or usd < 0:
                raise ValueError(f"usd_per_hour must be a non-negative number, got {usd}")
            prices.append(Price(str(row["gpu"]).upper(), pricing_class, usd,
                                _ms(row.get("effective_from", "1970-01-01"))))
        except KeyError as missing:
            raise ValueError(f"{where}: missing key {missing}") from None
        except (TypeError, ValueError) as error:
            raise ValueError(f"{where}: {error}") from None
    return PriceCatalog(tuple(prices), float(data.get("fallback_usd_per_hour", 0.0)))
