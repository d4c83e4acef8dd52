"""bench/scale.py's driver: the attribution job's Python operators in one process, as
tests/unit/test_attribution_operators.py's `Job` drives them (the fakes of
tests/flink_fakes.py: keyed state pickled on write, timers fired as the watermark passes),
with the time of each operator counted, the keyed state's size, a checkpoint (every
operator's keyed state and timers, pickled) and a restore from it. The data-driven models
run in two phases, as in the job: the journeys' counts per path go to the fit (one key),
their converted journeys to the crediting operator by bucket (input 1), and the fit's
weights to the same bucket there (input 2), which yields the credits.

The population: the 200,000-user sample bench/streaming.py caches (plan_events + emit:
the OpenTelemetry SDK through KafkaSpanExporter, 500 spans per message, seed 11); a larger
one is copies of it, each copy's user and order ids renamed in place (same length, so the
protobuf stays valid), interleaved message by message: the same 45 days, more users, the
rate scaled with them.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterable, Iterator
from typing import Any

from pipelines.codec.frame import NO_TIME, frame, group_frames, newest_start_ms
from pipelines.flink.attribution.credit import CreditDataDriven
from pipelines.flink.attribution.decode import DecodeOtlp
from pipelines.flink.attribution.dedup import DedupOrders
from pipelines.flink.attribution.fit import FitDataDrivenModels
from pipelines.flink.attribution.journeys import AttributeJourneys
from pipelines.flink.attribution.support import (
    ACCOUNTING,
    CLOSED_JOURNEYS,
    CONVERSIONS,
    COUNTS,
    DEAD_LETTERS,
    LATE_EVENTS,
    ORDERS,
    PATH_COUNTS,
)
from tests.flink_fakes import FakeContext, Harness, KeyState, StateStore, Timers
from udfs.journeys import correction_reach_ms

BASE_USERS = 200_000
STAGES = ("decode", "journeys", "dedup", "fit", "credit")


def population(users: int, base: list[tuple[bytes, int | None]],
               base_users: int) -> Iterator[tuple[bytes, int | None]]:
    """`users` users' messages: `base` itself, or users / base_users copies of it, ids
    renamed per copy ("user-" -> "uNNN-", "order-" -> "oNNNN-"), interleaved."""
    copies, rest = divmod(users, base_users)
    if rest or not 1 <= copies <= 1000:
        raise ValueError(f"--users {users:,}: a multiple of {base_users:,}, at most 1000×")
    if copies == 1:
        yield from base
        return
    renames = [(b"user-", f"u{k:03d}-".encode(), b"order-", f"o{k:04d}-".encode())
               for k in range(copies)]
    for value, stamp in base:
        for user, user_as, order, order_as in renames:
            yield value.replace(user, user_as).replace(order, order_as), stamp


def state_bytes(state: StateStore | KeyState) -> int:
    """Keyed state as the fakes hold it: each value pickled (as written); a map's keys as
    Flink's serializers write a string (its UTF-8 bytes and a length byte) or a long."""
    keys = state.by_key.values() if isinstance(state, StateStore) else [state]
    total = 0
    for key_state in keys:
        for one in key_state.states.values():
            stored = one.stored
            if stored is None:
                continue
            if isinstance(stored, bytes):
                total += len(stored)
            elif isinstance(stored, list):
                total += sum(map(len, stored))
            else:  # a map
                total += sum(map(len, stored.values()))
                total += sum(len(k) + 1 if isinstance(k, str) else 8 for k in stored)
    return total


class OperatorJob:
    """One parallel instance of each operator (decode -> dedup -> journeys by bucket ->
    fit, one key -> credit by bucket) reading one partition, as the test's Job: the
    watermark is the partition's newest event time less the allowed out-of-orderness, moved
    after each group."""

    def __init__(self, config: Any, state: dict[str, Any] | None = None) -> None:
        settings = config.computation
        journey = settings.journey
        max_future_ms = int(config.event_time.max_future_s * 1000)
        reach = correction_reach_ms(journey.correction_ms, max_future_ms)
        buckets = config.flink.user_buckets
        self.slack_ms = int(config.event_time.max_out_of_orderness_s * 1000)
        self.decode = DecodeOtlp(config.input.encoding, "spans", buckets,
                                 config.event_time.max_future_s, journey.correction_ms)
        self.decode.open(None)
        refit = settings.refit_every_ms if settings.data_driven else None
        self.attribute = AttributeJourneys(journey, settings.per_conversion, settings.params,
                                           refit, False, buckets, reach)
        self.dedup = DedupOrders(buckets, journey.duplicate_order_ms, False, "spans")
        self.fit = FitDataDrivenModels(settings.data_driven, settings.params, False, reach,
                                       buckets)
        self.credit = CreditDataDriven(reach, False)
        state = state or {}
        self.store: StateStore = state.get("store", StateStore())
        self.timers: Timers = state.get("timers", Timers())
        self.dedup_store: StateStore = state.get("dedup_store", StateStore())
        self.dedup_timers: Timers = state.get("dedup_timers", Timers())
        self.fit_state: KeyState = state.get("fit_state", KeyState())
        self.fit_timers: Timers = state.get("fit_timers", Timers())
        self.credit_store: StateStore = state.get("credit_store", StateStore())  # by bucket
        # (it registers no timers: the fit's weights carry the watermark it needs)
        self.credit_timers: Timers = state.get("credit_timers", Timers())
        self.attributing = Harness(self.attribute, self.store, self.timers)
        self.deduping = Harness(self.dedup, self.dedup_store, self.dedup_timers)
        self.fitting = Harness(self.fit, self.fit_state, self.fit_timers)
        self.crediting = Harness(self.credit, self.credit_store, self.credit_timers)
        self.newest = NO_TIME
        self.offset = 0
        self.counts = [0] * len(COUNTS)
        self.outputs = {"credits": 0, "conversions": 0, "late": 0, "dead": 0}
        self.cpu = dict.fromkeys(STAGES, 0.0)  # process_time per operator

    # --- state -------------------------------------------------------------------------

    def _parts(self) -> dict[str, Any]:
        return {"store": self.store, "timers": self.timers, "dedup_store": self.dedup_store,
                "dedup_timers": self.dedup_timers, "fit_state": self.fit_state,
                "fit_timers": self.fit_timers, "credit_store": self.credit_store,
                "credit_timers": self.credit_timers}

    def state_bytes(self) -> dict[str, int]:
        return {"journeys": state_bytes(self.store), "dedup": state_bytes(self.dedup_store),
                "fit": state_bytes(self.fit_state), "credit": state_bytes(self.credit_store)}

    def checkpoint(self) -> bytes:
        """Every operator's keyed state and timers, serialised (the heap backend's full
        snapshot: every key's serialised values written out)."""
        return pickle.dumps(self._parts(), protocol=5)

    @classmethod
    def restored(cls, config: Any, checkpoint: bytes) -> OperatorJob:
        """New operators opened over a checkpoint (the source's in-memory newest event time
        starts afresh, as the reader's does)."""
        return cls(config, pickle.loads(checkpoint))

    # --- driving -----------------------------------------------------------------------

    def framed(self, messages: Iterable[tuple[bytes, int | None]]) -> tuple[bytes, int]:
        """What the source sends for a group of records (the JVM's part, not timed here):
        each framed with its arrival and the partition's newest event time before it."""
        framed = []
        for value, stamp in messages:
            event_time = newest_start_ms(value, 2**62)
            framed.append(frame(value, 0, self.offset, stamp or 0, event_time, self.newest))
            self.offset += 1
            self.newest = max(self.newest, event_time)
        return group_frames(framed), self.newest

    def feed(self, group: bytes, newest: int) -> None:
        """One group through the decoder, then the watermark moved on."""
        clock = time.process_time
        started = clock()
        decoded = list(self.decode.process_element(group, FakeContext(self.timers)))
        self.cpu["decode"] += clock() - started
        for out in decoded:
            tag = out[0]
            if tag is DEAD_LETTERS:
                self.outputs["dead"] += 1
            elif tag is LATE_EVENTS:
                self.outputs["late"] += 1
            elif tag is ACCOUNTING:
                self.counts = [a + b for a, b in zip(self.counts, out[1], strict=True)]
            elif tag is ORDERS:
                self._dedup(lambda value=out[1]: self.deduping.process(value, key=value[0]))
            else:
                self._journeys(lambda out=out: self.attributing.process(out, key=out[0]))
        if newest != NO_TIME:
            self.advance(newest - self.slack_ms - 1)

    def advance(self, watermark: int) -> None:
        """The watermark moves on: the duplicate check's timers first, then the journeys'
        and the fit's, in time order (the crediting operator has none)."""
        self.dedup_timers.watermark = max(self.dedup_timers.watermark, watermark)
        for timer in self.dedup_timers.due():
            self.dedup_timers.registered.discard(timer)
            self._dedup(lambda timer=timer: self.deduping.on_timer(*timer))
        self.timers.watermark = self.fit_timers.watermark = max(self.timers.watermark,
                                                                 watermark)
        self.credit_timers.watermark = self.timers.watermark
        while True:
            due, fit_due = self.timers.due(), self.fit_timers.due()
            if not due and not fit_due:
                return
            for timer in due:
                self.timers.registered.discard(timer)
                self._journeys(lambda timer=timer: self.attributing.on_timer(*timer))
            for timer in fit_due:
                self.fit_timers.registered.discard(timer)
                self._fit(lambda timer=timer: self.fitting.on_timer(*timer))

    def _timed(self, stage: str, call: Any) -> list[Any]:
        started = time.process_time()
        out = call()
        self.cpu[stage] += time.process_time() - started
        return out

    def _dedup(self, call: Any) -> None:
        for out in self._timed("dedup", call):
            if len(out) == 2:  # a dead letter (duplicate)
                self.outputs["dead"] += 1
            else:  # withdrawn or admitted orders to their bucket
                self._journeys(lambda out=out: self.attributing.process(out, key=out[0]))

    def _journeys(self, call: Any) -> None:
        for out in self._timed("journeys", call):
            if isinstance(out, tuple):
                tag, value = out
                if tag is CLOSED_JOURNEYS:  # kept by its bucket, to be credited there
                    self._credit(lambda value=value: self.crediting.process_input(
                        1, value, value[0]))
                elif tag is PATH_COUNTS:
                    self._fit(lambda value=value: self.fitting.process(value))
                elif tag is CONVERSIONS:
                    self.outputs["conversions"] += 1
                elif tag is LATE_EVENTS:
                    self.outputs["late"] += 1
                continue
            self.outputs["credits"] += 1  # a credit message, as the sink gets it

    def _fit(self, call: Any) -> None:
        """The fit's weights (or journeys an earlier version kept), to the bucket they
        name."""
        for out in self._timed("fit", call):
            self._credit(lambda out=out: self.crediting.process_input(2, out, out[0]))

    def _credit(self, call: Any) -> None:
        self.outputs["credits"] += len(self._timed("credit", call))

    @property
    def spans(self) -> int:
        return self.counts[COUNTS.index("records_in")]
