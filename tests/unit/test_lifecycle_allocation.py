"""Lifecycle stages and lifecycle-weighted cost allocation (pure logic)."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from udfs.allocation import allocate_spend, shares
from udfs.lifecycle import DAY_MS, LifecycleConfig, stage_of, stages_of_orders


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


def test_config_is_validated():
    with pytest.raises(ValueError, match="missing winback"):
        LifecycleConfig(weights={"new": 1, "repeat": 1, "unknown": 1})
    with pytest.raises(ValueError, match="non-negative"):
        LifecycleConfig(weights={"new": -1, "repeat": 1, "winback": 1, "unknown": 1})


def test_shares_weight_credit_by_stage():
    # a new customer's half credit counts 0.6 x 0.5, a repeat one's 0.3 x 0.5
    assert shares(90.0, np.array([0.5, 0.5]), np.array([0.6, 0.3])) == pytest.approx([60, 30])
    assert shares(10.0, np.array([1.0, 1.0]), np.array([0.0, 0.0])) == pytest.approx([5, 5])
    assert shares(10.0, np.array([0.0]), np.array([0.6])).tolist() == [0.0]


@given(st.floats(0, 1e6), st.lists(st.tuples(st.floats(0, 1), st.sampled_from(
    [0.6, 0.3, 0.1, 0.2])), min_size=1, max_size=20))
@example(1.5, [(5e-324, 0.6)])  # a subnormal credit once made cost x credit underflow
def test_shares_preserve_the_cost(cost, rows):
    credit = np.array([c for c, _ in rows])
    part = shares(cost, credit, np.array([w for _, w in rows]))
    if credit.sum() > 0:
        assert math.isclose(part.sum(), cost, rel_tol=1e-9, abs_tol=1e-6)
    else:
        assert part.sum() == 0


def test_spend_is_conserved_per_campaign_day_and_model_or_reported_unallocated():
    spend = pd.DataFrame({"campaign": ["c1", "c1", "c2"], "day": ["d1", "d2", "d1"],
                          "amount": [100.0, 40.0, 7.0]})
    credits = pd.DataFrame({
        "model": ["linear"] * 3 + ["last_click"] * 2,
        "order_id": ["o1", "o2", "o2", "o1", "o2"],
        "campaign": ["c1", "c1", "c1", "c1", "c1"], "day": ["d1"] * 5,
        "credit": [1.0, 0.5, 0.5, 1.0, 1.0],
        "stage": ["new", "repeat", "repeat", "new", "repeat"]})
    allocated, unallocated = allocate_spend(spend, credits)
    for model in ("linear", "last_click"):
        rows = allocated[allocated.model == model]
        assert math.isclose(rows.allocated.sum(), 100.0, rel_tol=1e-12)
        left = unallocated[unallocated.model == model]
        assert sorted(left.amount) == [7.0, 40.0]  # c1/d2 and c2/d1 had no conversion
    linear = allocated[allocated.model == "linear"].groupby("order_id").allocated.sum()
    # o1: 1.0 x 0.6 = 0.6; o2: (0.5 + 0.5) x 0.3 = 0.3  -> 2/3 and 1/3 of 100
    assert linear["o1"] == pytest.approx(200 / 3) and linear["o2"] == pytest.approx(100 / 3)
