"""The warehouse's loading of the result topics: each topic's messages as rows of its table
(schemas/rows.py), read from Kafka up to the end (or followed) with exactly-once effect.

The loader reads with read_committed and stores the next Kafka offset in the same database
transaction as the rows (the kafka_offsets table), so a crash never loses or doubles; rows
are upserted by key, so loading again changes nothing. `TopicLoading` gives `Warehouse`
these methods (`warehouse.load_credits(bootstrap, topic)`, ...).
"""

from __future__ import annotations

import base64
import json
import logging
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg

from pipelines.codec import credit_messages
from pipelines.kafka.reader import Batch, Offsets, TopicReader
from pipelines.sources.ad_spend import SpendError
from pipelines.sources.ad_spend import parse_message as parse_spend
from schemas import rows
from udfs.periods import day_of

if TYPE_CHECKING:
    from pipelines.store.warehouse import Warehouse

LOADER = "warehouse-loader"  # the consumer name kafka_offsets keeps the offsets under
_CASTS: dict[str, Callable[[Any], Any]] = {"bigint": int, "double": float}
_CREDIT_CASTS = [(c.name, _CASTS.get(c.type)) for c in rows.ATTRIBUTION_CREDITS.columns]


def credit_rows(message: bytes) -> list[tuple[object, ...]]:
    """A credits-topic message (a JSON table of rows) -> rows of attribution_credits."""
    return [credit_row(data) for data in credit_messages.decode(message)]


def credit_row(data: dict[str, Any]) -> tuple[object, ...]:
    """A credit row (rows.CREDIT, as a dict) -> a row of attribution_credits."""
    values = {**data, "stage": data.get("stage", "unknown"),
              "conversion_date": day_of(data["conversion_ts_ms"])}
    return tuple(cast(values[name]) if cast else values[name] for name, cast in _CREDIT_CASTS)


def last_per_key(rows: list[tuple[object, ...]], keys: int) -> list[tuple[object, ...]]:
    """One row per key, the last one (a batch may hold a key twice; one statement can't)."""
    return list({row[:keys]: row for row in rows}.values())


# What a message's content can raise while it is turned into rows and stored; a lost
# connection or a locked database is none of these, and stops the loader as before
UNSTORABLE = (ValueError, KeyError, TypeError, AttributeError, IndexError, OverflowError,
              UnicodeError, psycopg.DataError, psycopg.IntegrityError,
              sqlite3.IntegrityError)
MAX_REJECTED_PAYLOAD = 65_536
_RATIOS = ("roas", "margin_roi")

log = logging.getLogger(__name__)


def reject_row(consumer: str, topic: str, partition: int, offset: int, reason: str,
               payload: bytes | None) -> tuple[object, ...]:
    """A load_rejects row: a message `consumer` could not use, its place and why."""
    kept = bytes(payload or b"")[:MAX_REJECTED_PAYLOAD]
    return (consumer, topic, partition, offset, reason[:1000], base64.b64encode(kept).decode(),
            datetime.now(UTC).isoformat(timespec="seconds"))


class TopicLoading:
    """`Warehouse`'s methods that write the result topics' messages into its tables."""

    def _load_one_by_one(self: Warehouse, records: list[Any],
                         apply: Callable[[list[bytes]], None], consumer: str,
                         offsets: list[tuple[object, ...]]) -> None:
        """A batch that could not be stored, message by message: each in a savepoint of one
        transaction with the offsets; a message that still fails is set aside in
        load_rejects with its place and the reason, and the loading goes on."""
        rejected = []
        with self.transaction():
            for record in records:
                try:
                    with self.transaction():
                        apply([record.value])
                except UNSTORABLE as error:
                    rejected.append(reject_row(consumer, record.topic, record.partition,
                                               record.offset, f"{type(error).__name__}: "
                                               f"{error}", record.value))
            self.store(rows.LOAD_REJECT, rejected)
            self.store(rows.KAFKA_OFFSET, offsets)
        for row in rejected:
            log.warning("set aside %s[%s]@%s in load_rejects: %s", row[1], row[2], row[3],
                        row[4])

    def reject(self: Warehouse, consumer: str, topic: str, partition: int, offset: int,
               reason: str, payload: bytes | None) -> None:
        """Set one message aside in load_rejects (again: the same place is one row)."""
        self.store(rows.LOAD_REJECT,
                   [reject_row(consumer, topic, partition, offset, reason, payload)])

    def upsert_credits(self: Warehouse, messages: list[bytes]) -> None:
        """A conversion's rows under a model replace all it had (pipelines/codec/
        credit_messages.py): of a batch, the last message's rows per (model, order_id)."""
        groups = {key: [credit_row(row) for row in group]
                  for key, group in credit_messages.latest_groups(messages).items()}
        self.replace_groups(rows.ATTRIBUTION_CREDITS, 2, groups)

    def upsert_gpu_costs(self: Warehouse, messages: list[bytes]) -> None:
        """gpu_costs messages: kind call and idle rows (the rest, e.g. unobserved, skipped)."""
        calls, idle = [], []
        for message in messages:
            row = json.loads(message)
            if row["kind"] == "call":
                calls.append(tuple(row[c] for c in rows.GPU_CALL_COST.names))
            elif row["kind"] == "idle":
                idle.append(tuple(row[c] for c in rows.GPU_IDLE_COST.names))
        self.store(rows.GPU_CALL_COST, calls)
        self.store(rows.GPU_IDLE_COST, idle)

    def upsert_roi(self: Warehouse, messages: list[bytes]) -> None:
        roi, unallocated, orders = [], [], []
        for message in messages:
            row = json.loads(message)
            if row["kind"] == "roi":
                # (ratios absent from rows written before they existed)
                roi.append((*(row[c] if c not in _RATIOS else row.get(c)
                              for c in rows.ROI_DAILY.names), bool(row.get("withdrawn"))))
            elif row["kind"] == "unallocated":
                unallocated.append(tuple(row[c] for c in rows.ROI_UNALLOCATED.names))
            elif row["kind"] == "order_cost":
                orders.append(tuple(row[c] for c in rows.ORDER_COST.names))
        self.store(rows.ORDER_COST, last_per_key(orders, len(rows.ORDER_COST.key)))
        # a day reported again within one batch: the later row wins, as in the topic; a
        # withdrawn key (no credit left there after a correction) is deleted
        keys = len(rows.ROI_DAILY.key)
        latest_roi = last_per_key(roi, keys)
        self.store(rows.ROI_DAILY, [row[:-1] for row in latest_roi if not row[-1]])
        self.executemany(f"DELETE FROM {rows.ROI_DAILY.table} WHERE "
                         + " AND ".join(f"{k} = ?" for k in rows.ROI_DAILY.key),
                         [row[:keys] for row in latest_roi if row[-1]])
        keys = len(rows.ROI_UNALLOCATED.key)
        amount = rows.ROI_UNALLOCATED.names.index("amount")
        latest = last_per_key(unallocated, keys)
        self.store(rows.ROI_UNALLOCATED, [row for row in latest if row[amount] != 0])
        # amount 0: a day reported again withdrew that key (its cost found a conversion)
        self.executemany(f"DELETE FROM {rows.ROI_UNALLOCATED.table} WHERE "
                         + " AND ".join(f"{k} = ?" for k in rows.ROI_UNALLOCATED.key),
                         [row[:keys] for row in latest if row[amount] == 0])

    def upsert_spend(self: Warehouse, messages: list[bytes], currency: str) -> None:
        """Spend records as the ROI job used them: invalid ones and other currencies (which
        it dead-letters) are left out."""
        spend = []
        for message in messages:
            try:
                record = parse_spend(message)
            except SpendError:
                continue
            if record.currency == currency:
                spend.append(tuple(getattr(record, c) for c in rows.AD_SPEND.names))
        self.store(rows.AD_SPEND, last_per_key(spend, len(rows.AD_SPEND.key)))

    def upsert_experiments(self: Warehouse, messages: list[bytes]) -> None:
        """Either experiments topic: exposure rows and conversion rows, told by their
        fields."""
        exposures, conversions = [], []
        for message in messages:
            row = json.loads(message)
            if "order_id" in row:
                conversions.append(tuple(row[c] for c in rows.EXPERIMENT_CONVERSION.names))
            else:
                exposures.append(tuple(row[c] for c in rows.EXPERIMENT_EXPOSURE.names))
        # a user's FIRST exposure is the one kept: a later row for the same user and flag
        # (the job forgot them after its retention and saw them again) never replaces it
        first = rows.EXPERIMENT_EXPOSURE.names.index("first_exposure_ms")
        keys = len(rows.EXPERIMENT_EXPOSURE.key)
        newest_first = sorted(exposures, key=lambda r: -int(str(r[first])))
        earliest = last_per_key(newest_first, keys)
        names = rows.EXPERIMENT_EXPOSURE.names
        self.executemany(
            f"INSERT INTO {rows.EXPERIMENT_EXPOSURE.table} ({', '.join(names)}) VALUES "
            f"({', '.join('?' for _ in names)}) ON CONFLICT ({', '.join(names[:keys])}) DO "
            f"UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in names[keys:])} WHERE "
            f"excluded.first_exposure_ms < {rows.EXPERIMENT_EXPOSURE.table}.first_exposure_ms",
            earliest)
        self.store(rows.EXPERIMENT_CONVERSION,
                   last_per_key(conversions, len(rows.EXPERIMENT_CONVERSION.key)))

    def load_experiments(self: Warehouse, bootstrap: str, topic: str,
                         follow: bool = False) -> int:
        return self.load_from_kafka(bootstrap, topic, self.upsert_experiments, follow=follow)

    def load_roi(self: Warehouse, bootstrap: str, topic: str, follow: bool = False) -> int:
        return self.load_from_kafka(bootstrap, topic, self.upsert_roi, follow=follow)

    def load_spend(self: Warehouse, bootstrap: str, topic: str, currency: str = "USD",
                   follow: bool = False) -> int:
        return self.load_from_kafka(bootstrap, topic,
                                    lambda batch: self.upsert_spend(batch, currency),
                                    follow=follow)

    def load_credits(self: Warehouse, bootstrap: str, topic: str, follow: bool = False) -> int:
        return self.load_from_kafka(bootstrap, topic, self.upsert_credits, follow=follow)

    def load_gpu_costs(self: Warehouse, bootstrap: str, topic: str,
                       follow: bool = False) -> int:
        return self.load_from_kafka(bootstrap, topic, self.upsert_gpu_costs, follow=follow)

    def load_from_kafka(self: Warehouse, bootstrap: str, topic: str,
                        apply: Callable[[list[bytes]], None],
                        consumer: str = LOADER, follow: bool = False,
                        idle_timeout_s: float = 30.0,
                        progress: Callable[[int], None] | None = None) -> int:
        """Load `topic` up to its end (or forever with follow) through `apply`, which writes
        a batch of messages; returns the number of messages loaded. It resumes from the
        offsets stored under `consumer`; `idle_timeout_s`: the TopicReader's stop rule
        (pipelines/kafka/reader.py), a load gives up only after that long without progress."""
        stored = dict(self.query(
            "SELECT partition, next_offset FROM kafka_offsets WHERE consumer = ? AND topic = ?",
            (consumer, topic)))
        loaded = 0

        def write(batch: Batch) -> None:
            nonlocal loaded
            records = batch.records
            offsets = [(consumer, topic, tp.partition, offset)
                       for tp, offset in batch.next_offsets.items()]
            try:
                with self.transaction():  # rows and offsets commit together
                    apply([r.value for r in records])
                    self.store(rows.KAFKA_OFFSET, offsets)
            except UNSTORABLE:
                self._load_one_by_one(records, apply, consumer, offsets)
            loaded += len(records)
            if progress:
                progress(loaded)

        with TopicReader(bootstrap, topic, Offsets(stored), idle_timeout_s=idle_timeout_s,
                         max_records=10_000, client=self.kafka_client,
                         what="loading") as reader:
            reader.read(write, follow=follow)
        return loaded
