"""The README's first command, as a user runs it (smaller sample): `seedance demo`."""

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path


def test_demo_runs_end_to_end_and_leaves_no_process_behind(tmp_path: Path):
    env = {**os.environ, "SEEDANCE_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "jobs.cli", "demo", "--users", "150"],
                            # about 3 min on a quiet machine; a loaded one (a busy
                            # loop per core) takes three times that
                            env=env, capture_output=True, text=True, timeout=1200,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    out = result.stdout
    orders = int(re.search(r"(\d+) orders", out).group(1))
    revenue = re.search(r"^total((?:\s+[\d,.]+){8})$", out, re.M)
    conversions = re.search(r"^conversions((?:\s+[\d,.]+){8})$", out, re.M)
    assert revenue and conversions, out
    # all eight models credit every valid order exactly once, with the same revenue
    assert {float(x) for x in conversions.group(1).split()} == {orders}
    assert len(set(revenue.group(1).split())) == 1
    # the orders came from the orders table too (counted once) and some were refunded:
    # placed - refunded = the orders' net revenue = every model's credited revenue
    refunds = re.search(r"Refunds from the orders table: (\d+) of ([\d,]+) orders; placed "
                        r"\$([\d,.]+) - refunded \$([\d,.]+) = \$([\d,.]+), the orders' "
                        r"revenue in the warehouse:", out)
    assert refunds, out
    placed, refunded, net = (float(x.replace(",", "")) for x in refunds.groups()[2:])
    assert int(refunds.group(1)) > 0 and abs(placed - refunded - net) < 0.005
    assert {float(x.replace(",", "")) for x in revenue.group(1).split()} == {net}
    assert ", 0 broken" in out and "duplicate_order" not in out
    # one holdout per paid channel, measured, and the ROI calibrated beside uncalibrated
    lift = out[out.index("Incrementality: one holdout per paid channel"):]
    assert re.search(r"^\s+paid_search\s+holdout\.paid_search\s", lift, re.M), lift[:3000]
    assert "calibrated ROI" in lift
    roi = re.search(r"^paid_search\s+([\d,.]+)\s+([\d,.]+)\s+([\d,.]+)\s+([\d,.]+)"
                    r"\s+([\d,.]+)\s+([\d,.]+)$", out, re.M)
    assert roi, out  # ROI per model for a paid channel, with its allocated spend
    assert float(roi.group(5).replace(",", "")) > 0
    assert "dead letters" in out and "Kafka broker stopped." in out
    # GPU cost of the GPU-backed calls: allocated + idle = the sampled GPU time's cost
    gpu = re.search(r"Allocated \$([\d,.]+) \+ idle \$([\d,.]+) = \$([\d,.]+); "
                    r"sampled GPU time cost \$([\d,.]+)", out)
    assert gpu, out
    allocated, _, total, sampled = (float(x.replace(",", "")) for x in gpu.groups())
    assert allocated > 0 and abs(total - sampled) < 1e-4
    assert (tmp_path / "demo" / "warehouse.db").exists()
    # the strategy table of the two experiments, every variant a row
    table = out[out.index("Experiments:"):]
    for variant in ("bidding-strategy  control (control)", "v2.3-dynamic-bidding",
                    "checkout-copy     control (control)", "short-copy"):
        assert variant in table, table
    # the control loop scaled the hot pool out through its signed webhook and verified it
    assert "the autoscaler applied scale" in out, out
    assert re.search(r"verified success: scale_out_hot_pool on \S.* \(0\.9\d -> 0\.\d\d\)",
                     out), out
    # the streaming ltv job scored the customers with the model fitted before it ran
    scored = re.search(r"([\d,]+) customers; segments low/mid/high/top at", out)
    scores = re.search(r"([\d,]+) customer scores on customer_ltv", out)
    assert scored and scores, out
    assert int(scores.group(1).replace(",", "")) >= int(scored.group(1).replace(",", "")) > 0
    # lifetime value: each channel's first-order ROI beside its LTV ROI, with totals that
    # are those of the ltv_return table the demo wrote
    ltv = out[out.index("LTV-based return by channel under last_click"):]
    total = re.search(r"all channels\s+([\d,.]+)\s+([\d,.]+)", ltv)
    assert total, ltv
    with sqlite3.connect(tmp_path / "demo" / "warehouse.db") as db:
        customers, cost = db.execute(
            "SELECT SUM(customers), SUM(acquisition_cost) FROM ltv_return "
            "WHERE model = 'last_click' AND dimension = 'channel'").fetchone()
    assert abs(float(total.group(1).replace(",", "")) - customers) < 0.05
    assert abs(float(total.group(2).replace(",", "")) - cost) < 0.005
    # nothing of ours still runs: no process mentions this state folder
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert leftovers.stdout.strip() == ""
