"""The attribution job's reader of the orders table's change stream (`order_changes.topic`):
each framed record (its Kafka timestamp is its event time: the source's ARRIVAL signal)
-> what it says of an order, by the table's mapping (udfs/orders, the same code as
`seedance inspect --order-changes`), routed by udfs.orders.route:

- an order placed (or a row as it is now) that arrived within the correction horizon of
  its time is an order like one from a span: to its user's journey and, as a change
  copy, to the duplicate check (dedup.py), where an order seen on both paths counts once;
- a changed amount, a refund, a cancellation, a delete -- and a row of an order older
  than the horizon -- is a revision: the revenue the order has now, to the bucket of its
  user (REVISED), where the journeys and the data-driven crediting write the order's rows
  again (revisions.py);
- a change of an order older than `order_changes.window_days` when it arrived is a dead
  letter (order_change_too_old: its rows are no longer kept); an unreadable message is
  one too, with the reason; tombstones, other tables and updates of nothing that counts
  are counted as `other`.

The source groups consecutive records for one Python call (as the spans': a snapshot of
a large table is read in a catch-up), and a call sends one batch per user bucket it has
orders or revisions for, one list per order bucket to the duplicate check, one accounting
record: what crosses to the keyed operators does not grow with the records.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from typing import Any

from pyflink.datastream import ProcessFunction, RuntimeContext

from pipelines.codec.dead_letters import dead_letter_json
from pipelines.codec.frame import Framed, unframe, ungroup
from pipelines.flink.attribution.dedup import CHANGE_COPY, HELD_COPY
from pipelines.flink.attribution.support import (
    ACCOUNTING,
    DEAD_LETTERS,
    ORDERS,
    PICKLE_PROTOCOL,
    REVISED,
    counted,
)
from schemas.events import EMPTY, EventColumns, order_columns, pack
from schemas.records import DeadLetter
from udfs.journeys import bucket_of
from udfs.orders import (
    AN_ORDER,
    IGNORED,
    OLD_ROW,
    TOO_OLD,
    OrderChange,
    OrderChangeError,
    OrderRevision,
    decode_order_change,
    parse_order_mapping,
    route,
)
from udfs.periods import DAY_MS

log = logging.getLogger(__name__)
USED, OTHER, DEAD = (counted(messages=1, records_in=1, used=1),
                     counted(messages=1, records_in=1, other=1),
                     counted(messages=1, records_in=1, dead_lettered=1))


class DecodeOrderChanges(ProcessFunction):  # type: ignore[misc]
    """A group of framed records of the change stream (grouped by the source, as the
    spans) -> per user bucket one batch of the orders placed (to their journeys) and one
    of the revisions, per order bucket one list of copies to the duplicate check, the dead
    letters, and one accounting record for the group."""

    def __init__(self, mapping: tuple[str, str], source: str, buckets: int,
                 correction_ms: int, window_ms: int) -> None:
        self.mapping_text = mapping  # (text, file): the TaskManagers need not have the file
        self.source = source
        self.buckets = buckets
        self.correction_ms = correction_ms
        self.window_ms = window_ms

    def open(self, runtime_context: RuntimeContext) -> None:
        self.mapping = parse_order_mapping(*self.mapping_text)

    def process_element(self, value: bytes, ctx: ProcessFunction.Context) -> Iterator[Any]:
        out = _Group()
        try:
            elements = ungroup(value)
        except ValueError as error:
            self._dead(out, DeadLetter("unreadable_record", str(error), bytes(value)), None)
            elements = []
        # the watermark cannot move within a call: every record is judged against it
        watermark = ctx.timer_service().current_watermark()
        for element in elements:
            self._one(out, element, watermark)
        yield from out.emit(self.buckets)

    def _one(self, out: _Group, element: bytes, watermark: int) -> None:
        try:
            record = unframe(element)
        except ValueError as error:
            self._dead(out, DeadLetter("unreadable_record", str(error), bytes(element)), None)
            return
        try:
            change = decode_order_change(record.value, self.mapping)
        except OrderChangeError as error:
            self._dead(out, DeadLetter("malformed_order_change", str(error),
                                       record.value or b""), record)
            return
        except Exception as error:  # noqa: BLE001 - one record must never stop the job
            log.exception("decoding change %s:%s failed", record.partition, record.offset)
            self._dead(out, DeadLetter("decoder_error", f"{type(error).__name__}: {error}",
                                       record.value or b""), record)
            return
        if change.kind == IGNORED:
            out.counts.append(OTHER)
            return
        way = route(change.kind, change.ts_ms, record.kafka_timestamp_ms or change.changed_ms,
                    self.correction_ms, self.window_ms)
        if way == OLD_ROW:
            out.counts.append(OTHER)
            return
        if way == TOO_OLD:
            self._dead(out, DeadLetter(
                "order_change_too_old", f"order {change.order_id}: a {change.kind} of an "
                f"order placed more than order_changes.window_days "
                f"({self.window_ms / DAY_MS:g}) before it arrived: its credits are no "
                "longer kept", record.value or b""), record)
            return
        if way == AN_ORDER:
            out.order(change, record, change.ts_ms <= watermark)
        else:
            out.revisions.append(tuple(OrderRevision(
                change.order_id, change.user_id, change.revenue, change.ts_ms,
                change.changed_ms, change.kind)))
        out.counts.append(USED)

    def _dead(self, out: _Group, letter: DeadLetter, record: Framed | None) -> None:
        out.dead.append(dead_letter_json(letter, self.source,
                                         None if record is None else record.partition,
                                         None if record is None else record.offset))
        out.counts.append(DEAD)


class _Group:
    """What one call gathers, sent as few records as its buckets allow."""

    def __init__(self) -> None:
        self.orders: list[tuple] = []  # placed orders to their journeys (Conversion rows)
        self.copies: dict[tuple[int, int], list[tuple]] = {}  # (order bucket, flags) -> rows
        self.revisions: list[tuple] = []  # OrderRevision tuples
        self.dead: list[str] = []
        self.counts: list[tuple[int, ...]] = []

    def order(self, change: OrderChange, record: Framed, held: bool) -> None:
        """A placed order: to its journey unless behind the watermark (then the duplicate
        check brings it once admitted, as the span decoder's held orders)."""
        row = (change.user_id, change.ts_ms, change.order_id, change.revenue,
               change.currency, "", "")
        if not held:
            self.orders.append(row)
        key = (change.order_id, CHANGE_COPY | (HELD_COPY if held else 0))
        self.copies.setdefault(key, []).append(
            (*row, record.partition, record.offset, change.changed_ms))

    def emit(self, buckets: int) -> Iterator[Any]:
        for letter in self.dead:
            yield DEAD_LETTERS, letter
        for bucket, rows in _by_bucket(self.orders, 0, buckets).items():
            yield bucket, max(row[1] for row in rows), pack(
                EventColumns(EMPTY.touches, order_columns(rows)))
        for bucket, revisions in _by_bucket(self.revisions, 1, buckets).items():
            yield bucket, REVISED, pickle.dumps(revisions, PICKLE_PROTOCOL)
        by_order_bucket: dict[tuple[int, int], list[tuple]] = {}
        for (order_id, flags), rows in self.copies.items():
            by_order_bucket.setdefault((bucket_of(order_id, buckets), flags), []).extend(rows)
        for (bucket, flags), rows in by_order_bucket.items():
            yield ORDERS, (bucket, flags, rows)
        if self.counts:
            yield ACCOUNTING, tuple(map(sum, zip(*self.counts, strict=True)))


def _by_bucket(rows: list[tuple], user_at: int, buckets: int) -> dict[int, list[tuple]]:
    """Rows by the bucket of their user (field `user_at`), each bucket's in their order."""
    out: dict[int, list[tuple]] = {}
    for row in rows:
        out.setdefault(bucket_of(row[user_at], buckets), []).append(row)
    return out
