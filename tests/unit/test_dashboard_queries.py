"""The dashboard's views, CSV export and pages over a small hand-made warehouse (an SQLite
file: no service), with every expected figure worked out by hand."""

from __future__ import annotations

import csv
import io
import sqlite3
import threading
import urllib.request

import pytest

from pipelines.dashboard import app as app_module
from pipelines.dashboard import charts
from pipelines.dashboard.app import DashboardApp
from pipelines.dashboard.filters import FilterError, Filters, parse_filters
from pipelines.dashboard.queries import build_view, options
from pipelines.dashboard.tables import format_value
from pipelines.store.warehouse import Warehouse
from schemas.rows import ATTRIBUTION_CREDITS, ROI_DAILY
from tests.dashboard_warehouse import RECONCILIATION_DDL, call, recon, roi_row


def rows_by_key(view_table: list[tuple[object, ...]]) -> dict[object, tuple[object, ...]]:
    return {row[0]: row for row in view_table}


def test_roi_sums_the_days_before_dividing(warehouse: Warehouse) -> None:
    view = build_view(warehouse, "roi", Filters())
    channel = rows_by_key(view.table("roi_by_channel").rows)
    # search: revenue 400 + 100 over cost (100 + 10) + (50 + 10): 500 / 170, not the mean of
    # the daily ROIs (400/110 + 100/60) / 2
    assert channel["search"][1:5] == (4, 500, 150, 20)
    assert channel["search"][5] == pytest.approx(500 / 170)
    # ROAS = revenue / ad spend, margin ROI = (revenue x margin 1.0 - cost) / cost
    assert channel["search"][6:] == pytest.approx((500 / 150, (500 - 170) / 170))
    assert channel["organic"][5:] == (None, None, None)  # no cost: no ratio, shown as a dash
    assert list(channel) == ["search", "social", "organic"]  # by revenue, largest first
    kpis = {k.name: k.value for k in view.kpis}
    assert kpis["kpi_revenue"] == 640 and kpis["kpi_ad_spend"] == 190
    assert kpis["kpi_roi"] == pytest.approx(640 / 210)
    assert kpis["kpi_roas"] == pytest.approx(640 / 190)
    assert kpis["kpi_margin_roi"] == pytest.approx((640 - 210) / 210)
    assert kpis["kpi_unallocated"] == 43  # last_click's 40 of spend + 3 of compute
    assert view.tables[0].note.startswith("'—' in a ratio column: its cost is under 1.00")


def test_no_ratio_is_shown_on_a_cost_under_the_floor(warehouse: Warehouse) -> None:
    """A channel with 90 of revenue over 0.0066 of ad spend: no ROI of 13,636, a dash (and
    an empty CSV cell); at the floor the ratio is shown; a configured floor applies. (On
    compute alone a row is "compute only": tests/unit/test_ratio_names.py.)"""
    from pipelines.dashboard.tables import RatioRule, set_ratio_rule

    warehouse.store(ROI_DAILY, [
        roi_row("last_click", "2026-10-01", "channel", "email", 1, 90, 0.0066, 0),
        roi_row("last_click", "2026-10-01", "channel", "push", 1, 30, 1.0, 0)])
    channel = rows_by_key(build_view(warehouse, "roi", Filters()).table("roi_by_channel").rows)
    assert channel["email"][5:] == (None, None, None)
    assert channel["push"][5:7] == pytest.approx((30.0, 30.0))
    try:
        set_ratio_rule(RatioRule(min_cost=50.0, gross_margin=0.4))
        channel = rows_by_key(build_view(warehouse, "roi", Filters())
                              .table("roi_by_channel").rows)
        assert channel["push"][5:] == (None, None, None)
        assert channel["search"][7] == pytest.approx((500 * 0.4 - 170) / 170)
    finally:
        set_ratio_rule(RatioRule())


def test_model_defaults_to_last_click_and_can_be_chosen(warehouse: Warehouse) -> None:
    linear = build_view(warehouse, "roi", Filters(model="linear"))
    assert rows_by_key(linear.table("roi_by_channel").rows)["search"][3] == 75
    assert {k.name: k.value for k in linear.kpis}["kpi_unallocated"] == 75
    assert options(warehouse)["models"] == ["last_click", "linear"]  # the config's order


def test_date_range_is_inclusive(warehouse: Warehouse) -> None:
    view = build_view(warehouse, "roi", Filters(date_from="2026-10-02", date_to="2026-10-02"))
    assert [r[0] for r in view.table("roi_by_day").rows] == ["2026-10-02"]
    assert rows_by_key(view.table("roi_by_channel").rows)["search"][2] == 100


def test_platform_filter_goes_through_the_spend_rows(warehouse: Warehouse) -> None:
    view = build_view(warehouse, "roi", Filters(platform="meta"))
    assert view.table("roi_by_campaign").rows == [("meta-1", "meta", 1, 80, 40, 0, 2.0, 2.0,
                                                   1.0)]
    assert view.table("roi_by_day").rows == [("2026-10-01", 1, 80, 40, 0, 2.0, 2.0, 1.0)]
    assert {k.name: k.value for k in view.kpis}["kpi_unallocated"] == 40  # spend only
    # channel rows are not split by campaign: shown whole, and the page says so
    assert len(view.table("roi_by_channel").rows) == 3
    assert "do not apply" in view.table("roi_by_channel").note
    campaign = build_view(warehouse, "roi", Filters(campaign="gs-1"))
    assert [r[0] for r in campaign.table("roi_by_campaign").rows] == ["gs-1"]
    platforms = {r[1] for r in build_view(warehouse, "roi", Filters()).table(
        "roi_by_campaign").rows}
    assert platforms == {"google_ads", "meta", None}  # organic has no platform


def test_models_side_by_side(warehouse: Warehouse) -> None:
    view = build_view(warehouse, "models", Filters())
    summary = rows_by_key(view.table("models_summary").rows)
    assert summary["last_click"][1:5] == (6, 640, 190, 20)
    assert summary["linear"][3] == 115
    revenue = view.table("models_revenue")
    assert [c.name for c in revenue.columns] == ["channel", "last_click", "linear"]
    by_channel = rows_by_key(revenue.rows)
    assert by_channel["search"][1:] == (300, 150)
    assert by_channel["social"][1:] == (None, 150)  # last_click credited social nothing
    roi = rows_by_key(view.table("models_roi").rows)
    assert roi["search"][2] == pytest.approx(500 / (75 + 20))
    assert [r[0] for r in view.table("models_roi").rows][0] == "search"  # revenue order
    meta = build_view(warehouse, "models", Filters(platform="meta"))
    assert rows_by_key(meta.table("models_revenue").rows) == {"social": ("social", None, 150)}


def test_stage_allocation_shares(warehouse: Warehouse) -> None:
    rows = rows_by_key(build_view(warehouse, "stages", Filters()).table(
        "stage_allocation").rows)
    assert rows["new"][5] == 150 and rows["repeat"][5] == 60  # ad spend + compute
    assert rows["new"][6] == pytest.approx(150 / 210)
    assert rows["new"][6] + rows["repeat"][6] == pytest.approx(1.0)


def test_reconciliation_and_alerts_before_their_tables_exist(url: str,
                                                             warehouse: Warehouse) -> None:
    for name in ("reconciliation", "alerts"):
        assert "seedance reconcile" in build_view(warehouse, name, Filters()).notice
    app = DashboardApp(url)
    status, _, body = call(app, "/reconciliation")
    assert status.startswith("200") and 'id="notice"' in body
    status, _, body = call(app, "/csv/recon_rows.csv")
    assert status.startswith("200") and body == ""


def alert(kind: str, seq: int, day: str, raised_at: str, drift: float) -> tuple[object, ...]:
    return (f"{day}-{seq}-{kind}", kind, "campaign", "meta", "acc", "meta-1", day, "spend", seq,
            "USD", 110.0, 100.0, drift, 0.05, 10.0, "[]", "run", raised_at, "sent", "disabled",
            "sent", 1, "")


@pytest.fixture
def reconciled(warehouse: Warehouse) -> Warehouse:
    warehouse.apply_ddl(RECONCILIATION_DDL)
    columns = ("scope", "platform", "account", "entity", "day", "metric", "currency", "ours",
               "theirs", "difference", "drift", "threshold", "min_volume", "status",
               "contributors", "billing_source", "reported_at")
    warehouse.upsert("reconciliation_daily", columns, 6, [
        recon("2026-10-01", "campaign", "meta", "meta-1", "spend", 44.0, 40.0, "breach"),
        recon("2026-10-01", "campaign", "google_ads", "gs-1", "spend", 101.0, 100.0, "ok"),
        recon("2026-10-02", "campaign", "google_ads", "gs-1", "spend", 40.0, 50.0, "breach"),
        recon("2026-10-01", "total", "*", "*", "spend", 145.0, 140.0, "ok")])
    alert_columns = ("alert_id", "kind", "scope", "platform", "account", "entity", "day",
                     "metric", "seq", "currency", "ours", "theirs", "drift", "threshold",
                     "min_volume", "contributors", "run_id", "raised_at", "log_status",
                     "kafka_status", "webhook_status", "webhook_attempts", "last_error")
    # meta-1 on 10-01: opened, resolved, breached again (seq 2, open); on 10-02: opened only
    warehouse.upsert("alerts", alert_columns, 1, [
        alert("open", 1, "2026-10-01", "2026-10-02T06:00:00Z", 0.1),
        alert("resolve", 1, "2026-10-01", "2026-10-03T06:00:00Z", 0.01),
        alert("open", 2, "2026-10-01", "2026-10-05T06:00:00Z", 0.2),
        alert("open", 1, "2026-10-02", "2026-10-03T06:00:00Z", 0.3)])
    return warehouse


def test_reconciliation_rows_and_breaches(reconciled: Warehouse) -> None:
    view = build_view(reconciled, "reconciliation", Filters())
    assert len(view.table("recon_rows").rows) == 4
    breaches = view.table("recon_breaches").rows
    assert [(r[0], r[4]) for r in breaches] == [("2026-10-02", "gs-1"), ("2026-10-01", "meta-1")]
    kpis = {k.name: k.value for k in view.kpis}
    assert kpis["kpi_breaches"] == 2 and kpis["kpi_max_drift"] == pytest.approx(0.2)
    meta = build_view(reconciled, "reconciliation", Filters(platform="meta"))
    assert [r[4] for r in meta.table("recon_rows").rows] == ["meta-1"]
    gs = build_view(reconciled, "reconciliation", Filters(campaign="gs-1", date_to="2026-10-01"))
    assert [(r[0], r[4]) for r in gs.table("recon_rows").rows] == [("2026-10-01", "gs-1")]
    assert "meta" in options(reconciled)["platforms"]


def test_alerts_open_and_resolved(reconciled: Warehouse) -> None:
    view = build_view(reconciled, "alerts", Filters())
    opened = view.table("alerts_open").rows
    assert [(r[0], r[1]) for r in opened] == [("2026-10-05T06:00:00Z", "2026-10-01"),
                                              ("2026-10-03T06:00:00Z", "2026-10-02")]
    resolved = view.table("alerts_resolved").rows
    assert resolved == [("2026-10-02T06:00:00Z", "2026-10-03T06:00:00Z", "2026-10-01",
                         "campaign", "meta", "acc", "meta-1", "spend", 0.1, 0.01)]
    late = build_view(reconciled, "alerts", Filters(date_from="2026-10-02"))
    assert [r[1] for r in late.table("alerts_open").rows] == ["2026-10-02"]
    assert late.table("alerts_resolved").rows == []


def test_filters_from_the_query_string() -> None:
    filters = parse_filters({"from": ["2026-10-01"], "to": ["2026-10-31"], "platform": ["meta"],
                             "utm_source": ["mail"]})
    assert filters == Filters("2026-10-01", "2026-10-31", "meta")
    assert filters.query_string() == "from=2026-10-01&to=2026-10-31&platform=meta"
    with pytest.raises(FilterError, match="'from' must be a date"):
        parse_filters({"from": ["01/10/2026"]})
    with pytest.raises(FilterError, match="is after"):
        parse_filters({"from": ["2026-10-02"], "to": ["2026-10-01"]})


def test_csv_holds_the_rows_the_page_shows(url: str, warehouse: Warehouse) -> None:
    app = DashboardApp(url)
    query = "from=2026-10-01&to=2026-10-01&model=linear"
    status, headers, body = call(app, "/csv/roi_by_channel.csv", query)
    assert status.startswith("200") and headers["Content-Type"].startswith("text/csv")
    assert "roi_by_channel_2026-10-01_2026-10-01.csv" in headers["Content-Disposition"]
    table = build_view(warehouse, "roi", parse_filters({"from": ["2026-10-01"],
                                                        "to": ["2026-10-01"],
                                                        "model": ["linear"]})
                       ).table("roi_by_channel")
    lines = list(csv.reader(io.StringIO(body)))
    assert lines[0] == [c.name for c in table.columns]
    assert [[float(v) if v else None for v in line[1:]] for line in lines[1:]] == \
        [pytest.approx(list(row[1:]), rel=1e-13) for row in table.rows]
    _, _, page = call(app, "/roi", query)
    assert f'href="/csv/roi_by_channel.csv?{query.replace("&", "&amp;")}"' in page
    for row in table.rows:  # and the page shows those rows, formatted
        assert format_value(row[2], "money") in page


def test_pages_and_errors(url: str, warehouse: Warehouse) -> None:
    app = DashboardApp(url)
    for view in ("roi", "models", "stages", "reconciliation", "alerts"):
        status, _, body = call(app, f"/{view}")
        assert status.startswith("200"), view
        assert "<svg" in body or view in ("reconciliation", "alerts"), view
    assert call(app, "/")[0].startswith("302")
    assert call(app, "/nope")[0].startswith("404")
    assert call(app, "/healthz")[2] == "ok\n"
    status, _, body = call(app, "/roi", "from=yesterday")
    assert status.startswith("400") and "&#x27;from&#x27; must be a date" in body


def test_names_from_the_data_are_escaped(url: str, warehouse: Warehouse) -> None:
    warehouse.store(ROI_DAILY, [
        roi_row("last_click", "2026-10-01", "campaign", "<script>alert(1)</script>", 1, 5, 1, 0),
        roi_row("last_click", "2026-10-01", "channel", '"><img src=x>', 1, 5, 1, 0)])
    _, _, body = call(DashboardApp(url), "/roi")
    assert "<script>alert(1)" not in body and "<img src=x>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_the_database_password_is_never_shown() -> None:
    url = "postgresql://finance:s3cret-pw@127.0.0.1:1/seedance"  # nothing listens on port 1
    app = DashboardApp(url)
    assert "s3cret-pw" not in app.source and "***" in app.source
    status, _, body = call(app, "/roi")
    assert status.startswith("503") and "s3cret-pw" not in body and "***" in body


def test_chart_axes_and_outliers() -> None:
    assert [charts._nice_max(v) for v in (0, 9, 21_896, 480)] == [1.0, 10.0, 24_000, 600]
    svg = charts.drift_chart("drift", ["2026-10-01"], [("2026-10-01", 0.9, "breach", "<x>"),
                                                       ("2026-10-01", 0.01, "ok", "y")], 0.05)
    assert svg.count("<polygon") == 1 and svg.count("<circle") >= 1  # the outlier on the edge
    assert "&lt;x&gt;" in svg and "<x>" not in svg
    assert format_value(None, "money") == "—" and format_value(0.0512, "percent") == "+5.12 %"


def test_credits_before_any_roi_rows(url: str) -> None:
    """Credits loaded, ROI job not run yet: credited revenue shows, costs are not zeros."""
    with Warehouse(url) as wh:
        wh.store(ATTRIBUTION_CREDITS, [
            ("linear", "o1", 0, "u1", 0, "2026-10-01", "email", "news", 0, 1.0, 42.0, "USD",
             "new")])
        assert "No ROI rows yet" in build_view(wh, "roi", Filters()).notice
        view = build_view(wh, "models", Filters())
        assert view.table("models_summary").rows == []
        assert view.table("models_revenue").rows == [("email", 42.0)]


def test_server_reuses_a_connection_per_worker(url: str, warehouse: Warehouse,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a Warehouse applies the DDL: a page view must not do it each time."""
    opened = []

    class Counting(Warehouse):
        def __init__(self, url: str = "", create: bool = True) -> None:
            opened.append(url)
            super().__init__(url, create=create)

    monkeypatch.setattr(app_module, "Warehouse", Counting)
    server = app_module.make_dashboard_server(url, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    statuses: list[int] = []

    def get() -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/models",
                                    timeout=10) as response:
            statuses.append(response.status)

    try:
        for _ in range(3):  # bursts of parallel requests, more than there are workers
            threads = [threading.Thread(target=get) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        server.shutdown()
        server.server_close()
    assert statuses == [200] * 24
    assert 1 <= len(opened) <= app_module.WORKERS


def test_a_broken_connection_is_replaced(url: str, warehouse: Warehouse) -> None:
    app = DashboardApp(url)
    assert call(app, "/roi")[0].startswith("200")
    app._local.warehouse._conn.close()  # as if the database had gone away
    with pytest.raises(sqlite3.ProgrammingError):
        call(app, "/roi")
    assert call(app, "/roi")[0].startswith("200")


def test_pages_are_shed_when_their_workers_are_taken_and_healthz_still_answers(
        url: str, warehouse: Warehouse) -> None:
    """Heavy requests (pages, CSVs) run on at most `page_slots` workers at once; one more
    waits PAGE_WAIT_S, then gets 503 with Retry-After: /healthz is not stuck behind them."""
    app = DashboardApp(url, page_slots=2)
    app._pages.acquire()
    app._pages.acquire()  # two pages in progress
    status, headers, _ = call(app, "/roi")
    assert status.startswith("503") and headers["Retry-After"] == "2"
    assert call(app, "/csv/roi_by_channel.csv")[0].startswith("503")
    assert call(app, "/healthz")[0].startswith("200")
    app._pages.release()
    assert call(app, "/roi")[0].startswith("200")
    assert call(app, "/roi")[0].startswith("200")  # each page gives its slot back


def test_every_table_of_every_page_has_its_csv(url: str, warehouse: Warehouse) -> None:
    from pipelines.dashboard.app import TABLE_VIEWS, VIEWS

    for view in VIEWS:
        for table in build_view(warehouse, view, Filters()).tables:
            assert TABLE_VIEWS.get(table.name) == view, table.name
