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


def encoded(plan: Plan, batch_size: int = 8, encoding: str = "otlp_proto") -> list[bytes]:
    """A plan's Kafka messages as the project's span exporter writes them (malformed ones
    between batches), collected instead of sent."""
    sink = CollectingProducer()
    emit(plan, KafkaSpanExporter("unused:0", producer=sink, encoding=encoding), sink.append,
         batch_size=batch_size)
    return sink.values
