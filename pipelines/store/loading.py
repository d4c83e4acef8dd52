"""The loading of the result topics into the warehouse: each topic's messages as rows of its
table (schemas/rows.py), read from Kafka up to the end (or followed) with exactly-once
effect.

Which sink loads which topic into which tables is the registry's LOADS (pipelines/flink/
jobs.py, beside the jobs' `writes`); `TopicLoader.load_all` loads them all, the `load_*`
methods one topic. `TopicLoader(warehouse, client)` reads with read_committed and stores
the next Kafka offset in the same database transaction as the rows (the kafka_offsets
table), so a crash never loses or doubles; rows are upserted by key, so loading again
changes nothing. Each topic's batch is written by its sink (pipelines/store/sinks.py) in
that transaction. A message that cannot be stored is set aside in load_rejects (`reject`,
which the control loop's inputs use too).
"""

from __future__ import annotations

import base64
import logging
import sqlite3
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import psycopg

from pipelines.flink.jobs import LOADS, Load
from pipelines.kafka.reader import Batch, Offsets, TopicReader
from pipelines.store import sinks
from pipelines.store.sinks import (
    ConversionsSink,
    CreditsSink,
    CustomerLtvSink,
    ExperimentsSink,
    GpuCostsSink,
    RoiSink,
    SpendSink,
)
from pipelines.store.warehouse import Warehouse
from schemas import rows

if TYPE_CHECKING:
    from pipelines.settings.job_config import StreamingJobConfig

LOADER = "warehouse-loader"  # the consumer name kafka_offsets keeps the offsets under

# What a message's content can raise while it is turned into rows and stored; a lost
# connection or a locked database is none of these, and stops the loader as before
UNSTORABLE = (ValueError, KeyError, TypeError, AttributeError, IndexError, OverflowError,
              UnicodeError, psycopg.DataError, psycopg.IntegrityError,
              sqlite3.IntegrityError)
MAX_REJECTED_PAYLOAD = 65_536

log = logging.getLogger(__name__)


def reject_row(consumer: str, topic: str, partition: int, offset: int, reason: str,
               payload: bytes | None) -> tuple[object, ...]:
    """A load_rejects row: a message `consumer` could not use, its place and why."""
    kept = bytes(payload or b"")[:MAX_REJECTED_PAYLOAD]
    return (consumer, topic, partition, offset, reason[:1000], base64.b64encode(kept).decode(),
            datetime.now(UTC).isoformat(timespec="seconds"))


def reject(warehouse: Warehouse, consumer: str, topic: str, partition: int, offset: int,
           reason: str, payload: bytes | None) -> None:
    """Set one message aside in load_rejects (again: the same place is one row)."""
    warehouse.store(rows.LOAD_REJECT,
                    [reject_row(consumer, topic, partition, offset, reason, payload)])


def stored_offsets(warehouse: Warehouse, consumer: str, topic: str) -> dict[int, int]:
    """The next offset to read of each partition of `topic`, as `consumer` stored them."""
    return dict(warehouse.query(
        "SELECT partition, next_offset FROM kafka_offsets WHERE consumer = ? AND topic = ?",
        (consumer, topic)))


def store_offsets(warehouse: Warehouse, offsets: Iterable[tuple[object, ...]]) -> None:
    """Store (consumer, topic, partition, next offset) rows (kafka_offsets' one writer: the
    loader's and the reconciliation's billing consumers store theirs through it)."""
    warehouse.store(rows.KAFKA_OFFSET, offsets)


class TopicLoader:
    """Writes the result topics' messages into a warehouse's tables, each topic through its
    sink; `client`: kafka-python settings of its consumers (security:
    kafka_security.for_python)."""

    def __init__(self, warehouse: Warehouse, client: dict[str, Any] | None = None) -> None:
        self.warehouse = warehouse
        self.client: dict[str, Any] = dict(client or {})

    def load_all(self, bootstrap: str, config: StreamingJobConfig,
                 follow: bool = False) -> list[tuple[Load, int]]:
        """Every topic of the registry's LOADS (pipelines/flink/jobs.py) to its end, each
        through its sink; the messages loaded of each."""
        return [(load, self.load(bootstrap, attrgetter(load.topic)(config),
                                 self.sink(load, config).write, follow=follow))
                for load in LOADS]

    def sink(self, load: Load, config: StreamingJobConfig) -> Any:
        """The sink of pipelines/store/sinks.py `load` names, on this warehouse."""
        options = [attrgetter(option)(config) for option in load.options]
        return getattr(sinks, load.sink)(self.warehouse, *options)

    def load_credits(self, bootstrap: str, topic: str, follow: bool = False) -> int:
        return self.load(bootstrap, topic, CreditsSink(self.warehouse).write, follow=follow)

    def load_conversions(self, bootstrap: str, topic: str, follow: bool = False) -> int:
        return self.load(bootstrap, topic, ConversionsSink(self.warehouse).write,
                         follow=follow)

    def load_gpu_costs(self, bootstrap: str, topic: str, follow: bool = False) -> int:
        return self.load(bootstrap, topic, GpuCostsSink(self.warehouse).write, follow=follow)

    def load_roi(self, bootstrap: str, topic: str, follow: bool = False) -> int:
        return self.load(bootstrap, topic, RoiSink(self.warehouse).write, follow=follow)

    def load_spend(self, bootstrap: str, topic: str, currency: str = "USD",
                   follow: bool = False) -> int:
        return self.load(bootstrap, topic, SpendSink(self.warehouse, currency).write,
                         follow=follow)

    def load_experiments(self, bootstrap: str, topic: str, follow: bool = False) -> int:
        return self.load(bootstrap, topic, ExperimentsSink(self.warehouse).write,
                         follow=follow)

    def load_customer_ltv(self, bootstrap: str, topic: str, follow: bool = False) -> int:
        return self.load(bootstrap, topic, CustomerLtvSink(self.warehouse).write,
                         follow=follow)

    def load(self, bootstrap: str, topic: str, apply: Callable[[list[bytes]], None],
             consumer: str = LOADER, follow: bool = False, idle_timeout_s: float = 30.0,
             progress: Callable[[int], None] | None = None) -> int:
        """Load `topic` up to its end (or forever with follow) through `apply`, which writes
        a batch of messages; returns the number of messages loaded. It resumes from the
        offsets stored under `consumer`; `idle_timeout_s`: the TopicReader's stop rule
        (pipelines/kafka/reader.py), a load gives up only after that long without progress."""
        warehouse = self.warehouse
        stored = stored_offsets(warehouse, consumer, topic)
        loaded = 0

        def write(batch: Batch) -> None:
            nonlocal loaded
            records = batch.records
            offsets = [(consumer, topic, tp.partition, offset)
                       for tp, offset in batch.next_offsets.items()]
            try:
                with warehouse.transaction():  # rows and offsets commit together
                    apply([r.value for r in records])
                    store_offsets(warehouse, offsets)
            except UNSTORABLE:
                self._load_one_by_one(records, apply, consumer, offsets)
            loaded += len(records)
            if progress:
                progress(loaded)

        with TopicReader(bootstrap, topic, Offsets(stored), idle_timeout_s=idle_timeout_s,
                         max_records=10_000, client=self.client, what="loading") as reader:
            reader.read(write, follow=follow)
        return loaded

    def _load_one_by_one(self, records: list[Any], apply: Callable[[list[bytes]], None],
                         consumer: str, offsets: list[tuple[object, ...]]) -> None:
        """A batch that could not be stored, message by message: each in a savepoint of one
        transaction with the offsets; a message that still fails is set aside in
        load_rejects with its place and the reason, and the loading goes on."""
        warehouse = self.warehouse
        rejected = []
        with warehouse.transaction():
            for record in records:
                try:
                    with warehouse.transaction():
                        apply([record.value])
                except UNSTORABLE as error:
                    rejected.append(reject_row(consumer, record.topic, record.partition,
                                               record.offset, f"{type(error).__name__}: "
                                               f"{error}", record.value))
            warehouse.store(rows.LOAD_REJECT, rejected)
            store_offsets(warehouse, offsets)
        for row in rejected:
            log.warning("set aside %s[%s]@%s in load_rejects: %s", row[1], row[2], row[3],
                        row[4])
