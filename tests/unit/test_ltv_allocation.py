"""The LTV segment as the allocation basis: an order's segment depends on its customer's
orders up to its day alone (so the stream, order by order in any arrival order, gives the
batch's segments), weights are checked, and a day's spend is shared by credit x segment
weight with nothing lost."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from pipelines.flink.roi.segments import SegmentOrders
from tests.flink_fakes import Harness, StateStore
from tests.roi_inputs import Inputs
from udfs.lifecycle import StageWeights
from udfs.ltv.allocation import (
    UNKNOWN,
    OrderSegmenter,
    SegmentWeights,
    allocation_weight,
    tallies_of,
)
from udfs.ltv.model import BgNbd, GammaGamma, LtvModel
from udfs.ltv.tally import summaries_of
from udfs.periods import DAY_MS, day_of
from udfs.roi.day import day_roi

MODEL = LtvModel(BgNbd(r=0.5, alpha=5.0, a=0.8, b=2.4), GammaGamma(p=6.0, q=4.0, v=15.0),
                 period_days=7.0, customers=100.0, fitted_through_day=400.0)
T0 = 20_000 * DAY_MS


def segmenter(bounds: tuple[float, ...] = (40.0, 80.0, 160.0)) -> OrderSegmenter:
    return OrderSegmenter(MODEL, 365, 0.0, bounds)


def random_orders(seed: int, users: int = 40) -> pd.DataFrame:
    rng = random.Random(seed)
    rows = []
    for u in range(users):
        at = T0 + rng.randrange(0, 30) * DAY_MS
        for k in range(rng.randint(1, 6)):
            rows.append((f"o{u}-{k}", f"u{u}", at + rng.randrange(DAY_MS),
                         float(rng.choice([5, 20, 60, 150]))))
            at += rng.choice([0, 1, 3, 20]) * DAY_MS
    return pd.DataFrame(rows, columns=["order_id", "user_id", "ts_ms", "revenue"])


def test_an_orders_segment_is_its_customers_value_as_of_its_day_from_what_came_before():
    orders = random_orders(1)
    users = tallies_of(orders)
    found = segmenter().segments(users)
    assert set(found) == set(orders.order_id)
    assert len(set(found.values())) >= 3  # the bounds split these customers
    for order in orders.sample(25, random_state=2).itertuples():
        day = order.ts_ms // DAY_MS
        ids, summaries = summaries_of({order.user_id: users[order.user_id]}, day, 7.0)
        value = MODEL.lifetime_value(summaries, 365 / 7.0)[0]
        assert found[order.order_id] == ("low", "mid", "high", "top")[
            int(np.searchsorted([40.0, 80.0, 160.0], value, side="left"))]
    # a later order never changes an earlier one's segment
    later = orders.assign(ts_ms=orders.ts_ms + 400 * DAY_MS,
                          order_id=orders.order_id + "-later")
    again = segmenter().segments(tallies_of(pd.concat([orders, later])))
    assert {k: again[k] for k in found} == found


def quartiles_of_orders(orders: pd.DataFrame) -> tuple[float, ...]:
    """Bounds at the quartiles of the orders' values as of their days, each computed for
    its customer alone: orders with one summary sit exactly on them (and in a batch of
    customers, their value can differ in the last bits)."""
    users, values = tallies_of(orders), []
    for order in orders.itertuples():
        _, summaries = summaries_of({order.user_id: users[order.user_id]},
                                    order.ts_ms // DAY_MS, 7.0)
        values.append(float(MODEL.lifetime_value(summaries, 365 / 7.0)[0]))
    return tuple(float(b) for b in np.quantile(values, (0.25, 0.5, 0.75)))


@pytest.mark.parametrize("bounds", ["fixed", "on values"])
def test_order_by_order_in_any_arrival_order_gives_the_batch_segments(bounds):
    # (the ROI test's shop: some of its orders' values fall on its quartiles exactly)
    orders = random_orders(3) if bounds == "fixed" else Inputs(seed=7, users=50).orders()
    cut = segmenter() if bounds == "fixed" else segmenter(quartiles_of_orders(orders))
    batch = cut.segments(tallies_of(orders))
    assert len(set(batch.values())) >= 3
    for seed in range(3):
        shuffled = orders.sample(frac=1.0, random_state=seed)
        operator, store = SegmentOrders(cut), StateStore()
        harness = Harness(operator, store)
        sent: dict[str, str] = {}
        for row in shuffled.itertuples():
            item = ("order", row.user_id, row.ts_ms, (row.order_id, row.ts_ms, row.revenue))
            for kind, day, ts, (order, segment, value, user) in harness.process(
                    item, key=row.user_id):
                assert kind == "segment" and day == day_of(ts) and user == row.user_id
                assert (value is None) == (segment == UNKNOWN)
                sent[order] = segment
        assert sent == batch


def test_orders_the_model_cannot_value_are_unknown():
    broken = LtvModel(MODEL.purchases, GammaGamma(p=6.0, q=1.0, v=15.0), 7.0, 1.0, 0.0)
    users = {"u": {"o1": (T0, 10.0)}}
    assert OrderSegmenter(broken, 365, 0.0, (1.0, 2.0, 3.0)).segments(users) == {"o1": UNKNOWN}


@pytest.mark.parametrize("weights, problem", [
    ({"low": 1.0}, "unknown"),
    ({"low": -1.0, UNKNOWN: 0.1}, "non-negative"),
    ({"low": True, UNKNOWN: 0.1}, "non-negative"),
])
def test_bad_segment_weights_are_refused(weights, problem):
    with pytest.raises(ValueError, match=problem):
        SegmentWeights(weights)


def test_every_segment_of_the_model_needs_a_weight():
    with pytest.raises(ValueError, match="top"):
        SegmentWeights({"low": 1.0, "mid": 1.0, "high": 1.0, UNKNOWN: 0.1}).check_names(
            segmenter().names)


def test_a_days_spend_is_shared_by_credit_times_segment_weight():
    credits = pd.DataFrame([
        ("last_click", "o1", 0, "search", "gs", "new", 1.0, 100.0),
        ("last_click", "o2", 0, "search", "gs", "new", 1.0, 50.0),
        ("last_click", "o3", 0, "search", "gs", "unknown", 1.0, 10.0)],
        columns=["model", "order_id", "touch_index", "channel", "campaign", "stage",
                 "credit", "revenue"])
    spend = pd.DataFrame([("google", "a", "gs", 90.0)],
                         columns=["platform", "account", "campaign", "amount"])
    compute = pd.DataFrame(columns=["order_id", "cost"])
    weights = SegmentWeights({"low": 0.25, "top": 1.0, UNKNOWN: 0.25})
    segments = {"o1": "top", "o2": "low"}  # o3: none
    result = day_roi(credits, spend, compute, ["last_click"], StageWeights(),
                     segment_weights=weights, segments=segments)
    shares = result.orders.set_index("order_id").ad_spend
    assert shares.to_dict() == pytest.approx({"o1": 60.0, "o2": 15.0, "o3": 15.0})
    assert shares.sum() == pytest.approx(90.0)
    by_stage = day_roi(credits, spend, compute, ["last_click"], StageWeights())
    assert by_stage.orders.set_index("order_id").ad_spend.to_dict() == pytest.approx(
        {"o1": 90.0 * 0.6 / 1.4, "o2": 90.0 * 0.6 / 1.4, "o3": 90.0 * 0.2 / 1.4})
    assert list(allocation_weight(credits, StageWeights().as_mapping())) == [0.6, 0.6, 0.2]
