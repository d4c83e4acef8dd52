"""The GPU cost job on PyFlink: GPU samples + GPU-backed spans -> cost per call and idle.

ingest     otlp_metrics (GPU samples) and otlp_spans (GPU-backed calls), each with its own
           event-time watermarks made per Kafka partition in the source (samples: their
           time; calls: their start; pipelines/codec/frame.py)
link       calls that name only a pod get the GPU of the latest sample naming that pod
           (keyed by pod); calls that stay unlinked past link_timeout are dead-lettered
cost       keyed by GPU UUID: when the watermark passes a sample, its interval is priced
           and split between the calls that overlapped it and idle (udfs.roi.gpu_cost)
write      one JSON row per (call, interval) and per idle interval to `gpu_costs`;
           impossible samples to `otlp_metrics_dlq` with the reason; all exactly-once
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from pyflink.common import JobExecutionResult, Types
from pyflink.datastream import (
    DataStream,
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

from pipelines.codec import gpu_cost_messages
from pipelines.codec.dead_letters import dead_letter_json
from pipelines.codec.frame import unframe
from pipelines.codec.metrics import decode_samples
from pipelines.codec.otlp import MAX_FUTURE_S, decode_spans
from pipelines.flink.jobs import GPU_COST
from pipelines.flink.runtime.kafka import (
    build_sink,
    build_source,
    from_kafka,
    keyed_line,
    otlp_event_time,
    run_pipeline,
    stay_active,
)
from pipelines.settings.job_config import StreamingJobConfig
from schemas.gpu import GpuSample, load_catalog, sample_problem
from schemas.records import DeadLetter, GpuCall
from udfs.roi import allocate_intervals

log = logging.getLogger(__name__)

DEAD_LETTERS = OutputTag("gpu-dead-letters", Types.STRING())
LATE = OutputTag("gpu-late", Types.STRING())


class Batch(NamedTuple):
    """Samples or calls of one message that share a routing key (one GPU, or one pod).

    The job moves batches, not single samples: Python state is then touched once per GPU
    and message instead of once per sample."""

    kind: str  # "samples" | "calls"
    key: str
    items: tuple[Any, ...]
    ts_ms: int  # the earliest time in the batch: the watermark never passes its items


def route_key(record: GpuSample | GpuCall) -> str:
    if isinstance(record, GpuSample):
        return f"pod:{record.namespace}/{record.pod}" if record.pod else f"gpu:{record.gpu_uuid}"
    if record.gpu_uuid:
        return f"gpu:{record.gpu_uuid}"
    return f"pod:{record.k8s_namespace}/{record.k8s_pod}" if record.k8s_pod else "unlinked"


def batches(kind: str, items: Iterable[Any], key: Callable[[Any], str],
            time_of: Callable[[Any], int]) -> Iterator[Batch]:
    groups: dict[str, list[Any]] = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    for group_key, group in groups.items():
        yield Batch(kind, group_key, tuple(group), min(map(time_of, group)))


class DecodeSamples(ProcessFunction):  # type: ignore[misc]
    """A framed metrics record (pipelines/codec/frame.py) -> GPU samples in batches by
    routing key; anything unusable is a dead letter with its partition and offset."""

    def __init__(self, source: str) -> None:
        self.source = source

    def process_element(self, value: bytes, ctx: ProcessFunction.Context) -> Iterator[Any]:
        try:
            record = unframe(value)
            samples, letters = ([], [DeadLetter("null_value", "the record's value is null",
                                                b"")]) if record.value is None \
                else decode_samples(record.value)
        except Exception as error:  # noqa: BLE001 - one record must never stop the job
            log.exception("decoding a GPU metrics record failed")
            record, samples = None, []
            letters = [DeadLetter("decoder_error", f"{type(error).__name__}: {error}",
                                  bytes(value))]
        where = (None, None) if record is None else (record.partition, record.offset)
        for letter in letters:
            yield DEAD_LETTERS, dead_letter_json(letter, self.source, *where)
        valid = []
        for sample in samples:
            problem = sample_problem(sample)
            if problem:
                body = json.dumps(sample._asdict(), default=str).encode()
                yield DEAD_LETTERS, dead_letter_json(
                    DeadLetter("invalid_gpu_sample", problem, body), self.source)
            else:
                valid.append(sample)
        yield from batches("samples", valid, route_key, lambda s: s.ts_ms)


class DecodeCalls(ProcessFunction):  # type: ignore[misc]
    """GPU-backed calls from the span topic, framed (other spans, and the dead letters of
    unusable records, are the attribution job's)."""

    def __init__(self, max_future_s: float = MAX_FUTURE_S) -> None:
        self.max_future_s = max_future_s

    def process_element(self, value: bytes, ctx: ProcessFunction.Context) -> Iterator[Any]:
        try:
            record = unframe(value)
        except ValueError:
            return  # not a record of the framed source: the attribution job reports it
        calls = [r for r in decode_spans(record.value, max_future_s=self.max_future_s).records
                 if isinstance(r, GpuCall)] \
            if record.value is not None else []
        yield from batches("calls", calls, route_key, lambda c: c.start_ms)


class LinkCalls(KeyedProcessFunction):  # type: ignore[misc]
    """Keyed by pod: remember the pod's GPU from its samples and give it to its calls."""

    def __init__(self, link_timeout_ms: int, source: str) -> None:
        self.timeout_ms = link_timeout_ms
        self.source = source

    def open(self, runtime_context: RuntimeContext) -> None:
        self.gpu = runtime_context.get_state(ValueStateDescriptor("gpu", Types.STRING()))
        self.waiting = runtime_context.get_list_state(
            ListStateDescriptor("waiting", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: Batch, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        key = ctx.get_current_key()
        if not key.startswith("pod:"):
            if key == "unlinked":
                for call in value.items:
                    yield DEAD_LETTERS, _unlinked(
                        call, "the span names neither gpu.uuid nor a pod", self.source)
            else:
                yield value
            return
        if value.kind == "samples":
            newest = max(value.items, key=lambda s: s.ts_ms)
            self.gpu.update(newest.gpu_uuid)
            waiting = list(self.waiting.get() or [])
            if waiting:
                linked = [c._replace(gpu_uuid=newest.gpu_uuid) for c in waiting]
                yield Batch("calls", f"gpu:{newest.gpu_uuid}", tuple(linked),
                            min(c.start_ms for c in linked))
                self.waiting.clear()
            # a pod may hold several GPUs: pass each GPU's samples on as its own batch
            yield from batches("samples", value.items, lambda s: f"gpu:{s.gpu_uuid}",
                               lambda s: s.ts_ms)
            return
        gpu = self.gpu.value()
        if gpu:
            linked = tuple(c._replace(gpu_uuid=gpu) for c in value.items)
            yield Batch("calls", f"gpu:{gpu}", linked, value.ts_ms)
            return
        for call in value.items:
            self.waiting.add(call)
            ctx.timer_service().register_event_time_timer(call.start_ms + self.timeout_ms)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        waiting = list(self.waiting.get() or [])
        expired = [c for c in waiting if c.start_ms + self.timeout_ms <= timestamp]
        if not expired:
            return
        for call in expired:
            yield DEAD_LETTERS, _unlinked(
                call, f"no GPU sample named pod {call.k8s_namespace}/{call.k8s_pod} within "
                      f"{self.timeout_ms / 1000:.0f}s", self.source)
        self.waiting.update([c for c in waiting if c not in expired])


def _unlinked(call: GpuCall, why: str, source: str) -> str:
    return dead_letter_json(DeadLetter("unlinked_gpu_call", why,
                                       json.dumps(call._asdict()).encode()), source)


class CostPerGpu(KeyedProcessFunction):  # type: ignore[misc]
    """Keyed by GPU UUID: price each interval once the watermark has passed its end.

    Samples and calls wait in buckets of one emit period (keyed by the period's end), so
    a timer reads only what it closes: every element is read back once, however far the
    inputs run ahead of the watermark. Calls still running stay in `active`.
    """

    def __init__(self, prices: str, nominal_ms: int, max_gap_ms: int, emit_every_ms: int) -> None:
        self.prices = prices
        self.nominal_ms = nominal_ms
        self.max_gap_ms = max_gap_ms
        self.period_ms = emit_every_ms

    def open(self, runtime_context: RuntimeContext) -> None:
        self.catalog = load_catalog(Path(self.prices) if self.prices else None)
        self.last_ts = runtime_context.get_state(ValueStateDescriptor("last", Types.LONG()))
        self.samples = runtime_context.get_map_state(MapStateDescriptor(
            "samples", Types.LONG(), Types.PICKLED_BYTE_ARRAY()))
        self.calls = runtime_context.get_map_state(MapStateDescriptor(
            "calls", Types.LONG(), Types.PICKLED_BYTE_ARRAY()))
        self.active = runtime_context.get_state(
            ValueStateDescriptor("active", Types.PICKLED_BYTE_ARRAY()))

    def _period(self, ts_ms: int) -> int:
        return -(-ts_ms // self.period_ms) * self.period_ms

    def _bucket_add(self, state: Any, key: int, values: list[Any]) -> None:
        bucket = state.get(key)
        state.put(key, [*bucket, *values] if bucket else values)

    def process_element(self, value: Batch, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        closed = self.last_ts.value()
        by_period: dict[int, list[Any]] = defaultdict(list)
        if value.kind == "samples":
            for sample in value.items:
                if closed is not None and sample.ts_ms <= closed:
                    yield LATE, json.dumps({"type": "gpu_sample", **sample._asdict(),
                                            "closed_until_ms": closed})
                else:
                    by_period[self._period(sample.ts_ms)].append(sample)
            for period, group in by_period.items():
                self._bucket_add(self.samples, period, group)
                ctx.timer_service().register_event_time_timer(period)
            return
        carried = []
        for call in value.items:
            if closed is not None and call.start_ms < closed:
                # the part before `closed` was already priced (as idle): say so, keep the rest
                yield LATE, json.dumps({"type": "gpu_call", **call._asdict(),
                                        "closed_until_ms": closed})
                if call.end_ms > closed:
                    carried.append(call)
            else:
                by_period[self._period(call.start_ms)].append(call)
        if carried:
            self.active.update([*(self.active.value() or []), *carried])
        for period, group in by_period.items():
            self._bucket_add(self.calls, period, group)

    def _take(self, state: Any, until: int) -> list[Any]:
        keys = [k for k in state.keys() if k <= until]  # noqa: SIM118 - MapState, not dict
        taken = [item for k in keys for item in state.get(k)]
        for k in keys:
            state.remove(k)
        return taken

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[str]:
        ready = self._take(self.samples, timestamp)
        calls = (self.active.value() or []) + self._take(self.calls, timestamp)
        if not ready:
            self.active.update(calls)
            return
        intervals, unobserved = allocate_intervals(ready, calls, self.catalog, self.nominal_ms,
                                                   self.max_gap_ms, self.last_ts.value())
        for interval in intervals:
            common = {"gpu_uuid": interval.gpu_uuid, "model": interval.model,
                      "interval_start_ms": interval.start_ms,
                      "interval_end_ms": interval.end_ms,
                      "interval_cost_usd": interval.cost_usd,
                      "price_known": interval.price_known}
            for share in interval.calls:
                yield keyed_line((interval.gpu_uuid,), gpu_cost_messages.encode(
                    gpu_cost_messages.CALL, {**common, **share._asdict()}))
            if interval.idle is not None:
                yield keyed_line((interval.gpu_uuid,), gpu_cost_messages.encode(
                    gpu_cost_messages.IDLE, {**common,
                                             "idle_seconds": interval.idle.idle_seconds,
                                             "cost_usd": interval.idle.cost_usd}))
        if unobserved:
            yield keyed_line((ready[0].gpu_uuid,), gpu_cost_messages.encode(
                gpu_cost_messages.UNOBSERVED, {
                    "gpu_uuid": ready[0].gpu_uuid, "until_ms": min(s.ts_ms for s in ready),
                    "unobserved_ms": unobserved}))
        newest = max(s.ts_ms for s in ready)
        self.last_ts.update(newest)
        self.active.update([c for c in calls if c.end_ms > newest])


def build_gpu_pipeline(env: StreamExecutionEnvironment, config: StreamingJobConfig,
                       bootstrap: str) -> None:
    gpu = config.gpu
    # event time and watermarks are made in the sources, per Kafka partition (a sample's
    # time, a span's start): a partition read ahead of another never makes the other late
    max_future_ms = int(config.event_time.max_future_s * 1000)
    raw_metrics = from_kafka(env, build_source(config, bootstrap, gpu.metrics_topic, "-gpu",
                                               max_future_ms, "METRICS"),
                             otlp_event_time(config, bootstrap, gpu.metrics_topic, "-gpu"),
                             "otlp-metrics", "source-otlp-metrics")
    raw_spans = from_kafka(env, build_source(config, bootstrap, config.topics.spans, "-gpu",
                                             max_future_ms, "TRACES"),
                           otlp_event_time(config, bootstrap, config.topics.spans, "-gpu"),
                           "otlp-spans-gpu", "source-otlp-spans-gpu")
    samples = raw_metrics.process(DecodeSamples(gpu.metrics_topic)) \
        .name("decode-gpu-samples").uid("decode-gpu-samples")
    calls = raw_spans.process(DecodeCalls(config.event_time.max_future_s)) \
        .name("decode-gpu-calls").uid("decode-gpu-calls")
    linked = (samples.union(calls)
              .key_by(lambda batch: batch.key, key_type=Types.STRING())
              .process(LinkCalls(int(gpu.link_timeout_s * 1000), config.topics.spans))
              .name("link-calls-to-gpus").uid("link-calls-to-gpus"))
    # behind a key-by: the costs wait for its watermark (no idle announcement lets the
    # watermark pass what it emits; io.seedance.flink.StayActive)
    costs = (stay_active(linked, "link-calls-stay-active", "link-calls-stay-active")
             .key_by(lambda batch: batch.key, key_type=Types.STRING())
             .process(CostPerGpu(gpu.prices, int(gpu.nominal_interval_s * 1000),
                                 int(gpu.max_gap_s * 1000), int(gpu.emit_every_s * 1000)),
                      output_type=Types.STRING())
             .name("cost-per-gpu").uid("cost-per-gpu"))
    dead = samples.get_side_output(DEAD_LETTERS) \
        .union(linked.get_side_output(DEAD_LETTERS))
    write(costs, dead, costs.get_side_output(LATE), config, bootstrap)


def write(costs: DataStream, dead: DataStream, late: DataStream, config: StreamingJobConfig,
          bootstrap: str) -> None:
    # keyed by GPU: one GPU's priced intervals stay in order in one partition
    costs.sink_to(build_sink(config, bootstrap, config.gpu.costs_topic, "gpu", keyed=True)) \
        .name("gpu-costs-sink").uid("gpu-costs-sink")
    dead.sink_to(build_sink(config, bootstrap, config.gpu.metrics_dead_letter, "gpu")) \
        .name("gpu-dead-letter-sink").uid("gpu-dead-letter-sink")
    late.sink_to(build_sink(config, bootstrap, config.topics.late, "gpu")) \
        .name("gpu-late-sink").uid("gpu-late-sink")


def run_gpu_job(config: StreamingJobConfig, bootstrap: str, job_name: str = GPU_COST.flink_name,
                env: StreamExecutionEnvironment | None = None) -> JobExecutionResult:
    return run_pipeline(build_gpu_pipeline, config, bootstrap, job_name, env)
