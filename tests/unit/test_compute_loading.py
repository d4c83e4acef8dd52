"""Fully loaded compute (udfs/roi/compute_loading.py): a GPU-day's idle cost shared over its
calls by their cost, GPU-days without calls kept as unshared idle; per GPU and day the calls,
their shares and the unshared idle add up to the bill."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from udfs.periods import DAY_MS
from udfs.roi.compute_loading import call_shares, idle_shares

D0 = 20_000 * DAY_MS


def test_a_gpu_days_idle_cost_follows_its_calls_by_their_cost():
    calls = pd.DataFrame({"gpu_uuid": ["g1", "g1", "g1", "g2"],
                          "trace_id": ["t1", "t2", "", "t3"],
                          "ts_ms": [D0 + 10, D0 + 20, D0 + 30, D0 + 40],
                          "cost": [1.0, 3.0, 4.0, 2.0]})
    idle = pd.DataFrame({"gpu_uuid": ["g1", "g1", "g2", "g3", "g1"],
                         "ts_ms": [D0 + 5, D0 + 50, D0 + 60, D0 + 70, D0 + DAY_MS + 1],
                         "cost": [6.0, 2.0, 1.0, 5.0, 7.0]})
    shares, unshared = idle_shares(calls, idle)
    # g1 that day: 8.0 idle over 8.0 of calls; g2: 1.0 over 2.0
    assert shares.values.tolist() == [["t1", D0 + 10, 1.0], ["t2", D0 + 20, 3.0],
                                      ["", D0 + 30, 4.0], ["t3", D0 + 40, 1.0]]
    # g3 served nothing that day, g1 nothing the next: their idle stays with the GPU
    assert unshared.values.tolist() == [["g1", 20_001, 7.0], ["g3", 20_000, 5.0]]
    # the bill is covered: calls + shares + unshared = calls + idle
    assert shares.cost.sum() + unshared.cost.sum() == pytest.approx(idle.cost.sum())


def test_shares_of_one_gpu_day_match_the_frame_rule():
    rng = np.random.default_rng(3)
    costs = rng.gamma(2.0, 1.0, 50)
    shares = call_shares(costs, 12.5)
    assert shares.sum() == pytest.approx(12.5) and np.allclose(shares / costs, 12.5 / costs.sum())
    assert call_shares([0.0, 0.0], 3.0).tolist() == [0.0, 0.0]  # unshared, not divided by 0
    assert call_shares([], 3.0).tolist() == []
