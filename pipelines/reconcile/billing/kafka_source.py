"""Billing envelopes from a Kafka topic, staged with their offsets.

Reads from the offsets stored in the warehouse (table kafka_offsets, consumer
`reconcile-billing`) up to the topic's current end; each message is staged together with
the offset after it, in one transaction, so a crash neither loses nor repeats a message.
The read is pipelines/kafka/reader.py's, with its one stop rule.
A message that does not parse is skipped with its location reported: it cannot be fixed
where it is, and one bad message must not hold back every later restatement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pipelines.kafka.reader import Offsets, TopicReader
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
    """Stage the topic's messages from the stored offsets to its end; `timeout_s`: the
    TopicReader's stop rule (pipelines/kafka/reader.py), giving up only after that long
    without progress."""
    result = TopicResult()
    stored = store.kafka_offsets(CONSUMER, topic)
    with TopicReader(bootstrap, topic, Offsets(stored), idle_timeout_s=timeout_s,
                     max_records=500, client=properties,
                     what="reading billing topic") as reader:
        if not reader.partitions:
            raise BillingError(topic, [f"no such topic on {bootstrap}"])
        for record in reader.records():
            where = f"{topic}[{record.partition}]@{record.offset}"
            offsets = [(CONSUMER, topic, record.partition, record.offset + 1)]
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
    return result
