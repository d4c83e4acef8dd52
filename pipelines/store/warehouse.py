"""The warehouse: the tables the dashboards read, on SQLite or PostgreSQL.

The embedded default is a SQLite file; production uses PostgreSQL (same tables, same
portable DDL in schemas/sql/warehouse.sql, whose rows schemas/rows.py declares). This module
is the connection, the DDL and the dialect-neutral API (query, execute, transaction,
upsert by key). What uses it takes a `Warehouse`: the result topics are loaded by
pipelines/store/loading.py (`TopicLoader`: idempotent and exactly-once end to end), each
table is written through its sink (pipelines/store/sinks.py), the summaries are
pipelines/store/summaries.py.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from pipelines.settings.paths import PROJECT_ROOT, state_home
from schemas.rows import Row

DDL = PROJECT_ROOT / "schemas" / "sql" / "warehouse.sql"


# columns added to a table after it first shipped: (table, column, SQL definition)
ADDED_COLUMNS = (
    ("attribution_credits", "stage", "TEXT NOT NULL DEFAULT 'unknown'"),
    ("experiment_results", "heavy_tail", "BOOLEAN NOT NULL DEFAULT FALSE"),
    ("experiment_results", "note", "TEXT NOT NULL DEFAULT ''"),
    ("roi_daily", "roas", "DOUBLE PRECISION"),
    ("roi_daily", "margin_roi", "DOUBLE PRECISION"),
)


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


def _sqlite_connection(path: Path, create: bool) -> sqlite3.Connection:
    if create:
        _private_file(path)
    elif not path.is_file():
        raise WarehouseError(
            f"no warehouse at {path}: "
            + ("it is not a file" if path.exists() else "the file does not exist")
            + " (check the path; `seedance load` or a job creates one)")
    # no implicit transactions: transaction() says where they begin and end
    if create:
        return sqlite3.connect(path, isolation_level=None)
    # mode=rw: should the file vanish after the check, SQLite fails instead of creating it
    return sqlite3.connect(f"{path.absolute().as_uri()}?mode=rw", uri=True,
                           isolation_level=None)


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


class Warehouse:
    """The warehouse tables on SQLite (`sqlite:///path`) or PostgreSQL
    (`postgresql://user@host:port/db`; password from the URL or PGPASSWORD).

    The public API is dialect-neutral: SQL uses `?` placeholders, rows come back as tuples
    of plain Python values, statements outside `transaction()` commit on their own.
    """

    def __init__(self, url: str = "", *, create: bool = True) -> None:
        """`create=False`: a SQLite file that is not there is a WarehouseError naming the
        path, and nothing is created -- what only reads a warehouse must not leave an empty
        one (and its folders) behind a mistyped path."""
        self.url = url or default_url()
        self.path: Path | None = None  # the SQLite file, None on PostgreSQL
        self._depth = 0  # open transaction() blocks
        self._conn: Any
        scheme = self.url.split(":", 1)[0].lower()
        if self.url.startswith("sqlite:///"):
            self.dialect = "sqlite"
            self.path = _sqlite_path(self.url)
            self._conn = _sqlite_connection(self.path, create)
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
        except sqlite3.DatabaseError as error:
            self._conn.close()
            raise WarehouseError(f"{self.path} is not a SQLite database ({error})") from None
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
        # warehouses from before these columns existed get them added
        for table, column, definition in ADDED_COLUMNS:
            if self.dialect == "sqlite":
                columns = {row[1] for row in self.query(f"PRAGMA table_info({table})")}
                if column not in columns:
                    self.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
            elif not self.query("SELECT 1 FROM information_schema.columns WHERE "
                                "table_schema = current_schema() AND table_name = ? AND "
                                "column_name = ?", (table, column)):
                try:
                    self.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} "
                                 f"{definition}")
                except psycopg.Error as error:
                    raise WarehouseError(
                        f"the warehouse {redacted_url(self.url)} lacks {table}.{column} and "
                        f"this user may not add it: run {DDL.name} there once as the "
                        f"schema's owner ({error})") from None

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

    def has_table(self, name: str) -> bool:
        """Whether the table is there (the reconciliation's appear only once `seedance
        reconcile` has run: the dashboard shows an empty state until then)."""
        if self.dialect == "sqlite":
            return bool(self.query(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))
        return self.query("SELECT to_regclass(?)", (name,))[0][0] is not None

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

    # -- writes ---------------------------------------------------------------------------
    def upsert(self, table: str, columns: tuple[str, ...], keys: int,
               rows: Iterable[tuple[object, ...]]) -> None:
        """Insert or replace by the first `keys` columns (the table's primary key)."""
        placeholders = ", ".join("?" for _ in columns)
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns[keys:])
        action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
        self.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders}) "
            f"ON CONFLICT ({', '.join(columns[:keys])}) {action}", rows)

    def store(self, row: Row, rows: Iterable[tuple[object, ...]]) -> None:
        """Upsert rows of a declared layout (schemas/rows.py) into its table, by its key."""
        self.upsert(row.table, row.names, len(row.key), rows)

    def insert(self, row: Row, rows: Iterable[tuple[object, ...]]) -> None:
        """Insert rows of a declared layout; a key already there is an error."""
        self.executemany(f"INSERT INTO {row.table} ({', '.join(row.names)}) "
                         f"VALUES ({', '.join('?' for _ in row.names)})", rows)

    def claim(self, row: Row, values: tuple[object, ...]) -> bool:
        """Insert one row of a declared layout only if its key is not there yet (one
        statement: of two processes claiming the same key, one wins). False: taken."""
        names = row.names
        return bool(self.execute(
            f"INSERT INTO {row.table} ({', '.join(names)}) VALUES "
            f"({', '.join('?' for _ in names)}) ON CONFLICT ({', '.join(row.key)}) DO NOTHING",
            values))

    def delete(self, row: Row, columns: tuple[str, ...], values: tuple[object, ...]) -> int:
        """Delete the rows of a declared layout's table whose `columns` (its own) hold
        `values`; returns how many."""
        unknown = [c for c in columns if c not in row.names]
        if unknown or not columns:
            raise ValueError(f"{row.table} has no columns {unknown or columns}")
        return self.execute(f"DELETE FROM {row.table} WHERE "
                            + " AND ".join(f"{c} = ?" for c in columns), values)
