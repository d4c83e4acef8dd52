"""The control loop's Kafka inputs: one read_committed consumer (no group: the loop's state
is rebuilt from the topics on start) over the ROI topic and the alerts topic from their
beginning (changelogs) and the metrics topic from `gpu.window_s` ago (only recent samples
count). Each `poll` reads up to the ends the topics had when it began, so one poll sees
everything published before it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from pipelines.control.config import ControlConfig
from pipelines.control.state import ControlState

log = logging.getLogger("seedance.control")

# (topic, partition, offset, reason, value) of a record the loop could not use
Rejecter = Callable[[str, int, int, str, bytes], None]


class KafkaInputs:
    def __init__(self, bootstrap: str, config: ControlConfig, state: ControlState,
                 client: dict[str, Any] | None = None,
                 reject: Rejecter | None = None) -> None:
        """`reject(topic, partition, offset, reason, value)`: where a record no handler
        could use is set aside (the warehouse's load_rejects, as the loader does)."""
        inputs = config.inputs
        self.timeout_s = inputs.read_timeout_s
        self.skipped = 0  # records no handler could use (each logged with its place)
        self.reject = reject
        self.handlers: dict[str, Callable[[bytes], None]] = {
            topic: handler for topic, handler in (
                (inputs.roi_topic, state.add_roi), (inputs.alerts_topic, state.add_alert),
                (inputs.metrics_topic, state.add_metrics)) if topic}
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                      group_id=None, isolation_level="read_committed",
                                      **(client or {}))
        partitions = []
        for topic in self.handlers:
            found = self.consumer.partitions_for_topic(topic)
            if not found:
                log.warning("topic %s does not exist (yet): not read", topic)
            partitions += [TopicPartition(topic, p) for p in sorted(found or ())]
        self.partitions = partitions
        self.consumer.assign(partitions)
        self.consumer.seek_to_beginning(*partitions)
        recent = [tp for tp in partitions if tp.topic == inputs.metrics_topic]
        if recent:
            since_ms = int(time.time() * 1000 - config.gpu.window_s * 1000)
            offsets = self.consumer.offsets_for_times({tp: since_ms for tp in recent})
            ends = self.consumer.end_offsets(recent)
            for tp in recent:
                found_offset = offsets.get(tp)
                # the end as of now, not seek_to_end: that one is resolved at the first
                # poll and would skip what is published between now and then
                self.consumer.seek(tp, ends[tp] if found_offset is None
                                   else found_offset.offset)

    def poll(self) -> int:
        """Read every message published before this call; returns how many. It gives up
        (with a warning) only after `timeout_s` without progress: a long topic that is
        still being read is read to its end."""
        if not self.partitions:
            return 0
        end = self.consumer.end_offsets(self.partitions)
        deadline = time.monotonic() + self.timeout_s
        count = 0
        while time.monotonic() < deadline:
            behind = [tp for tp in self.partitions if self.consumer.position(tp) < end[tp]]
            if not behind:
                break
            batch = self.consumer.poll(timeout_ms=200, max_records=5000)
            if batch:
                deadline = time.monotonic() + self.timeout_s
            for tp, records in batch.items():
                for record in records:
                    if record.value is None:
                        continue
                    try:
                        self.handlers[tp.topic](record.value)
                    except Exception as error:  # noqa: BLE001 - one record never stops the loop
                        self.skipped += 1
                        log.warning("skipped %s[%d]@%d: %s", tp.topic, tp.partition,
                                    record.offset, error)
                        if self.reject is not None:
                            self.reject(tp.topic, tp.partition, record.offset,
                                        f"{type(error).__name__}: {error}", record.value)
                        continue
                    count += 1
        else:
            log.warning("inputs not read to their ends: no progress for %.0f s", self.timeout_s)
        return count

    def close(self) -> None:
        self.consumer.close()
