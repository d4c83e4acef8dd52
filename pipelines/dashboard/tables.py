"""What a dashboard view is made of: tables of typed columns and headline figures.

A Table's rows are exactly what the page shows and what its CSV export holds, so the two
can never disagree; only the formatting of a cell differs (the CSV keeps full precision).
A page shows one page of a long table (`total` rows in all, this page from `offset`:
pipelines/dashboard/paging.py); its export is built with every row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from udfs import ratios

# How a column's values are shown: text as is; money and number with 2 decimals and
# thousands separators; ratio (ROI) with 2 decimals; percent and share as x100 with a %;
# count as a whole number (a fractional one, such as customers credited under a
# multi-touch model, with 1 decimal); delta (a difference of ratios) signed with 2
# decimals; p (a p-value) with 2 significant digits. None is shown as an em dash, a text
# in a number's column (a ratio marked "compute only") as is.
KINDS = ("text", "money", "number", "ratio", "percent", "share", "count", "delta", "p")


@dataclass(frozen=True)
class Column:
    name: str  # CSV header
    label: str  # table header on the page
    kind: str = "text"
    # the cell is (value, low, high): shown as "3.82 [3.41, 4.25]", exported as three
    # columns name, name_low, name_high (or name and `bounds`)
    interval: bool = False
    bounds: tuple[str, str] = ()

    @property
    def csv_names(self) -> tuple[str, ...]:
        if not self.interval:
            return (self.name,)
        return (self.name, *(self.bounds or (f"{self.name}_low", f"{self.name}_high")))

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
    # (column, value): a row with this value in this column is marked (shaded red)
    warn: tuple[str, str] = ("status", "breach")
    total: int | None = None  # rows over all pages (None: `rows` are all of them)
    offset: int = 0  # index of rows[0] among them

    @property
    def count(self) -> int:
        """Rows of the table over all pages."""
        return len(self.rows) if self.total is None else self.total

    def csv_header(self) -> list[str]:
        """The export's header: an interval column becomes its value, low and high."""
        return [name for c in self.columns for name in c.csv_names]

    def csv_rows(self) -> list[tuple[Any, ...]]:
        """The rows as exported: full precision, an interval's three numbers apart."""
        if not any(c.interval for c in self.columns):
            return self.rows
        return [tuple(part for c, value in zip(self.columns, row, strict=True)
                      for part in (value if c.interval else (value,))) for row in self.rows]


@dataclass(frozen=True)
class Kpi:
    name: str  # stable id for the page element
    label: str
    value: float | str | None
    kind: str = "money"


@dataclass
class View:
    name: str
    title: str
    tables: list[Table] = field(default_factory=list)
    kpis: list[Kpi] = field(default_factory=list)
    notice: str = ""  # shown instead of the view when its source tables are missing or empty
    warnings: list[str] = field(default_factory=list)  # shown above the view, prominently
    # every row of a table shown a page at a time, where a chart sums them (by table name)
    chart_rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)

    def table(self, name: str) -> Table:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(name)


def format_value(value: Any, kind: str) -> str:
    """A cell as the page shows it (the CSV export writes the raw value instead)."""
    if value is None:
        return "—"
    if kind == "text" or isinstance(value, str):
        return str(value)
    number = float(value)
    if kind == "count":
        return f"{round(number):,}" if abs(number - round(number)) < 1e-6 \
            else f"{number:,.1f}"
    if kind in ("percent", "share"):
        return f"{number * 100:+.2f} %" if kind == "percent" else f"{number * 100:.1f} %"
    if kind == "delta":
        return f"{number:+,.2f}"
    if kind == "p":
        return f"{number:.2g}"
    return f"{number:,.2f}"


def format_interval(value: tuple[Any, Any, Any], kind: str) -> str:
    """(value, low, high) as "3.82 [3.41, 4.25]"; a share as "31.2 % [29.8, 32.7]" (the
    bounds in the value's unit, without repeating it); the value alone without bounds."""
    point, low, high = value
    text = format_value(point, kind)
    if point is None or low is None or high is None:
        return text
    if kind in ("percent", "share"):
        spec = "+.2f" if kind == "percent" else ".1f"
        bounds = [format(float(b) * 100, spec) for b in (low, high)]
    else:
        bounds = [format_value(b, kind) for b in (low, high)]
    return f"{text} [{bounds[0]}, {bounds[1]}]"


@dataclass(frozen=True)
class RatioRule:
    """How the dashboard states ratios: the job's roi.min_cost and roi.gross_margin
    (`seedance dashboard --config`), the same rule as the ROI job's (udfs/ratios.py)."""

    min_cost: float = ratios.MIN_COST
    gross_margin: float = ratios.GROSS_MARGIN


RULE = RatioRule()
RATIO_NOTE = ("'—' in a ratio column: its cost is under {min_cost:,.2f}, where a ratio "
              "says nothing (a few cents of cost would read as a return of millions).")
COMPUTE_ONLY_NOTE = (f"'{ratios.COMPUTE_ONLY}': the row's only cost is compute, no ad "
                     "spend; its ROI figures are left out (a few dollars of GPU time would "
                     "read as a return of thousands).")
MARGIN_NOTE = ("ROI = revenue / cost; ROAS = revenue / ad spend; margin ROI = (revenue x "
               "gross margin - cost) / cost, at a {margin}.")


def set_ratio_rule(rule: RatioRule) -> None:
    """The rule of this dashboard process (set once, at start)."""
    global RULE
    RULE = rule


def ratio_note(compute_only: bool = False, margin: bool = False) -> str:
    """The footnote of a table of ratios: the cost floor, and where they apply the
    compute-only rows and the gross margin in force."""
    return " ".join([RATIO_NOTE.format(min_cost=RULE.min_cost),
                     *([COMPUTE_ONLY_NOTE] if compute_only else []),
                     *([margin_text()] if margin else [])])


def margin_in_force() -> str:
    """The gross margin the margin ROI is computed at: "gross margin 60 %"."""
    return ratios.gross_margin_text(RULE.gross_margin)


def margin_text() -> str:
    """The ratios' definitions with the gross margin in force."""
    return MARGIN_NOTE.format(margin=margin_in_force())


def cost_ratios(revenue: float, ad_spend: float, compute: float
                ) -> tuple[float | str | None, float | None, float | str | None]:
    """(ROI, ROAS, margin ROI) of a row under this dashboard's rule; ROI and margin ROI are
    "compute only" where that is its only cost (udfs.ratios.cost_ratios)."""
    return ratios.cost_ratios(revenue, ad_spend, compute, RULE.gross_margin, RULE.min_cost)


def number_or_none(value: Any) -> float | None:
    """A ratio cell as a chart draws it: a marked one draws no bar."""
    return None if value is None or isinstance(value, str) else float(value)


def roi_of(revenue: float, cost: float) -> float | None:
    """Attributed revenue per unit of cost (roi_daily.roi); None under the cost floor."""
    return ratios.revenue_per_cost(revenue, cost, RULE.min_cost)


def roas_of(revenue: float, ad_spend: float) -> float | None:
    """Revenue per unit of ad spend; None under the cost floor."""
    return ratios.roas(revenue, ad_spend, RULE.min_cost)


def margin_roi_of(revenue: float, cost: float) -> float | None:
    """(revenue x gross margin - cost) / cost; None under the cost floor."""
    return ratios.margin_roi(revenue, cost, RULE.gross_margin, RULE.min_cost)
