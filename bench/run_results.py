"""What a benchmark run of the attribution job committed, reduced to figures that can be
compared across shapes: the credits that hold (a digest, which must be the same for every
partition count, parallelism and publishing mode), how many conversions late events
corrected, and the size of the job's last checkpoint (its state)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from pipelines.codec import credit_messages, table_messages


def committed_values(bootstrap: str, topic: str) -> list[bytes]:
    """Every message of a topic that read_committed readers see, partition by partition
    (one key's versions are in one partition, in order)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-results",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    values: list[bytes] = []
    for number in partitions:
        part = TopicPartition(topic, number, 0)
        low, high = consumer.get_watermark_offsets(part, timeout=30)
        if high <= low:
            continue
        consumer.assign([TopicPartition(topic, number, low)])
        while True:
            batch = consumer.consume(10_000, timeout=2.0)
            if not batch:
                break
            for message in batch:
                if message.error():
                    raise RuntimeError(message.error())
                values.append(message.value() or b"")
            position = consumer.position([TopicPartition(topic, number)])[0].offset
            if position >= high:
                break
    consumer.close()
    return values


def credit_digest(values: list[bytes]) -> tuple[int, str]:
    """(rows, digest) of the credits that hold: each conversion's latest rows under each
    model, in a canonical order, credit and revenue to 12 significant digits."""
    rows = sorted((r["model"], r["order_id"], int(r["touch_index"]), r["channel"],
                   r["campaign"], r["user_id"], int(r["conversion_ts_ms"]),
                   f"{float(r['credit']):.12g}", f"{float(r['revenue']):.12g}",
                   r.get("stage", ""))
                  for r in credit_messages.latest(values))
    digest = hashlib.sha256(repr(rows).encode()).hexdigest()[:12]
    return len(rows), digest


def corrected_conversions(values: list[bytes]) -> int:
    """Conversion rows written again because late events changed them."""
    rows = [row["order_id"] for value in values for row in table_messages.decode(value)]
    return len(rows) - len(set(rows))


def checkpoint_bytes(root: Path) -> int:
    """The size of the largest checkpoint under `root` now (a job's checkpoint folder)."""
    sizes = []
    for chk in root.rglob("chk-*"):
        try:
            sizes.append(sum(f.stat().st_size for f in chk.rglob("*") if f.is_file()))
        except FileNotFoundError:  # discarded while it was measured
            continue
    return max(sizes, default=0)


class CheckpointWatcher(threading.Thread):
    """The largest checkpoint seen under a folder while a job runs (a finished job's
    checkpoints are discarded, so they are measured as they come)."""

    def __init__(self, root: Path, every_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.root, self.every_s = root, every_s
        self.largest = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.largest = max(self.largest, checkpoint_bytes(self.root))

    def __enter__(self) -> CheckpointWatcher:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.join(5)
