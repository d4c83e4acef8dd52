"""The attribution job's duplicate check: an order counts once, whatever user sent it.

Every order goes to its journey (in its user bucket's batch) and, as a row, here: keyed by
the bucket of its order id, so copies of one order from users in different buckets meet.
The rows wait for the watermark (their journeys wait for it too); when it passes them,
the copies due together are admitted earliest first (udfs.journeys.order_ledger.OrderLedger.
admit: event time, then user and span), so which copy counts does not depend on
the partitions' timing. Every other copy is a dead letter with reason duplicate_order and
is withdrawn from its journey: a WITHDRAWN record to its user bucket, which reaches the
journeys before the watermark that would step the copy does (it is emitted before this
operator passes that watermark on). The ids are remembered for the duplicate horizon
(`journey.duplicate_order_days`, default the lookback).

Only rejected copies travel on, so the common case costs one small record per message and
order bucket. An order already behind the watermark when it comes (its partition was idle)
is decided at once. An order the decoder held (it was behind the decoder's watermark: it
will correct its journey, udfs/journeys/corrections.py) reaches its journey only from here,
once admitted (an ADMITTED record to its user bucket); a held copy turned down is only
dead-lettered (its journey never had it).

Orders from the orders table's change stream (order_changes.py) come as copies too
(flagged CHANGE_COPY, with their commit time): an order on both paths counts once. Of
copies due together a span's counts first (it carries the order's trace, which brings
its compute cost); a copy from the table that does not count is no duplicate but the
table's word on the order's revenue: withdrawn quietly, it goes to the order's bucket as
a revision (revisions.py). A span copy of an order the table brought first is withdrawn
quietly too (map "orders-from-changes").
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import orjson
from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor

from pipelines.codec.dead_letters import dead_letter_json
from pipelines.flink.attribution.support import (
    ADMITTED,
    DUPLICATE_ORDERS,
    PICKLE_PROTOCOL,
    REVISED,
    WITHDRAWN,
    collect_garbage_rarely,
    put_all,
)
from schemas.records import Conversion, DeadLetter
from udfs.journeys import OrderLedger, bucket_of
from udfs.orders import PLACED, OrderRevision
from udfs.periods import DAY_MS

# (order bucket, held: 1 or 0, rows: Conversion's fields, then the record's partition and
# offset)
OrderRows = tuple[int, int, list[tuple]]
FIELDS = len(Conversion._fields)
HELD = FIELDS + 2  # a waiting row's place for its held flag (absent in rows stored before)
CHANGED_AT = HELD + 1  # ... and a change copy's commit time (only change copies have one)
HELD_COPY, CHANGE_COPY = 1, 2  # the flags of an ORDERS message (change copies: rows
# with their commit time after partition and offset)


class DedupOrders(KeyedProcessFunction):  # type: ignore[misc]
    """Per bucket of order ids: the order rows waiting for the watermark (a list of the
    records' rows) and the ids of the horizon (map state, id -> first copy's event
    time)."""

    def __init__(self, buckets: int, horizon_ms: int, process_mode: bool,
                 source: str = "") -> None:
        self.buckets = buckets  # the user buckets withdrawals go to
        self.horizon_ms = horizon_ms
        self.process_mode = process_mode
        self.source = source

    def open(self, runtime_context: RuntimeContext) -> None:
        collect_garbage_rarely()
        # appended to per record, read whole only when the watermark passes some (a list
        # rewritten per record would cost in proportion to what waits: much in a catch-up)
        self.waiting = runtime_context.get_list_state(
            ListStateDescriptor("orders-waiting", Types.PICKLED_BYTE_ARRAY()))
        self.seen = runtime_context.get_map_state(
            MapStateDescriptor("orders-seen", Types.STRING(), Types.LONG()))
        # the ids of the horizon whose counting copy came from the orders table
        self.from_changes = runtime_context.get_map_state(
            MapStateDescriptor("orders-from-changes", Types.STRING(), Types.LONG()))
        self.ledgers: dict[int, OrderLedger] = {}
        self.timers: dict[int, int] = {}  # key -> the timer last registered

    def _ledger(self, key: int) -> OrderLedger:
        ledger = self.ledgers.get(key)
        if ledger is None:  # first sight of this key since (re)start: from its state
            ledger = OrderLedger(self.horizon_ms, self.seen.items())
            self.ledgers[key] = ledger
        return ledger

    def process_element(self, value: OrderRows,
                        ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        key, flags, rows = value
        if flags & CHANGE_COPY:
            rows = [(*row[:HELD], bool(flags & HELD_COPY), row[HELD]) for row in rows]
        elif flags:
            rows = [(*row, True) for row in rows]
        timers = ctx.timer_service()
        watermark = timers.current_watermark()
        behind = [row for row in rows if row[1] <= watermark]
        if behind:
            yield from self._decide(key, behind)
        ahead = [row for row in rows if row[1] > watermark]
        if ahead:
            self.waiting.add(ahead)
            due = min(row[1] for row in ahead)
            pending = self.timers.get(key)
            if pending is None or due < pending:
                timers.register_event_time_timer(due)
                self.timers[key] = due

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        key = ctx.get_current_key()
        timers = ctx.timer_service()
        watermark = max(timestamp, timers.current_watermark())
        if self.timers.get(key, watermark) <= watermark:
            self.timers.pop(key, None)
        waiting = [row for rows in self.waiting.get() or [] for row in rows]
        due = [row for row in waiting if row[1] <= watermark]
        if due:
            yield from self._decide(key, due)
            rest = [row for row in waiting if row[1] > watermark]
            self.waiting.update([rest] if rest else [])
            if rest:
                self.timers[key] = min(row[1] for row in rest)
                timers.register_event_time_timer(self.timers[key])
        for order_id in self._ledger(key).expire(watermark):
            self.seen.remove(order_id)
            if self.from_changes.contains(order_id):
                self.from_changes.remove(order_id)

    def _decide(self, key: int, rows: list[tuple]) -> Iterator[Any]:
        """Admit the first copies (earliest first; spans' before the table's), dead-letter
        and withdraw the others."""
        spans = [row for row in rows if len(row) <= CHANGED_AT]
        changes = [row for row in rows if len(row) > CHANGED_AT]
        withdrawn: dict[int, list[tuple]] = {}
        admitted: dict[int, list[tuple]] = {}
        revised: dict[int, list[tuple]] = {}
        if spans:
            yield from self._decide_spans(key, spans, withdrawn, admitted)
        if changes:
            keep, added = self._ledger(key).admit(
                [(row[2], row[1], row[0], row[6]) for row in changes])
            for row, first in zip(changes, keep, strict=True):
                order, bucket = row[:FIELDS], bucket_of(row[0], self.buckets)
                if first:
                    if row[HELD]:
                        admitted.setdefault(bucket, []).append(order)
                    continue
                if not row[HELD]:
                    withdrawn.setdefault(bucket, []).append(order)
                revised.setdefault(bucket, []).append(tuple(OrderRevision(
                    row[2], row[0], row[3], row[1], row[CHANGED_AT], PLACED)))
            if added:
                put_all(self.seen, added, self.process_mode)
                put_all(self.from_changes, added, self.process_mode)
        for bucket, copies in sorted(withdrawn.items()):
            yield bucket, WITHDRAWN, pickle.dumps(copies, PICKLE_PROTOCOL)
        for bucket, orders in sorted(admitted.items()):
            yield bucket, ADMITTED, pickle.dumps(orders, PICKLE_PROTOCOL)
        for bucket, revisions in sorted(revised.items()):
            yield bucket, REVISED, pickle.dumps(revisions, PICKLE_PROTOCOL)

    def _decide_spans(self, key: int, rows: list[tuple], withdrawn: dict[int, list[tuple]],
                      admitted: dict[int, list[tuple]]) -> Iterator[Any]:
        keep, added = self._ledger(key).admit(
            [(row[2], row[1], row[0], row[6]) for row in rows])  # id, time, user, span
        for row, first in zip(rows, keep, strict=True):
            order, (partition, offset) = row[:FIELDS], row[FIELDS:HELD]
            held = len(row) > HELD and row[HELD]
            if first:
                if held:
                    admitted.setdefault(bucket_of(row[0], self.buckets), []).append(order)
                continue
            if not held:
                withdrawn.setdefault(bucket_of(row[0], self.buckets), []).append(order)
            if self.from_changes.contains(row[2]):
                continue  # the order's table counted it first: on both paths, counted once
            yield DUPLICATE_ORDERS, dead_letter_json(DeadLetter(
                "duplicate_order", f"order {row[2]} was seen before (within "
                f"{self.horizon_ms / DAY_MS:g} days of event time): credited once",
                orjson.dumps(Conversion(*order)._asdict())), self.source, partition, offset)
        if added:
            put_all(self.seen, added, self.process_mode)
