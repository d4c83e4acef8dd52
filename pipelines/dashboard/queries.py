"""The dashboard's views as SQL over the warehouse tables, one function per view.

Each view returns the tables it shows (the rows are also its CSV export) and its headline
figures. The SQL is portable (`?` placeholders through pipelines.store.warehouse), so the same
views run on the embedded SQLite file and on PostgreSQL.

ROI figures are summed over the selected days before dividing: the ROI of a week is the
week's revenue over the week's cost, not an average of daily ROIs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipelines.dashboard.compute_views import compute_view
from pipelines.dashboard.control_views import control_options, control_view
from pipelines.dashboard.experiment_views import (
    credit_interval_table,
    experiments_view,
    incrementality_view,
)
from pipelines.dashboard.filters import Filters, campaign_filter, day_range
from pipelines.dashboard.ltv_views import ltv_view
from pipelines.dashboard.paging import EVERY_ROW, FIRST_PAGES, Page, Paging
from pipelines.dashboard.tables import (
    Column,
    Kpi,
    View,
    cost_ratios,
    margin_in_force,
    number_or_none,
    ratio_note,
)
from pipelines.settings.job_config import AttributionConfig
from pipelines.store.warehouse import Warehouse

MODEL_ORDER = AttributionConfig.models
DEFAULT_MODEL = "last_click"  # what ad platforms report, so the first thing finance compares
OPTIONS_SHOWN = 200  # campaigns the filter form lists at most; past that, one is typed
NO_CAMPAIGN_SPLIT = ("Channel and stage rows are not split by campaign: the platform and "
                     "campaign filters do not apply here.")

COST_COLUMNS = (Column("conversions", "Conversions", "number"),
                Column("revenue", "Revenue", "money"),
                Column("ad_spend", "Ad spend", "money"),
                Column("compute_cost", "Compute cost", "money"),
                Column("roi", "ROI", "ratio"),
                Column("roas", "ROAS", "ratio"),
                Column("margin_roi", "Margin ROI", "ratio"))


def _cost_note() -> str:
    """The footnote of COST_COLUMNS' tables (the ratio rule is set when the dashboard
    starts, so it is read when a page is built)."""
    return ratio_note(compute_only=True, margin=True)


def _sorted_models(models: set[str]) -> list[str]:
    known = [m for m in MODEL_ORDER if m in models]
    return known + sorted(models - set(known))


def models_in(warehouse: Warehouse) -> list[str]:
    """Every model with ROI rows or credits, in the config's order."""
    rows = warehouse.query("SELECT DISTINCT model FROM roi_daily UNION "
                           "SELECT DISTINCT model FROM attribution_credits")
    return _sorted_models({r[0] for r in rows})


def resolve_model(warehouse: Warehouse, filters: Filters) -> Filters:
    """The filters with a model: the one asked for, else the default, else the first."""
    if filters.model:
        return filters
    models = models_in(warehouse)
    if not models:
        return filters
    return filters.with_model(DEFAULT_MODEL if DEFAULT_MODEL in models else models[0])


def options(warehouse: Warehouse) -> dict[str, list[str]]:
    """Values for the filter form's lists."""
    platforms = {r[0] for r in warehouse.query("SELECT DISTINCT platform FROM ad_spend")}
    if warehouse.has_table("reconciliation_daily"):
        platforms |= {r[0] for r in warehouse.query(
            "SELECT DISTINCT platform FROM reconciliation_daily WHERE scope = 'campaign'")}
    # a list past OPTIONS_SHOWN is cut there (the form then takes the campaign typed)
    campaigns = [r[0] for r in warehouse.query(
        "SELECT c FROM (SELECT campaign AS c FROM ad_spend UNION SELECT key FROM roi_daily "
        f"WHERE dimension = 'campaign') u WHERE c <> '' ORDER BY c LIMIT {OPTIONS_SHOWN + 1}")]
    return {"models": models_in(warehouse), "platforms": sorted(p for p in platforms if p),
            "campaigns": campaigns, **control_options(warehouse)}


def _with_roi(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """(key..., conversions, revenue, ad_spend, compute) -> the same plus revenue / cost,
    ROAS and margin ROI (udfs/ratios.py, ratios of the sums)."""
    return [(*row, *cost_ratios(*row[-3:])) for row in rows]


def _roi_where(filters: Filters, dimension: str) -> tuple[str, list[object]]:
    """roi_daily rows `r` of the selected model, dimension and days (and campaigns, of the
    campaign rows: channel and stage rows are not split by campaign)."""
    where, params = day_range("r.day", filters)
    if dimension == "campaign":
        more, more_params = campaign_filter("r.key", filters)
        where, params = where + more, params + more_params
    return f" WHERE r.model = ? AND r.dimension = ?{where}", [filters.model, dimension, *params]


def _sums(warehouse: Warehouse, filters: Filters, dimension: str, group: str,
          extra_select: str = "", order: str = "SUM(r.revenue) DESC, 1",
          paging: Paging = EVERY_ROW, table: str = "") -> Page:
    """roi_daily of the selected model and days, summed by `group`, with ROI (the page of
    `table` of them; `order` ends with the group, so the order is total)."""
    where, params = _roi_where(filters, dimension)
    page = paging.query(
        warehouse, table, f"SELECT {group}{extra_select}, SUM(r.conversions), SUM(r.revenue), "
        f"SUM(r.ad_spend), SUM(r.compute_cost) FROM roi_daily r{where} GROUP BY {group}",
        params, order)
    return Page(_with_roi(page.rows), page.total, page.offset)


def _totals(warehouse: Warehouse, filters: Filters, dimension: str) -> tuple[float, ...]:
    """(conversions, revenue, ad spend, compute) over every row of the selection: what
    the tables' rows add up to over all their pages."""
    where, params = _roi_where(filters, dimension)
    (totals,) = warehouse.query(
        "SELECT COALESCE(SUM(r.conversions), 0), COALESCE(SUM(r.revenue), 0), "
        "COALESCE(SUM(r.ad_spend), 0), COALESCE(SUM(r.compute_cost), 0) FROM roi_daily "
        f"r{where}", params)
    return tuple(float(v) for v in totals)


def _unallocated(warehouse: Warehouse, filters: Filters) -> float:
    """Cost of the selection that no conversion took. Compute is not per campaign, so a
    platform or campaign selection counts only those campaigns' unallocated spend."""
    where, params = day_range("day", filters)
    if filters.by_campaign:
        more, more_params = campaign_filter("key", filters)
        where += " AND cost_kind = 'ad_spend'" + more
        params += more_params
    (total,), = warehouse.query(
        f"SELECT COALESCE(SUM(amount), 0) FROM roi_unallocated WHERE model = ?{where}",
        [filters.model, *params])
    return float(total)


def roi_view(warehouse: Warehouse, filters: Filters, paging: Paging = EVERY_ROW) -> View:
    view = View("roi", "ROI by channel, campaign and day")
    if not warehouse.query("SELECT 1 FROM roi_daily LIMIT 1"):
        view.notice = ("No ROI rows yet: run the ROI job (`seedance run --job roi`) and "
                       "`seedance load`, or `seedance demo`.")
        return view
    # the headline figures: every day's campaign rows, whichever page of a table is shown
    conversions, revenue, ad_spend, compute = _totals(warehouse, filters, "campaign")
    roi, roas, margin_roi = cost_ratios(revenue, ad_spend, compute)
    view.kpis = [Kpi("kpi_revenue", "Attributed revenue", revenue),
                 Kpi("kpi_ad_spend", "Ad spend allocated", ad_spend),
                 Kpi("kpi_compute", "Compute cost allocated", compute),
                 Kpi("kpi_roi", "ROI", roi, "ratio"),
                 Kpi("kpi_roas", "ROAS", roas, "ratio"),
                 Kpi("kpi_margin_roi", f"Margin ROI ({margin_in_force()})", margin_roi,
                     "ratio"),
                 Kpi("kpi_conversions", "Conversions", conversions, "number"),
                 Kpi("kpi_unallocated", "Cost not allocated", _unallocated(warehouse, filters))]
    view.tables = [
        _sums(warehouse, filters, "channel", "r.key", paging=paging, table="roi_by_channel")
        .table("roi_by_channel", "By channel", (Column("channel", "Channel"), *COST_COLUMNS),
               note=" ".join(filter(None, (NO_CAMPAIGN_SPLIT if filters.by_campaign else "",
                                           _cost_note())))),
        _sums(warehouse, filters, "campaign", "r.key",
              ", (SELECT MIN(s.platform) FROM ad_spend s WHERE s.campaign = r.key)",
              paging=paging, table="roi_by_campaign")
        .table("roi_by_campaign", "By campaign",
               (Column("campaign", "Campaign"), Column("platform", "Platform"), *COST_COLUMNS),
               note=_cost_note()),
        _sums(warehouse, filters, "campaign", "r.day", order="r.day", paging=paging,
              table="roi_by_day")
        .table("roi_by_day", "By day", (Column("day", "Day"), *COST_COLUMNS),
               note=_cost_note()),
    ]
    return view


def models_view(warehouse: Warehouse, filters: Filters, paging: Paging = EVERY_ROW) -> View:
    view = View("models", "Attribution models side by side")
    models = models_in(warehouse)
    if not models:
        view.notice = "No attribution results yet: run the job and `seedance load`."
        return view
    # models without ROI rows (credits loaded, ROI job not run) are left out, not zeros
    summary = [row for model in models for row in
               _sums(warehouse, filters.with_model(model), "campaign", "r.model").rows]
    where, params = day_range("conversion_date", filters)
    more, more_params = campaign_filter("campaign", filters)
    credited = warehouse.query(
        f"SELECT channel, model, SUM(revenue) FROM attribution_credits WHERE 1 = 1{where}{more} "
        "GROUP BY channel, model", params + more_params)
    where, params = day_range("day", filters)
    roi_rows = warehouse.query(
        "SELECT key, model, SUM(revenue), SUM(ad_spend), SUM(compute_cost) FROM roi_daily "
        f"WHERE dimension = 'channel'{where} GROUP BY key, model", params)
    model_columns = tuple(Column(m, m) for m in models)
    revenue_rows = _pivot(credited, models, lambda v: v)
    channel_order = {row[0]: i for i, row in enumerate(revenue_rows)}
    roi_pivot = sorted(_pivot([(k, m, sums) for k, m, *sums in roi_rows], models,
                              lambda v: cost_ratios(*v)[0]),
                       key=lambda row: (channel_order.get(row[0], len(channel_order)), row[0]))
    view.tables = [
        paging.cut("models_summary", summary).table(
            "models_summary", "Totals per model", (Column("model", "Model"), *COST_COLUMNS),
            empty="No ROI rows for these filters: cost and ROI come from the ROI job."),
        paging.cut("models_revenue", revenue_rows).table(
            "models_revenue", "Revenue credited per channel",
            (Column("channel", "Channel"),
             *(Column(c.name, c.label, "money") for c in model_columns))),
        paging.cut("models_roi", roi_pivot).table(
            "models_roi", "ROI per channel (revenue / cost)",
            (Column("channel", "Channel"),
             *(Column(c.name, c.label, "ratio") for c in model_columns)),
            note=" ".join(filter(None, (NO_CAMPAIGN_SPLIT if filters.by_campaign else "",
                                        ratio_note(compute_only=True))))),
        credit_interval_table(warehouse, filters, paging),
    ]
    return view


def _pivot(rows: list[tuple[Any, ...]], models: list[str],
           cell: Callable[[Any], Any]) -> list[tuple[Any, ...]]:
    """(key, model, value) rows -> one row per key with a cell per model, keys ordered by
    their value under the first model that has them (largest first)."""
    values = {(key, model): value for key, model, value in rows}
    keys = sorted({r[0] for r in rows})
    out = [(key, *(cell(values[key, m]) if (key, m) in values else None for m in models))
           for key in keys]
    return sorted(out, key=lambda row: -next((v for v in row[1:] if number_or_none(v)
                                              is not None), 0.0))


def stages_view(warehouse: Warehouse, filters: Filters, paging: Paging = EVERY_ROW) -> View:
    view = View("stages", "Cost allocation by lifecycle stage")
    if not warehouse.query("SELECT 1 FROM roi_daily WHERE dimension = 'stage' LIMIT 1"):
        view.notice = "No ROI rows by lifecycle stage yet: run the ROI job and `seedance load`."
        return view
    page = _sums(warehouse, filters, "stage", "r.key", order="1", paging=paging,
                 table="stage_allocation")
    _, _, ad_spend, compute = _totals(warehouse, filters, "stage")  # of every stage
    total_cost = ad_spend + compute
    shown = [(*row[:5], row[3] + row[4], (row[3] + row[4]) / total_cost if total_cost else None,
              *row[5:]) for row in page.rows]
    view.tables = [Page(shown, page.total, page.offset).table(
        "stage_allocation", "Allocated cost and revenue per stage",
        (Column("stage", "Stage"), *COST_COLUMNS[:4], Column("cost", "Cost", "money"),
         Column("cost_share", "Share of cost", "share"), *COST_COLUMNS[4:]),
        note=" ".join(filter(None, (NO_CAMPAIGN_SPLIT if filters.by_campaign else "",
                                           _cost_note()))))]
    return view


RECON_COLUMNS = (Column("day", "Day"), Column("scope", "Scope"), Column("platform", "Platform"),
                 Column("account", "Account"), Column("entity", "Campaign / resource"),
                 Column("metric", "Metric"), Column("currency", "Currency"),
                 Column("ours", "Ours", "number"), Column("theirs", "Theirs", "number"),
                 Column("drift", "Drift", "percent"), Column("threshold", "Band", "share"),
                 Column("status", "Status"))


def _recon_where(filters: Filters, prefix: str = "") -> tuple[str, list[object]]:
    where, params = day_range(f"{prefix}day", filters)
    if filters.platform:
        where += f" AND {prefix}platform = ?"
        params.append(filters.platform)
    if filters.campaign:
        where += f" AND {prefix}scope = 'campaign' AND {prefix}entity = ?"
        params.append(filters.campaign)
    return where, params


RECON_ORDER = "day DESC, scope, platform, account, entity, metric"  # its key: a total order


def reconciliation_view(warehouse: Warehouse, filters: Filters,
                        paging: Paging = EVERY_ROW) -> View:
    view = View("reconciliation", "Reconciliation against billing")
    if not warehouse.has_table("reconciliation_daily"):
        view.notice = ("No reconciliation yet: `seedance reconcile` creates its tables on its "
                       "first run.")
        return view
    where, params = _recon_where(filters)
    select = ("SELECT day, scope, platform, account, entity, metric, currency, ours, theirs, "
              "drift, threshold, status FROM reconciliation_daily WHERE 1 = 1")
    # scope 'internal': `seedance verify`'s ties between our own tables (udfs/conservation)
    (compared, breaches, max_drift, broken), = warehouse.query(
        "SELECT COUNT(CASE WHEN scope <> 'internal' THEN 1 END), "
        "COUNT(CASE WHEN status = 'breach' THEN 1 END), "
        "MAX(CASE WHEN scope <> 'internal' THEN ABS(drift) END), "
        "COUNT(CASE WHEN scope = 'internal' AND status = 'breach' THEN 1 END) "
        f"FROM reconciliation_daily WHERE 1 = 1{where}", params)
    view.kpis = [Kpi("kpi_compared", "Comparisons", compared, "count"),
                 Kpi("kpi_breaches", "Outside the band", breaches, "count"),
                 Kpi("kpi_max_drift", "Largest |drift|", max_drift, "share"),
                 Kpi("kpi_internal_broken", "Internal ties broken", broken, "count")]
    view.tables = [
        # newest day first, then the largest drift (no drift: first)
        paging.query(warehouse, "recon_breaches", f"{select} AND status = 'breach'{where}",
                     params, "day DESC, CASE WHEN drift IS NULL THEN 0 ELSE 1 END, "
                     f"ABS(drift) DESC, {RECON_ORDER.removeprefix('day DESC, ')}").table(
            "recon_breaches", "Outside the band", RECON_COLUMNS,
            empty="Every comparison is inside its band."),
        paging.query(warehouse, "recon_internal", f"{select} AND scope = 'internal'{where}",
                     params, RECON_ORDER).table(
            "recon_internal", "Internal ties: every total equals the sum it comes from",
            RECON_COLUMNS,
            note="ROI revenue and conversions = the credits (per model, day and "
                 "dimension); spend = allocated + unallocated (per model, campaign and "
                 "day); compute = allocated + unallocated = the GPU bill (per model); GPU "
                 "calls + idle = the priced intervals (per GPU and day). 'ours' is the "
                 "table read, 'theirs' the one it comes from; a break is a difference of "
                 "more than half a cent.",
            empty="No internal checks yet: run `seedance verify`."),
        paging.query(warehouse, "recon_rows", f"{select} AND scope <> 'internal'{where}",
                     params, RECON_ORDER).table(
            "recon_rows", "Every comparison against billing", RECON_COLUMNS),
    ]
    return view


ALERT_KEY = ("scope", "platform", "account", "entity", "day", "metric", "seq")


def alerts_view(warehouse: Warehouse, filters: Filters, paging: Paging = EVERY_ROW) -> View:
    view = View("alerts", "Drift alerts")
    if not warehouse.has_table("alerts"):
        view.notice = "No alerts yet: `seedance reconcile` raises them when drift leaves the band."
        return view
    where, params = _recon_where(filters, "o.")
    same_key = " AND ".join(f"r.{c} = o.{c}" for c in ALERT_KEY)
    key_columns = (Column("day", "Day"), Column("scope", "Scope"), Column("platform", "Platform"),
                   Column("account", "Account"), Column("entity", "Campaign / resource"),
                   Column("metric", "Metric"))
    opened = paging.query(
        warehouse, "alerts_open",
        "SELECT o.raised_at, o.day, o.scope, o.platform, o.account, o.entity, o.metric, o.ours, "
        "o.theirs, o.drift, o.threshold, o.webhook_status FROM alerts o WHERE o.kind = 'open' "
        f"AND NOT EXISTS (SELECT 1 FROM alerts r WHERE r.kind = 'resolve' AND {same_key})"
        f"{where}", params, "o.raised_at DESC, o.day DESC, o.entity, o.metric, o.alert_id")
    resolved = paging.query(
        warehouse, "alerts_resolved",
        "SELECT o.raised_at, r.raised_at, o.day, o.scope, o.platform, o.account, o.entity, "
        "o.metric, o.drift, r.drift FROM alerts o JOIN alerts r ON r.kind = 'resolve' AND "
        f"{same_key} WHERE o.kind = 'open'{where}", params,
        "r.raised_at DESC, o.day DESC, o.entity, o.metric, o.alert_id, r.alert_id")
    view.kpis = [Kpi("kpi_open", "Open alerts", opened.total, "count"),
                 Kpi("kpi_resolved", "Resolved", resolved.total, "count")]
    view.tables = [
        opened.table("alerts_open", "Open", (Column("raised_at", "Raised"), *key_columns,
                                             Column("ours", "Ours", "number"),
                                             Column("theirs", "Theirs", "number"),
                                             Column("drift", "Drift", "percent"),
                                             Column("threshold", "Band", "share"),
                                             Column("webhook_status", "Webhook")),
                     empty="No open alerts for these filters."),
        resolved.table("alerts_resolved", "Resolved",
                       (Column("raised_at", "Raised"), Column("resolved_at", "Resolved"),
                        *key_columns, Column("drift", "Drift when raised", "percent"),
                        Column("drift_resolved", "Drift when resolved", "percent")),
                       empty="No resolved alerts for these filters."),
    ]
    return view


VIEWS: dict[str, Callable[[Warehouse, Filters, Paging], View]] = {
    "roi": roi_view, "models": models_view, "stages": stages_view,
    "reconciliation": reconciliation_view, "alerts": alerts_view,
    "experiments": experiments_view, "control": control_view, "compute": compute_view,
    "lifetime": ltv_view, "incrementality": incrementality_view}
TITLES = {"roi": "ROI", "models": "Models", "stages": "Lifecycle", "reconciliation":
          "Reconciliation", "alerts": "Alerts", "experiments": "Experiments",
          "control": "Control", "compute": "Compute", "lifetime": "Lifetime value",
          "incrementality": "Incrementality"}


def build_view(warehouse: Warehouse, name: str, filters: Filters,
               paging: Paging = FIRST_PAGES) -> View:
    """The view `name` over the warehouse, with the model filled in when none was asked:
    one page of each table (`paging`; EVERY_ROW for an export), headline figures over all
    their rows."""
    return VIEWS[name](warehouse, resolve_model(warehouse, filters), paging)
