"""Small Kafka helpers shared by the CLI, the demo and the tests: topics and bounded reads."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

from pipelines.kafka.reader import TopicReader

# Records written by the jobs carry event time, which can be older than the retention
# period; topics created here keep records by their arrival time instead.
TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}
# A sample's spans topic (`seedance generate`, the demo, the tests, the benches): its records
# carry when each would have arrived (CreateTime), which decides whether its events count
# (udfs/journeys/arrival.py); kept whatever their age. A live spans topic is better stamped by the
# broker (LogAppendTime: no producer's clock decides; docs/operations.md).
SAMPLE_SPANS_TOPIC = {"message.timestamp.type": "CreateTime", "retention.ms": "-1"}


def ensure_topics(bootstrap: str, topics: list[str], partitions: int = 1,
                  config: dict[str, str] | None = None,
                  client: dict[str, Any] | None = None,
                  settings: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """Create the topics that are missing (`config`: topic settings beyond TOPIC_CONFIG;
    `settings`: more of them for some topics by name, e.g. the compacted ones of
    pipelines.flink.jobs.topic_settings; `client`: kafka-python settings,
    pipelines.kafka.security.for_python)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **(client or {}))
    try:
        existing = set(admin.list_topics())
        missing = [NewTopic(t, partitions, 1, topic_configs={
                       **TOPIC_CONFIG, **(config or {}), **(settings or {}).get(t, {})})
                   for t in topics if t not in existing]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(missing)
    finally:
        admin.close()
    _wait_for_leaders(bootstrap, topics, client=client)


def topic_setting(bootstrap: str, topic: str, key: str,
                  client: dict[str, Any] | None = None) -> str:
    """One setting of a topic as the broker has it (its own or the default)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **(client or {}))
    try:
        found = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                       config_filter="all")
    finally:
        admin.close()
    (configs,) = [c for by_name in found.values() for n, c in by_name.items() if n == topic]
    return str(configs[key]["value"])


def timestamp_type(bootstrap: str, topic: str, client: dict[str, Any] | None = None) -> str:
    """The topic's message.timestamp.type (CreateTime or LogAppendTime)."""
    return topic_setting(bootstrap, topic, "message.timestamp.type", client)


def recreate_topics(bootstrap: str, topics: list[str], partitions: int = 1,
                    settings: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """Delete (if present) and create again: a clean slate for demos."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        present = [t for t in topics if t in set(admin.list_topics())]
        if present:
            with contextlib.suppress(UnknownTopicOrPartitionError):
                admin.delete_topics(present)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and set(present) & set(admin.list_topics()):
                time.sleep(0.2)
    finally:
        admin.close()
    ensure_topics(bootstrap, topics, partitions, settings=settings)


def _wait_for_leaders(bootstrap: str, topics: list[str], timeout_s: float = 30,
                      client: dict[str, Any] | None = None) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **(client or {}))
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(consumer.partitions_for_topic(t) for t in topics):
                return
            time.sleep(0.2)
    finally:
        consumer.close()


def producer(bootstrap: str, **config: object) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, acks="all", **config)


def read_all(bootstrap: str, topic: str, read_committed: bool = True,
             timeout_s: float = 30.0,
             client: dict[str, Any] | None = None) -> Iterator[tuple[bytes | None, bytes]]:
    """Every (key, value) of a topic from the beginning up to the end it had when the read
    began (none when the topic does not exist); `timeout_s`: the TopicReader's stop rule,
    raising only after that long without progress (pipelines/kafka/reader.py)."""
    with TopicReader(bootstrap, topic, read_committed=read_committed, idle_timeout_s=timeout_s,
                     client=client) as reader:
        for record in reader.records():
            yield record.key, record.value


def count_messages(bootstrap: str, topic: str) -> int:
    return sum(1 for _ in read_all(bootstrap, topic))


def consumer_lag(bootstrap: str, group: str, topic: str,
                 client: dict[str, Any] | None = None) -> int:
    """Records of `topic` that consumer group `group` has not committed yet (its end offsets
    minus the group's committed offsets; a partition without a commit counts whole). A
    Flink job commits its source offsets at each completed checkpoint, so 0 means it has
    read, processed and checkpointed everything published so far. The group is only asked
    for its offsets, never joined."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, **(client or {}))
    try:
        partitions = [TopicPartition(topic, p)
                      for p in sorted(consumer.partitions_for_topic(topic) or [])]
        end = consumer.end_offsets(partitions)
        return sum(max(0, end[tp] - max(consumer.committed(tp) or 0, 0)) for tp in partitions)
    finally:
        consumer.close()

