"""The experiments job on PyFlink: who saw which variant, and what they bought after.

ingest   the spans topic (framed by the source, per-partition event time, as the
         attribution job reads it) for feature-flag exposures (pipelines/codec/exposures.py),
         and the attribution job's `conversions` topic (read_committed) for orders
assign   keyed by user: events wait until the watermark passes them, then go in event-time
         order (an exposure before an order of the same millisecond). A user keeps the
         variant of their first exposure to a flag; each of their later orders counts for
         every flag they were exposed to before it
write    `experiment_exposures` (one row per user and flag, at the first exposure) and
         `experiment_conversions` (one row per order and flag), exactly-once; an exposure
         span that breaks the contract goes to the spans' dead-letter topic with the reason

The strategy table (ROI per variant with its interval, the difference to control, its
significance, the marginal cost, sample-ratio mismatch) is computed from these rows and
the ROI job's per-order costs by `seedance experiments` (udfs/experiments/statistics.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import orjson
from pyflink.common import Duration, JobExecutionResult, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import (
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
)
from pyflink.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)

from pipelines.codec import table_messages
from pipelines.codec.dead_letters import dead_letter_json
from pipelines.codec.exposures import decode_exposures
from pipelines.codec.frame import unframe
from pipelines.codec.otlp import MAX_FUTURE_S
from pipelines.flink.jobs import EXPERIMENTS
from pipelines.flink.runtime.kafka import (
    build_sink,
    build_source,
    from_kafka,
    keyed_line,
    otlp_event_time,
    run_pipeline,
)
from pipelines.settings.job_config import StreamingJobConfig
from udfs.periods import DAY_MS

log = logging.getLogger(__name__)

DEAD_LETTERS = OutputTag("experiment-dead-letters", Types.STRING())
CONVERSIONS = OutputTag("experiment-conversions", Types.STRING())

# Between the operators: (user_id, ts_ms, kind, payload)
#   exposure    (flag_key, variant, trace_id)
#   conversion  (order_id, revenue, currency, stage)
Item = tuple[str, int, str, tuple[Any, ...]]
_KIND_ORDER = {"exposure": 0, "conversion": 1}  # at one millisecond: seen, then bought


class DecodeExposures(ProcessFunction):  # type: ignore[misc]
    """One framed spans record -> its exposures. Anything else in it is other jobs'."""

    def __init__(self, encoding: str, source: str, max_future_s: float = MAX_FUTURE_S) -> None:
        self.encoding = encoding
        self.source = source
        self.max_future_s = max_future_s

    def process_element(self, value: bytes, ctx: ProcessFunction.Context) -> Iterator[Any]:
        try:
            record = unframe(value)
        except ValueError:
            return  # the attribution job dead-letters what cannot be read
        decoded = decode_exposures(record.value, self.encoding, self.max_future_s)
        for letter in decoded.dead_letters:
            yield DEAD_LETTERS, dead_letter_json(letter, self.source, record.partition,
                                                 record.offset)
        for exposure in decoded.exposures:
            yield (exposure.user_id, exposure.ts_ms, "exposure",
                   (exposure.flag_key, exposure.variant, exposure.trace_id))


class DecodeConversions(ProcessFunction):  # type: ignore[misc]
    """A conversions table message -> one item per order with a user (an anonymous order
    cannot have been exposed)."""

    def process_element(self, value: bytes, ctx: ProcessFunction.Context) -> Iterator[Item]:
        try:
            rows = table_messages.decode(value)
        except Exception:  # noqa: BLE001 - the attribution job wrote it; never stop on one
            log.exception("an unreadable conversions message was skipped")
            return
        for row in rows:
            if row["user_id"]:
                yield (row["user_id"], int(row["conversion_ts_ms"]), "conversion",
                       (row["order_id"], float(row["revenue"]), row["currency"],
                        row["stage"]))


class ItemTime(TimestampAssigner):  # type: ignore[misc]
    def extract_timestamp(self, value: Item, record_timestamp: int) -> int:
        return value[1]


class AssignVariants(KeyedProcessFunction):  # type: ignore[misc]
    """Per user: the variant of their first exposure to each flag, and their orders after
    it. State: the assignments (flag -> variant, first exposure) and the events waiting
    for the watermark; all of it is dropped `retention_ms` after the user's last event."""

    def __init__(self, retention_ms: int) -> None:
        self.retention_ms = retention_ms

    def open(self, runtime_context: RuntimeContext) -> None:
        pickled = Types.PICKLED_BYTE_ARRAY()
        self.assigned = runtime_context.get_map_state(
            MapStateDescriptor("assigned", Types.STRING(), pickled))
        self.waiting = runtime_context.get_list_state(ListStateDescriptor("waiting", pickled))
        self.last_seen = runtime_context.get_state(
            ValueStateDescriptor("last-seen", Types.LONG()))

    def process_element(self, item: Item, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        timers = ctx.timer_service()
        ts = item[1]
        self._touch(ts, timers)
        if ts <= timers.current_watermark():
            # behind the watermark on arrival: taken as it comes (its place in event time
            # is past; an exposure this late can still be the user's first)
            yield from self._handle(ctx.get_current_key(), [item])
            return
        self.waiting.add(item)
        timers.register_event_time_timer(ts)

    def _touch(self, ts: int, timers: Any) -> None:
        last = self.last_seen.value()
        if last is None or ts > last:
            if last is not None:  # one retention timer per user: the newest event's
                timers.delete_event_time_timer(last + self.retention_ms)
            self.last_seen.update(ts)
            timers.register_event_time_timer(ts + self.retention_ms)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        watermark = max(timestamp, ctx.timer_service().current_watermark())
        waiting = list(self.waiting.get() or [])
        # ties: an exposure before an order; two exposures of one millisecond in variant
        # order (udfs.experiments.statistics.first_exposures' rule)
        due = sorted((item for item in waiting if item[1] <= watermark),
                     key=lambda item: (item[1], _KIND_ORDER[item[2]], item[3][:2]))
        if due:
            rest = [item for item in waiting if item[1] > watermark]
            self.waiting.update(rest)
            yield from self._handle(ctx.get_current_key(), due)
        last = self.last_seen.value()
        if last is not None and last + self.retention_ms <= watermark \
                and not list(self.waiting.get() or []):
            self.assigned.clear()
            self.last_seen.clear()

    def _handle(self, user: str, items: list[Item]) -> Iterator[Any]:
        for _, ts, kind, payload in items:
            if kind == "exposure":
                flag, variant, trace_id = payload
                if self.assigned.contains(flag) and self.assigned.get(flag)[1] <= ts:
                    continue  # a user keeps the variant of their first exposure
                # first, or earlier than the one kept (it arrived behind the watermark):
                # this is the first exposure (the warehouse keeps the earliest row)
                self.assigned.put(flag, (variant, ts))
                yield keyed_line((flag, user), orjson.dumps({
                    "flag_key": flag, "variant": variant, "user_id": user,
                    "first_exposure_ms": ts, "trace_id": trace_id}).decode())
                continue
            order_id, revenue, currency, stage = payload
            for flag, (variant, exposed_at) in self.assigned.items():
                if exposed_at <= ts:
                    yield CONVERSIONS, keyed_line((flag, order_id), orjson.dumps({
                        "flag_key": flag, "variant": variant, "user_id": user,
                        "order_id": order_id, "conversion_ts_ms": ts, "revenue": revenue,
                        "currency": currency, "stage": stage,
                        "first_exposure_ms": exposed_at}).decode())


def build_experiments_pipeline(env: StreamExecutionEnvironment, config: StreamingJobConfig,
                               bootstrap: str) -> None:
    topics = config.topics
    spans = from_kafka(
        env, build_source(config, bootstrap, topics.spans, "-experiments",
                          framed_max_future_ms=int(config.event_time.max_future_s * 1000)),
        otlp_event_time(config, bootstrap, topics.spans, "-experiments"), "experiment-spans",
        "experiments-source-spans")
    exposures = spans.process(DecodeExposures(config.input.encoding, topics.spans,
                                              config.event_time.max_future_s)) \
        .name("decode-exposures").uid("experiments-decode-exposures")
    slack_ms = int(config.event_time.max_out_of_orderness_s * 1000)
    orders = (env.from_source(build_source(config, bootstrap, topics.conversions,
                                           "-experiments"),
                              WatermarkStrategy.no_watermarks(), "experiment-conversions")
              .uid("experiments-source-conversions")
              .process(DecodeConversions()).name("decode-conversions")
              .uid("experiments-decode-conversions")
              .assign_timestamps_and_watermarks(
                  WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(slack_ms))
                  .with_idleness(Duration.of_millis(int(config.event_time.idleness_s * 1000)))
                  .with_timestamp_assigner(ItemTime()))
              .name("conversion-time").uid("experiments-conversion-time"))
    assigned = (exposures.union(orders)
                .key_by(lambda item: item[0], key_type=Types.STRING())
                .process(AssignVariants(int(config.experiments.retention_days * DAY_MS)),
                         output_type=Types.STRING())
                .name("assign-variants").uid("experiments-assign-variants"))
    # keyed by (flag, user) and (flag, order): a later version of a row (an earlier
    # exposure that arrived late, a corrected conversion) follows the first in one partition
    assigned.sink_to(build_sink(config, bootstrap, topics.experiment_exposures,
                                "experiments", keyed=True)) \
        .name("exposures-sink").uid("experiments-exposures-sink")
    assigned.get_side_output(CONVERSIONS).sink_to(
        build_sink(config, bootstrap, topics.experiment_conversions, "experiments",
                   keyed=True)) \
        .name("experiment-conversions-sink").uid("experiments-conversions-sink")
    exposures.get_side_output(DEAD_LETTERS).sink_to(
        build_sink(config, bootstrap, topics.dead_letter, "experiments")) \
        .name("experiments-dead-letter-sink").uid("experiments-dead-letter-sink")


def run_experiments_job(config: StreamingJobConfig, bootstrap: str,
                        job_name: str = EXPERIMENTS.flink_name,
                        env: StreamExecutionEnvironment | None = None) -> JobExecutionResult:
    return run_pipeline(build_experiments_pipeline, config, bootstrap, job_name, env)
