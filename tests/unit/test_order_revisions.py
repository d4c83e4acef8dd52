"""Orders from the orders table's change stream through the attribution job's operators
(decode-order-changes -> duplicate check -> journeys -> data-driven crediting, driven as
Flink drives them: tests/unit/test_attribution_operators.py's Job): an order placed in
the table alone is credited as one from a span, an order on both paths counts once (the
table's revenue wins), and a changed amount, a refund, a cancellation or a delete writes
the order's conversion and every model's credits again with the revenue it has now,
whether it comes before or after the order was credited."""

from __future__ import annotations

import json
import pickle
from typing import Any

import orjson
import pytest

from pipelines.codec import table_messages
from pipelines.codec.frame import frame, newest_start_ms
from pipelines.flink.attribution.order_changes import DecodeOrderChanges
from pipelines.flink.attribution.support import ACCOUNTING, DEAD_LETTERS, ORDERS
from pipelines.sources.generator import Plan, emit, plan_events
from pipelines.sources.kafka_exporter import CollectingProducer, KafkaSpanExporter
from schemas.records import Conversion, Touchpoint
from tests.flink_fakes import FakeContext, Timers
from tests.operator_job import (
    BUCKETS,
    DATA_DRIVEN,
    PER_CONVERSION,
    REFIT_MS,
    Job,
    finish,
)
from tests.reference import reference_credits
from tests.spans import stamped
from udfs.attribution import per_conversion_credit_rows
from udfs.journeys import closed_journeys_of
from udfs.journeys.rules import ConvertedJourney, JourneyConfig
from udfs.orders import (
    A_REVISION,
    AN_ORDER,
    OLD_ROW,
    TOO_OLD,
    packed_credits,
    revised_credits,
    route,
    unpacked_credits,
)
from udfs.periods import DAY_MS

MAPPING = """\
format: debezium
table: shop.orders
columns: {order_id: id, user_id: customer_id, revenue: total, status: status, ts: created_at}
"""
WINDOW_MS = 40 * DAY_MS


def change(op: str, order: Any, total: float, status: str = "paid",
           before: tuple[float, str] | None = None) -> bytes:
    """A Debezium change event of the orders table for a planned conversion."""
    def row(amount: float, state: str) -> dict[str, Any]:
        return {"id": order.order_id, "customer_id": order.user_id, "total": amount,
                "status": state, "created_at": order.ts_ns // 1_000_000}
    after = None if op == "d" else row(total, status)
    old = row(*before) if before else (row(total, status) if op == "d" else None)
    return orjson.dumps({"op": op, "before": old, "after": after,
                         "source": {"schema": "shop", "table": "orders",
                                    "ts_ms": order.ts_ns // 1_000_000}})


class ChangeJob(Job):
    """The Job with the change stream's decoder beside the spans' (its own partitions)."""

    def __init__(self) -> None:
        super().__init__(revisions_ms=WINDOW_MS)
        self.changes = DecodeOrderChanges((MAPPING, "orders.yaml"), "shop.shop.orders",
                                          BUCKETS, self.attribute.journey.correction_ms,
                                          WINDOW_MS)
        self.changes.open(None)
        self.change_offset = 0
        self.change_dead: list[dict[str, Any]] = []

    def feed_change(self, value: bytes, arrival_ms: int) -> None:
        framed = frame(value, 0, self.change_offset, arrival_ms, arrival_ms)
        self.change_offset += 1
        for out in self.changes.process_element(framed, FakeContext(self.timers)):
            if out[0] is DEAD_LETTERS:
                self.change_dead.append(json.loads(out[1]))
            elif out[0] is ACCOUNTING:
                self.counts = [a + b for a, b in zip(self.counts, out[1], strict=True)]
            elif out[0] is ORDERS:
                self._collect_dedup(self.deduping.process(out[1], key=out[1][0]))
            else:
                self._collect(self.attributing.process(out, key=out[0]))

    def conversions_revenue(self) -> dict[str, float]:
        """Each order's revenue on the conversions topic: its last version."""
        revenue: dict[str, float] = {}
        for message in self.conversion_messages:
            for row in table_messages.decode(message):
                revenue[row["order_id"]] = row["revenue"]
        return revenue


def spans_of(plan: Plan) -> list[bytes]:
    sink = CollectingProducer()
    emit(plan, KafkaSpanExporter("unused:0", producer=sink), sink.append, batch_size=16)
    return stamped(sink)


@pytest.fixture(scope="module")
def plan() -> Plan:
    return plan_events(200, seed=5)


def converted(plan: Plan) -> list[Any]:
    late = {id(e) for e in plan.events if e.emit_rank > 1e30}
    return sorted((e for e in plan.events if e.kind == "conversion" and id(e) not in late),
                  key=lambda e: e.ts_ns)


@pytest.mark.parametrize("refund_first", [False, True])
def test_changes_through_the_table_correct_every_model_credit_and_the_conversions(
        plan: Plan, refund_first: bool) -> None:
    orders = converted(plan)
    table_only, both_same, both_other, refunded, corrected, deleted = (
        orders[3], orders[5], orders[8], orders[11], orders[14], orders[17])
    revenue = {e.order_id: e.revenue for e in orders}
    revenue[both_other.order_id] = round(both_other.revenue * 0.9, 2)  # the table's say
    revenue[refunded.order_id] = 0.0
    revenue[corrected.order_id] = round(corrected.revenue * 0.5, 2)
    revenue[deleted.order_id] = 0.0
    by_span = Plan([e for e in plan.events if e is not table_only], plan.malformed)
    job = ChangeJob()
    placed = {o.order_id: False for o in (table_only, both_same, both_other)}
    day_ms = DAY_MS

    def placed_by_table(order: Any) -> None:
        ts_ms = order.ts_ns // 1_000_000
        amount = revenue[order.order_id] if order is both_other else order.revenue
        job.feed_change(change("c", order, amount), ts_ms + 1_000)
        if refund_first and order is table_only:  # refunded before it is even credited
            job.feed_change(change("u", order, order.revenue, "refunded",
                                   (order.revenue, "paid")), ts_ms + 2_000)

    for message in spans_of(by_span):
        newest = newest_start_ms(message, 2**62)
        for order in (table_only, both_same, both_other):
            if not placed[order.order_id] and order.ts_ns // 1_000_000 <= newest:
                placed[order.order_id] = True
                placed_by_table(order)
        job.feed_group([message])
    assert all(placed.values())
    later = max(e.ts_ns for e in plan.events) // 1_000_000
    job.feed_change(change("u", refunded, refunded.revenue, "refunded",
                           (refunded.revenue, "paid")), later)
    job.feed_change(change("u", corrected, revenue[corrected.order_id], "paid",
                           (corrected.revenue, "paid")), later)
    job.feed_change(change("d", deleted, deleted.revenue), later)
    if refund_first:
        revenue[table_only.order_id] = 0.0
    job.feed_change(b"{not json", later)  # a dead letter, with the reason
    job.feed_change(change("u", orders[0], 1.0, "paid", (orders[0].revenue, "paid")),
                    orders[0].ts_ns // 1_000_000 + WINDOW_MS + day_ms)  # too old
    finish(job)

    expected = {(c.model, c.order_id, c.touch_index, c.channel):
                c.credit * revenue[c.order_id] for c in reference_credits(
                    plan, PER_CONVERSION + DATA_DRIVEN, REFIT_MS / 1000,
                    correction_ms=job.attribute.journey.correction_ms)}
    got = {(c["model"], c["order_id"], c["touch_index"], c["channel"]): c["revenue"]
           for c in job.credits}
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key
    assert {o: r for o, r in job.conversions_revenue().items()} == pytest.approx(
        {o: revenue[o] for o in job.conversions_revenue()})
    assert job.conversions_revenue()[refunded.order_id] == 0.0
    assert not job.duplicates  # an order on both paths is no duplicate: counted once
    assert [letter["reason"] for letter in job.change_dead] == [
        "malformed_order_change", "order_change_too_old"]


def test_an_orders_rows_are_kept_packed_and_come_back_with_any_revenue() -> None:
    """What the operators keep of a credited order (udfs.orders.packed_credits) gives back
    its rows, each with its share of the revenue the order has now."""
    events = [Touchpoint("u", 1_000 * i, channel, f"{channel}-c", "t", "s")
              for i, channel in enumerate(("email", "paid_search", "email", "display"))]
    events.append(Conversion("u", 10_000, "o1", 80.0, "EUR", "t", "s"))
    (journey,) = [j for j in closed_journeys_of(events, JourneyConfig())
                  if isinstance(j, ConvertedJourney)]
    rows = per_conversion_credit_rows([journey], PER_CONVERSION)
    assert len(rows) > len(PER_CONVERSION)
    packed = packed_credits(rows)
    for revenue in (80.0, 20.0, 0.0):
        assert unpacked_credits(packed, revenue) == revised_credits(rows, revenue)


def test_a_group_of_changes_crosses_as_one_record_per_bucket(plan: Plan) -> None:
    """The source groups change records for one call: a group sends one batch of orders
    and one of revisions per user bucket, one list of copies per order bucket and one
    accounting record, and what they carry is what the records say one at a time."""
    from pipelines.codec.frame import group_frames
    from pipelines.flink.attribution.support import REVISED

    orders = converted(plan)[:40]
    decoder = DecodeOrderChanges((MAPPING, "orders.yaml"), "t", BUCKETS, DAY_MS, WINDOW_MS)
    decoder.open(None)
    placed = [frame(change("c", o, o.revenue), 0, i, o.ts_ns // 1_000_000 + 1000,
                    o.ts_ns // 1_000_000) for i, o in enumerate(orders)]
    refunds = [frame(change("u", o, o.revenue, "refunded", (o.revenue, "paid")), 1, i,
                     o.ts_ns // 1_000_000 + DAY_MS * 3, 0) for i, o in enumerate(orders)]
    group = list(decoder.process_element(group_frames(placed + refunds),
                                         FakeContext(Timers())))
    batches = [out for out in group if isinstance(out[0], int) and out[1] != REVISED]
    revised = [out for out in group if isinstance(out[0], int) and out[1] == REVISED]
    copies = [out[1] for out in group if out[0] is ORDERS]
    (counts,) = [out[1] for out in group if out[0] is ACCOUNTING]
    assert len(batches) == len(revised) == BUCKETS  # not one per record
    assert len(copies) <= BUCKETS
    assert sorted(r[0] for _, _, payload in revised for r in pickle.loads(payload)) == \
        sorted(o.order_id for o in orders)
    assert sorted(row[2] for _, _, rows in copies for row in rows) == \
        sorted(o.order_id for o in orders)
    assert counts[:3] == (80, 80, 80)  # messages, records in, used


@pytest.mark.parametrize("kind,late_by,way", [
    ("order", 1_000, AN_ORDER), ("order", 2 * DAY_MS, A_REVISION),
    ("order", 41 * DAY_MS, OLD_ROW), ("refund", 1_000, A_REVISION),
    ("refund", 39 * DAY_MS, A_REVISION), ("delete", 41 * DAY_MS, TOO_OLD),
])
def test_a_change_is_routed_by_when_it_arrived(kind, late_by, way) -> None:
    assert route(kind, 10**12, 10**12 + late_by, DAY_MS, WINDOW_MS) == way
    assert route(kind, 10**12, 0, DAY_MS, WINDOW_MS) in (AN_ORDER, A_REVISION)  # unknown
