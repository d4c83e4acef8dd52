"""The control loop's Kafka inputs: one read_committed consumer (no group: the loop's state
is rebuilt from the topics on start) over the ROI topic and the alerts topic from their
beginning (changelogs) and the metrics topic from `gpu.window_s` ago (only recent samples
count). Each `poll` reads up to the ends the topics had when it began, so one poll sees
everything published before it (pipelines/kafka/reader.py's TopicReader, kept open from
poll to poll)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from pipelines.control.config import ControlConfig
from pipelines.control.state import ControlState
from pipelines.kafka.reader import AtTime, ReadStalled, TopicReader

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
        since_ms = int(time.time() * 1000 - config.gpu.window_s * 1000)
        self.reader = TopicReader(bootstrap, list(self.handlers),
                                  {inputs.metrics_topic: AtTime(since_ms)},
                                  idle_timeout_s=self.timeout_s, poll_ms=200, client=client,
                                  what="reading the control inputs")
        for topic in self.reader.missing:
            log.warning("topic %s does not exist (yet): not read", topic)

    def poll(self) -> int:
        """Read every message published before this call; returns how many. It gives up
        (with a warning) only after `timeout_s` without progress (the TopicReader's stop
        rule): a long topic that is still being read is read to its end."""
        count = 0
        try:
            for record in self.reader.records():
                if record.value is None:
                    continue
                try:
                    self.handlers[record.topic](record.value)
                except Exception as error:  # noqa: BLE001 - one record never stops the loop
                    self.skipped += 1
                    log.warning("skipped %s[%d]@%d: %s", record.topic, record.partition,
                                record.offset, error)
                    if self.reject is not None:
                        try:
                            self.reject(record.topic, record.partition, record.offset,
                                        f"{type(error).__name__}: {error}", record.value)
                        except Exception as failed:  # noqa: BLE001 - logged above already
                            log.warning("could not set %s[%d]@%d aside: %s", record.topic,
                                        record.partition, record.offset, failed)
                    continue
                count += 1
        except ReadStalled:
            log.warning("inputs not read to their ends: no progress for %.0f s", self.timeout_s)
        return count

    def close(self) -> None:
        self.reader.close()
