"""Orders from the orders table's change stream through the Flink jobs, on 4 partitions of
spans and 4 of changes, unkeyed, at parallelism 2, a busy loop per core beside the job:
Debezium change events (op c, u, d) as a PostgreSQL connector writes them. An order placed
in the table alone is credited as one from a span; an order on both paths counts once (no
duplicate dead letter), with the table's revenue; a changed amount, a refund and a delete
write the order's conversion and every model's credits again with the revenue it has now;
the experiments job's and the ROI job's revenue follow, and `seedance verify`'s ties hold in
the warehouse."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipelines.flink.attribution.job import run_job
from pipelines.flink.experiments.job import run_experiments_job
from pipelines.flink.roi.job import run_roi_job
from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, producer
from pipelines.sources.generator import ExperimentPlan, Plan, plan_events
from pipelines.store.loading import TopicLoader
from pipelines.store.verify import internal_ties
from pipelines.store.warehouse import Warehouse
from tests.job_io import conversion_rows, credit_rows, messages
from tests.reference import reference_credits
from tests.roi_inputs import cpu_hog
from tests.spans import encoded, plain, stamp_of
from udfs.reconcile.conservation import OK

MAPPING = """\
format: debezium
table: shop.orders
columns: {order_id: id, user_id: customer_id, revenue: total_cents, status: status,
          ts: created_at}
revenue_scale: 0.01
"""
MODELS = ("last_click", "linear", "shapley")


def change(op: str, order: Any, cents: int, status: str = "paid",
           before: tuple[int, str] | None = None) -> bytes:
    """A Debezium change event of shop.orders (timestamptz as ISO 8601, as the connector
    sends it), with the schema wrapper on."""
    def row(amount: int, state: str) -> dict[str, Any]:
        return {"id": order.order_id, "customer_id": order.user_id,
                "total_cents": amount, "status": state,
                "created_at": _iso(order.ts_ns // 1_000_000)}
    after = None if op == "d" else row(cents, status)
    old = row(*before) if before else (row(cents, status) if op == "d" else None)
    return orjson.dumps({"schema": {"type": "struct"}, "payload": {
        "op": op, "before": old, "after": after,
        "source": {"schema": "shop", "table": "orders", "ts_ms": 0}}})


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def test_refunds_and_changed_amounts_correct_credits_conversions_and_roi(
        kafka, flink, job_config, topic, tmp_path: Path) -> None:
    plan = plan_events(80, seed=17, late_fraction=0.0, malformed_messages=0,
                       experiments=(ExperimentPlan("checkout", ("control", "short")),))
    orders = sorted((e for e in plan.events if e.kind == "conversion"),
                    key=lambda e: e.ts_ns)
    table_only, both, both_other, refunded, corrected, deleted = (
        orders[2], orders[4], orders[6], orders[9], orders[12], orders[15])
    cents = {e.order_id: round(e.revenue * 100) for e in orders}
    cents[both_other.order_id] = round(both_other.revenue * 90)  # the table says less
    net = dict(cents)
    net[refunded.order_id] = 0
    net[corrected.order_id] = cents[corrected.order_id] // 2
    net[deleted.order_id] = 0

    spans = topic("spans", 4)
    raw = producer(kafka)
    by_span = Plan([e for e in plan.events if e is not table_only], plan.malformed)
    for i, value in enumerate(encoded(by_span, batch_size=4)):
        raw.send(spans, plain(value), partition=i % 4, timestamp_ms=stamp_of(value))
    changes = topic("order-changes", 4, SAMPLE_SPANS_TOPIC)  # kept, stamped as written
    events: list[tuple[bytes, int]] = []
    for order in (table_only, both, both_other):
        events.append((change("c", order, cents[order.order_id]),
                       order.ts_ns // 1_000_000 + 1_000))
    later = max(e.ts_ns for e in plan.events) // 1_000_000
    events += [
        (change("u", refunded, cents[refunded.order_id], "refunded",
                (cents[refunded.order_id], "paid")), later),
        (change("u", corrected, net[corrected.order_id], "paid",
                (cents[corrected.order_id], "paid")), later),
        (change("d", deleted, cents[deleted.order_id]), later),
        (None, later),  # the tombstone after the delete: nothing
        (b"{not json", later),
    ]
    for i, (value, at) in enumerate(events):
        # the orders placed spread over the partitions, the later changes in one
        raw.send(changes, value, key=b'{"id": 0}', partition=i % 4 if i < 3 else 0,
                 timestamp_ms=at)
    raw.flush()
    raw.close()
    mapping = tmp_path / "orders.yaml"
    mapping.write_text(MAPPING)

    config = (job_config.replace("topics", spans=spans)
              .replace("flink", parallelism=2)
              .replace("attribution", models=MODELS)
              .replace("order_changes", topic=changes, mapping=str(mapping)))
    with cpu_hog():  # a busy loop per core beside the job
        run_job(config, kafka, env=flink.environment(config))

    revenue = {order: amount / 100 for order, amount in net.items()}
    expected = {(c.model, c.order_id, c.touch_index, c.channel): c.credit * revenue[c.order_id]
                for c in reference_credits(plan, MODELS, config.attribution.refit_every_s)}
    rows = credit_rows(kafka, config.topics.credits)
    got = {(r["model"], r["order_id"], r["touch_index"], r["channel"]): r["revenue"]
           for r in rows}
    assert len(got) == len(rows) and got.keys() == expected.keys()
    changed = [k for k, v in expected.items() if not math.isclose(got[k], v, abs_tol=1e-9)]
    assert not changed, changed[:5]
    conversions = {r["order_id"]: r["revenue"] for r in conversion_rows(
        kafka, config.topics.conversions)}
    assert conversions == {order: revenue[order] for order in conversions}
    assert conversions[refunded.order_id] == 0.0 and table_only.order_id in conversions
    dead = messages(kafka, config.topics.dead_letter)
    assert [d["reason"] for d in dead] == ["malformed_order_change"]
    assert dead[0]["source"] == changes

    # the experiments job reads the conversions: its rows carry the revenue net of refunds
    run_experiments_job(config, kafka, env=flink.environment(config))
    experiment_revenue = {}
    for row in messages(kafka, config.topics.experiment_conversions):
        experiment_revenue[row["order_id"]] = row["revenue"]  # the latest version
    assert experiment_revenue[refunded.order_id] == 0.0
    assert experiment_revenue[corrected.order_id] == revenue[corrected.order_id]

    run_roi_job(config, kafka, env=flink.environment(config))
    with Warehouse(f"sqlite:///{tmp_path / 'wh.db'}") as warehouse:
        loader = TopicLoader(warehouse)
        loader.load_credits(kafka, config.topics.credits)
        loader.load_conversions(kafka, config.topics.conversions)
        loader.load_roi(kafka, config.topics.roi)
        ties = internal_ties(warehouse, "USD")
        assert ties and all(t.status == OK for t in ties), [t for t in ties if t.status != OK]
        # each model's credited revenue is the orders' net of refunds, day by day
        order_ties = [t for t in ties if t.key.metric == "order_revenue"]
        assert {t.key.entity for t in order_ties} == {f"{m}/orders" for m in MODELS}
        assert sum(t.theirs or 0.0 for t in order_ties) == pytest.approx(
            len(MODELS) * sum(revenue.values()))
        roi_revenue = dict(warehouse.query(
            "SELECT model, SUM(revenue) FROM roi_daily WHERE dimension = 'channel' "
            "GROUP BY model"))
    total = sum(revenue.values())
    assert {m: round(v, 6) for m, v in roi_revenue.items()} == {
        m: round(total, 6) for m in MODELS}
