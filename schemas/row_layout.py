"""How a result row is declared (schemas/rows.py holds the declarations): columns in order
with a logical type, a key and a table; and what consumers derive from a declaration.

Logical types (`Type`):

    string         text                 SQL TEXT              Spark string   pandas object
    date           a UTC day YYYY-MM-DD SQL TEXT              Spark string   pandas object
    bigint         64-bit integer       SQL INTEGER | BIGINT  Spark bigint   pandas int64
    double         float                SQL DOUBLE PRECISION  Spark double   pandas float64
    boolean        true/false           SQL BOOLEAN           Spark boolean  pandas bool
    array<string>  list of text         (not stored in SQL)   Spark array<string>  object
    array<bigint>  list of integers     (not stored in SQL)   Spark array<bigint>  object

A row stored in the warehouse names its `table` and its primary `key` (leading columns).
"""


from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

Type = Literal["string", "date", "bigint", "double", "boolean", "array<string>",
               "array<bigint>"]

SPARK_TYPES: dict[str, str] = {"string": "string", "date": "string", "bigint": "bigint",
                               "double": "double", "boolean": "boolean",
                               "array<string>": "array<string>",
                               "array<bigint>": "array<bigint>"}
PANDAS_DTYPES: dict[str, str] = {"bigint": "int64", "double": "float64", "boolean": "bool"}
# the SQL types schemas/sql/*.sql may declare for each logical type (portable SQL)
SQL_TYPES: dict[str, tuple[str, ...]] = {"string": ("TEXT",), "date": ("TEXT",),
                                         "bigint": ("INTEGER", "BIGINT"),
                                         "double": ("DOUBLE PRECISION",),
                                         "boolean": ("BOOLEAN",)}


@dataclass(frozen=True)
class Column:
    name: str
    type: Type
    doc: str = ""
    nullable: bool = False  # None / SQL NULL allowed


@dataclass(frozen=True)
class Row:
    """One row layout: its columns in order, and where it is stored (if it is)."""

    name: str
    doc: str
    columns: tuple[Column, ...]
    key: tuple[str, ...] = ()  # the columns that identify a row (a table's: leading)
    table: str = ""  # the warehouse table holding these rows; '' for none

    def __post_init__(self) -> None:
        names = self.names
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: a column declared twice")
        if not set(self.key) <= set(names):
            raise ValueError(f"{self.name}: the key {self.key} is not among its columns")
        if self.table and names[:len(self.key)] != self.key:
            raise ValueError(f"{self.name}: the key {self.key} is not its leading columns")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"{self.name} has no column {name!r}")

    def derive(self, name: str, doc: str, items: Iterable[str | Column],
               key: tuple[str, ...] = (), table: str = "") -> Row:
        """Another layout of the same row: `items` are this row's columns by name (in the
        order given) or new columns."""
        columns = tuple(self.column(i) if isinstance(i, str) else i for i in items)
        return Row(name, doc, columns, key, table)

    def select(self, *names: str) -> Row:
        """These columns only, in this order (a frame's or a step's view of the row)."""
        key = self.key if set(self.key) <= set(names) else ()
        return replace(self, columns=tuple(self.column(n) for n in names), key=key, table="")

    def without(self, *names: str) -> Row:
        return self.select(*(n for n in self.names if n not in names))

    def renamed(self, **names: str) -> Row:
        """The same columns, some under another name (old=new)."""
        columns = tuple(replace(c, name=names.get(c.name, c.name)) for c in self.columns)
        key = tuple(names.get(k, k) for k in self.key)
        return replace(self, columns=columns, key=key, table="")

    def spark_types(self) -> dict[str, str]:
        """Column name -> Spark SQL type, in order."""
        return {c.name: SPARK_TYPES[c.type] for c in self.columns}

    def spark_ddl(self) -> str:
        """A Spark DDL schema string (`name type, ...`)."""
        return ", ".join(f"{name} {kind}" for name, kind in self.spark_types().items())

    def pandas_dtypes(self) -> dict[str, str]:
        """Column name -> pandas dtype: numbers as numbers, the rest as objects."""
        return {c.name: PANDAS_DTYPES.get(c.type, "object") for c in self.columns}
