"""`seedance verify`: the warehouse's ties (udfs/conservation.py) hold on consistent tables,
and each kind of break is found with its key, stored beside the billing drift, alerted once
and resolved once repaired."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.cli import main
from pipelines.store.warehouse import Warehouse
from schemas import rows
from udfs import conservation

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
        assert {m for m, _ in stored} == {"revenue", "conversions", "spend", "compute_cost",
                                          "gpu_cost"}
        assert {s for _, s in stored} == {"ok"}
        assert wh.query("SELECT COUNT(*) FROM alerts") == [(0,)]


@pytest.mark.parametrize("mutation,metrics,entity", [
    ("UPDATE roi_daily SET revenue = 99.0 WHERE dimension = 'channel' AND key = 'display'",
     ["revenue"], "last_click/channel"),
    # a dimension's rows missing: its conversions and revenue both break
    ("DELETE FROM roi_daily WHERE dimension = 'stage'", ["conversions", "revenue"],
     "last_click/stage"),
    ("DELETE FROM roi_unallocated", ["spend"], "last_click/ghost"),
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
