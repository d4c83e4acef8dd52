"""The streaming LTV job on PyFlink: each customer's lifetime value, kept current.

ingest   the attribution job's `conversions` topic (read_committed, framed with each
         record's place, event time the orders' conversion_ts_ms: as the ROI job reads it)
         as orders batched per user bucket (udfs.journeys.book.bucket_of over
         flink.user_buckets); the compacted `ltv_models` topic (pipelines/ltv/
         models_topic.py), each message checked (a bad one is a dead letter), as a
         broadcast
score    keyed by user bucket (pipelines/flink/ltv/scores.py): each user's orders by
         order id in keyed state (a conversion reported again replaces its earlier
         version); with a model, the users of each batch scored as of their latest order's
         day, and every user of the bucket when the watermark passes the end of a day with
         orders, as of that day (udfs/ltv/tally.py: the summaries are
         udfs.ltv.model.summaries_from_transactions' over the same orders, so the stream equals
         a batch over them with the same model). Before the first model it only keeps the
         tallies
write    one `customer_ltv` record per scored customer (rows.CUSTOMER_LTV as JSON, keyed by
         [user_id]: a compacted topic of each customer's latest row) and the dead letters
         (`ltv_inputs_dlq`, with the reason and where the message was), exactly-once

docs/ltv-stream.md.
"""

from __future__ import annotations

from pyflink.common import Duration, JobExecutionResult, Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment

from pipelines.flink.jobs import LTV
from pipelines.flink.ltv.scores import (
    DEAD_LETTERS,
    MODELS,
    ROWS_TYPE,
    BatchTime,
    DecodeOrders,
    NeverBehind,
    ParseModels,
    ScoreCustomers,
)
from pipelines.flink.runtime.kafka import PLACE_ONLY, build_sink, build_source, run_pipeline
from pipelines.settings.job_config import StreamingJobConfig


def build_ltv_pipeline(env: StreamExecutionEnvironment, config: StreamingJobConfig,
                       bootstrap: str) -> None:
    topics = config.topics
    # a bounded run ends every input with the final watermark: none is declared idle (its
    # data would be behind the other's watermark)
    bounded = config.input.bounded
    idle = Duration.of_millis(int(config.event_time.idleness_s * 1000))
    slack = Duration.of_millis(int(config.event_time.max_out_of_orderness_s * 1000))

    orders = (env.from_source(build_source(config, bootstrap, topics.conversions, "-ltv",
                                           framed_max_future_ms=0, signal=PLACE_ONLY),
                              WatermarkStrategy.no_watermarks(), "ltv-conversions-source")
              .uid("ltv-source-conversions")
              .process(DecodeOrders(config.flink.user_buckets, topics.conversions))
              .name("decode-conversions").uid("ltv-decode-conversions"))
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(slack)
    timed = orders.assign_timestamps_and_watermarks(
        (strategy if bounded else strategy.with_idleness(idle))
        .with_timestamp_assigner(BatchTime())).name("conversion-time") \
        .uid("ltv-conversion-time")

    # the current model is the topic's latest: read from its start (a restore resumes from
    # the checkpoint, with the model it had), by one subtask, broadcast to all
    from_start = config.replace("input", starting_offsets="earliest")
    models = (env.from_source(build_source(from_start, bootstrap, topics.ltv_models, "-ltv",
                                           framed_max_future_ms=0, signal=PLACE_ONLY),
                              WatermarkStrategy.no_watermarks(), "ltv-models-source")
              .uid("ltv-source-models").set_parallelism(1)
              .process(ParseModels(topics.ltv_models)).name("parse-models")
              .uid("ltv-parse-models").set_parallelism(1))
    model_time = WatermarkStrategy.for_monotonous_timestamps()
    broadcast = models.assign_timestamps_and_watermarks(
        (model_time if bounded else model_time.with_idleness(idle))
        .with_timestamp_assigner(NeverBehind())).name("model-time").uid("ltv-model-time") \
        .set_parallelism(1).broadcast(MODELS)

    scored = (timed.key_by(lambda batch: batch[0], key_type=Types.INT())
              .connect(broadcast)
              .process(ScoreCustomers(), output_type=ROWS_TYPE)
              .name("score-customers").uid("ltv-score-customers"))
    # keyed by user: a customer's rows stay in order in one partition, compaction keeps
    # its latest
    scored.sink_to(build_sink(config, bootstrap, topics.customer_ltv, "ltv", raw=True,
                              keyed=True)) \
        .name("customers-sink").uid("ltv-customers-sink")
    orders.get_side_output(DEAD_LETTERS).union(models.get_side_output(DEAD_LETTERS),
                                               scored.get_side_output(DEAD_LETTERS)) \
        .sink_to(build_sink(config, bootstrap, topics.ltv_dead_letter, "ltv")) \
        .name("ltv-dead-letter-sink").uid("ltv-dead-letter-sink")


def run_ltv_job(config: StreamingJobConfig, bootstrap: str, job_name: str = LTV.flink_name,
                env: StreamExecutionEnvironment | None = None) -> JobExecutionResult:
    return run_pipeline(build_ltv_pipeline, config, bootstrap, job_name, env)
