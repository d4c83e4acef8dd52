"""The source's record framing and event time: the job's JVM classes (pipelines/jvm) and
their Python reference (pipelines/codec/frame.py) agree on every message, good or damaged."""

from __future__ import annotations

import random
import time

import pytest

from pipelines.codec.frame import METRICS, NEVER, NO_TIME, frame, newest_start_ms, unframe
from pipelines.codec.metrics import encode_samples
from pipelines.codec.otlp import decode_spans
from pipelines.sources.generator import emit, plan_events
from pipelines.sources.kafka_exporter import CollectingProducer, KafkaSpanExporter
from tests.gpu_telemetry import H100, T0, sample
from tests.otlp_payloads import json_looking_protobuf

FAR = 2**62


@pytest.fixture(scope="module")
def messages() -> list[bytes]:
    plan = plan_events(120, seed=5)
    out: list[bytes] = []
    for encoding in ("otlp_proto", "otlp_json"):
        sink = CollectingProducer()
        emit(plan, KafkaSpanExporter("unused:0", producer=sink, encoding=encoding),
             sink.append, batch_size=16)
        out += sink.values
    return out


def damaged(messages: list[bytes], count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        body = bytearray(rng.choice(messages))
        if rng.random() < 0.5:
            for _ in range(rng.randint(1, 8)):
                body[rng.randrange(len(body))] = rng.randrange(256)
        else:
            del body[rng.randrange(len(body)):]
        out.append(bytes(body))
    return out


def test_a_frame_round_trips_and_keeps_a_null_value():
    record = unframe(frame(b"spans", partition=3, offset=41, kafka_timestamp_ms=7,
                           event_time_ms=1_000, partition_newest_ms=900))
    assert record == (3, 41, 7, 1_000, 900, b"spans")
    tombstone = unframe(frame(None, partition=1, offset=2))
    assert tombstone.value is None and tombstone.partition_newest_ms == NEVER
    with pytest.raises(ValueError, match="at least 38 bytes"):
        unframe(b"short")


def test_the_event_time_is_the_newest_span_start(messages):
    for message in messages:
        times = [r.ts_ms for r in decode_spans(message).records if hasattr(r, "ts_ms")]
        assert newest_start_ms(message, FAR) >= max(times, default=NO_TIME)
    assert newest_start_ms(b"garbage", FAR) == NO_TIME
    assert newest_start_ms(None, FAR) == NO_TIME
    assert newest_start_ms(json_looking_protobuf(), FAR) > 0
    # a start time outside the range the decoders accept is no event time
    assert newest_start_ms(messages[0], max_ms=946_684_800_001) == NO_TIME


def metrics_messages() -> list[bytes]:
    from google.protobuf.json_format import MessageToJson
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    out = [encode_samples([sample(T0 + i * 10_000, "GPU-A", H100)]) for i in range(1, 30)]
    return out + [MessageToJson(ExportMetricsServiceRequest.FromString(m)).encode()
                  for m in out[:10]]


def test_a_metrics_record_has_the_time_of_its_newest_data_point():
    for i, message in enumerate(metrics_messages()[:29], start=1):
        assert newest_start_ms(message, FAR, signal=METRICS) == T0 + i * 10_000
    assert newest_start_ms(metrics_messages()[29], FAR, signal=METRICS) == T0 + 10_000  # JSON
    assert newest_start_ms(metrics_messages()[0], FAR) == NO_TIME  # no spans in it


def test_the_jvm_classes_agree_with_the_reference_on_good_and_damaged_messages(messages):
    from pipelines.flink.runtime.kafka import _job_classes

    jvm = _job_classes()
    event_time = jvm.io.seedance.flink.OtlpEventTime
    for seed, message in enumerate(messages + damaged(messages, 400, seed=11)):
        max_ms = FAR if seed % 3 else 1_790_000_000_000  # sometimes cut inside the data
        assert event_time.newestStartMs(message, 946_684_800_000, max_ms) == \
            newest_start_ms(message, max_ms), seed
    metrics = metrics_messages()
    signal = jvm.io.seedance.flink.OtlpEventTime.Signal.METRICS
    for seed, message in enumerate(metrics + damaged(metrics, 200, seed=12)):
        max_ms = FAR if seed % 3 else T0 + 150_000
        assert event_time.newestMs(message, signal, 946_684_800_000, max_ms) == \
            newest_start_ms(message, max_ms, signal=METRICS), seed


def _generator(group: str, ends: dict[int, int], starts: dict[int, int]):
    """A partition's generator whose PartitionLag knows these log ends and starts (as if
    the broker had answered so), with idleness 10 s and backlog idleness 300 s."""
    jvm = _job_classes()
    lag = jvm.io.seedance.flink.PartitionLag.of(group, "spans")
    lag.known(_offsets(ends), _offsets(starts))
    return jvm.io.seedance.flink.LagAwareWatermarks.generator(10_000, 300_000, lag), lag


def _offsets(values: dict[int, int]) -> str:
    return ",".join(f"{partition}:{offset}" for partition, offset in values.items())


def _job_classes():
    from pipelines.flink.runtime.kafka import _job_classes as classes

    return classes()


def test_a_partition_with_records_not_read_yet_is_never_idle():
    """io.seedance.flink.LagAwareWatermarks with PartitionLag: a partition silent for the
    idleness is idle only once its reader has read up to the log's end; one nothing has
    been read from yet is idle only while no such partition has records to read (a
    catch-up whose reader has not reached it: not idle, however long it waits, up to the
    backlog idleness, the last resort when nothing can be known)."""
    t = 1_790_000_000_000
    # partition 0: 5 records, partition 1: 3 records, reading from offset 0
    read, lag = _generator("g-read", {0: 5, 1: 3}, {0: 0, 1: 0})
    lag.read(0, 3)  # offsets 0..3 read of partition 0: one record left
    read.seen(frame(b"x", 0, 3, t, t, NO_TIME), t)
    assert not read.idleAt(t + 10_000) and not read.idleAt(t + 299_999)
    assert read.idleAt(t + 300_000)  # the last resort
    lag.read(0, 4)
    read.seen(frame(b"x", 0, 4, t, t, NO_TIME), t)
    assert not read.idleAt(t + 9_999) and read.idleAt(t + 10_000)  # all read: quiet
    # a generator of a partition nothing has been read from: partition 1 has 3 records
    unread, _ = _generator("g-read", {0: 5, 1: 3}, {0: 0, 1: 0})
    assert not unread.idleAt(t) and not unread.idleAt(t + 60_000)
    lag.read(1, 2)  # partition 1 read to its end elsewhere: no unread partition is left
    assert unread.idleAt(t + 70_000)
    # nothing known from the broker (no answer yet): idle only after the backlog idleness
    blind = _job_classes().io.seedance.flink.LagAwareWatermarks(
        300_000, 10_000, 300_000).createWatermarkGenerator(None)
    assert not blind.idleAt(t) and not blind.idleAt(t + 299_999) and blind.idleAt(t + 300_000)


def test_a_quiet_partition_waits_for_a_fresh_answer_once_records_come_back():
    """A producer that pauses past the idleness, then writes again: the first partition
    read after the pause may not be the only one written to, and what the broker said of
    the others before is stale. Until an answer asked a second or more after the records
    came back, no other partition counts as idle (a catch-up's reader drains one
    partition before the next, and the watermark would run ahead of the records still
    waiting in another). The backlog idleness counts from a partition's own last record:
    returns elsewhere never keep a partition that stopped from going idle."""
    t = 1_790_000_000_000
    ends = {0: 5, 1: 3}
    first, lag = _generator("g-resume", ends, {0: 0, 1: 0})
    other, _ = _generator("g-resume", ends, {0: 0, 1: 0})
    lag.read(0, 4)
    lag.read(1, 2)
    first.seen(frame(b"x", 0, 4, t, t, NO_TIME), t)
    other.seen(frame(b"x", 1, 2, t, t, NO_TIME), t)
    assert first.idleAt(t + 10_000) and other.idleAt(t + 10_000)  # all read, quiet
    back = t + 60_000  # partition 0's records come back after a minute
    lag.known(_offsets({0: 9, 1: 3}), _offsets({0: 0, 1: 0}), back - 1)
    lag.read(0, 5)
    first.seen(frame(b"x", 0, 5, back, back, NO_TIME), back)
    assert not other.idleAt(back) and not other.idleAt(back + 100_000)  # a stale answer
    lag.known(_offsets({0: 9, 1: 3}), _offsets({0: 0, 1: 0}), back + 999)
    assert not other.idleAt(back + 100_000)  # asked too soon after the return
    # a fresh answer: partition 1 holds new records -- still not idle
    lag.known(_offsets({0: 9, 1: 7}), _offsets({0: 0, 1: 0}), back + 1_000)
    assert not other.idleAt(back + 1_000)
    lag.read(1, 6)  # read to its end: idle again
    assert other.idleAt(back + 1_000)
    # more returns, every few seconds: the partition that stopped still goes idle by the
    # backlog idleness, counted from its own last record (t + 300 s), whatever is known
    lag.read(1, 7)
    lag.known(_offsets({0: 9, 1: 9}), _offsets({0: 0, 1: 0}), back - 1)
    for at in range(back, t + 300_000, 4_000):
        lag.resumed(at)
    assert not other.idleAt(t + 299_999) and other.idleAt(t + 300_000)


def test_a_partition_never_runs_the_watermark_past_another_with_records_to_read():
    """Flink takes the minimum of the partitions within a source subtask only: across
    subtasks, an input that was idle comes back behind the watermark without holding it.
    So each partition's watermark goes no further than that of any other partition of the
    topic read in this JVM that is not idle -- after a pause, the subtask that reads first
    waits for the one whose partition still has records; an idle one holds nothing."""
    t = int(time.time() * 1000)  # onEvent reads the wall clock
    ends = {0: 9, 1: 9}
    ahead, lag = _generator("g-hold", ends, {0: 0, 1: 0})
    behind, _ = _generator("g-hold", ends, {0: 0, 1: 0})
    lag.read(0, 4)
    ahead.onEvent(frame(b"x", 0, 4, t, t, NO_TIME), t - 1_000, None)
    lag.read(1, 2)
    behind.onEvent(frame(b"x", 1, 2, t, t, NO_TIME), t - 86_400_000, None)
    assert behind.watermarkAt(t) == t - 86_400_000 - 1  # its own
    assert ahead.ownWatermark() == t - 1_001
    assert ahead.watermarkAt(t) == t - 86_400_000 - 1  # held by partition 1's
    # partition 1 read to its end and quiet (a fresh answer): it holds nothing
    lag.read(1, 8)
    lag.read(0, 8)
    lag.known(_offsets(ends), _offsets({0: 0, 1: 0}), t + 11_000)
    assert behind.idleAt(t + 11_000)
    assert ahead.watermarkAt(t + 11_000) == t - 1_001
    # a bounded run (no idleness): Flink's own minimum, nothing held here
    bounded = _job_classes().io.seedance.flink.LagAwareWatermarks.generator(
        365 * 86_400_000, 365 * 86_400_000, lag)
    bounded.onEvent(frame(b"x", 0, 8, t, t, NO_TIME), t - 5, None)
    lag.known(_offsets({0: 9, 1: 20}), _offsets({0: 0, 1: 0}), t + 11_000)
    assert not behind.idleAt(t + 11_000)  # records again: it holds the unbounded ones
    assert ahead.watermarkAt(t + 11_000) == t - 86_400_000 - 1
    assert bounded.watermarkAt(t + 11_000) == t - 6
    # a report 30 s old holds nothing: its generator is gone (a failed task; its partition
    # may be read in another JVM now)
    assert ahead.watermarkAt(t + 30_000) == t - 86_400_000 - 1
    assert ahead.watermarkAt(t + 30_001) == t - 1_001


def test_an_empty_partition_goes_idle_after_the_idleness():
    """Where reading starts at a partition's end (nothing committed past it, an empty log),
    nothing is unread: idle after the idleness, as a quiet partition should be."""
    t = 1_790_000_000_000
    empty, _ = _generator("g-empty", {0: 7, 1: 0}, {0: 7, 1: 0})
    assert not empty.idleAt(t) and empty.idleAt(t + 10_000)


def test_a_bounded_run_takes_no_partition_for_idle():
    """A bounded run (a catch-up to known ends): a partition not read yet, or silent while
    its reader is elsewhere, is never idle -- a subtask that finished first would otherwise
    take the watermark to the end of time while its data still waits."""
    from pipelines.flink.runtime.kafka import otlp_event_time
    from pipelines.settings.job_config import StreamingJobConfig

    t = 1_790_000_000_000
    config = StreamingJobConfig().replace("event_time", idleness_s=0.5)
    for bounded, idle in ((True, False), (False, True)):
        strategy = otlp_event_time(config.replace("input", bounded=bounded))
        generator = strategy._j_watermark_strategy.createWatermarkGenerator(None)
        assert not generator.idleAt(t)  # nothing read yet
        assert generator.idleAt(t + 400_000) is idle  # past the backlog idleness (300 s)
