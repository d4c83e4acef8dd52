"""An OpenTelemetry `SpanExporter` that publishes OTLP to Kafka.

Wire format is that of the OpenTelemetry Collector's kafka exporter, so a Collector's kafka
receiver can read what this writes, and this pipeline can read what a Collector writes:
one `ExportTraceServiceRequest` per message value (`otlp_proto` by default, or
`otlp_json`); with `partition_by_trace=True` one message per trace, keyed by the trace id
as 32 lowercase hex digits (the Collector's `partition_traces_by_id`). Records carry the
producer's send time as their timestamp (CreateTime), or `timestamp_ms` where it is set (a
sample replaying when its spans arrived: pipelines.sources.generator.emit).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from kafka import KafkaProducer
from kafka.errors import KafkaError
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from pipelines.codec.otlp import request_to_json
from pipelines.settings.topics import TopicsConfig

log = logging.getLogger(__name__)

DEFAULT_TOPIC = TopicsConfig.spans  # the job config's default spans topic
# The broker's default message.max.bytes is ~1 MB; stay under it with room for headers.
DEFAULT_MAX_MESSAGE_BYTES = 900_000


class KafkaSpanExporter(SpanExporter):
    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = DEFAULT_TOPIC,
        encoding: str = "otlp_proto",
        partition_by_trace: bool = False,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        producer: KafkaProducer | None = None,
        **producer_config: object,
    ) -> None:
        if encoding not in ("otlp_proto", "otlp_json"):
            raise ValueError(f"encoding must be otlp_proto or otlp_json, not {encoding!r}")
        self.topic = topic
        self.encoding = encoding
        self.partition_by_trace = partition_by_trace
        self.max_message_bytes = max_message_bytes
        self._producer = producer or KafkaProducer(
            bootstrap_servers=bootstrap_servers,
            acks="all",
            linger_ms=5,
            max_request_size=max_message_bytes + 100_000,
            **producer_config,
        )
        self._closed = False
        # the records' timestamp (ms); None: the producer's clock at sending
        self.timestamp_ms: int | None = None

    def _encode(self, spans: Sequence[ReadableSpan]) -> list[bytes]:
        """Encode spans into one or more messages, each under max_message_bytes."""
        request = encode_spans(spans)
        raw = request.SerializePartialToString()
        body = raw if self.encoding == "otlp_proto" else request_to_json(request)
        if len(body) <= self.max_message_bytes or len(spans) == 1:
            return [body]
        half = len(spans) // 2
        return self._encode(spans[:half]) + self._encode(spans[half:])

    def _batches(self, spans: Sequence[ReadableSpan]) -> list[tuple[bytes | None, bytes]]:
        if not self.partition_by_trace:
            return [(None, body) for body in self._encode(spans)]
        by_trace: dict[int, list[ReadableSpan]] = defaultdict(list)
        for span in spans:
            by_trace[span.context.trace_id].append(span)
        return [
            (format(trace_id, "032x").encode(), body)
            for trace_id, group in by_trace.items()
            for body in self._encode(group)
        ]

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            futures = [self._producer.send(self.topic, key=key, value=body,
                                           timestamp_ms=self.timestamp_ms)
                       for key, body in self._batches(spans)]
            self._producer.flush()
            for future in futures:
                future.get(timeout=30)
        except KafkaError as error:
            log.error("exporting %d spans to Kafka topic %s failed: %s",
                      len(spans), self.topic, error)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self._producer.flush(timeout=timeout_millis / 1000)
        return True

    def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self._producer.close()


class CollectingProducer:
    """Stands in for a KafkaProducer where no broker is wanted (benchmarks, tests): keeps
    every message value in order, in `values`, and its timestamp in `timestamps` (None where
    the producer's clock would set it); `append` takes raw values the same way."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.timestamps: list[int | None] = []

    def append(self, value: bytes) -> None:
        self.values.append(value)
        self.timestamps.append(None)

    def send(self, topic: str, key: bytes | None = None, value: bytes = b"",
             timestamp_ms: int | None = None) -> object:
        self.values.append(value)
        self.timestamps.append(timestamp_ms)
        return self

    def get(self, timeout: float | None = None) -> None:
        return None

    def flush(self, timeout: float | None = None) -> None:
        return None

    def close(self) -> None:
        return None
