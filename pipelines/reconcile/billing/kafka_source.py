"""Billing envelopes from a Kafka topic, staged with their offsets.

Reads from the offsets stored in the warehouse (table kafka_offsets, consumer
`reconcile-billing`) up to the topic's current end; each message is staged together with
the offset after it, in one transaction, so a crash neither loses nor repeats a message.
A message that does not parse is skipped with its location reported: it cannot be fixed
where it is, and one bad message must not hold back every later restatement.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka import KafkaConsumer, TopicPartition

from pipelines.reconcile.billing.records import BillingBatch, BillingError
from pipelines.reconcile.billing.sources import ParseOptions, parse_message
from pipelines.reconcile.store import ReconcileStore, StageResult

CONSUMER = "reconcile-billing"


@dataclass
class TopicResult:
    messages: int = 0
    staged: StageResult = field(default_factory=StageResult)
    invalid: list[str] = field(default_factory=list)


def stage_topic(store: ReconcileStore, bootstrap: str, topic: str, options: ParseOptions,
                properties: dict[str, str] | None = None, timeout_s: float = 30.0,
                progress: Callable[[str], None] | None = None) -> TopicResult:
    result = TopicResult()
    client = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                           enable_auto_commit=False, isolation_level="read_committed",
                           **(properties or {}))
    try:
        partitions = [TopicPartition(topic, p)
                      for p in sorted(client.partitions_for_topic(topic) or [])]
        if not partitions:
            raise BillingError(topic, [f"no such topic on {bootstrap}"])
        client.assign(partitions)
        stored = store.kafka_offsets(CONSUMER, topic)
        for tp in partitions:
            if tp.partition in stored:
                client.seek(tp, stored[tp.partition])
            else:
                client.seek_to_beginning(tp)
        end = client.end_offsets(partitions)
        deadline = time.monotonic() + timeout_s
        while any(client.position(tp) < end[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading billing topic {topic} did not reach its end "
                                   f"within {timeout_s:.0f}s")
            for tp, records in client.poll(timeout_ms=500, max_records=500).items():
                for record in records:
                    if record.offset >= end[tp]:
                        continue
                    where = f"{topic}[{tp.partition}]@{record.offset}"
                    offsets = [(CONSUMER, topic, tp.partition, record.offset + 1)]
                    try:
                        batch = parse_message(record.value, where, options, record.timestamp)
                    except BillingError as error:
                        result.invalid.append(str(error))
                        store.stage(BillingBatch(where, "invalid"), offsets)  # past it, for good
                        continue
                    result.staged.add(store.stage(batch, offsets))
                    result.messages += 1
        if progress:
            progress(f"billing topic {topic}: {result.messages} messages staged"
                     + (f", {len(result.invalid)} invalid skipped" if result.invalid else ""))
    finally:
        client.close()
    return result

