"""`seedance verify` ties the LTV-based return to what it is computed from, on SQLite and
PostgreSQL: per model and dimension, its customers, first-order revenue and acquisition
cost equal the first orders' credit, credited revenue and allocated cost; a changed figure
on either side is a break named by its model, dimension and metric."""

from __future__ import annotations

import pandas as pd
import pytest

from pipelines.ltv.models_topic import ModelMessage
from pipelines.ltv.report import refresh_ltv
from pipelines.store.verify import internal_ties, ltv_ties
from pipelines.store.warehouse import Warehouse
from tests.ltv_warehouse import load, simulated
from udfs.ltv.allocation import SegmentWeights
from udfs.ltv.model import BgNbd, GammaGamma, LtvModel
from udfs.reconcile.conservation import BREACH, OK

MODELS = ("last_click", "linear")
MODEL = LtvModel(BgNbd(r=0.5, alpha=5.0, a=0.8, b=2.4), GammaGamma(p=6.0, q=4.0, v=15.0),
                 period_days=7.0, customers=100.0, fitted_through_day=400.0)
COST = 12.0 + 0.5  # a first order's ad spend and compute in tests/ltv_warehouse.load


def first_orders(orders: pd.DataFrame) -> pd.DataFrame:
    """Each user's first order, found here without the warehouse."""
    new = orders[orders.stage == "new"].sort_values(["user_id", "day", "order_id"])
    return new.drop_duplicates("user_id")


@pytest.mark.parametrize("basis", ["lifecycle_stage", "ltv_segment"])
def test_the_ltv_return_ties_to_the_first_orders_and_breaks_name_their_key(warehouse_url,
                                                                          basis):
    """Whichever basis split the acquisition cost over the keys (the ROI job's
    roi.allocation_weights), the keys add up to the first orders' cost."""
    orders = simulated(150, 4)
    firsts = first_orders(orders)
    segmenter = ModelMessage(MODEL, 365, 0.0, (20.0, 60.0, 200.0)).segmenter() \
        if basis == "ltv_segment" else None
    with Warehouse(warehouse_url) as wh:
        load(wh, orders)
        refresh_ltv(wh, horizon_days=365, rounds=0, progress=lambda _: None,
                    segment_weights=SegmentWeights() if segmenter else None,
                    segmenter=segmenter)
        ties = ltv_ties(wh)
        assert {(c.key.entity, c.key.metric) for c in ties} == {
            (f"{model}/{dimension}", metric) for model in MODELS
            for dimension in ("channel", "campaign")
            for metric in ("ltv_customers", "ltv_first_order_revenue",
                           "ltv_acquisition_cost")}
        assert all(c.status == OK for c in ties), [c for c in ties if c.status != OK]
        theirs = {c.key.metric: c.theirs for c in ties if c.key.entity == "linear/channel"}
        assert theirs["ltv_customers"] == pytest.approx(len(firsts))
        assert theirs["ltv_first_order_revenue"] == pytest.approx(firsts.revenue.sum())
        assert theirs["ltv_acquisition_cost"] == pytest.approx(COST * len(firsts))
        assert {c.key.metric for c in internal_ties(wh, "USD")} >= {"ltv_customers"}

        (key,), = wh.query("SELECT MIN(key) FROM ltv_return WHERE model = 'linear' AND "
                           "dimension = 'campaign'")
        wh.execute("UPDATE ltv_return SET customers = customers + 1 WHERE model = 'linear' "
                   "AND dimension = 'campaign' AND key = ?", [key])
        order = str(firsts.order_id.iloc[0])
        wh.execute("UPDATE order_costs SET compute_cost = compute_cost + 2 WHERE "
                   "model = 'last_click' AND order_id = ?", [order])
        broken = {(c.key.entity, c.key.metric, round(c.ours - c.theirs, 6))
                  for c in ltv_ties(wh) if c.status == BREACH}
        assert broken == {("linear/campaign", "ltv_customers", 1.0),
                          ("last_click/channel", "ltv_acquisition_cost", -2.0),
                          ("last_click/campaign", "ltv_acquisition_cost", -2.0)}

        (as_of,), = wh.query("SELECT MAX(as_of_day) FROM ltv_return")
        assert ltv_ties(wh, last=str(as_of)) and not ltv_ties(wh, first="2099-01-01")
