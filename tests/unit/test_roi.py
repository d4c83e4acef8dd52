"""ROI of a day: spend by credit x stage weight, compute through the journey, conservation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.lifecycle import StageWeights
from udfs.roi.day import CREDIT_COLUMNS, day_roi, with_withdrawn

ROWS = [
    # model, order, touch, channel, campaign, stage, credit, revenue
    ("last_click", "o1", 1, "search", "c1", "new", 1.0, 100.0),
    ("last_click", "o2", 0, "social", "c1", "repeat", 1.0, 50.0),
    ("linear", "o1", 0, "email", "c2", "new", 0.5, 50.0),
    ("linear", "o1", 1, "search", "c1", "new", 0.5, 50.0),
    ("linear", "o2", 0, "social", "c1", "repeat", 1.0, 50.0),
]
CREDITS = pd.DataFrame(ROWS, columns=CREDIT_COLUMNS)
SPEND = pd.DataFrame([("google_ads", "1", "c1", 90.0), ("meta", "2", "c2", 10.0)],
                     columns=["platform", "account", "campaign", "amount"])
COMPUTE = pd.DataFrame([("o1", 5.0), ("o3", 2.0)], columns=["order_id", "cost"])


def row(result, model, dimension, key):
    (match,) = result.roi[(result.roi.model == model) & (result.roi.dimension == dimension)
                          & (result.roi.key == key)].itertuples()
    return match


def test_hand_computed_day():
    result = day_roi(CREDITS, SPEND, COMPUTE, ["last_click", "linear"], StageWeights(),
                     unlinked_compute=1.0)
    # last click: c1's 90 split new 0.6 : repeat 0.3 -> 60 / 30; c2 credited nothing
    search = row(result, "last_click", "channel", "search")
    assert (search.revenue, search.ad_spend, search.compute_cost) == pytest.approx(
        (100.0, 60.0, 5.0))
    assert math.isclose(search.roi, 100 / 65)
    assert row(result, "last_click", "channel", "social").ad_spend == pytest.approx(30.0)
    assert row(result, "last_click", "stage", "repeat").roi == pytest.approx(50 / 30)
    # linear: o1's search row weighs 0.5 x 0.6, o2's social row 1 x 0.3 -> 45 / 45
    assert row(result, "linear", "channel", "search").ad_spend == pytest.approx(45.0)
    assert row(result, "linear", "channel", "social").ad_spend == pytest.approx(45.0)
    email = row(result, "linear", "campaign", "c2")
    assert (email.ad_spend, email.compute_cost, email.revenue) == pytest.approx((10.0, 2.5, 50.0))
    unallocated = {(m, k, key): a for m, k, key, a in result.unallocated.itertuples(index=False)}
    assert unallocated == pytest.approx({("last_click", "ad_spend", "c2"): 10.0,
                                         ("last_click", "compute", ""): 3.0,
                                         ("linear", "compute", ""): 3.0})


def test_a_day_without_conversions_leaves_everything_unallocated():
    no_rows = pd.DataFrame([], columns=CREDIT_COLUMNS)  # untyped, as built from no rows
    result = day_roi(no_rows, SPEND, COMPUTE, ["markov"], StageWeights())
    assert result.roi.empty
    assert result.unallocated.amount.sum() == pytest.approx(107.0)


def test_zero_stage_weights_fall_back_to_credit():
    result = day_roi(CREDITS, SPEND, COMPUTE, ["linear"],
                     StageWeights(0.0, 0.0, 0.0, 0.0))
    assert row(result, "linear", "channel", "search").ad_spend == pytest.approx(90 * 0.5 / 1.5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 2),
                          st.sampled_from(["new", "repeat", "winback", "unknown"]),
                          st.floats(0.01, 1000)), min_size=1, max_size=25),
       st.lists(st.tuples(st.integers(0, 3), st.floats(0, 1e6)), max_size=5),
       st.lists(st.tuples(st.integers(0, 7), st.floats(0, 1e4)), max_size=5))
def test_allocated_plus_unallocated_is_what_came_in(touches, spend, compute):
    rows = []
    for order, campaign, channel, stage, revenue in touches:
        rows.append(("m", f"o{order}", len(rows), f"ch{channel}", f"c{campaign}", stage,
                     1.0, revenue))
    credits = pd.DataFrame(rows, columns=CREDIT_COLUMNS)
    # normalise credits per order, as a model would
    credits["credit"] = 1.0 / credits.groupby("order_id").credit.transform("count")
    spend_frame = pd.DataFrame([("p", "a", f"c{c}", a) for c, a in spend],
                               columns=["platform", "account", "campaign", "amount"])
    compute_frame = pd.DataFrame([(f"o{o}", c) for o, c in compute], columns=["order_id", "cost"])
    result = day_roi(credits, spend_frame, compute_frame, ["m"], StageWeights(),
                     unlinked_compute=0.5)
    channels = result.roi[result.roi.dimension == "channel"]
    spent_in = sum(a for _, a in spend)
    spent = channels.ad_spend.sum() + result.unallocated.query("kind == 'ad_spend'").amount.sum()
    assert math.isclose(spent, spent_in, rel_tol=1e-9, abs_tol=1e-9)
    computed = channels.compute_cost.sum() + result.unallocated.query("kind == 'compute'") \
        .amount.sum()
    assert math.isclose(computed, sum(c for _, c in compute) + 0.5, rel_tol=1e-9, abs_tol=1e-9)
    for dimension in ("campaign", "stage"):
        same = result.roi[result.roi.dimension == dimension]
        assert np.isclose(same.ad_spend.sum(), channels.ad_spend.sum(), rtol=1e-9, atol=1e-9)


def test_a_day_reported_again_withdraws_unallocated_keys_that_are_gone():
    first = [("linear", "ad_spend", "c2", 10.0), ("linear", "compute", "", 1.0)]
    keys = sorted({row[:3] for row in first})
    # later the c2 spend found a conversion: only compute is left unallocated
    again = with_withdrawn(keys, [("linear", "compute", "", 1.0)])
    assert again == [("linear", "compute", "", 1.0), ("linear", "ad_spend", "c2", 0.0)]
    assert with_withdrawn(None, first) == first and with_withdrawn(True, first) == first
