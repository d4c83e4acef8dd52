"""The span exporter against the real broker: what lands on the topic is OTLP."""

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from pipelines.codec.otlp import decode_spans
from pipelines.kafka.io import read_all
from pipelines.sources.kafka_exporter import KafkaSpanExporter
from tests.spans import make_spans

T0 = 1_756_684_800_000_000_000


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_one_export_is_one_message_of_otlp(kafka, topic, encoding):
    name = topic("spans")
    spans = make_spans([
        ("touch", {"user.id": "u1", "marketing.channel": "email"}, T0),
        ("order", {"user.id": "u1", "order.id": "o1", "order.revenue": 9.5}, T0 + 10**9),
    ])
    exporter = KafkaSpanExporter(kafka, name, encoding=encoding)
    assert exporter.export(spans).name == "SUCCESS"
    exporter.shutdown()
    ((key, value),) = list(read_all(kafka, name))
    assert key is None
    if encoding == "otlp_proto":
        request = ExportTraceServiceRequest.FromString(value)
        assert len(request.resource_spans[0].scope_spans[0].spans) == 2
    else:
        assert value.startswith(b"{")
    records = decode_spans(value).records
    assert [r.user_id for r in records] == ["u1", "u1"]
    assert records[1].revenue == 9.5


def test_partition_by_trace_writes_one_keyed_message_per_trace(kafka, topic):
    name = topic("spans")
    spans = make_spans([(f"s{i}", {"user.id": f"u{i}", "marketing.channel": "ads"}, T0 + i)
                        for i in range(5)])
    exporter = KafkaSpanExporter(kafka, name, partition_by_trace=True)
    exporter.export(spans)
    exporter.shutdown()
    messages = list(read_all(kafka, name))
    assert len(messages) == 5
    for key, value in messages:
        (record,) = decode_spans(value).records
        assert key.decode() == record.trace_id


def test_records_are_kept_by_arrival_time_not_by_their_old_event_time(kafka, topic):
    # Results carry event time; a weeks-old CreateTime would let retention delete them at once.
    from kafka import KafkaConsumer, TopicPartition

    from pipelines.kafka.io import producer

    name = topic("results")
    sixty_days_ago_ms = 1_700_000_000_000
    out = producer(kafka)
    out.send(name, b"x", timestamp_ms=sixty_days_ago_ms).get(30)
    out.send("auto-created-" + name, b"y", timestamp_ms=sixty_days_ago_ms).get(30)
    out.close()
    for topic_name in (name, "auto-created-" + name):
        consumer = KafkaConsumer(bootstrap_servers=kafka, auto_offset_reset="earliest")
        consumer.assign([TopicPartition(topic_name, 0)])
        records = consumer.poll(timeout_ms=5000)
        consumer.close()
        (record,) = [r for batch in records.values() for r in batch]
        assert record.timestamp_type == 1  # LogAppendTime
        assert record.timestamp > sixty_days_ago_ms
