"""The streaming attribution job on PyFlink: OTLP spans in Kafka -> per-touch credits.

ingest   KafkaSource (raw bytes) -> decode OTLP batches (one Python call per message)
transform  event-time watermarks -> key by user -> buffer until the watermark passes,
           then run the journey `step` in event-time order and credit each conversion
           with the per-conversion models; closed journeys (converting or not) go on to
           one keyed operator that keeps path counts and refits the data-driven models
           (shapley, markov) once per period (udfs/data_driven.py)
write    credits (a JSON array of rows per order, see pipelines/credit_messages.py), dead
         letters and late events to Kafka with exactly-once sinks

Every operator has a stable uid so that savepoints stay compatible across upgrades.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pyflink.common import (
    Duration,
    JobExecutionResult,
    Types,
    WatermarkStrategy,
)
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import (
    DataStream,
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
    TimeDomain,
)
from pyflink.datastream.state import ListStateDescriptor, ValueStateDescriptor

from pipelines import credit_messages
from pipelines.config import StreamingJobConfig
from pipelines.flink_kafka import (
    build_sink,
    build_source,
    run_pipeline,
)
from pipelines.otlp_codec import dead_letter_json, decode_spans
from schemas.records import Conversion, Credit, Touchpoint
from udfs.attribution import PER_CONVERSION_MODELS, credit_journey
from udfs.data_driven import DATA_DRIVEN_MODELS, PathCounts, credit_period, period_end
from udfs.journeys import (
    ClosedJourney,
    ConvertedJourney,
    JourneyConfig,
    JourneyState,
    close_stale,
    close_ts,
    event_order,
    expire,
    next_wake_up,
    step,
)
from udfs.models import ModelParams

log = logging.getLogger(__name__)

DEAD_LETTERS = OutputTag("dead-letters", Types.STRING())
LATE_EVENTS = OutputTag("late-events", Types.STRING())
CLOSED_JOURNEYS = OutputTag("closed-journeys", Types.PICKLED_BYTE_ARRAY())
CONVERSIONS = OutputTag("conversions", Types.STRING())
ACCOUNTING = OutputTag("accounting", Types.PICKLED_BYTE_ARRAY())

# What became of every input record (a span; a message that cannot be split into spans
# counts as one): used (a touch or an order) = processed + late; other = spans this job
# has no use for (GPU calls are the GPU cost job's, plain tracing spans nobody's).
COUNTS = ("messages", "records_in", "used", "other", "dead_lettered", "late")


Stamped = tuple[Touchpoint | Conversion, int]
"""An event and the stream's lateness bound when it was decoded (see DecodeOtlp)."""


class DecodeOtlp(ProcessFunction):  # type: ignore[misc]
    """One Kafka message (a whole OTLP batch) -> touchpoints and conversions.

    Each event leaves stamped with this subtask's bound "newest event time seen minus the
    allowed out-of-orderness". Flink's own watermark is emitted periodically, so in a
    burst it lags and lateness would depend on timing; the stamp applies the same rule
    per record, so the same input in the same partitions is classified the same way.
    """

    def __init__(self, encoding: str, source: str, max_out_of_orderness_ms: int) -> None:
        self.encoding = encoding
        self.source = source
        self.slack_ms = max_out_of_orderness_ms
        self.newest_ms = -(2**62)

    def process_element(self, value: bytes, ctx: ProcessFunction.Context) -> Iterator[Any]:
        decoded = decode_spans(value, self.encoding)
        for letter in decoded.dead_letters:
            yield DEAD_LETTERS, dead_letter_json(letter, self.source)
        used = 0
        for record in decoded.records:
            # GPU calls feed the cost job; this job attributes touches and orders.
            if isinstance(record, Touchpoint | Conversion):
                used += 1
                self.newest_ms = max(self.newest_ms, record.ts_ms)
                yield record, self.newest_ms - self.slack_ms
        records_in = decoded.spans or len(decoded.dead_letters)  # an unsplittable message: 1
        dead = len(decoded.dead_letters)
        yield ACCOUNTING, (1, records_in, used, records_in - used - dead, dead, 0)


class EventTime(TimestampAssigner):  # type: ignore[misc]
    def extract_timestamp(self, value: Stamped, record_timestamp: int) -> int:
        return value[0].ts_ms


def _event_json(event: Touchpoint | Conversion, watermark: int) -> str:
    body = {"type": "touchpoint" if isinstance(event, Touchpoint) else "conversion",
            **event._asdict(), "watermark_ms": watermark}
    return json.dumps(body, separators=(",", ":"))


def conversion_json(journey: ConvertedJourney) -> str:
    """One row per order: what the ROI job needs to bring compute cost to it (the traces of
    its journey) and to count it (stage, revenue)."""
    conversion = journey.conversion
    traces = list(dict.fromkeys(t for t in (conversion.trace_id,
                                            *(touch.trace_id for touch in journey.touches))
                                if t))
    return json.dumps({"order_id": conversion.order_id, "user_id": conversion.user_id,
                       "conversion_ts_ms": conversion.ts_ms, "revenue": conversion.revenue,
                       "currency": conversion.currency, "stage": journey.stage,
                       "touches": len(journey.touches), "trace_ids": traces},
                      separators=(",", ":"))


@dataclass
class UserState:
    """One user's keyed state, kept as a single value (one read and one write per event):
    the journey so far, events not yet stepped, and the earliest wake-up registered."""

    journey: JourneyState = field(default_factory=JourneyState)
    pending: list[Touchpoint | Conversion] = field(default_factory=list)
    wake_up: int | None = None


class AttributeJourneys(KeyedProcessFunction):  # type: ignore[misc]
    """Per user: hold events until the watermark passes them, then step in time order.

    Buffering makes results independent of arrival order within the allowed lateness;
    events older than the watermark on arrival go to the late side output. Only orders get
    a timer of their own; touches are stepped by the next order's timer or by the user's
    wake-up, which fires no later than the moment the earliest waiting touch could close
    its journey unconverted (earliest pending touch + lookback + 1) -- so journeys close
    at the same event time as with a timer per event, with a fraction of the timers.
    """

    def __init__(self, journey: JourneyConfig, models: tuple[str, ...],
                 params: ModelParams, emit_closed: bool) -> None:
        self.journey = journey
        self.models = models
        self.params = params
        self.emit_closed = emit_closed  # the data-driven models learn from every journey

    def open(self, runtime_context: RuntimeContext) -> None:
        self.user = runtime_context.get_state(
            ValueStateDescriptor("user", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: Stamped, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        event, stream_bound = value
        timers = ctx.timer_service()
        watermark = max(timers.current_watermark(), stream_bound)
        if event.ts_ms <= watermark:
            yield LATE_EVENTS, _event_json(event, watermark)
            return
        user: UserState = self.user.value() or UserState()
        user.pending.append(event)
        if isinstance(event, Conversion):
            timers.register_event_time_timer(event.ts_ms)
        else:
            deadline = event.ts_ms + self.journey.lookback_ms + 1
            if user.wake_up is None or deadline < user.wake_up:
                timers.register_event_time_timer(deadline)
                user.wake_up = deadline
        self.user.update(user)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[str]:
        user: UserState = self.user.value() or UserState()
        ready = sorted((e for e in user.pending if e.ts_ms <= timestamp), key=event_order)
        pending = [e for e in user.pending if e.ts_ms > timestamp]
        state = user.journey
        closed: list[ClosedJourney] = []
        for event in ready:
            state, journeys = step(state, event, self.journey)
            closed.extend(journeys)
        state, stale = close_stale(state, timestamp, self.journey)
        closed.extend(stale)
        for journey in closed:
            if isinstance(journey, ConvertedJourney):
                yield CONVERSIONS, conversion_json(journey)
                if self.models:
                    yield credit_messages.encode(credit_journey(journey, self.models,
                                                                self.params))
            if self.emit_closed:
                yield CLOSED_JOURNEYS, journey
        state = expire(state, timestamp, self.journey)
        # touches wait for their lookback to pass, the last order for its history, and
        # waiting touches for the moment they could close a journey unconverted
        needed = [t for t in (next_wake_up(state, self.journey),) if t is not None]
        waiting = [e.ts_ms for e in pending if isinstance(e, Touchpoint)]
        if waiting:
            needed.append(min(waiting) + self.journey.lookback_ms + 1)
        registered = user.wake_up if user.wake_up is not None and user.wake_up > timestamp \
            else None
        if needed and (registered is None or min(needed) < registered):
            registered = min(needed)
            ctx.timer_service().register_event_time_timer(registered)
        if registered is None and not pending:
            self.user.clear()
        else:
            self.user.update(UserState(state, pending, registered))


class FitDataDrivenModels(KeyedProcessFunction):  # type: ignore[misc]
    """One key for the whole stream: path counts of every closed journey, and the credits
    of each period's conversions from the models refitted when the period closes."""

    def __init__(self, models: tuple[str, ...], params: ModelParams, period_ms: int) -> None:
        self.models = models
        self.params = params
        self.period_ms = period_ms

    def open(self, runtime_context: RuntimeContext) -> None:
        self.counts = runtime_context.get_state(
            ValueStateDescriptor("path-counts", Types.PICKLED_BYTE_ARRAY()))
        self.pending = runtime_context.get_list_state(
            ListStateDescriptor("closed-journeys", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, journey: ClosedJourney,
                        ctx: KeyedProcessFunction.Context) -> None:
        self.pending.add(journey)
        ctx.timer_service().register_event_time_timer(
            period_end(close_ts(journey), self.period_ms))

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[str]:
        # Every period the watermark has passed is settled now, in period order: a replay
        # moves the watermark over many periods at once, and reading the pending list
        # once per jump (not once per period) keeps that linear.
        watermark = max(timestamp, ctx.timer_service().current_watermark())
        pending = list(self.pending.get() or [])
        by_period: dict[int, list[ClosedJourney]] = {}
        rest = []
        for journey in pending:
            end = period_end(close_ts(journey), self.period_ms)
            if end <= watermark:
                by_period.setdefault(end, []).append(journey)
            else:
                rest.append(journey)
        if not by_period:
            return
        if rest:
            self.pending.update(rest)
        else:
            self.pending.clear()
        counts = PathCounts(self.counts.value() or {})
        for end in sorted(by_period):
            by_order: dict[str, list[Credit]] = {}
            for credit in credit_period(counts, by_period[end], self.models, self.params):
                by_order.setdefault(credit.order_id, []).append(credit)
            for credits in by_order.values():
                yield credit_messages.encode(credits)
        self.counts.update(counts.counts)


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
        self.totals.update(tuple(a + b for a, b in zip(totals, counts, strict=True)))

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[str]:
        final = ctx.time_domain() == TimeDomain.EVENT_TIME
        if not final:
            ctx.timer_service().register_processing_time_timer(timestamp + self.every_ms)
        yield accounting_json(self.job, self.totals.value() or (0,) * len(COUNTS), final)


def accounting_json(job: str, totals: tuple[int, ...], final: bool) -> str:
    row = dict(zip(COUNTS, totals, strict=True))
    row["processed"] = row["used"] - row["late"]
    return json.dumps({"job": job, **row, "final": final}, separators=(",", ":"))


def build_pipeline(env: StreamExecutionEnvironment, config: StreamingJobConfig,
                   bootstrap: str) -> None:
    """ingest -> transform -> write, wired on `env`."""
    raw = env.from_source(build_source(config, bootstrap, config.topics.spans),
                          WatermarkStrategy.no_watermarks(),
                          "otlp-spans").uid("source-otlp-spans")
    write(transform(raw, config), config, bootstrap)


class JobOutputs(NamedTuple):
    credits: DataStream
    dead_letters: DataStream
    late: DataStream
    conversions: DataStream
    accounting: DataStream


def transform(raw: DataStream, config: StreamingJobConfig) -> JobOutputs:
    slack_ms = int(config.event_time.max_out_of_orderness_s * 1000)
    decoded = raw.process(DecodeOtlp(config.input.encoding, config.topics.spans, slack_ms)) \
        .name("decode-otlp").uid("decode-otlp")
    watermarks = (WatermarkStrategy
                  .for_bounded_out_of_orderness(Duration.of_millis(slack_ms))
                  .with_idleness(Duration.of_millis(int(config.event_time.idleness_s * 1000)))
                  .with_timestamp_assigner(EventTime()))
    journey = JourneyConfig(config.journey.lookback_days, config.journey.max_touches,
                            config.journey.winback_days, config.journey.history_days)
    attribution = config.attribution
    params = ModelParams(half_life_days=attribution.half_life_days,
                         markov_order=attribution.markov_order)
    per_conversion = tuple(m for m in attribution.models if m in PER_CONVERSION_MODELS)
    data_driven = tuple(m for m in attribution.models if m in DATA_DRIVEN_MODELS)
    attributed = (decoded
                  .assign_timestamps_and_watermarks(watermarks).name("event-time")
                  .uid("event-time")
                  .key_by(lambda stamped: stamped[0].user_id, key_type=Types.STRING())
                  .process(AttributeJourneys(journey, per_conversion, params, bool(data_driven)),
                           output_type=Types.STRING())
                  .name("attribute-journeys").uid("attribute-journeys"))
    credits = attributed
    if data_driven:
        fitted = (attributed.get_side_output(CLOSED_JOURNEYS)
                  .key_by(lambda _: 0, key_type=Types.INT())
                  .process(FitDataDrivenModels(data_driven, params,
                                               int(attribution.refit_every_s * 1000)),
                           output_type=Types.STRING())
                  .name("fit-data-driven-models").uid("fit-data-driven-models"))
        credits = attributed.union(fitted)
    late = attributed.get_side_output(LATE_EVENTS)
    accounting = (decoded.get_side_output(ACCOUNTING)
                  .union(late.map(lambda _: (0, 0, 0, 0, 0, 1),
                                  output_type=Types.PICKLED_BYTE_ARRAY())
                         .name("count-late").uid("count-late"))
                  .key_by(lambda _: 0, key_type=Types.INT())
                  .process(RunAccounting("attribution",
                                         int(config.flink.accounting_every_s * 1000)),
                           output_type=Types.STRING())
                  .name("run-accounting").uid("run-accounting"))
    return JobOutputs(credits, decoded.get_side_output(DEAD_LETTERS), late,
                      attributed.get_side_output(CONVERSIONS), accounting)


def write(outputs: JobOutputs, config: StreamingJobConfig, bootstrap: str) -> None:
    topics = config.topics
    outputs.credits.sink_to(build_sink(config, bootstrap, topics.credits)) \
        .name("credits-sink").uid("credits-sink")
    outputs.dead_letters.sink_to(build_sink(config, bootstrap, topics.dead_letter)) \
        .name("dead-letter-sink").uid("dead-letter-sink")
    outputs.late.sink_to(build_sink(config, bootstrap, topics.late)) \
        .name("late-events-sink").uid("late-events-sink")
    outputs.conversions.sink_to(build_sink(config, bootstrap, topics.conversions)) \
        .name("conversions-sink").uid("conversions-sink")
    outputs.accounting.sink_to(build_sink(config, bootstrap, topics.accounting)) \
        .name("accounting-sink").uid("accounting-sink")


def run_job(config: StreamingJobConfig, bootstrap: str, job_name: str = "seedance-attribution",
            env: StreamExecutionEnvironment | None = None) -> JobExecutionResult:
    """Run the attribution job (see `run_pipeline`)."""
    return run_pipeline(build_pipeline, config, bootstrap, job_name, env)
