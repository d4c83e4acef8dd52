"""A sample plan's orders as the shop's orders table would record them: the Debezium change
events of a PostgreSQL `shop.orders` table (jobs/config/order_changes.yaml is its mapping),
an insert per order and, for some orders, a refund days later -- whole (status
`refunded`) or in part (`refunded_cents`). `seedance generate --orders`, the demo.

Each event is stamped with when the connector would have written it (its commit time, a
second after the order; a refund's), so that a job reads the table's history as it
happened."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, ensure_topics, producer
from pipelines.sources.generator import PlannedEvent
from udfs.periods import DAY_MS

COMMIT_LAG_MS = 1_000  # an order's row is committed this long after its span started
REFUND_AFTER_DAYS = (1.0, 14.0)  # a refund comes this long after its order
PARTIAL_SHARE = 0.4  # of the refunds, this many return part of the order (a half)


@dataclass(frozen=True)
class Refund:
    order_id: str
    refunded: float  # the amount returned, in currency units
    at_ms: int  # when


@dataclass(frozen=True)
class TableChanges:
    """The change events in the order the table made them, each (value, commit time ms),
    and the refunds among them."""

    events: list[tuple[bytes, int]]
    refunds: list[Refund]

    def net_revenue(self, orders: Iterable[PlannedEvent]) -> dict[str, float]:
        """Each order's revenue net of its refunds."""
        refunded = {refund.order_id: refund.refunded for refund in self.refunds}
        return {order.order_id: round(order.revenue - refunded.get(order.order_id, 0.0), 2)
                for order in orders}


def table_changes(orders: Iterable[PlannedEvent], refund_fraction: float,
                  seed: int) -> TableChanges:
    """An insert per order and a refund for about `refund_fraction` of them."""
    rng = random.Random(seed * 7919 + 13)
    changes: list[tuple[int, bytes]] = []
    refunds: list[Refund] = []
    for order in orders:
        placed_ms = order.ts_ns // 1_000_000
        cents = round(order.revenue * 100)
        row = _row(order, cents, 0, "paid")
        changes.append((placed_ms + COMMIT_LAG_MS, _event("c", None, row,
                                                          placed_ms + COMMIT_LAG_MS)))
        if rng.random() >= refund_fraction:
            continue
        at_ms = placed_ms + int(rng.uniform(*REFUND_AFTER_DAYS) * DAY_MS)
        whole = rng.random() >= PARTIAL_SHARE
        back = cents if whole else cents // 2
        after = _row(order, cents, back, "refunded" if whole else "partially_refunded")
        changes.append((at_ms, _event("u", row, after, at_ms)))
        refunds.append(Refund(order.order_id, back / 100, at_ms))
    changes.sort(key=lambda change: change[0])
    return TableChanges([(value, at) for at, value in changes], refunds)


def publish_table_changes(changes: TableChanges, bootstrap: str, topic: str,
                          client: dict[str, Any] | None = None) -> int:
    """The events to `topic` (created to keep their stamps, as the spans' sample topic),
    keyed by the row as the connector keys them; how many."""
    ensure_topics(bootstrap, [topic], client=client, config=SAMPLE_SPANS_TOPIC)
    raw = producer(bootstrap, **(client or {}))
    try:
        for value, at_ms in changes.events:
            key = orjson.dumps({"id": orjson.loads(value)["after"]["id"]})
            raw.send(topic, value, key=key, timestamp_ms=at_ms)
        raw.flush()
    finally:
        raw.close()
    return len(changes.events)


def _row(order: PlannedEvent, cents: int, refunded: int, status: str) -> dict[str, Any]:
    placed = datetime.fromtimestamp(order.ts_ns / 1e9, UTC)
    return {"id": order.order_id, "customer_id": order.user_id, "total_cents": cents,
            "refunded_cents": refunded, "currency": order.currency, "status": status,
            "created_at": placed.isoformat(timespec="milliseconds").replace("+00:00", "Z")}


def _event(op: str, before: dict[str, Any] | None, after: dict[str, Any],
           at_ms: int) -> bytes:
    return orjson.dumps({"op": op, "before": before, "after": after, "ts_ms": at_ms,
                         "source": {"connector": "postgresql", "db": "shop",
                                    "schema": "shop", "table": "orders", "ts_ms": at_ms}})
