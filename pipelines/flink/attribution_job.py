"""The streaming attribution job on PyFlink: OTLP spans in Kafka -> per-touch credits.

ingest   KafkaSource (raw bytes) -> decode OTLP batches (one Python call per message;
         protobuf read by the C scanner, pipelines/codec/events.py), touches and orders as
         columns split into batches by user bucket (one record per message and bucket)
transform  event-time watermarks -> key by bucket -> each bucket's users in one
           `udfs.journey_book.JourneyBook`: events wait until the watermark passes, then
           every user's are stepped in event order, and the conversions one watermark
           closes are credited together (one table per model); closed journeys
           (converting or not) go on, a batch per step, to one keyed operator that keeps
           path counts and refits the data-driven models (shapley, markov) once per period
           (udfs/data_driven.py)
write    credits (JSON tables of rows, see pipelines/codec/credit_messages.py), conversions, dead
         letters and late events to Kafka with exactly-once sinks

Python is called per message, per bucket batch and per watermark step, not per event,
and inside those calls events move as columns (numpy arrays; schemas/events.py), never as
one Python object each: per-record hops between Flink and Python, and per-event Python
work, are what a PyFlink job spends its time on.

Every operator has a stable uid so that savepoints stay compatible across upgrades.
"""

from __future__ import annotations

import gc
import logging
import pickle
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import orjson
from pyflink.common import JobExecutionResult, Types
from pyflink.datastream import (
    DataStream,
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
    TimeDomain,
)
from pyflink.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)

from pipelines.codec import credit_messages, table_messages
from pipelines.codec.events import (
    DecodedEvents,
    PackedMessage,
    by_bucket,
    decode_events,
    decode_message,
)
from pipelines.codec.frame import Framed, unframe
from pipelines.codec.journey_wire import (
    EventsWire,
    PeriodWire,
    events_columns_from_wire,
    period_from_wire,
    snapshot_from_wire,
)
from pipelines.codec.otlp import MAX_FUTURE_S, dead_letter_json
from pipelines.flink.kafka import (
    build_sink,
    build_source,
    otlp_event_time,
    run_pipeline,
)
from pipelines.settings.job_config import StreamingJobConfig
from schemas.events import EventColumns, newest, pack, records_of, size, take, unpack
from schemas.records import Conversion, DeadLetter, Touchpoint
from udfs.attribution import per_conversion_credit_rows
from udfs.data_driven import (
    PathCounts,
    Period,
    closed_by_period,
    conversion_credit_rows,
)
from udfs.journey_book import Changes, JourneyBook, Progress
from udfs.journey_columns import ClosedJourneys, ConvertedJourneys, concat_converted
from udfs.journeys import JourneyConfig
from udfs.models import ModelParams
from udfs.order_ledger import OrderLedger

log = logging.getLogger(__name__)

DEAD_LETTERS = OutputTag("dead-letters", Types.STRING())
LATE_EVENTS = OutputTag("late-events", Types.STRING())
CLOSED_JOURNEYS = OutputTag("closed-journeys", Types.PICKLED_BYTE_ARRAY())
DUPLICATE_ORDERS = OutputTag("duplicate-orders", Types.STRING())
# credits and conversions are JSON tables handed to Flink as UTF-8 bytes (see
# table_messages.encode_bytes)
RESULT_TYPE = Types.PRIMITIVE_ARRAY(Types.BYTE())
CONVERSIONS = OutputTag("conversions", RESULT_TYPE)
ACCOUNTING = OutputTag("accounting", Types.PICKLED_BYTE_ARRAY())

# What became of every input record (a span; a message that cannot be split into spans
# counts as one): used (a touch or an order) = processed + late; other = spans this job
# has no use for (GPU calls are the GPU cost job's, plain tracing spans nobody's).
# `other` is broken down by why: valid GPU calls and ordinary tracing spans; orders seen
# before (duplicate_orders) are used, and dead-lettered, not processed.
COUNTS = ("messages", "records_in", "used", "other", "dead_lettered", "late",
          "other_gpu_calls", "other_tracing_spans", "duplicate_orders")


def counted(**counts: int) -> tuple[int, ...]:
    """An accounting record: the COUNTS named, the rest 0."""
    unknown = counts.keys() - set(COUNTS)
    if unknown:
        raise KeyError(f"not an accounting count: {', '.join(sorted(unknown))}")
    return tuple(counts.get(name, 0) for name in COUNTS)


ONE_LATE = counted(late=1)
ONE_DUPLICATE_ORDER = counted(dead_lettered=1, duplicate_orders=1)


Event = Touchpoint | Conversion
Batch = tuple[int, int, bytes]
"""One message's events of one user bucket: (bucket, newest event time, the events as
columns (schemas.events.EventColumns), packed: schemas.events.pack).

The events are packed once, by the decoder, and read once, by the journey book: between
the two the record passes the timestamp assigner and the key selector, Python operators
of their own that would otherwise each unpickle and pickle every event again."""


PICKLE_PROTOCOL = 5


def stored_events(value: bytes | EventsWire) -> EventsWire:
    """A waiting batch as earlier versions kept it: pickled events (older: the events)."""
    return pickle.loads(value) if isinstance(value, bytes) else value


def collect_garbage_rarely() -> None:
    """Python's cyclic garbage collector, with its default thresholds, runs every 700 new
    objects and rescans every survivor again and again as they pile up: the books' user
    states, the credit rows of a refit period. Measured here it took a third to a half of
    the operators' time (1.2 million spans, bench/streaming.py; a refit period's credits
    6.0 s -> 2.6 s). What these operators keep has no reference cycles (reference counting
    frees it), so collecting rarely frees the same memory."""
    gc.set_threshold(50_000, 20, 100)


def put_all(state: Any, values: dict[Any, Any], process_mode: bool) -> None:
    # PyFlink 2.2's process-mode map state reads put_all's argument as (key, value) pairs;
    # the thread-mode one wants a dict
    state.put_all(values.items() if process_mode else values)


class DecodeOtlp(ProcessFunction):  # type: ignore[misc]
    """One Kafka record (a whole OTLP batch, framed by the source: pipelines/codec/frame.py)
    -> touchpoints and orders as columns, in batches per user bucket: (bucket, newest event
    time, packed EventColumns).

    An event is late when it is not newer than its partition's newest event time before it
    (the source's header says), or an earlier event of its own message, minus the allowed
    out-of-orderness: the bound the source's watermark for that partition follows, decided
    per record, so the same partition's records are classified the same way whatever the
    partition count, parallelism or interleaving; and an event that passes it is never
    behind the job's watermark (the minimum over partitions) when it reaches its journey.

    Nothing stops this operator: a null record, unreadable bytes, any error while decoding
    one record become dead letters (with the record's partition and offset), counted.
    """

    def __init__(self, encoding: str, source: str, max_out_of_orderness_ms: int,
                 buckets: int) -> None:
        self.encoding = encoding
        self.source = source
        self.slack_ms = max_out_of_orderness_ms
        self.buckets = buckets

    def open(self, runtime_context: RuntimeContext) -> None:
        collect_garbage_rarely()

    def process_element(self, value: bytes, ctx: ProcessFunction.Context) -> Iterator[Any]:
        try:
            record = unframe(value)
        except ValueError as error:
            yield from self._dead(DeadLetter("unreadable_record", str(error), bytes(value)),
                                  None)
            return
        if record.value is None:
            yield from self._dead(DeadLetter(
                "null_value", "the record's value is null (a tombstone or a producer "
                "error): no spans", b""), record)
            return
        try:
            yield from self._decode(record)
        except Exception as error:  # noqa: BLE001 - one record must never stop the job
            log.exception("decoding record %s:%s failed", record.partition, record.offset)
            yield from self._dead(DeadLetter(
                "decoder_error", f"{type(error).__name__}: {error}", record.value), record)

    def _dead(self, letter: DeadLetter, record: Framed | None) -> Iterator[Any]:
        yield DEAD_LETTERS, dead_letter_json(letter, self.source,
                                             None if record is None else record.partition,
                                             None if record is None else record.offset)
        yield ACCOUNTING, counted(messages=1, records_in=1, dead_lettered=1)

    def _decode(self, record: Framed) -> Iterator[Any]:
        # GPU calls feed the cost job; this job attributes touches and orders: it checks
        # them (dead-letters the invalid ones) but does not build them
        value, newest_before = record.value, record.partition_newest_ms
        assert value is not None
        decoded = decode_message(value, self.buckets, self.encoding)
        out: list[Any] = []
        if isinstance(decoded, PackedMessage):
            if self._none_late(decoded.ts_ms, newest_before):
                # the common case, every span plain and none late: the scanner's buckets
                # as they are
                for bucket, (batch_newest, events) in decoded.buckets.items():
                    out.append((bucket, batch_newest, pickle.dumps(events, PICKLE_PROTOCOL)))
                used = len(decoded.ts_ms)
                out.append((ACCOUNTING, counted(
                    messages=1, records_in=decoded.spans, used=used,
                    other=decoded.spans - used, other_gpu_calls=decoded.unbuilt_gpu_calls,
                    other_tracing_spans=decoded.ignored)))
                yield from out
                return
            decoded = decode_events(value, self.buckets, self.encoding)  # to set some apart
        for letter in decoded.dead_letters:
            out.append((DEAD_LETTERS, dead_letter_json(letter, self.source, record.partition,
                                                       record.offset)))
        touches, orders = decoded.touches, decoded.orders
        used = len(touches.ts_ms) + len(orders.ts_ms)
        late_count = 0
        if used:
            late_touches, late_orders, bounds = self._late(decoded, newest_before)
            late_count = int(late_touches.sum() + late_orders.sum())
            if late_count:
                out.extend(self._late_json(decoded, late_touches, late_orders, bounds))
                batches = by_bucket(decoded, ~late_touches, ~late_orders)
            else:
                batches = by_bucket(decoded)
            for bucket, events in batches.items():
                out.append((bucket, newest(events), pack(events)))
        records_in = decoded.records_in
        dead = len(decoded.dead_letters)
        out.append((ACCOUNTING, counted(
            messages=1, records_in=records_in, used=used, other=records_in - used - dead,
            dead_lettered=dead, late=late_count, other_gpu_calls=decoded.unbuilt_gpu_calls,
            other_tracing_spans=decoded.ignored)))
        # emitted only once the whole record is decoded: a failure half-way leaves nothing
        # of it behind but its dead letter
        yield from out

    @staticmethod
    def _newest_so_far(ts: np.ndarray, newest_before: int) -> np.ndarray:
        """For each of these times (in message order), the newest seen up to it."""
        newest = np.maximum.accumulate(ts)
        np.maximum(newest, newest_before, out=newest)
        return newest

    def _none_late(self, ts: np.ndarray, newest_before: int) -> bool:
        """True when none of these times (in message order) is late."""
        if not len(ts):
            return True
        return not (ts <= self._newest_so_far(ts, newest_before) - self.slack_ms).any()

    def _late(self, decoded: DecodedEvents,
              newest_before: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which touches and orders are late, and the bound each event met (both kinds
        together, in message order)."""
        n_touches = len(decoded.touch_seq)
        seq = np.concatenate([decoded.touch_seq, decoded.order_seq])
        ts = np.concatenate([decoded.touches.ts_ms, decoded.orders.ts_ms])
        order = np.argsort(seq, kind="stable")
        newest = self._newest_so_far(ts[order], newest_before)
        bounds = np.empty(len(ts), np.int64)
        bounds[order] = newest - self.slack_ms
        late = ts <= bounds
        return late[:n_touches], late[n_touches:], bounds

    def _late_json(self, decoded: DecodedEvents, late_touches: np.ndarray,
                   late_orders: np.ndarray, bounds: np.ndarray) -> Iterator[Any]:
        n_touches = len(late_touches)
        late = EventColumns(take(decoded.touches, late_touches), take(decoded.orders,
                                                                     late_orders))
        seq = np.concatenate([decoded.touch_seq[late_touches],
                              decoded.order_seq[late_orders]])
        bound = np.concatenate([bounds[:n_touches][late_touches],
                                bounds[n_touches:][late_orders]])
        records = records_of(late)
        for at in np.argsort(seq, kind="stable").tolist():  # message order
            yield LATE_EVENTS, _event_json(records[at], int(bound[at]))


def _event_json(event: Event, watermark: int) -> str:
    body = {"type": "touchpoint" if isinstance(event, Touchpoint) else "conversion",
            **event._asdict(), "watermark_ms": watermark}
    return orjson.dumps(body).decode()


CONVERSION_FIELDS = ("order_id", "user_id", "conversion_ts_ms", "revenue", "currency", "stage",
                     "touches", "trace_ids")


def conversion_rows(converted: ConvertedJourneys) -> list[tuple[Any, ...]]:
    """One row per order (CONVERSION_FIELDS): what the ROI job needs to bring compute cost
    to it (the traces of its journey, the order's first) and to count it (stage,
    revenue)."""
    bounds = converted.touches.offsets.tolist()
    touch_traces = converted.touches.trace_id.tolist()
    return [(order, user, ts, revenue, currency, stage, end - start,
             list(dict.fromkeys(t for t in (trace, *touch_traces[start:end]) if t)))
            for order, user, ts, revenue, currency, stage, trace, start, end in zip(
                converted.order_id.tolist(), converted.user_id.tolist(),
                converted.ts_ms.tolist(), converted.revenue.tolist(),
                converted.currency.tolist(), converted.stage.tolist(),
                converted.trace_id.tolist(), bounds[:-1], bounds[1:], strict=True)]


class AttributeJourneys(KeyedProcessFunction):  # type: ignore[misc]
    """Per bucket of users: a JourneyBook in memory, what it reports stored in keyed state.

    Events older than the watermark on arrival go to the late side output; the others wait
    in the book. One timer per bucket, at the earliest time the book has something to do
    (a waiting event, a journey that could close unconverted, an order history running
    out), brings the whole bucket up to the watermark in one call. State per bucket: the
    book at its last compaction (one value: udfs.journey_book.Snapshot, pickled), the
    batches since (map, by batch id) and the book's progress (its watermarks since); the
    in-memory book is rebuilt from them after a restart (udfs/journey_book.py). State
    an earlier version stored (a map of users' journey states) is read once and moved.
    """

    def __init__(self, journey: JourneyConfig, models: tuple[str, ...],
                 params: ModelParams, refit_period_ms: int | None, process_mode: bool,
                 buckets: int | None = None, duplicate_order_ms: int | None = None,
                 source: str = "") -> None:
        self.journey = journey
        # an order id seen again within this much event time is a duplicate
        self.duplicate_order_ms = duplicate_order_ms or journey.lookback_ms
        self.source = source
        self.buckets = buckets  # kept with the state: a restore under another count fails
        self.process_mode = process_mode
        self.models = models
        self.params = params
        # the data-driven models (if any) learn from every closed journey, per refit period
        self.refit_period_ms = refit_period_ms

    def open(self, runtime_context: RuntimeContext) -> None:
        collect_garbage_rarely()
        self.snapshot = runtime_context.get_state(
            ValueStateDescriptor("book-snapshot", Types.PICKLED_BYTE_ARRAY()))
        self.batches = runtime_context.get_map_state(
            MapStateDescriptor("book-batches", Types.LONG(), Types.PICKLED_BYTE_ARRAY()))
        self.progress = runtime_context.get_state(
            ValueStateDescriptor("book-progress", Types.PICKLED_BYTE_ARRAY()))
        # as earlier versions stored the book
        self.legacy_users = runtime_context.get_map_state(
            MapStateDescriptor("users", Types.STRING(), Types.PICKLED_BYTE_ARRAY()))
        self.legacy_batches = runtime_context.get_map_state(
            MapStateDescriptor("waiting-batches", Types.LONG(), Types.PICKLED_BYTE_ARRAY()))
        self.legacy_progress = runtime_context.get_state(
            ValueStateDescriptor("progress", Types.PICKLED_BYTE_ARRAY()))
        self.books: dict[int, JourneyBook] = {}
        self.timers: dict[int, int] = {}  # bucket -> the timer last registered
        # the order ids of the duplicate horizon (udfs/order_ledger.py), per bucket
        self.seen_orders = runtime_context.get_map_state(
            MapStateDescriptor("seen-orders", Types.STRING(), Types.LONG()))
        self.ledgers: dict[int, OrderLedger] = {}

    def _ledger(self, bucket: int) -> OrderLedger:
        ledger = self.ledgers.get(bucket)
        if ledger is None:  # first sight of this bucket since (re)start: from its state
            ledger = OrderLedger(self.duplicate_order_ms, self.seen_orders.items())
            self.ledgers[bucket] = ledger
        return ledger

    def _first_copies(self, bucket: int, events: EventColumns) -> tuple[EventColumns,
                                                                          list[str]]:
        """The batch without orders seen before, and those orders' dead letters."""
        orders = events.orders
        if not len(orders.ts_ms):
            return events, []
        keep, added = self._ledger(bucket).admit(orders.order_id, orders.ts_ms)
        if added:
            self._put_all(self.seen_orders, added)
        if keep.all():
            return events, []
        repeated = EventColumns(take(events.touches, np.zeros(len(events.touches.ts_ms), bool)),
                                take(orders, ~keep))
        letters = [dead_letter_json(DeadLetter(
            "duplicate_order", f"order {order.order_id} was seen before (within "
            f"{self.duplicate_order_ms / 86_400_000:g} days of event time): credited once",
            orjson.dumps(order._asdict())), self.source) for order in records_of(repeated)]
        return EventColumns(events.touches, take(orders, keep)), letters

    def _book(self, bucket: int) -> JourneyBook:
        book = self.books.get(bucket)
        if book is None:  # first sight of this bucket since (re)start: from its state
            stored = self.progress.value()
            if stored is not None and len(stored) > 2 and self.buckets is not None \
                    and stored[2] != self.buckets:
                raise ValueError(
                    f"this job's state was written with flink.user_buckets: {stored[2]}, "
                    f"the config says {self.buckets}: a user's state is found by their "
                    "bucket, so the count is fixed for the life of the state; set it back, "
                    "or start afresh (flink.resume: false, a new input.group_id)")
            if stored is None and self.legacy_progress.value() is not None:
                book = self._moved_from_legacy_state()
            else:
                snapshot = self.snapshot.value()
                book = JourneyBook.restore(
                    self.journey, Progress(stored[0], tuple(stored[1])) if stored else None,
                    pickle.loads(snapshot) if snapshot is not None else None,
                    [(key, unpack(events)) for key, events in self.batches.items()])
            self.books[bucket] = book
        return book

    def _moved_from_legacy_state(self) -> JourneyBook:
        stored = self.legacy_progress.value()
        book = JourneyBook.restore(
            self.journey, Progress(stored[0], tuple(stored[1])),
            snapshot_from_wire(self.legacy_users.items()),
            [(key, events_columns_from_wire(stored_events(events)))
             for key, events in self.legacy_batches.items()])
        changes = book.compact()
        changes.batches = dict(book.batches)  # every waiting batch, in the new form
        changes.removed_batches = []
        self._store(changes)
        self.legacy_users.clear()
        self.legacy_batches.clear()
        self.legacy_progress.clear()
        return book

    def _store(self, changes: Changes) -> None:
        if changes.snapshot is not None:
            self.snapshot.update(pickle.dumps(changes.snapshot, PICKLE_PROTOCOL))
        if changes.batches:
            self._put_all(self.batches, {key: pack(events)
                                         for key, events in changes.batches.items()})
        for batch_id in changes.removed_batches:
            self.batches.remove(batch_id)
        if changes.progress is not None:
            self.progress.update((changes.progress.compacted, changes.progress.advances,
                                  self.buckets))

    def _put_all(self, state: Any, values: dict[Any, Any]) -> None:
        put_all(state, values, self.process_mode)

    def _schedule(self, bucket: int, book: JourneyBook, ctx: Any) -> None:
        # A timer is registered only when it is earlier than the bucket's pending one: a
        # later one would fire in the same watermark step as it, for nothing (the first
        # call brings the book up to the watermark); the pending one, when it fires,
        # schedules what is due then.
        due = book.next_due()
        pending = self.timers.get(bucket)
        if due is not None and (pending is None or due < pending):
            ctx.timer_service().register_event_time_timer(due)
            self.timers[bucket] = due

    def process_element(self, value: Batch, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        bucket, _, payload = value
        book = self._book(bucket)
        watermark = ctx.timer_service().current_watermark()
        events, duplicates = self._first_copies(bucket, unpack(payload))
        for letter in duplicates:
            yield DUPLICATE_ORDERS, letter
        late, changes = book.add(events, watermark)
        if size(late):
            for event in records_of(late):
                yield LATE_EVENTS, _event_json(event, max(watermark, book.watermark))
        elif not duplicates:  # the batch is stored as it came (no need to encode it again)
            self._put_all(self.batches, {key: payload for key in changes.batches})
            changes.batches.clear()
        self._store(changes)
        self._schedule(bucket, book, ctx)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        bucket = ctx.get_current_key()
        book = self._book(bucket)
        watermark = max(timestamp, ctx.timer_service().current_watermark())
        advanced = book.advance(watermark)
        self._store(advanced.changes)
        for order_id in self._ledger(bucket).expire(watermark):
            self.seen_orders.remove(order_id)
        if self.timers.get(bucket, watermark) <= watermark:  # it fired, or fires now
            self.timers.pop(bucket, None)
        converted = advanced.closed.converted
        if len(converted):
            for message in table_messages.encode_chunks_bytes(CONVERSION_FIELDS,
                                                              conversion_rows(converted)):
                yield CONVERSIONS, message
            if self.models:
                yield from credit_messages.encode_chunks_bytes(
                    per_conversion_credit_rows(converted, self.models, self.params))
        if self.refit_period_ms and len(advanced.closed):
            # a fit needs no trace ids; pickled here and read once by the fit (the key
            # selector between passes bytes on)
            closed = ClosedJourneys(converted.without_traces(), advanced.closed.lapsed)
            yield CLOSED_JOURNEYS, pickle.dumps(closed_by_period(closed, self.refit_period_ms),
                                                PICKLE_PROTOCOL)
        self._schedule(bucket, book, ctx)


class FitDataDrivenModels(KeyedProcessFunction):  # type: ignore[misc]
    """One key for the whole stream: path counts of every closed journey, and the credits
    of each period's conversions from the models refitted when the period closes.

    Journeys arrive grouped by refit period (udfs.data_driven.Period: the conversions, and
    only counts per path of the journeys that did not convert) and wait in state until
    the watermark passes the period's end."""

    def __init__(self, models: tuple[str, ...], params: ModelParams,
                 process_mode: bool = False) -> None:
        self.models = models
        self.params = params
        self.process_mode = process_mode

    def open(self, runtime_context: RuntimeContext) -> None:
        collect_garbage_rarely()
        # One entry per distinct path, (row, path, conversions, non-conversions), so a
        # refit stores only the paths it counted (not all of them, tens of thousands, as
        # one value); the row keeps first-seen order across a restore.
        self.cells = runtime_context.get_map_state(
            MapStateDescriptor("path-cells", Types.STRING(), Types.PICKLED_BYTE_ARRAY()))
        self.legacy_counts = runtime_context.get_state(  # before: the whole dict, one value
            ValueStateDescriptor("path-counts", Types.PICKLED_BYTE_ARRAY()))
        # Closed journeys waiting for their period to end: one entry per arrival, keyed
        # "period end:arrival number", so a timer reads only the periods it settles
        # (reading one list of everything pending at every timer grew with the backlog).
        self.pending = runtime_context.get_map_state(
            MapStateDescriptor("pending-periods", Types.STRING(), Types.PICKLED_BYTE_ARRAY()))
        self.legacy_pending = runtime_context.get_list_state(  # before: one list of all
            ListStateDescriptor("closed-journeys", Types.PICKLED_BYTE_ARRAY()))
        self.waiting: dict[int, list[str]] | None = None  # period end -> its entries' keys
        self.arrivals = 0
        # The counts in memory between refits (one key: this operator alone writes them);
        # read from state once after a (re)start, not once per refit, and the refit's
        # index of their paths kept with them.
        self.path_counts: PathCounts | None = None

    def _counts(self) -> PathCounts:
        if self.path_counts is None:
            legacy = self.legacy_counts.value()
            if legacy:  # state written by an earlier version: moved into the map
                self.path_counts = PathCounts(legacy)
                self.path_counts.changed.update(legacy)
                self.legacy_counts.clear()
            else:
                self.path_counts = PathCounts({path: [conversions, non_conversions]
                                               for _, path, conversions, non_conversions
                                               in sorted(self.cells.values())})
        return self.path_counts

    def _store_counts(self, counts: PathCounts) -> None:
        if counts.changed:
            rows, cells = counts.rows(), counts.counts
            put_all(self.cells, {orjson.dumps(path).decode(): (rows[path], path, *cells[path])
                                 for path in counts.changed}, self.process_mode)
            counts.changed.clear()

    def _waiting(self) -> dict[int, list[str]]:
        """The pending entries' keys by period end, in arrival order (from the stored keys
        once after a (re)start)."""
        if self.waiting is None:
            keys = self.pending.keys()  # noqa: SIM118 (Flink's map state, not a dict)
            arrivals = sorted((int(number), int(end), key) for key in keys
                              for end, number in [key.split(":")])
            self.waiting = {}
            for _, end, key in arrivals:
                self.waiting.setdefault(end, []).append(key)
            self.arrivals = arrivals[-1][0] + 1 if arrivals else 0
            legacy = self.legacy_pending.get()
            if legacy:  # state written by an earlier version: moved into the map
                self._add([period_from_wire(period) for period in legacy])
                self.legacy_pending.clear()
        return self.waiting

    def _add(self, periods: list[Period]) -> None:
        waiting, entries = self._waiting(), {}
        for period in periods:
            key = f"{period[0]}:{self.arrivals}"
            self.arrivals += 1
            entries[key] = pickle.dumps(period, PICKLE_PROTOCOL)
            waiting.setdefault(period[0], []).append(key)
        put_all(self.pending, entries, self.process_mode)

    def process_element(self, payload: bytes, ctx: KeyedProcessFunction.Context) -> None:
        periods: list[Period] = pickle.loads(payload)
        self._add(periods)
        for end in {period[0] for period in periods}:
            ctx.timer_service().register_event_time_timer(end)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[bytes]:
        # Every period the watermark has passed is settled now, in period order (a replay
        # moves the watermark over many periods at once).
        watermark = max(timestamp, ctx.timer_service().current_watermark())
        waiting = self._waiting()
        due = sorted(end for end in waiting if end <= watermark)
        if not due:
            return
        counts = self._counts()
        for end in due:
            converted: list[ConvertedJourneys] = []
            unconverted: dict[tuple[str, ...], float] = {}
            for key in waiting.pop(end):
                _, journeys, paths = _pending_period(self.pending.get(key))
                self.pending.remove(key)
                converted.append(journeys)
                for path, count in paths.items():
                    unconverted[path] = unconverted.get(path, 0.0) + count
            yield from credit_messages.encode_chunks_bytes(conversion_credit_rows(
                counts, concat_converted(converted), unconverted, self.models,
                self.params))
        self._store_counts(counts)


def _pending_period(stored: bytes | PeriodWire) -> Period:
    """A pending entry: a pickled Period (earlier versions: the period's wire form)."""
    if isinstance(stored, bytes):
        return pickle.loads(stored)  # type: ignore[no-any-return]
    return period_from_wire(stored)


class RunAccounting(KeyedProcessFunction):  # type: ignore[misc]
    """Totals of COUNTS since the job began (kept in state, so a restart continues them);
    published every `every_ms` of processing time and when a bounded input ends."""

    def __init__(self, job: str, every_ms: int) -> None:
        self.job = job
        self.every_ms = every_ms

    def open(self, runtime_context: RuntimeContext) -> None:
        self.totals = runtime_context.get_state(
            ValueStateDescriptor("totals", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, counts: tuple[int, ...],
                        ctx: KeyedProcessFunction.Context) -> None:
        totals = self.totals.value()
        if totals is None:
            totals = (0,) * len(COUNTS)
            # the end of a bounded input brings the final watermark: the last report
            ctx.timer_service().register_event_time_timer(2**63 - 1)
            now = ctx.timer_service().current_processing_time()
            ctx.timer_service().register_processing_time_timer(now + self.every_ms)
        # totals an earlier version kept have fewer counts: the new ones start at 0
        totals = (*totals, *(0,) * (len(COUNTS) - len(totals)))
        self.totals.update(tuple(a + b for a, b in zip(totals, counts, strict=True)))

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[str]:
        final = ctx.time_domain() == TimeDomain.EVENT_TIME
        if not final:
            ctx.timer_service().register_processing_time_timer(timestamp + self.every_ms)
        yield accounting_json(self.job, self.totals.value() or (0,) * len(COUNTS), final)


def accounting_json(job: str, totals: tuple[int, ...], final: bool) -> str:
    row = dict(zip(COUNTS, totals, strict=True))
    row["processed"] = row["used"] - row["late"] - row["duplicate_orders"]
    return orjson.dumps({"job": job, **row, "final": final}).decode()


def build_pipeline(env: StreamExecutionEnvironment, config: StreamingJobConfig,
                   bootstrap: str) -> None:
    """ingest -> transform -> write, wired on `env`."""
    # event time and watermarks are made in the source, per Kafka partition
    raw = env.from_source(build_source(config, bootstrap, config.topics.spans,
                                       framed_max_future_ms=int(MAX_FUTURE_S * 1000)),
                          otlp_event_time(config), "otlp-spans").uid("source-otlp-spans")
    write(transform(raw, config), config, bootstrap)


class JobOutputs(NamedTuple):
    credits: DataStream
    dead_letters: DataStream
    late: DataStream
    conversions: DataStream
    accounting: DataStream


def transform(raw: DataStream, config: StreamingJobConfig) -> JobOutputs:
    slack_ms = int(config.event_time.max_out_of_orderness_s * 1000)
    decoded = raw.process(DecodeOtlp(config.input.encoding, config.topics.spans, slack_ms,
                                     config.flink.user_buckets)) \
        .name("decode-otlp").uid("decode-otlp")
    settings = config.computation
    per_conversion, data_driven = settings.per_conversion, settings.data_driven
    params = settings.params
    process_mode = config.flink.python_execution_mode == "process"
    attributed = (decoded
                  .key_by(lambda batch: batch[0], key_type=Types.INT())
                  .process(AttributeJourneys(settings.journey, per_conversion, params,
                                             settings.refit_every_ms if data_driven else None,
                                             process_mode, config.flink.user_buckets,
                                             settings.journey.duplicate_order_ms,
                                             config.topics.spans),
                           output_type=RESULT_TYPE)
                  .name("attribute-journeys").uid("attribute-journeys-by-bucket"))
    credits = attributed
    if data_driven:
        fitted = (attributed.get_side_output(CLOSED_JOURNEYS)
                  .key_by(lambda _: 0, key_type=Types.INT())
                  .process(FitDataDrivenModels(data_driven, params, process_mode),
                           output_type=RESULT_TYPE)
                  .name("fit-data-driven-models").uid("fit-data-driven-models-by-period"))
        credits = attributed.union(fitted)
    # late on decoding (behind its subtask's bound) or on arrival (behind the watermark);
    # the decoder counts its own in its accounting
    late_on_arrival = attributed.get_side_output(LATE_EVENTS)
    late = decoded.get_side_output(LATE_EVENTS).union(late_on_arrival)
    duplicates = attributed.get_side_output(DUPLICATE_ORDERS)
    accounting = (decoded.get_side_output(ACCOUNTING)
                  .union(late_on_arrival.map(lambda _: ONE_LATE,
                                             output_type=Types.PICKLED_BYTE_ARRAY())
                         .name("count-late").uid("count-late"),
                         duplicates.map(lambda _: ONE_DUPLICATE_ORDER,
                                        output_type=Types.PICKLED_BYTE_ARRAY())
                         .name("count-duplicates").uid("count-duplicate-orders"))
                  .key_by(lambda _: 0, key_type=Types.INT())
                  .process(RunAccounting("attribution",
                                         int(config.flink.accounting_every_s * 1000)),
                           output_type=Types.STRING())
                  .name("run-accounting").uid("run-accounting"))
    return JobOutputs(credits, decoded.get_side_output(DEAD_LETTERS).union(duplicates), late,
                      attributed.get_side_output(CONVERSIONS), accounting)


def write(outputs: JobOutputs, config: StreamingJobConfig, bootstrap: str) -> None:
    topics = config.topics
    outputs.credits.sink_to(build_sink(config, bootstrap, topics.credits, raw=True)) \
        .name("credits-sink").uid("credits-sink")
    outputs.dead_letters.sink_to(build_sink(config, bootstrap, topics.dead_letter)) \
        .name("dead-letter-sink").uid("dead-letter-sink")
    outputs.late.sink_to(build_sink(config, bootstrap, topics.late)) \
        .name("late-events-sink").uid("late-events-sink")
    outputs.conversions.sink_to(build_sink(config, bootstrap, topics.conversions, raw=True)) \
        .name("conversions-sink").uid("conversions-sink")
    outputs.accounting.sink_to(build_sink(config, bootstrap, topics.accounting)) \
        .name("accounting-sink").uid("accounting-sink")


def run_job(config: StreamingJobConfig, bootstrap: str, job_name: str = "seedance-attribution",
            env: StreamExecutionEnvironment | None = None) -> JobExecutionResult:
    """Run the attribution job (see `run_pipeline`)."""
    return run_pipeline(build_pipeline, config, bootstrap, job_name, env)
