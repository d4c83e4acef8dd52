"""The attribution job's keyed heart: per bucket of users, a journey book advanced by the
watermark; the conversions a step closes are credited by the per-conversion models, and the
closed journeys go on to the data-driven models in two parts: the converted ones to be
credited with their bucket (credit.py), their counts per path to the fit (fit.py)."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterator
from typing import Any

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from pipelines.codec import credit_messages, table_messages
from pipelines.flink.attribution.legacy_state import LegacyBookState
from pipelines.flink.attribution.revisions import OrderRevisions
from pipelines.flink.attribution.support import (
    ADMITTED,
    BEHIND_WATERMARK,
    CLOSED_JOURNEYS,
    CONVERSIONS,
    LATE_EVENTS,
    PATH_COUNTS,
    PICKLE_PROTOCOL,
    REVISED,
    STATE_EXPIRED,
    WITHDRAWN,
    Batch,
    collect_garbage_rarely,
    event_json,
    put_all,
)
from schemas import rows
from schemas.events import (
    EMPTY,
    EventColumns,
    order_columns,
    pack,
    records_of,
    size,
    unpack,
    without_orders,
)
from udfs.attribution import (
    CountPeriod,
    ModelParams,
    Period,
    PeriodRuns,
    closed_by_period,
    closed_period_runs,
    converted_periods,
    per_conversion_credit_rows,
    period_counts,
    split_runs,
)
from udfs.journeys import (
    Changes,
    ClosedJourneys,
    ConvertedJourneys,
    CorrectingBook,
    Correction,
    JourneyBook,
    JourneyConfig,
    Progress,
)
from udfs.orders import OrderRevision

FINAL = 2**63 - 1

CONVERSION_FIELDS = rows.CONVERSION.names


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

    Every event comes from the decoder; the duplicate check (pipelines/flink/
    dedup_orders.py) withdraws the order copies that do not count (a WITHDRAWN batch)
    before the watermark that would step them comes, and brings the orders that were
    behind the watermark once it admits them (an ADMITTED batch). Events newer than the
    book's watermark wait in it; those behind it but within the correction horizon
    correct what they change at once (the conversions and credits of the changed
    journeys are reported again, the data-driven models get the journeys retracted and
    added: udfs/journeys/corrections.py); older ones go to the late side output. One timer per
    bucket, at the earliest time the book has something to do (a waiting event, a
    journey that could close unconverted, an order history running out), brings the
    whole bucket up to the watermark in one call. State per bucket: the settled book (at
    the horizon behind the watermark) at its last full compaction (one value:
    udfs.journeys.book.Snapshot, pickled) and the users each compaction since changed (a
    map of udfs.journeys.Overlay by their order), the batches since (map, by batch id) and its
    progress (its watermarks since, and the live watermark); the in-memory books are
    rebuilt from them after a restart. State an earlier version stored (a map of users'
    journey states) is read once and moved.
    """

    def __init__(self, journey: JourneyConfig, models: tuple[str, ...],
                 params: ModelParams, refit_period_ms: int | None, process_mode: bool,
                 buckets: int | None = None, reach_ms: int | None = None,
                 revisions_ms: int = 0) -> None:
        self.journey = journey
        # with an orders change stream: how long reported orders are kept for their changes
        self.revisions_ms = revisions_ms
        # how far behind the watermark an event may still correct (udfs.journeys.arrival.
        # correction_reach_ms; by default the horizon itself)
        self.horizon_ms = journey.correction_ms if reach_ms is None else reach_ms
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
        # the compactions since the snapshot: only the users each changed (by seq)
        self.overlays = runtime_context.get_map_state(
            MapStateDescriptor("book-overlays", Types.LONG(), Types.PICKLED_BYTE_ARRAY()))
        self.batches = runtime_context.get_map_state(
            MapStateDescriptor("book-batches", Types.LONG(), Types.PICKLED_BYTE_ARRAY()))
        self.progress = runtime_context.get_state(
            ValueStateDescriptor("book-progress", Types.PICKLED_BYTE_ARRAY()))
        self.legacy = LegacyBookState(runtime_context)  # as earlier versions stored the book
        self.books: dict[int, CorrectingBook] = {}
        self.timers: dict[int, int] = {}  # bucket -> the timer last registered
        # duplicate copies to withdraw that had not arrived yet (Counter of order rows)
        self.unmatched = runtime_context.get_state(
            ValueStateDescriptor("orders-to-withdraw", Types.PICKLED_BYTE_ARRAY()))
        self.unmatched_by_bucket: dict[int, Counter[tuple]] = {}
        # how many CLOSED_JOURNEYS messages the bucket has sent (their sequence numbers)
        self.sent = runtime_context.get_state(
            ValueStateDescriptor("closed-journeys-sent", Types.LONG()))
        self.revisions = OrderRevisions(runtime_context, self.revisions_ms,
                                        self.process_mode)

    def _book(self, bucket: int) -> CorrectingBook:
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
            if stored is None and self.legacy.present():
                book = self._moved_from_legacy_state()
            else:
                snapshot = self.snapshot.value()
                # the live watermark, stored since corrections (before: the book's own)
                live = stored[3] if stored is not None and len(stored) > 3 else None
                book = CorrectingBook.restore(
                    self.journey, self.horizon_ms, live,
                    Progress(stored[0], tuple(stored[1])) if stored else None,
                    pickle.loads(snapshot) if snapshot is not None else None,
                    [(key, unpack(events)) for key, events in self.batches.items()],
                    [pickle.loads(overlay) for overlay in self.overlays.values()]
                    if snapshot is not None else [])
            self.books[bucket] = book
        return book

    def _moved_from_legacy_state(self) -> CorrectingBook:
        old = self.legacy.book(self.journey)
        changes = old.compact()
        changes.batches = dict(old.batches)  # every waiting batch, in the new form
        changes.removed_batches = []
        book = CorrectingBook(self.journey, self.horizon_ms, settled=old,
                              live=None if self.horizon_ms else old)
        if self.horizon_ms:  # the old book's state, as of its watermark, in both
            book.live = JourneyBook.restore(self.journey, changes.progress, changes.snapshot,
                                            list(changes.batches.items()), keeps_log=False)
        self._store(changes, book)
        self.legacy.clear()
        return book

    def _store(self, changes: Changes, book: CorrectingBook, advanced: bool = False) -> None:
        if changes.snapshot is not None:
            self.snapshot.update(pickle.dumps(changes.snapshot, PICKLE_PROTOCOL))
            self.overlays.clear()
        if changes.overlay is not None:
            self.overlays.put(changes.overlay.seq,
                              pickle.dumps(changes.overlay, PICKLE_PROTOCOL))
        if changes.batches:
            self._put_all(self.batches, {key: pack(events)
                                         for key, events in changes.batches.items()})
        for batch_id in changes.removed_batches:
            self.batches.remove(batch_id)
        # with a horizon the live watermark moves without the settled book: kept beside it
        if changes.progress is not None or (advanced and book.live is not book.settled):
            progress = book.settled.progress
            self.progress.update((progress.compacted, progress.advances, self.buckets,
                                  book.watermark))

    def _put_all(self, state: Any, values: dict[Any, Any]) -> None:
        put_all(state, values, self.process_mode)

    def _schedule(self, bucket: int, book: CorrectingBook, ctx: Any) -> None:
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
        bucket, newest_ts, payload = value
        book = self._book(bucket)
        if newest_ts == WITHDRAWN:
            self._withdraw(bucket, book, Counter(pickle.loads(payload)))
            return
        if newest_ts == REVISED:  # orders changed (refunded, amounts corrected)
            yield from self._revised(bucket, payload)
            return
        if newest_ts == ADMITTED:  # orders the duplicate check held, then admitted
            events: EventColumns = EventColumns(EMPTY.touches,
                                                order_columns(pickle.loads(payload)))
            as_came = False
        else:
            events, as_came = unpack(payload), True
        unmatched = self._unmatched(bucket)
        if unmatched:  # a copy turned down before it came here
            kept = without_orders(events, unmatched)
            if kept is not None:
                events, as_came = kept, False
                self._keep_unmatched(bucket, +unmatched)
        watermark = ctx.timer_service().current_watermark()
        added = book.add(events, watermark)
        changes = added.changes
        if size(added.late):
            # with a horizon these arrived in time (the decoder set the others apart): lost
            reason = STATE_EXPIRED if self.horizon_ms else BEHIND_WATERMARK
            bound = max(watermark, book.watermark) - self.horizon_ms
            for event in records_of(added.late):
                yield LATE_EVENTS, event_json(event, bound, reason)
        elif as_came and size(events) and len(changes.batches) == 1 and size(
                next(iter(changes.batches.values()))) == size(events):
            # the batch is stored as it came (no need to encode it again)
            self._put_all(self.batches, {key: payload for key in changes.batches})
            changes.batches.clear()
        self._store(changes, book)
        if added.correction:
            yield from self._corrected(bucket, added.correction)
        self._schedule(bucket, book, ctx)

    def _corrected(self, bucket: int, correction: Correction) -> Iterator[Any]:
        """What late events changed: the changed conversions and their per-conversion
        credits again (each replaces its earlier version: same order, same model), and the
        closed journeys retracted and added to the fit."""
        yield from self._reported(bucket, correction.added.converted)
        if self.refit_period_ms:
            period = self.refit_period_ms
            retracted = closed_by_period(_for_fit(correction.retracted), period)
            added = closed_by_period(_for_fit(correction.added), period)
            yield from self._to_fit(bucket, None, (retracted, added))

    def _to_fit(self, bucket: int, runs: PeriodRuns | None,
                correction: tuple[list[Period], list[Period]] | None = None
                ) -> Iterator[Any]:
        """Closed journeys for the data-driven models, in two parts: the converted ones
        stay with the bucket, to be credited here when their period's weights come
        (CLOSED_JOURNEYS, numbered), and the counts per path go to the fit (PATH_COUNTS,
        with the number of the bucket's last message: the fit's weights wait for it)."""
        seq = self.sent.value() or 0
        retracted_counts: list[CountPeriod] = []
        payload: PeriodRuns | tuple[list[Period], list[Period]]
        if runs is not None:
            kept, counts = split_runs(runs)
            ends, payload = kept[0], kept
        else:
            assert correction is not None
            retracted, added = correction
            counts, retracted_counts = period_counts(added), period_counts(retracted)
            payload = (converted_periods(retracted), converted_periods(added))
            ends = sorted({end for periods in payload for end, *_ in periods})
        if ends:
            seq += 1
            self.sent.update(seq)
            yield CLOSED_JOURNEYS, (bucket, seq, "n" if runs is not None else "c", ends,
                                    pickle.dumps(payload, PICKLE_PROTOCOL))
        yield PATH_COUNTS, (bucket, seq, counts, retracted_counts)

    def _reported(self, bucket: int, converted: ConvertedJourneys) -> Iterator[Any]:
        """Conversions and per-conversion credits, keyed by the bucket: every version of
        an order's rows goes to one partition, in order (a reader keeps the last)."""
        if not len(converted):
            return
        conversions = conversion_rows(converted)
        credits = per_conversion_credit_rows(converted, self.models, self.params) \
            if self.models else []
        if self.revisions.active:  # each order with the revenue it has now
            conversions, credits = self.revisions.reported(conversions, credits)
        yield from self._emit(bucket, conversions, credits)

    def _emit(self, bucket: int, conversions: list[tuple[Any, ...]],
              credits: list[tuple[Any, ...]]) -> Iterator[Any]:
        key = (bucket,)
        for message in table_messages.encode_chunks_bytes(CONVERSION_FIELDS, conversions):
            yield CONVERSIONS, table_messages.keyed(key, message)
        for message in credit_messages.encode_chunks_bytes(credits):
            yield table_messages.keyed(key, message)

    def _revised(self, bucket: int, payload: bytes) -> Iterator[Any]:
        """Changes to orders of the bucket: the conversions and per-conversion credits of
        those reported already written again, with the revenue each has now; the changes
        go on to the data-driven crediting, which does the same for its models' rows."""
        revisions = [OrderRevision(*revision) for revision in pickle.loads(payload)]
        yield from self._emit(bucket, *self.revisions.revise(revisions))
        if self.refit_period_ms:
            yield CLOSED_JOURNEYS, (bucket, 0, "r", [], payload)

    def _unmatched(self, bucket: int) -> Counter[tuple]:
        """The bucket's withdrawals still waiting for their copy: kept in memory, read
        from state once per bucket since (re)start (not once per batch)."""
        unmatched = self.unmatched_by_bucket.get(bucket)
        if unmatched is None:
            stored = self.unmatched.value()
            unmatched = pickle.loads(stored) if stored is not None else Counter()
            self.unmatched_by_bucket[bucket] = unmatched
        return unmatched

    def _keep_unmatched(self, bucket: int, unmatched: Counter[tuple]) -> None:
        self.unmatched_by_bucket[bucket] = unmatched
        self.unmatched.update(pickle.dumps(unmatched, PICKLE_PROTOCOL))

    def _withdraw(self, bucket: int, book: CorrectingBook, copies: Counter[tuple]) -> None:
        """Duplicates the order check turned down: out of the waiting batches, in memory
        and stored (a stored batch may hold more than the waiting part: the part already
        stepped, replayed after a restore); copies not here yet wait for their batch."""
        for batch_id, taken in book.withdraw_orders(copies).items():
            stored = self.batches.get(batch_id)
            whole = None if stored is None else without_orders(unpack(stored), taken)
            if whole is not None and size(whole):
                self._put_all(self.batches, {batch_id: pack(whole)})
            elif whole is not None:
                self.batches.remove(batch_id)
        if +copies:
            self._keep_unmatched(bucket, self._unmatched(bucket) + copies)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        bucket = ctx.get_current_key()
        book = self._book(bucket)
        watermark = max(timestamp, ctx.timer_service().current_watermark())
        advanced = book.advance(watermark)
        self._store(advanced.changes, book, advanced=True)
        unmatched = self._unmatched(bucket)
        if unmatched:  # a copy at or before the watermark would come late: not waited for
            self._keep_unmatched(bucket, Counter(
                {row: n for row, n in unmatched.items() if row[1] > watermark}))
        if self.timers.get(bucket, watermark) <= watermark:  # it fired, or fires now
            self.timers.pop(bucket, None)
        yield from self._reported(bucket, advanced.closed.converted)
        if watermark < FINAL:
            self.revisions.expire(bucket, watermark)
        if self.refit_period_ms and len(advanced.closed):
            yield from self._to_fit(bucket, closed_period_runs(_for_fit(advanced.closed),
                                                               self.refit_period_ms))
        self._schedule(bucket, book, ctx)


def _for_fit(closed: ClosedJourneys) -> ClosedJourneys:
    """What a fit needs of closed journeys: no trace ids."""
    return ClosedJourneys(closed.converted.without_traces(), closed.lapsed)
