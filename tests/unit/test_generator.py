from collections import Counter

from opentelemetry.sdk.trace.export import SpanExportResult

from pipelines.codec.frame import newest_start_ms
from pipelines.codec.otlp import decode_spans
from pipelines.sources.expected import valid_events
from pipelines.sources.generator import (
    BATCH_GPUS,
    BATCH_WORKLOAD,
    LATE_RANK,
    emit,
    plan_events,
)
from pipelines.sources.kafka_exporter import KafkaSpanExporter
from pipelines.sources.plan_costs import gpu_samples
from schemas.gpu import load_catalog
from schemas.records import GpuCall
from udfs.roi.gpu_cost import allocate_gpu


class RecordingProducer:
    """Stands in for KafkaProducer: keeps what would have been sent."""

    def __init__(self):
        self.sent = []
        self.timestamps = []

    def send(self, topic, key=None, value=None, timestamp_ms=None):
        self.sent.append((topic, key, value))
        self.timestamps.append(timestamp_ms)

        class Done:
            def get(self, timeout=None):
                return None

        return Done()

    def flush(self, timeout=None):
        pass

    def close(self):
        pass


def run(seed, users=200, **exporter_args):
    producer = RecordingProducer()
    exporter = KafkaSpanExporter("unused:9092", producer=producer, **exporter_args)
    plan = plan_events(users, seed=seed)
    raw = []
    emit(plan, exporter, raw.append, seed=seed, batch_size=100)
    return plan, producer.sent, raw


def test_same_seed_gives_identical_bytes_and_another_seed_does_not():
    _, first, _ = run(3)
    _, again, _ = run(3)
    _, other, _ = run(4)
    assert first == again
    assert first != other


def test_population_has_what_a_realistic_sample_needs():
    plan, sent, raw = run(11, users=500)
    kinds = Counter(e.kind for e in plan.events)
    assert kinds["touchpoint"] > 1000 and kinds["conversion"] > 200
    by_user = Counter(e.user_id for e in plan.events if e.kind == "conversion")
    assert any(n >= 2 for n in by_user.values()), "repeat customers"
    users_with_orders = set(by_user)
    assert len({e.user_id for e in plan.events} - users_with_orders) > 50, "never convert"
    assert len(users_with_orders - {e.user_id for e in plan.events
                                    if e.kind == "touchpoint"}) > 0, "direct buyers"
    assert plan.late_count > 0 and len(raw) == 3
    ranks = [e.emit_rank for e in plan.events if e.emit_rank < LATE_RANK]
    times = [e.ts_ns for e in plan.events if e.emit_rank < LATE_RANK]
    assert ranks == sorted(ranks) and times != sorted(times), "out of order within jitter"
    # everything that was planned is on the wire
    decoded = [decode_spans(value) for _, _, value in sent]
    records = [r for d in decoded for r in d.records if hasattr(r, "channel")]
    assert len(records) == kinds["touchpoint"]
    assert len(list(valid_events(plan))) == len(plan.events) - plan.late_count - kinds[
        "invalid_conversion"]


def test_partition_by_trace_keys_each_message_by_its_trace_id():
    _, sent, _ = run(5, users=20, partition_by_trace=True)
    for _, key, value in sent:
        (record, *_rest) = decode_spans(value).records or [None]
        assert key is not None and len(key) == 32
        if record is not None:
            assert record.trace_id == key.decode()


def test_large_batches_are_split_under_the_size_limit():
    plan = plan_events(300, seed=2)
    producer = RecordingProducer()
    exporter = KafkaSpanExporter("unused:9092", producer=producer, max_message_bytes=20_000)
    emit(plan, exporter, lambda _: None, batch_size=1000)
    assert all(len(value) <= 20_000 for _, _, value in producer.sent)
    spans = sum(decode_spans(value).spans for _, _, value in producer.sent)
    assert spans == sum(1 + (e.kind == "conversion") + (e.kind == "invalid_conversion")
                        + bool(e.gpu_uuid) for e in plan.events)


def test_export_after_shutdown_fails():
    exporter = KafkaSpanExporter("unused:9092", producer=RecordingProducer())
    exporter.shutdown()
    assert exporter.export([object()]) is SpanExportResult.FAILURE


def test_the_batch_workload_keeps_its_gpu_30_to_70_percent_busy_and_leaves_users_alone():
    quiet = plan_events(100, seed=5, days=10)
    busy = plan_events(100, seed=5, days=10, batch_busy=0.5)
    assert [e for e in busy.events if e.kind != "gpu_batch"] == quiet.events
    producer = RecordingProducer()
    emit(busy, KafkaSpanExporter("unused:9092", producer=producer), lambda _: None, seed=5)
    calls = [r for _, _, value in producer.sent for r in decode_spans(value).records
             if isinstance(r, GpuCall)]
    batch = [c for c in calls if c.workload == BATCH_WORKLOAD]
    assert len(batch) == 10 * 24 and {c.gpu_uuid for c in batch} == set(BATCH_GPUS)
    gpu = BATCH_GPUS[0]
    samples = [s for s in gpu_samples(busy) if s.gpu_uuid == gpu]
    cost = allocate_gpu(samples, [c for c in calls if c.gpu_uuid == gpu], load_catalog(None),
                        60_000, 60_000)
    busy_s = sum(c.gpu_seconds for c in cost.calls)
    idle_s = sum(i.idle_seconds for i in cost.idle)
    assert cost.unobserved_ms == 0 and 0.3 < busy_s / (busy_s + idle_s) < 0.7
    hourly = [c.end_ms - c.start_ms for c in batch]
    assert min(hourly) >= 0.3 * 3_600_000 and max(hourly) <= 0.7 * 3_600_000


def test_each_message_is_stamped_with_its_hourly_shipping_time():
    """Records arrive on the hour after the newest event emitted so far: never before any
    span they carry, in order, at most an hour after an on-time event; a held-back touch
    arrives with the last records (days late), a delayed one as long after as drawn."""
    producer = RecordingProducer()
    plan = plan_events(150, seed=5, delayed=(0.1, 2 * 86_400.0))
    emit(plan, KafkaSpanExporter("unused:9092", producer=producer), lambda _: None,
         batch_size=100)
    stamps = producer.timestamps
    assert all(isinstance(t, int) and t % 3_600_000 == 0 for t in stamps)
    assert stamps == sorted(stamps)
    for (_, _, value), stamp in zip(producer.sent, stamps, strict=True):
        assert newest_start_ms(value, 2**62) <= stamp
    last = stamps[-1]
    held = [e for e in plan.events if e.emit_rank >= LATE_RANK]
    assert held and all(last - e.ts_ns // 10**6 > 86_400_000 for e in held[:1])
    late = {(e.user_id, e.ts_ns) for e in plan.events} - {
        (e.user_id, e.ts_ns) for e in valid_events(plan, 86_400_000)}
    on_time = [e for e in plan.events if e.kind == "touchpoint"
               and (e.user_id, e.ts_ns) not in late and e.emit_rank - e.ts_ns < 600e9]
    assert on_time and len(late) > len(held)  # some delayed ones arrive past the horizon
