"""The warehouse: tables the dashboards read, loaded from the result topics.

The embedded default is a SQLite file; production uses PostgreSQL (same tables, same
portable DDL in schemas/sql/warehouse.sql). Loading is idempotent (upsert by key) and
exactly-once end to end: the loader reads with read_committed and stores the next Kafka
offset in the same database transaction as the rows, so a crash never loses or doubles.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
from kafka import KafkaConsumer, TopicPartition

from pipelines.codec import credit_messages
from pipelines.settings.paths import PROJECT_ROOT, state_home
from pipelines.sources.ad_spend import SpendError, SpendRecord
from pipelines.sources.ad_spend import parse_message as parse_spend
from udfs.gpu_cost import share_idle

DDL = PROJECT_ROOT / "schemas" / "sql" / "warehouse.sql"

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


class WarehouseError(ValueError):
    """The warehouse cannot be opened or reached; the message names it (password hidden)."""


def redacted_url(url: str) -> str:
    """`url` fit for messages and logs: a password in it (user:PASSWORD@ or ?password=)
    is replaced by ***."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
    query = "&".join(
        f"{key}=***" if key.lower() == "password" else item
        for item in parts.query.split("&") if item
        for key in [item.split("=", 1)[0]])
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return (f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
            + (f"#{parts.fragment}" if parts.fragment else ""))


def _private_file(path: Path) -> None:
    """Create the warehouse file readable by its owner alone (it holds revenue, costs and
    alert errors), and a new folder for it likewise (0600, 0700); an existing one is left
    as its owner set it. SQLite's journal and WAL files take the database file's mode."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))


def _sqlite_path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


# Quoted strings, quoted names and comments are copied as they are; `?` and `;` outside them
# are placeholders and statement ends. (Portable SQL: no dollar quotes.)
_LEXEME = re.compile(r"'[^']*'|\"[^\"]*\"|--[^\n]*|/\*.*?\*/|[?;]", re.S)


def _pyformat(sql: str) -> str:
    """`?` placeholders -> psycopg's `%s`; a literal `%` becomes `%%` (psycopg scans the
    whole text for placeholders, quoted strings included)."""
    return _LEXEME.sub(lambda m: "%s" if m.group(0) == "?" else m.group(0),
                       sql.replace("%", "%%"))


def split_statements(text: str) -> list[str]:
    """The `;`-separated statements of an SQL file, comments removed."""
    statements: list[str] = []
    current: list[str] = []
    pos = 0
    for match in _LEXEME.finditer(text):
        current.append(text[pos:match.start()])
        token = match.group(0)
        if token == ";":
            statements.append("".join(current))
            current = []
        elif token.startswith(("--", "/*")):
            current.append(" ")
        else:
            current.append(token)
        pos = match.end()
    statements.append("".join(current) + text[pos:])
    return [s.strip() for s in statements if s.strip()]


def _plain(value: object) -> object:
    """PostgreSQL's numeric (SUM of integers, NUMERIC columns) as SQLite gives it back:
    an int when integral, else a float."""
    if isinstance(value, Decimal):
        exponent = value.as_tuple().exponent
        return int(value) if isinstance(exponent, int) and exponent >= 0 else float(value)
    return value


ROI_COLUMNS = ("model", "day", "dimension", "key", "conversions", "revenue", "ad_spend",
               "compute_cost", "roi", "currency")
UNALLOCATED_COLUMNS = ("model", "day", "cost_kind", "key", "amount", "currency")


def _last_per_key(rows: list[tuple[object, ...]], keys: int) -> list[tuple[object, ...]]:
    """One row per key, the last one (a batch may hold a key twice; one statement can't)."""
    return list({row[:keys]: row for row in rows}.values())


def credit_rows(message: bytes) -> list[tuple[object, ...]]:
    """A credits-topic message (a JSON table of rows) -> rows of attribution_credits."""
    return [credit_row(data) for data in credit_messages.decode(message)]


def credit_row(data: dict[str, Any]) -> tuple[object, ...]:
    day = datetime.fromtimestamp(data["conversion_ts_ms"] / 1000, UTC).strftime("%Y-%m-%d")
    return (data["model"], data["order_id"], int(data["touch_index"]), data["user_id"],
            int(data["conversion_ts_ms"]), day, data["channel"], data["campaign"],
            int(data["touch_ts_ms"]), float(data["credit"]), float(data["revenue"]),
            data["currency"], data.get("stage", "unknown"))


class Warehouse:
    """The warehouse tables on SQLite (`sqlite:///path`) or PostgreSQL
    (`postgresql://user@host:port/db`; password from the URL or PGPASSWORD).

    The public API is dialect-neutral: SQL uses `?` placeholders, rows come back as tuples
    of plain Python values, statements outside `transaction()` commit on their own.
    """

    def __init__(self, url: str = "", kafka_client: dict[str, Any] | None = None) -> None:
        self.url = url or default_url()
        # kafka-python settings of the loader's consumers (security: kafka_security.for_python)
        self.kafka_client: dict[str, Any] = dict(kafka_client or {})
        self.path: Path | None = None  # the SQLite file, None on PostgreSQL
        self._depth = 0  # open transaction() blocks
        self._conn: Any
        scheme = self.url.split(":", 1)[0].lower()
        if self.url.startswith("sqlite:///"):
            self.dialect = "sqlite"
            self.path = _sqlite_path(self.url)
            _private_file(self.path)
            # no implicit transactions: transaction() says where they begin and end
            self._conn = sqlite3.connect(self.path, isolation_level=None)
        elif scheme in ("postgresql", "postgres"):
            self.dialect = "postgresql"
            try:
                self._conn = psycopg.connect(self.url, autocommit=True)
            except psycopg.Error as error:
                raise WarehouseError(f"cannot connect to the warehouse "
                                     f"{redacted_url(self.url)}: {error}".strip()) from None
        else:
            raise ValueError(f"unsupported warehouse URL {redacted_url(self.url)!r}: expected "
                             "sqlite:///path/to/file.db or postgresql://user@host:port/db")
        try:
            self.apply_ddl(DDL)
        except psycopg.errors.InsufficientPrivilege:
            # a loader may write without being allowed to create: enough if tables exist
            tables = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", DDL.read_text(), re.I)
            missing = [t for t in tables if self.query("SELECT to_regclass(?)", (t,))[0][0]
                       is None]
            if missing:
                raise WarehouseError(
                    f"the warehouse {redacted_url(self.url)} lacks the tables "
                    f"{', '.join(missing)} and this user may not create them: run "
                    f"{DDL.name} there once as the schema's owner") from None
        if self.dialect == "sqlite":
            # files from before the lifecycle stage existed get the column added
            columns = {row[1] for row in self.query("PRAGMA table_info(attribution_credits)")}
            if "stage" not in columns:
                self.execute("ALTER TABLE attribution_credits "
                             "ADD COLUMN stage TEXT NOT NULL DEFAULT 'unknown'")

    # -- the dialect-neutral API ----------------------------------------------------------
    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """Rows of a SELECT (`?` placeholders) as tuples of plain values."""
        rows = self._cursor(sql, params).fetchall()
        if self.dialect == "postgresql":
            return [tuple(_plain(v) for v in row) for row in rows]
        return rows

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        """Run one statement (`?` placeholders); returns the number of rows it changed."""
        return int(self._cursor(sql, params).rowcount)

    def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> None:
        """Run one statement per row, all of them or none (inside a transaction)."""
        if self.dialect == "postgresql":
            sql = _pyformat(sql)
        with self.transaction():
            cursor = self._conn.cursor()
            try:
                cursor.executemany(sql, rows)
            finally:
                cursor.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """A block whose statements commit together, or roll back if it raises. Nested
        blocks are savepoints: an inner one that raises undoes only its own work."""
        if self.dialect == "postgresql":
            with self._conn.transaction():
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
            return
        savepoint = f"sp{self._depth}"
        outer = self._depth == 0
        self._conn.execute("BEGIN" if outer else f"SAVEPOINT {savepoint}")
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            if outer:
                self._conn.execute("ROLLBACK")
            else:
                self._conn.execute(f"ROLLBACK TO {savepoint}")
                self._conn.execute(f"RELEASE {savepoint}")
            raise
        self._depth -= 1
        try:
            self._conn.execute("COMMIT" if outer else f"RELEASE {savepoint}")
        except BaseException:
            if outer:
                self._conn.execute("ROLLBACK")
            raise

    def apply_ddl(self, path: Path | str) -> None:
        """Run a .sql file of `;`-separated statements in one transaction. Idempotent when
        the file is (CREATE ... IF NOT EXISTS), as schemas/sql files are."""
        with self.transaction():
            for statement in split_statements(Path(path).read_text()):
                self.execute(statement)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cursor(self, sql: str, params: Sequence[object]) -> Any:
        if self.dialect == "postgresql":
            return self._conn.execute(_pyformat(sql), tuple(params))
        return self._conn.execute(sql, tuple(params))

    # -- loading --------------------------------------------------------------------------
    def upsert(self, table: str, columns: tuple[str, ...], keys: int,
               rows: Iterable[tuple[object, ...]]) -> None:
        """Insert or replace by the first `keys` columns (the table's primary key)."""
        placeholders = ", ".join("?" for _ in columns)
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns[keys:])
        action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
        self.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders}) "
            f"ON CONFLICT ({', '.join(columns[:keys])}) {action}", rows)

    def upsert_credits(self, messages: list[bytes]) -> None:
        self.upsert("attribution_credits", CREDIT_COLUMNS, 3,
                    [row for message in messages for row in credit_rows(message)])

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

    def upsert_roi(self, messages: list[bytes]) -> None:
        roi, unallocated = [], []
        for message in messages:
            row = json.loads(message)
            if row["kind"] == "roi":
                roi.append(tuple(row[c] for c in ROI_COLUMNS))
            elif row["kind"] == "unallocated":
                unallocated.append(tuple(row[c] for c in UNALLOCATED_COLUMNS))
        # a day reported again within one batch: the later row wins, as in the topic
        self.upsert("roi_daily", ROI_COLUMNS, 4, _last_per_key(roi, 4))
        latest = _last_per_key(unallocated, 4)
        self.upsert("roi_unallocated", UNALLOCATED_COLUMNS, 4,
                    [row for row in latest if row[4] != 0])
        # amount 0: a day reported again withdrew that key (its cost found a conversion)
        self.executemany("DELETE FROM roi_unallocated WHERE model = ? AND day = ? AND "
                         "cost_kind = ? AND key = ?",
                         [row[:4] for row in latest if row[4] == 0])

    def upsert_spend(self, messages: list[bytes], currency: str) -> None:
        """Spend records as the ROI job used them: invalid ones and other currencies (which
        it dead-letters) are left out."""
        rows = []
        for message in messages:
            try:
                record = parse_spend(message)
            except SpendError:
                continue
            if record.currency == currency:
                rows.append(tuple(record))
        self.upsert("ad_spend", tuple(SpendRecord._fields), 4, _last_per_key(rows, 4))

    def load_roi(self, bootstrap: str, topic: str, follow: bool = False) -> int:
        return self.load_from_kafka(bootstrap, topic, self.upsert_roi, follow=follow)

    def load_spend(self, bootstrap: str, topic: str, currency: str = "USD",
                   follow: bool = False) -> int:
        return self.load_from_kafka(bootstrap, topic,
                                    lambda batch: self.upsert_spend(batch, currency),
                                    follow=follow)

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
                               enable_auto_commit=False, isolation_level="read_committed",
                               **self.kafka_client)
        loaded = 0
        try:
            partitions = [TopicPartition(topic, p)
                          for p in sorted(client.partitions_for_topic(topic) or [])]
            if not partitions:
                return 0
            client.assign(partitions)
            stored = dict(self.query(
                "SELECT partition, next_offset FROM kafka_offsets WHERE consumer = ? AND topic = ?",
                (consumer, topic)))
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
                    with self.transaction():  # rows and offsets commit together
                        apply(rows)
                        self.executemany(
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

    # -- summaries ------------------------------------------------------------------------
    def channel_summary(self) -> list[tuple[str, str, float, float]]:
        """(model, channel, conversions credited, revenue credited), largest first."""
        return self.query(
            "SELECT model, channel, SUM(credit), SUM(revenue) FROM attribution_credits "
            "GROUP BY model, channel ORDER BY model, SUM(revenue) DESC")

    def gpu_cost_summary(self) -> dict[str, object]:
        """Cost per workload, the costliest traces, idle per GPU, and the conservation check."""
        q = self.query

        def total(sql: str) -> float:
            return float(q(sql)[0][0])

        return {
            "per_workload": q("SELECT namespace, workload, SUM(gpu_seconds), SUM(cost_usd) "
                              "FROM gpu_call_costs GROUP BY namespace, workload "
                              "ORDER BY SUM(cost_usd) DESC"),
            "top_traces": q("SELECT trace_id, user_id, SUM(cost_usd) FROM gpu_call_costs "
                            "GROUP BY trace_id, user_id ORDER BY SUM(cost_usd) DESC LIMIT 5"),
            "idle_per_gpu": q("SELECT gpu_uuid, model, SUM(idle_seconds), SUM(cost_usd) "
                              "FROM gpu_idle_costs GROUP BY gpu_uuid, model "
                              "ORDER BY gpu_uuid, model"),
            "allocated_usd": total("SELECT COALESCE(SUM(cost_usd), 0) FROM gpu_call_costs"),
            "idle_usd": total("SELECT COALESCE(SUM(cost_usd), 0) FROM gpu_idle_costs"),
            # each interval's cost once, whether it had calls, idle time or both
            "interval_usd": total(
                "SELECT COALESCE(SUM(cost), 0) FROM (SELECT MAX(interval_cost_usd) AS cost FROM "
                "(SELECT gpu_uuid, interval_end_ms, interval_cost_usd FROM gpu_call_costs "
                "UNION ALL SELECT gpu_uuid, interval_end_ms, interval_cost_usd "
                "FROM gpu_idle_costs) AS priced GROUP BY gpu_uuid, interval_end_ms) "
                "AS intervals"),
            # OpenCost-style shared idle, by the same rule as everywhere (udfs.gpu_cost)
            "idle_shared": sorted(share_idle(*self._gpu_totals()).items(),
                                  key=lambda item: -item[1]),
            "fallback_priced_rows": q("SELECT COUNT(*) FROM gpu_call_costs WHERE NOT "
                                      "price_known")[0][0],
        }

    def _gpu_totals(self) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        allocated: dict[str, dict[str, float]] = {}
        for gpu, workload, usd in self.query(
                "SELECT gpu_uuid, workload, SUM(cost_usd) FROM gpu_call_costs "
                "GROUP BY gpu_uuid, workload"):
            allocated.setdefault(gpu, {})[workload] = usd
        idle = dict(self.query(
            "SELECT gpu_uuid, SUM(cost_usd) FROM gpu_idle_costs GROUP BY gpu_uuid"))
        return allocated, idle

    def roi_summary(self, dimension: str) -> list[tuple[str, str, float, float, float]]:
        """(model, key, revenue, ad spend, compute) over all days, for one dimension."""
        return self.query(
            "SELECT model, key, SUM(revenue), SUM(ad_spend), SUM(compute_cost) FROM roi_daily "
            "WHERE dimension = ? GROUP BY model, key ORDER BY model, key", (dimension,))

    def stage_summary(self) -> list[tuple[str, str, int, float]]:
        """(model, lifecycle stage, orders, revenue credited)."""
        return self.query(
            "SELECT model, stage, COUNT(DISTINCT order_id), SUM(revenue) "
            "FROM attribution_credits GROUP BY model, stage ORDER BY model, stage")

    def totals(self) -> list[tuple[str, int, float, float]]:
        """Per model: orders, conversions credited, revenue credited (conservation check)."""
        return self.query(
            "SELECT model, COUNT(DISTINCT order_id), SUM(credit), SUM(revenue) "
            "FROM attribution_credits GROUP BY model ORDER BY model")
