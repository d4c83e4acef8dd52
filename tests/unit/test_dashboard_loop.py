"""The dashboard's Experiments and Control pages and the credit intervals on the Models page,
over a small hand-made SQLite warehouse (experiment_results, credit_intervals and the control
tables), every expected cell written out by hand."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.dashboard.app import DashboardApp
from pipelines.dashboard.filters import Filters, parse_filters
from pipelines.dashboard.queries import build_view, options
from pipelines.dashboard.tables import format_interval
from pipelines.store.warehouse import Warehouse
from tests.dashboard_warehouse import call


@pytest.fixture
def empty(tmp_path: Path) -> Iterator[tuple[str, Warehouse]]:
    empty_url = f"sqlite:///{tmp_path / 'empty.db'}"
    with Warehouse(empty_url) as wh:
        yield empty_url, wh


def by_key(rows: list[tuple[object, ...]], width: int = 2) -> dict[tuple[object, ...], tuple]:
    return {row[:width]: row for row in rows}


def test_strategy_table_of_each_experiments_newest_window(loop: Warehouse) -> None:
    view = build_view(loop, "experiments", Filters())
    rows = view.table("experiment_strategy").rows
    assert [r[:3] for r in rows] == [
        ("bid-strategy", "control", "control"), ("bid-strategy", "aggressive", "vs control"),
        ("checkout-copy", "control", "control"), ("checkout-copy", "b", "vs control"),
        ("onboarding", "control", "control"), ("onboarding", "new", "vs control")]
    lift = by_key(rows)["bid-strategy", "aggressive"]
    assert lift[3] == "2026-10-08 .. 2026-10-14"  # the newest window, not 10-07's
    assert lift[4:8] == (1000, 125, 382.0, 100.0)  # users, conversions, revenue, cost
    assert lift[8] == (3.82, 3.41, 4.25) and lift[9] == (0.82, 0.41, 1.25)
    assert lift[10:13] == ("significant", 0.0004, 0.12)
    assert lift[13] == "ok"
    assert by_key(rows)["checkout-copy", "b"][10:12] == ("not significant", 0.41)
    control = by_key(rows)["bid-strategy", "control"]
    assert control[9] == (None, None, None) and control[10:13] == ("control", None, None)
    assert by_key(rows)["onboarding", "new"][13:] == ("MISMATCH", 2e-05, "")
    assert len(view.warnings) == 1 and "Sample ratio mismatch in onboarding" in view.warnings[0]
    assert {k.name: k.value for k in view.kpis} == {
        "kpi_experiments": 3, "kpi_significant": 1, "kpi_srm": 1}
    assert format_interval(lift[8], "ratio") == "3.82 [3.41, 4.25]"
    assert format_interval(lift[9], "delta") == "+0.82 [+0.41, +1.25]"


def test_experiment_dates_choose_the_newest_window_inside_them(loop: Warehouse) -> None:
    rows = build_view(loop, "experiments", Filters(date_to="2026-10-10")).table(
        "experiment_strategy").rows
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("bid-strategy", "control", "2026-10-01 .. 2026-10-07"),
        ("bid-strategy", "aggressive", "2026-10-01 .. 2026-10-07")]
    assert rows[1][10:12] == ("not significant", 0.7)
    none = build_view(loop, "experiments", Filters(date_from="2026-11-01"))
    assert none.table("experiment_strategy").rows == [] and not none.notice


def test_credit_intervals_of_the_newest_day_for_the_model(loop: Warehouse) -> None:
    table = build_view(loop, "models", Filters()).table("credit_intervals")  # last_click
    assert [(r[0], r[1]) for r in table.rows] == [("search", "2026-10-02"),
                                                  ("organic", "2026-10-02")]
    organic = table.rows[1]
    assert organic[2] == (0.312, 0.298, 0.327) and organic[3] == (5.0, 4.5, 5.5)
    assert organic[4] == (250.0, 225.0, 275.0) and organic[5:] == (0.95, 1000)
    assert format_interval(organic[2], "share") == "31.2 % [29.8, 32.7]"
    assert "last_click, 2026-10-02" in table.note
    first = build_view(loop, "models", Filters(date_to="2026-10-01")).table("credit_intervals")
    assert [(r[0], r[2][0]) for r in first.rows] == [("search", 0.7), ("social", 0.3)]
    linear = build_view(loop, "models", Filters(model="linear")).table("credit_intervals")
    assert [r[0] for r in linear.rows] == ["social"]
    other = build_view(loop, "models", Filters(model="first_touch")).table("credit_intervals")
    assert other.rows == [] and "seedance intervals" in other.empty


def test_control_decisions_with_their_actions_and_verifications(loop: Warehouse) -> None:
    view = build_view(loop, "control", Filters())
    decisions = view.table("control_decisions").rows
    assert [r[-1] for r in decisions] == ["d3", "d2", "d1", "d4"]  # newest first
    story = {r[-1]: r for r in decisions}
    assert story["d1"][6:10] == ("executed", None, "auto", "webhook: succeeded after 2 "
                                 "attempts; verified success (+12.0 %)")
    assert story["d2"][6:10] == ("blocked", "max_change_per_week_percent", "auto",
                                 "blocked by max_change_per_week_percent")
    assert story["d3"][6:10] == ("awaiting_approval", None, "approval", "awaiting approval")
    assert story["d4"][9] == "webhook: failed after 3 attempts"
    assert story["d1"][:6] == ("2026-10-03T06:00:00Z", "cut-low-roi", "meta-prospecting",
                               "budget_change", '{"percent": -20}',
                               "ROI 0.8 below 1.0 for 3 days")
    actions = view.table("control_actions").rows
    assert actions == [
        ("2026-10-03T06:00:05Z", "cut-low-roi", "meta-prospecting", "webhook", "succeeded", 2,
         "200 OK", "2026-10-05T06:00:05Z", "success", "a1", "d1"),
        ("2026-10-02T06:00:09Z", "cut-low-roi", "dv360-awareness", "webhook", "failed", 3,
         "503 Service Unavailable", "2026-10-04T06:00:09Z", None, "a4", "d4")]
    verification, = view.table("control_verifications").rows
    assert verification[:7] == ("2026-10-05T07:00:00Z", "cut-low-roi", "meta-prospecting",
                                "budget_change", "success", 1.5, 1.68)
    assert verification[7] == pytest.approx(0.12) and verification[8:] == (
        "cut-low-roi: verified", "a1")
    assert {k.name: k.value for k in view.kpis} == {
        "kpi_decisions": 4, "kpi_awaiting": 1, "kpi_blocked": 1, "kpi_verified": 1,
        "kpi_failed": 0}


def test_control_filters_by_status_rule_and_day(loop: Warehouse) -> None:
    def ids(**filters: str) -> list[object]:
        return [r[-1] for r in build_view(loop, "control", Filters(**filters)).table(
            "control_decisions").rows]

    assert ids(status="success") == ["d1"]  # a verification's status
    assert ids(status="failed") == ["d4"]  # an action's
    assert ids(status="blocked") == ["d2"]  # the decision's own
    assert ids(rule="scale-gpu") == ["d3"]
    assert ids(date_from="2026-10-04") == ["d3", "d2"]
    assert ids(rule="cut-low-roi", date_to="2026-10-03") == ["d1", "d4"]
    view = build_view(loop, "control", Filters(rule="scale-gpu"))
    assert view.table("control_actions").rows == []
    assert view.table("control_verifications").rows == []
    chosen = options(loop)
    assert chosen["rules"] == ["cut-low-roi", "scale-gpu"]
    assert chosen["statuses"] == ["awaiting_approval", "blocked", "executed", "failed",
                                  "succeeded", "success"]
    assert parse_filters({"status": ["blocked"], "rule": ["r"]}).query_string() == \
        "status=blocked&rule=r"


def test_empty_states_say_how_to_fill_them(empty: tuple[str, Warehouse]) -> None:
    empty_url, wh = empty
    notice = build_view(wh, "experiments", Filters()).notice
    for command in ("seedance run --job experiments", "seedance load", "seedance experiments"):
        assert f"`{command}`" in notice
    assert "`seedance control run`" in build_view(wh, "control", Filters()).notice
    app = DashboardApp(empty_url)
    for page in ("/experiments", "/control"):
        status, _, body = call(app, page)
        assert status.startswith("200") and 'id="notice"' in body
    for table in ("experiment_strategy", "control_decisions", "credit_intervals"):
        status, _, body = call(app, f"/csv/{table}.csv")
        assert status.startswith("200") and body == ""


def test_pages_show_the_cells(url: str, loop: Warehouse) -> None:
    app = DashboardApp(url)
    status, _, body = call(app, "/experiments")
    assert status.startswith("200")
    for cell in ('<td data-col="roi" class="num">3.82 [3.41, 4.25]</td>',
                 '<td data-col="roi_diff" class="num">+0.82 [+0.41, +1.25]</td>',
                 '<td data-col="verdict">significant</td>',
                 '<td data-col="verdict">not significant</td>',
                 '<td data-col="marginal_cost" class="num">+12.00 %</td>',
                 '<td data-col="srm">MISMATCH</td>', 'id="warning-0"', '<svg'):
        assert cell in body, cell
    assert body.count('<tr class="breach">') == 2  # both onboarding variants
    _, _, models = call(app, "/models")
    assert '<td data-col="share" class="num">31.2 % [29.8, 32.7]</td>' in models
    assert "Share of credit per channel with its interval" in models
    status, _, control = call(app, "/control", "status=success&from=2026-10-01")
    assert status.startswith("200")
    assert '<td data-col="status">success</td>' in control
    assert '<td data-col="status">awaiting_approval</td>' not in control  # filtered out
    assert 'id="f-status"' in control and 'id="f-rule"' in control
    query = "from=2026-10-01&amp;model=last_click"
    assert f'href="/csv/control_decisions.csv?{query}&amp;status=success"' in control
    assert f'href="/roi?{query}"' in control  # the status filter stays on its page
    _, _, roi = call(app, "/roi", "status=success")
    assert 'id="f-status"' not in roi
    assert 'href="/control?model=last_click&amp;status=success"' in roi
    _, _, everything = call(app, "/control")
    assert '<td data-col="status">awaiting_approval</td>' in everything
    assert '<td data-col="blocked_by">max_change_per_week_percent</td>' in everything


def test_csv_exports(url: str, loop: Warehouse) -> None:
    app = DashboardApp(url)
    status, headers, body = call(app, "/csv/experiment_strategy.csv")
    assert status.startswith("200") and headers["Content-Type"].startswith("text/csv")
    header, *lines = list(csv.reader(io.StringIO(body)))
    assert header[8:14] == ["roi", "roi_low", "roi_high", "roi_diff", "diff_low", "diff_high"]
    lift = next(line for line in lines if line[1] == "aggressive")
    assert lift[8:17] == ["3.82", "3.41", "4.25", "0.82", "0.41", "1.25", "significant",
                          "0.0004", "0.12"]
    assert len(lines) == 6
    _, _, body = call(app, "/csv/credit_intervals.csv", "model=linear")
    assert list(csv.reader(io.StringIO(body)))[1][:5] == ["social", "2026-10-02", "1.0",
                                                          "1.0", "1.0"]
    _, headers, body = call(app, "/csv/control_decisions.csv", "rule=cut-low-roi")
    assert 'control_decisions.csv"' in headers["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(body)))
    assert rows[0][-2:] == ["outcome", "decision_id"] and len(rows) == 4
    assert "'=HYPERLINK(\"http://x\")" in rows[-1]  # neutralised like every other export
    _, _, body = call(app, "/csv/control_verifications.csv")
    assert list(csv.reader(io.StringIO(body)))[1][4:8] == ["success", "1.5", "1.68", "0.12"]
