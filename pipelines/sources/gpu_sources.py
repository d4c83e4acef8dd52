"""Where GPU samples come from: NVML on this host, a dcgm-exporter endpoint, or a file.

Each source yields lists of `GpuSample` (one list per scrape). NVML reports power in mW and
memory in bytes; dcgm-exporter already uses the DCGM units the sample keeps (%, MiB, W, mJ).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipelines.sources.text_files import TextFileError, read_text_strictly
from schemas.gpu import DCGM_FIELDS, LABELS, GpuSample


class GpuSourceError(RuntimeError):
    """No usable GPU source; the message says which options exist."""


NO_SOURCE_HINT = ("use --from-prometheus URL (a dcgm-exporter /metrics endpoint) or "
                  "--replay FILE (recorded samples, JSON lines)")

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _empty(ts_ms: int, labels: dict[str, str]) -> dict[str, Any]:
    sample: dict[str, Any] = {name: 0.0 for name in (
        "util_pct", "mem_copy_util_pct", "fb_used_mib", "fb_free_mib", "power_w", "energy_mj",
        "net_tx_bytes_per_s")}
    sample.update(ts_ms=ts_ms, gpu_uuid="", model="", hostname="", pod="", namespace="",
                  pricing_class="on_demand")
    for label, value in labels.items():
        if label in LABELS:
            sample[LABELS[label]] = value
    return sample


def parse_prometheus(text: str, now_ms: int) -> list[GpuSample]:
    """dcgm-exporter's text exposition -> one sample per (GPU, pod) series set."""
    samples: dict[tuple[str, str, str], dict[str, Any]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match or match.group(1) not in DCGM_FIELDS:
            continue
        name, label_text, value, ts = match.groups()
        labels = {k: v.encode().decode("unicode_escape")
                  for k, v in _LABEL.findall(label_text or "")}
        stamp = int(ts) if ts else now_ms
        probe = _empty(stamp, labels)
        key = (probe["gpu_uuid"], probe["pod"], probe["namespace"])
        sample = samples.setdefault(key, probe)
        sample[DCGM_FIELDS[name]] = float(value)
    return [GpuSample(**s) for s in samples.values()]


def scrape(url: str, timeout_s: float = 10.0) -> list[GpuSample]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
            text = response.read().decode()
    except OSError as error:
        raise GpuSourceError(f"cannot scrape {url}: {error}") from None
    samples = parse_prometheus(text, int(time.time() * 1000))
    if not samples:
        raise GpuSourceError(f"{url} answered, but with no DCGM_FI_DEV_* GPU metrics")
    return samples


def prometheus_source(url: str, interval_s: float, count: int | None) -> Iterator[list[GpuSample]]:
    done = 0
    while count is None or done < count:
        started = time.monotonic()
        yield scrape(url)
        done += 1
        if count is None or done < count:
            time.sleep(max(0.0, interval_s - (time.monotonic() - started)))


def replay_source(path: Path, interval_s: float) -> Iterator[list[GpuSample]]:
    """JSON lines, one sample per line (GpuSample fields); consecutive lines with the same
    ts_ms form one scrape. interval_s > 0 paces scrapes in real time, 0 replays at once."""
    if not path.exists():
        raise GpuSourceError(f"replay file not found: {path}")
    batch: list[GpuSample] = []
    try:
        text = read_text_strictly(path)
    except TextFileError as error:
        raise GpuSourceError(str(error)) from None
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            sample = GpuSample(**{**_empty(int(row["ts_ms"]), {}), **row})
        except (ValueError, KeyError, TypeError) as error:
            raise GpuSourceError(f"{path}:{number}: not a GPU sample: {error}") from None
        if batch and sample.ts_ms != batch[0].ts_ms:
            yield batch
            batch = []
            if interval_s > 0:
                time.sleep(interval_s)
        batch.append(sample)
    if batch:
        yield batch


def nvml_source(interval_s: float, count: int | None) -> Iterator[list[GpuSample]]:
    try:
        import pynvml
    except ImportError:
        raise GpuSourceError("NVML bindings are not installed (pip package nvidia-ml-py); "
                             + NO_SOURCE_HINT) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise GpuSourceError(f"no NVIDIA GPU here (NVML: {error}); {NO_SOURCE_HINT}") from None
    hostname = __import__("socket").gethostname()
    done = 0
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                   for i in range(pynvml.nvmlDeviceGetCount())]
        if not handles:
            raise GpuSourceError(f"NVML found no GPU; {NO_SOURCE_HINT}")
        while count is None or done < count:
            now = int(time.time() * 1000)
            batch = []
            for handle in handles:
                util = pynvml.nvmlDeviceGetUtilizationRates(handle)
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
                batch.append(GpuSample(
                    ts_ms=now, gpu_uuid=str(pynvml.nvmlDeviceGetUUID(handle)),
                    model=str(pynvml.nvmlDeviceGetName(handle)), hostname=hostname, pod="",
                    namespace="", util_pct=float(util.gpu), mem_copy_util_pct=float(util.memory),
                    fb_used_mib=memory.used / 1_048_576, fb_free_mib=memory.free / 1_048_576,
                    power_w=pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,  # mW -> W
                    energy_mj=float(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))))
            yield batch
            done += 1
            if count is None or done < count:
                time.sleep(interval_s)
    finally:
        pynvml.nvmlShutdown()
