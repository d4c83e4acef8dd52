"""Sample telemetry: realistic user journeys emitted as real OpenTelemetry spans to Kafka.

`plan_events` decides what happens (pure and deterministic for a seed); `emit` drives the
OpenTelemetry SDK with the Kafka exporter to put those events on the topic as an
instrumented web shop would: one trace per page view or checkout, with child spans
(a GPU-backed recommendation call, a database write) around them.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from pipelines.sources.landing_form import landing_attributes
from pipelines.sources.repeat_buying import DIRECT, Order, RepeatBuying
from schemas import telemetry as attr

CHANNELS: dict[str, tuple[str, ...]] = {
    "paid_search": ("gs-brand", "gs-generic"),
    "paid_social": ("meta-prospecting", "meta-retargeting"),
    "display": ("dv360-awareness",),
    "email": ("newsletter-weekly", "cart-reminder"),
    "affiliate": ("aff-coupons",),
    "organic_search": ("",),
}
CHANNEL_WEIGHTS = (0.25, 0.22, 0.15, 0.15, 0.08, 0.15)
GPU_MODELS = {"GPU-6f1c2a3e-0000-4000-8000-00000000a100": "NVIDIA A100-SXM4-80GB",
              "GPU-6f1c2a3e-0000-4000-8000-0000000l40s": "NVIDIA L40S"}
GPUS = tuple(GPU_MODELS)
HOUR_NS = 3_600_000_000_000
DAY_NS = 24 * HOUR_NS


@dataclass(frozen=True)
class PlannedEvent:
    """One thing a user did; `emit_rank` orders emission (it differs from event time)."""

    kind: str  # "touchpoint" | "conversion" | "invalid_conversion" | "exposure" | "gpu_batch"
    user_id: str
    ts_ns: int
    channel: str = ""
    campaign: str = ""
    order_id: str = ""
    revenue: float = 0.0
    currency: str = "USD"
    emit_rank: float = 0.0
    gpu_uuid: str = ""
    duration_ns: int = 0  # a batch run's length on its GPU
    flag_key: str = ""  # an exposure: the experiment's flag and the variant the user saw
    variant: str = ""


@dataclass(frozen=True)
class ExperimentPlan:
    """An experiment to put in the telemetry: every user is exposed at their first event
    to one of `variants` (the first is the control), drawn with `weights` (default equal);
    the orders of users in any other variant earn `revenue_lift` more (0: an A/A test)."""

    flag_key: str
    variants: tuple[str, ...]
    revenue_lift: float = 0.0
    weights: tuple[float, ...] | None = None


@dataclass
class Plan:
    events: list[PlannedEvent] = field(default_factory=list)
    malformed: list[bytes] = field(default_factory=list)

    @property
    def late_count(self) -> int:
        """The events held back to the end (behind the watermark when they come)."""
        return sum(1 for e in self.events if e.emit_rank > 1e30)


def plan_events(users: int, seed: int = 7, days: int = 45,
                start: datetime = datetime(2026, 10, 1, tzinfo=UTC),
                late_fraction: float = 0.01, malformed_messages: int = 3,
                jitter_s: float = 120.0, delayed: tuple[float, float] = (0.0, 0.0),
                experiments: tuple[ExperimentPlan, ...] = (),
                batch_busy: float = 0.0, repeat_buying: RepeatBuying | None = None) -> Plan:
    """A deterministic population: converters, repeat buyers, window-shoppers, direct buyers.

    Events are emitted in time order with up to `jitter_s` of disorder; `late_fraction`
    of touches are held back to the very end (far behind the watermark: late data);
    `delayed` = (fraction, max seconds): that fraction of the other touches is emitted (and
    arrives) up to that long after it happened, among the events of then.
    `experiments` adds exposures (and their lift); without them the plan is what it was.
    `batch_busy` adds a batch workload that keeps each GPU that busy on average (0: none).
    `repeat_buying` follows each first order by repeat orders from a known process (per
    acquisition channel, `pipelines/sources/repeat_buying.py`) instead of second cycles.
    """
    rng = random.Random(seed)
    start_ns = int(start.timestamp()) * 1_000_000_000
    span_ns = days * DAY_NS
    end_ns = start_ns + span_ns  # nothing happens after the window (it lies in the past)
    plan = Plan()
    order_seq = 0
    for index in range(users):
        user = f"user-{index:06d}"
        persona = rng.random()
        at = start_ns + int(rng.random() * span_ns * 0.8)
        cycles = 2 if persona < 0.15 and repeat_buying is None else 1
        converts = persona < 0.6
        for _cycle in range(cycles):
            direct = converts and rng.random() < 0.05
            touches = 0 if direct else rng.randint(1, 6)
            for _ in range(touches):
                channel = rng.choices(list(CHANNELS), CHANNEL_WEIGHTS)[0]
                campaign = rng.choice(CHANNELS[channel])
                gpu = rng.choice(GPUS) if rng.random() < 0.3 else ""
                plan.events.append(PlannedEvent("touchpoint", user, at, channel, campaign,
                                                gpu_uuid=gpu))
                at += int(rng.expovariate(1 / (1.5 * DAY_NS)))
            if converts:
                at += int(rng.random() * 6 * HOUR_NS)
                revenue = round(rng.lognormvariate(4.0, 0.6), 2)
                # One order in ~200 is broken at the source (negative amount): it must be
                # dead-lettered with the reason, not counted.
                kind = "invalid_conversion" if rng.random() < 0.005 else "conversion"
                orders = [Order(at, revenue)] if repeat_buying is None else repeat_buying.orders(
                    user, channel if touches else DIRECT, at, end_ns, revenue, seed)
                for order in orders:  # the first order, then any repeat orders
                    order_seq += 1
                    if order.touch:  # a retargeting touch before a repeat order
                        plan.events.append(PlannedEvent("touchpoint", user, order.touch[2],
                                                        *order.touch[:2]))
                    value = -order.revenue if kind != "conversion" else order.revenue
                    plan.events.append(PlannedEvent(kind, user, order.ts_ns, revenue=value,
                                                    order_id=f"order-{order_seq:07d}"))
                    kind = "conversion"
            at += int((5 + rng.random() * 35) * DAY_NS)
    plan.events = [e for e in plan.events if e.ts_ns < end_ns]
    for experiment in experiments:
        plan.events = _with_experiment(plan.events, experiment, seed)
    ranked: list[PlannedEvent] = []
    for event in sorted(plan.events, key=lambda e: (e.ts_ns, e.user_id, e.kind)):
        late = event.kind == "touchpoint" and rng.random() < late_fraction
        rank = LATE_RANK + len(ranked) if late else event.ts_ns + rng.random() * jitter_s * 1e9
        if not late and delayed[0] and event.kind == "touchpoint" and rng.random() < delayed[0]:
            rank = event.ts_ns + rng.random() * delayed[1] * 1e9
        ranked.append(replace(event, emit_rank=rank))
    ranked += batch_runs(start_ns, end_ns, batch_busy, seed)
    plan.events = sorted(ranked, key=lambda e: e.emit_rank)
    plan.malformed = MALFORMED_SAMPLES[:malformed_messages]
    return plan


BATCH_WORKLOAD = "embeddings-refresh"
BATCH_GPUS = (GPUS[1],)  # the L40S; the A100 serves the shop's ranking calls


def batch_runs(start_ns: int, end_ns: int, busy: float, seed: int) -> list[PlannedEvent]:
    """An hourly batch job on the batch GPUs (an embeddings refresh), each run busy for
    `busy` ± 0.2 of its hour, so the GPUs work between the shop's short ranking calls.
    Drawn from a generator of its own (the users' events do not change); a run is emitted
    when it ends, as a span is exported."""
    if busy <= 0:
        return []
    rng = random.Random(seed ^ 0xBA7C)
    out = []
    for gpu in BATCH_GPUS:
        for hour in range(start_ns, end_ns, HOUR_NS):
            share = min(0.95, max(0.05, busy + rng.uniform(-0.2, 0.2)))
            duration = int(share * HOUR_NS)
            begin = hour + int(rng.random() * (HOUR_NS - duration))
            out.append(PlannedEvent("gpu_batch", "", begin, gpu_uuid=gpu, duration_ns=duration,
                                    emit_rank=begin + duration))
    return out


def _with_experiment(events: list[PlannedEvent], experiment: ExperimentPlan,
                     seed: int) -> list[PlannedEvent]:
    """The events with every user exposed to the experiment at their first event, and the
    lift applied to the later orders of users outside the control. Drawn from a generator
    of its own, so the rest of the plan does not change."""
    rng = random.Random(seed ^ zlib.crc32(experiment.flag_key.encode()))
    first: dict[str, int] = {}
    for event in events:
        if event.ts_ns < first.get(event.user_id, 2**63):
            first[event.user_id] = event.ts_ns
    variant_of = {user: rng.choices(experiment.variants, experiment.weights)[0]
                  for user in sorted(first)}
    control = experiment.variants[0]
    out = []
    for event in events:
        treated = variant_of[event.user_id] != control and experiment.revenue_lift
        if event.kind == "conversion" and treated and event.ts_ns >= first[event.user_id]:
            event = replace(event, revenue=round(event.revenue * (1 + experiment.revenue_lift),
                                                 2))
        out.append(event)
    out += [PlannedEvent("exposure", user, at, flag_key=experiment.flag_key,
                         variant=variant_of[user]) for user, at in sorted(first.items())]
    return out


LATE_RANK = 1e31  # emitted after everything else: far behind the watermark
MALFORMED_SAMPLES = [
    b"this is not OTLP",
    b"\x0a\xff\xff\xff\x0f\x01",  # a length prefix that runs past the end
    b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 7}]}]}',  # cut-off JSON
    b"",
]


class SeededIds(IdGenerator):
    """Trace and span ids from a seeded generator, so a seed reproduces the same telemetry."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed ^ 0x5EED)

    def generate_span_id(self) -> int:
        return self._rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._rng.getrandbits(128) or 1


class BatchingProcessor(SpanProcessor):
    """Hands finished spans to the exporter in batches, synchronously and losslessly.

    (Applications normally use the SDK's BatchSpanProcessor; it drops spans when its queue
    is full, which a generator that must be reproducible cannot allow.)
    """

    def __init__(self, exporter: SpanExporter, batch_size: int) -> None:
        self.exporter = exporter
        self.batch_size = batch_size
        self.buffer: list[ReadableSpan] = []
        self.failures = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.buffer.append(span)
        if len(self.buffer) >= self.batch_size:
            self.force_flush()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        if self.buffer:
            result = self.exporter.export(self.buffer)
            self.failures += result.name != "SUCCESS"
            self.buffer = []
        return self.failures == 0

    def shutdown(self) -> None:
        self.force_flush()
        self.exporter.shutdown()


class SpanEmitter:
    """The OpenTelemetry SDK set up as an instrumented shop: planned events in, spans out
    through `exporter` in batches of `batch_size`."""

    def __init__(self, exporter: SpanExporter, seed: int = 7, batch_size: int = 500,
                 touches: str = "attributes") -> None:
        self.touches = touches  # TOUCH_FORMS: marketing.* attributes, or plain HTTP landings
        self.processor = BatchingProcessor(exporter, batch_size)
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": "web-shop",
                                      "k8s.namespace.name": "shop",
                                      "k8s.pod.name": "web-shop-7d9f8c6b5-x2kqp"}),
            id_generator=SeededIds(seed))
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("seedance.generator")

    def event(self, event: PlannedEvent) -> int:
        """Spans of one event (returns how many)."""
        return _emit_event(self.tracer, event, self.touches == "http")

    def flush(self) -> None:
        self.processor.force_flush()
        if self.processor.failures:
            raise RuntimeError(f"{self.processor.failures} span batches could not be exported")

    def close(self) -> None:
        self.flush()
        self.provider.shutdown()


SHIP_EVERY_NS = HOUR_NS  # the sample's shop ships what it has on every hour


def arrivals_ns(events: list[PlannedEvent], ship_every_ns: int = SHIP_EVERY_NS) -> list[int]:
    """When each event (in emission order) reaches Kafka: at the next shipping time after
    the newest time emitted so far (the emission clock: an event's emission rank where it
    is a time, else its event time). An event emitted behind newer ones, a held-back one
    above all, arrives with them: how late it came is a property of the record
    (udfs/journeys/arrival.py), the same for every way the topic is read."""
    out = []
    clock = 0
    for event in events:
        rank = event.emit_rank
        clock = max(clock, int(rank) if 0 < rank < LATE_RANK else event.ts_ns)
        out.append(-(-clock // ship_every_ns) * ship_every_ns)
    return out


def emit(plan: Plan, exporter: SpanExporter, send_raw: Callable[[bytes], None],
         seed: int = 7, batch_size: int = 500,
         progress: Callable[[int, int], None] | None = None,
         ship_every_ns: int = SHIP_EVERY_NS, touches: str = "attributes") -> int:
    """Emit the plan through the OpenTelemetry SDK; returns the number of spans exported.
    Spans go out in messages of at most `batch_size`, one shipping time each
    (`arrivals_ns`), stamped with it where the exporter stamps records (KafkaSpanExporter's
    `timestamp_ms`: the record's CreateTime). `touches="http"`: touches as plain landing
    requests (pipelines/sources/landing_form.py)."""
    emitter = SpanEmitter(exporter, seed, batch_size, touches)
    # Malformed messages go out at fixed points of the stream, between span batches.
    checkpoints = {int(len(plan.events) * (i + 1) / (len(plan.malformed) + 1)): payload
                   for i, payload in enumerate(plan.malformed)}
    spans = 0
    shipping = 0
    for position, (event, arrival) in enumerate(zip(plan.events,
                                                    arrivals_ns(plan.events, ship_every_ns),
                                                    strict=True)):
        if arrival != shipping:
            emitter.flush()
            shipping = arrival
            if hasattr(exporter, "timestamp_ms"):
                exporter.timestamp_ms = arrival // 1_000_000
        if position in checkpoints:
            emitter.flush()
            send_raw(checkpoints[position])
        spans += emitter.event(event)
        if progress and position % 10_000 == 0:
            progress(position, len(plan.events))
    emitter.close()
    return spans


def _emit_event(tracer: trace.Tracer, event: PlannedEvent, http_touches: bool = False) -> int:
    start = event.ts_ns
    if event.kind == "gpu_batch":
        tracer.start_span("embeddings.refresh", start_time=start, attributes={
            attr.GPU_UUID: event.gpu_uuid, attr.GPU_WORKLOAD: BATCH_WORKLOAD}
        ).end(end_time=start + event.duration_ns)
        return 1
    if event.kind == "exposure":  # as OpenFeature's OpenTelemetry hook records one
        tracer.start_span(f"GET /api/flags/{event.flag_key}", kind=trace.SpanKind.SERVER,
                          start_time=start, attributes={
                              attr.USER_ID: event.user_id, attr.FLAG_KEY: event.flag_key,
                              attr.FLAG_VARIANT: event.variant,
                              "feature_flag.provider.name": "seedance-sample"}
                          ).end(end_time=start + 3_000_000)
        return 1
    if event.kind == "touchpoint":
        attributes: dict[str, object] = {
            attr.USER_ID: event.user_id, attr.CHANNEL: event.channel,
            "http.request.method": "GET", "url.path": "/landing"}
        if event.campaign:
            attributes[attr.CAMPAIGN] = event.campaign
        if http_touches:
            attributes = landing_attributes(event.user_id, event.channel, event.campaign)
        root = tracer.start_span("GET /landing", kind=trace.SpanKind.SERVER,
                                 attributes=attributes, start_time=start)
        children = 0
        if event.gpu_uuid:
            with trace.use_span(root, end_on_exit=False):
                child = tracer.start_span("recommendations.rank", start_time=start + 2_000_000,
                                          attributes={attr.GPU_UUID: event.gpu_uuid,
                                                      attr.GPU_WORKLOAD: "ranker",
                                                      attr.USER_ID: event.user_id})
                child.end(end_time=start + 42_000_000)
                children = 1
        root.end(end_time=start + 60_000_000)
        return 1 + children
    attributes = {attr.USER_ID: event.user_id, attr.ORDER_ID: event.order_id,
                  attr.ORDER_REVENUE: event.revenue, attr.ORDER_CURRENCY: event.currency,
                  "http.request.method": "POST", "url.path": "/checkout"}
    root = tracer.start_span("POST /checkout", kind=trace.SpanKind.SERVER,
                             attributes=attributes, start_time=start)
    with trace.use_span(root, end_on_exit=False):
        tracer.start_span("INSERT orders", kind=trace.SpanKind.CLIENT, start_time=start + 5_000_000,
                          attributes={"db.system.name": "postgresql"}
                          ).end(end_time=start + 9_000_000)
    root.end(end_time=start + 80_000_000)
    return 2
