"""The attribution job's operators wired in one process the way Flink drives them
(tests.flink_fakes): the decoder, the duplicate check, the journeys, the fit and the
data-driven crediting, each one parallel instance over keyed state in pickling stand-ins,
event-time timers fired as the watermark passes them, a checkpoint a deep copy of every
key's state (tests/unit/test_attribution_operators.py, test_order_revisions.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

from pipelines.codec import credit_messages, table_messages
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
    DUPLICATE_ORDERS,
    LATE_EVENTS,
    ONE_DUPLICATE_ORDER,
    ORDERS,
    PATH_COUNTS,
)
from tests.flink_fakes import FakeContext, Harness, KeyState, StateStore, Timers
from tests.spans import stamp_of
from udfs.attribution.models import DATA_DRIVEN_MODELS, PER_CONVERSION_MODELS, ModelParams
from udfs.journeys.arrival import correction_reach_ms
from udfs.journeys.rules import JourneyConfig

SLACK_MS = 5 * 60_000  # the job's default allowed out-of-orderness
MAX_FUTURE_MS = 5 * 60_000  # ... and event_time.max_future_s
BUCKETS = 4
PER_CONVERSION = PER_CONVERSION_MODELS
DATA_DRIVEN = DATA_DRIVEN_MODELS
REFIT_MS = 6 * 3600 * 1000


class Job:
    """One parallel instance of each operator, reading one partition; a checkpoint is
    each operator's keyed state and timers (the watermark with them). The source's part
    is played as the job's source plays it (io.seedance.flink.FramedOtlpDeserializer,
    whose reference is pipelines.codec.frame): each message framed with its arrival (its
    record's timestamp, `Stamped`) and its partition's newest event time before it, and
    the watermark that time minus the allowed lateness; neither is kept in a checkpoint
    (the source reader keeps them in memory)."""

    def __init__(self, state: dict[str, Any] | None = None,
                 journey: JourneyConfig | None = None, revisions_ms: int = 0) -> None:
        journey = journey or JourneyConfig()
        self.decode = DecodeOtlp("auto", "spans", BUCKETS,
                                 correction_ms=journey.correction_ms)
        reach = correction_reach_ms(journey.correction_ms, MAX_FUTURE_MS)
        self.attribute = AttributeJourneys(journey, PER_CONVERSION, ModelParams(),
                                           REFIT_MS, process_mode=False, buckets=BUCKETS,
                                           reach_ms=reach, revisions_ms=revisions_ms)
        self.fit = FitDataDrivenModels(DATA_DRIVEN, ModelParams(), horizon_ms=reach,
                                       buckets=BUCKETS)
        self.dedup = DedupOrders(BUCKETS, JourneyConfig().duplicate_order_ms,
                                 process_mode=False, source="spans")
        state = copy.deepcopy(state) if state else {}
        self.store: StateStore = state.get("store", StateStore())  # keyed by bucket
        self.dedup_store: StateStore = state.get("dedup_store", StateStore())  # by order id
        self.dedup_timers: Timers = state.get("dedup_timers", Timers())
        self.fit_state: KeyState = state.get("fit_state", KeyState())  # one key
        self.credit_store: StateStore = state.get("credit_store", StateStore())  # by bucket
        # both operators' watermark is the job's (the timers' watermark)
        self.timers: Timers = state.get("timers", Timers())
        self.fit_timers: Timers = state.get("fit_timers", Timers())
        self.partition_newest = NO_TIME  # of the partition fed last
        self.newest_of: dict[int, int] = {}  # each partition's newest event time
        self.offset = 0
        self.attributing = Harness(self.attribute, self.store, self.timers)
        self.deduping = Harness(self.dedup, self.dedup_store, self.dedup_timers)
        self.fitting = Harness(self.fit, self.fit_state, self.fit_timers)
        self.crediting = Harness(CreditDataDriven(reach, revisions_ms=revisions_ms),
                                 self.credit_store, Timers())
        self.credit_messages: list[bytes] = []  # as the credits topic gets them
        self.conversions = 0
        self.conversion_messages: list[bytes] = []  # as the conversions topic gets them
        self.late = 0
        self.dead = 0
        self.duplicates: list[dict[str, Any]] = []
        self.counts = [0] * len(COUNTS)
        self.batches = 0  # bucket batches from the decoder to the journeys

    def checkpoint(self) -> dict[str, Any]:
        return copy.deepcopy({"store": self.store, "fit_state": self.fit_state,
                              "credit_store": self.credit_store,
                              "timers": self.timers, "fit_timers": self.fit_timers,
                              "dedup_store": self.dedup_store,
                              "dedup_timers": self.dedup_timers})

    def feed(self, message: bytes | None, partition: int = 0) -> None:
        """One message of `partition`; the watermark follows the newest of all partitions
        (as when the others are idle: the adversary's watermark)."""
        self.feed_group([message], partition)

    def feed_group(self, messages: list[bytes | None], partition: int = 0) -> None:
        """Messages of `partition` grouped as io.seedance.flink.FrameBatches groups them:
        one call of the decoder, the watermark moved on after the group."""
        framed = []
        for message in messages:
            event_time = newest_start_ms(message, 2**62)
            before = self.newest_of.get(partition, NO_TIME)
            framed.append(frame(message, partition, self.offset, stamp_of(message) or 0,
                                event_time, before))
            self.offset += 1
            self.newest_of[partition] = max(before, event_time)
        self.partition_newest = max(self.newest_of.values())
        for out in self.decode.process_element(group_frames(framed),
                                               FakeContext(self.timers)):
            if out[0] is DEAD_LETTERS:
                self.dead += 1
            elif out[0] is LATE_EVENTS:
                self.late += 1
            elif out[0] is ACCOUNTING:
                self.counts = [a + b for a, b in zip(self.counts, out[1], strict=True)]
            elif out[0] is ORDERS:
                self._collect_dedup(self.deduping.process(out[1], key=out[1][0]))
            else:
                bucket, _, _ = out
                self.batches += 1
                self._collect(self.attributing.process(out, key=bucket))
        if self.partition_newest != NO_TIME:
            self.advance(self.partition_newest - SLACK_MS - 1)

    def advance(self, watermark: int) -> None:
        """The watermark moves on: every timer at or before it fires, in time order."""
        # the duplicate check is upstream of the journeys: its timers fire first, and what
        # they release reaches the journeys before the watermark does
        self.dedup_timers.watermark = max(self.dedup_timers.watermark, watermark)
        for timer in self.dedup_timers.due():
            self.dedup_timers.registered.discard(timer)
            self._collect_dedup(self.deduping.on_timer(*timer))
        self.timers.watermark = self.fit_timers.watermark = max(self.timers.watermark,
                                                                 watermark)
        while True:
            due, fit_due = self.timers.due(), self.fit_timers.due()
            if not due and not fit_due:
                return
            for timer in due:
                self.timers.registered.discard(timer)
                self._collect(self.attributing.on_timer(*timer))
            for timer in fit_due:
                self.fit_timers.registered.discard(timer)
                self._collect_fit(self.fitting.on_timer(*timer))

    def _collect_dedup(self, outputs: Iterable[Any]) -> None:
        """The duplicate check's output: first copies on to their journeys' bucket."""
        for out in outputs:
            if len(out) == 2:
                self._collect([out])
            else:
                self._collect(self.attributing.process(out, key=out[0]))

    def _collect(self, outputs: Iterable[Any]) -> None:
        for out in outputs:
            if isinstance(out, tuple):
                tag, value = out
                if tag is CLOSED_JOURNEYS:  # kept by the bucket, to be credited there
                    self._collect_credits(self.crediting.process_input(1, value, value[0]))
                elif tag is PATH_COUNTS:
                    self._collect_fit(self.fitting.process(value))
                elif tag is CONVERSIONS:
                    self.conversions += 1
                    self.conversion_messages.append(table_messages.unkeyed(value))
                elif tag is LATE_EVENTS:
                    self.late += 1
                elif tag is DUPLICATE_ORDERS:  # counted as the job's graph counts them
                    self.duplicates.append(json.loads(value))
                    self.counts = [a + b for a, b in zip(self.counts, ONE_DUPLICATE_ORDER,
                                                         strict=True)]
                continue
            self.credit_messages.append(table_messages.unkeyed(out))

    def _collect_fit(self, outputs: Iterable[tuple[Any, ...]]) -> None:
        """The fit's weights, to the bucket they name."""
        for out in outputs:
            self._collect_credits(self.crediting.process_input(2, out, out[0]))

    def _collect_credits(self, outputs: Iterable[bytes]) -> None:
        for out in outputs:
            self.credit_messages.append(table_messages.unkeyed(out))

    @property
    def credits(self) -> list[dict[str, Any]]:
        """The credit rows that hold: each conversion's latest under each model."""
        return credit_messages.latest(self.credit_messages)


def run(job: Job, messages: list[bytes], group: int = 1) -> Job:
    for at in range(0, len(messages), group):
        job.feed_group(messages[at:at + group])
    return job


def finish(job: Job) -> Job:
    job.advance(2**63 - 1)
    return job


def keyed(credits: list[dict[str, Any]]) -> dict[tuple[Any, ...], float]:
    return {(c["model"], c["order_id"], c["touch_index"], c["channel"]): c["revenue"]
            for c in credits}


