"""The streaming attribution job on PyFlink: OTLP spans in Kafka -> per-touch credits.

ingest   KafkaSource (raw bytes) -> decode OTLP batches (one Python call per message;
         protobuf read by the C scanner, pipelines/codec/events.py), touches and orders as
         columns split into batches by user bucket (one record per message and bucket)
transform  event-time watermarks -> key by bucket -> each bucket's users in one
           `udfs.journeys.book.JourneyBook`: events wait until the watermark passes, then
           every user's are stepped in event order, and the conversions one watermark
           closes are credited together (one table per model); closed journeys
           (converting or not) go on, a batch per step, to one keyed operator that keeps
           path counts and refits the data-driven models (shapley, markov) once per period
           (udfs/attribution/data_driven.py); beside it every order, keyed by order id, through
           the duplicate check (pipelines/flink/attribution/dedup.py: one copy of an order
           counts, whatever user sent it; the others are withdrawn from their journeys)
write    credits (JSON tables of rows, see pipelines/codec/credit_messages.py), conversions, dead
         letters and late events to Kafka with exactly-once sinks

Python is called per message, per bucket batch and per watermark step, not per event,
and inside those calls events move as columns (numpy arrays; schemas/events.py), never as
one Python object each: per-record hops between Flink and Python, and per-event Python
work, are what a PyFlink job spends its time on.

Every operator has a stable uid so that savepoints stay compatible across upgrades.
"""

from __future__ import annotations

from typing import NamedTuple

from pyflink.common import JobExecutionResult, Types
from pyflink.datastream import DataStream, StreamExecutionEnvironment

from pipelines.flink.attribution.accounting import RunAccounting
from pipelines.flink.attribution.credit import CreditDataDriven
from pipelines.flink.attribution.decode import DecodeOtlp
from pipelines.flink.attribution.dedup import DedupOrders
from pipelines.flink.attribution.fit import FitDataDrivenModels
from pipelines.flink.attribution.journeys import AttributeJourneys
from pipelines.flink.attribution.order_changes import DecodeOrderChanges
from pipelines.flink.attribution.support import (
    ACCOUNTING,
    CLOSED_JOURNEYS,
    CONVERSIONS,
    DEAD_LETTERS,
    DUPLICATE_ORDERS,
    LATE_EVENTS,
    ONE_DUPLICATE_ORDER,
    ONE_EXPIRED,
    ONE_LATE,
    ORDERS,
    PATH_COUNTS,
    RESULT_TYPE,
)
from pipelines.flink.jobs import ATTRIBUTION
from pipelines.flink.runtime.kafka import (
    build_sink,
    build_source,
    from_kafka,
    grouped,
    otlp_event_time,
    run_pipeline,
    stay_active,
)
from pipelines.settings.job_config import (
    StreamingJobConfig,
    channel_rules_text,
    order_mapping_text,
)
from udfs.journeys import correction_reach_ms
from udfs.periods import DAY_MS


def build_pipeline(env: StreamExecutionEnvironment, config: StreamingJobConfig,
                   bootstrap: str) -> None:
    """ingest -> transform -> write, wired on `env`."""
    # event time and watermarks are made in the source, per Kafka partition
    raw = from_kafka(env, build_source(config, bootstrap, config.topics.spans,
                                       framed_max_future_ms=int(
                                           config.event_time.max_future_s * 1000)),
                     otlp_event_time(config, bootstrap, config.topics.spans),
                     "otlp-spans", "source-otlp-spans")
    # the decoder is called once per group of records, and sends one batch per bucket per
    # group: what reaches the journeys does not multiply with the bucket count
    raw = grouped(raw, config, "otlp-spans-groups", "source-otlp-spans-groups")
    changes = None
    topic = config.order_changes.topic
    if topic:  # the orders table's change stream: event time is each record's arrival
        changes = from_kafka(env, build_source(config, bootstrap, topic,
                                               framed_max_future_ms=int(
                                                   config.event_time.max_future_s * 1000),
                                               signal="ARRIVAL"),
                             otlp_event_time(config, bootstrap, topic), "order-changes",
                             "source-order-changes")
        changes = grouped(changes, config, "order-changes-groups",
                          "source-order-changes-groups")
    write(transform(raw, config, changes), config, bootstrap)


class JobOutputs(NamedTuple):
    credits: DataStream
    dead_letters: DataStream
    late: DataStream
    conversions: DataStream
    accounting: DataStream


def transform(raw: DataStream, config: StreamingJobConfig,
              changes: DataStream | None = None) -> JobOutputs:
    settings = config.computation
    horizon_ms = settings.journey.correction_ms
    # how far behind the watermark an event that counts by arrival can reach its journey:
    # the horizon, and how far a record's spans may run ahead of its arrival
    reach_ms = correction_reach_ms(horizon_ms, int(config.event_time.max_future_s * 1000))
    decoded = raw.process(DecodeOtlp(config.input.encoding, config.topics.spans,
                                     config.flink.user_buckets,
                                     config.event_time.max_future_s, horizon_ms,
                                     channel_rules_text(config),
                                     config.journey.landing_user)) \
        .name("decode-otlp").uid("decode-otlp")
    orders, dead_letters, accounting = (decoded.get_side_output(ORDERS),
                                        decoded.get_side_output(DEAD_LETTERS),
                                        decoded.get_side_output(ACCOUNTING))
    events, revisions_ms = decoded, 0
    if changes is not None:
        # orders placed go to their journeys and the duplicate check as the spans' do;
        # changes to them (refunds, amounts) to their user's bucket (order_changes.py)
        revisions_ms = int(config.order_changes.window_days * DAY_MS)
        changed = changes.process(DecodeOrderChanges(
            order_mapping_text(config), config.order_changes.topic, config.flink.user_buckets,
            horizon_ms, revisions_ms)).name("decode-order-changes").uid("decode-order-changes")
        events = decoded.union(changed)
        orders = orders.union(changed.get_side_output(ORDERS))
        dead_letters = dead_letters.union(changed.get_side_output(DEAD_LETTERS))
        accounting = accounting.union(changed.get_side_output(ACCOUNTING))
    per_conversion, data_driven = settings.per_conversion, settings.data_driven
    params = settings.params
    process_mode = config.flink.python_execution_mode == "process"
    # an order counts once whatever user sent it: checked by order id, the copies that do
    # not count withdrawn from their journeys
    dedup = (orders
             .key_by(lambda rows: rows[0], key_type=Types.INT())
             .process(DedupOrders(config.flink.user_buckets,
                                  settings.journey.duplicate_order_ms, process_mode,
                                  config.topics.spans))
             .name("dedup-orders").uid("dedup-orders-by-order-id"))
    # the withdrawals must reach the journeys before the watermark that would step the
    # copies: the journeys always wait for this input's watermark
    withdrawals = stay_active(dedup, "dedup-orders-stay-active", "dedup-orders-stay-active")
    attributed = (events.union(withdrawals)
                  .key_by(lambda batch: batch[0], key_type=Types.INT())
                  .process(AttributeJourneys(settings.journey, per_conversion, params,
                                             settings.refit_every_ms if data_driven else None,
                                             process_mode, config.flink.user_buckets,
                                             reach_ms, revisions_ms),
                           output_type=RESULT_TYPE)
                  .name("attribute-journeys").uid("attribute-journeys-by-bucket"))
    credits = attributed
    if data_driven:
        # In two phases: the counts per path of every closed journey go to the fit, one
        # key for the stream; the converted journeys stay with their bucket, which credits
        # them with the weights the fit sends back for their paths. The fit waits for
        # every attribution subtask's watermark, so that the journeys one closes come
        # before the watermark that settles their period (a drain included).
        counts = stay_active(attributed.get_side_output(PATH_COUNTS),
                             "closed-journeys-stay-active", "closed-journeys-stay-active")
        fitted = (counts
                  .key_by(lambda _: 0, key_type=Types.INT())
                  .process(FitDataDrivenModels(data_driven, params, process_mode, reach_ms,
                                               config.flink.user_buckets),
                           output_type=Types.PICKLED_BYTE_ARRAY())
                  .name("fit-data-driven-models").uid("fit-data-driven-models-by-period"))
        closed = attributed.get_side_output(CLOSED_JOURNEYS)
        credited = (closed.key_by(lambda message: message[0], key_type=Types.INT())
                    .connect(fitted.key_by(lambda message: message[0], key_type=Types.INT()))
                    .process(CreditDataDriven(reach_ms, process_mode, revisions_ms),
                             output_type=RESULT_TYPE)
                    .name("credit-data-driven-models")
                    .uid("credit-data-driven-models-by-bucket"))
        credits = attributed.union(credited)
    # late by arrival (the decoder, which counts its own in its accounting), or behind what
    # the journeys still keep: with a horizon, lost events that counted (an alarm); without
    # one, every event behind the watermark
    behind_state = attributed.get_side_output(LATE_EVENTS)
    late = decoded.get_side_output(LATE_EVENTS).union(behind_state)
    duplicates = dedup.get_side_output(DUPLICATE_ORDERS)
    one_behind = ONE_EXPIRED if horizon_ms else ONE_LATE
    accounting = (accounting
                  .union(behind_state.map(lambda _: one_behind,
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
    return JobOutputs(credits, dead_letters.union(duplicates), late,
                      attributed.get_side_output(CONVERSIONS), accounting)


def write(outputs: JobOutputs, config: StreamingJobConfig, bootstrap: str) -> None:
    topics = config.topics
    # keyed (by user bucket, or the fit): a correction follows what it corrects in order
    outputs.credits.sink_to(build_sink(config, bootstrap, topics.credits, raw=True,
                                       keyed=True)) \
        .name("credits-sink").uid("credits-sink")
    outputs.dead_letters.sink_to(build_sink(config, bootstrap, topics.dead_letter)) \
        .name("dead-letter-sink").uid("dead-letter-sink")
    outputs.late.sink_to(build_sink(config, bootstrap, topics.late)) \
        .name("late-events-sink").uid("late-events-sink")
    outputs.conversions.sink_to(build_sink(config, bootstrap, topics.conversions, raw=True,
                                           keyed=True)) \
        .name("conversions-sink").uid("conversions-sink")
    outputs.accounting.sink_to(build_sink(config, bootstrap, topics.accounting)) \
        .name("accounting-sink").uid("accounting-sink")


def run_job(config: StreamingJobConfig, bootstrap: str, job_name: str = ATTRIBUTION.flink_name,
            env: StreamExecutionEnvironment | None = None) -> JobExecutionResult:
    """Run the attribution job (see `run_pipeline`)."""
    return run_pipeline(build_pipeline, config, bootstrap, job_name, env)
