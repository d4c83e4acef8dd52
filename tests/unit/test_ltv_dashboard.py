"""The dashboard's Lifetime value page over the hand-made SQLite warehouse (tests/unit/
conftest.py) with ltv_return, customer_ltv and ltv_calibration rows written by hand: every
figure shown is the table's, and the exports hold the table's numbers."""

from __future__ import annotations

import csv
import io
import re
from html import unescape

import pytest

from pipelines.dashboard.app import DashboardApp
from pipelines.dashboard.filters import Filters
from pipelines.dashboard.queries import build_view
from pipelines.dashboard.tables import format_interval, format_value
from pipelines.store.warehouse import Warehouse
from schemas.rows import CUSTOMER_LTV, LTV_CALIBRATION, LTV_RETURN
from tests.dashboard_warehouse import call, declared


def ltv_row(model: str, dimension: str, key: str, customers: float, cost: float,
            revenue: float, value: tuple[float, float | None, float | None],
            payback: int | None) -> tuple[object, ...]:
    point, low, high = value
    return declared(
        LTV_RETURN, model=model, dimension=dimension, key=key, customers=customers,
        acquisition_cost=cost, first_order_revenue=revenue, predicted_value=point,
        predicted_value_low=low, predicted_value_high=high, cac=cost / customers,
        ltv_roi=point / cost, ltv_roi_low=None if low is None else low / cost,
        ltv_roi_high=None if high is None else high / cost, first_order_roi=revenue / cost,
        payback_days=payback, horizon_days=365, as_of_day="2026-10-02", currency="USD",
        gross_margin=0.4, level=0.9, computed_at="2026-10-03T06:00:00Z")


def customer(user: str, ltv: float, segment: str, alive: float) -> tuple[object, ...]:
    return declared(
        CUSTOMER_LTV, user_id=user, as_of_day="2026-10-02", frequency=1.0, recency_days=7.0,
        age_days=30.0, monetary=20.0, p_alive=alive, expected_purchases=ltv / 25.0,
        expected_order_value=25.0, predicted_ltv=ltv, segment=segment, horizon_days=365,
        fitted_through_day="2026-10-02")


@pytest.fixture
def ltv(warehouse: Warehouse) -> Warehouse:
    """last_click: search acquired 40 customers for 800 (value 3,200 [2,800, 3,700], paid
    back on day 63), social 10 for 400 (value 600 [500, 720], not paid back); campaigns
    gs-1 and meta-1 alike; linear: search only. Five customers in three segments; a
    calibration of three frequencies."""
    warehouse.store(LTV_RETURN, [
        ltv_row("last_click", "channel", "search", 40.0, 800.0, 1000.0,
                (3200.0, 2800.0, 3700.0), 63),
        ltv_row("last_click", "channel", "social", 10.0, 400.0, 300.0, (600.0, 500.0, 720.0),
                None),
        ltv_row("last_click", "campaign", "gs-1", 40.0, 800.0, 1000.0,
                (3200.0, 2800.0, 3700.0), 63),
        ltv_row("last_click", "campaign", "meta-1", 10.0, 400.0, 300.0,
                (600.0, 500.0, 720.0), None),
        ltv_row("linear", "channel", "search", 25.0, 500.0, 700.0, (2000.0, None, None), 14)])
    warehouse.store(CUSTOMER_LTV, [
        customer("u1", 10.0, "low", 0.5), customer("u2", 20.0, "low", 0.7),
        customer("u3", 50.0, "mid", 0.9), customer("u4", 60.0, "mid", 0.8),
        customer("u5", 400.0, "top", 1.0)])
    warehouse.store(LTV_CALIBRATION, [
        declared(LTV_CALIBRATION, frequency=f, customers=n, predicted_purchases=p,
                 actual_purchases=a, calibration_end="2026-06-30", holdout_end="2026-09-30",
                 computed_at="2026-10-03T06:00:00Z")
        for f, n, p, a in ((0, 120, 0.21, 0.25), (1, 40, 0.9, 0.8), (7, 5, 6.5, 6.0))])
    return warehouse


def test_the_tables_show_ltv_return_as_stored(ltv: Warehouse) -> None:
    view = build_view(ltv, "lifetime", Filters())  # the default model, last_click
    channel = view.table("ltv_by_channel").rows
    assert channel == [
        ("search", 40.0, 800.0, 20.0, 1000.0, 1.25, (3200.0, 2800.0, 3700.0),
         (4.0, 3.5, 4.625), 63),
        ("social", 10.0, 400.0, 40.0, 300.0, 0.75, (600.0, 500.0, 720.0), (1.5, 1.25, 1.8),
         None)]
    assert [r[0] for r in view.table("ltv_by_campaign").rows] == ["gs-1", "meta-1"]
    assert {k.name: k.value for k in view.kpis} == {
        "kpi_customers": 50.0, "kpi_acquisition_cost": 1200.0, "kpi_cac": 24.0,
        "kpi_first_order_roi": pytest.approx(1300 / 1200), "kpi_ltv_roi": pytest.approx(
            3800 / 1200), "kpi_predicted_value": 3800.0}
    note = view.table("ltv_by_channel").note
    assert "as of 2026-10-02, a horizon of 365 days" in note and "40 %" in note
    assert "not paid back within the horizon" in note
    assert view.table("ltv_segments").rows == [
        ("low", 2, 0.4, 15.0, 30.0, pytest.approx(0.6)),
        ("mid", 2, 0.4, 55.0, 110.0, pytest.approx(0.85)),
        ("top", 1, 0.2, 400.0, 400.0, 1.0)]
    assert view.table("ltv_calibration").rows == [("0", 120, 0.21, 0.25),
                                                  ("1", 40, 0.9, 0.8), ("7+", 5, 6.5, 6.0)]
    linear = build_view(ltv, "lifetime", Filters(model="linear")).table("ltv_by_channel").rows
    assert linear == [("search", 25.0, 500.0, 20.0, 700.0, 1.4, (2000.0, None, None),
                       (4.0, None, None), 14)]


def test_the_campaign_filters_choose_campaign_rows(ltv: Warehouse) -> None:
    view = build_view(ltv, "lifetime", Filters(campaign="meta-1"))
    assert [r[0] for r in view.table("ltv_by_campaign").rows] == ["meta-1"]
    assert [r[0] for r in view.table("ltv_by_channel").rows] == ["search", "social"]
    google = build_view(ltv, "lifetime", Filters(platform="google_ads"))
    assert [r[0] for r in google.table("ltv_by_campaign").rows] == ["gs-1"]


def cells(body: str, table: str, column: str) -> list[str]:
    section = body[body.index(f'<table id="{table}"'):]
    section = section[:section.index("</table>")]
    return [unescape(c) for c in re.findall(
        rf'<td data-col="{column}"[^>]*>([^<]*)</td>', section)]


def test_the_page_shows_the_tables_figures(url: str, ltv: Warehouse) -> None:
    status, _, body = call(DashboardApp(url), "/lifetime")
    assert status == "200 OK"
    assert '<a href="/lifetime' in body and ">Lifetime value</a>" in body
    assert cells(body, "ltv_by_channel", "key") == ["search", "social"]
    assert cells(body, "ltv_by_channel", "ltv_roi") == ["4.00 [3.50, 4.62]",
                                                        "1.50 [1.25, 1.80]"]
    assert cells(body, "ltv_by_channel", "first_order_roi") == ["1.25", "0.75"]
    assert cells(body, "ltv_by_channel", "predicted_value") == [
        format_interval((3200.0, 2800.0, 3700.0), "money"),
        "600.00 [500.00, 720.00]"]
    assert cells(body, "ltv_by_channel", "cac") == ["20.00", "40.00"]
    assert cells(body, "ltv_by_channel", "payback_days") == ["63", "—"]
    assert cells(body, "ltv_segments", "customers") == ["2", "2", "1"]
    assert cells(body, "ltv_segments", "share") == ["40.0 %", "40.0 %", "20.0 %"]
    assert cells(body, "ltv_calibration", "frequency") == ["0", "1", "7+"]
    assert cells(body, "ltv_calibration", "actual_purchases") == ["0.25", "0.80", "6.00"]
    kpi = re.search(r'id="kpi_ltv_roi"><div class="label">[^<]*</div><div class="value">'
                    r'([^<]*)<', body)
    assert kpi is not None and kpi.group(1) == format_value(3800 / 1200, "ratio") == "3.17"
    # three charts: ROI per channel, customers per segment, the calibration
    assert body.count('<svg class="chart"') == 3
    assert "Holdout purchases per customer by purchases in calibration" in body
    assert "<title>7+, actual: 6.00</title>" in body


def test_the_exports_hold_the_tables_numbers(url: str, ltv: Warehouse) -> None:
    app = DashboardApp(url)
    status, headers, body = call(app, "/csv/ltv_by_channel.csv")
    assert status == "200 OK" and headers["Content-Type"].startswith("text/csv")
    table = list(csv.reader(io.StringIO(body)))
    assert table[0] == ["key", "customers", "acquisition_cost", "cac", "first_order_revenue",
                        "first_order_roi", "predicted_value", "predicted_value_low",
                        "predicted_value_high", "ltv_roi", "ltv_roi_low", "ltv_roi_high",
                        "payback_days"]
    assert table[2] == ["social", "10.0", "400.0", "40.0", "300.0", "0.75", "600.0", "500.0",
                        "720.0", "1.5", "1.25", "1.8", ""]
    for name in ("ltv_by_campaign", "ltv_segments", "ltv_calibration"):
        assert call(app, f"/csv/{name}.csv")[0] == "200 OK"


def test_an_empty_warehouse_says_how_to_fill_the_page(url: str, warehouse: Warehouse) -> None:
    view = build_view(warehouse, "lifetime", Filters())
    assert "seedance ltv return" in view.notice and not view.tables
    status, _, body = call(DashboardApp(url), "/lifetime")
    assert status == "200 OK" and 'id="notice"' in body
