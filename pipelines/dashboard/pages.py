"""HTML of the dashboard pages: the filter form, headline figures, charts and tables.

Everything that comes from the warehouse is escaped (campaign names are whatever the ad
platforms and the telemetry said). Cells carry their column name in `data-col`, so the
browser test can find a figure without depending on the layout.
"""

from __future__ import annotations

from collections import Counter
from html import escape
from urllib.parse import urlencode

from pipelines.dashboard import charts
from pipelines.dashboard.filters import Filters
from pipelines.dashboard.paging import FIRST_PAGES, Paging
from pipelines.dashboard.queries import OPTIONS_SHOWN, TITLES
from pipelines.dashboard.tables import (
    Column,
    Table,
    View,
    format_interval,
    format_value,
    number_or_none,
)

# (Python 3.11 f-strings cannot hold quotes of their own kind: attribute snippets live here.)
_ACTIVE, _NUM, _BREACH = ' class="active"', ' class="num"', ' class="breach"'
STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#222;background:#f6f7f9}
header{background:#1f2d3d;color:#fff;padding:10px 24px;display:flex;align-items:baseline;gap:24px}
header h1{font-size:18px;margin:0}header nav a{color:#cfd8e3;margin-right:14px;text-decoration:none}
header nav a.active{color:#fff;font-weight:600;border-bottom:2px solid #f28e2b}
header .source{margin-left:auto;font-size:12px;color:#9fb0c3}
form#filters{padding:10px 24px;background:#fff;border-bottom:1px solid #dde;display:flex;
 gap:14px;align-items:end;flex-wrap:wrap;font-size:13px}
form#filters label{display:flex;flex-direction:column;gap:2px}
main{padding:12px 24px}h2{font-size:15px;margin:18px 0 6px}
.kpis{display:flex;gap:12px;flex-wrap:wrap}.kpi{background:#fff;border:1px solid #dde;
 border-radius:6px;padding:8px 14px;min-width:140px}.kpi .label{font-size:12px;color:#667}
.kpi .value{font-size:20px;font-weight:600}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:12px;
 margin-top:12px}.charts figure{background:#fff;border:1px solid #dde;border-radius:6px;
 margin:0;padding:10px}
table{border-collapse:collapse;background:#fff;font-size:13px;min-width:50%}
th,td{border-bottom:1px solid #e4e6ea;padding:4px 10px;text-align:left}
th{background:#eef1f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.breach td{background:#fdecec}.note{font-size:12px;color:#667;margin:2px 0 6px}
a.csv{font-size:12px;font-weight:400;margin-left:10px}section{overflow-x:auto}
.pager{font-size:12px;color:#445;margin:4px 0 10px}.pager a{margin-left:10px}
.notice{background:#fff8e6;border:1px solid #f0d78c;padding:12px 16px;border-radius:6px}
.error{background:#fdecec;border:1px solid #e15759;padding:12px 16px;border-radius:6px}
.warning{background:#fdecec;border:1px solid #e15759;border-left:6px solid #e15759;
 padding:10px 14px;border-radius:6px;margin:8px 0;font-weight:600}
"""


def page(view_name: str, filters: Filters, options: dict[str, list[str]], body: str,
         source: str) -> str:
    """The whole page around a view's body: title, navigation, the filter form."""
    nav = "".join(
        f'<a href="/{name}{_query(filters.for_view(name))}"'
        f'{_ACTIVE if name == view_name else ""}>{escape(title)}</a>'
        for name, title in TITLES.items())
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>Seedance finance — {escape(TITLES.get(view_name, ""))}</title>'
            f'<style>{STYLE}</style></head><body><header><h1>Seedance finance</h1>'
            f'<nav>{nav}</nav><span class="source">warehouse {escape(source)}</span></header>'
            f'{_form(view_name, filters, options)}<main>{body}</main></body></html>')


def _query(filters: Filters) -> str:
    query = filters.query_string()
    return "?" + escape(query) if query else ""


def _select(name: str, label: str, values: list[str], chosen: str, blank: str) -> str:
    items = [f'<option value="">{escape(blank)}</option>'] if blank else []
    items += [f'<option value="{escape(v)}"{" selected" if v == chosen else ""}>{escape(v)}'
              "</option>" for v in values]
    return f'<label>{label}<select name="{name}" id="f-{name}">{"".join(items)}</select></label>'


def _form(view_name: str, filters: Filters, options: dict[str, list[str]]) -> str:
    return (f'<form id="filters" method="get" action="/{escape(view_name)}">'
            f'<label>From<input type="date" name="from" id="f-from" '
            f'value="{escape(filters.date_from)}"></label>'
            f'<label>To<input type="date" name="to" id="f-to" value="{escape(filters.date_to)}">'
            "</label>"
            + _select("platform", "Platform", options["platforms"], filters.platform,
                      "all platforms")
            + (_select("campaign", "Campaign", options["campaigns"], filters.campaign,
                       "all campaigns") if len(options["campaigns"]) <= OPTIONS_SHOWN else
               '<label>Campaign<input type="search" name="campaign" id="f-campaign" '
               f'value="{escape(filters.campaign)}" placeholder="all campaigns"></label>')
            + _select("model", "Model (ROI)", options["models"], filters.model, "")
            + (_select("rule", "Rule", options["rules"], filters.rule, "all rules")
               + _select("status", "Status", options["statuses"], filters.status,
                         "any status") if view_name == "control" else "")
            + f'<button type="submit" id="apply">Apply</button>'
            f'<a href="/{escape(view_name)}" id="reset">Reset</a></form>')


def view_body(view: View, filters: Filters, paging: Paging = FIRST_PAGES) -> str:
    if view.notice:
        return (f'<h2>{escape(view.title)}</h2>'
                f'<p class="notice" id="notice">{escape(view.notice)}</p>')
    parts = [f'<h2>{escape(view.title)}</h2>']
    parts += [f'<p class="warning" id="warning-{i}">{escape(text)}</p>'
              for i, text in enumerate(view.warnings)]
    if view.kpis:
        parts.append('<div class="kpis">' + "".join(
            f'<div class="kpi" id="{k.name}"><div class="label">{escape(k.label)}</div>'
            f'<div class="value">{escape(format_value(k.value, k.kind))}</div></div>'
            for k in view.kpis) + "</div>")
    figures = CHARTS[view.name](view)
    if figures:
        parts.append('<div class="charts">' + "".join(f"<figure>{svg}</figure>"
                                                      for svg in figures) + "</div>")
    parts += [table_html(table, filters, view.name, paging) for table in view.tables]
    return "".join(parts)


def table_html(table: Table, filters: Filters, view_name: str = "",
               paging: Paging = FIRST_PAGES) -> str:
    query = filters.query_string()
    csv_link = f"/csv/{table.name}.csv" + (f"?{query}" if query else "")
    head = "".join(f'<th data-col="{escape(c.name)}">{escape(c.label)}</th>'
                   for c in table.columns)
    warn_column, warn_value = table.warn
    warn_at = next((i for i, c in enumerate(table.columns) if c.name == warn_column), None)
    rows = []
    for row in table.rows:
        breach = warn_at is not None and row[warn_at] == warn_value
        cells = "".join(
            f'<td data-col="{escape(c.name)}"{"" if c.kind == "text" else _NUM}>'
            f"{escape(_cell_text(value, c))}</td>"
            for c, value in zip(table.columns, row, strict=True))
        rows.append(f'<tr{_BREACH if breach else ""}>{cells}</tr>')
    body = "".join(rows) or (f'<tr><td colspan="{len(table.columns)}" class="empty">'
                             f"{escape(table.empty)}</td></tr>")
    note = f'<p class="note">{escape(table.note)}</p>' if table.note else ""
    return (f'<section id="s-{escape(table.name)}"><h2>{escape(table.title)}'
            f'<a class="csv" id="csv-{escape(table.name)}" href="{escape(csv_link)}">CSV</a>'
            f"</h2>{note}{_pager(table, filters, view_name, paging, csv_link)}"
            f'<table id="{escape(table.name)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></section>")


def _pager(table: Table, filters: Filters, view_name: str, paging: Paging,
           csv_link: str) -> str:
    """Above a table shown a page at a time: which rows of how many, links to the
    previous and next pages (the filters and the other tables' pages kept) and to the
    CSV of all of them."""
    if table.count <= len(table.rows) or not table.rows:
        return ""
    first, last = table.offset + 1, table.offset + len(table.rows)
    size = paging.size or len(table.rows)
    page = table.offset // size + 1

    def link(number: int, rel: str, text: str) -> str:
        query = "&".join(q for q in (filters.query_string(),
                                     urlencode(paging.query_string(table.name, number))) if q)
        href = f"/{view_name}" + (f"?{query}" if query else "")
        return (f'<a href="{escape(href)}" rel="{rel}" id="{rel}-{escape(table.name)}">'
                f"{text}</a>")

    return (f'<p class="pager" id="pager-{escape(table.name)}">rows {first:,}–{last:,} of '
            f"{table.count:,}"
            + (link(page - 1, "prev", "← previous") if first > 1 else "")
            + (link(page + 1, "next", "next →") if last < table.count else "")
            + f'<a href="{escape(csv_link)}">all {table.count:,} as CSV</a></p>')


def _cell_text(value: object, column: Column) -> str:
    if column.interval:
        return format_interval(value, column.kind)  # type: ignore[arg-type]
    if column.kind == "text" and value == "":
        return "(none)"  # organic traffic has no campaign; an empty cell looks like a bug
    return format_value(value, column.kind)


def error_body(message: str) -> str:
    return f'<p class="error" id="error">{escape(message)}</p>'


# -- the charts of each view, drawn from the rows of its tables -------------------------------

CHART_ITEMS = 50  # bars or intervals a chart draws at most (the first of the table's page)


def _first(title: str, items: list[tuple[object, ...]]) -> tuple[str, list[tuple[object, ...]]]:
    """A chart's items cut to CHART_ITEMS, its title saying so when they are."""
    if len(items) <= CHART_ITEMS:
        return title, items
    return f"{title}, the first {CHART_ITEMS} of the table", items[:CHART_ITEMS]

def _roi_charts(view: View) -> list[str]:
    channel, campaign, day = (view.table(n).rows for n in
                              ("roi_by_channel", "roi_by_campaign", "roi_by_day"))
    # revenue beside cost rather than ROI bars: a channel with almost no cost (organic)
    # has a huge ROI that would flatten every other bar
    out = [charts.grouped_bars("Revenue and allocated cost by channel", [r[0] for r in channel],
                               [("revenue", [r[2] for r in channel]),
                                ("ad spend", [r[3] for r in channel]),
                                ("compute", [r[4] for r in channel])])]
    if day:
        out.append(charts.line_chart(
            "Revenue and cost by day", [r[0] for r in day],
            [("revenue", [r[2] for r in day]), ("ad spend", [r[3] for r in day]),
             ("compute", [r[4] for r in day])]))
    paid = [(r[0], number_or_none(r[6])) for r in campaign if r[4] > 0]
    if paid:
        title, paid = _first("ROI of paid campaigns (revenue / cost)", paid)
        out.append(charts.bar_chart(title, paid, "x"))
    return out


def _models_charts(view: View) -> list[str]:
    revenue = view.table("models_revenue")
    models = [c.name for c in revenue.columns[1:]]
    summary = view.table("models_summary").rows
    return [charts.grouped_bars("Revenue credited per channel, by model",
                                [r[0] for r in revenue.rows],
                                [(m, [r[i + 1] for r in revenue.rows])
                                 for i, m in enumerate(models)]),
            charts.bar_chart("ROI per model (revenue / cost)",
                             [(r[0], number_or_none(r[5])) for r in summary], "x"),
            *_credit_interval_charts(view)]


def _credit_interval_charts(view: View) -> list[str]:
    rows = view.table("credit_intervals").rows
    if not rows:
        return []
    return [charts.interval_chart(f"Share of credit per channel with its interval, {rows[0][1]}",
                                  [(r[0], *r[2], 0) for r in rows], percent=True)]


def _experiments_charts(view: View) -> list[str]:
    rows = view.table("experiment_strategy").rows
    if not rows:
        return []
    # the control in blue, other variants in orange, a variant of a mismatched split in red
    return [charts.interval_chart(*_first(
        "ROI per variant with its interval (newest window)",
        [(f"{r[0]} · {r[1]}", *r[8], 3 if r[13] == "MISMATCH" else 0 if r[2] == "control"
          else 1) for r in rows]))]


def _stages_charts(view: View) -> list[str]:
    rows = view.table("stage_allocation").rows
    return [charts.grouped_bars("Revenue and allocated cost per lifecycle stage",
                                [r[0] for r in rows],
                                [("revenue", [r[2] for r in rows]),
                                 ("ad spend", [r[3] for r in rows]),
                                 ("compute", [r[4] for r in rows])])]


def _recon_charts(view: View) -> list[str]:
    rows = [r for r in view.table("recon_rows").rows if r[9] is not None]
    if not rows:
        return []
    band = Counter(r[10] for r in rows).most_common(1)[0][0]
    label = "{} {} {}".format
    return [charts.drift_chart(f"Drift per comparison against the ±{band * 100:g} % band",
                               sorted({r[0] for r in rows}),
                               [(r[0], r[9], r[11], label(r[2], r[4], r[5])) for r in rows],
                               band)]


def _compute_charts(view: View) -> list[str]:
    """Each workload's own cost and its share of idle, over the selected days."""
    totals: dict[str, list[float]] = {}
    for row in view.chart_rows.get("compute_by_workload", view.table("compute_by_workload").rows):
        own, idle = totals.setdefault(row[1], [0.0, 0.0]), row[4]
        own[0] += row[3]
        own[1] += idle
    if not totals:
        return []
    names = sorted(totals, key=lambda name: -sum(totals[name]))
    return [charts.grouped_bars("GPU cost per workload: its calls' own cost and its share of "
                                "idle", names,
                                [("own cost", [totals[n][0] for n in names]),
                                 ("share of idle", [totals[n][1] for n in names])])]


def _ltv_charts(view: View) -> list[str]:
    """First-order ROI beside LTV ROI per channel, the customers per segment and the
    calibration (predicted against actual holdout purchases by calibration frequency)."""
    out = []
    channel = view.table("ltv_by_channel").rows
    if channel:
        title, channel = _first("First-order ROI and LTV ROI per channel", channel)
        out.append(charts.grouped_bars(title, [r[0] for r in channel],
                                       [("first-order ROI",
                                         [number_or_none(r[5]) for r in channel]),
                                        ("LTV ROI",
                                         [number_or_none(r[7][0]) for r in channel])]))
    segments = view.table("ltv_segments").rows
    if segments:
        out.append(charts.bar_chart("Customers per LTV segment",
                                    [(r[0], r[1]) for r in segments]))
    calibration = view.table("ltv_calibration").rows
    if calibration:
        out.append(charts.line_chart(
            "Holdout purchases per customer by purchases in calibration",
            [r[0] for r in calibration], [("predicted", [r[2] for r in calibration]),
                                          ("actual", [r[3] for r in calibration])]))
    return out


def _incrementality_charts(view: View) -> list[str]:
    if not view.tables:
        return []
    rows = view.table("roi_calibrated").rows
    return [charts.grouped_bars("Revenue per channel: credited, and caused (calibrated)",
                                [r[0] for r in rows],
                                [("credited", [r[1] for r in rows]),
                                 ("calibrated", [r[2][0] for r in rows])])]


CHARTS = {"roi": _roi_charts, "models": _models_charts, "stages": _stages_charts,
          "reconciliation": _recon_charts, "alerts": lambda view: [],
          "experiments": _experiments_charts, "control": lambda view: [],
          "compute": _compute_charts, "lifetime": _ltv_charts,
          "incrementality": _incrementality_charts}
