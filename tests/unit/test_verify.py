"""`seedance verify`: the warehouse's ties (udfs/reconcile/conservation.py) hold on consistent
tables, and each kind of break is found with its key, stored beside the billing drift, alerted once
and resolved once repaired."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.cli import main
from pipelines.store.warehouse import Warehouse
from schemas import rows
from udfs.reconcile import conservation

DAY = "2026-10-03"
END_MS = 1_791_072_000_000 - 1  # 2026-10-03 23:59:59.999 UTC


def credit(model: str, order: str, index: int, channel: str, campaign: str, share: float,
           revenue: float) -> tuple[object, ...]:
    values = {"model": model, "order_id": order, "touch_index": index, "user_id": "u",
              "conversion_ts_ms": END_MS - 1000, "conversion_date": DAY, "channel": channel,
              "campaign": campaign, "touch_ts_ms": END_MS - 5000, "credit": share,
              "revenue": revenue, "currency": "USD", "stage": "new"}
    return tuple(values[name] for name in rows.ATTRIBUTION_CREDITS.names)


def roi(model: str, dimension: str, key: str, conversions: float, revenue: float,
        spend: float, compute: float) -> tuple[object, ...]:
    cost = spend + compute
    return (model, DAY, dimension, key, conversions, revenue, spend, compute,
            revenue / cost if cost else None, "USD", None, None)


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    """One order of 100.0 over two touches (search, then display), 30 of display spend and
    10 of a campaign nobody credited, a 4.0 GPU call on the order's trace and 1.0 idle:
    fully loaded, 5.0 of compute on the order."""
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    with Warehouse(url) as wh:
        wh.store(rows.ATTRIBUTION_CREDITS, [
            credit("last_click", "o1", 0, "search", "brand", 0.0, 0.0),
            credit("last_click", "o1", 1, "display", "retarget", 1.0, 100.0)])
        wh.store(rows.CONVERSIONS_TABLE, [("o1", "u", END_MS - 1000, DAY, 100.0, "USD", "new",
                                           2)])
        wh.store(rows.ROI_DAILY, [
            roi("last_click", dim, key, c, r, s, k) for dim, key, c, r, s, k in (
                ("channel", "search", 0.0, 0.0, 0.0, 0.0),
                ("channel", "display", 1.0, 100.0, 30.0, 5.0),
                ("campaign", "brand", 0.0, 0.0, 0.0, 0.0),
                ("campaign", "retarget", 1.0, 100.0, 30.0, 5.0),
                ("stage", "new", 1.0, 100.0, 30.0, 5.0))])
        wh.store(rows.ROI_UNALLOCATED, [("last_click", DAY, "ad_spend", "ghost", 10.0, "USD")])
        wh.store(rows.AD_SPEND, [("google_ads", "1", "retarget", DAY, 30.0, "USD"),
                                 ("meta", "2", "ghost", DAY, 10.0, "USD")])
        wh.store(rows.GPU_CALL_COST, [("GPU-1", END_MS - 10, "t1", "s1", END_MS - 10_010,
                                       "A100", "ranker", "p", "ns", "u", 2.0, 4.0, 5.0, True)])
        wh.store(rows.GPU_IDLE_COST, [("GPU-1", END_MS - 10, END_MS - 10_010, "A100", 0.5,
                                       1.0, 5.0, True)])
    return url


def test_consistent_tables_tie_out(warehouse: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--warehouse", warehouse]) == 0
    out = capsys.readouterr().out
    assert ", 0 broken" in out
    with Warehouse(warehouse) as wh:
        stored = wh.query("SELECT metric, status FROM reconciliation_daily WHERE scope = "
                          "'internal'")
        assert {m for m, _ in stored} == {"revenue", "conversions", "order_revenue", "spend",
                                          "compute_cost", "gpu_cost"}
        assert {s for _, s in stored} == {"ok"}
        assert wh.query("SELECT COUNT(*) FROM alerts") == [(0,)]


@pytest.mark.parametrize("mutation,metrics,entity", [
    ("UPDATE roi_daily SET revenue = 99.0 WHERE dimension = 'channel' AND key = 'display'",
     ["revenue"], "last_click/channel"),
    # a dimension's rows missing: its conversions and revenue both break
    ("DELETE FROM roi_daily WHERE dimension = 'stage'", ["conversions", "revenue"],
     "last_click/stage"),
    ("DELETE FROM roi_unallocated", ["spend"], "last_click/ghost"),
    # a refund that reached the order but not its credits
    ("UPDATE conversions SET revenue = 0.0", ["order_revenue"], "last_click/orders"),
    ("UPDATE ad_spend SET amount = 31.0 WHERE campaign = 'retarget'", ["spend"],
     "last_click/retarget"),
    ("UPDATE roi_daily SET compute_cost = 3.0 WHERE dimension = 'campaign' AND "
     "key = 'retarget'", ["compute_cost"], "last_click"),
    ("UPDATE gpu_idle_costs SET interval_cost_usd = 5.5", ["gpu_cost"], "GPU-1"),
])
def test_each_break_is_named_stored_and_alerted_until_repaired(
        warehouse: str, capsys: pytest.CaptureFixture[str], mutation: str,
        metrics: list[str], entity: str) -> None:
    with Warehouse(warehouse) as wh:
        wh.execute(mutation)
    assert main(["verify", "--warehouse", warehouse]) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "BREAK" in line]
    assert sorted(line.split()[1] for line in lines) == metrics
    assert all(entity in line for line in lines)
    with Warehouse(warehouse) as wh:
        assert wh.query("SELECT metric, entity FROM reconciliation_daily WHERE status = "
                        "'breach' ORDER BY metric") == [(m, entity) for m in metrics]
        assert wh.query("SELECT kind, metric FROM alerts ORDER BY metric") == \
            [("open", m) for m in metrics]
    # a second run raises nothing new
    assert main(["verify", "--warehouse", warehouse]) == 1
    with Warehouse(warehouse) as wh:
        assert wh.query("SELECT COUNT(*) FROM alerts") == [(len(metrics),)]


def test_a_repaired_break_resolves_its_alert(warehouse: str) -> None:
    with Warehouse(warehouse) as wh:
        wh.execute("UPDATE roi_daily SET revenue = 99.0 WHERE key = 'display'")
    assert main(["verify", "--warehouse", warehouse, "--first", DAY, "--last", DAY]) == 1
    with Warehouse(warehouse) as wh:
        wh.execute("UPDATE roi_daily SET revenue = 100.0 WHERE key = 'display'")
    assert main(["verify", "--warehouse", warehouse]) == 0
    with Warehouse(warehouse) as wh:
        assert sorted(wh.query("SELECT kind FROM alerts")) == [("open",), ("resolve",)]


def test_direct_compute_ties_to_the_calls_alone(warehouse: str) -> None:
    from pipelines.store.verify import internal_ties

    with Warehouse(warehouse) as wh:
        loaded = [c for c in internal_ties(wh, "USD") if c.key.metric == "compute_cost"]
        direct = [c for c in internal_ties(wh, "USD", fully_loaded=False)
                  if c.key.metric == "compute_cost"]
    assert [(c.ours, c.theirs, c.status) for c in loaded] == [(5.0, 5.0, "ok")]
    # 5.0 in ROI against a bill of 4.0 of calls: idle cost where direct compute has none
    assert [(c.ours, c.theirs, c.status) for c in direct] == [(5.0, 4.0, "breach")]


def test_a_difference_under_half_a_cent_ties() -> None:
    ok = conservation.tie(conservation.REVENUE, "m/channel", DAY, 100.004, 100.0, "USD")
    broken = conservation.tie(conservation.REVENUE, "m/channel", DAY, 100.006, 100.0, "USD")
    missing = conservation.tie(conservation.REVENUE, "m/channel", DAY, None, 12.0, "USD")
    assert [c.status for c in (ok, broken, missing)] == ["ok", "breach", "breach"]


def test_bad_days_are_one_line_errors(warehouse: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--warehouse", warehouse, "--first", "2026-13-01"]) == 2
    assert "--first" in capsys.readouterr().err


def test_the_dashboard_shows_the_internal_ties_beside_the_billing_drift(warehouse: str) -> None:
    from pipelines.dashboard.filters import Filters
    from pipelines.dashboard.queries import build_view

    with Warehouse(warehouse) as wh:
        wh.execute("UPDATE roi_daily SET revenue = 99.0 WHERE key = 'display'")
    assert main(["verify", "--warehouse", warehouse]) == 1
    with Warehouse(warehouse) as wh:
        view = build_view(wh, "reconciliation", Filters())
        internal = view.table("recon_internal").rows
        assert {r[1] for r in internal} == {"internal"} and len(internal) > 5
        assert [(r[4], r[5]) for r in view.table("recon_breaches").rows] == [
            ("last_click/channel", "revenue")]
        assert {k.name: k.value for k in view.kpis}["kpi_internal_broken"] == 1
        assert view.table("recon_rows").rows == []  # no billing comparison in this warehouse


DAY2 = "2026-10-04"
END2_MS = END_MS + 86_400_000
WINDOW_MS = 31 * 86_400_000


def fill_next_day(url: str, closed: list[tuple[str, str]]) -> None:
    """The stream still filling the warehouse: DAY2's credit of 50.0, its 20.0 of spend and
    a 3.0 GPU call loaded before the ROI job reported the day; `closed`: the (day, part)
    markers the ROI job wrote."""
    names = rows.ATTRIBUTION_CREDITS.names
    values = {**dict(zip(names, credit("last_click", "o2", 0, "display", "retarget", 1.0,
                                       50.0), strict=True)),
              "conversion_ts_ms": END2_MS - 1000, "conversion_date": DAY2,
              "touch_ts_ms": END2_MS - 5000}
    with Warehouse(url) as wh:
        wh.store(rows.ATTRIBUTION_CREDITS, [tuple(values[name] for name in names)])
        wh.store(rows.AD_SPEND, [("google_ads", "1", "retarget", DAY2, 20.0, "USD")])
        wh.store(rows.GPU_CALL_COST, [("GPU-1", END2_MS - 10, "t2", "s2", END2_MS - 10_010,
                                       "A100", "ranker", "p", "ns", "u", 2.0, 3.0, 3.0, True)])
        wh.store(rows.ROI_DAY_CLOSED, [
            (day, part, (END_MS if day == DAY else END2_MS)
             + (WINDOW_MS if part == "compute" else 0)) for day, part in closed])


def test_days_the_roi_job_has_not_closed_are_open_not_broken(
        warehouse: str, capsys: pytest.CaptureFixture[str]) -> None:
    fill_next_day(warehouse, [(DAY, "rows"), (DAY, "compute")])
    assert main(["verify", "--warehouse", warehouse]) == 0
    out = capsys.readouterr().out
    assert ", 0 broken, " in out and " open" in out and "BREAK" not in out
    opened = [line.split(None, 1)[1] for line in out.splitlines() if "OPEN" in line]
    assert len(opened) == 2
    assert opened[0].startswith("compute waits") and "closed through 2026-10-03" in opened[0]
    assert opened[1].startswith(f"{DAY2} not closed by the ROI job yet")
    with Warehouse(warehouse) as wh:
        assert wh.query("SELECT COUNT(*) FROM alerts") == [(0,)]
        stored = wh.query("SELECT DISTINCT day, metric FROM reconciliation_daily")
        assert {day for day, _ in stored} == {DAY, DAY2}  # DAY2's GPU tie is the GPU job's
        assert {m for day, m in stored if day == DAY2} == {"gpu_cost"}
        assert "compute_cost" not in {m for _, m in stored}
        # a break on a closed day still is one
        wh.execute("UPDATE roi_daily SET revenue = 99.0 WHERE key = 'display'")
    assert main(["verify", "--warehouse", warehouse]) == 1
    assert [line.split()[1:4] for line in capsys.readouterr().out.splitlines()
            if "BREAK" in line] == [["revenue", "last_click/channel", DAY]]


def test_a_closed_day_is_judged_and_compute_once_every_day_has_its_own(
        warehouse: str, capsys: pytest.CaptureFixture[str]) -> None:
    fill_next_day(warehouse, [(DAY, "compute"), (DAY2, "rows")])
    assert main(["verify", "--warehouse", warehouse]) == 1
    out = capsys.readouterr().out
    # DAY2's report is missing: its revenue, conversions and spend break
    assert sorted((line.split()[1], line.split()[3]) for line in out.splitlines()
                  if "BREAK" in line) == [("conversions", DAY2)] * 3 + [
        ("revenue", DAY2)] * 3 + [("spend", DAY2)]
    assert [line for line in out.splitlines() if "OPEN" in line][0].split()[1] == "compute"
    fill_next_day(warehouse, [(DAY2, "compute")])
    main(["verify", "--warehouse", warehouse])
    out = capsys.readouterr().out
    assert "OPEN" not in out and "compute_cost" in out  # DAY2's 3.0 is in no ROI row


def test_a_warehouse_without_closed_days_is_checked_as_before(
        warehouse: str, capsys: pytest.CaptureFixture[str]) -> None:
    fill_next_day(warehouse, [])
    assert main(["verify", "--warehouse", warehouse]) == 1
    out = capsys.readouterr().out
    assert "no closed days recorded" in out and "every day is checked as closed" in out
    assert {line.split()[3] for line in out.splitlines() if "BREAK" in line} == {DAY2, "*"}
    with Warehouse(warehouse) as wh:
        alerts = wh.query("SELECT COUNT(*) FROM alerts WHERE kind = 'open'")
    # once the job records closed days, the open day's alerts wait for its close
    fill_next_day(warehouse, [(DAY, "compute")])
    assert main(["verify", "--warehouse", warehouse]) == 0
    with Warehouse(warehouse) as wh:
        assert wh.query("SELECT COUNT(*) FROM alerts WHERE kind = 'open'") == alerts
        assert wh.query("SELECT COUNT(*) FROM alerts WHERE kind = 'resolve'") == [(0,)]
