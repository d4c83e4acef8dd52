"""The attribution job's first operator: each group of Kafka records (OTLP batches, framed
and grouped by the source) -> touches and orders as columns, in one batch per user bucket;
late events, dead letters and the accounting of every span on side outputs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
from pyflink.datastream import ProcessFunction, RuntimeContext

from pipelines.codec.dead_letters import dead_letter_json
from pipelines.codec.events import (
    DecodedEvents,
    PackedMessage,
    PackedSegment,
    ScannedGroup,
    ScannedMessage,
    by_bucket,
    by_order_bucket,
    decode_events,
    decode_message,
    general_spans,
    packed_by_bucket,
    scan_group,
)
from pipelines.codec.frame import Framed, unframe, ungroup
from pipelines.codec.landings import use_channel_rules
from pipelines.codec.otlp import MAX_FUTURE_S
from pipelines.flink.attribution.group_output import NO_EXTRAS, Extras, GroupOutput
from pipelines.flink.attribution.support import (
    ARRIVED_LATE,
    DEAD_LETTERS,
    LATE_EVENTS,
    collect_garbage_rarely,
    counted,
    event_json,
)
from schemas.events import (
    EventColumns,
    OrderColumns,
    merged_parts,
    newest,
    order_rows,
    order_rows_of_parts,
    packed_parts,
    records_of,
    take,
)
from schemas.records import DeadLetter
from udfs.journeys import arrival_bound, arrived_in_time
from udfs.traffic import parse_channel_rules

log = logging.getLogger(__name__)
_OLDEST = -(2**63)  # no event is late by arrival
ORDER_TS = OrderColumns._fields.index("ts_ms")  # in a packed batch's order columns


class DecodeOtlp(ProcessFunction):  # type: ignore[misc]
    """One Kafka record (a whole OTLP batch, framed by the source: pipelines/codec/frame.py)
    -> touchpoints and orders as columns, in batches per user bucket: (bucket, newest event
    time, packed EventColumns); and every order, by the bucket of its order id, on the
    ORDERS side output to the duplicate check (pipelines/flink/attribution/dedup.py), which
    withdraws from its journey a copy that does not count.

    An event is late when it reached Kafka more than the correction horizon
    (`journey.correction_days`) after it happened: its record's timestamp (the source's
    header carries it) minus its event time, udfs/journeys/arrival.py. That is a property of the
    record, the same whatever the partition count, keying, parallelism, read order or
    restart. Every other event counts: one behind the job's watermark when it reaches its
    journey (its partition was read late, a catch-up, a pause) corrects what it changes
    (udfs/journeys/corrections.py). An order already behind this operator's watermark goes
    to its journey only through the duplicate check (held, then admitted or turned down):
    a correction cannot wait for the watermark that brings a later copy's withdrawal.

    Nothing stops this operator: a null record, unreadable bytes, any error while decoding
    one record become dead letters (with the record's partition and offset), counted.
    """

    def __init__(self, encoding: str, source: str, buckets: int,
                 max_future_s: float = MAX_FUTURE_S, correction_ms: int = 0,
                 channel_rules: tuple[str, str] | None = None, landing_user: str = "") -> None:
        self.encoding = encoding
        # (text, file) of the rules that name a landing span's channel (None: the shipped),
        # and where a landing's user is besides enduser.id / user.id
        self.channel_rules = channel_rules
        self.landing_user = landing_user
        self.max_future_s = max_future_s  # a span further ahead of the clock: dead letter
        self.source = source
        self.correction_ms = correction_ms
        self.buckets = buckets

    def open(self, runtime_context: RuntimeContext) -> None:
        collect_garbage_rarely()
        use_channel_rules(parse_channel_rules(*self.channel_rules)
                          if self.channel_rules else None, self.landing_user)

    def process_element(self, value: bytes, ctx: ProcessFunction.Context) -> Iterator[Any]:
        group = GroupOutput()
        try:
            elements = ungroup(value)
        except ValueError as error:
            self._dead(group, DeadLetter("unreadable_record", str(error), bytes(value)), None)
            yield from group.emit()
            return
        # the watermark cannot move within a call: every record of the group is judged
        # against the same one, as when they came one by one before it
        watermark = ctx.timer_service().current_watermark()
        scanned = self._scanned(elements, watermark) if len(elements) > 1 else None
        if scanned is None:
            for element in elements:
                group.absorb(self._one(element, watermark))
        else:
            records, found, extras = scanned
            done = 0
            for segment in found.segments:
                for element in elements[done:segment.first]:  # left to the general path
                    group.absorb(self._one(element, watermark))
                self._segment(group, segment, records, found.messages, extras)
                done = segment.end
            for element in elements[done:]:
                group.absorb(self._one(element, watermark))
        yield from group.emit()

    def _scanned(self, elements: list[bytes], watermark: int
                 ) -> tuple[list[Framed | None], ScannedGroup, dict[int, Extras]] | None:
        """The group's plain messages scanned together (pipelines/codec/events.py
        `scan_group`): each bucket's events of consecutive messages as one batch, not one
        per message, and what the scanner left out of a message's buckets, by message:
        the dead letters of its spans for the general rules, the late-events rows of its
        events that arrived too late. Left to `_one`: what it would not take the scanner's
        buckets of (an order behind the watermark, a span for the general rules that is a
        touch or an order after all, anything unusual)."""
        records: list[Framed | None] = []
        for element in elements:
            try:
                records.append(unframe(element))
            except ValueError:
                records.append(None)
        payloads = [None if record is None else record.value for record in records]
        oldest = [_OLDEST if record is None else self._oldest_counted(record)
                  for record in records]
        try:
            while True:
                found = scan_group(payloads, self.buckets, self.encoding, self.max_future_s,
                                   oldest, watermark)
                if found is None:
                    return None
                extras, whole = self._left_out(records, found)
                if not whole:
                    return records, found, extras
                for message in whole:  # scanned again without it: it goes on its own
                    payloads[message] = None
        except Exception:  # noqa: BLE001 - never stops the job: each record on its own
            log.exception("scanning a group of %d records failed", len(elements))
            return None

    def _left_out(self, records: list[Framed | None], found: ScannedGroup
                  ) -> tuple[dict[int, Extras], list[int]]:
        """What the scanner left out of each scanned message's buckets, and the messages
        with a span for the general rules that is a touch or an order (to decode whole)."""
        extras: dict[int, Extras] = {}
        whole = []
        for message, scanned in enumerate(found.messages):
            if scanned is None or not (scanned.late or scanned.general):
                continue
            record = records[message]
            assert record is not None and record.value is not None
            general = None if scanned.general is None else general_spans(
                record.value, scanned.general, found.latest_ns)
            if general is not None and general.records:
                whole.append(message)
                continue
            letters = [] if general is None else general.dead_letters
            items = [(DEAD_LETTERS, dead_letter_json(letter, self.source, record.partition,
                                                     record.offset)) for letter in letters]
            if scanned.late:
                items += self._late_rows(record, scanned.late)
            extras[message] = Extras(items, len(letters),
                                     0 if general is None else general.ignored,
                                     0 if general is None else general.unbuilt_gpu_calls)
        return extras, whole

    def _late_rows(self, record: Framed | None, expected: int) -> list[Any]:
        """The late-events rows of a record's events that arrived too late (the scanner
        left them out, `expected` of them), in the record's order."""
        assert record is not None and record.value is not None
        decoded = decode_events(record.value, self.buckets, self.encoding,
                                max_future_s=self.max_future_s)
        late_touches, late_orders = self._late(decoded, record.kafka_timestamp_ms)
        rows = list(self._late_json(decoded, late_touches, late_orders,
                                    record.kafka_timestamp_ms))
        if len(rows) != expected:
            raise ValueError(f"record {record.partition}:{record.offset}: the scanner left "
                             f"{expected} events out as late, the decoder finds {len(rows)}")
        return rows

    def _oldest_counted(self, record: Framed) -> int:
        """The oldest event time of the record that is not late by arrival."""
        if self.correction_ms <= 0 or record.kafka_timestamp_ms <= 0:
            return _OLDEST
        return int(arrival_bound(record.kafka_timestamp_ms, self.correction_ms))

    def _segment(self, out: GroupOutput, segment: PackedSegment,
                 records: list[Framed | None], messages: list,
                 extras: dict[int, Extras]) -> None:
        """A scanned segment's outputs: its records' dead letters and late events (in
        their order), its buckets' batches, its orders (each with its record's partition
        and offset, in the records' order), its records' counts."""
        with_orders, messages_of_orders = [], []
        for bucket, (batch_newest, parts, order_messages) in segment.buckets.items():
            out.batch(bucket, batch_newest, parts)
            if parts[1]:  # the orders alone (no touches), to read them in one go
                with_orders.append((0, parts[1], parts[2], parts[3]))
                messages_of_orders.append(order_messages)
        placed = list(zip(np.frombuffer(b"".join(messages_of_orders), np.int32).tolist(),
                          order_rows_of_parts(merged_parts(with_orders)), strict=True)) \
            if with_orders else []
        placed.sort(key=lambda item: item[0])  # stable: the records' order
        rows = []
        for message, row in placed:
            record = records[message]
            assert record is not None
            rows.append(row + (record.partition, record.offset))
        for key, part in by_order_bucket(rows, self.buckets).items():
            out.orders.setdefault((key, 0), []).extend(part)
        for message in range(segment.first, segment.end):
            scanned: ScannedMessage = messages[message]
            extra = extras.get(message, NO_EXTRAS)
            out.items += extra.items
            used = scanned.events + scanned.late  # as `_decode` counts: the late are used
            out.count(counted(
                messages=1, records_in=scanned.spans, used=used,
                other=scanned.spans - used - extra.dead, dead_lettered=extra.dead,
                late=scanned.late, other_gpu_calls=scanned.unbuilt_gpu_calls + extra.unbuilt,
                other_tracing_spans=scanned.ignored + extra.ignored))

    def _one(self, value: bytes, watermark: int) -> GroupOutput:
        """One framed record's outputs: all of them, or only its dead letter."""
        out = GroupOutput()
        try:
            record = unframe(value)
        except ValueError as error:
            self._dead(out, DeadLetter("unreadable_record", str(error), bytes(value)), None)
            return out
        if record.value is None:
            self._dead(out, DeadLetter(
                "null_value", "the record's value is null (a tombstone or a producer "
                "error): no spans", b""), record)
            return out
        try:
            self._decode(record, watermark, out)
        except Exception as error:  # noqa: BLE001 - one record must never stop the job
            log.exception("decoding record %s:%s failed", record.partition, record.offset)
            out = GroupOutput()  # nothing of it but its dead letter
            self._dead(out, DeadLetter(
                "decoder_error", f"{type(error).__name__}: {error}", record.value), record)
        return out

    def _dead(self, out: GroupOutput, letter: DeadLetter, record: Framed | None) -> None:
        out.items.append((DEAD_LETTERS, dead_letter_json(
            letter, self.source, None if record is None else record.partition,
            None if record is None else record.offset)))
        out.count(counted(messages=1, records_in=1, dead_lettered=1))

    def _decode(self, record: Framed, watermark: int, out: GroupOutput) -> None:
        # GPU calls feed the cost job; this job attributes touches and orders: it checks
        # them (dead-letters the invalid ones) but does not build them
        value, arrival = record.value, record.kafka_timestamp_ms
        assert value is not None
        decoded = decode_message(value, self.buckets, self.encoding, self.max_future_s)
        if isinstance(decoded, PackedMessage):
            if self._none_late(decoded.ts_ms, arrival) and _no_order_behind(decoded,
                                                                            watermark):
                # the common case, every span plain, none late, no order behind the
                # watermark (touches behind it go to their journeys all the same): the
                # scanner's buckets as they are
                orders: list[tuple] = []
                for bucket, (batch_newest, events) in decoded.buckets.items():
                    out.batch(bucket, batch_newest, events)
                    orders += order_rows_of_parts(events)
                self._orders(out, orders, record)
                used = len(decoded.ts_ms)
                out.count(counted(
                    messages=1, records_in=decoded.spans, used=used,
                    other=decoded.spans - used, other_gpu_calls=decoded.unbuilt_gpu_calls,
                    other_tracing_spans=decoded.ignored))
                return
            # to set some apart
            decoded = decode_events(value, self.buckets, self.encoding,
                                    max_future_s=self.max_future_s)
        for letter in decoded.dead_letters:
            out.items.append((DEAD_LETTERS, dead_letter_json(letter, self.source,
                                                             record.partition, record.offset)))
        touches, orders = decoded.touches, decoded.orders
        used = len(touches.ts_ms) + len(orders.ts_ms)
        late_count = 0
        if used:
            late_touches, late_orders = self._late(decoded, arrival)
            late_count = int(late_touches.sum() + late_orders.sum())
            if late_count:
                out.items.extend(self._late_json(decoded, late_touches, late_orders, arrival))
            held = ~late_orders & (orders.ts_ms <= watermark)
            set_apart = bool(late_count or held.any())
            keep = (~late_touches, ~late_orders & ~held) if set_apart else (None, None)
            packed = packed_by_bucket(decoded, *keep)
            if packed is None:  # a value holds the packing's separator: bucket by bucket
                packed = {bucket: (newest(events), packed_parts(events))
                          for bucket, events in by_bucket(decoded, *keep).items()}
            for bucket, (batch_newest, parts) in packed.items():
                out.batch(bucket, batch_newest, parts)
            self._orders(out, order_rows(take(orders, ~late_orders & ~held)), record)
            self._orders(out, order_rows(take(orders, held)), record, held=True)
        records_in = decoded.records_in
        dead = len(decoded.dead_letters)
        # emitted only once the whole record is decoded (the caller drops `out` on a
        # failure half-way): nothing of it is left behind but its dead letter
        out.count(counted(
            messages=1, records_in=records_in, used=used, other=records_in - used - dead,
            dead_lettered=dead, late=late_count, other_gpu_calls=decoded.unbuilt_gpu_calls,
            other_tracing_spans=decoded.ignored))

    def _orders(self, out: GroupOutput, orders: list[tuple], record: Framed,
                held: bool = False) -> None:
        """Orders to the duplicate check, by the bucket of their order id, each with the
        partition and offset of its record (a duplicate's dead letter names them);
        `held`: orders their journeys get only once the check admits them."""
        place = (record.partition, record.offset)
        for key, part in by_order_bucket(orders, self.buckets).items():
            out.orders.setdefault((key, int(held)), []).extend(row + place for row in part)

    def _none_late(self, ts: np.ndarray, arrival: int) -> bool:
        """True when none of these times is late by arrival."""
        return not len(ts) or bool(arrived_in_time(np.array([int(ts.min())]), arrival,
                                                   self.correction_ms)[0])

    def _late(self, decoded: DecodedEvents, arrival: int) -> tuple[np.ndarray, np.ndarray]:
        """Which touches and which orders arrived too late to count."""
        return (~arrived_in_time(decoded.touches.ts_ms, arrival, self.correction_ms),
                ~arrived_in_time(decoded.orders.ts_ms, arrival, self.correction_ms))

    def _late_json(self, decoded: DecodedEvents, late_touches: np.ndarray,
                   late_orders: np.ndarray, arrival: int) -> Iterator[Any]:
        late = EventColumns(take(decoded.touches, late_touches), take(decoded.orders,
                                                                     late_orders))
        seq = np.concatenate([decoded.touch_seq[late_touches],
                              decoded.order_seq[late_orders]])
        records = records_of(late)
        bound = int(arrival_bound(arrival, self.correction_ms))
        for at in np.argsort(seq, kind="stable").tolist():  # message order
            yield LATE_EVENTS, event_json(records[at], bound, ARRIVED_LATE)


def _no_order_behind(decoded: PackedMessage, watermark: int) -> bool:
    """True when no order of the message is at or behind the watermark (read from each
    bucket's packed order times: schemas.events.PackedParts)."""
    for _, parts in decoded.buckets.values():
        if parts[1] and int(np.frombuffer(parts[3][ORDER_TS], np.int64).min()) <= watermark:
            return False
    return True
