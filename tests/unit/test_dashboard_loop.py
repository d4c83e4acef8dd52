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
from schemas.rows import (
    CONTROL_ACTION,
    CONTROL_DECISION,
    CONTROL_VERIFICATION,
    CREDIT_INTERVAL,
    EXPERIMENT_RESULT,
    Row,
)
from tests.unit.test_dashboard_queries import call, url, warehouse  # noqa: F401 (fixtures)


def declared(row: Row, **values: object) -> tuple[object, ...]:
    """A row of `row`'s table from its column names (every column given)."""
    assert set(values) == set(row.names), set(row.names) ^ set(values)
    return tuple(values[name] for name in row.names)


def result(flag_key: str, variant: str, window_end: str, roi: tuple[float, float, float],
           diff: tuple[float | None, float | None, float | None] = (None, None, None),
           p_value: float | None = None, significant: bool = False, srm_p: float = 0.5,
           users: int = 1000, control: str = "control", note: str = "") -> tuple[object, ...]:
    is_control = variant == control
    return declared(
        EXPERIMENT_RESULT, flag_key=flag_key, variant=variant, window_end=window_end,
        window_start="2026-10-08" if window_end == "2026-10-14" else "2026-10-01",
        is_control=is_control, control_variant=control, users=users, converters=users // 10,
        conversions=users // 8, revenue=roi[0] * 100.0, ad_spend=80.0, compute_cost=20.0,
        roi=roi[0], roi_low=roi[1], roi_high=roi[2], roi_diff=diff[0], diff_low=diff[1],
        diff_high=diff[2], p_value=p_value, significant=significant,
        marginal_cost=None if is_control else 0.12, srm_p_value=srm_p, srm=srm_p < 0.001,
        confidence=0.95, computed_at="2026-10-15T06:00:00+00:00", heavy_tail=False, note=note)


def interval(model: str, period: str, channel: str, share: tuple[float, float, float],
             credit: float) -> tuple[object, ...]:
    return declared(
        CREDIT_INTERVAL, model=model, period=period, channel=channel, credit=credit,
        credit_low=credit * 0.9, credit_high=credit * 1.1, revenue=credit * 50,
        revenue_low=credit * 45, revenue_high=credit * 55, share=share[0], share_low=share[1],
        share_high=share[2], level=0.95, resamples=1000, seed=7,
        computed_at="2026-10-03T01:00:00+00:00")


def decision(decision_id: str, rule: str, target: str, status: str, decided_at: str,
             blocked_by: str = "", mode: str = "auto", action: str = "budget_change",
             reason: str = "ROI 0.8 below 1.0 for 3 days") -> tuple[object, ...]:
    return declared(
        CONTROL_DECISION, decision_id=decision_id, rule=rule, target=target, action=action,
        parameters='{"percent": -20}', reason=reason, status=status, blocked_by=blocked_by,
        mode=mode, baseline=1.5, decided_at=decided_at)


@pytest.fixture
def loop(warehouse: Warehouse) -> Warehouse:  # noqa: F811
    """Three experiments (a significant lift, no difference, a sample-ratio mismatch), credit
    intervals of two days, and four control decisions: executed and verified, blocked by a
    limit, awaiting approval, executed and failed."""
    warehouse.store(EXPERIMENT_RESULT, [
        result("bid-strategy", "control", "2026-10-07", (2.5, 2.2, 2.8)),
        result("bid-strategy", "aggressive", "2026-10-07", (2.6, 2.2, 3.0),
               (0.1, -0.4, 0.6), 0.7),
        result("bid-strategy", "control", "2026-10-14", (3.0, 2.8, 3.2)),
        result("bid-strategy", "aggressive", "2026-10-14", (3.82, 3.41, 4.25),
               (0.82, 0.41, 1.25), 0.0004, True),
        result("checkout-copy", "control", "2026-10-14", (2.0, 1.8, 2.2)),
        result("checkout-copy", "b", "2026-10-14", (2.05, 1.8, 2.3), (0.05, -0.25, 0.35), 0.41),
        result("onboarding", "control", "2026-10-14", (1.5, 1.3, 1.7), srm_p=2e-05, users=1200),
        result("onboarding", "new", "2026-10-14", (1.6, 1.4, 1.8), (0.1, -0.2, 0.4), 0.5,
               srm_p=2e-05, users=800)])
    warehouse.store(CREDIT_INTERVAL, [
        interval("last_click", "2026-10-01", "search", (0.7, 0.65, 0.75), 7.0),
        interval("last_click", "2026-10-01", "social", (0.3, 0.25, 0.35), 3.0),
        interval("last_click", "2026-10-02", "search", (0.688, 0.66, 0.71), 11.0),
        interval("last_click", "2026-10-02", "organic", (0.312, 0.298, 0.327), 5.0),
        interval("linear", "2026-10-02", "social", (1.0, 1.0, 1.0), 4.0)])
    warehouse.store(CONTROL_DECISION, [
        decision("d1", "cut-low-roi", "meta-prospecting", "executed", "2026-10-03T06:00:00Z"),
        decision("d2", "cut-low-roi", "gs-generic", "blocked", "2026-10-04T06:00:00Z",
                 blocked_by="max_change_per_week_percent"),
        decision("d3", "scale-gpu", "ranking-pool", "awaiting_approval",
                 "2026-10-05T06:00:00Z", mode="approval", action="scale"),
        decision("d4", "cut-low-roi", "dv360-awareness", "executed", "2026-10-02T06:00:00Z",
                 reason="=HYPERLINK(\"http://x\")")])
    warehouse.store(CONTROL_ACTION, [
        declared(CONTROL_ACTION, action_id="a1", decision_id="d1", executor="webhook",
                 status="succeeded", attempts=2, response="200 OK",
                 executed_at="2026-10-03T06:00:05Z", verify_after="2026-10-05T06:00:05Z"),
        declared(CONTROL_ACTION, action_id="a4", decision_id="d4", executor="webhook",
                 status="failed", attempts=3, response="503 Service Unavailable",
                 executed_at="2026-10-02T06:00:09Z", verify_after="2026-10-04T06:00:09Z")])
    warehouse.store(CONTROL_VERIFICATION, [
        declared(CONTROL_VERIFICATION, action_id="a1", status="success", baseline=1.5,
                 observed=1.68, change_percent=12.0, reason="cut-low-roi: verified",
                 verified_at="2026-10-05T07:00:00Z")])
    return warehouse


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


def test_pages_show_the_cells(url: str, loop: Warehouse) -> None:  # noqa: F811
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


def test_csv_exports(url: str, loop: Warehouse) -> None:  # noqa: F811
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
