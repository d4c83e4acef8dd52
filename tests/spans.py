"""Builders of real OpenTelemetry SDK spans for tests (no exporter, no network)."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pipelines.sources.generator import Plan, SeededIds, emit
from pipelines.sources.kafka_exporter import CollectingProducer, KafkaSpanExporter


def make_spans(specs: Sequence[tuple[str, dict[str, object], int]
                              | tuple[str, dict[str, object], int, int]],
               resource: dict[str, str] | None = None) -> list[ReadableSpan]:
    """Spans from (name, attributes, start_ns[, end_ns]); each span is a trace of its own."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(resource or {"service.name": "test"}),
                              id_generator=SeededIds(1))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    for name, attributes, start, *end in specs:
        span = tracer.start_span(name, kind=trace.SpanKind.SERVER, attributes=attributes,
                                 start_time=start)
        span.end(end_time=end[0] if end else start + 1_000_000)
    provider.shutdown()
    return list(memory.get_finished_spans())


class Stamped(bytes):
    """A message value with the timestamp its record is sent with (when it arrives: the
    generator's shipping time; None: the producer's clock)."""

    timestamp_ms: int | None = None


def stamped(sink: CollectingProducer) -> list[bytes]:
    """What a CollectingProducer got, each value with its timestamp."""
    out = []
    for value, timestamp in zip(sink.values, sink.timestamps, strict=True):
        message = Stamped(value)
        message.timestamp_ms = timestamp
        out.append(message)
    return out


def stamp_of(value: bytes | None) -> int | None:
    """The timestamp to send `value` with (`Stamped`), or None."""
    return getattr(value, "timestamp_ms", None)


def plain(value: bytes | None) -> bytes | None:
    """`value` as a Kafka client takes it (kafka-python refuses a subclass of bytes)."""
    return None if value is None else bytes(value)


def encoded(plan: Plan, batch_size: int = 8, encoding: str = "otlp_proto") -> list[bytes]:
    """A plan's Kafka messages as the project's span exporter writes them (malformed ones
    between batches), collected instead of sent, each stamped with its arrival (send it
    with `timestamp_ms=stamp_of(value)`)."""
    sink = CollectingProducer()
    emit(plan, KafkaSpanExporter("unused:0", producer=sink, encoding=encoding), sink.append,
         batch_size=batch_size)
    return stamped(sink)
