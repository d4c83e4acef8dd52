"""Tables shown a page at a time: at most PAGE_ROWS rows each, the rest a link away.

A page view asks for one page of each table (`?page.<table>=N`, 1 by default); the view
counts the table's rows and fetches only that page (LIMIT/OFFSET in its SQL where the
table is a query), and the page says "rows 201–400 of 10,000" beside links to the
previous and next pages, so no total is ever cut silently. Headline figures are computed
over all the rows, never over the page shown. A CSV export takes every row (`EVERY_ROW`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipelines.dashboard.filters import FilterError
from pipelines.dashboard.tables import Column, Table
from pipelines.store.warehouse import Warehouse

PAGE_ROWS = 200  # rows of a table one page shows at most
PARAM = "page."  # ?page.<table>=N: the page of that table


@dataclass(frozen=True)
class Paging:
    """Which page of each table to show: `size` rows per page (None: every row, as the
    CSV export), `pages` the 1-based page asked for per table (1 when not asked)."""

    size: int | None = PAGE_ROWS
    pages: Mapping[str, int] = field(default_factory=dict)

    def window(self, table: str, total: int) -> tuple[int, int | None]:
        """(offset, limit) of the table's page among `total` rows: a page past the last
        shows the last; limit None is every row."""
        if self.size is None:
            return 0, None
        last = max(0, (total - 1) // self.size)
        return min(max(self.pages.get(table, 1), 1) - 1, last) * self.size, self.size

    def cut(self, table: str, rows: list[tuple[Any, ...]]) -> Page:
        """The page of rows computed in full (a table built in Python, not by one query)."""
        offset, limit = self.window(table, len(rows))
        return Page(rows if limit is None else rows[offset:offset + limit], len(rows), offset)

    def query(self, warehouse: Warehouse, table: str, select: str, params: Sequence[object],
              order: str) -> Page:
        """The page of `select ORDER BY order` (its order must be total, so pages neither
        overlap nor skip): its rows counted in SQL, then only the page fetched."""
        if self.size is None:
            rows = warehouse.query(f"{select} ORDER BY {order}", params)
            return Page(rows, len(rows), 0)
        (total,), = warehouse.query(f"SELECT COUNT(*) FROM ({select}) counted", params)
        offset, limit = self.window(table, int(total))
        rows = warehouse.query(f"{select} ORDER BY {order} LIMIT {int(limit or 0)} "
                               f"OFFSET {int(offset)}", params)
        return Page(rows, int(total), offset)

    def query_string(self, table: str = "", page: int = 0) -> list[tuple[str, str]]:
        """The query parameters of these pages, `table`'s set to `page` (1: left out)."""
        pages = {**self.pages, **({table: page} if table else {})}
        return [(PARAM + name, str(n)) for name, n in sorted(pages.items()) if n > 1]


EVERY_ROW = Paging(size=None)
FIRST_PAGES = Paging()


@dataclass(frozen=True)
class Page:
    rows: list[tuple[Any, ...]]  # the rows shown
    total: int  # rows of the table over all pages
    offset: int  # index of the first row shown among them

    def table(self, name: str, title: str, columns: tuple[Column, ...], **options: Any) -> Table:
        """The table showing this page (options: Table's note, empty, warn)."""
        return Table(name, title, columns, self.rows, total=self.total, offset=self.offset,
                     **options)


def parse_paging(query: Mapping[str, Sequence[str]]) -> Paging:
    """The pages asked for in a parsed query string (urllib.parse.parse_qs)."""
    pages = {}
    for name, values in query.items():
        if name.startswith(PARAM) and values:
            text = values[0].strip()
            # at most 9 digits: int() of thousands of digits raises, and no table has more
            if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < 1:
                shown = text if len(text) <= 20 else text[:20] + "…"
                raise FilterError(f"'{name}' must be a page number (1 or more), got {shown!r}")
            pages[name.removeprefix(PARAM)] = int(text)
    return Paging(pages=pages)
