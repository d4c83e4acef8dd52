"""Long tables a page at a time: 10,000 variants of one flag (which made /experiments 8 MB
and 5.5 s), 10,000 ROI rows, 1,200 control decisions, 1,000 reconciliation rows and 600
rows of GPU cost. Each
page is small and says "rows 1–200 of 10,000", the next page shows the next rows, the
headline figures and the charts of totals are over every row (not the page), and the CSV
holds every row."""

from __future__ import annotations

import csv
import io
import re
import time
from html import unescape
from pathlib import Path

import pytest

from pipelines.dashboard.app import DashboardApp
from pipelines.dashboard.paging import PAGE_ROWS
from pipelines.dashboard.tables import format_value
from pipelines.store.warehouse import Warehouse
from schemas.rows import (
    CONTROL_DECISION,
    EXPERIMENT_RESULT,
    GPU_CALL_COST,
    GPU_IDLE_COST,
    ROI_DAILY,
)
from tests.dashboard_warehouse import (
    D1,
    RECONCILIATION_DDL,
    H,
    call,
    call_row,
    decision,
    idle_row,
    recon,
    result,
    roi_row,
)

MAX_PAGE_BYTES = 300_000


def cells(page: str, table: str, column: str) -> list[str]:
    """The text of a column's cells in one table of a page."""
    body = page.split(f'<table id="{table}">', 1)[1].split("</table>", 1)[0]
    return [unescape(text) for text in
            re.findall(rf'<td data-col="{column}"[^>]*>([^<]*)</td>', body)]


def kpi(page: str, name: str) -> str:
    return unescape(re.search(rf'id="{name}">.*?class="value">([^<]*)<', page)[1])


def csv_rows(app: DashboardApp, table: str) -> list[dict[str, str]]:
    status, _, body = call(app, f"/csv/{table}.csv")
    assert status.startswith("200")
    return list(csv.DictReader(io.StringIO(body)))


@pytest.fixture
def variants(tmp_path: Path) -> str:
    """One flag with a control and 9,999 variants (every 7th significant), and a small
    second experiment."""
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    with Warehouse(url) as wh:
        rows = [result("big-flag", "control", "2026-10-14", (2.0, 1.8, 2.2))]
        rows += [result("big-flag", f"v{i:05d}", "2026-10-14", (2.0 + i / 1e4, 1.8, 2.3),
                        (i / 1e4, -0.1, 0.3), 0.01 if i % 7 == 0 else 0.4, i % 7 == 0)
                 for i in range(1, 10_000)]
        rows += [result("small", "control", "2026-10-14", (1.0, 0.9, 1.1)),
                 result("small", "b", "2026-10-14", (1.5, 1.3, 1.7), (0.5, 0.3, 0.7), 0.001,
                        True)]
        wh.store(EXPERIMENT_RESULT, rows)
    return url


def test_ten_thousand_variants_a_page_at_a_time(variants: str) -> None:
    app = DashboardApp(variants)
    started = time.perf_counter()
    status, _, page = call(app, "/experiments")
    elapsed = time.perf_counter() - started
    assert status.startswith("200")
    assert len(page.encode()) < MAX_PAGE_BYTES and elapsed < 2  # was 11 MB and 10 s
    assert "rows 1–200 of 10,002" in page
    shown = cells(page, "experiment_strategy", "variant")
    assert shown == ["control", *(f"v{i:05d}" for i in range(1, PAGE_ROWS))]
    assert 'rel="next"' in page and 'rel="prev"' not in page

    _, _, second = call(app, "/experiments", "page.experiment_strategy=2")
    assert "rows 201–400 of 10,002" in second
    assert cells(second, "experiment_strategy", "variant") == [
        f"v{i:05d}" for i in range(PAGE_ROWS, 2 * PAGE_ROWS)]
    assert 'href="/experiments?page.experiment_strategy=3"' in second
    assert 'href="/experiments"' in second.split('id="pager-experiment_strategy"')[1]  # prev

    _, _, last = call(app, "/experiments", "page.experiment_strategy=999")  # past the end
    assert "rows 10,001–10,002 of 10,002" in last
    assert cells(last, "experiment_strategy", "experiment") == ["small", "small"]
    assert 'rel="next"' not in last

    # the headline figures are the whole table's, on every page: as the CSV counts them
    exported = csv_rows(app, "experiment_strategy")
    assert len(exported) == 10_002
    significant = sum(r["verdict"] == "significant" for r in exported)
    assert significant == 9_999 // 7 + 1
    for shown_page in (page, second, last):
        assert kpi(shown_page, "kpi_experiments") == "2"
        assert kpi(shown_page, "kpi_significant") == f"{significant:,}"
    status, _, body = call(app, "/experiments", "page.experiment_strategy=0")
    assert status.startswith("400") and "must be a page number" in unescape(body)


@pytest.fixture
def campaigns(tmp_path: Path) -> str:
    """10,000 campaigns over 250 days (40 a day), one channel per day."""
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    with Warehouse(url) as wh:
        rows = []
        for n in range(10_000):
            day = f"2026-{1 + n // 40 // 28:02d}-{1 + n // 40 % 28:02d}"
            rows.append(roi_row("last_click", day, "campaign", f"c{n:05d}", 1, 10 + n * 0.01,
                                5 + (n % 3), 1.25))
            if n % 40 == 0:
                rows.append(roi_row("last_click", day, "channel", "search", 40, 400, 200, 50))
        wh.store(ROI_DAILY, rows)
    return url


def test_roi_tables_page_and_the_totals_are_over_every_row(campaigns: str) -> None:
    app = DashboardApp(campaigns)
    status, _, page = call(app, "/roi")
    assert status.startswith("200") and len(page.encode()) < MAX_PAGE_BYTES
    assert "rows 1–200 of 10,000" in page and "rows 1–200 of 250" in page
    # by revenue, largest first: the newest campaigns
    assert cells(page, "roi_by_campaign", "campaign")[:2] == ["c09999", "c09998"]
    _, _, second = call(app, "/roi", "page.roi_by_campaign=2&page.roi_by_day=2")
    assert "rows 201–400 of 10,000" in second and "rows 201–250 of 250" in second
    assert cells(second, "roi_by_campaign", "campaign")[0] == "c09799"
    # each table's link to its next page keeps the other table's page
    assert ('href="/roi?model=last_click&amp;page.roi_by_campaign=3&amp;page.roi_by_day=2"'
            in second)

    by_campaign, by_day = csv_rows(app, "roi_by_campaign"), csv_rows(app, "roi_by_day")
    assert len(by_campaign) == 10_000 and len(by_day) == 250
    revenue = sum(10 + n * 0.01 for n in range(10_000))
    ad_spend = sum(5 + n % 3 for n in range(10_000))
    assert sum(float(r["revenue"]) for r in by_campaign) == pytest.approx(revenue)
    assert sum(float(r["revenue"]) for r in by_day) == pytest.approx(revenue)
    for shown in (page, second):
        assert kpi(shown, "kpi_revenue") == format_value(revenue, "money")
        assert kpi(shown, "kpi_ad_spend") == format_value(ad_spend, "money")
        assert kpi(shown, "kpi_compute") == format_value(12_500, "money")
        assert kpi(shown, "kpi_conversions") == format_value(10_000, "number")


def test_control_decisions_page_and_count_them_all(tmp_path: Path) -> None:
    """1,200 decisions: all counted (the page showed the newest 500 and counted those)."""
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    with Warehouse(url) as wh:
        wh.store(CONTROL_DECISION, [
            decision(f"d{n:04d}", "cut-low-roi", f"campaign-{n}",
                     "awaiting_approval" if n % 4 == 0 else "blocked",
                     f"2026-10-{1 + n // 100:02d}T{n % 24:02d}:{n % 60:02d}:00Z")
            for n in range(1_200)])
    app = DashboardApp(url)
    status, _, page = call(app, "/control")
    assert status.startswith("200") and len(page.encode()) < MAX_PAGE_BYTES
    assert "rows 1–200 of 1,200" in page
    assert len(cells(page, "control_decisions", "decision_id")) == PAGE_ROWS
    assert kpi(page, "kpi_decisions") == "1,200"
    assert kpi(page, "kpi_awaiting") == "300" and kpi(page, "kpi_blocked") == "900"
    _, _, sixth = call(app, "/control", "status=blocked&page.control_decisions=5")
    assert "rows 801–900 of 900" in sixth and kpi(sixth, "kpi_decisions") == "900"
    exported = csv_rows(app, "control_decisions")
    assert len(exported) == 1_200
    assert cells(page, "control_decisions", "decision_id") == [
        r["decision_id"] for r in exported[:PAGE_ROWS]]


def test_reconciliation_pages_and_its_figures_are_over_every_row(tmp_path: Path) -> None:
    """1,000 comparisons (500 days, two campaigns); the largest drift on the oldest day,
    past the first page."""
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    with Warehouse(url) as wh:
        wh.apply_ddl(RECONCILIATION_DDL)
        columns = ("scope", "platform", "account", "entity", "day", "metric", "currency",
                   "ours", "theirs", "difference", "drift", "threshold", "min_volume",
                   "status", "contributors", "billing_source", "reported_at")
        rows = []
        for n in range(500):
            day = f"{2025 + n // 336}-{1 + n // 28 % 12:02d}-{1 + n % 28:02d}"
            rows += [recon(day, "campaign", "meta", "meta-1", "spend", 101.0, 100.0, "ok"),
                     recon(day, "campaign", "google_ads", "gs-1", "spend",
                           150.0 if n == 0 else 120.0, 100.0, "breach")]
        wh.upsert("reconciliation_daily", columns, 6, rows)
    app = DashboardApp(url)
    status, _, page = call(app, "/reconciliation")
    assert status.startswith("200") and len(page.encode()) < MAX_PAGE_BYTES
    assert "rows 1–200 of 1,000" in page and "rows 1–200 of 500" in page  # rows, breaches
    assert kpi(page, "kpi_compared") == "1,000" and kpi(page, "kpi_breaches") == "500"
    assert kpi(page, "kpi_max_drift") == "50.0 %"  # on the last page of the table
    assert len(csv_rows(app, "recon_rows")) == 1_000
    assert len(csv_rows(app, "recon_breaches")) == 500


def test_compute_tables_page_and_the_chart_sums_every_day(tmp_path: Path) -> None:
    """300 days of a GPU serving two workloads: 600 rows per workload and day. The chart
    of each workload's cost and the GPU bill are over all 300 days, not the page."""
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    day = 86_400_000
    with Warehouse(url) as wh:
        wh.store(GPU_CALL_COST, [
            call_row("GPU-1", D1 + n * day + H, f"t{n}-{workload}", workload, 10.0, cost)
            for n in range(300) for workload, cost in (("ranker", 2.0), ("batch", 1.0))])
        wh.store(GPU_IDLE_COST, [idle_row("GPU-1", D1 + n * day + 2 * H, 3.0)
                                 for n in range(300)])
    app = DashboardApp(url)
    status, _, page = call(app, "/compute")
    assert status.startswith("200") and len(page.encode()) < MAX_PAGE_BYTES
    assert "rows 1–200 of 600" in page and "rows 1–200 of 300" in page  # workloads, units
    assert len(cells(page, "compute_by_workload", "workload")) == PAGE_ROWS
    # ranker: 300 days of 2.00 own cost and 2.00 of the idle 3.00 (by call cost)
    assert "ranker, own cost: 600.00" in page and "ranker, share of idle: 600.00" in page
    assert kpi(page, "kpi_gpu_bill") == "1,800.00"
    exported = csv_rows(app, "compute_by_workload")
    assert len(exported) == 600
    assert sum(float(r["loaded_cost"]) for r in exported) == pytest.approx(1_800)


@pytest.mark.parametrize("page", ["0", "-1", "two", "1" * 5000, "1" * 10])
def test_a_page_number_that_is_none_is_a_clear_refusal(page):
    """Not a 500: a number past what int() reads (thousands of digits) included."""
    from pipelines.dashboard.filters import FilterError
    from pipelines.dashboard.paging import parse_paging

    with pytest.raises(FilterError, match="must be a page number"):
        parse_paging({"page.roi_by_day": [page]})
    assert parse_paging({"page.roi_by_day": ["3"]}).pages == {"roi_by_day": 3}
