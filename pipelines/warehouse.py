"""The warehouse: tables the dashboards read, loaded from the result topics.

The embedded default is a SQLite file. Loading is idempotent (upsert by key) and
exactly-once end to end: the loader reads with read_committed and stores the next Kafka
offset in the same database transaction as the rows, so a crash never loses or doubles.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from pipelines.paths import state_home

DDL = Path(__file__).resolve().parent.parent / "schemas" / "sql" / "warehouse.sql"

CREDIT_COLUMNS = ("model", "order_id", "touch_index", "user_id", "conversion_ts_ms",
                  "conversion_date", "channel", "campaign", "touch_ts_ms", "credit", "revenue",
                  "currency")


def default_url() -> str:
    return f"sqlite:///{state_home() / 'warehouse.db'}"


def _sqlite_path(url: str) -> Path:
    if not url.startswith("sqlite:///"):
        raise ValueError(f"unsupported warehouse URL {url!r}: expected sqlite:///path/to/file.db")
    return Path(url.removeprefix("sqlite:///"))


def credit_row(message: bytes) -> tuple[object, ...]:
    """A credits-topic message (JSON) -> a row of attribution_credits."""
    data = json.loads(message)
    day = datetime.fromtimestamp(data["conversion_ts_ms"] / 1000, UTC).strftime("%Y-%m-%d")
    return (data["model"], data["order_id"], int(data["touch_index"]), data["user_id"],
            int(data["conversion_ts_ms"]), day, data["channel"], data["campaign"],
            int(data["touch_ts_ms"]), float(data["credit"]), float(data["revenue"]),
            data["currency"])


class Warehouse:
    def __init__(self, url: str = "") -> None:
        self.url = url or default_url()
        self.path = _sqlite_path(self.url)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path)
        self.db.executescript(DDL.read_text())

    def close(self) -> None:
        self.db.close()

    def upsert_credits(self, rows: Iterable[tuple[object, ...]]) -> None:
        placeholders = ", ".join("?" for _ in CREDIT_COLUMNS)
        updates = ", ".join(f"{c} = excluded.{c}" for c in CREDIT_COLUMNS[3:])
        self.db.executemany(
            f"INSERT INTO attribution_credits ({', '.join(CREDIT_COLUMNS)}) "
            f"VALUES ({placeholders}) "
            f"ON CONFLICT (model, order_id, touch_index) DO UPDATE SET {updates}", rows)

    def load_from_kafka(self, bootstrap: str, topic: str, consumer: str = "warehouse-loader",
                        follow: bool = False, idle_timeout_s: float = 30.0,
                        progress: Callable[[int], None] | None = None) -> int:
        """Load credits from `topic` up to its end (or forever with follow). Returns rows."""
        client = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                               enable_auto_commit=False, isolation_level="read_committed")
        loaded = 0
        try:
            partitions = [TopicPartition(topic, p)
                          for p in sorted(client.partitions_for_topic(topic) or [])]
            if not partitions:
                return 0
            client.assign(partitions)
            stored = dict(self.db.execute(
                "SELECT partition, next_offset FROM kafka_offsets WHERE consumer = ? AND topic = ?",
                (consumer, topic)).fetchall())
            for tp in partitions:
                if tp.partition in stored:
                    client.seek(tp, stored[tp.partition])
                else:
                    client.seek_to_beginning(tp)
            end = client.end_offsets(partitions)
            last_progress = time.monotonic()
            while True:
                batch = client.poll(timeout_ms=500, max_records=10_000)
                rows = [credit_row(r.value) for records in batch.values() for r in records]
                if rows:
                    with self.db:  # one transaction: rows and offsets together
                        self.upsert_credits(rows)
                        self.db.executemany(
                            "INSERT INTO kafka_offsets (consumer, topic, partition, next_offset) "
                            "VALUES (?, ?, ?, ?) ON CONFLICT (consumer, topic, partition) "
                            "DO UPDATE SET next_offset = excluded.next_offset",
                            [(consumer, topic, tp.partition, client.position(tp))
                             for tp in batch])
                    loaded += len(rows)
                    last_progress = time.monotonic()
                    if progress:
                        progress(loaded)
                if not follow:
                    if all(client.position(tp) >= end[tp] for tp in partitions):
                        break
                    if time.monotonic() - last_progress > idle_timeout_s:
                        raise TimeoutError(f"loading {topic} stalled before reaching its end")
        finally:
            client.close()
        return loaded

    def channel_summary(self) -> list[tuple[str, str, float, float]]:
        """(model, channel, conversions credited, revenue credited), largest first."""
        return self.db.execute(
            "SELECT model, channel, SUM(credit), SUM(revenue) FROM attribution_credits "
            "GROUP BY model, channel ORDER BY model, SUM(revenue) DESC").fetchall()

    def totals(self) -> list[tuple[str, int, float, float]]:
        """Per model: orders, conversions credited, revenue credited (conservation check)."""
        return self.db.execute(
            "SELECT model, COUNT(DISTINCT order_id), SUM(credit), SUM(revenue) "
            "FROM attribution_credits GROUP BY model ORDER BY model").fetchall()
