"""Lifecycle stages (pure logic); cost allocation by stage weight is in test_roi.py."""


import pandas as pd
import pytest

from udfs.lifecycle import LifecycleConfig, StageWeights, stage_of, stages_of_orders
from udfs.periods import DAY_MS


def test_stage_rules():
    assert stage_of("u", None, 0) == "new"
    assert stage_of("u", 0, 90 * DAY_MS) == "repeat"  # the window's edge is inside
    assert stage_of("u", 0, 90 * DAY_MS + 1) == "winback"
    assert stage_of("", 0, 5) == "unknown"
    assert stage_of("u", 0, 10 * DAY_MS, LifecycleConfig(winback_days=7)) == "winback"


def test_vectorised_stages_match_the_rule_in_any_row_order():
    orders = pd.DataFrame({"user_id": ["a", "b", "a", "a", "", "b"],
                           "ts_ms": [0, 5, 30 * DAY_MS, 200 * DAY_MS, 7, 6]})
    got = stages_of_orders(orders.sample(frac=1, random_state=3)).sort_index()
    assert got.tolist() == ["new", "new", "repeat", "winback", "unknown", "repeat"]


def test_weights_are_validated():
    with pytest.raises(ValueError, match="missing winback"):
        StageWeights.of({"new": 1, "repeat": 1, "unknown": 1})
    with pytest.raises(ValueError, match="unknown loyal"):
        StageWeights.of({"new": 1, "repeat": 1, "winback": 1, "unknown": 1, "loyal": 1})
    with pytest.raises(ValueError, match="new must be a non-negative number"):
        StageWeights.of({"new": -1, "repeat": 1, "winback": 1, "unknown": 1})
    with pytest.raises(ValueError, match="repeat must be a non-negative number"):
        StageWeights(repeat=float("nan"))
    with pytest.raises(ValueError, match="winback_days must be positive"):
        LifecycleConfig(winback_days=0)


