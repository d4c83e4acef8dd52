"""What a sample plan costs: the paid campaigns' daily ad spend and DCGM-like samples of the
GPUs behind its calls (`seedance generate`, the demo and the tests publish both beside the
plan's spans)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from pipelines.sources.ad_spend import SpendRecord
from pipelines.sources.generator import GPU_MODELS, GPUS, LATE_RANK, Plan
from schemas.gpu import GpuSample

# Which ad platform bills a campaign, and a rough price per touch it drove.
AD_ACCOUNTS = {"gs-": ("google_ads", "123-456-7890", 4.50), "meta-": ("meta", "act_1001", 3.50),
               "dv360-": ("dv360", "adv-77", 2.00), "aff-": ("affiliate", "aff-net-5", 1.50)}


def plan_spend(plan: Plan, seed: int = 7) -> list[SpendRecord]:
    """Daily spend of the paid campaigns in the plan: touches that day x a price, with noise
    (email and organic cost nothing here). Deterministic for a plan and seed."""
    rng = random.Random(seed)
    touches: dict[tuple[str, str], int] = {}
    for event in plan.events:
        if event.kind == "touchpoint" and event.campaign:
            day = datetime.fromtimestamp(event.ts_ns / 1e9, UTC).strftime("%Y-%m-%d")
            touches[event.campaign, day] = touches.get((event.campaign, day), 0) + 1
    out = []
    for (campaign, day), count in sorted(touches.items()):
        for prefix, (platform, account, price) in AD_ACCOUNTS.items():
            if campaign.startswith(prefix):
                amount = round(count * price * (0.8 + 0.4 * rng.random()), 2)
                out.append(SpendRecord(platform, account, campaign, day, amount, "USD"))
    return out



def gpu_samples(plan: Plan, interval_ms: int = 60_000, seed: int = 7) -> list[GpuSample]:
    """DCGM-like samples of the plan's GPUs around their calls (the interval that holds a
    call and the one before it); the time in between is left unsampled, as when a node is
    scaled down. A GPU that runs a batch workload is up, and sampled, from its first
    run to its last."""
    rng = random.Random(seed ^ 0x6A)
    stamps: dict[str, set[int]] = {gpu: set() for gpu in GPUS}
    for gpu in GPUS:
        runs = [e for e in plan.events if e.kind == "gpu_batch" and e.gpu_uuid == gpu]
        if runs:
            first = runs[0].ts_ns // 1_000_000 // interval_ms * interval_ms
            last = max(e.ts_ns + e.duration_ns for e in runs) // 1_000_000
            stamps[gpu].update(range(first, last + interval_ms, interval_ms))
    for event in plan.events:
        if event.gpu_uuid and event.emit_rank < LATE_RANK and event.kind != "gpu_batch":
            end_ms = (event.ts_ns + 42_000_000) // 1_000_000
            closing = -(-end_ms // interval_ms) * interval_ms
            stamps[event.gpu_uuid].update((closing - interval_ms, closing))
    out = []
    for gpu, times in stamps.items():
        for ts in sorted(times):
            out.append(GpuSample(ts, gpu, GPU_MODELS[gpu], "gpu-node-1", "", "",
                                 round(rng.uniform(5, 90), 1), round(rng.uniform(2, 60), 1),
                                 round(rng.uniform(2_000, 30_000)), 40_000.0,
                                 round(rng.uniform(80, 350), 1), float(ts)))
    return sorted(out, key=lambda s: (s.ts_ms, s.gpu_uuid))
