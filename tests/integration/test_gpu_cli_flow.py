"""A user's GPU cost path through the CLI alone: generate, probe --replay, run, load, report."""

import os
import re
import subprocess
import sys
from pathlib import Path


def test_probe_replay_to_cost_per_workload_and_trace(tmp_path: Path):
    env = {**os.environ, "SEEDANCE_HOME": str(tmp_path)}
    config = tmp_path / "job.yaml"
    config.write_text("input:\n  bounded: true\n  group_id: cli-flow\n"
                      "flink:\n  checkpoint_interval_s: 2\n"
                      "gpu:\n  nominal_interval_s: 60\n  max_gap_s: 60\n")

    def seedance(*args: str) -> str:
        result = subprocess.run([sys.executable, "-m", "jobs.cli", *args], env=env,
                                capture_output=True, text=True, timeout=300,
                                stdin=subprocess.DEVNULL)
        assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-3000:])
        return result.stdout

    seedance("stack", "up")
    try:
        recording = tmp_path / "gpu.jsonl"
        out = seedance("generate", "--users", "120", "--gpu-recording", str(recording))
        samples = int(re.search(r"wrote (\d+) GPU samples", out).group(1))
        assert samples > 0 and len(recording.read_text().splitlines()) == samples
        out = seedance("probe", "--replay", str(recording))
        assert f"{samples} samples published to otlp_metrics" in out
        seedance("run", "--job", "gpu-cost", "--bounded", "--config", str(config))
        out = seedance("load", "--config", str(config))
        assert re.search(r", [1-9]\d* GPU cost rows", out), out
        report = seedance("report", "--config", str(config))
    finally:
        seedance("stack", "down")
    assert "GPU compute cost per workload" in report and "shop/ranker" in report
    assert "Costliest traces" in report and "Idle cost shared over workloads" in report
    allocated, idle, total, sampled = (float(x.replace(",", "")) for x in re.search(
        r"Allocated \$([\d,.]+) \+ idle \$([\d,.]+) = \$([\d,.]+); sampled GPU time cost "
        r"\$([\d,.]+)", report).groups())
    assert allocated > 0 and idle > 0
    assert abs(total - sampled) < 1e-4  # conserved
