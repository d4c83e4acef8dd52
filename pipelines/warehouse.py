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
from udfs.gpu_cost import share_idle

DDL = Path(__file__).resolve().parent.parent / "schemas" / "sql" / "warehouse.sql"

CREDIT_COLUMNS = ("model", "order_id", "touch_index", "user_id", "conversion_ts_ms",
                  "conversion_date", "channel", "campaign", "touch_ts_ms", "credit", "revenue",
                  "currency", "stage")


GPU_CALL_COLUMNS = ("gpu_uuid", "interval_end_ms", "trace_id", "span_id", "interval_start_ms",
                    "model", "workload", "pod", "namespace", "user_id", "gpu_seconds",
                    "cost_usd", "interval_cost_usd", "price_known")
GPU_IDLE_COLUMNS = ("gpu_uuid", "interval_end_ms", "interval_start_ms", "model", "idle_seconds",
                    "cost_usd", "interval_cost_usd", "price_known")


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
            data["currency"], data.get("stage", "unknown"))


class Warehouse:
    def __init__(self, url: str = "") -> None:
        self.url = url or default_url()
        self.path = _sqlite_path(self.url)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path)
        self.db.executescript(DDL.read_text())
        # files from before the lifecycle stage existed get the column added
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(attribution_credits)")}
        if "stage" not in columns:
            self.db.execute("ALTER TABLE attribution_credits "
                            "ADD COLUMN stage TEXT NOT NULL DEFAULT 'unknown'")

    def close(self) -> None:
        self.db.close()

    def upsert(self, table: str, columns: tuple[str, ...], keys: int,
               rows: Iterable[tuple[object, ...]]) -> None:
        """Insert or replace by the first `keys` columns (the table's primary key)."""
        placeholders = ", ".join("?" for _ in columns)
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns[keys:])
        self.db.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders}) "
            f"ON CONFLICT ({', '.join(columns[:keys])}) DO UPDATE SET {updates}", rows)

    def upsert_credits(self, messages: list[bytes]) -> None:
        self.upsert("attribution_credits", CREDIT_COLUMNS, 3, map(credit_row, messages))

    def upsert_gpu_costs(self, messages: list[bytes]) -> None:
        calls, idle = [], []
        for message in messages:
            row = json.loads(message)
            if row["kind"] == "call":
                calls.append(tuple(row[c] for c in GPU_CALL_COLUMNS))
            elif row["kind"] == "idle":
                idle.append(tuple(row[c] for c in GPU_IDLE_COLUMNS))
        self.upsert("gpu_call_costs", GPU_CALL_COLUMNS, 4, calls)
        self.upsert("gpu_idle_costs", GPU_IDLE_COLUMNS, 2, idle)

    def load_credits(self, bootstrap: str, topic: str, follow: bool = False) -> int:
        return self.load_from_kafka(bootstrap, topic, self.upsert_credits, follow=follow)

    def load_gpu_costs(self, bootstrap: str, topic: str, follow: bool = False) -> int:
        return self.load_from_kafka(bootstrap, topic, self.upsert_gpu_costs, follow=follow)

    def load_from_kafka(self, bootstrap: str, topic: str,
                        apply: Callable[[list[bytes]], None],
                        consumer: str = "warehouse-loader", follow: bool = False,
                        idle_timeout_s: float = 30.0,
                        progress: Callable[[int], None] | None = None) -> int:
        """Load `topic` up to its end (or forever with follow) through `apply`, which writes
        a batch of messages; returns the number of messages loaded."""
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
                rows = [r.value for records in batch.values() for r in records]
                if rows:
                    with self.db:  # one transaction: rows and offsets together
                        apply(rows)
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

    def gpu_cost_summary(self) -> dict[str, object]:
        """Cost per workload, the costliest traces, idle per GPU, and the conservation check."""
        q = self.db.execute
        return {
            "per_workload": q("SELECT namespace, workload, SUM(gpu_seconds), SUM(cost_usd) "
                              "FROM gpu_call_costs GROUP BY namespace, workload "
                              "ORDER BY SUM(cost_usd) DESC").fetchall(),
            "top_traces": q("SELECT trace_id, user_id, SUM(cost_usd) FROM gpu_call_costs "
                            "GROUP BY trace_id, user_id ORDER BY SUM(cost_usd) DESC "
                            "LIMIT 5").fetchall(),
            "idle_per_gpu": q("SELECT gpu_uuid, model, SUM(idle_seconds), SUM(cost_usd) "
                              "FROM gpu_idle_costs GROUP BY gpu_uuid, model").fetchall(),
            "allocated_usd": q("SELECT COALESCE(SUM(cost_usd), 0) FROM gpu_call_costs")
            .fetchone()[0],
            "idle_usd": q("SELECT COALESCE(SUM(cost_usd), 0) FROM gpu_idle_costs").fetchone()[0],
            "interval_usd": q(
                "SELECT COALESCE(SUM(cost), 0) FROM (SELECT MAX(interval_cost_usd) AS cost FROM "
                "(SELECT gpu_uuid, interval_end_ms, interval_cost_usd FROM gpu_call_costs "
                "UNION ALL SELECT gpu_uuid, interval_end_ms, interval_cost_usd "
                "FROM gpu_idle_costs) GROUP BY gpu_uuid, interval_end_ms)").fetchone()[0],
            # OpenCost-style shared idle, by the same rule as everywhere (udfs.gpu_cost)
            "idle_shared": sorted(share_idle(*self._gpu_totals()).items(),
                                  key=lambda item: -item[1]),
            "fallback_priced_rows": q("SELECT COUNT(*) FROM gpu_call_costs WHERE NOT "
                                      "price_known").fetchone()[0],
        }

    def _gpu_totals(self) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        allocated: dict[str, dict[str, float]] = {}
        for gpu, workload, usd in self.db.execute(
                "SELECT gpu_uuid, workload, SUM(cost_usd) FROM gpu_call_costs "
                "GROUP BY gpu_uuid, workload"):
            allocated.setdefault(gpu, {})[workload] = usd
        idle = dict(self.db.execute(
            "SELECT gpu_uuid, SUM(cost_usd) FROM gpu_idle_costs GROUP BY gpu_uuid").fetchall())
        return allocated, idle

    def stage_summary(self) -> list[tuple[str, str, int, float]]:
        """(model, lifecycle stage, orders, revenue credited)."""
        return self.db.execute(
            "SELECT model, stage, COUNT(DISTINCT order_id), SUM(revenue) "
            "FROM attribution_credits GROUP BY model, stage ORDER BY model, stage").fetchall()

    def totals(self) -> list[tuple[str, int, float, float]]:
        """Per model: orders, conversions credited, revenue credited (conservation check)."""
        return self.db.execute(
            "SELECT model, COUNT(DISTINCT order_id), SUM(credit), SUM(revenue) "
            "FROM attribution_credits GROUP BY model ORDER BY model").fetchall()
