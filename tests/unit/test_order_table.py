"""The sample's orders table (pipelines/sources/order_table.py), read back by the shipped
mapping (jobs/config/order_changes.yaml) as the job reads it: every order placed with its
revenue, each refund the order's net revenue, in the order the table made them."""

from __future__ import annotations

import pytest

from pipelines.settings.paths import PROJECT_ROOT
from pipelines.sources.generator import plan_events
from pipelines.sources.order_table import table_changes
from udfs.orders import CORRECTED, PLACED, REFUNDED, decode_order_change, load_order_mapping

MAPPING = load_order_mapping(PROJECT_ROOT / "jobs" / "config" / "order_changes.yaml")


def test_the_table_says_what_each_order_earned_net_of_its_refunds() -> None:
    orders = [e for e in plan_events(400, seed=3).events if e.kind == "conversion"]
    changes = table_changes(orders, 0.2, seed=3)
    decoded = [decode_order_change(value, MAPPING) for value, _ in changes.events]
    placed = {c.order_id: c for c in decoded if c.kind == PLACED}
    assert placed.keys() == {o.order_id for o in orders}
    assert all(placed[o.order_id].revenue == pytest.approx(o.revenue) and
               placed[o.order_id].user_id == o.user_id for o in orders)
    refunds = [c for c in decoded if c.kind in (REFUNDED, CORRECTED)]
    assert len(refunds) == len(changes.refunds) > 0.1 * len(orders)
    assert {c.kind for c in refunds} == {REFUNDED, CORRECTED}  # whole and half
    net = changes.net_revenue(orders)
    assert {c.order_id: c.revenue for c in refunds} == pytest.approx(
        {c.order_id: net[c.order_id] for c in refunds})
    assert [at for _, at in changes.events] == sorted(at for _, at in changes.events)
    assert all(placed[c.order_id].ts_ms < c.changed_ms for c in refunds)
    assert table_changes(orders, 0.2, seed=3) == changes  # the same seed, the same table
