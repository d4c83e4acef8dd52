"""The attribution job's reader of the orders table's change stream (`order_changes.topic`):
each framed record (its Kafka timestamp is its event time: the source's ARRIVAL signal)
-> what it says of an order, by the table's mapping (udfs/orders, the same code as
`seedance inspect --order-changes`).

- an order placed (or a row as it is now) that arrived within the correction horizon of
  its time is an order like one from a span: to its user's journey (a batch of one
  order) and, as a change copy, to the duplicate check (dedup.py), where an order seen on
  both paths counts once;
- a changed amount, a refund, a cancellation, a delete -- and a row of an order older
  than the horizon -- is a revision: the revenue the order has now, to the bucket of its
  user (REVISED), where the journeys and the data-driven crediting write the order's rows
  again (revisions.py);
- a change of an order older than `order_changes.window_days` when it arrived is a dead
  letter (order_change_too_old: its rows are no longer kept); an unreadable message is
  one too, with the reason; tombstones, other tables and updates of nothing that counts
  are counted as `other`.

One Python call per record: a change stream carries a message per write of an order, a
small share of what the spans bring.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from typing import Any

from pyflink.datastream import ProcessFunction, RuntimeContext

from pipelines.codec.dead_letters import dead_letter_json
from pipelines.codec.frame import Framed, unframe
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
    IGNORED,
    PLACED,
    OrderChange,
    OrderChangeError,
    OrderRevision,
    decode_order_change,
    parse_order_mapping,
)
from udfs.periods import DAY_MS

log = logging.getLogger(__name__)
USED, OTHER, DEAD = counted(messages=1, records_in=1, used=1), \
    counted(messages=1, records_in=1, other=1), \
    counted(messages=1, records_in=1, dead_lettered=1)


class DecodeOrderChanges(ProcessFunction):  # type: ignore[misc]
    """One framed record of the change stream -> an order (batch to its journey, copy to
    the duplicate check), a revision, a dead letter, or nothing; always one accounting
    record."""

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
        try:
            record = unframe(value)
        except ValueError as error:
            yield from self._dead(DeadLetter("unreadable_record", str(error), bytes(value)),
                                  None)
            return
        try:
            change = decode_order_change(record.value, self.mapping)
        except OrderChangeError as error:
            yield from self._dead(DeadLetter("malformed_order_change", str(error),
                                             record.value or b""), record)
            return
        except Exception as error:  # noqa: BLE001 - one record must never stop the job
            log.exception("decoding change %s:%s failed", record.partition, record.offset)
            yield from self._dead(DeadLetter("decoder_error", f"{type(error).__name__}: "
                                             f"{error}", record.value or b""), record)
            return
        if change.kind == IGNORED:
            yield ACCOUNTING, OTHER
            return
        arrival = record.kafka_timestamp_ms or change.changed_ms
        if change.kind == PLACED and (not arrival or self.correction_ms <= 0
                                      or arrival - change.ts_ms <= self.correction_ms):
            yield from self._order(change, record, ctx.timer_service().current_watermark())
        elif arrival and arrival - change.ts_ms > self.window_ms:
            if change.kind == PLACED:  # a row of an old order (a snapshot): nothing to do
                yield ACCOUNTING, OTHER
                return
            yield from self._dead(DeadLetter(
                "order_change_too_old", f"order {change.order_id}: a {change.kind} "
                f"{(arrival - change.ts_ms) / DAY_MS:.1f} days after the order, beyond "
                f"order_changes.window_days ({self.window_ms / DAY_MS:g}): its credits are "
                "no longer kept", record.value or b""), record)
            return
        else:
            revision = OrderRevision(change.order_id, change.user_id, change.revenue,
                                     change.ts_ms, change.changed_ms, change.kind)
            yield bucket_of(change.user_id, self.buckets), REVISED, pickle.dumps(
                [tuple(revision)], PICKLE_PROTOCOL)
        yield ACCOUNTING, USED

    def _order(self, change: OrderChange, record: Framed, watermark: int) -> Iterator[Any]:
        """A placed order: to its journey unless behind this operator's watermark (then the
        duplicate check brings it once admitted, as the span decoder's held orders)."""
        row = (change.user_id, change.ts_ms, change.order_id, change.revenue,
               change.currency, "", "")
        held = change.ts_ms <= watermark
        if not held:
            yield bucket_of(change.user_id, self.buckets), change.ts_ms, pack(
                EventColumns(EMPTY.touches, order_columns([row])))
        yield ORDERS, (bucket_of(change.order_id, self.buckets),
                       CHANGE_COPY | (HELD_COPY if held else 0),
                       [(*row, record.partition, record.offset, change.changed_ms)])

    def _dead(self, letter: DeadLetter, record: Framed | None) -> Iterator[Any]:
        yield DEAD_LETTERS, dead_letter_json(
            letter, self.source, None if record is None else record.partition,
            None if record is None else record.offset)
        yield ACCOUNTING, DEAD
