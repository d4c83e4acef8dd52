"""The attribution job's duplicate check: an order counts once, whatever user sent it.

Keyed by the bucket of the order id (the decoder routes orders there: copies of one order
from users in different user buckets meet here). Orders wait for the watermark, as they
would in their journey book anyway; when it passes them, the copies due together are
admitted earliest first (udfs.order_ledger.OrderLedger.admit_earliest: event time, then
user and span), so which copy is credited does not depend on the partitions' timing. The
first copies go on to their user's bucket (the journeys operator), every other copy is a
dead letter with reason duplicate_order. The ids are remembered for the duplicate horizon
(`journey.duplicate_order_days`, default the lookback).

An order already behind the watermark when it comes (its partition was idle, its reader
behind) cannot wait: it is checked against the ids seen and passed on at once (its journey
book takes it as late).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor

from pipelines.codec.dead_letters import dead_letter_json
from pipelines.flink.operator_support import (
    DUPLICATE_ORDERS,
    Batch,
    collect_garbage_rarely,
    put_all,
)
from schemas.events import EMPTY, EventColumns, OrderColumns, concat, newest, pack, take, unpack
from schemas.records import DeadLetter
from udfs.journey_book import bucket_of
from udfs.order_ledger import OrderLedger


class DedupOrders(KeyedProcessFunction):  # type: ignore[misc]
    """Per bucket of order ids: the orders waiting for the watermark (list state, packed
    batches) and the ids of the horizon (map state, id -> first copy's event time)."""

    def __init__(self, buckets: int, horizon_ms: int, process_mode: bool,
                 source: str = "") -> None:
        self.buckets = buckets  # the user buckets the first copies go on to
        self.horizon_ms = horizon_ms
        self.process_mode = process_mode
        self.source = source

    def open(self, runtime_context: RuntimeContext) -> None:
        collect_garbage_rarely()
        self.waiting = runtime_context.get_list_state(
            ListStateDescriptor("orders-waiting", Types.PICKLED_BYTE_ARRAY()))
        self.seen = runtime_context.get_map_state(
            MapStateDescriptor("orders-seen", Types.STRING(), Types.LONG()))
        self.ledgers: dict[int, OrderLedger] = {}

    def _ledger(self, key: int) -> OrderLedger:
        ledger = self.ledgers.get(key)
        if ledger is None:  # first sight of this key since (re)start: from its state
            ledger = OrderLedger(self.horizon_ms, self.seen.items())
            self.ledgers[key] = ledger
        return ledger

    def process_element(self, value: Batch, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        key, _, payload = value
        orders = unpack(payload).orders
        timers = ctx.timer_service()
        behind = orders.ts_ms <= timers.current_watermark()
        if behind.any():
            yield from self._admit(key, take(orders, behind))
            orders = take(orders, ~behind)
        if len(orders.ts_ms):
            self.waiting.add(pack(EventColumns(EMPTY.touches, orders)))
            for ts in set(orders.ts_ms.tolist()):
                timers.register_event_time_timer(ts)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        key = ctx.get_current_key()
        watermark = max(timestamp, ctx.timer_service().current_watermark())
        waiting = [unpack(batch).orders for batch in self.waiting.get() or []]
        if waiting:
            orders = concat(waiting)
            due = orders.ts_ms <= watermark
            if due.any():
                yield from self._admit(key, take(orders, due))
                rest = take(orders, ~due)
                self.waiting.update([pack(EventColumns(EMPTY.touches, rest))]
                                    if len(rest.ts_ms) else [])
        ledger = self._ledger(key)
        for order_id in ledger.expire(watermark):
            self.seen.remove(order_id)

    def _admit(self, key: int, orders: OrderColumns) -> Iterator[Any]:
        keep, added = self._ledger(key).admit_earliest(orders.order_id, orders.ts_ms,
                                                       orders.user_id, orders.span_id)
        if added:
            put_all(self.seen, added, self.process_mode)
        for at in np.flatnonzero(~keep).tolist():
            record = {name: getattr(orders, name)[at] for name in OrderColumns._fields}
            record["ts_ms"] = int(record["ts_ms"])
            record["revenue"] = float(record["revenue"])
            yield DUPLICATE_ORDERS, dead_letter_json(DeadLetter(
                "duplicate_order", f"order {record['order_id']} was seen before (within "
                f"{self.horizon_ms / 86_400_000:g} days of event time): credited once",
                orjson.dumps(record)), self.source)
        first = take(orders, keep)
        users = np.fromiter((bucket_of(user, self.buckets) for user in first.user_id.tolist()),
                            np.int64, len(first.ts_ms))
        for bucket in sorted(set(users.tolist())):
            events = EventColumns(EMPTY.touches, take(first, users == bucket))
            yield bucket, newest(events), pack(events)
