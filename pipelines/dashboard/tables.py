"""What a dashboard view is made of: tables of typed columns and headline figures.

A Table's rows are exactly what the page shows and what its CSV export holds, so the two
can never disagree; only the formatting of a cell differs (the CSV keeps full precision).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipelines.store.warehouse import Warehouse

# How a column's values are shown: text as is; money and number with 2 decimals and
# thousands separators; ratio (ROI) with 2 decimals; percent and share as x100 with a %;
# count as a whole number. None is shown as an em dash.
KINDS = ("text", "money", "number", "ratio", "percent", "share", "count")


@dataclass(frozen=True)
class Column:
    name: str  # CSV header
    label: str  # table header on the page
    kind: str = "text"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown column kind {self.kind!r}")


@dataclass(frozen=True)
class Table:
    name: str  # stable id: the HTML table's id and the CSV file name
    title: str
    columns: tuple[Column, ...]
    rows: list[tuple[Any, ...]]
    note: str = ""  # what the filters do not apply to, and why
    empty: str = "No rows for these filters."


@dataclass(frozen=True)
class Kpi:
    name: str  # stable id for the page element
    label: str
    value: float | None
    kind: str = "money"


@dataclass
class View:
    name: str
    title: str
    tables: list[Table] = field(default_factory=list)
    kpis: list[Kpi] = field(default_factory=list)
    notice: str = ""  # shown instead of the view when its source tables are missing or empty

    def table(self, name: str) -> Table:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(name)


def format_value(value: Any, kind: str) -> str:
    """A cell as the page shows it (the CSV export writes the raw value instead)."""
    if value is None:
        return "—"
    if kind == "text":
        return str(value)
    number = float(value)
    if kind == "count":
        return f"{round(number):,}"
    if kind in ("percent", "share"):
        return f"{number * 100:+.2f} %" if kind == "percent" else f"{number * 100:.1f} %"
    if kind == "ratio":
        return f"{number:,.2f}"
    return f"{number:,.2f}"


def table_exists(warehouse: Warehouse, name: str) -> bool:
    """Whether the warehouse has the table (the reconciliation tables appear only once
    `seedance reconcile` has run; the dashboard shows an empty state until then)."""
    if warehouse.dialect == "sqlite":
        return bool(warehouse.query(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))
    return warehouse.query("SELECT to_regclass(?)", (name,))[0][0] is not None


def roi_of(revenue: float, cost: float) -> float | None:
    """Attributed revenue per unit of cost, as udfs.roi defines it; None without cost."""
    return revenue / cost if cost > 0 else None
