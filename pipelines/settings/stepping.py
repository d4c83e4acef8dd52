"""How the attribution job's source groups records and how often event time steps the
journeys, from the config: the figures bench/scale.py and bench/streaming.py measured."""

from __future__ import annotations

from pipelines.settings.job_config import (
    GROUP_RECORDS_PER_BUCKET,
    MAX_BATCH_RECORDS,
    StreamingJobConfig,
)

# a watermark step costs about this much per user bucket of a subtask (a Python call each,
# with fixed costs over its columns: bench/scale.py), whatever it has to do
STEP_COST_PER_BUCKET_S = 0.04


def step_interval_ms(config: StreamingJobConfig) -> int:
    """The least processing time between two watermark steps of the attribution job:
    `flink.step_interval_s`, or by default the watermark interval, longer where a subtask
    holds many buckets (40 ms per bucket of a subtask: 1 s up to 25 buckets a subtask,
    10 s at 256), so that the steps' fixed costs stay about a tenth of the work."""
    if config.flink.step_interval_s is not None:
        return int(config.flink.step_interval_s * 1000)
    per_subtask = -(-config.flink.user_buckets // config.flink.parallelism)
    return int(max(config.event_time.watermark_interval_s,
                   STEP_COST_PER_BUCKET_S * per_subtask) * 1000)


def group_linger_ms(config: StreamingJobConfig) -> int:
    """How long the attribution job's source waits for a group to fill, at most:
    `flink.batch_linger_ms`, or by default the step interval (`step_interval_ms`). A group
    always ends before a watermark goes on, and the journeys only move on at a watermark,
    so waiting up to a step delays no result; a shorter wait cuts the groups of a subtask
    with many buckets short and multiplies the batches crossing to the journeys by the
    buckets again (at 256 buckets in bench/streaming.py: 200 ms gave groups of about 190
    records and 3,338 journeys calls, the step 2,252). (The step-long wait once made a
    watermark race after a producer's pause likely enough to lose events in
    tests/integration/test_catch_up.py; io.seedance.flink.LagAwareWatermarks now closes
    that race whatever the wait.)"""
    if config.flink.batch_linger_ms is not None:
        return config.flink.batch_linger_ms
    return step_interval_ms(config)


def group_records(config: StreamingJobConfig) -> int:
    """How many records the attribution job's source groups for one decoder call, at most:
    `flink.batch_records`, or by default 64, and four per user bucket of a subtask where
    that is more: a group becomes a batch per bucket (a record to the journeys, another
    to the duplicate check, each crossing between the JVM and Python), so the records per
    bucket of a group set how much of that crossing each span pays."""
    if config.flink.batch_records is not None:
        return config.flink.batch_records
    per_subtask = -(-config.flink.user_buckets // config.flink.parallelism)
    return min(MAX_BATCH_RECORDS, max(64, GROUP_RECORDS_PER_BUCKET * per_subtask))
