"""One name per figure: ROI (`roi`, revenue / cost), ROAS (`roas`) and margin ROI
(`margin_roi`, at the gross margin in force, which the page states) read the same on the
dashboard's page, in its CSV, in the CLI report and in the warehouse; a row whose only cost
is compute is marked "compute only" instead of its ROI by one rule everywhere, the LTV
tables included; customers are counted in whole numbers."""

from __future__ import annotations

import csv
import io
from html import unescape

import pandas as pd
import pytest

from jobs.commands.ltv_return import channel_lines
from jobs.commands.report import print_roi_summary
from pipelines.dashboard.app import DashboardApp
from pipelines.dashboard.filters import Filters
from pipelines.dashboard.queries import COST_COLUMNS, build_view
from pipelines.dashboard.tables import RatioRule, set_ratio_rule
from pipelines.store.ltv import ltv_return_frame
from pipelines.store.warehouse import Warehouse
from schemas import rows
from schemas.rows import LTV_RETURN, ROI_DAILY
from tests.dashboard_warehouse import call, declared, roi_row

DAY = "2026-10-01"


@pytest.fixture
def margin() -> object:
    set_ratio_rule(RatioRule(gross_margin=0.6))
    yield
    set_ratio_rule(RatioRule())


@pytest.fixture
def unpaid(warehouse: Warehouse) -> Warehouse:
    """email: 9,561.30 of revenue over 3.00 of compute and no ad spend (a ROI of 3,187.10)."""
    warehouse.store(ROI_DAILY, [roi_row("last_click", DAY, dim, "email", 1, 9561.3, 0, 3.0)
                                for dim in ("channel", "campaign")])
    return warehouse


def ltv_row(key: str, customers: float, cost: float, revenue: float,
            dimension: str = "channel") -> tuple[object, ...]:
    return declared(
        LTV_RETURN, model="last_click", dimension=dimension, key=key, customers=customers,
        acquisition_cost=cost, first_order_revenue=revenue, predicted_value=3 * revenue,
        predicted_value_low=2 * revenue, predicted_value_high=4 * revenue,
        cac=cost / customers, ltv_roi=3 * revenue / cost, ltv_roi_low=2 * revenue / cost,
        ltv_roi_high=4 * revenue / cost, first_order_roi=revenue / cost, payback_days=7,
        horizon_days=365, as_of_day="2026-10-02", currency="USD", gross_margin=0.6,
        level=0.9, computed_at="2026-10-03T06:00:00Z")


def test_each_ratio_has_the_warehouse_name_and_one_label(warehouse: Warehouse, url: str,
                                                          margin: object) -> None:
    warehouse_columns = set(rows.ROI_DAILY.names)
    labels = {c.name: c.label for c in COST_COLUMNS if c.kind == "ratio"}
    assert labels == {"roi": "ROI", "roas": "ROAS", "margin_roi": "Margin ROI"}
    assert set(labels) <= warehouse_columns
    view = build_view(warehouse, "roi", Filters())
    kpis = {k.name: k for k in view.kpis}
    assert kpis["kpi_roi"].label == "ROI"
    assert kpis["kpi_roi"].value == pytest.approx(640 / 210)  # revenue / cost, as roi_daily
    assert kpis["kpi_margin_roi"].label == "Margin ROI (gross margin 60 %)"
    assert kpis["kpi_margin_roi"].value == pytest.approx((640 * 0.6 - 210) / 210)
    _, _, page = call(DashboardApp(url), "/roi")
    assert "at a gross margin 60 %" in unescape(page)
    _, _, body = call(DashboardApp(url), "/csv/roi_by_channel.csv")
    header, *lines = csv.reader(io.StringIO(body))
    assert header[-3:] == ["roi", "roas", "margin_roi"]
    search = next(line for line in lines if line[0] == "search")
    assert float(search[-3]) == pytest.approx(500 / 170)  # the page's "ROI" is roi_daily.roi


def test_a_row_whose_only_cost_is_compute_is_marked_compute_only(unpaid: Warehouse,
                                                                  url: str) -> None:
    view = build_view(unpaid, "roi", Filters())
    for name in ("roi_by_channel", "roi_by_campaign"):
        email = next(r for r in view.table(name).rows if r[0] == "email")
        assert (email[-3], email[-2], email[-1]) == ("compute only", None, "compute only")
        assert "'compute only': the row's only cost is compute" in view.table(name).note
    search = next(r for r in view.table("roi_by_channel").rows if r[0] == "search")
    assert search[-3] == pytest.approx(500 / 170)
    models = build_view(unpaid, "models", Filters())
    assert next(r for r in models.table("models_roi").rows if r[0] == "email")[1] == \
        "compute only"
    _, _, page = call(DashboardApp(url), "/roi")
    assert '<td data-col="roi" class="num">compute only</td>' in page
    assert "3,187.10" not in page
    _, _, body = call(DashboardApp(url), "/csv/roi_by_channel.csv")
    email_line = next(line for line in csv.reader(io.StringIO(body)) if line[0] == "email")
    assert email_line[-3:] == ["compute only", "", "compute only"]


def test_the_cli_report_uses_the_same_names_and_rule(unpaid: Warehouse,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    print_roi_summary(unpaid, ("last_click",), gross_margin=0.6)
    out = capsys.readouterr().out
    assert "ROI (revenue / cost) per channel" in out
    assert "margin ROI = (revenue x gross margin - cost) / cost at gross margin 60 %" in out
    assert out.splitlines()[out.splitlines().index(next(
        line for line in out.splitlines() if line.startswith("channel") and "ROAS" in line))
    ].split()[-4:] == ["ROI", "ROAS", "Margin", "ROI"]
    email = [line for line in out.splitlines() if line.startswith("email")]
    assert [line.count("compute only") for line in email] == [1, 2]
    assert "3,187.10" not in out


def test_the_ltv_tables_mark_compute_only_channels_and_count_whole_customers(
        unpaid: Warehouse, url: str) -> None:
    unpaid.store(LTV_RETURN, [ltv_row("search", 94.0, 800.0, 1000.0),
                              ltv_row("email", 12.0, 3.0, 500.0),
                              ltv_row("social", 2.5, 400.0, 300.0)])
    lines = channel_lines(ltv_return_frame(unpaid))
    by_key = {line.split()[0]: line for line in lines[1:]}
    assert by_key["search"].split()[1] == "94" and "94.0" not in by_key["search"]
    assert by_key["social"].split()[1] == "2.5"
    assert by_key["email"].count("compute only") == 2
    assert by_key["all"].split()[2] == "108.5"
    assert any(line.startswith("compute only:") for line in lines)
    view = build_view(unpaid, "lifetime", Filters())
    table = view.table("ltv_by_channel")
    email = next(r for r in table.rows if r[0] == "email")
    assert email[5] == "compute only" and email[7][0] == "compute only"
    assert "'compute only'" in table.note
    _, _, page = call(DashboardApp(url), "/lifetime")
    assert '<td data-col="customers" class="num">94</td>' in page
    assert '<td data-col="customers" class="num">2.5</td>' in page
    _, _, body = call(DashboardApp(url), "/csv/ltv_by_channel.csv")
    header, *found = csv.reader(io.StringIO(body))
    email_line = dict(zip(header, next(line for line in found if line[0] == "email"),
                          strict=True))
    assert (email_line["first_order_roi"], email_line["ltv_roi"]) == ("compute only",
                                                                      "compute only")


def test_a_frame_without_the_mark_prints_as_before() -> None:
    frame = pd.DataFrame([dict(zip(LTV_RETURN.names, ltv_row("search", 40.0, 800.0, 1000.0),
                                   strict=True))])
    line = channel_lines(frame)[1]
    assert line.split()[1] == "40" and "compute only" not in line
