"""`seedance probe`: sample GPUs, publish the samples to Kafka, print live lines.

Each line shows the GPU, its utilisation, memory bandwidth, memory, power and what it
costs per hour, with warnings where money is wasted: memory bandwidth saturated, a GPU
allocated (to a pod, or holding memory) but idle, network egress high.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from schemas.gpu import GpuSample, PriceCatalog, sample_problem


@dataclass(frozen=True)
class Thresholds:
    mem_bandwidth_pct: float = 90.0  # DCGM_FI_DEV_MEM_COPY_UTIL above this: saturated
    idle_util_pct: float = 5.0  # allocated GPU below this utilisation: idle
    allocated_mem_mib: float = 256.0  # memory held above this counts as allocated
    egress_mb_s: float = 500.0  # network transmit above this (MB/s): high egress


def warnings_for(sample: GpuSample, limits: Thresholds) -> list[str]:
    problem = sample_problem(sample)
    if problem:
        return [f"INVALID reading ({problem}): the job will dead-letter it"]
    found = []
    if sample.mem_copy_util_pct > limits.mem_bandwidth_pct:
        found.append(f"memory bandwidth saturated ({sample.mem_copy_util_pct:.0f} % > "
                     f"{limits.mem_bandwidth_pct:.0f} %)")
    allocated = bool(sample.pod) or sample.fb_used_mib > limits.allocated_mem_mib
    if allocated and sample.util_pct < limits.idle_util_pct:
        holder = f"pod {sample.pod}" if sample.pod else f"{sample.fb_used_mib:.0f} MiB in use"
        found.append(f"allocated but idle ({holder}, utilisation {sample.util_pct:.0f} %)")
    if sample.net_tx_bytes_per_s > limits.egress_mb_s * 1e6:
        found.append(f"network egress high ({sample.net_tx_bytes_per_s / 1e6:.0f} MB/s > "
                     f"{limits.egress_mb_s:.0f} MB/s)")
    return found


def describe(sample: GpuSample, catalog: PriceCatalog, limits: Thresholds) -> str:
    (_, _, usd_per_hour, known), *_ = catalog.segments(sample.model, sample.pricing_class,
                                                      sample.ts_ms, sample.ts_ms + 1)
    when = datetime.fromtimestamp(sample.ts_ms / 1000, UTC).strftime("%H:%M:%S")
    who = f" {sample.namespace}/{sample.pod}" if sample.pod else ""
    memory = sample.fb_used_mib + sample.fb_free_mib
    line = (f"{when} {sample.gpu_uuid[:16]} {sample.model or '?'}{who}  "
            f"util {sample.util_pct:5.1f} %  membw {sample.mem_copy_util_pct:5.1f} %  "
            f"mem {sample.fb_used_mib / 1024:6.1f}/{memory / 1024:.0f} GiB  "
            f"power {sample.power_w:5.0f} W  ${usd_per_hour:.2f}/h"
            + ("" if known else " (fallback price: unknown model)"))
    return line + "".join(f"\n    WARNING: {w}" for w in warnings_for(sample, limits))


def run_probe(scrapes: Iterable[list[GpuSample]], catalog: PriceCatalog,
              publish: Callable[[list[GpuSample]], None] | None,
              limits: Thresholds = Thresholds(),
              out: Callable[[str], None] = print) -> tuple[int, int]:
    """Print and publish every scrape; returns (samples, warnings)."""
    samples = warnings = 0
    for batch in scrapes:
        if publish is not None:
            publish(batch)
        for sample in batch:
            out(describe(sample, catalog, limits))
            warnings += len(warnings_for(sample, limits))
        samples += len(batch)
    return samples, warnings
