"""A consumer group's committed offsets, read and written without joining the group (as the
Flink sources commit theirs): what a drained job read is committed for its group, so that
lag tools and a restart without a savepoint agree with it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def commit_offsets(bootstrap: str, client: dict[str, Any], group: str,
                   offsets: dict[str, dict[int, int]]) -> None:
    """Commit `offsets` (the next offset to read per topic and partition) for `group`,
    without joining it (as the Flink sources commit theirs)."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, **client)
    try:
        consumer.commit({TopicPartition(topic, partition): OffsetAndMetadata(offset, "", -1)
                         for topic, partitions in offsets.items()
                         for partition, offset in partitions.items()})
    finally:
        consumer.close()


def committed(bootstrap: str, client: dict[str, Any], group: str,
              topics: Iterable[str]) -> dict[str, dict[int, int]]:
    """The offsets `group` has committed on `topics` (partitions without a commit left out)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, **client)
    try:
        out: dict[str, dict[int, int]] = {}
        for topic in topics:
            for partition in sorted(consumer.partitions_for_topic(topic) or []):
                offset = consumer.committed(TopicPartition(topic, partition))
                if offset is not None and offset >= 0:
                    out.setdefault(topic, {})[partition] = int(offset)
        return out
    finally:
        consumer.close()
